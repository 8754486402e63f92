package output

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// Placeholder replaces the body of every redacted secret.
const Placeholder = "[REDACTED]"

const (
	// lineLimit bounds the partial line the redactor holds while waiting
	// for its end; a longer line is redacted and passed on in pieces.
	lineLimit = 64 << 10
	// pemMaxBody bounds how much text after a BEGIN ... PRIVATE KEY line is
	// treated as key material before the redactor gives up on the block.
	pemMaxBody = 64 << 10
	// minSecret is the shortest body accepted for the prefixed token shapes.
	minSecret = 20
)

var (
	pemBegin = []byte("-----BEGIN ")
	pemEnd   = []byte("-----END ")
	pemDash  = []byte("-----")
	pemKey   = []byte("PRIVATE KEY")
	placeNL  = []byte(Placeholder + "\n")
	placeB   = []byte(Placeholder)
)

// Byte classes used by the matchers.
var (
	anchorByte [256]bool // bytes at which a secret shape is checked
	alnum      [256]bool // [A-Za-z0-9]
	upperDigit [256]bool // [A-Z0-9]
	b64url     [256]bool // [A-Za-z0-9_-]
	patBody    [256]bool // [A-Za-z0-9_]
	slackBody  [256]bool // [A-Za-z0-9-]
	pemBody    [256]bool // base64 and blanks
	pemLabel   [256]bool // [A-Z0-9 ]
	tokenEnd   [256]bool // ends a bearer token
)

func init() {
	for _, c := range []byte("-_:=AJ") {
		anchorByte[c] = true
	}
	for c := 0; c < 256; c++ {
		b := byte(c)
		lower, upper, digit := b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9'
		alnum[c] = lower || upper || digit
		upperDigit[c] = upper || digit
		b64url[c] = alnum[c] || b == '_' || b == '-'
		patBody[c] = alnum[c] || b == '_'
		slackBody[c] = alnum[c] || b == '-'
		pemBody[c] = alnum[c] || b == '+' || b == '/' || b == '=' || b == ' ' || b == '\t' || b == '\r' || b == '\n'
		pemLabel[c] = upper || digit || b == ' '
	}
	for _, c := range []byte(" \t\r\n\"',;`\\") {
		tokenEnd[c] = true
	}
}

// redactor is the streaming redaction stage. It works on whole lines (no
// token shape spans a line), holding at most lineLimit bytes of a partial
// line, and follows PEM private key blocks across lines with a small state
// machine that never buffers the key: body lines are dropped as they come.
type redactor struct {
	emit     func([]byte) // receives the redacted text; must not keep the slice
	pending  []byte       // partial line
	out      []byte       // scratch for lines that changed
	pem      bool         // inside a multi-line private key block
	pemBytes int          // body bytes dropped in the current block
}

// write feeds valid UTF-8 text to the redactor.
func (r *redactor) write(p []byte) {
	if len(r.pending) > 0 {
		k := bytes.IndexByte(p, '\n')
		if k < 0 {
			r.addPending(p)
			return
		}
		r.addPending(p[:k+1])
		r.text(r.pending)
		r.pending = r.pending[:0]
		p = p[k+1:]
	}
	if k := bytes.LastIndexByte(p, '\n'); k >= 0 {
		r.text(p[:k+1])
		p = p[k+1:]
	}
	r.addPending(p)
}

// addPending appends to the partial line, passing on a piece whenever it
// would exceed lineLimit.
func (r *redactor) addPending(p []byte) {
	for len(r.pending)+len(p) > lineLimit {
		room := lineLimit - len(r.pending)
		r.pending = append(r.pending, p[:room]...)
		p = p[room:]
		cut := cutPoint(r.pending)
		r.text(r.pending[:cut])
		r.pending = r.pending[:copy(r.pending, r.pending[cut:])]
	}
	r.pending = append(r.pending, p...)
}

// cutPoint picks where to split an over-long partial line: after the last
// blank in its second half (so a token is rarely cut in two), else at the
// end minus any incomplete trailing UTF-8 sequence.
func cutPoint(b []byte) int {
	half := len(b) / 2
	if j := bytes.LastIndexAny(b[half:], " \t"); j >= 0 {
		return half + j + 1
	}
	k := len(b) - 1
	for k > 0 && b[k]&0xC0 == 0x80 {
		k--
	}
	if n, _, _ := seqInfo(b[k]); n > 0 && k+n > len(b) && k > 0 {
		return k
	}
	return len(b)
}

// flush ends the stream: the partial line is redacted and an unfinished
// private key block is closed with the placeholder.
func (r *redactor) flush() {
	if len(r.pending) > 0 {
		r.text(r.pending)
		r.pending = r.pending[:0]
	}
	if r.pem {
		r.pem = false
		r.emit(placeB)
	}
}

// text redacts b, which holds whole lines except at a forced split or the
// end of the stream.
func (r *redactor) text(b []byte) {
	for len(b) > 0 {
		if r.pem {
			line := b
			if k := bytes.IndexByte(b, '\n'); k >= 0 {
				line = b[:k+1]
			}
			b = b[len(line):]
			r.pemLine(line)
			continue
		}
		idx := bytes.Index(b, pemBegin)
		if idx < 0 {
			r.tokens(b)
			return
		}
		ls := bytes.LastIndexByte(b[:idx], '\n') + 1
		if ls > 0 {
			r.tokens(b[:ls])
		}
		le := len(b)
		if k := bytes.IndexByte(b[idx:], '\n'); k >= 0 {
			le = idx + k + 1
		}
		r.line(b[ls:le])
		b = b[le:]
	}
}

// pemHeader returns the length of the "-----BEGIN/END <label> PRIVATE
// KEY<label>-----" header at the start of b (which begins with prefix), or 0.
func pemHeader(b, prefix []byte) int {
	i := len(prefix)
	for i < len(b) && i-len(prefix) < 64 && pemLabel[b[i]] {
		i++
	}
	if !bytes.Contains(b[len(prefix):i], pemKey) || !bytes.HasPrefix(b[i:], pemDash) {
		return 0
	}
	return i + len(pemDash)
}

// findPem returns the offset of the first private key header with prefix in
// b and the header's length, or -1.
func findPem(b, prefix []byte) (int, int) {
	off := 0
	for {
		k := bytes.Index(b[off:], prefix)
		if k < 0 {
			return -1, 0
		}
		if n := pemHeader(b[off+k:], prefix); n > 0 {
			return off + k, n
		}
		off += k + len(prefix)
	}
}

// line redacts one line that may open a private key block.
func (r *redactor) line(line []byte) {
	for {
		idx, n := findPem(line, pemBegin)
		if idx < 0 {
			r.tokens(line)
			return
		}
		r.tokens(line[:idx])
		r.emit(line[idx : idx+n])
		rest := line[idx+n:]
		if e, _ := findPem(rest, pemEnd); e >= 0 {
			r.emit(placeB) // the whole block is on this line
			line = rest[e:]
			continue
		}
		r.pem = true
		r.pemBytes = 0
		switch {
		case bytes.HasSuffix(rest, []byte("\r\n")):
			r.emit([]byte("\r\n"))
		case bytes.HasSuffix(rest, []byte("\n")):
			r.emit([]byte("\n"))
		}
		return
	}
}

// pemLine handles one line inside a private key block.
func (r *redactor) pemLine(line []byte) {
	if e, _ := findPem(line, pemEnd); e >= 0 {
		r.pem = false
		r.emit(placeNL)
		r.line(line[e:])
		return
	}
	if r.pemBytes+len(line) > pemMaxBody || !pemBodyLine(line) {
		// Not key material after all: close the block, keep the line.
		r.pem = false
		r.emit(placeNL)
		r.line(line)
		return
	}
	r.pemBytes += len(line)
}

// pemHeaders are the header names allowed inside a key block (RFC 1421
// encryption headers and OpenPGP armor headers).
var pemHeaders = [][]byte{
	[]byte("Proc-Type: "), []byte("DEK-Info: "), []byte("Version: "),
	[]byte("Comment: "), []byte("Charset: "), []byte("Hash: "),
}

// pemBodyLine reports whether line can be part of a PEM body: base64 and
// blanks, or a header such as "Proc-Type: 4,ENCRYPTED".
func pemBodyLine(line []byte) bool {
	i := 0
	for i < len(line) && pemBody[line[i]] {
		i++
	}
	if i == len(line) {
		return true
	}
	for _, h := range pemHeaders {
		if bytes.HasPrefix(line, h) {
			return true
		}
	}
	return false
}

// tokens redacts the single-line secret shapes in b and emits the result.
// Candidates are found by a scan for anchor bytes ('-', '_', ':', '=', 'A',
// 'J'); each anchor is then checked against the shapes it can belong to.
func (r *redactor) tokens(b []byte) {
	last, changed := 0, false
	for i := 0; i < len(b); {
		i = nextAnchor(b, i)
		if i == len(b) {
			break
		}
		start, end, keep := matchAt(b, i, last)
		if end == 0 {
			i++
			continue
		}
		if !changed {
			r.out = r.out[:0]
			changed = true
		}
		r.out = append(r.out, b[last:start+keep]...)
		r.out = append(r.out, Placeholder...)
		last, i = end, end
	}
	if !changed {
		if len(b) > 0 {
			r.emit(b)
		}
		return
	}
	r.out = append(r.out, b[last:]...)
	r.emit(r.out)
}

// nextAnchor returns the index of the first anchor byte at or after i, or
// len(b). It skips eight anchor-free bytes at a time: for each anchor c,
// (x-lsb)&^x&msb with x = w^(c*lsb) is non-zero iff some byte of w is c.
func nextAnchor(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		x1 := w ^ '-'*lsb
		x2 := w ^ '_'*lsb
		x3 := w ^ ':'*lsb
		x4 := w ^ '='*lsb
		x5 := w ^ 'A'*lsb
		x6 := w ^ 'J'*lsb
		z := (x1-lsb)&^x1 | (x2-lsb)&^x2 | (x3-lsb)&^x3 |
			(x4-lsb)&^x4 | (x5-lsb)&^x5 | (x6-lsb)&^x6
		if z &= msb; z != 0 {
			// The lowest flagged byte is always a true match.
			return i + bits.TrailingZeros64(z)/8
		}
	}
	for i < len(b) && !anchorByte[b[i]] {
		i++
	}
	return i
}

// runOf returns the first index at or after i whose byte is not in set.
func runOf(b []byte, i int, set *[256]bool) int {
	for i < len(b) && set[b[i]] {
		i++
	}
	return i
}

// wordStart reports whether a token may start at s: it is not glued to a
// preceding letter or digit.
func wordStart(b []byte, s int) bool {
	return s == 0 || !alnum[b[s-1]]
}

// matchAt checks the anchor byte at i. On a match it returns the secret's
// start and end and how many leading bytes (a public type prefix) to keep;
// end is 0 when nothing matched. A match never starts before min.
func matchAt(b []byte, i, min int) (start, end, keep int) {
	switch b[i] {
	case '-':
		// sk-..., sk-proj-..., sk-ant-...
		if s := i - 2; s >= min && b[s] == 's' && b[s+1] == 'k' && wordStart(b, s) {
			if e := runOf(b, i+1, &b64url); e-(i+1) >= minSecret {
				keep = 3
				switch {
				case bytes.HasPrefix(b[i+1:], []byte("ant-")):
					keep = 7
				case bytes.HasPrefix(b[i+1:], []byte("proj-")):
					keep = 8
				}
				return s, e, keep
			}
		}
		// xoxb-, xoxp-, xoxa-, xoxr-, xoxs-
		if s := i - 4; s >= min && b[s] == 'x' && b[s+1] == 'o' && b[s+2] == 'x' &&
			bytes.IndexByte([]byte("abprs"), b[s+3]) >= 0 && wordStart(b, s) {
			if e := runOf(b, i+1, &slackBody); e-(i+1) >= minSecret {
				return s, e, 5
			}
		}
	case '_':
		// ghp_, gho_, ghu_, ghs_, ghr_
		if s := i - 3; s >= min && b[s] == 'g' && b[s+1] == 'h' &&
			bytes.IndexByte([]byte("pousr"), b[s+2]) >= 0 && wordStart(b, s) {
			if e := runOf(b, i+1, &alnum); e-(i+1) >= minSecret {
				return s, e, 4
			}
		}
		// github_pat_
		if s := i - 6; s >= min && bytes.HasPrefix(b[s:], []byte("github_pat_")) && wordStart(b, s) {
			if e := runOf(b, s+11, &patBody); e-(s+11) >= minSecret {
				return s, e, 11
			}
		}
	case 'J':
		// JWT: eyJ<header>.<payload>.<signature>
		if s := i - 2; s >= min && b[s] == 'e' && b[s+1] == 'y' && wordStart(b, s) {
			e1 := runOf(b, i+1, &b64url)
			if e1-s < 10 || e1 >= len(b) || b[e1] != '.' {
				break
			}
			e2 := runOf(b, e1+1, &b64url)
			if e2-(e1+1) < 3 || e2 >= len(b) || b[e2] != '.' {
				break
			}
			return s, runOf(b, e2+1, &b64url), 0
		}
	case 'A':
		if i+4 > len(b) || !wordStart(b, i) {
			break
		}
		switch string(b[i : i+4]) {
		case "AKIA", "ASIA":
			// AWS access key id: exactly 16 more of [A-Z0-9].
			if e := runOf(b, i+4, &upperDigit); e-(i+4) == 16 && (e == len(b) || !alnum[b[e]]) {
				return i, e, 4
			}
		case "AIza":
			if e := runOf(b, i+4, &b64url); e-(i+4) >= 30 {
				return i, e, 4
			}
		}
	case ':', '=':
		return matchBearer(b, i, min)
	}
	return 0, 0, 0
}

// matchBearer matches "Authorization: Bearer <token>" (any case, optional
// quotes as in JSON or curl -H, ':' or '=') with the separator at i, and
// returns the token's span.
func matchBearer(b []byte, i, min int) (start, end, keep int) {
	if i < 13 || (b[i-1]|0x20 != 'n' && b[i-1] != '"' && b[i-1] != '\'') {
		return 0, 0, 0 // quick reject: no "authorization" right before
	}
	k := i
	for k > 0 && (b[k-1] == '"' || b[k-1] == '\'') {
		k--
	}
	const name = "authorization"
	s := k - len(name)
	if s < 0 || !bytes.EqualFold(b[s:k], []byte(name)) || (s > 0 && alnum[b[s-1]]) {
		return 0, 0, 0
	}
	p := i + 1
	for p < len(b) && (b[p] == ' ' || b[p] == '\t' || b[p] == '"' || b[p] == '\'') {
		p++
	}
	if p+6 > len(b) || !bytes.EqualFold(b[p:p+6], []byte("bearer")) {
		return 0, 0, 0
	}
	p += 6
	q := p
	for q < len(b) && (b[q] == ' ' || b[q] == '\t') {
		q++
	}
	if q == p || q < min {
		return 0, 0, 0
	}
	e := q
	for e < len(b) && !tokenEnd[b[e]] {
		e++
	}
	if e == q {
		return 0, 0, 0
	}
	return q, e, 0
}

// Redact replaces known secret shapes in s with Placeholder, keeping only a
// public type prefix such as "ghp_" or "sk-ant-": OpenAI and Anthropic keys
// (sk-..., at least 20 characters after "sk-"), GitHub tokens (ghp_, gho_,
// ghu_, ghs_, ghr_, github_pat_), Slack tokens (xoxb-, xoxp-, xoxa-, xoxr-,
// xoxs-), AWS access key ids (AKIA/ASIA + 16), Google API keys (AIza...),
// JWTs, the token of "Authorization: Bearer <token>", and the body of PEM
// private key blocks, which may span lines. A shape glued to a preceding
// letter or digit (as in "task-...") is not a secret.
func Redact(s string) string {
	var out []byte
	r := redactor{emit: func(p []byte) { out = append(out, p...) }}
	r.write([]byte(s))
	r.flush()
	return string(out)
}
