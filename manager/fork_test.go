package manager_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/local"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/terminal"
)

// copyBackend is a local environment in a directory of its own whose
// checkpoint is a copy of that directory: the smallest backend that can
// fork, for the manager's own tests (the backends' are the Fork group).
type copyBackend struct {
	*local.Local
	dir, origin string
}

func (b *copyBackend) Capabilities() backend.Capabilities {
	return backend.Capabilities{NativeFS: true, Checkpoint: "directory copied (test)"}
}

func (b *copyBackend) Checkpoint(ctx context.Context, name string) (backend.Checkpoint, error) {
	dst, err := os.MkdirTemp(filepath.Dir(b.dir), "cp-")
	if err != nil {
		return backend.Checkpoint{}, err
	}
	if err := os.CopyFS(dst, os.DirFS(b.dir)); err != nil {
		return backend.Checkpoint{}, err
	}
	var size int64
	filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if fi, err := d.Info(); err == nil && fi.Mode().IsRegular() {
			size += fi.Size()
		}
		return nil
	})
	return backend.Checkpoint{Backend: "local", ID: dst, Size: size, Meta: map[string]string{"dir": b.dir}}, nil
}

func (b *copyBackend) Relocate(p string) string {
	if rel, ok := strings.CutPrefix(p, b.origin); ok && b.origin != "" && (rel == "" || rel[0] == '/') {
		return b.dir + rel
	}
	return p
}

// removals records what the manager asked to remove.
type removals struct {
	mu  sync.Mutex
	ids []string
}

func (r *removals) Remove(ctx context.Context, opts backend.Options, cp backend.Checkpoint) error {
	r.mu.Lock()
	r.ids = append(r.ids, cp.ID)
	r.mu.Unlock()
	return os.RemoveAll(cp.ID)
}

// copyManager is a manager over copyBackends in root, with berth's home
// home.
func copyManager(t *testing.T, home string) (*manager.Manager, *removals) {
	t.Helper()
	root := t.TempDir()
	cfg := &config.Config{Home: home, Terminal: config.Default().Terminal, MaxOutputChars: 50000, Checkpoints: config.Default().Checkpoints}
	cfg.Approvals.Mode = "off"
	cfg.Terminal.Timeout = 60
	m := manager.NewWithFactory(cfg, nil, func(ctx context.Context, opts backend.Options) (backend.Backend, error) {
		dir, err := os.MkdirTemp(root, opts.Key+"-")
		if err != nil {
			return nil, err
		}
		b := &copyBackend{dir: dir}
		if opts.From != nil {
			if err := os.CopyFS(dir, os.DirFS(opts.From.ID)); err != nil {
				return nil, err
			}
			b.origin = opts.From.Meta["dir"]
		}
		t2 := config.Default().Terminal
		t2.Cwd = dir
		if b.Local, err = local.New(backend.Options{Config: t2}); err != nil {
			return nil, err
		}
		return b, nil
	})
	rm := &removals{}
	m.SetCheckpointAdmin(rm)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		m.CloseAll(ctx)
	})
	return m, rm
}

func mustRun(t *testing.T, m *manager.Manager, key, command string) string {
	t.Helper()
	r := m.Run(context.Background(), key, terminal.Request{Command: command})
	if r.Error != nil || r.ExitCode != 0 {
		t.Fatalf("%s: %q: %+v", key, command, r)
	}
	return r.Output
}

// A fork waits for the source's running foreground command and fails,
// naming it and what to do, when the wait ends first: nothing is copied
// under it and no target is made. Once the command has ended the fork
// goes through, carries the state the command left, relocates the cwd,
// removes its transient checkpoint, and says background processes were
// not carried.
func TestForkWaitsForTheRunningCommand(t *testing.T) {
	m, rm := copyManager(t, t.TempDir())
	mustRun(t, m, "src", "mkdir sub && cd sub && echo one > f")
	release := filepath.Join(t.TempDir(), "release")
	started := filepath.Join(t.TempDir(), "started")
	done := make(chan string, 1)
	go func() {
		r := m.Run(context.Background(), "src", terminal.Request{Command: "touch " + started + "; while [ ! -e " + release + " ]; do sleep 0.05; done; echo two > f; export AFTER=yes"})
		done <- r.Output
	}()
	for !exists(started) {
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := m.Fork(ctx, "src", "dst")
	cancel()
	if !errors.Is(err, manager.ErrBusy) || !strings.Contains(err.Error(), `"src" is running a command`) || !strings.Contains(err.Error(), "process detach proc_") || !strings.Contains(err.Error(), "touch ") {
		t.Fatalf("fork under a running command: %v", err)
	}
	if slices.Contains(m.Keys(), "dst") {
		t.Fatal("a fork that waited in vain left its target")
	}
	os.WriteFile(release, nil, 0o644)
	<-done
	res, err := m.Fork(context.Background(), "src", "dst")
	if err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, m, "dst", "pwd; cat f; echo $AFTER"); out != res.Cwd+"\ntwo\nyes" {
		t.Fatalf("fork: %q, want the cwd %s, the file and the export as the command left them", out, res.Cwd)
	}
	srcCwd := mustRun(t, m, "src", "pwd")
	if res.Cwd == srcCwd || !strings.HasSuffix(res.Cwd, "/sub") || !slices.Contains(res.Variables, "AFTER") || res.Files != "directory copied (test)" || !strings.HasPrefix(res.NotCarried[0], "background processes") {
		t.Errorf("fork result: %+v (source cwd %s)", res, srcCwd)
	}
	if len(rm.ids) != 1 || exists(rm.ids[0]) {
		t.Errorf("the transient checkpoint was not removed: %v", rm.ids)
	}
}

// A checkpoint's record lives in berth's home (0600 in 0700 directories),
// holds what was carried, and outlives the manager: a new one over the
// same home lists it and restores from it.
func TestCheckpointsSurviveARestart(t *testing.T) {
	home := t.TempDir()
	m, _ := copyManager(t, home)
	mustRun(t, m, "k", "echo kept > f && export KEPT=1 && kf() { echo fn; }")
	info, err := m.Checkpoint(context.Background(), "k", "c1")
	if err != nil {
		t.Fatal(err)
	}
	if info.Size == 0 || info.ID == "" || !slices.Contains(info.Functions, "kf") {
		t.Errorf("checkpoint: %+v", info)
	}
	rec := filepath.Join(home, "checkpoints", "local", "k", "c1.json")
	for p, want := range map[string]fs.FileMode{rec: 0o600, filepath.Dir(rec): 0o700, filepath.Join(home, "checkpoints"): 0o700} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want mode %v", p, fi.Mode(), err, want)
		}
	}
	m.CloseAll(context.Background())

	m2, _ := copyManager(t, home)
	list, err := m2.Checkpoints(context.Background(), "")
	if err != nil || len(list) != 1 || list[0].Name != "c1" || list[0].Key != "k" {
		t.Fatalf("after a restart: %+v, %v", list, err)
	}
	res, err := m2.Restore(context.Background(), "k", "c1")
	if err != nil {
		t.Fatal(err)
	}
	if res.Replaced {
		t.Errorf("restore with no live environment says it replaced one: %+v", res)
	}
	if out := mustRun(t, m2, "k", "cat f; echo $KEPT; kf"); out != "kept\n1\nfn" {
		t.Errorf("restored: %q", out)
	}
}

// Past the size bound the new checkpoint is removed again and the error
// names the key and the bound; the checkpoints kept before stay, files and
// records. A name that is kept is replaced, the old copy removed once the
// new one is recorded.
func TestCheckpointBoundsLoseNothing(t *testing.T) {
	m, rm := copyManager(t, t.TempDir())
	mustRun(t, m, "k", "echo small > f")
	first, err := m.Checkpoint(context.Background(), "k", "small")
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, m, "k", "head -c 1200000 /dev/zero > big")
	_, err = m.Checkpoint(context.Background(), "k", "big", manager.WithCheckpointBounds(config.Checkpoints{MaxPerEnvironment: 5, MaxTotalMB: 1}))
	if !errors.Is(err, manager.ErrBound) || !strings.Contains(err.Error(), "checkpoints.max_total_mb (1)") || !strings.Contains(err.Error(), `"k"`) {
		t.Fatalf("past the size bound: %v", err)
	}
	if len(rm.ids) != 1 || rm.ids[0] == first.ID || exists(rm.ids[0]) {
		t.Errorf("the checkpoint past the bound was not removed (or the wrong one was): %v", rm.ids)
	}
	if !exists(first.ID) {
		t.Error("the checkpoint kept before the bound lost its copy")
	}
	list, _ := m.Checkpoints(context.Background(), "k")
	if len(list) != 1 || list[0].Name != "small" {
		t.Errorf("kept after the refused one: %+v", list)
	}
	again, err := m.Checkpoint(context.Background(), "k", "small")
	if err != nil || !again.Replaced || exists(first.ID) || !exists(again.ID) {
		t.Errorf("replacing small: %+v, %v (old copy there: %v)", again, err, exists(first.ID))
	}
}

// Bad input gets an error naming the value and what to do.
func TestForkBadInput(t *testing.T) {
	m, _ := copyManager(t, t.TempDir())
	mustRun(t, m, "a", "true")
	mustRun(t, m, "b", "true")
	ctx := context.Background()
	for _, c := range []struct {
		err  error
		want []string
	}{
		{first(m.Fork(ctx, "a", "a")), []string{`both "a"`}},
		{first(m.Fork(ctx, "none", "x")), []string{`no environment "none"`}},
		{first(m.Fork(ctx, "a", "b")), []string{`environment "b" exists`, "berth env rm b"}},
		{first(m.Checkpoint(ctx, "a", "x/y")), []string{`"x/y"`, "slash"}},
		{first(m.Checkpoint(ctx, "a", "")), []string{"empty"}},
		{first(m.Checkpoint(ctx, "a b", "x")), []string{`"a b"`}},
		{first(m.Restore(ctx, "a", "nope")), []string{`no checkpoint "nope"`, "berth env checkpoints a"}},
		{m.RemoveCheckpoint(ctx, "a", "nope"), []string{`no checkpoint "nope"`}},
	} {
		if c.err == nil {
			t.Errorf("no error; want one saying %q", c.want)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(c.err.Error(), w) {
				t.Errorf("error %q lacks %q", c.err, w)
			}
		}
	}
	if out := mustRun(t, m, "b", "echo alive"); out != "alive" {
		t.Errorf("the existing target after a refused fork: %q", out)
	}
}

func first[T any](_ T, err error) error { return err }

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
