package modalfake

import (
	"context"
	"errors"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Bounds of an exec's output buffer. Output is kept from keepBehind bytes
// before the furthest offset a reader was sent (so a reader whose stream
// broke can resume from its last offset), and at most maxAhead bytes are
// held that no reader has fetched yet: beyond that the process blocks on
// its write, as it would on a pipe nobody reads.
const (
	keepBehind = 1 << 20
	maxAhead   = 8 << 20
	chunkSize  = 64 << 10
)

// errStreamClosed is returned by write after abort.
var errStreamClosed = errors.New("modalfake: output stream aborted")

// outStream is one output stream of an exec (stdout or stderr), readable
// from any offset still held.
type outStream struct {
	mu      sync.Mutex
	buf     []byte
	base    uint64 // offset of buf[0]
	sentMax uint64 // furthest offset sent to a reader
	eof     bool
	aborted bool
	changed chan struct{} // closed and replaced on every change
}

func newOutStream() *outStream { return &outStream{changed: make(chan struct{})} }

func (o *outStream) notifyLocked() {
	close(o.changed)
	o.changed = make(chan struct{})
}

// Write appends p, waiting while too much is unread.
func (o *outStream) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		o.mu.Lock()
		if o.aborted {
			o.mu.Unlock()
			return n, errStreamClosed
		}
		ahead := o.base + uint64(len(o.buf)) - o.sentMax
		if ahead >= maxAhead {
			ch := o.changed
			o.mu.Unlock()
			<-ch
			continue
		}
		k := min(uint64(len(p)), maxAhead-ahead)
		o.buf = append(o.buf, p[:k]...)
		o.notifyLocked()
		o.mu.Unlock()
		p = p[k:]
		n += int(k)
	}
	return n, nil
}

// close marks the end of the stream.
func (o *outStream) close() {
	o.mu.Lock()
	if !o.eof {
		o.eof = true
		o.notifyLocked()
	}
	o.mu.Unlock()
}

// abort ends the stream and fails blocked writers.
func (o *outStream) abort() {
	o.mu.Lock()
	o.aborted = true
	o.eof = true
	o.notifyLocked()
	o.mu.Unlock()
}

// readFrom sends everything from offset on to send, chunk by chunk, until
// the stream ends (nil) or ctx is done.
func (o *outStream) readFrom(ctx context.Context, offset uint64, send func([]byte) error) error {
	for {
		o.mu.Lock()
		end := o.base + uint64(len(o.buf))
		switch {
		case offset < o.base:
			base := o.base
			o.mu.Unlock()
			return status.Errorf(codes.OutOfRange, "offset %d is no longer held (output kept from %d)", offset, base)
		case offset > end:
			o.mu.Unlock()
			return status.Errorf(codes.InvalidArgument, "offset %d is beyond the output's end (%d)", offset, end)
		case offset < end:
			k := min(end-offset, chunkSize)
			chunk := append([]byte(nil), o.buf[offset-o.base:offset-o.base+k]...)
			o.mu.Unlock()
			if err := send(chunk); err != nil {
				return err
			}
			offset += k
			o.advance(offset)
			continue
		case o.eof:
			o.mu.Unlock()
			return nil
		}
		ch := o.changed
		o.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

// advance records that a reader got everything before offset and drops
// what is no longer needed to resume.
func (o *outStream) advance(offset uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if offset <= o.sentMax {
		return
	}
	o.sentMax = offset
	if o.sentMax > o.base+keepBehind {
		drop := o.sentMax - keepBehind - o.base
		if drop > uint64(len(o.buf))/2 {
			o.buf = append([]byte(nil), o.buf[drop:]...)
		} else {
			o.buf = o.buf[drop:]
		}
		o.base += drop
	}
	o.notifyLocked()
}
