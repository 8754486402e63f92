package docker

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/session"
	"github.com/a55dbaac/berth/terminal"
	"github.com/moby/moby/client"
)

// TestTimeoutRestoresPidBaseline: a timed-out `sleep 1000 & sleep 1000`
// leaves no process behind inside the container, and the container's
// process count returns to what it was before the command.
func testTimeoutRestoresPidBaseline(t *testing.T) {
	b := newBackend(t, testOptions(t, nil))
	env := terminal.New(b, terminal.Options{SpillDir: t.TempDir(), Session: session.Options{Grace: time.Second}})
	defer env.Close(context.Background())
	ctx := context.Background()
	// Counting from a second process (not the session's shell) sees the
	// container as a whole; the count excludes the counting script itself.
	count := `n=0; for d in /proc/[0-9]*; do [ -r "$d/stat" ] && n=$((n+1)); done; echo $((n-1))`
	if r := env.Run(ctx, terminal.Request{Command: "true"}); r.ExitCode != 0 {
		t.Fatalf("warm-up: %+v", r)
	}
	before, _ := run(t, b, count)
	r := env.Run(ctx, terminal.Request{Command: "sleep 1000 & sleep 1000", Timeout: 1})
	if r.ExitCode != 124 {
		t.Fatalf("timeout: %+v", r)
	}
	// The session restarts its shell on the next command, as before.
	if r := env.Run(ctx, terminal.Request{Command: "true"}); r.ExitCode != 0 {
		t.Fatalf("after timeout: %+v", r)
	}
	after, _ := run(t, b, count)
	if strings.TrimSpace(after) != strings.TrimSpace(before) {
		t.Fatalf("process count %s before, %s after the timed-out command", strings.TrimSpace(before), strings.TrimSpace(after))
	}
	left, _ := run(t, b, `for f in /proc/[0-9]*/cmdline; do tr '\000' ' ' <"$f"; echo; done 2>/dev/null | grep -c '^sleep 1000' || true`)
	if strings.TrimSpace(left) != "0" {
		t.Fatalf("%s 'sleep 1000' processes still in the container", strings.TrimSpace(left))
	}
}

// TestConcurrentFirstCallsOneContainer: 20 concurrent first calls for one
// key through the manager and the registry create exactly one container.
func testConcurrentFirstCallsOneContainer(t *testing.T) {
	opts := testOptions(t, nil)
	cfg := &config.Config{Home: t.TempDir(), Terminal: opts.Config, MaxOutputChars: 50000}
	m := manager.New(cfg, nil)
	defer m.CloseAll(context.Background())
	key := opts.Key
	var wg sync.WaitGroup
	outs := make([]terminal.Result, 20)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i] = m.Run(context.Background(), key, terminal.Request{Command: fmt.Sprintf("echo %d", i)})
		}()
	}
	wg.Wait()
	for i, r := range outs {
		if r.Error != nil || r.Output != fmt.Sprint(i) {
			t.Fatalf("call %d: %+v", i, r)
		}
	}
	c := dockerenv.Require(t)
	list, err := c.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", LabelKey+"="+key)})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.Items); n != 1 {
		t.Fatalf("%d containers for key %s, want exactly 1", n, key)
	}
}

var _ backend.Backend = (*Backend)(nil)

// TestEnvironmentRecreatedInResult: after `docker rm -f` of the
// environment's container, the next terminal result runs in a recreated
// container, says environment_recreated, and the session's cwd and
// exported variables are restored; the flag is reported once.
func testEnvironmentRecreatedInResult(t *testing.T) {
	b := newBackend(t, testOptions(t, nil))
	env := terminal.New(b, terminal.Options{SpillDir: t.TempDir(), Session: session.Options{Grace: time.Second}})
	defer env.Close(context.Background())
	ctx := context.Background()
	if r := env.Run(ctx, terminal.Request{Command: "cd /tmp && export KEEP=1"}); r.ExitCode != 0 || r.EnvironmentRecreated {
		t.Fatalf("setup: %+v", r)
	}
	cli := dockerenv.Require(t)
	if _, err := cli.ContainerRemove(ctx, b.ContainerID(), client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	r := env.Run(ctx, terminal.Request{Command: "echo $KEEP; pwd"})
	if r.Error != nil || r.Output != "1\n/tmp" || !r.EnvironmentRecreated {
		t.Fatalf("after docker rm -f: %+v", r)
	}
	if r := env.Run(ctx, terminal.Request{Command: "true"}); r.EnvironmentRecreated {
		t.Fatalf("environment_recreated reported twice")
	}
}
