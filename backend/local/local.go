// Package local is the backend that runs commands on this machine. Every
// process it starts leads its own process group, so the session can kill a
// command's whole tree, and its environment is stripped of credentials.
// Through hostproc, berth makes itself non-dumpable before the first
// command (a command of the same user cannot read the credentials from
// berth's own /proc/PID/environ), passes no inherited descriptor on, and
// marks every process so that nothing it started outlives it, even when it
// is killed with SIGKILL.
//
// With terminal.local_sandbox: workspace, every process of the environment
// is forked from a confine.Domain: the kernel lets it write only under the
// working directory, its private $TMPDIR and local_sandbox_writable, and
// signal only the environment's processes, however the command is spelled
// (README.md in this directory). The backend then reports
// backend.IsolationWorkspace and its backend.Confinement, and the file
// tools write through the confined shell (NativeFS is false).
package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync/atomic"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/hostproc"
	"github.com/a55dbaac/berth/backend/local/confine"
)

func init() {
	backend.Register(backend.Registration{
		Name:        "local",
		Description: "this machine, in a process group with credentials stripped from the environment; optionally confined by the kernel (local_sandbox)",
		HostFS:      true,
		Keys:        configKeys,
		Envs:        envAdmin{},
		Checkpoints: checkpointAdmin{},
		New: func(ctx context.Context, opts backend.Options) (backend.Backend, error) {
			return New(opts)
		},
		Doctor: doctor,
	})
}

// Local runs processes on this machine.
type Local struct {
	dir    string
	env    []string
	sb     *sandbox // nil: not confined
	fork   fork     // checkpoints (checkpoint.go)
	closed atomic.Bool
}

// New returns a local backend. The working directory is Config.Cwd ("" or
// "." meaning berth's own working directory); a directory that no longer
// exists falls back to its nearest existing parent when a process starts.
// In workspace mode, an environment made from a checkpoint (Options.From)
// works in a fresh copy of it in berth's home instead, and so does a later
// environment of the same key (checkpoint.go).
func New(opts backend.Options) (*Local, error) {
	abs, err := workDir(opts)
	if err != nil {
		return nil, err
	}
	l := &Local{dir: abs, env: FilterEnv(os.Environ(), opts.Config.EnvPassthrough),
		fork: fork{key: opts.Key, home: opts.Home, progress: opts.Progress}}
	ws, made, err := workspaceFor(context.Background(), opts, &l.fork)
	if err != nil {
		return nil, err
	}
	if ws != "" {
		l.dir, abs = ws, ws
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	sb, err := newSandbox(abs, opts, log)
	if err != nil {
		if made {
			os.RemoveAll(ws)
		}
		l.releaseLock()
		return nil, err
	}
	if sb != nil {
		l.sb = sb
		l.env = withTmp(l.env, sb.tmp)
	}
	return l, nil
}

// workDir is the backend's working directory, absolute: Config.Cwd, ""
// or "." meaning berth's own, a leading ~ expanded.
func workDir(opts backend.Options) (string, error) {
	dir := opts.Config.Cwd
	if dir == "" || dir == "." {
		wd, err := os.Getwd()
		if err != nil {
			wd = "/"
		}
		dir = wd
	}
	if dir == "~" || len(dir) > 1 && dir[:2] == "~/" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("local: expand %q: %w", dir, err)
		}
		dir = filepath.Join(home, dir[1:])
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("local: working directory %q: %w", dir, err)
	}
	return abs, nil
}

// Name implements backend.Backend.
func (l *Local) Name() string { return "local" }

// Dir is the backend's default working directory.
func (l *Local) Dir() string { return l.dir }

// Close implements backend.Backend. The local machine has nothing to tear
// down; later Starts are refused, as on every backend.
func (l *Local) Close(ctx context.Context) error {
	if !l.closed.Swap(true) {
		if l.sb != nil {
			l.sb.close()
		}
		l.releaseLock()
	}
	return nil
}

// releaseLock lets go of the fork workspace's lock, if the environment
// holds one.
func (l *Local) releaseLock() {
	if l.fork.lock != nil {
		l.fork.lock.Close()
		l.fork.lock = nil
	}
}

// ErrClosed is returned by Start after Close.
var ErrClosed = errors.New("local: backend closed")

// existing returns dir or its nearest existing parent.
func existing(dir string) string {
	for {
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "/"
		}
		dir = parent
	}
}

// Start implements backend.Backend.
func (l *Local) Start(ctx context.Context, spec backend.ProcSpec) (backend.Process, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("local: empty argv")
	}
	if l.closed.Load() {
		return nil, ErrClosed
	}
	dir := spec.Dir
	if dir == "" {
		dir = l.dir
	}
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Dir = existing(dir)
	cmd.Env = append(append([]string(nil), l.env...), spec.Env...)
	var on hostproc.Thread
	if l.sb != nil {
		on = l.sb.domain
	}
	p, err := hostproc.StartOn(on, cmd, spec.TTY)
	if err != nil {
		if errors.Is(err, confine.ErrClosed) {
			return nil, ErrClosed
		}
		return nil, fmt.Errorf("local: %w", err)
	}
	return p, nil
}

// Capabilities implements backend.Capable. Unconfined, the environment is
// this machine's filesystem seen as the user berth runs as (NativeFS).
// Under workspace confinement NativeFS is false, so that the file tools
// write through the confined shell, never from berth's own unconfined
// process; the isolation is IsolationWorkspace when the kernel confines
// the environment's writes (and no daemon can write for it over a unix
// socket), with what the kernel enforces in Confinement.
func (l *Local) Capabilities() backend.Capabilities {
	if l.sb == nil {
		return backend.Capabilities{NativeFS: true, NoCheckpoint: noCheckpointUnconfined}
	}
	c := backend.Capabilities{Confinement: l.sb.conf, Checkpoint: checkpointHow}
	if why := l.whyNoCheckpoint(); why != "" {
		c.Checkpoint, c.NoCheckpoint = "", why
	}
	c.Confinement.Writable = slices.Clone(c.Confinement.Writable)
	if l.sb.isolated {
		c.Isolation = backend.IsolationWorkspace
	}
	return c
}

// TempDir is the environment's private temporary directory under workspace
// confinement ($TMPDIR of its commands), "" otherwise.
func (l *Local) TempDir() string {
	if l.sb == nil {
		return ""
	}
	return l.sb.tmp
}

var (
	_ backend.Backend = (*Local)(nil)
	_ backend.Capable = (*Local)(nil)
)
