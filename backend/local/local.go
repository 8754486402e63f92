// Package local is the backend that runs commands on this machine. Every
// process it starts leads its own process group, so the session can kill a
// command's whole tree, and its environment is stripped of credentials.
package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/a55dbaac/berth/backend"
	"github.com/creack/pty"
)

func init() {
	backend.Register(backend.Registration{
		Name:        "local",
		Description: "this machine, in a process group with credentials stripped from the environment",
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
	dir string
	env []string
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

// Close implements backend.Backend; the local machine has nothing to tear
// down.
func (l *Local) Close(ctx context.Context) error { return nil }

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
	dir := spec.Dir
	if dir == "" {
		dir = l.dir
	}
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Dir = existing(dir)
	cmd.Env = append(append([]string(nil), l.env...), spec.Env...)
	if spec.TTY {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
		f, err := pty.Start(cmd)
		if err != nil {
			return nil, fmt.Errorf("local: start %s with a pty: %w", spec.Argv[0], err)
		}
		return &proc{cmd: cmd, stdin: f, stdout: f, ptmx: f}, nil
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("local: stdin pipe: %w", err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("local: output pipe: %w", err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return nil, fmt.Errorf("local: start %s: %w", spec.Argv[0], err)
	}
	pw.Close()
	return &proc{cmd: cmd, stdin: stdin, stdout: pr}, nil
}

type proc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *os.File
	ptmx   *os.File
}

func (p *proc) Stdin() io.WriteCloser { return p.stdin }
func (p *proc) Stdout() io.Reader     { return p.stdout }

// Wait returns when the process exits; the output pipe is a plain file, so
// a descendant holding it open does not delay Wait.
func (p *proc) Wait() (int, error) {
	err := p.cmd.Wait()
	st := p.cmd.ProcessState
	if st == nil {
		return -1, fmt.Errorf("local: wait: %w", err)
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return st.ExitCode(), nil
}

func (p *proc) Close() error {
	p.stdin.Close()
	return p.stdout.Close()
}
