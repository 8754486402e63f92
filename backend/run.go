package backend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// WaitDelay is the after-exit bound of the Process contract: Stdout ends at
// most this long after Wait has returned, even when a descendant of the
// process keeps the stream open (a daemon started with `cmd &`). It plays
// the role of os/exec's Cmd.WaitDelay.
const WaitDelay = 2 * time.Second

// MaxDrain bounds how long output may keep flowing after the exit before
// Stdout is ended anyway (a descendant that keeps printing).
const MaxDrain = 15 * WaitDelay

// DrainThenClose arms the after-exit bound once the exit is known: it calls
// closeFn when no output has arrived for d (lastOutput reports when the
// last chunk did), or MaxDrain after the exit at the latest. Output
// still in flight when the exit is reported (a stream that lags behind the
// status, as over a network) is thus delivered, while a silent descendant
// holding the stream cannot keep it open.
func DrainThenClose(d time.Duration, lastOutput func() time.Time, closeFn func()) {
	exited := time.Now()
	var check func()
	check = func() {
		now := time.Now()
		quiet := now.Sub(lastOutput())
		switch {
		case quiet >= d || now.Sub(exited) >= MaxDrain:
			closeFn()
		default:
			time.AfterFunc(min(d-quiet, MaxDrain-now.Sub(exited)), check)
		}
	}
	time.AfterFunc(d, check)
}

// ErrOutputTooLong is returned (wrapped) by Output when a process printed
// more than the caller's limit.
var ErrOutputTooLong = errors.New("backend: output exceeded the limit")

// WithWaitDelay wraps a process whose output stream may outlive its exit
// (a pipe a descendant still holds, a stream the target closes late) so that
// Stdout ends once no output has arrived for d after Wait has returned (or
// MaxDrain after it at the latest), as the Process contract requires: the
// underlying process's client side is then closed. Backends that can bound
// their stream natively need not use it.
func WithWaitDelay(p Process, d time.Duration) Process {
	w := &waitDelayed{Process: p, delay: d}
	w.last.Store(time.Now().UnixNano())
	w.r, w.w = io.Pipe()
	go w.pump()
	return w
}

type waitDelayed struct {
	Process
	delay time.Duration
	r     *io.PipeReader
	w     *io.PipeWriter
	once  sync.Once
	last  atomic.Int64 // unix nanoseconds of the last output chunk
}

// pump copies the underlying output into the pipe the caller reads.
func (w *waitDelayed) pump() {
	_, err := io.Copy(stampWriter{w.w, &w.last}, w.Process.Stdout())
	w.w.CloseWithError(err) // nil means io.EOF for the reader
}

// stampWriter records when output last arrived.
type stampWriter struct {
	w    io.Writer
	last *atomic.Int64
}

func (s stampWriter) Write(p []byte) (int, error) {
	s.last.Store(time.Now().UnixNano())
	return s.w.Write(p)
}

func (w *waitDelayed) Stdout() io.Reader { return w.r }

// Wait waits for the underlying process, then arms the after-exit bound.
func (w *waitDelayed) Wait() (int, error) {
	code, err := w.Process.Wait()
	w.once.Do(func() {
		DrainThenClose(w.delay, func() time.Time { return time.Unix(0, w.last.Load()) }, func() {
			w.w.CloseWithError(io.EOF)
			w.Process.Close()
		})
	})
	return code, err
}

func (w *waitDelayed) Close() error {
	w.w.CloseWithError(io.EOF)
	return w.Process.Close()
}

// WaitContext waits for p like p.Wait, but gives up when ctx ends: it then
// closes the client side of p and returns ctx's error. The process inside
// the target is not killed (the session kills trees itself).
func WaitContext(ctx context.Context, p Process) (int, error) {
	type status struct {
		code int
		err  error
	}
	done := make(chan status, 1)
	go func() {
		code, err := p.Wait()
		done <- status{code, err}
	}()
	select {
	case st := <-done:
		return st.code, st.err
	case <-ctx.Done():
		p.Close()
		return -1, ctx.Err()
	}
}

// Output runs a process to completion in be — the run-to-completion helper
// every "start a helper, feed it stdin, collect its output, wait" caller
// shares, like os/exec's Cmd.Output. It sends stdin (nil: none) and closes
// it, collects stdout and stderr as merged by the backend (at most max
// bytes; max <= 0 means no limit), and returns them with the exit status.
//
// The error is non-nil when the process could not be started, its status
// could not be learnt, ctx ended first (the client side is closed, the
// process inside the target is left to the caller), or the output passed
// max (wrapping ErrOutputTooLong; the output kept so far is returned). A
// non-zero exit status is not an error: callers decide what it means.
func Output(ctx context.Context, be Backend, spec ProcSpec, stdin io.Reader, max int) ([]byte, int, error) {
	p, err := be.Start(ctx, spec)
	if err != nil {
		return nil, -1, err
	}
	defer p.Close()
	werr := make(chan error, 1)
	go func() {
		// Only a failure to send stdin's bytes counts. Closing stdin after
		// they went (or with none to send) may fail because the process
		// already exited, which it may do before or after the close
		// arrives: that says nothing about the run, and an error that
		// depends on which came first would not be one.
		var err error
		if stdin != nil {
			_, err = io.Copy(p.Stdin(), stdin)
		}
		p.Stdin().Close()
		werr <- err
	}()
	out := &capBuffer{max: max}
	rdone := make(chan struct{})
	go func() {
		io.Copy(out, p.Stdout())
		close(rdone)
	}()
	code, err := WaitContext(ctx, p)
	if err != nil {
		return nil, code, fmt.Errorf("wait for %s on %s: %w", argv0(spec), be.Name(), err)
	}
	// Stdout ends at most WaitDelay after Wait (the Process contract).
	select {
	case <-rdone:
	case <-ctx.Done():
		p.Close()
		<-rdone
	}
	if out.overflow {
		return out.buf.Bytes(), code, fmt.Errorf("%s on %s: %w (%d bytes)", argv0(spec), be.Name(), ErrOutputTooLong, max)
	}
	// A process that exited without reading all of its stdin is not an
	// error in itself (head, a script that failed early): its status and
	// output say what happened. Only report the send failure when the
	// process said nothing at all.
	select {
	case err := <-werr:
		if err != nil && out.buf.Len() == 0 && code == 0 {
			return nil, code, fmt.Errorf("send stdin to %s on %s: %w", argv0(spec), be.Name(), err)
		}
	default:
	}
	return out.buf.Bytes(), code, nil
}

func argv0(spec ProcSpec) string {
	if len(spec.Argv) == 0 {
		return "process"
	}
	return spec.Argv[0]
}

// capBuffer keeps at most max bytes (max <= 0: all) and notes an overflow,
// consuming everything so the writer never blocks.
type capBuffer struct {
	buf      bytes.Buffer
	max      int
	overflow bool
}

func (c *capBuffer) Write(p []byte) (int, error) {
	if c.max <= 0 {
		return c.buf.Write(p)
	}
	room := c.max - c.buf.Len()
	if len(p) > room {
		c.overflow = true
		if room > 0 {
			c.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return c.buf.Write(p)
}
