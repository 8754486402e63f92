package manager_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

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
