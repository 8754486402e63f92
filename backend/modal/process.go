package modal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/a55dbaac/berth/backend"
	modal "github.com/modal-labs/libmodal/modal-go"
)

// process is one Sandbox.Exec: stdin written through the command router,
// stdout and stderr streamed from it and merged here in arrival order.
type process struct {
	cp     *modal.ContainerProcess
	sb     *modal.Sandbox
	w      *watcher
	stdin  *stdin
	out    *io.PipeReader
	pw     *io.PipeWriter
	ctx    context.Context
	cancel context.CancelFunc

	exit backend.ExitStatus

	closeOnce sync.Once
}

// newProcess wraps cp, an exec in sb, which w follows. The exit status is
// awaited from the start; when the sandbox finishes first (terminated,
// timed out) Wait reports that at once instead of waiting for a router
// that may never answer. An exec that reports 137 (SIGKILL) is checked
// against its sandbox the same way, so an exec killed with its sandbox is
// always an error, whichever report comes first. The result honours the
// after-exit bound of the Process contract (backend.WithWaitDelay).
func newProcess(cp *modal.ContainerProcess, sb *modal.Sandbox, w *watcher) backend.Process {
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	p := &process{
		cp: cp, sb: sb, w: w, out: pr, pw: pw,
		ctx: ctx, cancel: cancel,
	}
	p.stdin = newStdin(cp.Stdin, p, w.done)
	var mu sync.Mutex // one writer into the pipe at a time
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, r := range []io.Reader{cp.Stdout, cp.Stderr} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 32<<10)
			for {
				n, err := r.Read(buf)
				if n > 0 {
					mu.Lock()
					_, werr := pw.Write(buf[:n])
					mu.Unlock()
					if werr != nil {
						return
					}
				}
				if err != nil {
					if err != io.EOF {
						errs[i] = err
					}
					return
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.Close()
	}()
	go func() {
		code, err := cp.Wait(ctx)
		switch {
		case err != nil:
			code = -1
			err = fmt.Errorf("modal: exit status of an exec in sandbox %s: %w", sb.SandboxID, err)
		case code == 128+9 && p.sandboxFinished():
			code, err = -1, w.reason()
		}
		p.exit.Set(code, err)
	}()
	go func() {
		select {
		case <-w.done:
			p.exit.Set(-1, w.reason())
		case <-p.exit.Done():
		case <-ctx.Done():
		}
	}()
	return backend.WithWaitDelay(p, backend.WaitDelay)
}

// sandboxFinished asks whether the exec's sandbox has finished, for an
// exec that was killed: the watcher may not have heard yet.
func (p *process) sandboxFinished() bool {
	if p.w.finished() {
		return true
	}
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	code, err := p.sb.Poll(ctx)
	switch {
	case err == nil:
		return code != nil
	case isNotFound(err), errors.As(err, new(modal.ClientClosedError)):
		return true
	}
	return false
}

func (p *process) Stdin() io.WriteCloser { return p.stdin }
func (p *process) Stdout() io.Reader     { return p.out }

// Wait returns the exec's exit status (128+N after signal N).
func (p *process) Wait() (int, error) { return p.exit.Wait() }

// Close stops streaming the exec's output and waiting for it. The exec
// itself keeps running in the sandbox; the session kills trees itself.
func (p *process) Close() error {
	p.closeOnce.Do(func() {
		p.cancel()
		p.cp.Stdout.Close()
		p.cp.Stderr.Close()
		p.pw.CloseWithError(io.ErrClosedPipe)
	})
	return nil
}

// waitErr is why writing to a process that ended cannot go on.
func (p *process) waitErr() error {
	if !p.exit.Exited() {
		return io.ErrClosedPipe
	}
	code, err := p.exit.Wait()
	if err != nil {
		return err
	}
	return fmt.Errorf("modal: the exec has exited (status %d): %w", code, io.ErrClosedPipe)
}

// exited reports whether the process has ended with an exit status the
// router gave (not with its sandbox, nor with an unanswered Wait): its
// router is alive and answers the stdin calls still in flight.
func (p *process) exited() bool {
	if !p.exit.Exited() {
		return false
	}
	_, err := p.exit.Wait()
	return err == nil
}

// ended reports whether the process has ended, however.
func (p *process) ended() bool { return p.exit.Exited() }

// stdin serialises writes (the SDK's exec stdin tracks its offset without
// a lock) and does not let a write or Close outlive its process: the SDK
// writes to the command router with no deadline, and the router of a
// sandbox that died may never answer. Such a write is left behind (it
// ends when the sandbox is detached) and the caller gets the process's
// end as its error.
//
// What a call reports never depends on whether the router's answer to it
// or the exec's exit status arrives first, as a pipe's would not:
//   - A write after the process ended is refused without being sent.
//   - A write in flight when the process exits gets the router's answer
//     (the router that reported the exit is alive): delivered is success,
//     refused is the process's end. Only when the sandbox finished or the
//     process was closed is it left behind with the process's end as its
//     error.
//   - Closing stdin of a process that exited (before or during the call) is
//     success: the end of input cannot matter to it any more, just as
//     closing a pipe whose reader is gone succeeds. The end of input is
//     still sent, for a descendant that may hold the exec's stdin.
type stdin struct {
	mu     sync.Mutex
	w      io.WriteCloser
	done   <-chan struct{} // the process ended
	closed <-chan struct{} // the process was closed
	gone   <-chan struct{} // its sandbox finished
	exited func() bool     // the process ended with a status from its router
	ended  func() bool     // the process ended, however
	why    func() error
}

// newStdin is p's stdin, writing to w (the SDK's); gone is closed when
// p's sandbox has finished.
func newStdin(w io.WriteCloser, p *process, gone <-chan struct{}) *stdin {
	return &stdin{
		w: w, done: p.exit.Done(), closed: p.ctx.Done(), gone: gone,
		exited: p.exited, ended: p.ended, why: p.waitErr,
	}
}

type stdinResult struct {
	n   int
	err error
}

// send runs f (one call to the router) behind the lock, in the background
// so that the caller need not wait for an answer that may never come.
func (s *stdin) send(f func() (int, error)) <-chan stdinResult {
	ch := make(chan stdinResult, 1)
	go func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		n, err := f()
		ch <- stdinResult{n, err}
	}()
	return ch
}

func (s *stdin) Write(b []byte) (int, error) {
	if s.ended() {
		return 0, s.why()
	}
	// A write left behind must not read the caller's buffer later.
	own := append([]byte(nil), b...)
	ch := s.send(func() (int, error) { return s.w.Write(own) })
	select {
	case r := <-ch:
		if r.err != nil && s.ended() {
			return 0, s.why()
		}
		return r.n, r.err
	case <-s.done:
		if s.exited() {
			select {
			case r := <-ch:
				if r.err != nil {
					return 0, s.why()
				}
				return r.n, nil
			case <-s.gone:
			case <-s.closed:
			}
		}
	case <-s.closed:
	}
	// Left behind, unless its answer came just now.
	select {
	case r := <-ch:
		if r.err != nil && s.ended() {
			return 0, s.why()
		}
		return r.n, r.err
	default:
		return 0, s.why()
	}
}

func (s *stdin) Close() error {
	if s.ended() && !s.exited() {
		return s.why()
	}
	ch := s.send(func() (int, error) { return 0, s.w.Close() })
	select {
	case r := <-ch:
		if r.err != nil && s.exited() {
			return nil
		}
		return r.err
	case <-s.done:
	case <-s.closed:
	}
	if s.exited() {
		return nil
	}
	// Left behind, unless its answer came just now.
	select {
	case r := <-ch:
		return r.err
	default:
		return s.why()
	}
}
