package session

import (
	"bytes"
	"io"
)

// framer splits the shell's output stream into the output of the current
// command and the frame that ends it. It streams: bytes that cannot be part
// of the frame are passed to the sink as soon as they arrive, so memory does
// not grow with output size; at most len(marker)-1 bytes are held back.
type framer struct {
	marker []byte // markerPrefix + nonce + "_"
	fields int    // NUL-terminated fields after the marker
	held   []byte // bytes that may be the start of the marker
	inTail bool   // marker seen, collecting fields
	tail   []byte
	got    []string
	rest   []byte // bytes after the frame (belong to whatever comes next)
}

func newFramer(nonce string, fields int) *framer {
	return &framer{marker: []byte(markerPrefix + nonce + "_"), fields: fields}
}

// feed consumes a chunk, writing command output to sink. It reports true
// once the whole frame has been read; then fields() holds its values and
// leftover() the bytes that followed it.
func (f *framer) feed(chunk []byte, sink io.Writer) bool {
	if f.inTail {
		return f.feedTail(chunk)
	}
	buf := chunk
	if len(f.held) > 0 {
		buf = append(f.held, chunk...)
		f.held = f.held[:0]
	}
	if i := bytes.Index(buf, f.marker); i >= 0 {
		if i > 0 {
			sink.Write(buf[:i])
		}
		f.inTail = true
		return f.feedTail(buf[i+len(f.marker):])
	}
	// Hold back the longest suffix that is a prefix of the marker.
	keep := 0
	max := len(f.marker) - 1
	if max > len(buf) {
		max = len(buf)
	}
	for k := max; k > 0; k-- {
		if bytes.HasPrefix(f.marker, buf[len(buf)-k:]) {
			keep = k
			break
		}
	}
	if n := len(buf) - keep; n > 0 {
		sink.Write(buf[:n])
	}
	if keep > 0 {
		f.held = append(f.held[:0], buf[len(buf)-keep:]...)
	}
	return false
}

func (f *framer) feedTail(b []byte) bool {
	for len(b) > 0 {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			f.tail = append(f.tail, b...)
			return false
		}
		var field string
		if len(f.tail) == 0 {
			field = string(b[:i]) // the whole field came in this chunk
		} else {
			f.tail = append(f.tail, b[:i]...)
			field = string(f.tail)
			f.tail = f.tail[:0]
		}
		if f.got == nil {
			f.got = make([]string, 0, f.fields)
		}
		f.got = append(f.got, field)
		b = b[i+1:]
		if len(f.got) == f.fields {
			if len(b) > 0 {
				f.rest = append([]byte(nil), b...)
			}
			return true
		}
	}
	return false
}

// flush writes out any held-back bytes: used when the stream ends without
// a frame (the shell died), when those bytes were output after all.
func (f *framer) flush(sink io.Writer) {
	if !f.inTail && len(f.held) > 0 {
		sink.Write(f.held)
		f.held = f.held[:0]
	}
}
