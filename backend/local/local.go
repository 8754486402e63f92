// Package local is the backend that runs commands on this machine. Every
// process it starts leads its own process group, so the session can kill a
// command's whole tree, and its environment is stripped of credentials.
// Through hostproc, berth makes itself non-dumpable before the first
// command (a command of the same user cannot read the credentials from
// berth's own /proc/PID/environ), passes no inherited descriptor on, and
// marks every process so that nothing it started outlives it, even when it
// is killed with SIGKILL.
package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/hostproc"
)

func init() {
	backend.Register(backend.Registration{
		Name:        "local",
		Description: "this machine, in a process group with credentials stripped from the environment",
		HostFS:      true,
		New: func(ctx context.Context, opts backend.Options) (backend.Backend, error) {
			return New(opts)
		},
		Doctor: func(ctx context.Context, opts backend.Options) backend.Fingerprint {
			sh := "sh"
			if p, err := exec.LookPath("bash"); err == nil {
				sh = p
			} else if _, err := exec.LookPath("sh"); err != nil {
				return backend.Fingerprint{Usable: false, Summary: "no sh or bash on PATH", Fix: "install bash or a POSIX sh"}
			}
			return backend.Fingerprint{Usable: true, Summary: "shell " + sh}
		},
	})
}

// Local runs processes on this machine.
type Local struct {
	dir    string
	env    []string
	closed atomic.Bool
}

// New returns a local backend. The working directory is Config.Cwd ("" or
// "." meaning berth's own working directory); a directory that no longer
// exists falls back to its nearest existing parent when a process starts.
func New(opts backend.Options) (*Local, error) {
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
			return nil, fmt.Errorf("local: expand %q: %w", dir, err)
		}
		dir = filepath.Join(home, dir[1:])
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("local: working directory %q: %w", dir, err)
	}
	return &Local{dir: abs, env: FilterEnv(os.Environ(), opts.Config.EnvPassthrough)}, nil
}

// Name implements backend.Backend.
func (l *Local) Name() string { return "local" }

// Dir is the backend's default working directory.
func (l *Local) Dir() string { return l.dir }

// Close implements backend.Backend. The local machine has nothing to tear
// down; later Starts are refused, as on every backend.
func (l *Local) Close(ctx context.Context) error {
	l.closed.Store(true)
	return nil
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
	p, err := hostproc.Start(cmd, spec.TTY)
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	return p, nil
}

// NativeFS implements backend.NativeFS: the environment is this machine's
// filesystem, seen as the user berth runs as.
func (l *Local) NativeFS() bool { return true }

var (
	_ backend.Backend  = (*Local)(nil)
	_ backend.NativeFS = (*Local)(nil)
)
