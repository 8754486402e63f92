// Package shparse is berth's one door to the shell parser: every shell text
// berth inspects (an agent's command, the text of a nested sh -c or eval,
// the input a background shell reads) is parsed here, and only here.
//
// The parser (mvdan.cc/sh/v3/syntax) recurses once per level of nesting, a
// few kilobytes of stack each, and Go cannot recover from a stack overflow:
// half a megabyte of "((((" would end the whole berth process, and with it
// the daemon's and the MCP server's every environment. So, as go/parser
// keeps its maxNestLev inside the parser, Parse runs the nesting bound
// first, in one linear pass without recursion, and refuses text nested
// deeper than MaxNesting before the parser sees it. Check runs the bound
// alone, for callers that refuse such text before anything else happens.
//
// A command is parsed once per call: Script holds the text and its tree,
// and every consumer of that call (the approval check, the session's state
// analysis, the exit-code meaning) reads the same Script.
package shparse

import (
	"bytes"
	"fmt"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// MaxNesting is the deepest nesting of parentheses, braces, brackets,
// compound commands and chained operators a shell text may have. The
// parser recurses once per level (up to about 7 KB of stack each), so a
// command of a few hundred kilobytes of "((((" would otherwise exhaust the
// stack and crash berth; bash itself segfaults on such input. Real commands
// nest a few levels deep.
const MaxNesting = 1000

// NestingError reports a shell text refused because it nests deeper than
// MaxNesting.
type NestingError struct {
	Depth int // the depth estimated (at least MaxNesting+1)
}

func (e *NestingError) Error() string {
	return fmt.Sprintf("command nests at least %d levels deep (parentheses, braces, brackets, compound commands or chained | && || operators); berth accepts at most %d levels and did not run it: split the command or put it in a script file and run that", e.Depth, MaxNesting)
}

// Check returns a *NestingError when text nests deeper than MaxNesting,
// else nil. It is linear in the length of text and does not recurse.
func Check(text string) error {
	if d := Depth(text); d > MaxNesting {
		return &NestingError{Depth: d}
	}
	return nil
}

// Parse checks the nesting bound and then parses text as bash. The error is
// a *NestingError (nothing was parsed) or the parser's error (a
// syntax.ParseError, a syntax.LangError ...); the tree is then nil.
func Parse(text string) (*syntax.File, error) {
	if err := Check(text); err != nil {
		return nil, err
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(text), "")
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Script is one shell text parsed once: the tree, or why there is none.
// It is read-only once made, and safe to share between goroutines.
type Script struct {
	// Text is the text that was parsed.
	Text string
	// File is the tree; nil when Err is set.
	File *syntax.File
	// Err is a *NestingError or the parser's error, nil when File is set.
	Err error
}

// New parses text (see Parse).
func New(text string) *Script {
	f, err := Parse(text)
	return &Script{Text: text, File: f, Err: err}
}

// Of returns sc when it is the parse of text, else a fresh parse of text:
// a caller handed a Script for its text reuses it, any other caller parses.
func Of(sc *Script, text string) *Script {
	if sc != nil && sc.Text == text {
		return sc
	}
	return New(text)
}

// Depth estimates, in one pass and without parsing, how deep the shell
// parser would recurse on text. It keeps a stack of what is open —
// brackets, "$(", "$((", "${", double quotes, backquotes, compound commands
// (if, loops, case) — and counts chained operators (|, &&, ||, !) until the
// end of the statement; the depth is the stack's height plus the chain. A
// closer only closes the opener it belongs to (the ")" of a case pattern
// closes nothing), so text cannot lower the estimate below what is really
// open. Single-quoted text, comments and the bodies of here-documents with
// a quoted delimiter (<<'EOF') cannot nest and are skipped, so balanced
// code in such a heredoc or a quoted script costs nothing (a caller that
// parses such text as a script later, as the approval check reads the TEXT
// of sh -c 'TEXT', bounds it again through Parse). The body of a
// here-document with a bare delimiter is expanded by the shell, and read
// as the inside of double quotes: its $(...), ${...} and $((...)) count.
// The scan stops early once past MaxNesting.
func Depth(command string) int {
	// Bodies nested in bodies are scanned once per level; past this much
	// work (only many levels of unterminated here-documents nested in
	// $(...) get there) the text counts as too deep.
	budget := 16*len(command) + 1<<20
	return depth(command, 0, false, &budget)
}

// depth estimates the nesting of text that starts base levels deep; body
// says text is the body of a here-document with a bare delimiter. It
// recurses only for such bodies, at most once per level of nesting, and
// returns at once past MaxNesting, so its own stack stays small.
func depth(command string, base int, body bool, budget *int) int {
	if base > MaxNesting {
		return base
	}
	if *budget -= len(command); *budget < 0 {
		return MaxNesting + 1
	}
	// ( { [ " ` and A ($(( or ((), P (${), i (if), l (loop), c (case), H (a heredoc body)
	var stack []byte
	if body {
		stack = append(stack, 'H')
	}
	chain, max := 0, base
	var heredocs []heredoc // here-documents whose bodies start on the next line
	top := func() byte {
		if len(stack) == 0 {
			return 0
		}
		return stack[len(stack)-1]
	}
	popTo := func(b byte) {
		for k := len(stack) - 1; k >= 0; k-- {
			if stack[k] == b {
				stack = stack[:k]
				return
			}
		}
	}
	atWordStart := func(i int) bool {
		if i == 0 {
			return true
		}
		return strings.IndexByte(" \t\n;&|(){}!`", command[i-1]) >= 0
	}
	n := len(command)
	for i := 0; i < n; i++ {
		if d := base + len(stack) + chain; d > max {
			max = d
			if max > MaxNesting {
				return max
			}
		}
		c := command[i]
		if c == '\\' {
			i++ // the next byte is literal
			continue
		}
		if c == '$' && i+1 < n {
			switch {
			case strings.HasPrefix(command[i+1:], "(("):
				stack = append(stack, 'A')
				i += 2
			case command[i+1] == '(':
				stack = append(stack, '(')
				i++
			case command[i+1] == '{':
				stack = append(stack, 'P')
				i++
			}
			continue
		}
		if c == '`' {
			if top() == '`' {
				stack = stack[:len(stack)-1]
			} else {
				stack = append(stack, '`')
			}
			continue
		}
		if top() == '"' {
			if c == '"' {
				stack = stack[:len(stack)-1]
			}
			continue
		}
		if top() == 'H' {
			continue // heredoc text: only expansions nest
		}
		switch c {
		case '"':
			stack = append(stack, '"')
		case '\'':
			if top() == 'P' && bytes.IndexByte(stack, '"') >= 0 {
				continue // inside "${...}" a quote is not sure to open a literal
			}
			if j := strings.IndexByte(command[i+1:], '\''); j >= 0 {
				i += j + 1
			} else {
				i = n
			}
		case '#':
			if atWordStart(i) {
				if j := strings.IndexByte(command[i:], '\n'); j >= 0 {
					i += j - 1 // the newline itself is handled next
				} else {
					i = n
				}
			}
		case '\n':
			chain = 0
			if len(heredocs) > 0 {
				at := base + len(stack)
				next := i + 1
				for _, h := range heredocs {
					from := next
					next = skipHeredoc(command, from, h.delim)
					if *budget -= next - from; *budget < 0 {
						return MaxNesting + 1
					}
					if h.quoted {
						continue
					}
					if d := depth(command[from:next], at, true, budget); d > max {
						max = d
						if max > MaxNesting {
							return max
						}
					}
				}
				i = next - 1
				heredocs = heredocs[:0]
			}
		case ';':
			chain = 0
		case '&':
			if i+1 < n && command[i+1] == '&' {
				chain++
				i++
			} else {
				chain = 0
			}
		case '|', '!':
			chain++
		case '(':
			if i+1 < n && command[i+1] == '(' && top() != 'A' && top() != '(' {
				stack = append(stack, 'A')
				i++
			} else {
				stack = append(stack, '(')
			}
		case ')':
			switch {
			case top() == 'A' && i+1 < n && command[i+1] == ')':
				stack = stack[:len(stack)-1]
				i++
			case top() == '(':
				stack = stack[:len(stack)-1]
			}
		case '{', '[':
			stack = append(stack, c)
		case '}':
			if top() == '{' || top() == 'P' {
				stack = stack[:len(stack)-1]
			}
		case ']':
			if top() == '[' {
				stack = stack[:len(stack)-1]
			}
		case '<':
			if strings.HasPrefix(command[i:], "<<<") {
				i += 2
				continue
			}
			if !strings.HasPrefix(command[i:], "<<") || top() == 'A' || top() == '[' || top() == 'P' {
				continue
			}
			j := i + 2
			if j < n && command[j] == '-' {
				j++
			}
			for j < n && (command[j] == ' ' || command[j] == '\t') {
				j++
			}
			var h heredoc
			var delim strings.Builder
			for j < n && strings.IndexByte(" \t\n;&|<>()", command[j]) < 0 {
				if command[j] == '\'' || command[j] == '"' || command[j] == '\\' {
					h.quoted = true
				} else {
					delim.WriteByte(command[j])
				}
				j++
			}
			if delim.Len() > 0 || h.quoted {
				h.delim = delim.String()
				heredocs = append(heredocs, h)
			}
			i = j - 1
		default:
			if c < 'a' || c > 'z' || !atWordStart(i) {
				continue
			}
			j := i
			for j < n && (command[j] >= 'a' && command[j] <= 'z') {
				j++
			}
			if j < n && strings.IndexByte(" \t\n;", command[j]) < 0 {
				i = j - 1
				continue
			}
			switch command[i:j] {
			case "if":
				stack = append(stack, 'i')
			case "while", "until", "for", "select":
				stack = append(stack, 'l')
			case "case":
				stack = append(stack, 'c')
			case "fi":
				popTo('i')
			case "done":
				popTo('l')
			case "esac":
				popTo('c')
			}
			i = j - 1
		}
	}
	if d := base + len(stack) + chain; d > max {
		max = d
	}
	return max
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
