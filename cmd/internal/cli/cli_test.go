package cli

import (
	"os"
	"reflect"
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

// TestTable: every field of Flags is a row of the table (Table panics on
// a tag it cannot read), under its own name.
func TestTable(t *testing.T) {
	rows := Table("k", "local")
	if len(rows) != reflect.TypeFor[Flags]().NumField() {
		t.Fatalf("%d rows for %d fields", len(rows), reflect.TypeFor[Flags]().NumField())
	}
	seen := map[string]bool{}
	var f Flags
	fields := map[any]bool{}
	for _, fl := range rows {
		if seen[fl.Name] {
			t.Errorf("--%s twice", fl.Name)
		}
		seen[fl.Name] = true
		p := fl.Field(&f)
		if fields[p] {
			t.Errorf("--%s shares a field", fl.Name)
		}
		fields[p] = true
	}
	if fl := rows[slices.IndexFunc(rows, func(fl Flag) bool { return fl.Name == "no-daemon" })]; !strings.Contains(fl.Usage, NoDaemonEnv+"=1") {
		t.Errorf("--no-daemon's help %q does not name %s", fl.Usage, NoDaemonEnv)
	}
}

// TestParseExecFillsTheFields: each flag lands in the field it names (the
// parsers' common source cannot check itself).
func TestParseExecFillsTheFields(t *testing.T) {
	f, command, ok := ParseExec([]string{"--config", "/c.yaml", "--backend", "docker", "--task", "t",
		"--timeout", "5", "--workdir", "/w", "--json", "--no-daemon", "--", "make", "all"})
	want := Flags{ConfigPath: "/c.yaml", Backend: "docker", Task: "t", Timeout: 5, Workdir: "/w", JSON: true, NoDaemon: true}
	if !ok || f != want || strings.Join(command, " ") != "make all" {
		t.Fatalf("ParseExec = %+v, %q, %v; want %+v, [make all], true", f, command, ok, want)
	}
}
