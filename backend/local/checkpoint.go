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
// that tree, and an environment made from one works in a fresh copy of it:
//
//	<home>/local/checkpoints/<key>.<name>.<random>/tree   a checkpoint
//	<home>-workspaces/<key>/                               a fork's workspace
//
// Checkpoints live in berth's home, which the kernel keeps out of every
// confined command's reach (read-only even where a writable tree holds
// it), so no environment can change one, and they survive restarts. A
// fork's workspace is written by the fork's commands, so it lives beside
// berth's home, not in it (the approval gate guards everything in berth's
// home as berth's own state): in a directory named after the home, which
// must lie in none of the environment's writable trees (else the
// environment refuses checkpoints, saying so), so that no environment can
// write another's files. It is kept until `berth env rm KEY` (EnvAdmin),
// and a later environment of the same key works in it again.
//
// The copies are made with reflinks (FICLONE) where the filesystem shares
// blocks, so a checkpoint of a large workspace costs metadata only, and
// byte by byte elsewhere (copyTree); berth's home must then be on the
// workspace's filesystem for the reflinks to apply. Unconfined local
// environments cannot be checkpointed: their files are the whole machine.
//
// What is not copied: the trees local_sandbox_writable lists (shared by the
// fork and its source), berth's home where the workspace holds it, and
// processes. A command still running in the background while the copy is
// made may leave a file half-written in it.

// The directories of berth's home the local backend keeps copies in.
func checkpointsRoot(home string) string { return filepath.Join(home, "local", "checkpoints") }
func workspacesRoot(home string) string {
	home = filepath.Clean(home)
	return filepath.Join(filepath.Dir(home), filepath.Base(home)+"-workspaces")
}

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
	key  string
	home string
	// origins are the workspaces this one stands in for (Relocate): the
	// checkpoint's source's, and the configured one (terminal.cwd), when
	// the environment works in a fork's workspace.
	origins  []string
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
		if cfgDir, err := workDir(opts); err == nil {
			f.origins = []string{cfgDir}
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
	f.origins = []string{cp.Meta["workspace"]}
	if cfgDir, err := workDir(opts); err == nil {
		f.origins = append(f.origins, cfgDir)
	}
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
	root := berthhome.RealPath(workspacesRoot(l.fork.home))
	own := berthhome.RealPath(l.dir)
	for _, w := range l.sb.conf.Writable {
		r := berthhome.RealPath(w)
		if r == berthhome.RealPath(l.sb.tmp) || r == own && berthhome.Within(own, root) {
			continue
		}
		if berthhome.Within(root, r) {
			return fmt.Sprintf("the directory of forks' workspaces %s lies in the writable tree %s, so this environment's commands could change other environments' files; set terminal.cwd to the project's directory (not one holding %s), keep it out of local_sandbox_writable, or move berth's home (BERTH_HOME)",
				workspacesRoot(l.fork.home), w, workspacesRoot(l.fork.home))
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
// checkpoint's source, or in the configured workspace (terminal.cwd), is
// the same path in this environment's copy.
func (l *Local) Relocate(p string) string {
	for _, o := range l.fork.origins {
		if o == "" || o == l.dir || o == "/" {
			continue
		}
		if p == o {
			return l.dir
		}
		if rel, ok := strings.CutPrefix(p, o+"/"); ok {
			return filepath.Join(l.dir, rel)
		}
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

// checkpointLine says, for berth doctor, where the workspace's checkpoints
// and forks go and whether their copies can be reflinks.
func checkpointLine(home, ws string) string {
	line := fmt.Sprintf("checkpoints (berth env fork, checkpoint, restore): copies of the workspace in %s, forks' workspaces in %s", checkpointsRoot(home), workspacesRoot(home))
	var a, b unix.Stat_t
	if err := unix.Stat(ws, &a); err != nil {
		return line
	}
	if err := unix.Stat(home, &b); err != nil {
		return line + "; berth's home does not exist yet"
	}
	if a.Dev != b.Dev {
		return line + "; the workspace and berth's home are on different filesystems, so every byte is copied (put BERTH_HOME on the workspace's filesystem for reflinks)"
	}
	if reflinks(home) {
		return line + "; reflinks: yes (the copies share the workspace's blocks)"
	}
	return line + "; reflinks: no (this filesystem copies every byte: XFS with reflink=1 or btrfs would not)"
}

// reflinks reports whether dir's filesystem clones a file (FICLONE).
func reflinks(dir string) bool {
	src, err := os.CreateTemp(dir, ".berth-reflink-")
	if err != nil {
		return false
	}
	defer os.Remove(src.Name())
	defer src.Close()
	if _, err := src.WriteString("berth"); err != nil {
		return false
	}
	dst, err := os.CreateTemp(dir, ".berth-reflink-")
	if err != nil {
		return false
	}
	defer os.Remove(dst.Name())
	defer dst.Close()
	return unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())) == nil
}
