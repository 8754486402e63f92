package singularity

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/procmark"
)

func ckpt(t testing.TB, b *Backend, name string) backend.Checkpoint {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp, err := b.Checkpoint(ctx, name)
	if err != nil {
		t.Fatalf("Checkpoint(%q): %v", name, err)
	}
	return cp
}

// fromCkpt makes key's environment from cp; cleanup removes it with its
// files.
func fromCkpt(t *testing.T, e *testEnv, key string, cp backend.Checkpoint, mutate func(*config.Terminal)) *Backend {
	t.Helper()
	opts := e.options(key, mutate)
	opts.From = &cp
	t.Cleanup(func() { envAdmin{}.Remove(context.Background(), e.options(key, nil), key) })
	return newBackend(t, opts)
}

// ckptLeftovers lists what the checkpoints directory holds.
func ckptLeftovers(e *testEnv) []string {
	ents, _ := os.ReadDir(checkpointsDir(e.scratch))
	var out []string
	for _, x := range ents {
		out = append(out, x.Name())
	}
	return out
}

// testCheckpointDirOverlay: a persistent instance's directory overlay is
// carried exactly (a file, a subdirectory, a file deleted from the image,
// a directory of the image replaced), the fork and its source are
// independent both ways, one checkpoint restores twice (into another key,
// and into the fork's key again, replacing it), a fork of a fork works,
// and removal leaves nothing.
func testCheckpointDirOverlay(t *testing.T, e *testEnv) {
	e = e.withScratch(t)
	key := randomKey()
	opts := e.options(key, persistent)
	t.Cleanup(func() { envAdmin{}.Remove(context.Background(), opts, key) })
	src := newBackend(t, opts)
	if c := src.Capabilities(); !strings.Contains(c.Checkpoint, "directory overlay") || c.NoCheckpoint != "" {
		t.Fatalf("Capabilities = %+v, want a directory overlay copied", c)
	}
	mustRun(t, src, `test -e /etc/group && test -n "$(ls /usr/sbin)"`)
	mustRun(t, src, `echo one >/root/f && mkdir -p /root/sub/deeper && echo two >/root/sub/deeper/g && chmod 640 /root/sub/deeper/g &&
		rm /etc/group && rm -rf /usr/sbin && mkdir /usr/sbin && echo only >/usr/sbin/only`)
	cp := ckpt(t, src, "first")
	if cp.Backend != Name || cp.Key != key || cp.Name != "first" || cp.Meta["kind"] != kindDir || cp.Size <= 0 ||
		filepath.Dir(cp.ID) != checkpointsDir(e.scratch) {
		t.Fatalf("checkpoint = %+v", cp)
	}
	mustRun(t, src, `echo changed >/root/f && echo src >/root/only-src`)

	const look = `cat /root/f /root/sub/deeper/g; stat -c %a /root/sub/deeper/g; test -e /etc/group || echo no-group; ls -A /usr/sbin; test -e /root/only-src || echo no-only-src`
	want := "one\ntwo\n640\nno-group\nonly\nno-only-src\n"
	// The fork is a throwaway environment: it still starts on a copy of
	// the checkpoint's overlay.
	forkKey := randomKey()
	fork := fromCkpt(t, e, forkKey, cp, nil)
	if got := mustRun(t, fork, look); got != want {
		t.Fatalf("fork sees %q, want %q", got, want)
	}
	if fork.Overlay() == "" || fork.Overlay() == src.Overlay() {
		t.Fatalf("fork overlay %q (source's %q)", fork.Overlay(), src.Overlay())
	}
	if c := fork.Capabilities(); c.Checkpoint == "" {
		t.Errorf("a fork with an overlay cannot be checkpointed: %+v", c)
	}
	// A fresh environment of the image still has what the source deleted.
	plain := newBackend(t, e.options("", nil))
	mustRun(t, plain, `test -e /etc/group && test ! -e /usr/sbin/only`)

	// Independence both ways.
	mustRun(t, fork, `echo fork >/root/f && echo fork >/root/fork-file`)
	if got := mustRun(t, src, `cat /root/f; test -e /root/fork-file || echo no-fork-file`); got != "changed\nno-fork-file\n" {
		t.Fatalf("source sees %q after the fork wrote", got)
	}
	// The same checkpoint into another key, and into the fork's key again.
	second := fromCkpt(t, e, randomKey(), cp, persistent)
	if got := mustRun(t, second, look); got != want {
		t.Fatalf("second restore sees %q", got)
	}
	fork.Close(context.Background())
	again := fromCkpt(t, e, forkKey, cp, nil)
	if got := mustRun(t, again, look+`; test -e /root/fork-file || echo no-fork-file`); got != want+"no-fork-file\n" {
		t.Fatalf("restore into the fork's key sees %q", got)
	}
	// A fork of a fork.
	mustRun(t, again, `echo gen2 >/root/gen`)
	cp2 := ckpt(t, again, "")
	grand := fromCkpt(t, e, randomKey(), cp2, nil)
	if got := mustRun(t, grand, `cat /root/f /root/gen`); got != "one\ngen2\n" {
		t.Fatalf("fork of a fork sees %q", got)
	}

	// Removal: the checkpoints go, a second removal is no error, and the
	// throwaway forks' overlays go with their Close.
	for _, c := range []backend.Checkpoint{cp, cp2} {
		if err := (checkpointAdmin{}).Remove(context.Background(), e.options(key, nil), c); err != nil {
			t.Fatal(err)
		}
		if err := (checkpointAdmin{}).Remove(context.Background(), e.options(key, nil), c); err != nil {
			t.Fatalf("removing a checkpoint already gone: %v", err)
		}
	}
	if left := ckptLeftovers(e); len(left) != 0 {
		t.Fatalf("checkpoints left: %q", left)
	}
	grandOverlay := grand.Overlay()
	grand.Close(context.Background())
	if _, err := os.Stat(grandOverlay); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a throwaway fork's overlay %s stays after Close (%v)", grandOverlay, err)
	}
	o := e.options(randomKey(), nil)
	o.From = &cp
	if b, err := New(context.Background(), o); err == nil || !strings.Contains(err.Error(), "is gone") {
		if b != nil {
			b.Close(context.Background())
		}
		t.Fatalf("New from a removed checkpoint: %v, want it said gone", err)
	}
	if got := mustRun(t, src, `cat /root/f`); got != "changed\n" {
		t.Errorf("source after it all: %q", got)
	}
}

// testCheckpointImageOverlay: an ext3 overlay image is copied while the
// instance has it mounted, checked, and the fork starts on the copy.
func testCheckpointImageOverlay(t *testing.T, e *testEnv) {
	e = e.withScratch(t)
	image := func(c *config.Terminal) {
		mustSet(t, c, keyOverlay, "image")
		c.ContainerPersistent = true
		c.ContainerDisk = 64
	}
	key := randomKey()
	opts := e.options(key, image)
	t.Cleanup(func() { envAdmin{}.Remove(context.Background(), opts, key) })
	src := newBackend(t, opts)
	if c := src.Capabilities(); !strings.Contains(c.Checkpoint, "image") {
		t.Fatalf("Capabilities = %+v", c)
	}
	mustRun(t, src, `mkdir -p /root/d && echo img >/root/d/f && rm /etc/group`)
	cp := ckpt(t, src, "img")
	if cp.Meta["kind"] != kindImage {
		t.Fatalf("kind %q", cp.Meta["kind"])
	}
	if _, err := exec.LookPath("e2fsck"); err == nil && !strings.Contains(cp.Meta["copy"], "e2fsck") {
		t.Errorf("Meta copy = %q, want the copy checked", cp.Meta["copy"])
	}
	mustRun(t, src, `echo later >/root/d/f`)
	fork := fromCkpt(t, e, randomKey(), cp, nil)
	if !strings.HasSuffix(fork.Overlay(), ".img") {
		t.Fatalf("fork overlay %q, want an image like its checkpoint", fork.Overlay())
	}
	if got := mustRun(t, fork, `cat /root/d/f; test -e /etc/group || echo no-group`); got != "img\nno-group\n" {
		t.Fatalf("fork sees %q", got)
	}
	mustRun(t, fork, `echo fork >/root/d/f`)
	if got := mustRun(t, src, `cat /root/d/f`); got != "later\n" {
		t.Fatalf("source sees %q", got)
	}
	if err := (checkpointAdmin{}).Remove(context.Background(), opts, cp); err != nil {
		t.Fatal(err)
	}
	if left := ckptLeftovers(e); len(left) != 0 {
		t.Fatalf("left: %q", left)
	}
}

// testCheckpointTmpfsRefused: a throwaway instance says why it cannot be
// checkpointed and what to set.
func testCheckpointTmpfsRefused(t *testing.T, e *testEnv) {
	b := newBackend(t, e.options("", nil))
	c := b.Capabilities()
	if c.Checkpoint != "" || !strings.Contains(c.NoCheckpoint, "container_persistent: true") {
		t.Fatalf("Capabilities = %+v, want NoCheckpoint naming container_persistent", c)
	}
	if _, err := b.Checkpoint(context.Background(), "x"); err == nil || !strings.Contains(err.Error(), "writable-tmpfs") {
		t.Fatalf("Checkpoint = %v, want the refusal", err)
	}
}

// testCheckpointHostileNames: quotes, spaces and newlines in the key and
// the name make safe directory names and are kept exactly in berth.json;
// records naming anything but a checkpoint directory of the scratch
// directory are refused and remove nothing.
func testCheckpointHostileNames(t *testing.T, e *testEnv) {
	e = e.withScratch(t)
	key := "k'ey \"x\"\n$(touch /tmp/berth-pwned)/../.."
	name := "n a'm\"e\n;rm -rf / #/../x"
	opts := e.options(key, persistent)
	t.Cleanup(func() { envAdmin{}.Remove(context.Background(), opts, key) })
	src := newBackend(t, opts)
	mustRun(t, src, `echo hostile >/root/f`)
	cp := ckpt(t, src, name)
	if filepath.Dir(cp.ID) != checkpointsDir(e.scratch) || strings.ContainsAny(filepath.Base(cp.ID), "'\"\n /;$") {
		t.Fatalf("checkpoint directory %q", cp.ID)
	}
	data, err := os.ReadFile(filepath.Join(cp.ID, "berth.json"))
	var m checkpointMarker
	if err != nil || json.Unmarshal(data, &m) != nil || m.Key != key || m.Name != name {
		t.Fatalf("berth.json = %s (%v): want the key and name exactly", data, err)
	}
	fork := fromCkpt(t, e, "f\n'\"", cp, nil)
	if got := mustRun(t, fork, `cat /root/f`); got != "hostile\n" {
		t.Fatalf("fork sees %q", got)
	}
	victim := filepath.Join(t.TempDir(), "victim")
	os.MkdirAll(filepath.Join(victim, "d"), 0o755)
	os.WriteFile(filepath.Join(victim, "berth.json"), []byte("{}"), 0o600)
	for _, id := range []string{
		"/", victim, "relative", checkpointsDir(e.scratch), checkpointsDir(e.scratch) + "/../instances",
		checkpointsDir(e.scratch) + "/x/../../..", checkpointsDir(e.scratch) + "/.tmp-x", checkpointsDir(e.scratch) + "/berth_0123456789ab.a/b",
		filepath.Join(filepath.Dir(victim), "checkpoints", filepath.Base(cp.ID)),
	} {
		c := backend.Checkpoint{Backend: Name, ID: id}
		if err := (checkpointAdmin{}).Remove(context.Background(), opts, c); err == nil {
			t.Errorf("Remove(%q) accepted", id)
		}
		o := e.options(randomKey(), nil)
		o.From = &c
		if b, err := New(context.Background(), o); err == nil {
			b.Close(context.Background())
			t.Errorf("New from %q accepted", id)
		}
	}
	if _, err := os.Stat(filepath.Join(victim, "d")); err != nil {
		t.Fatalf("victim directory damaged: %v", err)
	}
	other := cp
	other.Backend = "ssh"
	if err := (checkpointAdmin{}).Remove(context.Background(), opts, other); err == nil || !strings.Contains(err.Error(), "ssh") {
		t.Errorf("Remove of another backend's checkpoint: %v", err)
	}
	if _, err := os.Stat("/tmp/berth-pwned"); err == nil {
		t.Error("the key reached a shell")
	}
}

// testCheckpointCrashLeftovers: a copy whose berth died (its owner mark
// names a gone process) is removed by the next checkpoint and by prune; a
// live berth's copy is left alone; prune removes forks' checkpoints older
// than its age, never named ones.
func testCheckpointCrashLeftovers(t *testing.T, e *testEnv) {
	e = e.withScratch(t)
	key := randomKey()
	opts := e.options(key, persistent)
	t.Cleanup(func() { envAdmin{}.Remove(context.Background(), opts, key) })
	src := newBackend(t, opts)
	mustRun(t, src, `echo x >/root/x`)
	dead := exec.Command("sleep", "60")
	if err := dead.Start(); err != nil {
		t.Fatal(err)
	}
	deadMark := procmark.Of(dead.Process.Pid)
	dead.Process.Kill()
	dead.Wait()
	if !procmark.Gone(deadMark) {
		t.Fatalf("mark %q of a killed process is not gone", deadMark)
	}
	root := checkpointsDir(e.scratch)
	leftover := func(name, owner string) string {
		d := filepath.Join(root, name)
		os.MkdirAll(filepath.Join(d, "overlay", "upper"), 0o700)
		os.WriteFile(filepath.Join(d, "owner"), []byte(owner+"\n"), 0o600)
		return d
	}
	crashed := leftover(".tmp-crashed", deadMark)
	live := leftover(".tmp-live", procmark.Self())
	cp := ckpt(t, src, "after-crash")
	if _, err := os.Stat(crashed); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the crashed copy stays after the next checkpoint (%v)", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live berth's copy was removed: %v", err)
	}
	crashed = leftover(".tmp-crashed2", deadMark)
	forkCp := ckpt(t, src, "")
	time.Sleep(20 * time.Millisecond)
	if _, err := (envAdmin{}).Prune(context.Background(), opts, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{crashed: false, live: true, forkCp.ID: false, cp.ID: true} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("after prune, %s exists: %v, want %v", p, err == nil, want)
		}
	}
	os.RemoveAll(live)
}
