package modal

import (
	"context"
	"io"
	"sync"

	"github.com/a55dbaac/berth/backend"
	modal "github.com/modal-labs/libmodal/modal-go"
)

// process is one Sandbox.Exec: stdin written through the command router,
// stdout and stderr streamed from it and merged here in arrival order.
type process struct {
	cp     *modal.ContainerProcess
	stdin  *stdin
	out    *io.PipeReader
	pw     *io.PipeWriter
	cancel context.CancelFunc

	waitOnce sync.Once
	code     int
	err      error

	closeOnce sync.Once
}

// newProcess wraps cp. The result honours the after-exit bound of the
// Process contract (backend.WithWaitDelay): a descendant holding the
// exec's output open cannot keep Stdout open past WaitDelay after Wait.
func newProcess(cp *modal.ContainerProcess) backend.Process {
	pr, pw := io.Pipe()
	p := &process{cp: cp, stdin: &stdin{w: cp.Stdin}, out: pr, pw: pw}
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
		pw.CloseWithError(errorsJoinFirst(errs)) // nil: io.EOF
	}()
	return backend.WithWaitDelay(p, backend.WaitDelay)
}

func errorsJoinFirst(errs []error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func (p *process) Stdin() io.WriteCloser { return p.stdin }
func (p *process) Stdout() io.Reader     { return p.out }

// Wait returns the exec's exit status (128+N after signal N).
func (p *process) Wait() (int, error) {
	p.waitOnce.Do(func() {
		p.code, p.err = p.cp.Wait(context.Background())
		if p.err != nil {
			p.code = -1
		}
	})
	return p.code, p.err
}

// Close stops streaming the exec's output. The exec itself keeps running in
// the sandbox; the session kills trees itself.
func (p *process) Close() error {
	p.closeOnce.Do(func() {
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
