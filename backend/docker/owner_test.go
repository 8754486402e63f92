package docker

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/procmark"
	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// deadOwner returns the owner label of a process that has exited.
func deadOwner(t testing.TB) string {
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

// withOwner makes the backends built by fn label what they create, and
// claim what they reattach, with owner, then restores this process's mark.
func withOwner(t *testing.T, owner string, fn func()) {
	t.Helper()
	saved := currentOwner
	currentOwner = func() string { return owner }
	defer func() { currentOwner = saved }()
	fn()
}

// claimsOn lists the claim volumes on container id.
func claimsOn(t *testing.T, cli *client.Client, id string) []string {
	t.Helper()
	vols, err := cli.VolumeList(context.Background(), client.VolumeListOptions{
		Filters: make(client.Filters).Add("label", LabelClaim+"="+id),
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range vols.Items {
		names = append(names, v.Name+" (owner "+v.Labels[LabelOwner]+")")
	}
	return names
}

// stoppedPersistentOfDeadCreator returns the options and the container id
// of a persistent environment created by a berth that has exited after
// closing it cleanly (the container is stopped).
func stoppedPersistentOfDeadCreator(t *testing.T) (backend.Options, string) {
	t.Helper()
	opts := testOptions(t, func(c *config.Terminal) { c.ContainerPersistent = true })
	var id string
	withOwner(t, deadOwner(t), func() {
		b, err := New(context.Background(), opts)
		must(t, err)
		id = b.ContainerID()
		must(t, b.Close(context.Background()))
	})
	return opts, id
}

// sweep runs the dead-owner sweep as the next berth process would: by
// constructing a backend.
func sweep(t *testing.T) {
	t.Helper()
	forgetCleanUp()
	newBackend(t, testOptions(t, nil))
}

// testReattachedByLiveBerthSurvivesSweep is the bench defect: a persistent
// container created by a berth that has exited and reattached by a live one
// is not stopped by another berth's sweep, so the shell running in it
// keeps its state. Removing the environment leaves no claim behind.
func testReattachedByLiveBerthSurvivesSweep(t *testing.T) {
	cli := dockerenv.Require(t)
	ctx := context.Background()
	opts, id := stoppedPersistentOfDeadCreator(t)

	b := newBackend(t, opts) // this live process reattaches
	if b.ContainerID() != id {
		t.Fatalf("reattach created %s instead of reattaching %s", b.ContainerID(), id)
	}
	if claims := claimsOn(t, cli, id); len(claims) != 1 || !strings.Contains(claims[0], procmark.Self()) {
		t.Fatalf("claims on the reattached container = %v, want one naming %s", claims, procmark.Self())
	}
	sh, err := b.Start(ctx, backend.ProcSpec{Argv: []string{"/bin/sh"}})
	must(t, err)
	defer sh.Close()
	out := bufio.NewReader(sh.Stdout())
	fmt.Fprintln(sh.Stdin(), "export BERTH_STATE=kept; echo ready")
	if line, err := out.ReadString('\n'); line != "ready\n" {
		t.Fatalf("shell: %q, %v", line, err)
	}

	sweep(t)

	ins, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil || !ins.Container.State.Running {
		t.Fatalf("reattached container after another berth's sweep: %+v, %v; want running", ins.Container.State, err)
	}
	fmt.Fprintln(sh.Stdin(), `echo "state=$BERTH_STATE"`)
	if line, err := out.ReadString('\n'); line != "state=kept\n" {
		t.Fatalf("shell after the sweep: %q, %v; want its exported variable", line, err)
	}
	if b.Recreated() {
		t.Error("the container had to be recovered after the sweep")
	}

	fmt.Fprintln(sh.Stdin(), "exit 0")
	_, _ = waitTimeout(t, sh, 10*time.Second)
	must(t, envAdmin{}.Remove(ctx, opts, opts.Key))
	if claims := claimsOn(t, cli, id); len(claims) != 0 {
		t.Errorf("env rm left claims: %v", claims)
	}
}

// testDeadClaimantsContainerStopped: when the berth that reattached a
// persistent container dies without closing it, the next sweep stops the
// container (keeping it) and removes the dead claim, as it does for a
// crashed creator. Prune then leaves no claim of a live berth behind.
func testDeadClaimantsContainerStopped(t *testing.T) {
	cli := dockerenv.Require(t)
	ctx := context.Background()
	opts, id := stoppedPersistentOfDeadCreator(t)
	dead := deadOwner(t)
	withOwner(t, dead, func() {
		b, err := New(ctx, opts) // reattached by a berth that then "crashes"
		must(t, err)             // and never closed: the "crash"
		if b.ContainerID() != id {
			t.Fatalf("reattach created %s instead of reattaching %s", b.ContainerID(), id)
		}
	})
	if claims := claimsOn(t, cli, id); len(claims) != 1 || !strings.Contains(claims[0], dead) {
		t.Fatalf("claims on the reattached container = %v, want one naming %s", claims, dead)
	}

	sweep(t)

	ins, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("persistent container of a dead claimant was removed: %v", err)
	}
	if ins.Container.State.Status != container.StateExited {
		t.Errorf("persistent container of a dead claimant is %s, want exited", ins.Container.State.Status)
	}
	if claims := claimsOn(t, cli, id); len(claims) != 0 {
		t.Errorf("dead claims left after the sweep: %v", claims)
	}

	// A live claim on a stopped environment goes with it when pruned.
	b := newBackend(t, opts)
	if claims := claimsOn(t, cli, id); len(claims) != 1 {
		t.Fatalf("claims after reattaching = %v, want one", claims)
	}
	timeout := 0
	if _, err := cli.ContainerStop(ctx, b.ContainerID(), client.ContainerStopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	removed, err := prune(ctx, cli, daemonHost(nil), 0, true, func(c container.Summary) bool { return c.ID == id })
	if err != nil || len(removed) != 1 {
		t.Fatalf("prune removed %v, %v; want %s", removed, err, opts.Key)
	}
	if claims := claimsOn(t, cli, id); len(claims) != 0 {
		t.Errorf("prune left claims: %v", claims)
	}
}
