package output

import (
	"bytes"
	"sync"
)

// Rolling is the output buffer of a background process. Raw bytes written
// to it are cleaned as they arrive, by the same stages as a Capture
// (cleanStages: UTF-8 repair, escape stripping, redaction, trailing
// whitespace trim), and only the last MaxChars characters of cleaned text
// are kept. A secret is therefore redacted before any of it is stored, and
// cutting the buffer's front can never expose the inside of a key block or
// the tail of an escape sequence; reading it costs no re-processing.
//
// Memory is bounded by MaxChars (at most 4 bytes each, plus an eighth of
// slack) and the pipeline's fixed buffers, however much is written. Write,
// Close, String and Last may be called from several goroutines.
type Rolling struct {
	mu     sync.Mutex
	max    int
	pipe   pipeline
	buf    []byte // cleaned text: its last max characters count
	chars  int    // runes in buf
	closed bool
}

// NewRolling returns a Rolling that keeps the last maxChars characters
// (at least 1).
func NewRolling(maxChars int) *Rolling {
	r := &Rolling{max: max(maxChars, 1)}
	r.pipe = newPipeline(cleanStages(true), r.keep)
	return r
}

// keep appends cleaned text, dropping the front once an eighth more than
// max characters are held (so the copy is amortised).
func (r *Rolling) keep(b []byte) {
	r.buf = append(r.buf, b...)
	r.chars += runeCount(b)
	if r.chars > r.max+r.max/8 {
		r.buf = r.buf[:copy(r.buf, r.buf[skipRunes(r.buf, r.chars-r.max):])]
		r.chars = r.max
	}
}

// Write cleans p into the buffer and always returns len(p), nil. Writes
// after Close are ignored.
func (r *Rolling) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.pipe.Write(p)
	}
	return len(p), nil
}

// Close ends the stream: what the stages still hold (an unfinished line)
// is cleaned into the buffer.
func (r *Rolling) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		r.pipe.Flush()
	}
	return nil
}

// String returns the cleaned output kept: its last MaxChars characters.
func (r *Rolling) String() string { return r.Last(r.max) }

// Last returns the last n characters of the cleaned output (at most
// MaxChars). While the stream is open this includes the unfinished line
// the pipeline holds, cleaned as if the stream ended there, except a
// secret that may still be incomplete at its end (see partialSecret): it
// shows once its line is complete.
func (r *Rolling) Last(n int) string {
	n = min(n, r.max)
	r.mu.Lock()
	defer r.mu.Unlock()
	var peek []byte
	if !r.closed {
		c := r.pipe.clone(func(b []byte) { peek = append(peek, b...) })
		c.Flush()
		peek = bytes.TrimRight(peek[:partialSecret(peek)], " \t\r\n\v\f")
	}
	pn := runeCount(peek)
	if pn >= n {
		return string(LastChars(peek, n))
	}
	head := LastChars(r.buf, n-pn)
	out := make([]byte, 0, len(head)+len(peek))
	return string(append(append(out, head...), peek...))
}
