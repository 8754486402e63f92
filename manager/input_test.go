package manager_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/approval"
	"github.com/a55dbaac/berth/process"
	"github.com/a55dbaac/berth/terminal"
)

// startInput starts a background process in a manager whose policy lets
// everything but the floor through, and returns a function sending it
// process-tool input.
func startInput(t *testing.T, pty bool) func(action, data string) process.Result {
	t.Helper()
	m, _, _ := setup(t, "approvals:\n  mode: off\ncommand_allowlist: [\"*\"]\n", nil)
	ctx := context.Background()
	st := m.Background(ctx, "k", terminal.Request{Command: "cat >/dev/null", Background: true, PTY: pty})
	if st.Error != nil {
		t.Fatalf("start: %+v", st)
	}
	t.Cleanup(func() { m.Process(ctx, "k", process.Request{Action: "kill", SessionID: st.SessionID}) })
	return func(action, data string) process.Result {
		return m.Process(ctx, "k", process.Request{Action: action, SessionID: st.SessionID, Data: data})
	}
}

func wantFloor(t *testing.T, what string, r process.Result) {
	t.Helper()
	d, _ := r["approval"].(*approval.Decision)
	if r["status"] != "blocked" || d == nil || d.By != approval.ByFloor {
		t.Errorf("%s: %v, want blocked by the floor", what, r)
	}
}

func wantOK(t *testing.T, what string, r process.Result) {
	t.Helper()
	if r["status"] != "ok" {
		t.Errorf("%s: %v, want ok", what, r)
	}
}

// TestInputLineContinuation is N5: a shell joins a line ending in a
// backslash with the next, so rm \ then -rf ~ was one command that was
// checked as two harmless halves.
func TestInputLineContinuation(t *testing.T) {
	do := startInput(t, false)
	wantOK(t, `rm \`, do("submit", `rm \`))
	wantFloor(t, "-rf ~ after rm \\", do("submit", "-rf ~"))
	wantOK(t, `echo a \\ (an escaped backslash ends the line)`, do("submit", `echo a \\`))
	wantOK(t, "ls", do("submit", "ls"))
	wantOK(t, `rm \ then \`, do("write", "rm \\\n-rf \\\n"))
	wantFloor(t, "~ ending three lines", do("submit", "~"))
}

// TestInputCarriesFunctions is N5 (and N3): a function defined on one line
// and called on the next was checked without its body.
func TestInputCarriesFunctions(t *testing.T) {
	do := startInput(t, false)
	wantOK(t, "the definition", do("submit", `f() { rm "$@"; }`))
	wantOK(t, "a harmless call", do("submit", "f notes.txt"))
	wantFloor(t, "f -rf ~", do("submit", "f -rf ~"))
	wantOK(t, "set --", do("submit", "set -- -rf ~"))
	wantFloor(t, `rm "$@" after set --`, do("submit", `rm "$@"`))
}

// TestInputLineEditing is N5: on a terminal DEL, ^H and ^U+^Y turned a
// checked harmless line into rm -rf /. Such input is refused; a lone ^C
// and a ^D on an empty line still go through.
func TestInputLineEditing(t *testing.T) {
	do := startInput(t, true)
	for _, data := range []string{
		"rm -rf /tmp/x" + strings.Repeat("\x7f", 5),
		"rm -rf /tmp/x" + strings.Repeat("\x08", 5),
		"rm -rf /\x15\x19",
		"echo hi\x1b[D\x1b[D",
		"ls\x17",
	} {
		r := do("submit", data)
		if r["status"] != "error" || !strings.Contains(fmt.Sprint(r["error"]), "control character") {
			t.Errorf("submit %q: %v, want refused", data, r)
		}
	}
	wantOK(t, "plain text", do("submit", "echo plain\tand tab"))
	wantOK(t, "^C", do("write", "\x03"))
	wantOK(t, "^D on an empty line", do("write", "\x04"))
	// A tab completes the word before it: /u<TAB> may become /usr/.
	wantFloor(t, "rm -rf /u<TAB>", do("submit", "rm -rf /u\t"))
}

// TestInputKeyBindingsOnATerminal is N5: printable input edited the line
// on a terminal once stty or readline's bind had given printable keys a
// meaning — `stty kill K` made K erase the line typed before it, and bind
// turned zz and yy into rm -rf /. Those settings are refused on a terminal,
// so what berth checks is what the shell reads. The rm is a fake one, first
// in PATH, that only says it ran.
func TestInputKeyBindingsOnATerminal(t *testing.T) {
	fake := t.TempDir()
	if err := os.WriteFile(filepath.Join(fake, "rm"), []byte("#!/bin/sh\necho FAKE rm \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		set, then string
	}{
		{"stty kill", "stty kill K", "echo hiKrm -rf /"},
		{"bind macro", `bind '"zz": "rm -rf /\n"'`, "zz"},
		{"bind -x", `bind -x '"yy": rm -rf /'`, "yy"},
		{"stty eol", "stty eol X", "echo Xrm -rf /"},
		{"stty through a wrapper", "command stty werase K", "echo hi rmK rm -rf /"},
		{"bind from a file", "bind -f ./keys", "zz"},
		{"bind -r", `bind -r "q"`, "rm -rf /q"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _, _ := setup(t, "", nil)
			ctx := context.Background()
			work := t.TempDir()
			if err := os.WriteFile(filepath.Join(work, "keys"), []byte(`"zz": "rm -rf /\n"`+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			st := m.Background(ctx, "k", terminal.Request{Command: "PATH=" + fake + ":$PATH exec bash --norc --noprofile -i", Background: true, PTY: true, Workdir: work})
			if st.Error != nil {
				t.Fatalf("start: %+v", st)
			}
			t.Cleanup(func() { m.Process(ctx, "k", process.Request{Action: "kill", SessionID: st.SessionID}) })
			do := func(action, data string) process.Result {
				return m.Process(ctx, "k", process.Request{Action: action, SessionID: st.SessionID, Data: data})
			}
			// The shell is up once it answers.
			wantOK(t, "echo READY", do("submit", `echo READ""Y`))
			waitOutput(t, do, "READY")
			r := do("submit", tc.set)
			if r["status"] != "error" || !strings.Contains(fmt.Sprint(r["error"]), "edit the line") {
				t.Errorf("submit %q on a terminal: %v; want it refused", tc.set, r)
			}
			do("submit", tc.then)
			wantOK(t, "echo DONE", do("submit", `echo DO""NE`))
			out := waitOutput(t, do, "DONE")
			if strings.Contains(out, "FAKE rm") {
				t.Errorf("after %q and %q the shell ran rm:\n%s", tc.set, tc.then, out)
			}
		})
	}
}

// A process on a terminal cannot be started with such a setting either;
// without a terminal the settings edit nothing and may run.
func TestTerminalStartWithKeyBindings(t *testing.T) {
	m, _, _ := setup(t, "approvals:\n  mode: off\n", nil)
	ctx := context.Background()
	st := m.Background(ctx, "k", terminal.Request{Command: "stty kill K; exec bash --norc -i", Background: true, PTY: true})
	if st.Error == nil || !strings.Contains(*st.Error, "edit the line") {
		t.Errorf("pty start with stty kill K: %+v; want it refused", st)
	}
	st = m.Background(ctx, "k", terminal.Request{Command: "bind -x '\"yy\": true' 2>/dev/null; sleep 30", Background: true})
	if st.Error != nil {
		t.Errorf("start without a pty: %v", *st.Error)
	} else {
		m.Process(ctx, "k", process.Request{Action: "kill", SessionID: st.SessionID})
	}
}

// waitOutput waits until the process's output holds want and returns it.
func waitOutput(t *testing.T, do func(action, data string) process.Result, want string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := do("log", "")
		out := fmt.Sprint(r["output"])
		if strings.Contains(out, want) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the process's output within 30 s:\n%s", want, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
