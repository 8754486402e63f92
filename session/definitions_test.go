package session_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/session"
)

// TestDefinitionsSnapshot: after a command that defines functions and
// aliases, the session knows their definitions (for the approval gate,
// which checks a later call by what it runs), and not those of berth's
// own helpers; a redefinition replaces them, unset and unalias drop them.
func TestDefinitionsSnapshot(t *testing.T) {
	s := session.New(newLocal(t, t.TempDir()), session.Options{Grace: 500 * time.Millisecond})
	t.Cleanup(func() { s.Close() })
	run := func(cmd string) {
		t.Helper()
		if _, err := s.Run(context.Background(), session.Request{Command: cmd}, io.Discard); err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
	}
	run(`f() { echo fn-$1; }; alias hi='echo hi-alias'`)
	defs := s.Definitions()
	for _, want := range []string{"f ()", "echo fn-$1", "alias hi='echo hi-alias'"} {
		if !strings.Contains(defs, want) {
			t.Errorf("definitions lack %q:\n%s", want, defs)
		}
	}
	if strings.Contains(defs, "__berth_") {
		t.Errorf("definitions hold berth's own helpers:\n%s", defs)
	}
	run(`f() { echo other; }; unalias hi`)
	defs = s.Definitions()
	if !strings.Contains(defs, "echo other") || strings.Contains(defs, "fn-$1") || strings.Contains(defs, "alias hi") {
		t.Errorf("after a redefinition and unalias:\n%s", defs)
	}
}
