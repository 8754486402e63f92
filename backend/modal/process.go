package modal

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/a55dbaac/berth/backend"
	modal "github.com/modal-labs/libmodal/modal-go"
)

// pollEvery is how often a process whose output has ended, but whose exit
// status has not come, checks that its sandbox still runs.
const pollEvery = 2 * time.Second

// process is one Sandbox.Exec: stdin written through the command router,
// stdout and stderr streamed from it and merged here in arrival order.
type process struct {
	cp      *modal.ContainerProcess
	sb      *modal.Sandbox
	stdin   *stdin
	out     *io.PipeReader
	pw      *io.PipeWriter
	outDone chan struct{} // both output streams ended
	ctx     context.Context
	cancel  context.CancelFunc

	once sync.Once
	done chan struct{}
	code int
	err  error

	closeOnce sync.Once
}

// newProcess wraps cp, an exec in sb. The exit status is awaited from the
// start; if the exec's output has ended and its status does not come while
// the sandbox has finished (terminated, timed out), Wait reports that
// instead of waiting forever. The result honours the after-exit bound of
// the Process contract (backend.WithWaitDelay).
func newProcess(cp *modal.ContainerProcess, sb *modal.Sandbox) backend.Process {
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	p := &process{
		cp: cp, sb: sb, stdin: &stdin{w: cp.Stdin}, out: pr, pw: pw,
		outDone: make(chan struct{}), ctx: ctx, cancel: cancel, done: make(chan struct{}),
	}
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
		close(p.outDone)
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
		if err != nil {
			code = -1
			err = fmt.Errorf("modal: exit status of an exec in sandbox %s: %w", sb.SandboxID, err)
		}
		p.finish(code, err)
	}()
	go p.watch()
	return backend.WithWaitDelay(p, backend.WaitDelay)
}

func (p *process) finish(code int, err error) {
	p.once.Do(func() {
		p.code, p.err = code, err
		close(p.done)
	})
}

// watch ends Wait when the sandbox has finished under an exec whose status
// never arrived.
func (p *process) watch() {
	select {
	case <-p.outDone:
	case <-p.done:
		return
	case <-p.ctx.Done():
		return
	}
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
		code, err := p.sb.Poll(p.ctx)
		switch {
		case err == nil && code != nil:
			p.finish(-1, fmt.Errorf("modal: sandbox %s finished (status %d) before the exec's exit status was known", p.sb.SandboxID, *code))
			return
		case err != nil && isNotFound(err):
			p.finish(-1, fmt.Errorf("modal: sandbox %s is gone; the exec's exit status is unknown: %w", p.sb.SandboxID, err))
			return
		}
	}
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

// stdin serialises writes: the SDK's exec stdin tracks its offset without
// a lock.
type stdin struct {
	mu sync.Mutex
	w  io.WriteCloser
}

func (s *stdin) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

func (s *stdin) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Close()
}
