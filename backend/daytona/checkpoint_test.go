package daytona

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apiclient "github.com/daytona/clients/api-client-go"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/testenv/daytonafake"
	"github.com/a55dbaac/berth/internal/testenv/fault"
)

// The checkpoint tests: a Daytona snapshot of a running sandbox, sandboxes
// made from it (Options.From), its removal, and berth against each of the
// fake's snapshot switches.

// checkpoint takes a checkpoint of b and checks what it says.
func checkpoint(t *testing.T, b *Backend, name string) backend.Checkpoint {
	t.Helper()
	cp, err := b.Checkpoint(ctxT(t), name)
	if err != nil {
		t.Fatalf("checkpoint %s: %v", name, err)
	}
	if cp.Backend != Name || cp.Key != b.spec.Key || cp.Name != name || cp.ID == "" || cp.Size <= 0 ||
		!strings.HasPrefix(cp.Meta[metaSnapshot], snapshotPrefix) || cp.Created.IsZero() {
		t.Fatalf("checkpoint %s: %+v", name, cp)
	}
	return cp
}

// forkOf makes a backend for a new key from cp, closed with the test.
func forkOf(t *testing.T, fake *daytonafake.Server, cp backend.Checkpoint) *Backend {
	t.Helper()
	opts := testOptions(t, fake, nil, nil)
	opts.From = &cp
	return newBackend(t, opts)
}

// out runs script in be and returns its output, failing on a non-zero exit.
func out(t *testing.T, be backend.Backend, script string) string {
	t.Helper()
	o, code := run(t, be, script, "")
	if code != 0 {
		t.Fatalf("%q: exit %d: %s", script, code, o)
	}
	return strings.TrimSpace(o)
}

// background starts a process in its own session in be, which outlives
// the command that started it, and returns its pid.
func background(t *testing.T, be backend.Backend) string {
	t.Helper()
	return out(t, be, "setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $!")
}

// keySandboxes returns the fake's sandboxes of key that are not being
// deleted.
func keySandboxes(fake *daytonafake.Server, key string) []daytonafake.SandboxInfo {
	var live []daytonafake.SandboxInfo
	for _, id := range fake.SandboxIDs() {
		info, ok := fake.Sandbox(id)
		if ok && info.Labels[LabelKey] == key && info.State != "destroying" && info.State != "destroyed" {
			live = append(live, info)
		}
	}
	return live
}

// TestCheckpoint runs the checkpoint cases on one kind fake, side by side.
func TestCheckpoint(t *testing.T) {
	fake := daytonafake.Start(t)
	for _, c := range []struct {
		name string
		fn   func(*testing.T, *daytonafake.Server)
	}{
		{"ForkCarriesFilesAndIsIndependent", checkpointForkCarriesFiles},
		{"RestoreTwiceAndRemove", checkpointRestoreTwiceAndRemove},
		{"RestoreReplacesTheKeysSandbox", checkpointRestoreSameKey},
		{"ForeignCheckpointRefused", checkpointForeignRefused},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, fake)
		})
	}
}

// A fork carries the files (in /tmp and in the home directory, where
// processes start), has the source's resources and is independent of it
// both ways; the source keeps running through the checkpoint: a process
// it started before is alive after, its shell keeps its variables.
func checkpointForkCarriesFiles(t *testing.T, fake *daytonafake.Server) {
	src := newBackend(t, testOptions(t, fake, nil, nil))
	e := termEnv(t, src)
	must(t, e, "only_in_this_shell=kept; echo carried >/tmp/file; echo home >./at-home", "")
	pid := background(t, src)

	cp := checkpoint(t, src, "first")
	if info, _ := fake.Sandbox(src.SandboxID()); info.State != "started" {
		t.Fatalf("the source is %s after its checkpoint", info.State)
	}
	must(t, e, "echo $only_in_this_shell", "kept")
	if got := out(t, src, "kill -0 "+pid+" && echo alive"); got != "alive" {
		t.Fatalf("the process started before the checkpoint: %q", got)
	}

	fork := forkOf(t, fake, cp)
	if fork.SandboxID() == src.SandboxID() || fork.SandboxName() == src.SandboxName() {
		t.Fatal("the fork is the source's sandbox")
	}
	if got := out(t, fork, "cat /tmp/file ./at-home"); got != "carried\nhome" {
		t.Fatalf("files in the fork: %q", got)
	}
	si, _ := fake.Sandbox(src.SandboxID())
	fi, _ := fake.Sandbox(fork.SandboxID())
	if fi.CPU != si.CPU || fi.MemoryGiB != si.MemoryGiB || fi.DiskGiB != si.DiskGiB || fi.Labels[LabelFrom] != cp.Meta[metaSnapshot] {
		t.Fatalf("the fork's definition %+v, the source's %+v", fi, si)
	}
	out(t, fork, "echo fork >/tmp/file; echo fork-only >/tmp/new")
	out(t, src, "echo source >/tmp/file")
	if got := out(t, src, "cat /tmp/file; test -e /tmp/new && echo leaked || true"); got != "source" {
		t.Fatalf("the source after the fork wrote: %q", got)
	}
	if got := out(t, fork, "cat /tmp/file"); got != "fork" {
		t.Fatalf("the fork after the source wrote: %q", got)
	}
}

// One checkpoint restored twice gives two sandboxes with its files, each
// its own; removing it leaves them running, refuses a third restore with
// an error that says why, and removing it again is no error.
func checkpointRestoreTwiceAndRemove(t *testing.T, fake *daytonafake.Server) {
	src := newBackend(t, testOptions(t, fake, nil, nil))
	out(t, src, "echo v1 >/tmp/file")
	cp := checkpoint(t, src, "twice")
	out(t, src, "echo v2 >/tmp/file")
	a, b := forkOf(t, fake, cp), forkOf(t, fake, cp)
	out(t, a, "echo a >>/tmp/file")
	for be, want := range map[*Backend]string{a: "v1\na", b: "v1", src: "v2"} {
		if got := out(t, be, "cat /tmp/file"); got != want {
			t.Fatalf("sandbox %s: %q, want %q", be.SandboxName(), got, want)
		}
	}

	opts := testOptions(t, fake, nil, nil)
	if err := (checkpointAdmin{}).Remove(ctxT(t), opts, cp); err != nil {
		t.Fatalf("remove: %v", err)
	}
	for _, s := range fake.Snapshots() {
		if s.ID == cp.ID && s.State != "removing" {
			t.Fatalf("the removed checkpoint's snapshot is %s", s.State)
		}
	}
	if got := out(t, a, "cat /tmp/file"); got != "v1\na" {
		t.Fatalf("a sandbox made from the removed checkpoint: %q", got)
	}
	third := testOptions(t, fake, nil, nil)
	third.From = &cp
	if be, err := New(ctxT(t), third); err == nil {
		be.Close(context.Background())
		t.Fatal("a removed checkpoint was restored")
	} else if !strings.Contains(err.Error(), "cannot be restored") || !strings.Contains(err.Error(), `"twice"`) {
		t.Fatalf("restore of a removed checkpoint: %v", err)
	}
	if n := len(keySandboxes(fake, third.Key)); n != 0 {
		t.Fatalf("the refused restore left %d sandboxes", n)
	}
	if err := (checkpointAdmin{}).Remove(ctxT(t), opts, cp); err != nil {
		t.Fatalf("removing a removed checkpoint: %v", err)
	}
	byName := cp
	byName.ID = "" // a record that kept only the name
	if err := (checkpointAdmin{}).Remove(ctxT(t), opts, byName); err != nil {
		t.Fatalf("removing by name: %v", err)
	}
}

// A restore into the key the checkpoint was taken from replaces its
// sandbox (persistent, stopped by Close) with one made from the
// checkpoint: the checkpoint's files, not the later ones; one sandbox for
// the key.
func checkpointRestoreSameKey(t *testing.T, fake *daytonafake.Server) {
	persistent := func(c *config.Terminal) { c.ContainerPersistent = true }
	opts := testOptions(t, fake, persistent, nil)
	t.Cleanup(func() { envAdmin{}.Remove(context.Background(), opts, opts.Key) })
	src, err := New(ctxT(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	out(t, src, "echo checkpointed >/tmp/file")
	cp := checkpoint(t, src, "same-key")
	out(t, src, "echo later >/tmp/file")
	if err := src.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	restore := opts
	restore.From = &cp
	back := newBackend(t, restore)
	if got := out(t, back, "cat /tmp/file"); got != "checkpointed" {
		t.Fatalf("the restored sandbox: %q", got)
	}
	if live := keySandboxes(fake, opts.Key); len(live) != 1 || live[0].ID != back.SandboxID() {
		t.Fatalf("the key's sandboxes after the restore: %+v", live)
	}
}

// A checkpoint of another backend is refused before anything is made.
func checkpointForeignRefused(t *testing.T, fake *daytonafake.Server) {
	opts := testOptions(t, fake, nil, nil)
	opts.From = &backend.Checkpoint{Backend: "docker", Name: "other", ID: "sha256:0"}
	if be, err := New(ctxT(t), opts); err == nil {
		be.Close(context.Background())
		t.Fatal("a docker checkpoint made a Daytona sandbox")
	} else if !strings.Contains(err.Error(), `backend "docker"`) {
		t.Fatalf("a foreign checkpoint: %v", err)
	}
	if n := len(keySandboxes(fake, opts.Key)); n != 0 {
		t.Fatalf("the refused restore left %d sandboxes", n)
	}
}

// TestCheckpointCaptureFailsOnce: Daytona fails one capture in two
// (Unkind.SnapshotFailEvery): a checkpoint that meets a failure is taken
// again and succeeds, and the failed capture's snapshot is removed.
func TestCheckpointCaptureFailsOnce(t *testing.T) {
	fake := daytonafake.StartUnkind(t, daytonafake.Unkind{SnapshotFailEvery: 2})
	src := newBackend(t, testOptions(t, fake, nil, nil))
	out(t, src, "echo kept >/tmp/file")
	var cp backend.Checkpoint
	for range 2 { // one capture in two fails: the first or the second
		cp = checkpoint(t, src, "retried")
	}
	if n := fake.Unkindness().SnapshotsFailed; n < 1 {
		t.Fatalf("%d captures failed, want at least 1", n)
	}
	snaps := fake.Snapshots()
	if len(snaps) != 2 || snaps[0].State != "active" || snaps[1].State != "active" {
		t.Fatalf("snapshots left: %+v (want the two checkpoints', the failed capture's removed)", snaps)
	}
	if got := out(t, forkOf(t, fake, cp), "cat /tmp/file"); got != "kept" {
		t.Fatalf("fork: %q", got)
	}
}

// TestCheckpointCaptureFails: every capture fails: a clear error with
// Daytona's reason, nothing left, and the source runs on.
func TestCheckpointCaptureFails(t *testing.T) {
	for _, late := range []bool{false, true} {
		t.Run(map[bool]string{false: "Record", true: "LateRecord"}[late], func(t *testing.T) {
			fake := daytonafake.StartUnkind(t, daytonafake.Unkind{SnapshotFailEvery: 1, SnapshotLateRecord: late})
			src := newBackend(t, testOptions(t, fake, nil, nil))
			e := termEnv(t, src)
			must(t, e, "x=still-here", "")
			_, err := src.Checkpoint(ctxT(t), "doomed")
			if err == nil {
				t.Fatal("a failed capture made a checkpoint")
			}
			want := "made no snapshot"
			if !late {
				want = "is error: "
			}
			if !errors.Is(err, errCaptureFailed) || !strings.Contains(err.Error(), "failed twice") || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `"doomed"`) {
				t.Fatalf("error: %v", err)
			}
			if snaps := fake.Snapshots(); len(snaps) != 0 {
				for _, s := range snaps {
					if s.State != "removing" {
						t.Fatalf("snapshots left after a failed checkpoint: %+v", snaps)
					}
				}
			}
			if info, _ := fake.Sandbox(src.SandboxID()); info.State != "started" {
				t.Fatalf("the source is %s", info.State)
			}
			must(t, e, "echo $x", "still-here")
		})
	}
}

// TestCheckpointWhileFrozen: with Daytona's pause for the commit
// (Unkind.SnapshotFreeze) and a slow push, the checkpoint waits for the
// capture, the source's processes survive it, and the fork has the files.
func TestCheckpointWhileFrozen(t *testing.T) {
	fake := daytonafake.StartUnkind(t, daytonafake.Unkind{SnapshotFreeze: true, SnapshotDelay: fault.Jitter{Min: time.Second}})
	src := newBackend(t, testOptions(t, fake, nil, nil))
	out(t, src, "head -c 5000000 /dev/urandom >/tmp/big")
	pid := background(t, src)
	cp := checkpoint(t, src, "frozen")
	if got := out(t, src, "kill -0 "+pid+" && echo alive"); got != "alive" {
		t.Fatalf("the source's process: %q", got)
	}
	fork := forkOf(t, fake, cp)
	if a, b := out(t, src, "md5sum </tmp/big"), out(t, fork, "md5sum </tmp/big"); a != b {
		t.Fatalf("the fork's file differs: %s, %s", a, b)
	}
}

// TestRestorePullFails: a sandbox made from a checkpoint can fail to
// start (Daytona could not pull the snapshot's image): berth replaces it
// once; when that fails too, the error says why and nothing is left.
func TestRestorePullFails(t *testing.T) {
	for _, every := range []int{2, 1} {
		t.Run(map[int]string{2: "Once", 1: "Always"}[every], func(t *testing.T) {
			fake := daytonafake.StartUnkind(t, daytonafake.Unkind{SnapshotPullFailEvery: every})
			src := newBackend(t, testOptions(t, fake, nil, nil))
			out(t, src, "echo pulled >/tmp/file")
			cp := checkpoint(t, src, "pull")
			opts := testOptions(t, fake, nil, nil)
			opts.From = &cp
			if every == 2 {
				// Of the two sandboxes made from the snapshot, one fails:
				// the first, replaced, or the second, the one after it.
				for range 2 {
					o := testOptions(t, fake, nil, nil)
					o.From = &cp
					if got := out(t, newBackend(t, o), "cat /tmp/file"); got != "pulled" {
						t.Fatalf("restored: %q", got)
					}
					if live := keySandboxes(fake, o.Key); len(live) != 1 {
						t.Fatalf("the key's sandboxes: %+v", live)
					}
				}
				if n := fake.Unkindness().SnapshotPullsFailed; n < 1 {
					t.Fatalf("%d pulls failed, want at least 1", n)
				}
				return
			}
			be, err := New(ctxT(t), opts)
			if err == nil {
				be.Close(context.Background())
				t.Fatal("a restore whose pulls all fail succeeded")
			}
			if !strings.Contains(err.Error(), "Failed to pull snapshot image") || !strings.Contains(err.Error(), cp.Meta[metaSnapshot]) {
				t.Fatalf("error: %v", err)
			}
			if live := keySandboxes(fake, opts.Key); len(live) != 0 {
				t.Fatalf("a failed restore left %+v", live)
			}
		})
	}
}

// TestCloseDuringSnapshot: a sandbox being snapshotted (a checkpoint given
// up on, another client's snapshot) refuses a delete (409, a state change
// in progress); Close waits for the snapshot and deletes it all the same.
func TestCloseDuringSnapshot(t *testing.T) {
	fake := daytonafake.StartUnkind(t, daytonafake.Unkind{SnapshotDelay: fault.Jitter{Min: 2 * time.Second}})
	opts := testOptions(t, fake, nil, nil)
	src, err := New(ctxT(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	id := src.SandboxID()
	req := outside(fake).SandboxAPI.CreateSandboxSnapshot(ctxT(t), id)
	if _, _, err := req.CreateSandboxSnapshot(*apiclient.NewCreateSandboxSnapshot("outside")).Execute(); err != nil {
		t.Fatal(err)
	}
	if err := src.Close(ctxT(t)); err != nil {
		t.Fatalf("close while the sandbox is snapshotted: %v", err)
	}
	if info, ok := fake.Sandbox(id); ok && info.State != "destroying" && info.State != "destroyed" {
		t.Fatalf("the sandbox is %s after Close", info.State)
	}
}
