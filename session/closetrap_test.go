package session_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/a55dbaac/berth/session"
)

// TestCloseLetsTheExitTrapFinish: closing a session sends TERM to what
// runs in it and gives it the grace to end; what the shell's EXIT trap
// starts in answer (a cleanup) is not sent TERM in turn, so the trap runs
// to its end. Its first step, a sleep, would otherwise die of the TERM and
// the rm after it never run.
func TestCloseLetsTheExitTrapFinish(t *testing.T) {
	work := t.TempDir()
	dir := filepath.Join(work, "scratch")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := session.New(newLocal(t, work), session.Options{Grace: 20 * time.Second})
	t.Cleanup(func() { s.Close() })
	cmd := "trap 'sleep 0.5 && rm -rf " + dir + "' EXIT"
	if res, err := s.Run(context.Background(), session.Request{Command: cmd}, io.Discard); err != nil || res.ExitCode != 0 {
		t.Fatalf("%s: %v %+v", cmd, err, res)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("%s still exists after Close: the EXIT trap did not run to its end", dir)
	}
}
