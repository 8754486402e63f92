package session_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
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

// TestIFSReported: the session knows IFS in its shell (for the approval
// gate, which splits an unquoted value in command position at it): the
// default before and at start, what a command set (any bytes, a multibyte
// character), the default again once unset, and the definitions of the
// same snapshot are still read whole after it.
func TestIFSReported(t *testing.T) {
	t.Run("bash", func(t *testing.T) { testIFSReported(t, newLocal(t, t.TempDir()), true) })
	t.Run("sh", func(t *testing.T) { testIFSReported(t, noBash{newLocal(t, t.TempDir())}, false) })
}

func testIFSReported(t *testing.T, be backend.Backend, bash bool) {
	s := session.New(be, session.Options{Grace: 500 * time.Millisecond})
	t.Cleanup(func() { s.Close() })
	check := func(when, want string) {
		t.Helper()
		got, ok := s.IFS()
		if !ok || got != want {
			t.Errorf("%s: IFS %q (known %v), want %q", when, got, ok, want)
		}
	}
	check("before the shell starts", " \t\n")
	for _, c := range []struct{ cmd, want string }{
		{"true", " \t\n"},
		{"IFS=,", ","},
		{"IFS=$(printf '\\001:\\303\\251'); g() { :; }", "\x01:é"},
		{"unset IFS", " \t\n"},
		{"IFS=", ""},
	} {
		if _, err := s.Run(context.Background(), session.Request{Command: c.cmd}, io.Discard); err != nil {
			t.Fatalf("%s: %v", c.cmd, err)
		}
		check("after "+c.cmd, c.want)
	}
	if bash && !strings.Contains(s.Definitions(), "g ()") {
		t.Errorf("definitions after a snapshot with an odd IFS: %q", s.Definitions())
	}
}
