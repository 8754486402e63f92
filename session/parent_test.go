package session_test

import (
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/session"
)

// TestShellParentOncePerShell: the shell's parent is looked up once for a
// shell and kept (its $PPID is fixed when it starts), looked up again for
// the next shell after one ended, and never asked for when no shell runs.
func TestShellParentOncePerShell(t *testing.T) {
	s := session.New(newLocal(t, t.TempDir()), session.Options{Grace: 300 * time.Millisecond})
	defer s.Close()
	var asked []string
	lookup := func(pid string) string {
		asked = append(asked, pid)
		return "parent-of-" + pid
	}
	if got := s.ShellParent(lookup); got != "" || len(asked) != 0 {
		t.Fatalf("before any shell: %q, lookups %q; want \"\" and none", got, asked)
	}
	out, _ := runOut(t, s, session.Request{Command: "echo $$"})
	first := strings.TrimSpace(out)
	for range 3 {
		if got := s.ShellParent(lookup); got != "parent-of-"+first {
			t.Fatalf("shell %s: parent %q, want parent-of-%s", first, got, first)
		}
	}
	if len(asked) != 1 || asked[0] != first {
		t.Fatalf("three questions about shell %s: lookups %q, want one, of %s", first, asked, first)
	}
	runOut(t, s, session.Request{Command: "exit 0"})
	out, _ = runOut(t, s, session.Request{Command: "echo $$"})
	second := strings.TrimSpace(out)
	if second == first {
		t.Fatalf("the shell did not change after exit (pid %s)", first)
	}
	if got := s.ShellParent(lookup); got != "parent-of-"+second || len(asked) != 2 || asked[1] != second {
		t.Fatalf("new shell %s: parent %q, lookups %q; want parent-of-%s, looked up for it", second, got, asked, second)
	}
}
