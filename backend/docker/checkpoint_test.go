package docker

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// checkpoint takes a checkpoint of b, removed at the end of the test.
func checkpoint(t testing.TB, b *Backend, name string) backend.Checkpoint {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp, err := b.Checkpoint(ctx, name)
	if err != nil {
		t.Fatalf("Checkpoint %q: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := (checkpointAdmin{}).Remove(ctx, backend.Options{}, cp); err != nil {
			t.Errorf("cleanup: remove checkpoint %s: %v", cp.ID, err)
		}
	})
	return cp
}

// fromCheckpoint returns options for a new throwaway environment made from
// cp.
func fromCheckpoint(t testing.TB, cp backend.Checkpoint, mutate func(*config.Terminal)) backend.Options {
	t.Helper()
	opts := testOptions(t, mutate)
	opts.From = &cp
	return opts
}

// mustRun runs script in b and fails the test unless it exits 0.
func mustRun(t testing.TB, b backend.Backend, script string) string {
	t.Helper()
	out, code := run(t, b, script)
	if code != 0 {
		t.Fatalf("%q: exit %d: %s", script, code, out)
	}
	return out
}

// kept lists what the daemon still keeps of checkpoint id: images, volumes
// and helper containers labelled with it.
func kept(t testing.TB, cli *client.Client, id string) []string {
	t.Helper()
	ctx := context.Background()
	f := make(client.Filters).Add("label", LabelCheckpoint+"="+id)
	var out []string
	imgs, err := cli.ImageList(ctx, client.ImageListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range imgs.Items {
		out = append(out, fmt.Sprintf("image %s %v", im.ID, tagsOf(im.RepoTags)))
	}
	vols, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols.Items {
		out = append(out, "volume "+v.Name)
	}
	cs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", LabelHelper, LabelCheckpoint+"="+id)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs.Items {
		out = append(out, "helper "+c.ID)
	}
	return out
}

// The files a command wrote in the container's own filesystem (the
// writable layer) and in its /root and /workspace volumes are in an
// environment made from a checkpoint, with their owners, modes and links;
// what the source does after the checkpoint is not, and the two are
// independent both ways.
func TestCheckpointCarriesFilesAndStaysIndependent(t *testing.T) {
	dockerenv.Require(t)
	src := newBackend(t, testOptions(t, nil))
	caps := src.Capabilities()
	if caps.Checkpoint == "" || caps.NoCheckpoint != "" {
		t.Fatalf("capabilities of a plain environment: %+v, want Checkpoint set", caps)
	}
	mustRun(t, src, `set -e
mkdir -p /opt/ck
echo layer >/opt/ck/layer
echo home >/root/home
chown 1234:5678 /root/home
chmod 640 /root/home
ln -s home /root/link
mkdir -p /workspace/repo/.git
echo ws >/workspace/repo/.git/HEAD
`)
	cp := checkpoint(t, src, "first")
	if cp.Backend != Name || cp.Key != src.spec.Key || cp.Name != "first" || !strings.HasPrefix(cp.ID, "berth-ckpt-") ||
		cp.Created.IsZero() || cp.Size <= 0 || cp.Meta["image"] == "" || cp.Meta["volume.root"] == "" || cp.Meta["volume.workspace"] == "" {
		t.Fatalf("checkpoint: %+v", cp)
	}
	if how := cp.Meta["copy"]; how != "reflink" && how != "plain" {
		t.Errorf("Meta[copy] = %q, want reflink or plain", how)
	}
	t.Logf("checkpoint %s: %d bytes, volumes copied %s", cp.ID, cp.Size, cp.Meta["copy"])

	mustRun(t, src, "set -e; echo changed >/opt/ck/layer; echo changed >/root/home; rm -r /workspace/repo; echo new >/root/new")
	fork := newBackend(t, fromCheckpoint(t, cp, nil))
	const look = `cat /opt/ck/layer /root/home /workspace/repo/.git/HEAD; stat -c '%u:%g %a' /root/home; readlink /root/link; ls /root/new 2>&1 || true`
	if out := mustRun(t, fork, look); out != "layer\nhome\nws\n1234:5678 640\nhome\nls: /root/new: No such file or directory\n" {
		t.Errorf("in the environment made from the checkpoint:\n%s", out)
	}
	if fork.Capabilities().Checkpoint == "" {
		t.Error("an environment made from a checkpoint cannot be checkpointed")
	}

	mustRun(t, fork, "set -e; echo forked >/root/home; echo forked >/opt/ck/f; echo forked >/workspace/f")
	if out := mustRun(t, src, "cat /root/home /opt/ck/layer; ls /opt/ck; ls -A /workspace"); out != "changed\nchanged\nlayer\n" {
		t.Errorf("the fork's writes reached the source:\n%s", out)
	}
	mustRun(t, src, "set -e; echo again >/root/home; echo again >/opt/ck/layer")
	if out := mustRun(t, fork, "cat /root/home /opt/ck/layer"); out != "forked\nlayer\n" {
		t.Errorf("the source's writes reached the fork:\n%s", out)
	}
}

// One checkpoint restores any number of times: each environment made from
// it gets fresh copies of its volumes, and restoring into the key it was
// taken from (berth env restore) replaces what the key had, persistent
// volumes included.
func TestCheckpointRestoresAgainAndAgain(t *testing.T) {
	dockerenv.Require(t)
	persistent := testOptions(t, func(c *config.Terminal) { c.ContainerPersistent = true })
	src := newBackend(t, persistent)
	mustRun(t, src, "set -e; mkdir -p /opt; echo one >/opt/f; echo one >/root/f")
	cp := checkpoint(t, src, "one")
	mustRun(t, src, "set -e; echo two >/opt/f; echo two >/root/f; echo later >/root/later")

	a := newBackend(t, fromCheckpoint(t, cp, nil))
	mustRun(t, a, "set -e; echo a >/opt/f; echo a >/root/f")
	b := newBackend(t, fromCheckpoint(t, cp, nil))
	if out := mustRun(t, b, "cat /opt/f /root/f"); out != "one\none\n" {
		t.Errorf("second environment from the checkpoint, the first having written: %q", out)
	}

	// Restore in place: the source stops (its volumes are kept, as a
	// persistent environment's are), and the key starts from the
	// checkpoint.
	ctx := context.Background()
	must(t, src.Close(ctx))
	in := persistent
	in.From = &cp
	restored := newBackend(t, in)
	if out := mustRun(t, restored, "cat /opt/f /root/f; ls /root"); out != "one\none\nf\n" {
		t.Errorf("restored in place: %q", out)
	}
	// A later berth of the same settings, without From, reattaches the
	// restored container and keeps its writable layer.
	must(t, restored.Close(ctx))
	again := newBackend(t, persistent)
	if again.ContainerID() != restored.ContainerID() {
		t.Errorf("a later berth replaced the restored container (%s, was %s): the checkpoint's layer is lost",
			shortID(again.ContainerID()), shortID(restored.ContainerID()))
	}
	if out := mustRun(t, again, "cat /opt/f /root/f"); out != "one\none\n" {
		t.Errorf("reattached after a restore: %q", out)
	}
}

// Removing a checkpoint leaves no image and no volume behind, even while
// an environment made from it runs (its image is untagged then, and goes
// with the container); it can no longer be restored, and removing it again
// is no error.
func TestCheckpointRemoveLeavesNothing(t *testing.T) {
	cli := dockerenv.Require(t)
	ctx := context.Background()
	src := newBackend(t, testOptions(t, nil))
	mustRun(t, src, "set -e; mkdir -p /opt; echo x >/opt/x; echo x >/root/x")
	cp, err := src.Checkpoint(ctx, "gone")
	must(t, err)
	if k := kept(t, cli, cp.ID); len(k) != 3 {
		t.Fatalf("a checkpoint keeps %v, want an image and two volumes", k)
	}
	user, err := New(ctx, fromCheckpoint(t, cp, nil))
	must(t, err)

	must(t, (checkpointAdmin{}).Remove(ctx, backend.Options{}, cp))
	if out := mustRun(t, user, "cat /opt/x /root/x"); out != "x\nx\n" {
		t.Errorf("an environment made from a removed checkpoint: %q", out)
	}
	for _, k := range kept(t, cli, cp.ID) {
		if !strings.HasPrefix(k, "image ") || !strings.HasSuffix(k, " []") {
			t.Errorf("after Remove, with an environment made from it running: %s kept", k)
		}
	}
	if _, err := New(ctx, fromCheckpoint(t, cp, nil)); err == nil || !strings.Contains(err.Error(), "can no longer be restored") {
		t.Errorf("New from a removed checkpoint: %v, want it can no longer be restored", err)
	}
	must(t, user.Close(ctx))
	if k := kept(t, cli, cp.ID); len(k) != 0 {
		t.Errorf("after Remove and the environment's Close: %v kept", k)
	}
	if err := (checkpointAdmin{}).Remove(ctx, backend.Options{}, cp); err != nil {
		t.Errorf("removing a removed checkpoint: %v", err)
	}
}

// An environment that mounts host directories (or volumes of the user's)
// cannot be checkpointed, nor made from a checkpoint, and says why.
func TestCheckpointRefusesHostBinds(t *testing.T) {
	dockerenv.Require(t)
	ctx := context.Background()
	b := newBackend(t, testOptions(t, func(c *config.Terminal) {
		mustSet(c, keyVolumes, []string{t.TempDir() + ":/data"})
	}))
	caps := b.Capabilities()
	if caps.Checkpoint != "" || !strings.Contains(caps.NoCheckpoint, "host directories") {
		t.Errorf("capabilities with a host bind: %+v", caps)
	}
	if _, err := b.Checkpoint(ctx, "x"); err == nil || !strings.Contains(err.Error(), "not the environment's to copy") {
		t.Errorf("Checkpoint with a host bind: %v", err)
	}
	src := newBackend(t, testOptions(t, nil))
	cp := checkpoint(t, src, "plain")
	opts := fromCheckpoint(t, cp, func(c *config.Terminal) { mustSet(c, keyMountCwd, true) })
	if _, err := New(ctx, opts); err == nil || !strings.Contains(err.Error(), "host directories") {
		t.Errorf("New from a checkpoint with the cwd mounted: %v", err)
	}
	opts.From = &backend.Checkpoint{Backend: "local", ID: "x"}
	opts.Config = testOptions(t, nil).Config
	if _, err := New(ctx, opts); err == nil || !strings.Contains(err.Error(), "local checkpoint") {
		t.Errorf("New from another backend's checkpoint: %v", err)
	}
}

// Volumes of the user's (docker_volumes NAME:/path) are refused too, before
// any container exists.
func TestNoCheckpointNamesUsersVolumes(t *testing.T) {
	opts := backend.Options{Key: "k", Config: config.Default().Terminal, Getenv: func(string) string { return "" }}
	mustSet(&opts.Config, keyVolumes, []string{"cache:/cache"})
	sp, err := buildSpec(opts)
	if err != nil {
		t.Fatal(err)
	}
	if why := sp.noCheckpoint(); !strings.Contains(why, "cache at /cache") {
		t.Errorf("noCheckpoint with a named volume: %q", why)
	}
	opts.Config = config.Default().Terminal
	sp, err = buildSpec(opts)
	if err != nil {
		t.Fatal(err)
	}
	if why := sp.noCheckpoint(); why != "" {
		t.Errorf("noCheckpoint of the default settings: %q", why)
	}
}

// crashEnv names the step at which TestCheckpointCrashChild stops, as a
// crash would, and the environment key it uses.
const crashEnv = "BERTH_TEST_CHECKPOINT_CRASH"

// TestCheckpointCrashChild is not a test: it is the berth that dies in
// the middle of a checkpoint or a restore, started by
// TestCheckpointCrashLeftoversSwept.
func TestCheckpointCrashChild(t *testing.T) {
	spec := os.Getenv(crashEnv)
	if spec == "" {
		t.Skip("run by TestCheckpointCrashLeftoversSwept")
	}
	step, key, _ := strings.Cut(spec, ",")
	checkpointStep = func(s string) {
		if s == step {
			fmt.Println("READY")
			select {}
		}
	}
	opts := testOptions(t, nil)
	opts.Key = key
	ctx := context.Background()
	if step == "restore" {
		cp := backend.Checkpoint{Backend: Name}
		for kv := range strings.SplitSeq(os.Getenv(crashEnv+"_FROM"), ";") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "id":
				cp.ID = v
			default:
				if cp.Meta == nil {
					cp.Meta = map[string]string{}
				}
				cp.Meta[k] = v
			}
		}
		opts.From = &cp
		_, err := New(ctx, opts)
		t.Fatalf("restore did not stop: %v", err)
	}
	b, err := New(ctx, opts)
	must(t, err)
	mustRun(t, b, "set -e; mkdir -p /opt; echo x >/opt/x; echo x >/root/x")
	_, err = b.Checkpoint(ctx, "crash")
	t.Fatalf("checkpoint did not stop: %v", err)
}

// crashChild runs TestCheckpointCrashChild stopping at step, waits until
// it got there, and kills it (SIGKILL: nothing of it runs after).
func crashChild(t *testing.T, step, key string, env ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCheckpointCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), append(env, crashEnv+"="+step+","+key)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "READY" {
				ready <- true
				return
			}
			t.Logf("child: %s", sc.Text())
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			cmd.Wait()
			t.Fatalf("the child ended before step %s", step)
		}
	case <-time.After(3 * time.Minute):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the child did not reach step %s", step)
	}
	must(t, cmd.Process.Kill())
	_ = cmd.Wait()
}

// What a berth killed in the middle of a checkpoint left (the committed
// image, the copied volumes, its pending marker) is removed by the next
// berth's sweep; so is what one killed in the middle of a restore left
// (the key's copied volumes), while the checkpoint it restored from stays
// whole.
func TestCheckpointCrashLeftoversSwept(t *testing.T) {
	cli := dockerenv.Require(t)
	ctx := context.Background()
	byKey := func(key string) []string {
		t.Helper()
		var out []string
		vols, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: make(client.Filters).Add("label", LabelCheckpointKey+"="+key)})
		must(t, err)
		for _, v := range vols.Items {
			out = append(out, "volume "+v.Name)
		}
		imgs, err := cli.ImageList(ctx, client.ImageListOptions{All: true, Filters: make(client.Filters).Add("label", LabelCheckpointKey+"="+key)})
		must(t, err)
		for _, im := range imgs.Items {
			out = append(out, "image "+im.ID)
		}
		return out
	}

	key := testKey(t)
	crashChild(t, "checkpoint", key)
	if left := byKey(key); len(left) != 4 {
		t.Fatalf("a berth killed in the middle of a checkpoint left %v, want an image, two volumes and the marker", left)
	}
	sweep(t)
	if left := byKey(key); len(left) != 0 {
		t.Errorf("after the sweep: %v", left)
	}

	src := newBackend(t, testOptions(t, nil))
	mustRun(t, src, "echo kept >/root/kept")
	cp := checkpoint(t, src, "whole")
	into := testKey(t)
	from := "id=" + cp.ID
	for k, v := range cp.Meta {
		from += ";" + k + "=" + v
	}
	crashChild(t, "restore", into, crashEnv+"_FROM="+from)
	vols, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: make(client.Filters).Add("label", LabelKey+"="+into)})
	must(t, err)
	if len(vols.Items) != 2 {
		t.Fatalf("a berth killed in the middle of a restore left volumes %v, want the two it filled", vols.Items)
	}
	sweep(t)
	vols, err = cli.VolumeList(ctx, client.VolumeListOptions{Filters: make(client.Filters).Add("label", LabelKey+"="+into)})
	must(t, err)
	if len(vols.Items) != 0 {
		t.Errorf("after the sweep, the half-restored key keeps %d volumes", len(vols.Items))
	}
	markers, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: make(client.Filters).Add("label", LabelRestoreKey+"="+into)})
	must(t, err)
	if len(markers.Items) != 0 {
		t.Errorf("after the sweep, the restore's marker is left")
	}
	if k := kept(t, cli, cp.ID); len(k) != 3 {
		t.Errorf("the checkpoint restored from keeps %v after the sweep, want its image and two volumes", k)
	}
	b := newBackend(t, fromCheckpoint(t, cp, nil))
	if out := mustRun(t, b, "cat /root/kept"); out != "kept\n" {
		t.Errorf("restoring after the sweep: %q", out)
	}
}

// The sweep removes untagged checkpoint images no container runs from (a
// checkpoint removed while an environment made from it ran, that
// environment gone without its Close), and keeps one a container still
// runs from.
func TestCheckpointSweepUntaggedImages(t *testing.T) {
	cli := dockerenv.Require(t)
	ctx := context.Background()
	src := newBackend(t, testOptions(t, nil))
	mustRun(t, src, "set -e; mkdir -p /opt; echo x >/opt/x")
	lost := "berth-ckpt-" + newNonce()
	cr, err := cli.ContainerCommit(ctx, src.ContainerID(), client.ContainerCommitOptions{
		NoPause: true, Config: &container.Config{Labels: map[string]string{LabelCheckpoint: lost}},
	})
	must(t, err)
	t.Cleanup(func() { _, _ = cli.ImageRemove(context.Background(), cr.ID, client.ImageRemoveOptions{Force: true}) })

	cp := checkpoint(t, src, "in use")
	user := newBackend(t, fromCheckpoint(t, cp, nil))
	must(t, (checkpointAdmin{}).Remove(ctx, backend.Options{}, cp))

	if _, err := sweepCheckpoints(ctx, cli, daemonHost(nil)); err != nil {
		t.Fatal(err)
	}
	if k := kept(t, cli, lost); len(k) != 0 {
		t.Errorf("an untagged checkpoint image no container runs from survived the sweep: %v", k)
	}
	if out := mustRun(t, user, "cat /opt/x"); out != "x\n" {
		t.Errorf("an environment made from a removed checkpoint, after the sweep: %q", out)
	}
}

// A checkpoint of an environment made from a checkpoint carries both
// generations' files. The two can be removed in either order, the first
// while environments made from either still run, and once those are gone
// nothing of either is left.
func TestCheckpointOfAFork(t *testing.T) {
	for _, order := range []string{"older first", "newer first"} {
		t.Run(order, func(t *testing.T) { testCheckpointOfAFork(t, order == "older first") })
	}
}

func testCheckpointOfAFork(t *testing.T, olderFirst bool) {
	cli := dockerenv.Require(t)
	ctx := context.Background()
	src := newBackend(t, testOptions(t, nil))
	mustRun(t, src, "set -e; mkdir -p /opt; echo 1 >/opt/one; echo 1 >/root/one")
	first, err := src.Checkpoint(ctx, "first")
	must(t, err)
	fork, err := New(ctx, fromCheckpoint(t, first, nil))
	must(t, err)
	mustRun(t, fork, "set -e; echo 2 >/opt/two; echo 2 >/root/two")
	second, err := fork.Checkpoint(ctx, "second")
	must(t, err)
	forkOfFork, err := New(ctx, fromCheckpoint(t, second, nil))
	must(t, err)
	if out := mustRun(t, forkOfFork, "cat /opt/one /root/one /opt/two /root/two"); out != "1\n1\n2\n2\n" {
		t.Errorf("a fork of a fork: %q", out)
	}

	gone, stays := first, second
	if !olderFirst {
		gone, stays = second, first
	}
	must(t, (checkpointAdmin{}).Remove(ctx, backend.Options{}, gone))
	if out := mustRun(t, forkOfFork, "cat /opt/one /opt/two"); out != "1\n2\n" {
		t.Errorf("a fork of a fork after checkpoint %s went: %q", gone.Name, out)
	}
	again, err := New(ctx, fromCheckpoint(t, stays, nil))
	if err != nil {
		t.Fatalf("restoring checkpoint %s after %s went: %v", stays.Name, gone.Name, err)
	}
	if out := mustRun(t, again, "cat /opt/one"); out != "1\n" {
		t.Errorf("restored from checkpoint %s after %s went: %q", stays.Name, gone.Name, out)
	}
	for _, b := range []*Backend{fork, forkOfFork, again} {
		must(t, b.Close(ctx))
	}
	must(t, (checkpointAdmin{}).Remove(ctx, backend.Options{}, stays))
	for _, cp := range []backend.Checkpoint{first, second} {
		if k := kept(t, cli, cp.ID); len(k) != 0 {
			t.Errorf("checkpoint %s (%s) keeps %v", cp.Name, cp.ID, k)
		}
	}
}
