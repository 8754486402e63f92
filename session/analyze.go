package session

import (
	"errors"
	"strings"

	"github.com/a55dbaac/berth/internal/shparse"
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

// analyze reads the parsed command and reports whether it may change the
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
func analyze(sc *shparse.Script, names map[string]bool) (changed bool, incomplete error) {
	f, err := sc.File, sc.Err
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
