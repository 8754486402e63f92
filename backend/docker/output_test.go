package docker

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// frame is one frame of an exec's multiplexed stream.
func frame(stream byte, payload string) []byte {
	h := make([]byte, 8, 8+len(payload))
	h[0] = stream
	binary.BigEndian.PutUint32(h[4:], uint32(len(payload)))
	return append(h, payload...)
}

// streamProcess is a process whose attached stream is the far end of a
// pipe: the test writes what the daemon would.
func streamProcess(t *testing.T, tty bool) (*process, net.Conn) {
	t.Helper()
	ours, daemon := net.Pipe()
	t.Cleanup(func() { ours.Close(); daemon.Close() })
	p := &process{
		execID: "0123456789abcdef",
		conn:   client.HijackedResponse{Conn: ours, Reader: bufio.NewReader(ours)},
		eof:    make(chan struct{}),
	}
	p.stdout = &output{p: p, tty: tty}
	return p, daemon
}

// send writes b as the daemon, then ends the stream.
func send(daemon net.Conn, b []byte) {
	daemon.Write(b)
	daemon.Close()
}

// readAll reads Stdout with a small buffer (frames split across reads)
// until it ends, and returns what it read and the error that ended it.
func readAll(r io.Reader, size int) (string, error) {
	var out strings.Builder
	buf := make([]byte, size)
	for {
		n, err := r.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			return out.String(), err
		}
	}
}

// TestOutputDemultiplexes: stdout and stderr frames come out merged in
// their order, whole whatever the reader's buffer, an empty frame is
// skipped, and the stream's end is io.EOF (also in the middle of a header,
// as stdcopy read it); each read of output notes when it came.
func TestOutputDemultiplexes(t *testing.T) {
	for _, size := range []int{1, 3, 64 << 10} {
		p, daemon := streamProcess(t, false)
		var in bytes.Buffer
		in.Write(frame(1, "hello "))
		in.Write(frame(2, "err "))
		in.Write(frame(1, ""))
		in.Write(frame(1, strings.Repeat("x", 100)))
		in.Write(frame(1, "\n")[:5]) // cut short
		go send(daemon, in.Bytes())
		got, err := readAll(p.Stdout(), size)
		if want := "hello err " + strings.Repeat("x", 100); got != want || err != io.EOF {
			t.Errorf("buffer %d: read %q, %v; want %q, io.EOF", size, got, err, want)
		}
		if p.lastOutput().IsZero() || time.Since(p.lastOutput()) > time.Minute {
			t.Errorf("buffer %d: last output at %v, want a moment ago", size, p.lastOutput())
		}
		select {
		case <-p.eof:
		default:
			t.Errorf("buffer %d: the stream ended but eof is open", size)
		}
	}
}

// TestOutputErrors: the daemon's own error in the stream and an unknown
// stream are errors that say so; a TTY's stream is passed as it is.
func TestOutputErrors(t *testing.T) {
	p, daemon := streamProcess(t, false)
	go send(daemon, append(frame(1, "a"), frame(3, "no such exec")...))
	got, err := readAll(p.Stdout(), 64)
	if got != "a" || err == nil || !strings.Contains(err.Error(), "no such exec") {
		t.Errorf("daemon error: read %q, %v; want \"a\" and the daemon's message", got, err)
	}
	p, daemon = streamProcess(t, false)
	go send(daemon, frame(7, "?"))
	if _, err := readAll(p.Stdout(), 64); err == nil || !strings.Contains(err.Error(), "unknown stream 7") {
		t.Errorf("unknown stream: %v, want an error naming it", err)
	}
	p, daemon = streamProcess(t, true)
	raw := string(frame(1, "not a frame"))
	go send(daemon, []byte(raw))
	if got, err := readAll(p.Stdout(), 5); got != raw || err != io.EOF {
		t.Errorf("tty: read %q, %v; want the bytes as sent and io.EOF", got, err)
	}
}

// TestOutputClosed: Close ends a read that waits with io.ErrClosedPipe,
// and the after-exit bound's close with io.EOF (Close wins over it).
func TestOutputClosed(t *testing.T) {
	p, _ := streamProcess(t, false)
	p.cancel = func() {}
	done := make(chan error, 1)
	go func() { _, err := readAll(p.Stdout(), 64); done <- err }()
	time.Sleep(10 * time.Millisecond) // the read is (most likely) waiting; either way it must end
	p.Close()
	select {
	case err := <-done:
		if !errors.Is(err, io.ErrClosedPipe) {
			t.Errorf("read after Close: %v, want io.ErrClosedPipe", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a read waiting on the stream did not end at Close")
	}

	p, _ = streamProcess(t, false)
	eof := io.EOF
	p.closed.CompareAndSwap(nil, &eof) // what finish's bound does
	p.conn.Close()
	if _, err := readAll(p.Stdout(), 64); err != io.EOF {
		t.Errorf("read after the after-exit bound: %v, want io.EOF", err)
	}
	p.cancel = func() {}
	p.Close()
	if _, err := p.Stdout().Read(make([]byte, 8)); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("read after Close, after the bound: %v, want io.ErrClosedPipe", err)
	}
}
