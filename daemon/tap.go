package daemon

import (
	"bytes"
	"io"
	"regexp"
	"strings"
	"sync"

	"github.com/a55dbaac/berth/daemon/wire"
)

// tapWriter streams a command's processed output as out frames and keeps
// what it sent (up to a bound) to work out the tail the caller prints.
//
// The pipeline writes into a bounded queue, and a goroutine of its own
// sends the queue to the socket: a caller that stops reading (Ctrl-Z, a
// terminal's XOFF, a pipe to a stalled reader) fills its socket and then
// the queue, and from there on the output is dropped from the stream
// rather than waited for. The command, its timeout and its task's lock go
// on regardless; the result still holds the output (its head and tail, and
// the spill file), and the caller is told how much the stream lost.
type tapWriter struct {
	c *wire.Conn

	mu       sync.Mutex
	sent     strings.Builder
	last     byte   // the last byte streamed
	held     []byte // trailing whitespace not streamed yet
	overflow bool   // sent no longer holds all that was streamed
	closed   bool   // finish was called: nothing more comes

	queue   [][]byte // out frames not sent yet
	queued  int      // their bytes
	dropped int64    // bytes dropped from the stream: the queue was full
	dead    bool     // the socket failed: nothing more is sent
	wake    chan struct{}
	drained chan struct{} // closed once the sender is done
}

// keepSent bounds the copy of the streamed text kept for the tail.
const keepSent = 4 << 20

// maxHeld bounds the trailing whitespace held back; more is sent.
const maxHeld = 64 << 10

// maxQueued bounds the output waiting for a slow caller: several seconds
// of any terminal's pace beyond the socket's own buffer.
const maxQueued = 4 << 20

// trailingSpace is what the result's output loses at its end.
const trailingSpace = " \t\r\n\v\f"

// newTap returns a tap streaming to c, with its sender running.
func newTap(c *wire.Conn) *tapWriter {
	t := &tapWriter{c: c, wake: make(chan struct{}, 1), drained: make(chan struct{})}
	go t.sender()
	return t
}

// Write streams p, holding back its trailing whitespace until more text
// follows: the result's output ends trimmed, and so does the stream (a
// command's trailing blank lines are not printed, with or without the
// daemon). It never waits for the caller.
func (t *tapWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || len(p) == 0 {
		return len(p), nil
	}
	body := len(bytes.TrimRight(p, trailingSpace))
	if body == 0 && len(t.held)+len(p) <= maxHeld {
		t.held = append(t.held, p...)
		return len(p), nil
	}
	data := make([]byte, 0, len(t.held)+body)
	data = append(append(data, t.held...), p[:body]...)
	t.held = append(t.held[:0], p[body:]...)
	if body == 0 {
		data, t.held = append(data, t.held...), t.held[:0]
	}
	t.send(data)
	return len(p), nil
}

// send queues data as an out frame and keeps what was streamed; data that
// does not fit in the queue is dropped. t.mu is held.
func (t *tapWriter) send(data []byte) {
	if t.dead || t.queued+len(data) > maxQueued {
		t.dropped += int64(len(data))
		t.overflow = true // what the caller printed is not t.sent
		t.sent.Reset()
		return
	}
	if !t.overflow {
		if t.sent.Len()+len(data) > keepSent {
			t.overflow = true
			t.sent.Reset()
		} else {
			t.sent.Write(data)
		}
	}
	t.last = data[len(data)-1]
	t.queue = append(t.queue, data)
	t.queued += len(data)
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// sender sends the queue to the socket until finish, then what is left.
func (t *tapWriter) sender() {
	defer close(t.drained)
	for {
		t.mu.Lock()
		if len(t.queue) == 0 {
			closed := t.closed
			t.mu.Unlock()
			if closed {
				return
			}
			<-t.wake
			continue
		}
		data := t.queue[0]
		t.queue[0] = nil
		t.queue = t.queue[1:]
		t.mu.Unlock()
		err := t.c.Send(wire.Frame{T: wire.FrameOut, Data: data})
		t.mu.Lock()
		t.queued -= len(data)
		if err != nil && !t.dead {
			t.dead = true
			for _, d := range t.queue {
				t.dropped += int64(len(d))
			}
			t.queue, t.queued = nil, 0
		}
		t.mu.Unlock()
	}
}

// markerRE finds the marker the terminal layer appends to Output.
var markerRE = regexp.MustCompile(`\n\[Command (?:timed out after \d+s|interrupted)\]$`)

// finish stops the stream and returns what the caller prints after the
// streamed text so that it shows what out (the result's output) shows:
// the rest of out when out starts with what was streamed (trailing
// whitespace aside), else out's marker. The caller ends the whole with a
// newline if it does not end with one. dropped is how much of the stream
// was lost to a caller that did not read. The frames still queued go out
// after it returns: flush waits for them.
func (t *tapWriter) finish(out string) (tail string, dropped int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	select {
	case t.wake <- struct{}{}:
	default:
	}
	rest := markerRE.FindString(out)
	if trimmed := strings.TrimRight(t.sent.String(), trailingSpace); !t.overflow && strings.HasPrefix(out, trimmed) {
		rest = out[len(trimmed):]
	}
	if t.last == '\n' || t.last == 0 {
		rest = strings.TrimPrefix(rest, "\n")
	}
	return rest, t.dropped
}

// flush waits until every queued out frame was sent (or the socket
// failed), after finish: the result frame goes after them.
func (t *tapWriter) flush() { <-t.drained }

var _ io.Writer = (*tapWriter)(nil)
