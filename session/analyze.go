package session

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// stateBuiltins are commands that can change exported variables, functions
// or aliases of the shell that runs them.
var stateBuiltins = map[string]bool{
	"export": true, "declare": true, "typeset": true, "local": true, "readonly": true,
	"unset": true, "source": true, ".": true, "eval": true, "set": true, "exec": true,
	"builtin": true, "command": true, "enable": true, "alias": true, "unalias": true,
	"shopt": true, "trap": true, "let": true, "read": true, "mapfile": true,
	"readarray": true, "printf": true, "getopts": true, "pushd": true, "popd": true,
	"cd": true, "hash": true,
}

// analyze parses command once and reports whether it may change the
// exported variables (or the function and alias names) of the shell, so
// the session must take a new snapshot for restoring the shell should it
// die — conservatively: anything it cannot prove harmless counts as a
// change, and names holds the functions and aliases the shell is known to
// define, since calling one may change anything — and, when the text ends inside an
// unfinished construct (an open quote, $(, (, if, case, ...), the syntax
// error. Such text is never sent to the shell: bash 5.2's eval mishandles
// end-of-input inside a construct (the next line fails to parse, and after a
// few of them the shell can abort with heap corruption). An unterminated
// here-document is left to the shell, which runs it with a warning.
func analyze(command string, names map[string]bool) (changed bool, incomplete error) {
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(command), "")
	if err != nil {
		var pe syntax.ParseError
		if errors.As(err, &pe) && pe.Incomplete && !strings.Contains(pe.Text, "here-document") {
			return true, err
		}
		return true, nil
	}
	syntax.Walk(f, func(node syntax.Node) bool {
		if changed {
			return false
		}
		switch n := node.(type) {
		case *syntax.DeclClause, *syntax.FuncDecl, *syntax.ArithmCmd, *syntax.LetClause:
			changed = true
		case *syntax.ParamExp:
			// ${x:=v} and ${x=v} assign.
			if n.Exp != nil && (n.Exp.Op == syntax.AssignUnset || n.Exp.Op == syntax.AssignUnsetOrNull) {
				changed = true
			}
		case *syntax.ArithmExp:
			changed = true // $((x=1)), $((x++))
		case *syntax.CallExpr:
			if len(n.Args) == 0 {
				if len(n.Assigns) > 0 {
					changed = true // A=1 updates an exported A
				}
				return true
			}
			name := n.Args[0].Lit()
			if name == "" || stateBuiltins[name] || names[name] {
				changed = true
			}
		case *syntax.ForClause, *syntax.CoprocClause:
			changed = true // loop variables, coproc variables
		}
		return !changed
	})
	return changed, nil
}

// MaxNesting is the deepest nesting of parentheses, braces, brackets,
// compound commands and chained operators a command may have. The shell
// parser berth uses to inspect commands recurses once per level (up to
// about 7 KB of stack each), so a command of a few hundred kilobytes of
// "((((" would otherwise exhaust the stack and crash berth; bash itself
// segfaults on such input. Real commands nest a few levels deep.
const MaxNesting = 1000

// NestingError reports a command refused because it nests deeper than
// MaxNesting.
type NestingError struct {
	Depth int // the depth berth estimated (at least MaxNesting+1)
}

func (e *NestingError) Error() string {
	return fmt.Sprintf("session: command nests at least %d levels deep (parentheses, braces, brackets, compound commands or chained | && || operators); berth accepts at most %d levels: split the command or put it in a script file and run that", e.Depth, MaxNesting)
}

// nestingDepth estimates, in one pass and without parsing, how deep the
// shell parser would recurse on command. It keeps a stack of what is open —
// brackets, "$(", "$((", "${", double quotes, backquotes, compound commands
// (if, loops, case) — and counts chained operators (|, &&, ||, !) until the
// end of the statement; the depth is the stack's height plus the chain. A
// closer only closes the opener it belongs to (the ")" of a case pattern
// closes nothing), so text cannot lower the estimate below what is really
// open. Single-quoted text, comments and here-document bodies cannot nest
// and are skipped, so balanced code in a heredoc or a quoted script costs
// nothing. The scan stops early once past MaxNesting.
func nestingDepth(command string) int {
	var stack []byte // ( { [ " ` and A ($(( or ((), P (${), i (if), l (loop), c (case)
	chain, max := 0, 0
	var heredocs []string // delimiters of here-documents that start on the next line
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
		if d := len(stack) + chain; d > max {
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
				i = skipHeredocs(command, i+1, heredocs) - 1
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
			var delim strings.Builder
			for j < n && strings.IndexByte(" \t\n;&|<>()", command[j]) < 0 {
				if command[j] != '\'' && command[j] != '"' && command[j] != '\\' {
					delim.WriteByte(command[j])
				}
				j++
			}
			if delim.Len() > 0 {
				heredocs = append(heredocs, delim.String())
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
	if d := len(stack) + chain; d > max {
		max = d
	}
	return max
}

// skipHeredocs returns the index just past the bodies of the here-documents
// that start at i, one per delimiter in order (leading tabs are ignored when
// matching, as <<- allows).
func skipHeredocs(command string, i int, delims []string) int {
	for _, d := range delims {
		for i < len(command) {
			j := strings.IndexByte(command[i:], '\n')
			line, next := command[i:], len(command)
			if j >= 0 {
				line, next = command[i:i+j], i+j+1
			}
			i = next
			if strings.TrimLeft(line, "\t") == d {
				break
			}
		}
	}
	return i
}
