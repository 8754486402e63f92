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

	once sync.Once
	done chan struct{}
	code int
	err  error

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
		ctx: ctx, cancel: cancel, done: make(chan struct{}),
	}
	p.stdin = &stdin{w: cp.Stdin, done: p.done, closed: ctx.Done(), why: p.waitErr}
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
		p.finish(code, err)
	}()
	go func() {
		select {
		case <-w.done:
			p.finish(-1, w.reason())
		case <-p.done:
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

func (p *process) finish(code int, err error) {
	p.once.Do(func() {
		p.code, p.err = code, err
		close(p.done)
	})
}

func (p *process) Stdin() io.WriteCloser { return p.stdin }
func (p *process) Stdout() io.Reader     { return p.out }

// Wait returns the exec's exit status (128+N after signal N).
func (p *process) Wait() (int, error) {
	<-p.done
	return p.code, p.err
}

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
	select {
	case <-p.done:
		if p.err != nil {
			return p.err
		}
		return fmt.Errorf("modal: the exec has exited (status %d): %w", p.code, io.ErrClosedPipe)
	default:
		return io.ErrClosedPipe
	}
}

// stdin serialises writes (the SDK's exec stdin tracks its offset without
// a lock) and does not let a write or Close outlive its process: the SDK
// writes to the command router with no deadline, and the router of a
// sandbox that died may never answer. Such a write is left behind (it
// ends when the sandbox is detached) and the caller gets the process's
// end as its error.
type stdin struct {
	mu     sync.Mutex
	w      io.WriteCloser
	done   <-chan struct{} // the process ended
	closed <-chan struct{} // the process was closed
	why    func() error
}

func (s *stdin) do(f func() (int, error)) (int, error) {
	type result struct {
		n   int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		n, err := f()
		ch <- result{n, err}
	}()
	select {
	case r := <-ch:
		return r.n, r.err
	case <-s.done:
	case <-s.closed:
	}
	// The write may have gone through just as the process ended.
	select {
	case r := <-ch:
		return r.n, r.err
	default:
		return 0, s.why()
	}
}

func (s *stdin) Write(b []byte) (int, error) {
	// A write left behind must not read the caller's buffer later.
	own := append([]byte(nil), b...)
	return s.do(func() (int, error) { return s.w.Write(own) })
}

func (s *stdin) Close() error {
	_, err := s.do(func() (int, error) { return 0, s.w.Close() })
	return err
}
