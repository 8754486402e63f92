package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/berthhome"
)

// Checkpoints of a local environment (berth env fork, checkpoint,
// restore; docs/fork.md). In workspace mode an environment's files are its
// workspace, the tree its commands may write: a checkpoint is a copy of
// that tree, and an environment made from one works in a fresh copy of it.
// Both live in berth's home, which the kernel keeps out of every confined
// command's reach (read-only even when a writable tree holds it), so no
// environment can change a checkpoint or another's copy, and they survive
// restarts:
//
//	<home>/local/checkpoints/<key>.<name>.<random>/tree   a checkpoint
//	<home>/local/workspaces/<key>/                         a fork's workspace
//
// The copies are made with reflinks (FICLONE) where the filesystem shares
// blocks, so a checkpoint of a large workspace costs metadata only, and
// byte by byte elsewhere (copyTree); berth's home must then be on the
// workspace's filesystem for the reflinks to apply. A fork's workspace is
// kept until `berth env rm KEY` (EnvAdmin), and a later environment of the
// same key works in it again. Unconfined local environments cannot be
// checkpointed: their files are the whole machine.
//
// What is not copied: the trees local_sandbox_writable lists (shared by the
// fork and its source), berth's home where the workspace holds it, and
// processes. A command still running in the background while the copy is
// made may leave a file half-written in it.

// The directories of berth's home the local backend keeps copies in.
func checkpointsRoot(home string) string { return filepath.Join(home, "local", "checkpoints") }
func workspacesRoot(home string) string  { return filepath.Join(home, "local", "workspaces") }

// keyPattern is what a key must be to name a fork's workspace.
var keyPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// noCheckpointUnconfined is why an unconfined environment refuses.
const noCheckpointUnconfined = "an unconfined local environment cannot be checkpointed: its files are the whole machine, which berth cannot copy; " +
	"with terminal.local_sandbox: workspace its files are the workspace (terminal.cwd), which it copies"

// checkpointHow is Capabilities.Checkpoint of a workspace-mode environment.
const checkpointHow = "workspace copied into berth's home, with reflinks where the filesystem has them (plain copies elsewhere); local_sandbox_writable trees are shared, not copied"

// fork is what a local environment knows about checkpoints: where berth's
// home is, the workspace it was made from, and the lock that says a
// fork's workspace is in use.
type fork struct {
	key      string
	home     string
	origin   string   // the workspace of the checkpoint's source (Relocate), "" if none
	lock     *os.File // flock-ed while the environment uses a fork's workspace
	why      string   // Capabilities.NoCheckpoint, "" when it can
	progress func(backend.Event)
}

// forkWorkspace returns where key's fork workspace is.
func forkWorkspace(home, key string) string { return filepath.Join(workspacesRoot(home), key) }

// lockPath is the lock file of key's fork workspace (beside it, so that
// commands never see it).
func lockPath(home, key string) string { return filepath.Join(workspacesRoot(home), "."+key+".lock") }

// privateDir makes dir (and its parents) with mode 0700.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("local: %w", err)
	}
	return nil
}

// takeLock flock-s key's workspace lock, failing at once when another
// environment holds it.
func takeLock(home, key string) (*os.File, error) {
	if err := privateDir(workspacesRoot(home)); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(lockPath(home, key), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("local: environment %q's workspace %s is in use by a live environment (another berth, or this one): close it first (berth env rm %s)", key, forkWorkspace(home, key), key)
		}
		return nil, fmt.Errorf("local: lock %s: %w", lockPath(home, key), err)
	}
	return f, nil
}

// workspaceFor decides an environment's workspace when checkpoints are in
// play: a fresh copy of opts.From (a fork or a restore), or the fork
// workspace key already has in berth's home; "" keeps the configured one.
// made says the workspace was made here (so a failed start removes it).
func workspaceFor(ctx context.Context, opts backend.Options, f *fork) (dir string, made bool, err error) {
	workspace := opts.Config.String(keySandbox) == SandboxWorkspace
	if opts.From == nil {
		if !workspace || f.home == "" || !keyPattern.MatchString(f.key) {
			return "", false, nil
		}
		ws := forkWorkspace(f.home, f.key)
		if st, err := os.Stat(ws); err != nil || !st.IsDir() {
			return "", false, nil
		}
		if f.lock, err = takeLock(f.home, f.key); err != nil {
			return "", false, err
		}
		return ws, false, nil
	}
	cp := opts.From
	switch {
	case cp.Backend != "" && cp.Backend != "local":
		return "", false, fmt.Errorf("local: checkpoint %s was made by the %s backend, not local", cp.ID, cp.Backend)
	case !workspace:
		return "", false, fmt.Errorf("local: an environment made from a checkpoint needs terminal.local_sandbox: workspace (its files are a workspace); %s", noCheckpointUnconfined)
	case f.home == "":
		return "", false, errors.New("local: an environment made from a checkpoint needs berth's home (backend.Options.Home), where its workspace is kept")
	case !keyPattern.MatchString(f.key):
		return "", false, fmt.Errorf("local: environment key %q cannot name a workspace in berth's home: use letters, digits, '.', '-' and '_'", f.key)
	}
	tree, err := checkpointTree(f.home, cp)
	if err != nil {
		return "", false, err
	}
	f.origin = cp.Meta["workspace"]
	if f.lock, err = takeLock(f.home, f.key); err != nil {
		return "", false, err
	}
	ws := forkWorkspace(f.home, f.key)
	// The key's old workspace, which no live environment uses (the lock),
	// is the one this environment replaces (a restore).
	if err := os.RemoveAll(ws); err != nil {
		return "", false, fmt.Errorf("local: remove %s, the workspace this environment replaces: %w", ws, err)
	}
	if cp.Name == "" {
		// A fork's checkpoint is removed once its fork is made: its copy
		// becomes the fork's workspace as it is.
		if err := os.Rename(tree, ws); err == nil {
			return ws, true, nil
		}
	}
	step := backend.Options{Progress: f.progress}.Begin("copying checkpoint "+checkpointLabel(cp)+" into "+ws, "bytes")
	_, err = copyTree(ctx, tree, ws, nil, func(n int64) { step.Update(n, cp.Size) })
	step.End(err)
	if err != nil {
		os.RemoveAll(ws)
		return "", false, fmt.Errorf("local: %w", err)
	}
	return ws, true, nil
}

// checkpointLabel names cp in messages.
func checkpointLabel(cp *backend.Checkpoint) string {
	if cp.Name != "" {
		return cp.Name + " of " + cp.Key
	}
	return "of " + cp.Key
}

// checkpointTree returns the copied tree of cp, refusing a checkpoint
// that is not in berth's home (a damaged or forged record).
func checkpointTree(home string, cp *backend.Checkpoint) (string, error) {
	root := checkpointsRoot(home)
	dir := filepath.Clean(cp.ID)
	if filepath.Dir(dir) != root {
		return "", fmt.Errorf("local: checkpoint %q is not in %s: berth makes environments only from its own checkpoints", cp.ID, root)
	}
	tree := filepath.Join(dir, "tree")
	if st, err := os.Lstat(tree); err != nil || !st.IsDir() {
		return "", fmt.Errorf("local: checkpoint %s has no copy of a workspace (%s): it was removed", checkpointLabel(cp), tree)
	}
	return tree, nil
}

// whyNoCheckpoint says why a workspace-mode environment cannot be
// checkpointed, "" when it can.
func (l *Local) whyNoCheckpoint() string {
	if l.sb == nil {
		return noCheckpointUnconfined
	}
	if l.fork.home == "" {
		return "berth's home is not known (backend.Options.Home), and the copies are kept there"
	}
	home := berthhome.RealPath(l.fork.home)
	for _, w := range l.sb.conf.Writable {
		if r := berthhome.RealPath(w); r != berthhome.RealPath(l.dir) && r != berthhome.RealPath(l.sb.tmp) && berthhome.Within(home, r) {
			return fmt.Sprintf("berth's home %s lies in the writable tree %s, where workspace mode keeps it read-only, so a fork's workspace kept there could not be written; move berth's home out of local_sandbox_writable (BERTH_HOME)", l.fork.home, w)
		}
	}
	return ""
}

// Checkpoint implements backend.Checkpointer: it copies the workspace
// into berth's home (see copyTree: reflinks where the filesystem has
// them), leaving out berth's home when the workspace holds it. The
// environment keeps running.
func (l *Local) Checkpoint(ctx context.Context, name string) (backend.Checkpoint, error) {
	if why := l.whyNoCheckpoint(); why != "" {
		return backend.Checkpoint{}, errors.New("local: " + why)
	}
	if l.closed.Load() {
		return backend.Checkpoint{}, ErrClosed
	}
	root := checkpointsRoot(l.fork.home)
	if err := privateDir(root); err != nil {
		return backend.Checkpoint{}, err
	}
	label := name
	if label == "" {
		label = "fork"
	}
	prefix := "env"
	if keyPattern.MatchString(l.fork.key) {
		prefix = l.fork.key
	}
	dir, err := os.MkdirTemp(root, prefix+"."+label+".")
	if err != nil {
		return backend.Checkpoint{}, fmt.Errorf("local: %w", err)
	}
	// berth's home is no part of the environment's files, also where the
	// workspace holds it (where the kernel keeps it read-only).
	var skip func(string) bool
	if home := berthhome.RealPath(l.fork.home); berthhome.Within(home, berthhome.RealPath(l.dir)) {
		skip = func(p string) bool { return berthhome.Within(berthhome.RealPath(p), home) }
	}
	step := backend.Options{Progress: l.fork.progress}.Begin("copying workspace "+l.dir, "bytes")
	started := time.Now()
	st, err := copyTree(ctx, l.dir, filepath.Join(dir, "tree"), skip, func(n int64) { step.Update(n, 0) })
	step.End(err)
	if err != nil {
		os.RemoveAll(dir)
		return backend.Checkpoint{}, fmt.Errorf("local: checkpoint of %s: %w", l.dir, err)
	}
	// The marks of a finished copy and of a fork's transient one: the
	// orphan sweep (Prune) takes a directory without the first, or with
	// the second, for the leftover of a crash.
	marks := []string{"done"}
	if name == "" {
		marks = append(marks, "transient")
	}
	for _, m := range marks {
		if err := os.WriteFile(filepath.Join(dir, m), nil, 0o600); err != nil {
			os.RemoveAll(dir)
			return backend.Checkpoint{}, fmt.Errorf("local: %w", err)
		}
	}
	return backend.Checkpoint{
		Backend: "local", Key: l.fork.key, Name: name, ID: dir, Size: st.Bytes, Created: time.Now(),
		Meta: map[string]string{
			"workspace": l.dir, "files": strconv.Itoa(st.Files), "cloned": strconv.Itoa(st.Cloned),
			"copy_ms": strconv.FormatInt(time.Since(started).Milliseconds(), 10),
		},
	}, nil
}

// Relocate implements backend.Relocator: a path in the workspace of the
// checkpoint's source is the same path in this environment's copy.
func (l *Local) Relocate(p string) string {
	o := l.fork.origin
	if o == "" || o == l.dir {
		return p
	}
	if p == o {
		return l.dir
	}
	if rel, ok := strings.CutPrefix(p, o+"/"); ok {
		return filepath.Join(l.dir, rel)
	}
	return p
}

// checkpointAdmin removes local checkpoints (Registration.Checkpoints).
type checkpointAdmin struct{}

// homeOf is berth's home of opts.
func homeOf(opts backend.Options) (string, error) {
	if opts.Home != "" {
		return opts.Home, nil
	}
	return berthhome.Dir(opts.Getenv)
}

// Remove implements backend.CheckpointAdmin: it deletes the copy, which
// only ever lies in berth's home.
func (checkpointAdmin) Remove(ctx context.Context, opts backend.Options, cp backend.Checkpoint) error {
	home, err := homeOf(opts)
	if err != nil {
		return fmt.Errorf("local: %w", err)
	}
	root := checkpointsRoot(home)
	dir := filepath.Clean(cp.ID)
	if filepath.Dir(dir) != root {
		return fmt.Errorf("local: checkpoint %q is not in %s; berth removes only its own copies", cp.ID, root)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("local: remove checkpoint %s: %w", dir, err)
	}
	return nil
}

// envAdmin lists and removes the fork workspaces kept in berth's home
// (Registration.Envs): berth env ls, rm and prune.
type envAdmin struct{}

// List implements backend.EnvAdmin.
func (envAdmin) List(ctx context.Context, opts backend.Options) ([]backend.EnvInfo, error) {
	home, err := homeOf(opts)
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	ents, err := os.ReadDir(workspacesRoot(home))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	var out []backend.EnvInfo
	for _, e := range ents {
		if !e.IsDir() || !keyPattern.MatchString(e.Name()) {
			continue
		}
		info := backend.EnvInfo{Backend: "local", Key: e.Name(), State: "kept", ID: filepath.Join(workspacesRoot(home), e.Name()), Persistent: true}
		if fi, err := e.Info(); err == nil {
			info.Created = fi.ModTime()
		}
		if inUse(home, e.Name()) {
			info.State = "running"
		}
		out = append(out, info)
	}
	return out, nil
}

// inUse reports whether a live environment holds key's workspace lock.
func inUse(home, key string) bool {
	f, err := os.OpenFile(lockPath(home, key), os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return errors.Is(err, unix.EWOULDBLOCK)
	}
	return false
}

// Remove implements backend.EnvAdmin: it deletes key's fork workspace
// (the user's own workspace, terminal.cwd, is never touched).
func (envAdmin) Remove(ctx context.Context, opts backend.Options, key string) error {
	if !keyPattern.MatchString(key) {
		return nil
	}
	home, err := homeOf(opts)
	if err != nil {
		return fmt.Errorf("local: %w", err)
	}
	if err := os.RemoveAll(forkWorkspace(home, key)); err != nil {
		return fmt.Errorf("local: remove the workspace of %q: %w", key, err)
	}
	os.Remove(lockPath(home, key))
	return nil
}

// Prune implements backend.EnvAdmin: fork workspaces no live environment
// uses and not changed (at their top) for longer than maxAge go, and so
// do the leftovers of checkpoints that never finished (a crash in the
// middle of a copy) and of forks' transient ones.
func (a envAdmin) Prune(ctx context.Context, opts backend.Options, maxAge time.Duration) ([]string, error) {
	home, err := homeOf(opts)
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	envs, err := a.List(ctx, opts)
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, e := range envs {
		if e.State == "running" || time.Since(e.Created) <= maxAge {
			continue
		}
		if err := a.Remove(ctx, opts, e.Key); err != nil {
			return removed, err
		}
		removed = append(removed, e.Key)
	}
	ents, _ := os.ReadDir(checkpointsRoot(home))
	for _, e := range ents {
		dir := filepath.Join(checkpointsRoot(home), e.Name())
		fi, err := e.Info()
		if err != nil || !e.IsDir() || time.Since(fi.ModTime()) <= maxAge {
			continue
		}
		_, doneErr := os.Stat(filepath.Join(dir, "done"))
		_, transientErr := os.Stat(filepath.Join(dir, "transient"))
		if doneErr != nil || transientErr == nil {
			os.RemoveAll(dir)
		}
	}
	return removed, nil
}

var (
	_ backend.Checkpointer    = (*Local)(nil)
	_ backend.Relocator       = (*Local)(nil)
	_ backend.CheckpointAdmin = checkpointAdmin{}
	_ backend.EnvAdmin        = envAdmin{}
)
