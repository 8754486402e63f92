// Package output turns the raw merged stdout+stderr byte stream of a shell
// command into the text an agent sees.
//
// The cleaning stages, one list run while the bytes stream in (see
// cleanStages): invalid UTF-8 is replaced by U+FFFD; terminal escape
// sequences are stripped; known secret shapes are redacted; trailing
// whitespace is trimmed. The same list serves three callers:
//   - Capture, for a foreground command: the result is truncated to a
//     character budget, keeping the first 40% and the last 60% around a
//     notice, and the full cleaned output is spilled to a private file when
//     it does not fit (spill files are capped per file and per directory);
//   - Rolling, for a background process: the last N characters of cleaned
//     text, cleaned on arrival;
//   - Clean, for a string in memory.
//
// Memory stays bounded by the budget (plus a few fixed 64 KiB buffers), not
// by the size of the output. Redact and RedactCommand apply the redaction
// stage alone, to text that is not command output.
package output

import (
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

const (
	// DefaultMaxChars is the default cap on the characters (runes) returned.
	DefaultMaxChars = 50_000
	// DefaultSpillMaxChars is the default cap on the characters spilled.
	DefaultSpillMaxChars = 5_000_000

	chunkSize = 64 << 10 // writes are processed in pieces of at most this
	holdLimit = 64 << 10 // trailing whitespace held back before counting it
)

// Options configures a Capture. The zero value is usable.
type Options struct {
	MaxChars      int    // cap on the runes of Result.Output; 0 (or less) = DefaultMaxChars
	SpillDir      string // directory for spill files; "" = no spilling (FullOutputPath stays empty)
	SpillMaxChars int    // cap on the runes written to a spill file; 0 (or less) = DefaultSpillMaxChars
	SpillMaxBytes int    // cap on the bytes written to a spill file; 0 (or less) = DefaultSpillMaxBytes
	// SpillDirMaxBytes is the budget of all spill files in SpillDir: when a
	// spill file is finished, the oldest others are removed until the rest
	// fit. 0 (or less) = DefaultSpillDirMaxBytes.
	SpillDirMaxBytes int64
	NoRedact         bool // disable secret redaction (on by default)
	// Tap, when set, receives the cleaned and redacted text as it comes
	// out of the cleaning stages, line by line, before truncation and
	// before trailing whitespace is trimmed: a live view of the whole
	// output for a caller that streams it. Its errors are ignored; a slow
	// Tap slows the command's reader, as a slow terminal does.
	Tap io.Writer
}

// Capture is an io.Writer fed with the raw byte stream of one command. Its
// Write never fails (disk errors while spilling are remembered and reported
// in Result) and its memory does not grow with the size of the output: it
// holds the first MaxChars and the last 60% of MaxChars characters (at most
// about 7*MaxChars bytes) plus a few buffers of 64 KiB, however much is
// written and however large each Write is. A character or escape sequence
// split across writes is handled as if it had arrived in one piece. Writes
// may come from several goroutines (each is applied whole, in the order
// they take the lock); call Finish after the last Write.
type Capture struct {
	mu       sync.Mutex
	opts     Options
	pipe     pipeline // cleanStages, feeding commit
	finished bool
	result   Result

	total int    // runes committed
	early []byte // the first runes committed, at most MaxChars of them
	over  bool   // more than MaxChars runes were committed
	tail  ring   // the last committed bytes once over
	spill *spillFile
	err   error // spill error
}

// Result is the outcome of a Capture.
type Result struct {
	// Output is the final text: the processed output with trailing
	// whitespace trimmed, truncated if needed, then the marker. It never
	// holds more than MaxChars runes.
	Output string
	// TotalChars is the rune count of the whole processed output (after
	// trimming, before truncation; the marker is not counted).
	TotalChars int
	// Truncated reports that Output holds only the head and tail of the
	// processed output around the truncation notice.
	Truncated bool
	// FullOutputPath is a private file (mode 0600) holding the processed
	// output, trimmed, without the marker; if that exceeds SpillMaxChars runes
	// the file holds the first SpillMaxChars of them followed by a line saying
	// it was cut. "" unless Truncated and Options.SpillDir was set and the
	// file was written successfully.
	FullOutputPath string
	// TruncationNote is a short sentence for the agent when Truncated, "" otherwise.
	TruncationNote string
	// SpillError is non-nil if the spill file could not be written.
	SpillError error
}

// NewCapture returns a Capture configured by opts.
func NewCapture(opts Options) *Capture {
	if opts.MaxChars <= 0 {
		opts.MaxChars = DefaultMaxChars
	}
	if opts.SpillMaxChars <= 0 {
		opts.SpillMaxChars = DefaultSpillMaxChars
	}
	if opts.SpillMaxBytes <= 0 {
		opts.SpillMaxBytes = DefaultSpillMaxBytes
	}
	if opts.SpillDirMaxBytes <= 0 {
		opts.SpillDirMaxBytes = DefaultSpillDirMaxBytes
	}
	c := &Capture{opts: opts}
	stages := cleanStages(!opts.NoRedact)
	if opts.Tap != nil {
		last := len(stages) - 1 // the trimmer
		stages[last] = &tapStage{stage: stages[last], w: opts.Tap}
	}
	c.pipe = newPipeline(stages, c.commit)
	return c
}

// Write processes p and always returns len(p), nil. Writes after Finish are
// ignored.
func (c *Capture) Write(p []byte) (int, error) {
	n := len(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.finished {
		return n, nil
	}
	c.pipe.Write(p)
	return n, nil
}

// commit adds processed, non-trailing text to the output.
func (c *Capture) commit(b []byte) {
	if len(b) == 0 {
		return
	}
	n := runeCount(b)
	if !c.over {
		if c.total+n <= c.opts.MaxChars {
			c.early = append(c.early, b...)
			c.total += n
			return
		}
		k := len(FirstChars(b, c.opts.MaxChars-c.total))
		c.early = append(c.early, b[:k]...)
		n -= c.opts.MaxChars - c.total
		c.total = c.opts.MaxChars
		b = b[k:]
		c.over = true
		c.tail.init(4*(c.opts.MaxChars*6/10+1) + 4)
		c.startSpill()
	}
	c.tail.write(b)
	c.total += n
	if c.spill != nil {
		c.spill.write(b, n)
	}
}

// startSpill creates the spill file, if configured, and writes what is
// held in memory to it.
func (c *Capture) startSpill() {
	if c.opts.SpillDir == "" || c.spill != nil || c.err != nil {
		return
	}
	s, err := newSpill(c.opts.SpillDir, c.opts)
	if err != nil {
		c.err = err
		return
	}
	c.spill = s
	s.write(c.early, runeCount(c.early))
}

// Finish flushes the pipeline and returns the result. marker (e.g.
// "\n[Command timed out after 5s]") is appended after trimming and
// truncation and counted in the cap: Output never exceeds MaxChars runes.
// Calling Finish again returns the first result.
func (c *Capture) Finish(marker string) Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.finished {
		return c.result
	}
	c.finished = true
	c.pipe.Flush() // trailing whitespace is dropped
	c.result = c.finish(marker)
	c.early, c.tail = nil, ring{}
	return c.result
}

func (c *Capture) finish(marker string) Result {
	maxChars := c.opts.MaxChars
	m := utf8.RuneCountInString(marker)
	if !c.over {
		out := strings.TrimRight(string(c.early), " \t\r\n\v\f")
		c.total = utf8.RuneCountInString(out)
		if c.total+m <= maxChars {
			return Result{Output: out + marker, TotalChars: c.total}
		}
		c.early = []byte(out)
		c.startSpill()
	}
	res := Result{TotalChars: c.total, Truncated: true}
	if c.spill != nil {
		if err := c.spill.close(c.total); err != nil {
			c.err = err
		} else {
			res.FullOutputPath = c.spill.path
		}
	}
	res.SpillError = c.err

	total := c.total
	budget := maxChars - len(notice(total, total)) - m
	if budget < 0 {
		// No room for the notice: as much head as fits, then the marker.
		if m > maxChars {
			res.Output = FirstChars(marker, maxChars)
		} else {
			res.Output = string(FirstChars(c.early, maxChars-m)) + marker
		}
		res.TruncationNote = c.note(&res, maxChars-m, 0)
		return res
	}
	headN := budget * 4 / 10
	tailN := budget - headN
	head := FirstChars(c.early, headN)
	var src []byte
	if c.tail.full {
		src = c.tail.contents()
		for len(src) > 0 && src[0]&0xC0 == 0x80 { // a rune cut by the ring
			src = src[1:]
		}
	} else {
		src = append(c.early, c.tail.contents()...)
	}
	tail := LastChars(src, tailN)
	var sb strings.Builder
	sb.Grow(len(head) + len(tail) + 128 + len(marker))
	sb.Write(head)
	sb.WriteString(notice(total-headN-tailN, total))
	sb.Write(tail)
	sb.WriteString(marker)
	res.Output = sb.String()
	res.TruncationNote = c.note(&res, headN, tailN)
	return res
}

// note builds Result.TruncationNote.
func (c *Capture) note(res *Result, headN, tailN int) string {
	s := "Output truncated: showing the first " + commafy(headN)
	if tailN > 0 {
		s += " and last " + commafy(tailN)
	}
	s += " of " + commafy(res.TotalChars) + " chars"
	switch {
	case res.FullOutputPath != "" && c.spill.cut:
		s += "; full output (first " + commafy(c.spill.chars) + " chars) in " + res.FullOutputPath
	case res.FullOutputPath != "":
		s += "; full output in " + res.FullOutputPath
	case res.SpillError != nil:
		s += fmt.Sprintf("; full output could not be saved: %v", res.SpillError)
	}
	return s + "."
}

// notice is the text joining head and tail of truncated output.
func notice(omitted, total int) string {
	return "\n\n... [OUTPUT TRUNCATED - " + commafy(omitted) + " chars omitted out of " + commafy(total) + " total] ...\n\n"
}

// commafy formats n with thousands separators: 1234567 -> "1,234,567".
func commafy(n int) string {
	s := strconv.Itoa(n)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// runeCount counts the runes of valid UTF-8: every byte that is not a
// continuation byte starts one. Eight bytes at a time.
func runeCount(b []byte) int {
	n, cont := len(b), 0
	for len(b) >= 8 {
		w := binary.LittleEndian.Uint64(b)
		cont += bits.OnesCount64(w &^ (w << 1) & msb)
		b = b[8:]
	}
	for _, x := range b {
		if x&0xC0 == 0x80 {
			cont++
		}
	}
	return n - cont
}

// LastChars returns the suffix of valid UTF-8 s holding its last n
// characters (runes), or all of s if it has fewer. It is the one
// truncation helper of foreground and background output.
func LastChars[T ~string | ~[]byte](s T, n int) T {
	if n <= 0 {
		return s[len(s):]
	}
	for i := len(s) - 1; i >= 0; i-- {
		if s[i]&0xC0 != 0x80 {
			n--
			if n == 0 {
				return s[i:]
			}
		}
	}
	return s
}

// FirstChars returns the prefix of valid UTF-8 s holding its first n
// characters (runes), or all of s if it has fewer.
func FirstChars[T ~string | ~[]byte](s T, n int) T {
	if n <= 0 {
		return s[:0]
	}
	for i := 0; i < len(s); i++ {
		if s[i]&0xC0 != 0x80 {
			if n == 0 {
				return s[:i]
			}
			n--
		}
	}
	return s
}

// skipRunes returns the byte offset at which rune n of valid UTF-8 b
// starts, or len(b) if b has n runes or fewer: len(FirstChars(b, n)),
// eight bytes at a time.
func skipRunes(b []byte, n int) int {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		if c := 8 - bits.OnesCount64(w&^(w<<1)&msb); c > n {
			break
		} else {
			n -= c
		}
	}
	for ; i < len(b); i++ {
		if b[i]&0xC0 != 0x80 {
			if n == 0 {
				return i
			}
			n--
		}
	}
	return len(b)
}

// ring keeps the last len(buf) bytes written to it.
type ring struct {
	buf  []byte
	pos  int  // next write position
	full bool // buf has been filled: contents are len(buf) bytes
}

func (r *ring) init(size int) { r.buf = make([]byte, size) }

func (r *ring) write(b []byte) {
	if len(b) >= len(r.buf) {
		copy(r.buf, b[len(b)-len(r.buf):])
		r.pos, r.full = 0, true
		return
	}
	n := copy(r.buf[r.pos:], b)
	copy(r.buf, b[n:])
	if r.pos+len(b) >= len(r.buf) {
		r.full = true
	}
	r.pos = (r.pos + len(b)) % len(r.buf)
}

// contents returns the held bytes, oldest first.
func (r *ring) contents() []byte {
	if !r.full {
		return r.buf[:r.pos]
	}
	return append(append([]byte(nil), r.buf[r.pos:]...), r.buf[:r.pos]...)
}
