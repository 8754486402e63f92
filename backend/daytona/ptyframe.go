package daytona

// The framing of a PTY session's output: markerStripper takes the pacer's
// markers out, frameMatcher finds the exit frame, and outBuf holds what
// the reader has not taken yet. pty.go describes the protocol.

import (
	"bytes"
	"strconv"
	"sync"
)

// Output buffering. A process holds at most outBufMax bytes of output its
// reader has not taken yet. Without a TTY the terminal's own flow control
// (stty ixon) keeps it far below: past flowHigh buffered bytes berth sends
// XOFF, so the terminal stops passing the program's output on, and XON once
// the reader brought it under flowLow. The websocket is read all the time:
// Daytona's daemon drops a client that falls 256 messages behind as a slow
// consumer.
const (
	outBufMax = 16 << 20
	flowHigh  = 1 << 20
	flowLow   = 256 << 10
)

// markerStripper takes the pacer's markers (fixed strings) out of a
// stream, holding back at most the bytes that could start one. The pacer
// prints them between writes of the program's output, so they are never
// inside one another, but one may split an exit frame: markers are taken
// out first, and the frame is looked for in what remains. It is used by
// the reader and its hold timer under ptyProc.omu.
type markerStripper struct {
	markers [][]byte
	held    []byte
}

// holding reports whether bytes are held back.
func (m *markerStripper) holding() bool { return len(m.held) > 0 }

// release gives up the held-back bytes as output.
func (m *markerStripper) release() []byte {
	h := m.held
	m.held = nil
	return h
}

// feed consumes a chunk: output goes to data in order, each marker found
// to marker (its index in markers) at its place. It returns false as soon
// as data does.
func (m *markerStripper) feed(chunk []byte, data func([]byte) bool, marker func(int)) bool {
	buf := chunk
	if len(m.held) > 0 {
		buf = append(m.held, chunk...)
		m.held = nil
	}
	for {
		at, which := -1, -1
		for i, mk := range m.markers {
			if j := bytes.Index(buf, mk); j >= 0 && (at < 0 || j < at) {
				at, which = j, i
			}
		}
		if at < 0 {
			break
		}
		if !data(buf[:at]) {
			return false
		}
		marker(which)
		buf = buf[at+len(m.markers[which]):]
	}
	keep := 0
	for _, mk := range m.markers {
		for k := min(len(mk)-1, len(buf)); k > keep; k-- {
			if bytes.HasPrefix(mk, buf[len(buf)-k:]) {
				keep = k
				break
			}
		}
	}
	if keep > 0 {
		m.held = append([]byte(nil), buf[len(buf)-keep:]...)
	}
	return data(buf[:len(buf)-keep])
}

// frameMatcher finds the exit frame in a stream, holding back at most the
// bytes that could be its start. It is safe for the reader and one timer
// to use at once.
type frameMatcher struct {
	mu     sync.Mutex
	marker []byte
	held   []byte
	inTail bool
	digits []byte
}

// holding reports whether bytes are held back.
func (f *frameMatcher) holding() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.held) > 0 && !f.inTail
}

// release gives up the held-back bytes as output.
func (f *frameMatcher) release() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inTail {
		return nil
	}
	h := f.held
	f.held = nil
	return h
}

// feed consumes a chunk: before is output, and once the frame is complete
// found is set with its code and after holds what followed it.
func (f *frameMatcher) feed(chunk []byte) (before []byte, code int, found bool, after []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	buf := chunk
	if f.inTail {
		return f.tail(nil, buf)
	}
	if len(f.held) > 0 {
		buf = append(f.held, chunk...)
		f.held = nil
	}
	if i := bytes.Index(buf, f.marker); i >= 0 {
		f.inTail = true
		return f.tail(buf[:i], buf[i+len(f.marker):])
	}
	keep := 0
	for k := min(len(f.marker)-1, len(buf)); k > 0; k-- {
		if bytes.HasPrefix(f.marker, buf[len(buf)-k:]) {
			keep = k
			break
		}
	}
	if keep > 0 {
		f.held = append([]byte(nil), buf[len(buf)-keep:]...)
	}
	return buf[:len(buf)-keep], 0, false, nil
}

func (f *frameMatcher) tail(before, b []byte) ([]byte, int, bool, []byte) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		f.digits = append(f.digits, b...)
		return before, 0, false, nil
	}
	f.digits = append(f.digits, b[:i]...)
	code, err := strconv.Atoi(string(f.digits))
	if err != nil {
		code = -1
	}
	return before, code, true, b[i+1:]
}

// outBuf is a bounded buffer between the websocket reader and Stdout.
type outBuf struct {
	mu     sync.Mutex
	cond   sync.Cond
	buf    []byte
	max    int
	err    error      // set by close: what Read returns once empty
	flow   func(bool) // told true past flowHigh, false back under flowLow
	paused bool
}

// onFlow sets the flow callback.
func (o *outBuf) onFlow(f func(pause bool)) {
	o.mu.Lock()
	o.flow = f
	o.mu.Unlock()
}

func newOutBuf(max int) *outBuf {
	o := &outBuf{max: max}
	o.cond.L = &o.mu
	return o
}

// write appends b, waiting while the buffer is full; false means the
// buffer was closed.
func (o *outBuf) write(b []byte) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for len(o.buf) >= o.max && o.err == nil {
		o.cond.Wait()
	}
	if o.err != nil {
		return false
	}
	o.buf = append(o.buf, b...)
	if o.flow != nil && !o.paused && len(o.buf) >= flowHigh {
		o.paused = true
		o.flow(true)
	}
	o.cond.Broadcast()
	return true
}

// Read implements io.Reader.
func (o *outBuf) Read(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for len(o.buf) == 0 && o.err == nil {
		o.cond.Wait()
	}
	if len(o.buf) == 0 {
		return 0, o.err
	}
	n := copy(p, o.buf)
	o.buf = o.buf[n:]
	if len(o.buf) == 0 {
		o.buf = nil
	}
	if o.paused && len(o.buf) <= flowLow {
		o.paused = false
		o.flow(false)
	}
	o.cond.Broadcast()
	return n, nil
}

// close ends the buffer: Read returns err once the buffered bytes are
// read. The first close wins.
func (o *outBuf) close(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err == nil {
		o.err = err
	}
	o.cond.Broadcast()
}
