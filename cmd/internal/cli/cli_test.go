package cli

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/creack/pty"

	"github.com/a55dbaac/berth/terminal"
)

// TestIsTerminal: /dev/null is a character device but no terminal (agents
// give it as stdin, and must not be taken for a human); a pty is one.
func TestIsTerminal(t *testing.T) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if IsTerminal(null) {
		t.Error("IsTerminal(/dev/null) = true")
	}
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	defer tty.Close()
	if !IsTerminal(tty) {
		t.Error("IsTerminal(pty) = false")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if IsTerminal(r) {
		t.Error("IsTerminal(pipe) = true")
	}
}

// TestInputsSendOnlyConfiguration (N8): what berth sends the daemon with a
// call holds the variables configuration loading reads, and only the
// names of the others: a provider key in the caller's environment does
// not leave it unless the daemon asks for it.
func TestInputsSendOnlyConfiguration(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-proj-CALLERSECRET")
	t.Setenv("TERMINAL_ENV", "local")
	t.Setenv("BERTH_APPROVALS_MODE", "manual")
	t.Setenv("BERTH_TOKEN", "berthtok-SECRET")
	in, err := (&Flags{Backend: "docker"}).Inputs()
	if err != nil {
		t.Fatal(err)
	}
	sent := map[string]bool{}
	for _, kv := range in.Env {
		k, _, _ := strings.Cut(kv, "=")
		sent[k] = true
		if strings.Contains(kv, "SECRET") {
			t.Errorf("sent %s", kv)
		}
	}
	for _, k := range []string{"TERMINAL_ENV", "BERTH_APPROVALS_MODE", "HOME"} {
		if !sent[k] {
			t.Errorf("%s not sent; configuration loading reads it", k)
		}
	}
	if !slices.Contains(in.Names, "OPENAI_API_KEY") || !slices.Contains(in.Names, "BERTH_TOKEN") {
		t.Errorf("names %q lack the variables not sent", in.Names)
	}
	if in.Flags["backend"] != "docker" || in.Cwd == "" {
		t.Errorf("inputs %+v", in)
	}
}

// TestStatusErrorIsTerminals: the front's failure status is the engine's.
func TestStatusErrorIsTerminals(t *testing.T) {
	if StatusError != terminal.StatusError {
		t.Fatalf("cli.StatusError %d, terminal.StatusError %d", StatusError, terminal.StatusError)
	}
}
