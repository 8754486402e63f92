package docker

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/procmark"
	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// deadOwner returns the owner label of a process that has exited.
func deadOwner(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	label := procmark.Of(cmd.Process.Pid)
	cmd.Process.Kill()
	cmd.Wait()
	if label == "" {
		t.Fatal("no owner label for a live process")
	}
	return label
}

// TestCrashedOwnersContainersCleaned: containers left running by a berth
// that died without cleaning up are removed (throwaway) or stopped with
// their volumes kept (persistent) when the next backend starts.
func testCrashedOwnersContainersCleaned(t *testing.T) {
	cli := dockerenv.Require(t)
	ctx := context.Background()
	dead := deadOwner(t)
	saved := currentOwner
	currentOwner = func() string { return dead }
	throwaway := testOptions(t, nil)
	persistent := testOptions(t, func(c *config.Terminal) { c.ContainerPersistent = true })
	var ids []string
	for _, opts := range []struct {
		name string
		cfg  func() *Backend
	}{
		{"throwaway", func() *Backend { b, err := New(ctx, throwaway); must(t, err); return b }},
		{"persistent", func() *Backend { b, err := New(ctx, persistent); must(t, err); return b }},
	} {
		b := opts.cfg()
		if out, code := run(t, b, "true"); code != 0 {
			t.Fatalf("%s: %q", opts.name, out)
		}
		ids = append(ids, b.ContainerID())
		// No Close: the owner "crashed".
	}
	currentOwner = saved

	forgetCleanUp()
	next := newBackend(t, testOptions(t, nil)) // the first construction per daemon cleans up
	_ = next
	if _, err := cli.ContainerInspect(ctx, ids[0], client.ContainerInspectOptions{}); err == nil {
		t.Errorf("throwaway container of the dead owner still exists")
	}
	ins, err := cli.ContainerInspect(ctx, ids[1], client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("persistent container of the dead owner was removed: %v", err)
	}
	if ins.Container.State.Status != container.StateExited {
		t.Errorf("persistent container of the dead owner is %s, want exited", ins.Container.State.Status)
	}
	// Reattaching the persistent key starts it again.
	b, err := New(ctx, persistent)
	must(t, err)
	defer b.Close(context.Background())
	deadline := time.Now().Add(30 * time.Second)
	for {
		if out, code := run(t, b, "echo back"); code == 0 && out == "back\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("persistent environment not usable after the cleanup")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// forgetCleanUp lets the next New clean up again, as a new berth process
// would.
func forgetCleanUp() {
	cleanedMu.Lock()
	defer cleanedMu.Unlock()
	clear(cleaned)
}
