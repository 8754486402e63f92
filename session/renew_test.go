package session_test

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/session"
)

// renewing is a backend that reports a carry-over (backend.Renewer) when
// armed, as one whose environment reached the end of its lifetime would.
type renewing struct {
	backend.Backend
	armed atomic.Bool
	calls atomic.Int32
}

func (r *renewing) Renew(context.Context) bool {
	r.calls.Add(1)
	return r.armed.Swap(false)
}

// TestRenewRestartsShellWithState: after the backend carried its
// environment over, the next command runs in a new shell with the cwd and
// exported variables of the old one; without a carry-over the shell stays.
func TestRenewRestartsShellWithState(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	be := &renewing{Backend: newLocal(t, dir)}
	s := session.New(be, session.Options{Grace: 300 * time.Millisecond})
	defer s.Close()
	runOut(t, s, session.Request{Command: "cd sub && export R=kept"})
	first := s.ShellPID()
	if out, _ := runOut(t, s, session.Request{Command: "echo $R"}); out != "kept\n" || s.ShellPID() != first {
		t.Fatalf("without a carry-over: %q in shell %s (was %s); want the same shell", out, s.ShellPID(), first)
	}
	be.armed.Store(true)
	out, r := runOut(t, s, session.Request{Command: "echo $R; pwd"})
	if out != "kept\n"+sub+"\n" || r.ExitCode != 0 {
		t.Fatalf("after a carry-over: %q exit %d; want the exported variable and cwd restored", out, r.ExitCode)
	}
	if s.ShellPID() == first || s.Starts() != 2 {
		t.Fatalf("after a carry-over the shell is %s (was %s), %d shells started; want a new one", s.ShellPID(), first, s.Starts())
	}
	if be.calls.Load() < 3 {
		t.Fatalf("Renew asked %d times for 3 commands", be.calls.Load())
	}
}
