// Package shparse is berth's one door to the shell parser: every shell text
// berth inspects (an agent's command, the text of a nested sh -c or eval,
// the input a background shell reads) is parsed here, and only here.
//
// # Bounded stack
//
// The parser (mvdan.cc/sh/v3/syntax) recurses once per level of nesting, a
// few kilobytes of stack each, and every reader of its tree (syntax.Walk,
// the approval check, the session's analysis) recurses once per level of
// the tree. Go cannot recover from a stack overflow: half a megabyte of
// "((((" or "time time time" would end the whole berth process, and with
// it the daemon's and the MCP server's every environment. So, as go/parser
// keeps its maxNestLev inside the parser, Parse bounds the nesting twice:
//
//   - before the parser runs, a linear pass without recursion (Measure)
//     estimates how deep the parser would recurse, counting every
//     production it recurses on: brackets, braces, quotes, $(, ${, $((,
//     compound commands, the prefixes time, coproc, ! and function
//     headers (f() g() ...), the operators of arithmetic (assignment,
//     ?:, **, unary - ! ~, and the left-deep chains of the others), the
//     && || ! of [[ ]], and the | && || chains of commands; text past
//     MaxNesting is refused before the parser sees it;
//   - after it, the depth of the tree is measured with a walk that stops
//     descending past MaxTreeDepth, so no later reader recurses deeper
//     than that, whatever the estimate missed.
//
// # Bounded size
//
// The tree costs about 150 bytes per word or operator, and the check that
// reads it more; a command of a few megabytes of ":;:;:;" would hold
// gigabytes. Text longer than MaxBytes, or with more than MaxElements words
// and operators outside quotes and here-document bodies, is refused as too
// large to check (*SizeError) before it is parsed. Large data inside
// quotes or a quoted here-document costs little and stays within the
// bounds up to MaxBytes.
//
// Check runs both bounds alone, for callers that refuse such text before
// anything else happens.
//
// A command is parsed once per call: Script holds the text and its tree,
// and every consumer of that call (the approval check, the session's state
// analysis, the exit-code meaning) reads the same Script.
package shparse

import (
	"fmt"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// MaxNesting is the deepest nesting a shell text may have, as Measure
// estimates it. The parser recurses once per level (up to about 7 KB of
// stack each), so a command of a few hundred kilobytes of "((((" would
// otherwise exhaust the stack and crash berth; bash itself segfaults on
// such input. Real commands nest a few levels deep.
const MaxNesting = 1000

// MaxTreeDepth bounds the depth of a parsed tree: no reader of a tree that
// Parse returns recurses deeper. A tree within MaxNesting levels is a few
// nodes deep per level; the bound only catches what the estimate missed.
const MaxTreeDepth = 8*MaxNesting + 64

// MaxBytes is the longest shell text berth checks: 4 MiB. Past it a
// command is refused as too large to check (the transport would carry up
// to 64 MiB). Large data belongs in a file (the write_file tool).
const MaxBytes = 4 << 20

// MaxElements is the most words and operators (outside quotes and the
// bodies of quoted here-documents) a shell text may have: 64 Ki. The
// parser's tree costs about 150 bytes per element, and the check of a
// command about as much again, so this keeps one check within tens of
// megabytes. Real commands have a few hundred; a generated list of tens
// of thousands of words belongs in a file (read by xargs, a script).
const MaxElements = 64 << 10

// NestingError reports a shell text refused because it nests deeper than
// MaxNesting (or its tree deeper than MaxTreeDepth).
type NestingError struct {
	Depth int // the depth estimated (at least MaxNesting+1)
}

func (e *NestingError) Error() string {
	return fmt.Sprintf("command nests at least %d levels deep (parentheses, braces, brackets, compound commands, chained | && || operators, time/coproc prefixes or arithmetic operators); berth accepts at most %d levels and did not run it: split the command or put it in a script file and run that", e.Depth, MaxNesting)
}

// SizeError reports a shell text refused as too large to check: longer than
// MaxBytes, or with more than MaxElements words and operators.
type SizeError struct {
	Bytes    int // the length of the text
	Elements int // the words and operators counted (at least MaxElements+1 when that is the reason)
}

func (e *SizeError) Error() string {
	if e.Bytes > MaxBytes {
		return fmt.Sprintf("command is too large to check: %d bytes; berth checks commands of at most %d bytes (%d MiB) and did not run it: write large data with the file tools (write_file) and run a short command on it, or split the command", e.Bytes, MaxBytes, MaxBytes>>20)
	}
	return fmt.Sprintf("command is too large to check: at least %d words and operators outside quotes; berth checks commands of at most %d and did not run it: put long lists or scripts in a file (the write_file tool) and run a short command on it (xargs, bash FILE), or split the command", e.Elements, MaxElements)
}

// Check returns a *NestingError when text nests deeper than MaxNesting, a
// *SizeError when it is too large to check, else nil. It is linear in the
// length of text (it reads at most MaxBytes of it) and does not recurse.
func Check(text string) error {
	head := text
	if len(head) > MaxBytes {
		head = head[:MaxBytes]
	}
	m := Measure(head)
	switch {
	case m.Depth > MaxNesting:
		return &NestingError{Depth: m.Depth}
	case len(text) > MaxBytes:
		return &SizeError{Bytes: len(text), Elements: m.Elements}
	case m.Elements > MaxElements:
		return &SizeError{Bytes: len(text), Elements: m.Elements}
	}
	return nil
}

// Parse checks the bounds and then parses text as bash. The error is a
// *NestingError or a *SizeError (nothing was parsed, or the tree was too
// deep to hand out) or the parser's error (a syntax.ParseError, a
// syntax.LangError ...); the tree is then nil.
func Parse(text string) (*syntax.File, error) {
	if err := Check(text); err != nil {
		return nil, err
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(text), "")
	if err != nil {
		return nil, err
	}
	if d := TreeDepth(f, MaxTreeDepth); d > MaxTreeDepth {
		return nil, &NestingError{Depth: d}
	}
	return f, nil
}

// TreeDepth returns the depth of the tree under n (n itself is 1), or
// limit+1 when it is deeper than limit. It never recurses deeper than
// limit+1 levels.
func TreeDepth(n syntax.Node, limit int) int {
	depth, max := 0, 0
	syntax.Walk(n, func(n syntax.Node) bool {
		if n == nil {
			depth--
			return true
		}
		depth++
		if depth > max {
			max = depth
		}
		if depth > limit {
			depth-- // f(nil) does not follow a node Walk does not enter
			return false
		}
		return true
	})
	return max
}

// Script is one shell text parsed once: the tree, or why there is none.
// It is read-only once made, and safe to share between goroutines.
type Script struct {
	// Text is the text that was parsed.
	Text string
	// File is the tree; nil when Err is set.
	File *syntax.File
	// Err is a *NestingError, a *SizeError or the parser's error, nil
	// when File is set.
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

// Depth estimates, in one pass and without parsing, how deep the parser
// would recurse on text (see Measure). The scan stops early once past
// MaxNesting.
func Depth(text string) int {
	return Measure(text).Depth
}
