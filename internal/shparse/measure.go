package shparse

import "strings"

// Measurement is what Measure finds in a shell text without parsing it.
type Measurement struct {
	// Depth estimates how deep the parser (and a walk of its tree) would
	// recurse; once past MaxNesting the scan stops and Depth is the first
	// value past it.
	Depth int
	// Elements counts the words and operators outside quotes and the
	// bodies of quoted here-documents (an expansion counts one): about the
	// number of nodes of the tree.
	Elements int
}

// Measure estimates, in one pass and without recursion (but for one level
// per here-document body nested in a $(...) of a body), how deep the
// parser would recurse on text and how large its tree would be.
//
// It keeps a stack of what is open: parentheses and $( <( (, backquotes,
// { blocks (a { that starts a word and is followed by a blank), brace
// expansions (within one word), if/while/until/for/select/case bodies,
// double quotes, ${...}, $((...)) and (( )), array indices and $[...], and
// the bodies of here-documents with a bare delimiter (their expansions
// nest). Each level of the stack counts one; so does each link of a
// chain the parser (or a walk of the left-deep tree it builds) recurses
// on, until the statement ends: | && || ! (also within [[ ]]), the
// prefixes time and coproc, function headers (f() g() ... and function f
// function g ...), and within arithmetic (and the words of let) every
// operator.
//
// The estimate errs high, never low: a closer only closes what it belongs
// to (fi, done, esac and a block's } only where they surely are in command
// position, with their opener on top; the ")" of a case pattern closes
// nothing), a newline after | && || ! or a function header does not end
// the statement, a comment starts only after a blank or an operator, and
// quoted text is skipped only where both the shell and the parser take it
// as quoted (single quotes outside arithmetic, $'...' with its escapes,
// the body of a here-document with a quoted delimiter). So text cannot
// lower the estimate below what is really open. A caller that parses
// quoted text as a script later (the approval check reads the TEXT of sh
// -c 'TEXT') bounds it again through Parse.
func Measure(text string) Measurement {
	// Bodies nested in bodies are scanned once per level; past this much
	// work (only many levels of unterminated here-documents nested in
	// $(...) get there) the text counts as too deep.
	budget := 16*len(text) + 1<<20
	m := &meter{budget: &budget}
	return Measurement{Depth: m.run(text, 0, false), Elements: m.elems}
}

// meter is the state shared by a scan and the scans of the here-document
// bodies in it.
type meter struct {
	elems  int
	budget *int
}

// frame is one open construct of the scan.
type frame struct {
	kind  byte // see below
	arith bool // its text is arithmetic: every operator is a link of a chain
	let   bool // a let statement: its words are arithmetic
	chain int  // links of the chain of the current statement in this frame
}

// Frame kinds: 0 the text itself, ( a subshell, an array or <( >(, S a $(,
// ` a backquote, { a block, b a brace expansion, i if, l a loop, c case,
// " a double quote, H a here-document body, P ${...}, A $(( or ((, [ an
// index or $[.

// scan is the scan of one text.
type scan struct {
	*meter
	text   string
	base   int
	frames []frame
	sum    int // the chains of every frame
	dqs    int // double-quote frames open
	max    int
	// cont: the last token continues the statement past a newline (| &&
	// || ! or a function header); keep: words that do not end it (the
	// name after function).
	cont bool
	keep int
	// cmd: the next word is surely in command position (only there do
	// fi, done, esac and } close anything).
	cmd bool
	// word: the previous byte belongs to a word.
	word     bool
	heredocs []heredoc
}

// opChars are the operators of arithmetic.
const opChars = "+-*/%<>=!~&|^?:,"

// wordEnd are the bytes that end an unquoted word.
const wordEnd = " \t\n;&|()<>"

func (s *scan) top() *frame { return &s.frames[len(s.frames)-1] }

func (s *scan) level() int { return s.base + len(s.frames) - 1 + s.sum }

// over notes the current level and reports whether it is past the bound.
func (s *scan) over() bool {
	if d := s.level(); d > s.max {
		s.max = d
	}
	return s.max > MaxNesting
}

func (s *scan) push(kind byte, arith bool) {
	s.frames = append(s.frames, frame{kind: kind, arith: arith})
	if kind == '"' {
		s.dqs++
	}
}

func (s *scan) pop() {
	if len(s.frames) == 1 {
		return
	}
	f := s.top()
	s.sum -= f.chain
	if f.kind == '"' {
		s.dqs--
	}
	s.frames = s.frames[:len(s.frames)-1]
}

// bump adds a link to the chain of the top frame.
func (s *scan) bump() {
	s.top().chain++
	s.sum++
}

// reset ends the statement of the top frame.
func (s *scan) reset() {
	f := s.top()
	s.sum -= f.chain
	f.chain, f.let = 0, false
}

// run scans text that starts base levels deep; body says text is the body
// of a here-document with a bare delimiter. It returns the deepest level
// seen, and returns at once past MaxNesting.
func (m *meter) run(text string, base int, body bool) int {
	if base > MaxNesting {
		return base
	}
	if *m.budget -= len(text); *m.budget < 0 {
		return MaxNesting + 1
	}
	s := &scan{meter: m, text: text, base: base, max: base, frames: []frame{{}}, cmd: true}
	if body {
		s.push('H', false)
	}
	for i := 0; i < len(text); i++ {
		if s.over() {
			return s.max
		}
		if i = s.step(i); i < 0 {
			return MaxNesting + 1 // out of budget
		}
	}
	s.over()
	return s.max
}

// step reads the byte at i (and what belongs to it) and returns the index
// of the last byte it read, or -1 when the budget ran out.
func (s *scan) step(i int) int {
	text, c := s.text, s.text[i]
	n := len(text)
	top := s.top()

	// What every context shares: escapes, expansions, backquotes.
	switch {
	case c == '\\':
		if !s.word && top.kind != '"' && top.kind != 'H' {
			s.elems++
		}
		if top.let && i+1 < n && strings.IndexByte(opChars, text[i+1]) >= 0 {
			s.bump() // an escaped operator of let is still one
		}
		s.word, s.cmd = true, false
		return i + 1 // the next byte is literal
	case c == '$' && i+1 < n:
		s.elems++
		s.word, s.cmd = true, false
		switch d := text[i+1]; {
		case strings.HasPrefix(text[i+1:], "(("):
			s.push('A', true)
			return i + 2
		case d == '(':
			s.push('S', false)
			s.cmd, s.cont, s.word = true, false, false
			return i + 1
		case d == '{':
			s.push('P', true)
			return i + 1
		case d == '[':
			s.push('[', true)
			return i + 1
		case d == '\'' && top.kind != '"' && top.kind != 'H':
			return skipANSI(text, i+2)
		}
		return i
	case c == '`':
		s.elems++
		if top.kind == '`' {
			s.pop()
			s.word, s.cmd = true, false
		} else {
			s.push('`', false)
			s.cmd, s.cont, s.word = true, false, false
		}
		return i
	}
	switch {
	case top.kind == '"' || top.kind == 'H':
		if c == '"' && top.kind == '"' {
			s.pop()
		}
		return i
	case top.arith:
		return s.arith(i)
	}
	return s.command(i)
}

// command reads the byte at i in a command context.
func (s *scan) command(i int) int {
	text, c := s.text, s.text[i]
	n := len(text)
	if s.top().kind == 'b' && strings.IndexByte(wordEnd, c) >= 0 {
		for s.top().kind == 'b' {
			s.pop() // a brace expansion ends with its word
		}
	}
	top := s.top()
	switch c {
	case ' ', '\t', '\r':
		s.word = false
		return i
	case '\n':
		s.word = false
		if len(s.heredocs) > 0 {
			if i = s.bodies(i); i < 0 {
				return -1
			}
		}
		if !s.cont {
			s.reset()
			s.cmd = true
		}
		return i
	case '#':
		if !s.word && (i == 0 || strings.IndexByte(" \t\n;&|()", text[i-1]) >= 0) {
			if j := strings.IndexByte(text[i:], '\n'); j >= 0 {
				return i + j - 1 // the newline itself is read next
			}
			return n - 1
		}
	case '\'':
		s.elems++
		s.word, s.cmd, s.cont = true, false, false
		if j := strings.IndexByte(text[i+1:], '\''); j >= 0 {
			return i + j + 1
		}
		return n - 1
	case '"':
		s.elems++
		s.push('"', false)
		s.word, s.cmd, s.cont = true, false, false
		return i
	case ';', '&', '|', '!':
		return s.operator(i)
	case '(':
		s.elems++
		s.word = false
		if i+1 < n && text[i+1] == '(' {
			s.push('A', true)
			return i + 1
		}
		j := i + 1
		for j < n && (text[j] == ' ' || text[j] == '\t') {
			j++
		}
		if j < n && text[j] == ')' {
			s.bump() // a function header: its body is parsed inside it
			s.cmd, s.cont = true, true
			return j
		}
		s.push('(', false)
		s.cmd, s.cont = true, false
		return i
	case ')':
		s.elems++
		if top.kind == '(' || top.kind == 'S' {
			s.pop()
		}
		s.word, s.cmd, s.cont = top.kind == 'S', false, false
		return i
	case '<', '>':
		s.elems++
		s.word, s.cmd, s.cont = false, false, false
		if c == '<' {
			return s.heredoc(i)
		}
		return i
	case '{':
		if !s.word && (i+1 == n || strings.IndexByte(" \t\n", text[i+1]) >= 0) {
			s.elems++
			s.push('{', false)
			s.cmd, s.cont = true, false
			return i
		}
		s.push('b', false) // a brace expansion, nested within its word
		s.word, s.cmd, s.cont = true, false, false
		return i
	case '}':
		switch {
		case top.kind == 'b':
			s.pop()
			s.word = true
			return i
		case !s.word && s.cmd && top.kind == '{' && (i+1 == n || strings.IndexByte(wordEnd, text[i+1]) >= 0):
			s.elems++
			s.pop()
			s.cmd, s.cont = false, false
			return i
		}
	case '[':
		if s.word && isNameByte(text[i-1]) {
			s.push('[', true) // an array index: arithmetic
			return i
		}
	}
	return s.wordAt(i)
}

// operator reads a list or pipeline operator at i (; & && | || |& !):
// the end of a statement, or a link of its chain.
func (s *scan) operator(i int) int {
	text, c := s.text, s.text[i]
	n := len(text)
	switch c {
	case ';':
		s.elems++
		s.reset()
		s.word, s.cmd, s.cont = false, true, false
		return i
	case '&':
		s.elems++
		s.word, s.cmd, s.cont = false, true, false
		switch {
		case i+1 < n && text[i+1] == '&':
			s.bump()
			s.cont = true
			return i + 1
		case i+1 < n && text[i+1] == '>':
			s.cmd = false // &> and &>> redirect
		default:
			s.reset() // in the background: the statement ends
		}
		return i
	case '|':
		s.elems++
		s.bump()
		s.word, s.cmd, s.cont = false, true, true
		if i+1 < n && (text[i+1] == '|' || text[i+1] == '&') {
			return i + 1
		}
		return i
	case '!':
		s.elems++
		s.bump()
		s.word, s.cmd, s.cont = false, true, true
		return i
	}
	return i
}

// wordAt reads a word, or more of one, at i.
func (s *scan) wordAt(i int) int {
	text := s.text
	top := s.top()
	if top.let && strings.IndexByte(opChars, text[i]) >= 0 {
		s.bump() // an operator of let, wherever it is in the word
		s.elems++
	}
	if s.word {
		return i
	}
	s.elems++
	s.word = true
	if s.keep > 0 {
		s.keep--
	} else {
		s.cont = false
	}
	cmd := s.cmd
	s.cmd = false
	j := i
	for j < len(text) && text[j] >= 'a' && text[j] <= 'z' {
		j++
	}
	if j == i || j < len(text) && strings.IndexByte(wordEnd, text[j]) < 0 {
		return i
	}
	switch text[i:j] {
	case "if", "while", "until":
		s.push(map[string]byte{"if": 'i', "while": 'l', "until": 'l'}[text[i:j]], false)
		s.cmd = true
	case "for", "select":
		s.push('l', false)
	case "case":
		s.push('c', false)
	case "then", "do", "else", "elif":
		s.cmd = true
	case "fi", "done", "esac":
		if cmd && top.kind == map[string]byte{"fi": 'i', "done": 'l', "esac": 'c'}[text[i:j]] {
			s.pop()
		}
	case "time", "coproc":
		s.bump()
		s.cmd = true
	case "function":
		s.bump()
		s.cont, s.keep = true, 1
	case "let":
		top.let = true
	default:
		if top.let {
			s.bump() // an operand of let
		}
	}
	return j - 1
}

// arith reads the byte at i in an arithmetic context ($(( (( $[ an index
// ${...}).
func (s *scan) arith(i int) int {
	text, c := s.text, s.text[i]
	top := s.top()
	switch {
	case c == '(':
		s.elems++
		s.push('(', true)
	case c == ')':
		s.elems++
		switch {
		case top.kind == 'A' && i+1 < len(text) && text[i+1] == ')':
			s.pop()
			s.word = true
			return i + 1
		case top.kind == 'A':
			// ((cmd) ...): the (( opened two subshells; one stays open.
			s.sum -= top.chain
			*top = frame{kind: '('}
		case top.kind == '(':
			s.pop()
		}
	case c == '[':
		s.elems++
		s.push('[', true)
	case c == ']':
		if top.kind == '[' {
			s.pop()
		}
		s.word = true
		return i
	case c == '{':
		s.push('b', true)
	case c == '}':
		if top.kind == 'P' || top.kind == 'b' {
			s.pop()
		}
		s.word = true
		return i
	case c == '"':
		s.elems++
		s.push('"', false)
	case c == '\'' && top.kind == 'P' && s.dqs == 0:
		// A quoted word within ${...} (its pattern or default).
		s.elems++
		if j := strings.IndexByte(text[i+1:], '\''); j >= 0 {
			return i + j + 1
		}
		return len(text) - 1
	case strings.IndexByte(opChars, c) >= 0:
		s.elems++
		s.bump()
	case c == ' ' || c == '\t' || c == '\n' || c == '\r':
	default:
		if !s.word {
			s.elems++
		}
		s.word = true
		return i
	}
	s.word = false
	return i
}

// heredoc reads a < at i: a here-string, or a here-document whose body
// follows the line (noted for the newline), or a plain redirection.
func (s *scan) heredoc(i int) int {
	text := s.text
	n := len(text)
	if strings.HasPrefix(text[i:], "<<<") {
		return i + 2
	}
	if !strings.HasPrefix(text[i:], "<<") {
		return i
	}
	j := i + 2
	if j < n && text[j] == '-' {
		j++
	}
	for j < n && (text[j] == ' ' || text[j] == '\t') {
		j++
	}
	var h heredoc
	var delim strings.Builder
	for j < n && strings.IndexByte(" \t\n;&|<>()", text[j]) < 0 {
		if text[j] == '\'' || text[j] == '"' || text[j] == '\\' {
			h.quoted = true
		} else {
			delim.WriteByte(text[j])
		}
		j++
	}
	if delim.Len() > 0 || h.quoted {
		h.delim = delim.String()
		s.heredocs = append(s.heredocs, h)
	}
	return j - 1
}

// bodies reads the bodies of the here-documents that follow the newline
// at i, and returns the index of the last byte of the last one (or -1 when
// the budget ran out).
func (s *scan) bodies(i int) int {
	next := i + 1
	for _, h := range s.heredocs {
		from := next
		next = skipHeredoc(s.text, from, h.delim)
		if *s.budget -= next - from; *s.budget < 0 {
			return -1
		}
		if h.quoted {
			continue
		}
		if d := s.run(s.text[from:next], s.level(), true); d > s.max {
			s.max = d
		}
	}
	s.heredocs = s.heredocs[:0]
	return next - 1
}

// skipANSI returns the index of the quote that ends a $'...' string whose
// text starts at i (backslash escapes included), or the last index.
func skipANSI(text string, i int) int {
	for ; i < len(text); i++ {
		switch text[i] {
		case '\\':
			i++
		case '\'':
			return i
		}
	}
	return len(text) - 1
}

// isNameByte reports whether c can end a variable name (a[ is an index).
func isNameByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// heredoc is a here-document whose body follows the current line.
type heredoc struct {
	delim  string // the delimiter, quotes removed
	quoted bool   // the delimiter was quoted: the body is literal text
}

// skipHeredoc returns the index just past the body of a here-document that
// starts at i and ends with the line delim (leading tabs are ignored when
// matching, as <<- allows).
func skipHeredoc(command string, i int, delim string) int {
	for i < len(command) {
		j := strings.IndexByte(command[i:], '\n')
		line, next := command[i:], len(command)
		if j >= 0 {
			line, next = command[i:i+j], i+j+1
		}
		i = next
		if strings.TrimLeft(line, "\t") == delim {
			break
		}
	}
	return i
}
