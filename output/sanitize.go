package output

import (
	"encoding/binary"

	"github.com/charmbracelet/x/ansi/parser"
)

// replacementBytes is U+FFFD, the replacement for invalid UTF-8.
var replacementBytes = []byte("\uFFFD")

// safeByte marks the bytes that pass through the sanitizer unchanged when it
// is in the ground state: printable ASCII, tab, line feed and carriage return.
var safeByte [256]bool

func init() {
	for b := 0x20; b < 0x7f; b++ {
		safeByte[b] = true
	}
	safeByte['\t'], safeByte['\n'], safeByte['\r'] = true, true, true
}

// sanitizer is the first streaming stage: it repairs UTF-8 and strips
// terminal escape sequences. It keeps at most three bytes of an incomplete
// UTF-8 sequence and the escape parser state between calls, so a character
// or an escape sequence split across writes is handled as if it had arrived
// whole. The escape grammar is the DEC VT500 state machine of
// github.com/charmbracelet/x/ansi/parser, driven one code point at a time:
// 8-bit C1 controls are the code points U+0080..U+009F of the repaired text
// (a raw 0x9B byte is invalid UTF-8 and becomes U+FFFD, as in a UTF-8
// terminal).
//
// A control string (OSC, DCS, SOS, PM, APC) never swallows more than the
// rest of its line: a line feed ends it, as does reaching maxControlString
// bytes, after which its content shows as text. So an unterminated one
// cannot hide the output that follows it.
type sanitizer struct {
	part   [4]byte // bytes of an incomplete UTF-8 sequence
	partN  int
	state  parser.State
	strLen int    // bytes of the current control string so far
	buf    []byte // output of the current call
}

// maxControlString bounds the bytes a control string may hold before it is
// abandoned (legitimate ones, titles and hyperlinks, are far shorter).
const maxControlString = 64 << 10

// Write is the stage form of process.
func (s *sanitizer) Write(p []byte, next func([]byte)) {
	if b := s.process(p); len(b) > 0 {
		next(b)
	}
}

// Flush is the stage form of flush.
func (s *sanitizer) Flush(next func([]byte)) {
	if b := s.flush(); len(b) > 0 {
		next(b)
	}
}

// clone copies the state, less an incomplete UTF-8 sequence: a view of
// a running stream should not show U+FFFD for a character whose last
// bytes are still on their way.
func (s *sanitizer) clone() stage {
	c := *s
	c.buf, c.partN = nil, 0
	return &c
}

// inString reports whether state is inside a control string or the
// parameters that open one, where a line feed is not executed but ends it.
func inString(state parser.State) bool {
	switch state {
	case parser.OscStringState, parser.DcsEntryState, parser.DcsIntermediateState,
		parser.DcsParamState, parser.DcsStringState, parser.SosStringState,
		parser.PmStringState, parser.ApcStringState:
		return true
	}
	return false
}

// countString adds n bytes to the current control string and abandons it
// when it grows past maxControlString.
func (s *sanitizer) countString(n int) {
	s.strLen += n
	if s.strLen > maxControlString {
		s.state = parser.GroundState
		s.strLen = 0
	}
}

// seqInfo returns the length of the UTF-8 sequence a lead byte starts and the
// range allowed for its second byte; n is 0 for a byte that cannot start one.
func seqInfo(lead byte) (n int, lo, hi byte) {
	switch {
	case lead >= 0xC2 && lead <= 0xDF:
		return 2, 0x80, 0xBF
	case lead == 0xE0:
		return 3, 0xA0, 0xBF
	case lead == 0xED:
		return 3, 0x80, 0x9F
	case lead >= 0xE1 && lead <= 0xEF:
		return 3, 0x80, 0xBF
	case lead == 0xF0:
		return 4, 0x90, 0xBF
	case lead >= 0xF1 && lead <= 0xF3:
		return 4, 0x80, 0xBF
	case lead == 0xF4:
		return 4, 0x80, 0x8F
	}
	return 0, 0, 0
}

// process sanitizes p. The result aliases p or an internal buffer and is
// valid until the next call.
func (s *sanitizer) process(p []byte) []byte {
	s.buf = s.buf[:0]
	if s.partN > 0 {
		p = p[s.resume(p):]
		if s.partN > 0 {
			return s.buf
		}
	}
	if s.state == parser.GroundState {
		j := safePrefix(p)
		if j == len(p) && len(s.buf) == 0 {
			return p
		}
		s.buf = append(s.buf, p[:j]...)
		p = p[j:]
	}
	s.run(p)
	return s.buf
}

// flush ends the stream: a held incomplete sequence becomes U+FFFD.
func (s *sanitizer) flush() []byte {
	s.buf = s.buf[:0]
	if s.partN > 0 {
		s.partN = 0
		s.wide(replacementBytes)
	}
	return s.buf
}

// resume continues the incomplete sequence held from the previous call and
// returns how many bytes of p it consumed.
func (s *sanitizer) resume(p []byte) int {
	n, lo, hi := seqInfo(s.part[0])
	i := 0
	for s.partN < n && i < len(p) {
		c := p[i]
		l, h := byte(0x80), byte(0xBF)
		if s.partN == 1 {
			l, h = lo, hi
		}
		if c < l || c > h {
			// The held bytes are one maximal invalid subpart.
			s.partN = 0
			s.wide(replacementBytes)
			return i
		}
		s.part[s.partN] = c
		s.partN++
		i++
	}
	if s.partN == n {
		s.partN = 0
		s.validRune(s.part[:n])
	}
	return i
}

// run handles p byte by byte, with a fast path for runs of safe ASCII.
func (s *sanitizer) run(p []byte) {
	for i := 0; i < len(p); {
		b := p[i]
		if b < 0x80 {
			switch s.state {
			case parser.GroundState:
				if safeByte[b] {
					j := i + safePrefix(p[i:])
					s.buf = append(s.buf, p[i:j]...)
					i = j
					continue
				}
			case parser.CsiEntryState, parser.CsiParamState:
				// Parameter bytes: nothing to output, state CsiParam.
				if b >= 0x30 && b <= 0x3F {
					for i++; i < len(p) && p[i] >= 0x30 && p[i] <= 0x3F; i++ {
					}
					s.state = parser.CsiParamState
					continue
				}
			case parser.OscStringState, parser.DcsStringState, parser.SosStringState,
				parser.PmStringState, parser.ApcStringState:
				// String content: dropped, state unchanged.
				if b >= 0x20 && b <= 0x7E {
					// At most one byte past the cap, which abandons
					// the string: what follows is text again.
					end := min(len(p), i+maxControlString-s.strLen+1)
					j := i + 1
					for j < end && p[j] >= 0x20 && p[j] <= 0x7E {
						j++
					}
					s.countString(j - i)
					i = j
					continue
				}
			}
			s.control(b)
			i++
			continue
		}
		n, lo, hi := seqInfo(b)
		if n == 0 {
			s.wide(replacementBytes)
			i++
			continue
		}
		k := 1
		for k < n && i+k < len(p) {
			c := p[i+k]
			l, h := byte(0x80), byte(0xBF)
			if k == 1 {
				l, h = lo, hi
			}
			if c < l || c > h {
				break
			}
			k++
		}
		switch {
		case k == n:
			s.validRune(p[i : i+n])
		case i+k == len(p):
			// A valid prefix cut by the end of this write: keep it.
			s.partN = copy(s.part[:], p[i:])
		default:
			// U+FFFD for the maximal invalid subpart, as Unicode recommends.
			s.wide(replacementBytes)
		}
		i += k
	}
}

// validRune handles one complete multi-byte UTF-8 sequence.
func (s *sanitizer) validRune(raw []byte) {
	if raw[0] == 0xC2 && raw[1] < 0xA0 {
		s.control(raw[1]) // a C1 control code point
		return
	}
	s.wide(raw)
}

// control feeds an ASCII byte or a C1 code point (as its 8-bit form) to the
// escape state machine and keeps it only if it is visible text or one of
// \n, \t and \r.
func (s *sanitizer) control(b byte) {
	if b == '\n' && inString(s.state) {
		// A control string never holds a line feed; an unterminated one
		// must not swallow the rest of the output.
		s.state, s.strLen = parser.GroundState, 0
		s.buf = append(s.buf, '\n')
		return
	}
	next, action := parser.Table.Transition(s.state, b)
	switch {
	case inString(s.state) && inString(next):
		if s.countString(1); s.state == parser.GroundState {
			// Abandoned: b is read as text again.
			next, action = parser.Table.Transition(s.state, b)
		}
	case inString(next):
		s.strLen = 0
	}
	switch action {
	case parser.PrintAction:
		s.buf = append(s.buf, b)
	case parser.ExecuteAction:
		if b == '\n' || b == '\t' || b == '\r' {
			s.buf = append(s.buf, b)
		}
	}
	s.state = next
}

// wide handles a code point of U+00A0 or above (raw is its UTF-8 form).
// Inside a control string it is part of the string; inside any other
// sequence it ends the sequence and is kept.
func (s *sanitizer) wide(raw []byte) {
	switch s.state {
	case parser.GroundState:
	case parser.OscStringState, parser.DcsStringState, parser.SosStringState,
		parser.PmStringState, parser.ApcStringState:
		s.countString(len(raw))
		return
	default:
		s.state = parser.GroundState
	}
	s.buf = append(s.buf, raw...)
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// plainWord reports whether all eight bytes of w are printable ASCII
// (0x20..0x7E).
func plainWord(w uint64) bool {
	if w&msb != 0 {
		return false
	}
	if (w-0x20*lsb)&^w&msb != 0 { // some byte < 0x20
		return false
	}
	x := w ^ 0x7F*lsb // some byte == 0x7F
	return (x-lsb)&^x&msb == 0
}

// safePrefix returns the length of the longest prefix of p made of safe
// bytes, eight bytes at a time where it can.
func safePrefix(p []byte) int {
	i := 0
	for i+8 <= len(p) {
		if !plainWord(binary.LittleEndian.Uint64(p[i:])) {
			for k := i; k < i+8; k++ {
				if !safeByte[p[k]] {
					return k
				}
			}
		}
		i += 8
	}
	for i < len(p) && safeByte[p[i]] {
		i++
	}
	return i
}

// StripANSI removes terminal escape sequences from s: CSI, OSC (ended by BEL
// or ST), DCS, SOS, PM and APC strings, other ESC sequences, 8-bit C1
// controls (U+0080..U+009F) and C0 controls other than \n, \t and \r. As a
// side effect invalid UTF-8 in s is replaced by U+FFFD, so the result is
// always valid UTF-8. An unterminated sequence at the end of s is dropped.
func StripANSI(s string) string {
	var z sanitizer
	out := append([]byte(nil), z.process([]byte(s))...)
	out = append(out, z.flush()...)
	return string(out)
}
