package modal

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/procmark"
	"github.com/a55dbaac/berth/internal/testenv/modalfake"
	"github.com/a55dbaac/berth/terminal"
	pb "github.com/modal-labs/libmodal/modal-go/proto/modal_proto"
)

// checkpoint takes a checkpoint of be, failing the test on an error.
func checkpoint(t *testing.T, be *Backend, name string) backend.Checkpoint {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp, err := be.Checkpoint(ctx, name)
	if err != nil {
		t.Fatalf("Checkpoint %q: %v", name, err)
	}
	return cp
}

// newFrom is f's environment of a new key made from cp.
func (f *fixture) newFrom(t *testing.T, cp backend.Checkpoint, edit func(*config.Terminal)) (*Backend, error) {
	t.Helper()
	opts := f.options(t, "", edit)
	opts.From = &cp
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := New(ctx, opts)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := b.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b, nil
}

func (f *fixture) mustFrom(t *testing.T, cp backend.Checkpoint, edit func(*config.Terminal)) *Backend {
	t.Helper()
	b, err := f.newFrom(t, cp, edit)
	if err != nil {
		t.Fatalf("New from checkpoint %q: %v", cp.Name, err)
	}
	return b
}

// running is the ids of the sandboxes the fake runs.
func running(srv *modalfake.Server) map[string]bool {
	out := map[string]bool{}
	for _, s := range srv.Sandboxes() {
		if s.Running {
			out[s.ID] = true
		}
	}
	return out
}

// definitionOf is the definition the fake received for sandbox id.
func definitionOf(t *testing.T, srv *modalfake.Server, id string) *pb.Sandbox {
	t.Helper()
	for _, r := range srv.Records() {
		if r.SandboxID == id {
			return r.Definition
		}
	}
	t.Fatalf("the fake received no definition of %s", id)
	return nil
}

// pendingEntries reads PendingCheckpointsFile in home.
func pendingEntries(t *testing.T, home string) map[string]pendingCheckpoint {
	t.Helper()
	m, err := readJSON[pendingCheckpoint](filepath.Join(home, PendingCheckpointsFile))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCheckpoint: the modal backend's checkpoints on the fake as kind as
// can be (the unkind parts have tests of their own below).
func TestCheckpoint(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		name string
		fn   func(*testing.T, *fixture)
	}{
		{"FileCarriedAsAFreshEnvironment", testCheckpointFileCarried},
		{"IndependentBothWays", testCheckpointIndependent},
		{"RestoredTwice", testCheckpointRestoredTwice},
		{"SourceRunsDuringTheSnapshot", testCheckpointSourceRuns},
		{"Removed", testCheckpointRemoved},
		{"RefusedFrom", testCheckpointRefusedFrom},
		{"CrashLeftoversSwept", testCheckpointCrashSwept},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, f) })
	}
}

// A file (and a binary one) is carried into an environment made from the
// checkpoint, whose sandbox is defined exactly as a fresh environment's of
// the same configuration but for its image and its own name.
func testCheckpointFileCarried(t *testing.T, f *fixture) {
	src := newBackend(t, f.options(t, "", nil))
	sum, _ := sh(t, src, "mkdir -p /root/w && echo hello >/root/w/f && head -c 65536 /dev/urandom >/root/w/bin && md5sum /root/w/bin")
	cp := checkpoint(t, src, "c1")
	if cp.Backend != Name || cp.Key != src.set.Key || cp.Name != "c1" || !strings.HasPrefix(cp.ID, "im-") ||
		cp.Meta[MetaSandbox] != src.SandboxID() || cp.Meta[MetaServer] != f.srv.URL() || cp.Created.IsZero() {
		t.Fatalf("checkpoint: %+v", cp)
	}
	if !slicesContain(f.srv.SnapshotImages(), cp.ID) {
		t.Fatalf("the fake keeps no image %s: %v", cp.ID, f.srv.SnapshotImages())
	}
	if n := len(pendingEntries(t, f.home)); n != 0 {
		t.Fatalf("%d pending checkpoint entries after a checkpoint returned", n)
	}

	fork := f.mustFrom(t, cp, nil)
	if out, _ := sh(t, fork, "cat /root/w/f; md5sum /root/w/bin"); out != "hello\n"+sum {
		t.Fatalf("the fork's files: %q, want %q", out, "hello\n"+sum)
	}
	if fork.SandboxID() == src.SandboxID() || !running(f.srv)[src.SandboxID()] {
		t.Fatal("the fork is not a sandbox of its own next to the running source")
	}
	if got := sandboxInfo(t, f.srv, fork.SandboxID()).Tags[TagKey]; got != fork.set.Key {
		t.Fatalf("the fork's sandbox is tagged with key %q, want its own %q", got, fork.set.Key)
	}

	fresh := newBackend(t, f.options(t, "", nil))
	want := proto.Clone(definitionOf(t, f.srv, fresh.SandboxID())).(*pb.Sandbox)
	got := proto.Clone(definitionOf(t, f.srv, fork.SandboxID())).(*pb.Sandbox)
	if got.GetImageId() != cp.ID {
		t.Fatalf("the fork's sandbox runs image %s, want the checkpoint's %s", got.GetImageId(), cp.ID)
	}
	for _, d := range []*pb.Sandbox{want, got} {
		d.SetImageId("")
		d.SetName("")
	}
	if !proto.Equal(got, want) {
		t.Fatalf("the fork's sandbox is defined otherwise than a fresh one:\n%v\nwant\n%v", got, want)
	}
}

func slicesContain(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// What the source writes after the checkpoint is not in the fork, and what
// the fork writes is not in the source.
func testCheckpointIndependent(t *testing.T, f *fixture) {
	src := newBackend(t, f.options(t, "", nil))
	sh(t, src, "echo before >/root/f")
	cp := checkpoint(t, src, "")
	fork := f.mustFrom(t, cp, nil)
	sh(t, src, "echo source >/root/f; echo s >/root/only-source")
	sh(t, fork, "echo fork >/root/f; echo k >/root/only-fork")
	if out, _ := sh(t, src, "cat /root/f; ls /root/only-fork 2>&1 >/dev/null | wc -l"); out != "source\n1\n" {
		t.Fatalf("the source after both wrote: %q, want its own file and no /root/only-fork", out)
	}
	if out, _ := sh(t, fork, "cat /root/f; ls /root/only-source 2>&1 >/dev/null | wc -l"); out != "fork\n1\n" {
		t.Fatalf("the fork after both wrote: %q, want its own file and no /root/only-source", out)
	}
}

// One checkpoint restores twice: the first environment made from it
// (persistent, closed, so snapshotted on close) leaves the checkpoint
// restorable, and the second starts from the checkpoint, not from what
// the first wrote.
func testCheckpointRestoredTwice(t *testing.T, f *fixture) {
	src := newBackend(t, f.options(t, "", nil))
	sh(t, src, "echo v1 >/root/f")
	cp := checkpoint(t, src, "twice")
	first := f.mustFrom(t, cp, func(c *config.Terminal) { c.ContainerPersistent = true })
	sh(t, first, "echo first >/root/f")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { envAdmin{}.Remove(context.Background(), f.options(t, first.set.Key, nil), first.set.Key) })
	if !slicesContain(f.srv.SnapshotImages(), cp.ID) {
		t.Fatalf("closing an environment made from checkpoint %s deleted it", cp.ID)
	}
	second := f.mustFrom(t, cp, nil)
	if out, _ := sh(t, second, "cat /root/f"); out != "v1\n" {
		t.Fatalf("the second restore's /root/f: %q, want the checkpoint's v1", out)
	}
}

// The source runs on while it is snapshotted: with the snapshot held in
// progress (so the checks fall inside it by construction), a process the
// source started before goes on counting and a command runs to its end;
// afterwards the source is the same running sandbox.
func testCheckpointSourceRuns(t *testing.T, f *fixture) {
	src := newBackend(t, f.options(t, "", nil))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := src.Start(ctx, backend.ProcSpec{Argv: []string{"sh", "-c", "i=0; while :; do i=$((i+1)); echo $i >/tmp/n.tmp; mv /tmp/n.tmp /tmp/n; sleep 0.05; done"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	count := func() int {
		out, _ := sh(t, src, "cat /tmp/n 2>/dev/null || echo 0")
		n, _ := strconv.Atoi(strings.TrimSpace(out))
		return n
	}
	grows := func(n int, when string) int {
		for ctx.Err() == nil {
			if m := count(); m > n {
				return m
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("%s: the source's counter stayed at %d", when, n)
		return 0
	}
	n := grows(0, "before the checkpoint")
	id := src.SandboxID()

	held, release := f.srv.HoldSnapshots()
	defer release()
	type res struct {
		cp  backend.Checkpoint
		err error
	}
	done := make(chan res, 1)
	go func() {
		cp, err := src.Checkpoint(ctx, "held")
		done <- res{cp, err}
	}()
	select {
	case <-held:
	case r := <-done:
		t.Fatalf("the checkpoint ended (%v) without its snapshot being held", r.err)
	case <-ctx.Done():
		t.Fatal("the checkpoint's snapshot was never held")
	}
	n = grows(n, "while the snapshot is in progress")
	if out, code := sh(t, src, "echo during"); out != "during\n" || code != 0 {
		t.Fatalf("a command during the snapshot: %q exit %d", out, code)
	}
	release()
	r := <-done
	if r.err != nil {
		t.Fatalf("Checkpoint: %v", r.err)
	}
	grows(n, "after the checkpoint")
	if src.SandboxID() != id || !running(f.srv)[id] {
		t.Fatalf("the source's sandbox changed or stopped: %s -> %s", id, src.SandboxID())
	}
}

// A checkpoint is removed without its environment: Modal no longer has its
// image, an environment cannot be made from it (a clear error, and no
// sandbox is left), and removing it again is no error.
func testCheckpointRemoved(t *testing.T, f *fixture) {
	src := newBackend(t, f.options(t, "", nil))
	sh(t, src, "echo x >/root/f")
	cp := checkpoint(t, src, "gone")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := src.Close(ctx); err != nil {
		t.Fatal(err)
	}
	reg, ok := backend.Lookup(Name)
	if !ok || reg.Checkpoints == nil {
		t.Fatal("the modal registration has no Checkpoints")
	}
	opts := f.options(t, cp.Key, nil)
	if err := reg.Checkpoints.Remove(ctx, opts, cp); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if slicesContain(f.srv.SnapshotImages(), cp.ID) {
		t.Fatalf("the fake still keeps %s after Remove", cp.ID)
	}
	before := running(f.srv)
	_, err := f.newFrom(t, cp, nil)
	if err == nil || !strings.Contains(err.Error(), "can no longer be restored") || !strings.Contains(err.Error(), cp.ID) {
		t.Fatalf("New from a removed checkpoint: %v, want a clear error naming %s", err, cp.ID)
	}
	if now := running(f.srv); len(now) != len(before) {
		t.Fatalf("a failed restore left sandboxes running: %v, before %v", now, before)
	}
	if err := reg.Checkpoints.Remove(ctx, opts, cp); err != nil {
		t.Fatalf("Remove of a checkpoint already gone: %v", err)
	}
}

// What is not a modal checkpoint of this server is refused, naming the bad
// value, before anything is created; so is a key whose sandbox still runs.
func testCheckpointRefusedFrom(t *testing.T, f *fixture) {
	before := len(f.srv.Records())
	for _, c := range []struct {
		cp   backend.Checkpoint
		want string
	}{
		{backend.Checkpoint{Backend: "docker", Key: "k", Name: "n", ID: "berth-ckpt-1"}, "made by the docker backend"},
		{backend.Checkpoint{Backend: Name, Key: "k", Name: "n", ID: "sb-123"}, `"sb-123", which is no Modal image id`},
		{backend.Checkpoint{Backend: Name, Key: "k", Name: "n", ID: "im-x", Meta: map[string]string{MetaServer: "https://api.modal.example"}}, "kept by Modal at https://api.modal.example"},
		{backend.Checkpoint{Backend: Name, Key: "k", Name: "n", ID: "im-NoSuchImage00000000000"}, "can no longer be restored"},
	} {
		if _, err := f.newFrom(t, c.cp, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New from %+v: %v, want an error saying %q", c.cp, err, c.want)
		}
	}
	if n := len(f.srv.Records()); n != before {
		t.Fatalf("refused checkpoints sent %d sandbox definitions", n-before)
	}

	src := newBackend(t, f.options(t, "", nil))
	sh(t, src, "echo x >/root/f")
	cp := checkpoint(t, src, "busy")
	opts := f.options(t, src.set.Key, nil)
	opts.From = &cp
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if b, err := New(ctx, opts); err == nil || !strings.Contains(err.Error(), "still has a running sandbox") {
		if b != nil {
			b.Close(ctx)
		}
		t.Fatalf("New from a checkpoint for a key whose sandbox runs: %v, want it refused", err)
	}
	if out, _ := sh(t, src, "cat /root/f"); out != "x\n" || !running(f.srv)[src.SandboxID()] {
		t.Fatalf("the running sandbox after a refused restore: %q", out)
	}
}

// A berth that dies between Modal's answer to the snapshot and the
// checkpoint's record leaves a pending entry naming the image; the sweep
// of a later berth (berth env prune, or the first backend of a process)
// deletes the image, and leaves the entries of berths that still run.
func testCheckpointCrashSwept(t *testing.T, f *fixture) {
	src := newBackend(t, f.options(t, "", nil))
	var mid map[string]pendingCheckpoint
	var once sync.Once
	checkpointStep = func() { once.Do(func() { mid = pendingEntries(t, f.home) }) }
	defer func() { checkpointStep = func() {} }()
	cp := checkpoint(t, src, "crashed")
	var entry pendingCheckpoint
	for _, e := range mid {
		entry = e
	}
	if len(mid) != 1 || entry.Image != cp.ID || entry.Key != src.set.Key || entry.Name != "crashed" || entry.Process != currentProcess() {
		t.Fatalf("pending entries while the checkpoint was being taken: %+v; want one naming %s", mid, cp.ID)
	}
	// The berth "dies" there: its entry stays, with its process gone. A
	// second entry is of a berth that still runs.
	entry.Process = procmark.BootID() + "/999999999/1"
	alive := pendingCheckpoint{Key: "alive", Sandbox: "sb-x", Process: currentProcess(), Started: time.Now()}
	if err := writeJSON(filepath.Join(f.home, PendingCheckpointsFile), map[string]pendingCheckpoint{"dead": entry, "alive": alive}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	removed, err := envAdmin{}.Prune(ctx, f.options(t, "", nil), time.Hour)
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	if !slicesContain(removed, src.set.Key) {
		t.Fatalf("Prune removed %v, want the key %s of the dead berth's checkpoint", removed, src.set.Key)
	}
	if slicesContain(f.srv.SnapshotImages(), cp.ID) {
		t.Fatalf("the image %s of the dead berth's checkpoint is still kept", cp.ID)
	}
	if left := pendingEntries(t, f.home); len(left) != 1 || left["alive"].Key != "alive" {
		t.Fatalf("pending entries after the sweep: %+v, want only the live berth's", left)
	}

	// The first backend a berth process makes on a Modal server sweeps
	// too (as if this process had not yet talked to the fake).
	cp = checkpoint(t, src, "crashed-again")
	entry.Image = cp.ID
	if err := writeJSON(filepath.Join(f.home, PendingCheckpointsFile), map[string]pendingCheckpoint{"dead": entry}); err != nil {
		t.Fatal(err)
	}
	cleanedMu.Lock()
	delete(cleaned, src.cred.ServerURL+"\x00"+src.cred.Environment+"\x00"+src.owner)
	cleanedMu.Unlock()
	newBackend(t, f.options(t, "", nil))
	if slicesContain(f.srv.SnapshotImages(), cp.ID) {
		t.Fatalf("the image %s of a dead berth's checkpoint is still kept after a new backend started", cp.ID)
	}
	if left := pendingEntries(t, f.home); len(left) != 0 {
		t.Fatalf("pending entries after a new backend's sweep: %+v", left)
	}
}

// The faults of Modal's snapshots, each on a fake of its own, each making
// Checkpoint or a restore fail with an error that says what happened,
// keeping nothing and leaving nothing running but the source.
func TestCheckpointFaults(t *testing.T) {
	t.Parallel() // on fakes of their own: they wait on snapshots
	t.Run("SandboxEndsAsItIsSnapshotted", func(t *testing.T) {
		t.Parallel()
		f := newFixtureWith(t, modalfake.Faults{SnapshotInterrupted: 1})
		src := newBackend(t, f.options(t, "", nil))
		e := newEnv(t, src)
		mustRun(t, e, terminal.Request{Command: "echo x >/root/f"})
		old := src.SandboxID()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, err := src.Checkpoint(ctx, "lost")
		if err == nil || !strings.Contains(err.Error(), "finished (terminated) before its filesystem could be snapshotted") || !strings.Contains(err.Error(), "nothing was kept") {
			t.Fatalf("Checkpoint of a sandbox that ends as it is snapshotted: %v", err)
		}
		if imgs := f.srv.SnapshotImages(); len(imgs) != 0 {
			t.Fatalf("a failed checkpoint kept images: %v", imgs)
		}
		if n := len(pendingEntries(t, f.home)); n != 0 {
			t.Fatalf("a failed checkpoint left %d pending entries", n)
		}
		if len(running(f.srv)) != 0 {
			t.Fatalf("sandboxes running after the source ended: %v", running(f.srv))
		}
		r := mustRun(t, e, terminal.Request{Command: "echo again"})
		if r.Output != "again" || !r.EnvironmentRecreated || src.SandboxID() == old {
			t.Fatalf("the next command: %q recreated %v; want it run in a new sandbox, saying so", r.Output, r.EnvironmentRecreated)
		}
	})
	t.Run("SnapshotTooSlow", func(t *testing.T) {
		t.Parallel()
		f := newFixtureWith(t, modalfake.Faults{SnapshotDelay: modalfake.Jitter{Min: time.Hour}})
		src := newBackend(t, f.options(t, "", nil))
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		_, err := src.Checkpoint(ctx, "slow")
		if err == nil || !strings.Contains(err.Error(), "did not finish within") || !strings.Contains(err.Error(), "the environment runs on") {
			t.Fatalf("Checkpoint with a snapshot slower than its time: %v", err)
		}
		if imgs := f.srv.SnapshotImages(); len(imgs) != 0 {
			t.Fatalf("a timed-out checkpoint kept images: %v", imgs)
		}
		if n := len(pendingEntries(t, f.home)); n != 0 {
			t.Fatalf("a failed checkpoint left %d pending entries", n)
		}
		if now := running(f.srv); len(now) != 1 || !now[src.SandboxID()] {
			t.Fatalf("running after a timed-out checkpoint: %v, want the source %s alone", now, src.SandboxID())
		}
		if out, _ := sh(t, src, "echo on"); out != "on\n" {
			t.Fatalf("the source after a timed-out checkpoint: %q", out)
		}
	})
	t.Run("ImageGoneBeforeTheRestore", func(t *testing.T) {
		t.Parallel()
		f := newFixtureWith(t, modalfake.Faults{SnapshotTTL: modalfake.Jitter{Min: time.Nanosecond}})
		src := newBackend(t, f.options(t, "", nil))
		sh(t, src, "echo x >/root/f")
		cp := checkpoint(t, src, "expired")
		_, err := f.newFrom(t, cp, nil)
		if err == nil || !strings.Contains(err.Error(), "can no longer be restored") || !strings.Contains(err.Error(), cp.ID) {
			t.Fatalf("New from a checkpoint whose image is gone: %v", err)
		}
		if now := running(f.srv); len(now) != 1 || !now[src.SandboxID()] {
			t.Fatalf("running after a failed restore: %v, want the source %s alone", now, src.SandboxID())
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := (checkpointAdmin{}).Remove(ctx, f.options(t, cp.Key, nil), cp); err != nil {
			t.Fatalf("Remove of a checkpoint whose image is gone: %v", err)
		}
	})
}

// The pending file is a JSON object of entries (what berth env prune and
// a later berth read).
func TestPendingCheckpointsFormat(t *testing.T) {
	dir := t.TempDir()
	p := pendingStore{dir: dir}
	n, err := p.begin(pendingCheckpoint{Key: "k", Name: "c", Sandbox: "sb-1", Process: "p", Started: time.Unix(0, 0).UTC()})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.setImage(n, "im-1"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, PendingCheckpointsFile))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]map[string]any
	if err := json.Unmarshal(b, &m); err != nil || m[n]["image"] != "im-1" || m[n]["key"] != "k" || m[n]["name"] != "c" {
		t.Fatalf("pending file %s: %v", b, err)
	}
	if err := p.end(n); err != nil {
		t.Fatal(err)
	}
	if left := pendingEntries(t, dir); len(left) != 0 {
		t.Fatalf("after end: %v", left)
	}
}
