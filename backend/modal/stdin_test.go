package modal

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
)

// heldWriter stands for the SDK's exec stdin: each call is "sent" at once
// and answered (with err) only when the test releases it, so the test
// decides whether the router's answer or the exec's exit status arrives
// first.
type heldWriter struct {
	sent    chan string // what each call sent ("" for the end of input)
	release chan error  // the answer to the call in flight
	calls   atomic.Int32
}

func newHeldWriter() *heldWriter {
	return &heldWriter{sent: make(chan string, 8), release: make(chan error)}
}

func (h *heldWriter) Write(b []byte) (int, error) {
	h.calls.Add(1)
	h.sent <- string(b)
	if err := <-h.release; err != nil {
		return 0, err
	}
	return len(b), nil
}

func (h *heldWriter) Close() error {
	h.calls.Add(1)
	h.sent <- ""
	return <-h.release
}

// stdinRig is a process's stdin on a heldWriter, the process's end and its
// sandbox's under the test's control.
type stdinRig struct {
	h    *heldWriter
	p    *process
	gone chan struct{}
	s    *stdin
}

func newStdinRig(t *testing.T) *stdinRig {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p := &process{ctx: ctx, cancel: cancel}
	r := &stdinRig{h: newHeldWriter(), p: p, gone: make(chan struct{})}
	r.s = newStdin(r.h, p, r.gone)
	return r
}

// call runs f in the background.
func call[T any](f func() T) <-chan T {
	c := make(chan T, 1)
	go func() { c <- f() }()
	return c
}

func (r *stdinRig) sent(t *testing.T) string {
	t.Helper()
	select {
	case s := <-r.h.sent:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("nothing sent to the router")
		return ""
	}
}

func result[T any](t *testing.T, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not return")
		var zero T
		return zero
	}
}

// stillPending checks that c has not returned: the call waits for its
// answer.
func stillPending[T any](t *testing.T, c <-chan T) {
	t.Helper()
	select {
	case v := <-c:
		t.Fatalf("the call returned %v before the router answered it", v)
	case <-time.After(50 * time.Millisecond):
	}
}

// TestStdinCloseAnsweredAfterExit is the race seen under load: the end of
// input reaches the exec (cat; echo END, or the /bin/sh -c 'cat >file'
// that writes a command's stdin file), which exits 0, and the exit status
// reaches berth before the router's answer to the Close. Closing stdin of
// a process that exited is success whichever answer comes first, and
// whatever the router says about an end of input it no longer needs.
func TestStdinCloseAnsweredAfterExit(t *testing.T) {
	for _, answer := range []error{nil, errors.New("rpc error: code = FailedPrecondition desc = close stdin: use of closed network connection")} {
		r := newStdinRig(t)
		c := call(r.s.Close)
		if got := r.sent(t); got != "" {
			t.Fatalf("Close sent %q", got)
		}
		r.p.exit.Set(0, nil) // the exit status comes first
		// Close may return before the answer (nothing can depend on it)
		// or with it: either way success.
		var err error
		select {
		case err = <-c:
			go func() { r.h.release <- answer }()
		case <-time.After(100 * time.Millisecond):
			r.h.release <- answer
			err = result(t, c)
		}
		if err != nil {
			t.Errorf("Close of a process that exited 0 (router's answer %v, after the exit): %v", answer, err)
		}
	}
}

// TestStdinCloseAfterExit: closing stdin of a process known to have
// exited is success; the end of input is still sent.
func TestStdinCloseAfterExit(t *testing.T) {
	r := newStdinRig(t)
	r.p.exit.Set(3, nil)
	c := call(r.s.Close)
	r.sent(t)
	if err := result(t, c); err != nil {
		t.Errorf("Close after the exit: %v", err)
	}
	r.h.release <- errors.New("exec has exited")
}

// TestStdinWriteAnsweredAfterExit: a write in flight as the process exits
// gets the router's answer, not the order of arrival: delivered is
// success, refused is the process's end.
func TestStdinWriteAnsweredAfterExit(t *testing.T) {
	r := newStdinRig(t)
	c := call(func() error { _, err := r.s.Write([]byte("abc")); return err })
	if got := r.sent(t); got != "abc" {
		t.Fatalf("sent %q", got)
	}
	r.p.exit.Set(0, nil)
	stillPending(t, c)
	r.h.release <- nil
	if err := result(t, c); err != nil {
		t.Errorf("write delivered before the exit, answered after it: %v", err)
	}

	r = newStdinRig(t)
	c = call(func() error { _, err := r.s.Write([]byte("def")); return err })
	r.sent(t)
	r.p.exit.Set(0, nil)
	stillPending(t, c)
	r.h.release <- errors.New("rpc error: code = FailedPrecondition desc = write stdin: broken pipe")
	err := result(t, c)
	if err == nil || !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("write refused because the process exited: %v, want the exit (io.ErrClosedPipe)", err)
	}
}

// TestStdinWriteAfterExit: a write after the process is known to have
// ended is refused without being sent.
func TestStdinWriteAfterExit(t *testing.T) {
	r := newStdinRig(t)
	r.p.exit.Set(0, nil)
	if _, err := r.s.Write([]byte("x")); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("write after the exit: %v, want io.ErrClosedPipe", err)
	}
	if n := r.h.calls.Load(); n != 0 {
		t.Errorf("%d calls sent to the router for a process that ended", n)
	}
}

// TestStdinSandboxGone: when the process ends with its sandbox, a write or
// Close the router never answers returns at once with the sandbox's end.
func TestStdinSandboxGone(t *testing.T) {
	died := errors.New("modal: sandbox terminated")
	for _, op := range []string{"write", "close"} {
		r := newStdinRig(t)
		c := call(func() error {
			if op == "write" {
				_, err := r.s.Write([]byte("abc"))
				return err
			}
			return r.s.Close()
		})
		r.sent(t)
		close(r.gone)
		r.p.exit.Set(-1, died)
		if err := result(t, c); !errors.Is(err, died) {
			t.Errorf("%s in flight as the sandbox died: %v, want %v", op, err, died)
		}
	}

	// A write in flight as the process exited is left behind when the
	// sandbox finishes before the router answers.
	r := newStdinRig(t)
	c := call(func() error { _, err := r.s.Write([]byte("abc")); return err })
	r.sent(t)
	r.p.exit.Set(0, nil)
	stillPending(t, c)
	close(r.gone)
	if err := result(t, c); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("write left behind: %v, want the exit", err)
	}
}

// TestStdinEOFAnsweredAfterExit is the race seen under load, end to end
// on the SDK and the fake: the router answers the end of input only after
// the exit status it caused has been answered. The helper that writes a
// command's stdin file (/bin/sh -c 'cat >file') and a background
// process's close (cat; echo END) must both succeed.
func TestStdinEOFAnsweredAfterExit(t *testing.T) {
	f := newFixture(t)
	b := newBackend(t, f.options(t, "", nil))
	f.srv.AnswerEOFAfterExit(true)
	defer f.srv.AnswerEOFAfterExit(false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	out, code, err := backend.Output(ctx, b, backend.ProcSpec{Argv: []string{"/bin/sh", "-c", `umask 077 && cat >"$1"`, "berth-put", "/tmp/stdin-file"}}, strings.NewReader("data\n"), 4096)
	if err != nil || code != 0 || len(out) != 0 {
		t.Fatalf("writing a file through a helper's stdin: %q, %d, %v", out, code, err)
	}
	if got, _ := sh(t, b, "cat /tmp/stdin-file"); got != "data\n" {
		t.Fatalf("the file holds %q", got)
	}

	p, err := b.Start(ctx, backend.ProcSpec{Argv: []string{"/bin/sh", "-c", "cat; echo END"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, s := range []string{"abc", "def\n"} {
		if _, err := io.WriteString(p.Stdin(), s); err != nil {
			t.Fatalf("write %q: %v", s, err)
		}
	}
	outc := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(p.Stdout()); outc <- b }()
	if err := p.Stdin().Close(); err != nil {
		t.Fatalf("close after which the process exited 0: %v", err)
	}
	if code, err := p.Wait(); code != 0 || err != nil {
		t.Fatalf("Wait: %d, %v", code, err)
	}
	if got := string(result(t, outc)); got != "abcdef\nEND\n" {
		t.Fatalf("output %q", got)
	}
}
