package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a55dbaac/berth/daemon/wire"
)

// stuckWriter is a caller's terminal that stops taking output (Ctrl-Z, a
// pipe to a reader that never reads) until released.
type stuckWriter struct {
	release chan struct{}
	once    sync.Once
	began   chan struct{} // closed at the first write: the command runs
}

func (w *stuckWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.began) })
	<-w.release
	return len(p), nil
}

// procsWith counts the processes whose command line contains needle.
func procsWith(needle string) int {
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	n := 0
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(needle)) {
			n++
		}
	}
	return n
}

// TestStuckReaderDoesNotHoldTheTimeout (N12): a caller that stops reading
// its streamed output neither suspends the command's timeout nor holds its
// task: `yes` ends at its timeout while the caller reads nothing, the next
// call on the same task is answered, and once the caller reads again it
// gets the timeout's result and a note on what its stream lost.
func TestStuckReaderDoesNotHoldTheTimeout(t *testing.T) {
	home, _ := serve(t, 0)
	in := inputs(t, home)
	arg := fmt.Sprintf("berth-n12-%d", time.Now().UnixNano())
	stuck, err := wire.Dial(context.Background(), wire.DialOptions{Home: home, NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	w := &stuckWriter{release: make(chan struct{}), began: make(chan struct{})}
	type result struct {
		r   *wire.Reply
		err error
	}
	first := make(chan result, 1)
	go func() {
		r, err := stuck.Run(context.Background(), wire.Request{Op: wire.OpRun, Inputs: in, Key: "t", Command: "yes " + arg, Timeout: 1, Stream: true}, wire.RunOptions{Stdout: w})
		first <- result{r, err}
	}()
	defer func() {
		select {
		case <-w.release:
		default:
			close(w.release)
		}
	}()

	// Once output streams, the command holds its task: the next call on
	// it comes after.
	select {
	case <-w.began:
	case r := <-first:
		t.Fatalf("the first call ended before it streamed: %+v, %v", r.r, r.err)
	case <-time.After(30 * time.Second):
		t.Fatal("yes never streamed")
	}
	// The next call on the task waits for the first one's timeout only.
	// The bound (many times the 1 s timeout) is for a hang, the defect,
	// not a timing claim.
	c, err := wire.Dial(context.Background(), wire.DialOptions{Home: home, NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := c.Run(ctx, wire.Request{Op: wire.OpRun, Inputs: in, Key: "t", Command: "echo second"}, wire.RunOptions{})
	if err != nil {
		t.Fatalf("second call on the task while the first caller reads nothing: %v", err)
	}
	if r.Exit != 0 || !strings.Contains(string(r.Result), `"output":"second"`) {
		t.Fatalf("second call on the task while the first caller reads nothing: result %s, message %q; want it answered", r.Result, r.ExitMessage)
	}
	if n := procsWith("yes\x00" + arg); n != 0 {
		t.Fatalf("%d `yes %s` still running after the next call on its task ran", n, arg)
	}

	close(w.release) // the first caller reads again
	got := <-first
	if got.err != nil || got.r.Exit != 124 {
		t.Fatalf("first call: %+v, %v; want exit 124", got.r, got.err)
	}
	// How much the stream lost depends on how fast the pipeline ran
	// (TestTapDropsForAStuckCaller counts it); what it says does not.
	for _, n := range got.r.Notes {
		if !strings.Contains(n, "not shown as they came") {
			t.Errorf("first call's note %q", n)
		}
	}
	if !strings.Contains(string(got.r.Result), "[Command timed out after 1s]") || got.r.Tail != "\n[Command timed out after 1s]" {
		t.Fatalf("first call: tail %q, result %.200s; want the timeout marker", got.r.Tail, got.r.Result)
	}
}

// blockedConn is a socket whose reader stopped reading: writes wait until
// it is released.
type blockedConn struct {
	recordConn
	release chan struct{}
}

func (b *blockedConn) Write(p []byte) (int, error) {
	<-b.release
	return b.recordConn.Write(p)
}

// TestTapDropsForAStuckCaller: the stream never makes the command wait for
// a caller that stopped reading: past a bounded queue its output is
// dropped from the stream and counted, and the caller, reading again,
// gets what was queued, then the result's marker as the tail (the
// streamed text is no longer the result's head).
func TestTapDropsForAStuckCaller(t *testing.T) {
	bc := &blockedConn{release: make(chan struct{})}
	tw := newTap(wire.NewConn(bc))
	chunk := bytes.Repeat([]byte("y\n"), 16<<10) // 32 KiB
	total := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for total < 3*maxQueued {
			tw.Write(chunk)
			total += len(chunk)
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second): // a hang, the defect
		close(bc.release)
		t.Fatal("Write waited for a caller that does not read")
	}
	tail, dropped := tw.finish("y\ny\n[...]\n[Command timed out after 1s]")
	if dropped < int64(total-maxQueued-len(chunk)) || dropped > int64(total-maxQueued+len(chunk)) {
		t.Errorf("dropped %d of %d bytes; want all but the queue (%d) and the frame in flight", dropped, total, maxQueued)
	}
	// The last newline is held back as trailing whitespace: the marker
	// starts the line after the last streamed text.
	if tail != "\n[Command timed out after 1s]" {
		t.Errorf("tail %q; want the marker alone, on a line of its own", tail)
	}
	close(bc.release)
	tw.flush()
	if n := len(bc.streamed(t)); n != total-int(dropped)-1 {
		t.Errorf("the caller got %d bytes, of %d written, %d dropped and 1 held back", n, total, dropped)
	}
}
