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
	// minTokenID is the shortest body accepted after a Modal token's
	// "ak-" (token id) or "as-" (token secret).
	minTokenID = 16
	// minAuthCredential is the shortest credential accepted after
	// "Authorization:" without a scheme word.
	minAuthCredential = 16
	// cutOverlap is how much of an over-long line stays held at a forced
	// cut: more than any secret shape needs to be recognised (a prefix and
	// its minimum body, "Authorization: Bearer ", a JWT's first segments),
	// so that a secret that begins near the cut is seen whole.
	cutOverlap = 4 << 10
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
	credByte   [256]bool // not tokenEnd: a credential's bytes
	jwtBody    [256]bool // [A-Za-z0-9_.-]
	schemeByte [256]bool // a URL scheme: [A-Za-z0-9+.-]
	// authorityByte: a URL's authority, up to its path, query or fragment.
	authorityByte [256]bool
	// keyByte: a key of YAML, JSON or TOML: [A-Za-z0-9_.-].
	keyByte [256]bool
	// digitByte: [0-9].
	digitByte [256]bool
	// Values of secret assignments: double- and single-quoted, unquoted at
	// the start of a line (to its end), and unquoted elsewhere.
	dqValue, sqValue, lineValue, argValue [256]bool
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
	for c := 0; c < 256; c++ {
		b := byte(c)
		credByte[c] = !tokenEnd[c]
		jwtBody[c] = b64url[c] || b == '.'
		schemeByte[c] = alnum[c] || b == '+' || b == '.' || b == '-'
		authorityByte[c] = !tokenEnd[c] && bytes.IndexByte([]byte("/?#<>()"), b) < 0
		lineValue[c] = b != '\n' && b != '\r'
		dqValue[c] = lineValue[c] && b != '"'
		sqValue[c] = lineValue[c] && b != '\''
		argValue[c] = !tokenEnd[c] && bytes.IndexByte([]byte("&|<>()"), b) < 0
		keyByte[c] = patBody[c] || b == '.' || b == '-'
		digitByte[c] = b >= '0' && b <= '9'
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
	// skip, when set, holds the bytes that continue a secret which reached
	// a forced cut at the end of the line buffer: they are dropped as they
	// arrive, until the first byte outside the set.
	skip *[256]bool
	// shell: the text is a shell command line (RedactCommand).
	shell bool
}

// Write is the stage form of write.
func (r *redactor) Write(p []byte, next func([]byte)) {
	r.emit = next
	if r.skip != nil {
		p = p[runOf(p, 0, r.skip):]
		if len(p) == 0 {
			return
		}
		r.skip = nil
	}
	r.write(p)
}

// Flush is the stage form of flush.
func (r *redactor) Flush(next func([]byte)) {
	r.emit = next
	r.skip = nil
	r.flush()
}

func (r *redactor) clone() stage {
	c := *r
	c.emit, c.out = nil, nil
	c.pending = append([]byte(nil), r.pending...)
	return &c
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
		c, skip := r.cut()
		r.text(r.pending[:c])
		r.pending = r.pending[:copy(r.pending, r.pending[c:])]
		if skip != nil {
			// The secret may go on in p: drop what continues it.
			k := runOf(p, 0, skip)
			p = p[k:]
			if len(p) == 0 {
				r.skip = skip
				return
			}
		}
	}
	r.pending = append(r.pending, p...)
}

// cut picks where to split the over-long partial line r.pending (of
// lineLimit bytes). It keeps at least cutOverlap bytes held, so that a
// secret starting near the split is still seen whole in the next piece;
// it prefers the byte after the last blank of the second half; and it
// never splits a secret, context included ("Authorization: Bearer", a
// variable's name), nor a private key header. Only a secret that fills
// the whole buffer is passed on to the end, redacted; skip then lists the
// bytes that would continue it.
func (r *redactor) cut() (c int, skip *[256]bool) {
	p := r.pending
	n := len(p)
	c = n - cutOverlap
	if j := bytes.LastIndexAny(p[n/2:c], " \t"); j >= 0 {
		c = n/2 + j + 1
	}
	for c > 0 && p[c]&0xC0 == 0x80 {
		c--
	}
	for _, prefix := range [][]byte{pemBegin, pemEnd} {
		for off := 0; ; {
			k, hl := findPem(p[off:], prefix)
			if k < 0 {
				break
			}
			if s, e := off+k, off+k+hl; s < c && c < e {
				c = s
			}
			off += k + hl
		}
	}
	if r.pem {
		return c, nil // key material is dropped, not matched
	}
	last := 0
	for i := 0; i < n; {
		i = nextAnchor(p, i)
		if i == n {
			break
		}
		if !maybeSecret(p, i) {
			i++
			continue
		}
		m := matchAt(p, i, last, r.shell)
		if m.end == 0 {
			i++
			continue
		}
		if m.from < c && c < m.end {
			switch {
			case m.end < n:
				c = m.end
			case m.from > 0:
				return m.from, nil
			default:
				return n, m.more
			}
		}
		last, i = m.end, m.end
	}
	return c, nil
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
		if !maybeSecret(b, i) {
			i++
			continue
		}
		m := matchAt(b, i, last, r.shell)
		if m.end == 0 {
			i++
			continue
		}
		if !changed {
			r.out = r.out[:0]
			changed = true
		}
		r.out = append(r.out, b[last:m.start+m.keep]...)
		r.out = append(r.out, Placeholder...)
		last, i = m.end, m.end
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

// runBack returns the start of the run of bytes in set that ends at i.
func runBack(b []byte, i int, set *[256]bool) int {
	for i > 0 && set[b[i-1]] {
		i--
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

// match is a secret found by matchAt: b[start+keep:end] is replaced by
// the placeholder (b[start:start+keep] is a public type prefix). from is
// the first byte the match depends on, context included (a variable's
// name, "Authorization:", a URL's scheme), so a line must not be split
// between from and end. more lists the bytes that would make the secret
// longer if the text went on (nil for fixed-length shapes). end is 0 when
// nothing matched.
type match struct {
	from, start, end, keep int
	more                   *[256]bool
}

// matchAt checks the anchor byte at i. A match never starts before min.
// shell says the text is a shell command line (see matchAssign).
// Callers check maybeSecret(b, i) first.
func matchAt(b []byte, i, min int, shell bool) match {
	switch b[i] {
	case ':':
		if afterAuthorization(b, i) {
			if m := matchAuth(b, i, min); m.end != 0 {
				return m
			}
		}
		if m := matchURL(b, i, min); m.end != 0 {
			return m
		}
		return matchKey(b, i, min)
	case '=':
		if afterAuthorization(b, i) {
			if m := matchAuth(b, i, min); m.end != 0 {
				return m
			}
		}
		return matchAssign(b, i, min, shell)
	}
	return matchShape(b, i, min)
}

// afterAuthorization is a quick look for "authorization" (perhaps quoted)
// right before the separator at i.
func afterAuthorization(b []byte, i int) bool {
	k := i
	for k > 0 && k > i-2 && (b[k-1] == '"' || b[k-1] == '\'') {
		k--
	}
	return k >= 13 && b[k-1]|0x20 == 'n' && b[k-2]|0x20 == 'o' && b[k-13]|0x20 == 'a'
}

// maybeSecret is a cheap look at the bytes around the anchor at i: false
// means no secret can match there. Most anchors in ordinary output (dates,
// times, key=value logs, paths) are rejected here.
func maybeSecret(b []byte, i int) bool {
	switch b[i] {
	case ':':
		return (i >= 13 && (b[i-1]|0x20 == 'n' || b[i-1] == '"' || b[i-1] == '\'')) ||
			(i+3 < len(b) && b[i+1] == '/' && b[i+2] == '/') ||
			// a key and its value: "key: v", "key": "v", 'key':'v'
			(i > 0 && i+1 < len(b) && (b[i+1] == ' ' || b[i+1] == '\t' || b[i+1] == '"' || b[i+1] == '\'') &&
				(b[i-1] == '"' || b[i-1] == '\'' || keyByte[b[i-1]] && keyStart(b, runBack(b, i, &keyByte))))
	case '=':
		return i > 0 && patBody[b[i-1]] || i > 1 && (b[i-1] == ' ' || b[i-1] == '\t')
	case '-':
		return i >= 2 && (b[i-1] == 'k' || b[i-2] == 'x' || b[i-1] == 's' && b[i-2] == 'a')
	case '_':
		return i >= 3 && (b[i-3] == 'g' || b[i-1] == 'b' || b[i-3] == 'd' && b[i-1] == 'n')
	case 'J':
		return i >= 2 && b[i-1] == 'y'
	case 'A':
		return i+3 < len(b) && (b[i+1] == 'K' || b[i+1] == 'S' || b[i+1] == 'I')
	}
	return false
}

// matchShape checks the anchor at i against the prefixed token shapes.
func matchShape(b []byte, i, min int) match {
	switch b[i] {
	case '-':
		// sk-..., sk-proj-..., sk-ant-...
		if s := i - 2; s >= min && b[s] == 's' && b[s+1] == 'k' && wordStart(b, s) {
			if e := runOf(b, i+1, &b64url); e-(i+1) >= minSecret {
				keep := 3
				switch {
				case bytes.HasPrefix(b[i+1:], []byte("ant-")):
					keep = 7
				case bytes.HasPrefix(b[i+1:], []byte("proj-")):
					keep = 8
				}
				return match{from: s, start: s, end: e, keep: keep, more: &b64url}
			}
		}
		// Modal's token id and secret: ak-..., as-...
		if s := i - 2; s >= min && b[s] == 'a' && (b[s+1] == 'k' || b[s+1] == 's') && (s == 0 || !b64url[b[s-1]]) {
			if e := runOf(b, i+1, &alnum); e-(i+1) >= minTokenID && (e == len(b) || !b64url[b[e]]) {
				return match{from: s, start: s, end: e, keep: 3, more: &alnum}
			}
		}
		// xoxb-, xoxp-, xoxa-, xoxr-, xoxs-
		if s := i - 4; s >= min && b[s] == 'x' && b[s+1] == 'o' && b[s+2] == 'x' &&
			bytes.IndexByte([]byte("abprs"), b[s+3]) >= 0 && wordStart(b, s) {
			if e := runOf(b, i+1, &slackBody); e-(i+1) >= minSecret {
				return match{from: s, start: s, end: e, keep: 5, more: &slackBody}
			}
		}
	case '_':
		// ghp_, gho_, ghu_, ghs_, ghr_
		if s := i - 3; s >= min && b[s] == 'g' && b[s+1] == 'h' &&
			bytes.IndexByte([]byte("pousr"), b[s+2]) >= 0 && wordStart(b, s) {
			if e := runOf(b, i+1, &alnum); e-(i+1) >= minSecret {
				return match{from: s, start: s, end: e, keep: 4, more: &alnum}
			}
		}
		// Daytona's API keys: dtn_...
		if s := i - 3; s >= min && b[s] == 'd' && b[s+1] == 't' && b[s+2] == 'n' && wordStart(b, s) {
			if e := runOf(b, i+1, &alnum); e-(i+1) >= minSecret {
				return match{from: s, start: s, end: e, keep: 4, more: &alnum}
			}
		}
		// github_pat_
		if s := i - 6; s >= min && bytes.HasPrefix(b[s:], []byte("github_pat_")) && wordStart(b, s) {
			if e := runOf(b, s+11, &patBody); e-(s+11) >= minSecret {
				return match{from: s, start: s, end: e, keep: 11, more: &patBody}
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
			return match{from: s, start: s, end: runOf(b, e2+1, &b64url), more: &jwtBody}
		}
	case 'A':
		if i < min || i+4 > len(b) || !wordStart(b, i) {
			break
		}
		switch string(b[i : i+4]) {
		case "AKIA", "ASIA":
			// AWS access key id: exactly 16 more of [A-Z0-9].
			if e := runOf(b, i+4, &upperDigit); e-(i+4) == 16 && (e == len(b) || !alnum[b[e]]) {
				return match{from: i, start: i, end: e, keep: 4}
			}
		case "AIza":
			if e := runOf(b, i+4, &b64url); e-(i+4) >= 30 {
				return match{from: i, start: i, end: e, keep: 4, more: &b64url}
			}
		}
	}
	return match{}
}

// authSchemes are the Authorization schemes whose credential follows the
// scheme word (compared without case).
var authSchemes = [][]byte{
	[]byte("bearer"), []byte("basic"), []byte("token"), []byte("digest"), []byte("negotiate"),
	[]byte("ntlm"), []byte("bot"), []byte("apikey"), []byte("api-key"), []byte("key"), []byte("oauth"),
	[]byte("sso-key"), []byte("ssws"), []byte("aws4-hmac-sha256"),
}

// matchAuth matches the credential of an Authorization header or
// assignment (any case, optional quotes as in JSON or curl -H, ':' or '='
// at i): "Authorization: <scheme> <credential>" for the usual schemes
// (Bearer, Basic, token, ...), or a bare credential of minAuthCredential
// bytes or more.
func matchAuth(b []byte, i, min int) match {
	if i < 13 || (b[i-1]|0x20 != 'n' && b[i-1] != '"' && b[i-1] != '\'') {
		return match{} // quick reject: no "authorization" right before
	}
	k := i
	for k > 0 && (b[k-1] == '"' || b[k-1] == '\'') {
		k--
	}
	const name = "authorization"
	s := k - len(name)
	if s < 0 || !bytes.EqualFold(b[s:k], []byte(name)) || (s > 0 && alnum[b[s-1]]) {
		return match{}
	}
	p := i + 1
	for p < len(b) && (b[p] == ' ' || b[p] == '\t' || b[p] == '"' || b[p] == '\'') {
		p++
	}
	w := runOf(b, p, &credByte)
	if w == p {
		return match{}
	}
	if w < len(b) && (b[w] == ' ' || b[w] == '\t') {
		scheme := false
		for _, sc := range authSchemes {
			scheme = scheme || bytes.EqualFold(b[p:w], sc)
		}
		if !scheme {
			return match{}
		}
		q := w
		for q < len(b) && (b[q] == ' ' || b[q] == '\t') {
			q++
		}
		e := runOf(b, q, &credByte)
		if e == q || q < min {
			return match{}
		}
		return match{from: s, start: q, end: e, more: &credByte}
	}
	if w-p < minAuthCredential || p < min {
		return match{}
	}
	return match{from: s, start: p, end: w, more: &credByte}
}

// matchURL matches the password of a URL's userinfo,
// scheme://user:PASSWORD@host, with the scheme's ':' at i.
func matchURL(b []byte, i, min int) match {
	if i+3 >= len(b) || b[i+1] != '/' || b[i+2] != '/' {
		return match{}
	}
	s := i
	for s > 0 && i-s < 32 && schemeByte[b[s-1]] {
		s--
	}
	for s < i && !alpha(b[s]) {
		s++ // a scheme starts with a letter
	}
	if s == i {
		return match{}
	}
	end := runOf(b, i+3, &authorityByte)
	at := bytes.LastIndexByte(b[i+3:end], '@')
	if at < 0 {
		return match{}
	}
	at += i + 3
	colon := bytes.IndexByte(b[i+3:at], ':')
	if colon < 0 {
		return match{}
	}
	start := i + 3 + colon + 1
	if start == at || start < min {
		return match{}
	}
	return match{from: s, start: start, end: at}
}

// matchAssign matches the value of an assignment NAME=value whose name
// looks secret (SecretName), with the '=' at i: a quoted value up to its
// closing quote; an unquoted value at the start of a line (env, printenv,
// set, .env files, "export NAME=...") up to the end of the line; any other
// unquoted value (a flag --password=..., a query ?token=...) up to a blank,
// quote or separator, as is every unquoted value in a shell command line
// (shell), where "NAME=value cmd" ends the value at the blank. A value that begins with a known token shape keeps
// that shape's public prefix.
func matchAssign(b []byte, i, floor int, shell bool) match {
	ne := i
	for ne > 0 && (b[ne-1] == ' ' || b[ne-1] == '\t') {
		ne--
	}
	spaced := ne < i
	ns := ne
	for ns > 0 && patBody[b[ns-1]] {
		ns--
	}
	if ns == ne || digit(b[ns]) || !secretName(b[ns:ne]) {
		return match{}
	}
	v := i + 1
	if spaced {
		// TOML and INI: "name = value", the name at the start of its line.
		if !lineStart(b, ns) {
			return match{}
		}
		for v < len(b) && (b[v] == ' ' || b[v] == '\t') {
			v++
		}
	}
	if v >= len(b) || v < floor {
		return match{}
	}
	var e int
	var more *[256]bool
	switch q := b[v]; q {
	case '"', '\'':
		more = &sqValue
		if q == '"' {
			more = &dqValue
		}
		v++
		for e = v; e < len(b) && more[b[e]]; e++ {
			if q == '"' && b[e] == '\\' && e+1 < len(b) && b[e+1] != '\n' {
				e++ // an escaped character
			}
		}
		e = min(e, len(b))
	default:
		more = &argValue
		if !shell && lineStart(b, ns) {
			more = &lineValue
		}
		e = runOf(b, v, more)
	}
	if e == v || b[v] == '=' {
		return match{}
	}
	return match{from: ns, start: v, end: e, more: more, keep: shapePrefix(b, v, e)}
}

// shapePrefix is the public prefix to keep of a secret value b[v:e] that
// is itself a known shape (sk-proj-, ghp_ ...), 0 when it is none.
func shapePrefix(b []byte, v, e int) int {
	for j := v; j < min(e, v+12); j++ {
		if b[j] != ':' && b[j] != '=' && anchorByte[b[j]] {
			if t := matchShape(b, j, v); t.end != 0 && t.start == v {
				return t.keep
			}
		}
	}
	return 0
}

// credentialKeys are keys of YAML, JSON and TOML files (compared without
// case, '-' read as '_') whose values are credentials although SecretName
// does not say so: docker's config.json ("auth", "identitytoken",
// "registrytoken") and kubeconfig's inline client key and certificate.
// The keys SecretName knows (token, password, secret, token_secret,
// client-secret, id-token, tls.key ...) count too.
var credentialKeys = map[string]bool{
	"auth": true, "identitytoken": true, "registrytoken": true,
	"client_key_data": true, "client_certificate_data": true,
}

// pathKeys are keys whose values name a file that holds the credential,
// not the credential (kubeconfig's client-key, a token file).
var pathKeys = map[string]bool{
	"client_key": true, "client_certificate": true, "certificate_authority": true,
	"token_file": true, "tokenfile": true, "password_file": true, "key_file": true, "keyfile": true,
}

// credentialKey reports whether a key names a credential.
func credentialKey(key []byte) bool {
	if len(key) > 64 {
		return false
	}
	var buf [64]byte
	n := copy(buf[:], key)
	for j := range n {
		switch c := buf[j]; {
		case c == '-' || c == '.':
			buf[j] = '_'
		case c >= 'A' && c <= 'Z':
			buf[j] = c | 0x20
		}
	}
	k := string(buf[:n])
	return credentialKeys[k] || !pathKeys[k] && secretName(buf[:n])
}

// matchKey matches the value of a key that names a credential
// (credentialKey), with the ':' at i: in YAML ("token: value", the key
// first on its line, perhaps after "- "), and in JSON or YAML with a
// quoted key anywhere ("auth": "value"). A quoted value runs to its
// closing quote; an unquoted one is one word that must end its line (or
// come before a comment, a ',' or a '}'), so prose ("Token: the one you
// made") is left alone, as are YAML's own words (null, true, a block).
func matchKey(b []byte, i, floor int) match {
	k := i
	var q byte
	if k > 0 && (b[k-1] == '"' || b[k-1] == '\'') {
		q = b[k-1]
		k--
	}
	ns := k
	for ns > 0 && keyByte[b[ns-1]] {
		ns--
	}
	if ns == k {
		return match{}
	}
	from := ns
	if q != 0 {
		if ns == 0 || b[ns-1] != q {
			return match{}
		}
		from = ns - 1
	} else if !keyStart(b, ns) {
		return match{}
	}
	if !credentialKey(b[ns:k]) {
		return match{}
	}
	v := i + 1
	for v < len(b) && (b[v] == ' ' || b[v] == '\t') {
		v++
	}
	if v >= len(b) || v < floor {
		return match{}
	}
	var e int
	var more *[256]bool
	switch vq := b[v]; vq {
	case '"', '\'':
		more = &sqValue
		if vq == '"' {
			more = &dqValue
		}
		v++
		for e = v; e < len(b) && more[b[e]]; e++ {
			if vq == '"' && b[e] == '\\' && e+1 < len(b) && b[e+1] != '\n' {
				e++ // an escaped character
			}
		}
		e = min(e, len(b))
	default:
		if bytes.IndexByte([]byte("{[|>&*!#"), vq) >= 0 {
			return match{}
		}
		more = &credByte
		e = runOf(b, v, more)
		switch w := string(bytes.ToLower(b[v:e])); {
		case w == "null", w == "~", w == "true", w == "false":
			return match{}
		case runOf(b, v, &digitByte) == e:
			return match{} // a count or a port (token_count: 12)
		}
		rest := e
		for rest < len(b) && (b[rest] == ' ' || b[rest] == '\t') {
			rest++
		}
		if rest < len(b) && b[rest] != '\n' && b[rest] != '\r' && b[rest] != ',' && b[rest] != '}' &&
			(b[rest] != '#' || rest == e) {
			return match{}
		}
	}
	if e == v {
		return match{}
	}
	return match{from: from, start: v, end: e, more: more, keep: shapePrefix(b, v, e)}
}

// keyStart reports whether the key at ns begins its line, perhaps after
// blanks and YAML's "- " of a list item.
func keyStart(b []byte, ns int) bool {
	j := ns
	for j > 0 && (b[j-1] == ' ' || b[j-1] == '\t') {
		j--
	}
	if j < ns && j > 0 && b[j-1] == '-' {
		j--
		for j > 0 && (b[j-1] == ' ' || b[j-1] == '\t') {
			j--
		}
	}
	return j == 0 || b[j-1] == '\n' || b[j-1] == '\r'
}

// lineStart reports whether the name at ns begins its line, perhaps after
// blanks and an "export " keyword.
func lineStart(b []byte, ns int) bool {
	j := ns
	for j > 0 && (b[j-1] == ' ' || b[j-1] == '\t') {
		j--
	}
	if j < ns && j >= 6 && string(b[j-6:j]) == "export" {
		j -= 6
		for j > 0 && (b[j-1] == ' ' || b[j-1] == '\t') {
			j--
		}
	}
	return j == 0 || b[j-1] == '\n' || b[j-1] == '\r'
}

func digit(c byte) bool { return c >= '0' && c <= '9' }
func alpha(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

// secretWord reports whether a word of a variable name (between
// underscores) marks it as holding a secret wherever it appears: SECRET(S),
// PASSWORD(S), PASSWD, PASSPHRASE, TOKEN(S), APIKEY, CREDENTIAL(S),
// PGPASSWORD, PRIVATEKEY.
func secretWord(w []byte) bool {
	switch len(w) {
	case 5:
		return upperIs(w, "TOKEN")
	case 6:
		return upperIs(w, "SECRET") || upperIs(w, "PASSWD") || upperIs(w, "TOKENS") || upperIs(w, "APIKEY")
	case 7:
		return upperIs(w, "SECRETS")
	case 8:
		return upperIs(w, "PASSWORD")
	case 9:
		return upperIs(w, "PASSWORDS")
	case 10:
		return upperIs(w, "PASSPHRASE") || upperIs(w, "CREDENTIAL") || upperIs(w, "PGPASSWORD") || upperIs(w, "PRIVATEKEY")
	case 11:
		return upperIs(w, "CREDENTIALS")
	}
	return false
}

// secretLastWord reports whether the last word of a name of two words or
// more marks it as a secret: KEY, PASS, PWD, PAT.
func secretLastWord(w []byte) bool {
	switch len(w) {
	case 3:
		return upperIs(w, "KEY") || upperIs(w, "PWD") || upperIs(w, "PAT")
	case 4:
		return upperIs(w, "PASS")
	}
	return false
}

// upperIs reports whether the letters and digits w, upper-cased, are the
// upper-case word s of the same length.
func upperIs(w []byte, s string) bool {
	for i := range len(s) {
		if w[i]&^0x20 != s[i] {
			return false
		}
	}
	return true
}

// secretName is SecretName on bytes of [A-Za-z0-9_].
func secretName(name []byte) bool {
	words := 0
	var last []byte
	for len(name) > 0 {
		w := name
		if k := bytes.IndexByte(name, '_'); k >= 0 {
			w, name = name[:k], name[k+1:]
		} else {
			name = nil
		}
		if len(w) == 0 {
			continue
		}
		if secretWord(w) {
			return true
		}
		words++
		last = w
	}
	return words >= 2 && secretLastWord(last)
}

// SecretName reports whether an environment variable's name says it holds
// a secret: a word (between underscores, any case) SECRET, PASSWORD,
// PASSWD, PASSPHRASE, TOKEN, APIKEY, CREDENTIAL(S) or PGPASSWORD, or a
// last word KEY, PASS, PWD or PAT after another (OPENAI_API_KEY,
// AWS_SECRET_ACCESS_KEY, JWT_PRIVATE_KEY, MYSQL_PWD, DB_PASS, GITHUB_PAT,
// api_key). PWD, OLDPWD and TOKENIZERS_PARALLELISM are not secret names.
// The redactor hides the values of such variables in KEY=value text.
func SecretName(name string) bool {
	for i := range len(name) {
		if !patBody[name[i]] {
			return false
		}
	}
	return secretName([]byte(name))
}

// partialSecret returns where a secret that may still be incomplete
// begins in the last word of b, the text seen so far of an unfinished
// line, or len(b) if there is none: a token prefix (sk-, ghp_, xoxb-,
// github_pat_, AKIA, ASIA, AIza, eyJ) whose body is still too short to be
// recognised, or a URL password whose '@' has not arrived yet. A view of
// a stream that is still running stops there.
func partialSecret(b []byte) int {
	ws := len(b)
	for ws > 0 && !tokenEnd[b[ws-1]] {
		ws--
	}
	word := b[ws:]
	if len(word) == 0 || bytes.Contains(word, placeB) {
		return len(b)
	}
	for j := range word {
		if !wordStart(word, j) {
			continue
		}
		for _, p := range tokenPrefixes {
			if bytes.HasPrefix(word[j:], p) {
				return ws + j
			}
		}
	}
	if k := bytes.Index(word, []byte("://")); k >= 0 {
		rest := word[k+3:]
		if end := runOf(rest, 0, &authorityByte); end == len(rest) && bytes.IndexByte(rest, '@') < 0 {
			if c := bytes.IndexByte(rest, ':'); c >= 0 {
				return ws + k + 3 + c + 1
			}
		}
	}
	return len(b)
}

// tokenPrefixes start the prefixed token shapes.
var tokenPrefixes = [][]byte{
	[]byte("sk-"), []byte("ghp_"), []byte("gho_"), []byte("ghu_"), []byte("ghs_"), []byte("ghr_"),
	[]byte("github_pat_"), []byte("xoxb-"), []byte("xoxp-"), []byte("xoxa-"), []byte("xoxr-"),
	[]byte("xoxs-"), []byte("AKIA"), []byte("ASIA"), []byte("AIza"), []byte("eyJ"),
	[]byte("ak-"), []byte("as-"), []byte("dtn_"),
}

// RedactCommand is Redact for a shell command line, such as the command of
// a background process: the unquoted value of a secret variable ends at
// the first blank, as the shell reads it ("PGPASSWORD=x psql ..." keeps
// "psql ..."), where in command output it runs to the end of its line.
func RedactCommand(cmd string) string {
	var out []byte
	emit := func(p []byte) { out = append(out, p...) }
	r := redactor{shell: true}
	r.Write([]byte(cmd), emit)
	r.Flush(emit)
	return string(out)
}

// Redact replaces known secrets in s with Placeholder, keeping only a
// public type prefix such as "ghp_" or "sk-ant-". It is the redaction
// stage of the output pipeline alone (no escape stripping, no trimming),
// for text that is not command output: file contents, search matches,
// diffs, a command line. It finds:
//   - OpenAI and Anthropic keys (sk-..., at least 20 characters after
//     "sk-"), GitHub tokens (ghp_, gho_, ghu_, ghs_, ghr_, github_pat_),
//     Slack tokens (xoxb-, xoxp-, xoxa-, xoxr-, xoxs-), AWS access key ids
//     (AKIA/ASIA + 16), Google API keys (AIza...), Modal token ids and
//     secrets (ak-, as-), Daytona API keys (dtn_) and JWTs; a shape glued
//     to a preceding letter or digit (as in "task-...") is not a secret;
//   - the body of PEM private key blocks, which may span lines;
//   - the credential of an Authorization header (Bearer, Basic, token and
//     other schemes);
//   - the password of a URL, scheme://user:PASSWORD@host;
//   - the value of NAME=value when SecretName(NAME), as in the output of
//     env, printenv, set and export -p, or a .env file, and of "name =
//     value" at the start of a line (TOML, INI: ~/.modal.toml's
//     token_id and token_secret);
//   - the value of a YAML or JSON key that names a credential
//     (credentialKeys, or SecretName of the key): kubeconfig's
//     client-key-data, client-certificate-data, token and the OIDC
//     tokens, docker's config.json "auth" and "identitytoken", a
//     Kubernetes secret's "password:" or "tls.key:".
func Redact(s string) string {
	var out []byte
	emit := func(p []byte) { out = append(out, p...) }
	var r redactor
	r.Write([]byte(s), emit)
	r.Flush(emit)
	return string(out)
}
