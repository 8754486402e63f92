package ssh

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/internal/testenv/sshenv"
	"github.com/a55dbaac/berth/session"
	"github.com/a55dbaac/berth/terminal"
)

// TestSessionSurvivesDroppedConnection: the connection is killed while a
// command runs; that command returns a clear error promptly (not a hang),
// and the next command reconnects and finds the previous cwd and exported
// variables.
func testSessionSurvivesDroppedConnection(t *testing.T) {
	s := sshenv.Start(t)
	b := newTestBackend(t, testOptions(s, nil))
	env := terminal.New(b, terminal.Options{SpillDir: t.TempDir(), Session: session.Options{Grace: time.Second}})
	defer env.Close(context.Background())
	ctx := context.Background()
	if r := env.Run(ctx, terminal.Request{Command: "mkdir -p /tmp/berth-ssh-drop && cd /tmp/berth-ssh-drop && export KEPT='across drop'"}); r.Error != nil || r.ExitCode != 0 {
		t.Fatalf("setup: %+v", r)
	}
	done := make(chan terminal.Result, 1)
	go func() { done <- env.Run(ctx, terminal.Request{Command: "echo started; sleep 30", Timeout: 60}) }()
	time.Sleep(500 * time.Millisecond)
	s.DropConnections(t)
	select {
	case r := <-done:
		if r.Error == nil || !strings.Contains(*r.Error, "lost the shell") {
			t.Fatalf("command cut off by the drop: %+v, want an error saying the shell was lost", r)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("command running when the connection dropped did not return")
	}
	r := env.Run(ctx, terminal.Request{Command: "echo \"$KEPT\"; pwd"})
	if r.Error != nil || r.Output != "across drop\n/tmp/berth-ssh-drop" {
		t.Fatalf("after reconnect: %+v", r)
	}
	env.Run(ctx, terminal.Request{Command: "cd / && rm -rf /tmp/berth-ssh-drop"})
}
