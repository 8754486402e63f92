// Package hostproc starts processes on this machine as backend.Process
// values: the one local-process starter shared by the local backend and by
// backends that drive a command-line tool here (apptainer exec, kubectl
// exec, ...), like Nomad's shared executor. Process groups, the terminal,
// merged output, the after-exit bound and the mapping of a fatal signal to
// 128+N are written once here, and so is what protects berth from the
// commands it starts and the machine from what they leave behind:
//
//   - berth makes itself non-dumpable (PR_SET_DUMPABLE 0, as ssh-agent does)
//     before its first child, so a command running as the same non-root user
//     cannot read berth's environment (/proc/<berth>/environ: the secrets
//     stripped from the command's own) or its memory;
//   - descriptors berth inherited without close-on-exec are marked
//     close-on-exec before every start, so a child gets only its stdio;
//   - every process gets procmark.OwnerVar=<berth pid>.<start time> in its
//     environment, which whatever it starts inherits, wherever it goes
//     (setsid, a double fork, nohup). A guardian process, started once,
//     waits for berth to go away — its stdin is a pipe only berth holds, so
//     it sees end of file even when berth is killed with SIGKILL — and then
//     kills every process carrying berth's mark. ReapOrphans does the same
//     for marks of berth processes that are gone (a guardian that was killed
//     too), and runs in the background at the first start.
//
// Limits: a command that clears its environment (env -i, a setuid program)
// or runs as another user drops out of reach of the mark; only processes
// in berth's PID namespace are reaped.
package hostproc

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/procmark"
	"github.com/creack/pty"
)

// Start starts cmd and returns it as a backend.Process.
//
// cmd's Stdin, Stdout, Stderr and SysProcAttr must be unset: Start owns
// them. Without tty the process leads its own process group (so a tree can
// be signalled at once) and its stdout and stderr share one pipe, merged in
// arrival order; with tty it gets a new session whose controlling terminal
// is a fresh pseudo-terminal carrying both directions. In both cases the
// process is sent SIGKILL if berth itself dies (PR_SET_PDEATHSIG), and
// Stdout ends at most backend.WaitDelay after Wait has returned, even when a
// descendant keeps the output open.
func Start(cmd *exec.Cmd, tty bool) (backend.Process, error) {
	return StartOn(nil, cmd, tty)
}

// Thread runs functions on one OS thread whose state — security
// restrictions, and the PR_SET_PDEATHSIG parent — the processes forked
// there inherit (a confine.Domain).
type Thread interface {
	Do(fn func()) error
}

// StartOn is Start with the fork made on thread t instead of berth's own
// fork thread: the process inherits t's restrictions and gets its death
// signal when t ends. A nil t is Start.
func StartOn(t Thread, cmd *exec.Cmd, tty bool) (backend.Process, error) {
	if cmd.Stdin != nil || cmd.Stdout != nil || cmd.Stderr != nil || cmd.SysProcAttr != nil {
		return nil, errors.New("hostproc: Start owns the command's stdio and SysProcAttr; leave them unset")
	}
	name := cmd.Path
	if len(cmd.Args) > 0 {
		name = cmd.Args[0]
	}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	// The descriptors are opened here, on the caller's thread: a
	// restricted thread may not be allowed to open a terminal.
	pr, err := prepare(cmd, name, tty)
	if err != nil {
		return nil, err
	}
	var p backend.Process
	fork := func() {
		cmd.Env = append(cmd.Env, procmark.OwnerVar+"="+Owner())
		closeInherited()
		p, err = pr.fork()
	}
	if t == nil {
		onForkThread(fork)
		return p, err
	}
	setupOnce()
	if terr := t.Do(fork); terr != nil {
		pr.abort()
		return nil, fmt.Errorf("hostproc: start %s: %w", name, terr)
	}
	return p, err
}

// forks carries start requests to the one goroutine that forks children.
var (
	forkOnce sync.Once
	forks    chan func()
)

// onForkThread runs fn on a goroutine locked to its OS thread for the life
// of the process. PR_SET_PDEATHSIG fires when the thread that forked the
// child exits, not the process; a thread that stays locked is never reused
// by another goroutine nor torn down by the runtime, so children die with
// berth and only then.
func onForkThread(fn func()) {
	setupOnce()
	done := make(chan struct{})
	forks <- func() { fn(); close(done) }
	<-done
}

// setupOnce prepares berth for its first child: it hardens berth, starts
// the guardian and the reaping of an earlier berth's leftovers, and the
// fork thread.
func setupOnce() {
	forkOnce.Do(func() {
		Harden()
		startGuardian()
		go func() {
			if n, err := ReapOrphans(); err != nil {
				slog.Debug("hostproc: reaping processes of an earlier berth", "err", err)
			} else if len(n) > 0 {
				slog.Info("hostproc: killed processes left by an earlier berth that is gone", "pids", n)
			}
		}()
		forks = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as berth
			for f := range forks {
				f()
			}
		}()
	})
}

// prepared is a command with its descriptors open, ready to fork.
type prepared struct {
	cmd  *exec.Cmd
	name string
	// with a terminal: the pty master and the terminal the child gets
	ptmx, tty *os.File
	// without: our ends of the stdin and output pipes, and the child's
	// output end
	stdin  io.WriteCloser
	pr, pw *os.File
}

func prepare(cmd *exec.Cmd, name string, tty bool) (*prepared, error) {
	if tty {
		ptmx, t, err := pty.Open()
		if err != nil {
			return nil, fmt.Errorf("hostproc: start %s with a pty: %w", name, err)
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = t, t, t
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Pdeathsig: syscall.SIGKILL}
		return &prepared{cmd: cmd, name: name, ptmx: ptmx, tty: t}, nil
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("hostproc: stdin pipe for %s: %w", name, err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		stdin.Close()
		return nil, fmt.Errorf("hostproc: output pipe for %s: %w", name, err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	return &prepared{cmd: cmd, name: name, stdin: stdin, pr: pr, pw: pw}, nil
}

// fork starts the prepared command on the calling thread.
func (p *prepared) fork() (backend.Process, error) {
	err := p.cmd.Start()
	if p.tty != nil {
		p.tty.Close()
		if err != nil {
			p.ptmx.Close()
			return nil, fmt.Errorf("hostproc: start %s with a pty: %w", p.name, err)
		}
		return &proc{cmd: p.cmd, stdin: p.ptmx, stdout: p.ptmx, out: boundedOutput{f: p.ptmx}}, nil
	}
	p.pw.Close()
	if err != nil {
		p.pr.Close()
		p.stdin.Close()
		return nil, fmt.Errorf("hostproc: start %s: %w", p.name, err)
	}
	return &proc{cmd: p.cmd, stdin: stdinPipe{p.stdin}, stdout: p.pr, out: boundedOutput{f: p.pr}}, nil
}

// abort releases the descriptors of a command that will not be started.
func (p *prepared) abort() {
	for _, f := range []*os.File{p.ptmx, p.tty, p.pr, p.pw} {
		if f != nil {
			f.Close()
		}
	}
	if p.stdin != nil {
		p.stdin.Close()
	}
}

// stdinPipe is a process's stdin pipe. os/exec closes it once the process
// is waited for, so a caller's own Close races Wait whenever the process
// exits by itself (`true` with no stdin to read): that Close finding the
// pipe already closed is not an error.
type stdinPipe struct{ io.WriteCloser }

func (s stdinPipe) Close() error {
	if err := s.WriteCloser.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return err
	}
	return nil
}

// proc is a process started by Start.
type proc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *os.File
	out    boundedOutput
	bound  sync.Once
}

func (p *proc) Stdin() io.WriteCloser { return p.stdin }

// Stdout reads the merged output; after the after-exit bound it reports
// io.EOF instead of the deadline error.
func (p *proc) Stdout() io.Reader { return &p.out }

// Wait returns when the process exits; the output pipe is a plain file, so
// a descendant holding it open does not delay Wait. It then arms the
// after-exit bound on the output.
func (p *proc) Wait() (int, error) {
	err := p.cmd.Wait()
	p.bound.Do(func() {
		p.out.exited.Store(time.Now().UnixNano())
		if p.stdout.SetReadDeadline(time.Now().Add(backend.WaitDelay)) != nil {
			// Not pollable: closing the file ends a blocked read instead.
			time.AfterFunc(backend.WaitDelay, func() { p.stdout.Close() })
		}
	})
	st := p.cmd.ProcessState
	if st == nil {
		return -1, fmt.Errorf("hostproc: wait: %w", err)
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return st.ExitCode(), nil
}

// Close releases the pipes; it does not signal the process.
func (p *proc) Close() error {
	p.stdin.Close()
	return p.stdout.Close()
}

// boundedOutput reads the output pipe. After the exit it keeps a read
// deadline WaitDelay ahead of the last output (MaxDrain after the exit at
// the latest), so output still flowing is delivered while a silent
// descendant holding the pipe cannot keep it open; the expired deadline
// reads as a clean end of stream.
type boundedOutput struct {
	f      *os.File
	exited atomic.Int64 // unix nanoseconds of the exit; 0 while running
}

func (r *boundedOutput) Read(b []byte) (int, error) {
	n, err := r.f.Read(b)
	ex := r.exited.Load()
	if ex == 0 {
		return n, err
	}
	limit := time.Unix(0, ex).Add(backend.MaxDrain)
	if errors.Is(err, os.ErrDeadlineExceeded) && time.Now().Before(limit) {
		// An expired deadline fails a read before looking at the pipe:
		// take what is already buffered before calling the stream ended.
		r.f.SetReadDeadline(time.Now().Add(time.Millisecond))
		n, err = r.f.Read(b)
	}
	if n > 0 && err == nil {
		r.f.SetReadDeadline(minTime(time.Now().Add(backend.WaitDelay), limit))
	}
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, os.ErrClosed) {
		err = io.EOF
	}
	return n, err
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
