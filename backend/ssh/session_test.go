package ssh

import (
	"context"
	"strconv"
	"strings"
	"syscall"
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

// testSessionShellKilledBeforeDrop is the other order of the events in
// testSessionSurvivesDroppedConnection: the remote shell dies first (its
// process group is killed on the server, so sshd reports exit-signal KILL
// and closes the channel), and only then does the connection drop. That
// is a command that ended with the shell, not a lost shell: the result is
// exit 137 without an error, and the next command reconnects and finds the
// previous cwd and exported variables. (sshenv.DropConnections once killed
// shells before their sshd, and produced this order now and then.)
func testSessionShellKilledBeforeDrop(t *testing.T) {
	s := sshenv.Start(t)
	b := newTestBackend(t, testOptions(s, nil))
	env := terminal.New(b, terminal.Options{SpillDir: t.TempDir(), Session: session.Options{Grace: time.Second}})
	defer env.Close(context.Background())
	ctx := context.Background()
	r := env.Run(ctx, terminal.Request{Command: "mkdir -p /tmp/berth-ssh-kill && cd /tmp/berth-ssh-kill && export KEPT='across kill' && echo $$"})
	if r.Error != nil || r.ExitCode != 0 {
		t.Fatalf("setup: %+v", r)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(r.Output))
	if err != nil {
		t.Fatalf("shell pid %q: %v", r.Output, err)
	}
	done := make(chan terminal.Result, 1)
	go func() { done <- env.Run(ctx, terminal.Request{Command: "echo started; sleep 30", Timeout: 60}) }()
	time.Sleep(500 * time.Millisecond)
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil { // sshd made the shell a group leader
		t.Fatalf("kill the remote shell's group %d: %v", pid, err)
	}
	select {
	case r = <-done:
		if r.Error != nil || r.ExitCode != 137 {
			t.Fatalf("command whose shell was killed: %+v, want exit 137 and no error", r)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("command whose shell was killed did not return")
	}
	s.DropConnections(t)
	r = env.Run(ctx, terminal.Request{Command: "echo \"$KEPT\"; pwd"})
	if r.Error != nil || r.Output != "across kill\n/tmp/berth-ssh-kill" {
		t.Fatalf("after the kill and the drop: %+v", r)
	}
	env.Run(ctx, terminal.Request{Command: "cd / && rm -rf /tmp/berth-ssh-kill"})
}
