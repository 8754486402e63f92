package scan

import (
	"bytes"
	"path"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// maxInline bounds the function calls inlined one inside another.
const maxInline = 8

// called handles a name the shell resolves before any program: an alias or
// a function defined in the text (checked where it is called, with its
// arguments bound to the positional parameters; those of earlier calls'
// definitions, Context.Definitions, are among them), or a function or
// alias the session defined in an earlier call whose definition berth
// does not have (Context.Names): what it runs is only known at run time,
// so it is checked against the floor by what it could run (couldRun). It
// reports whether name was one of them.
func (s *scanner) called(name string, args []arg, io ioInfo, seg, redir string) bool {
	if value, ok := s.aliases[name]; ok {
		key := "alias " + name
		if !s.calling[key] && len(s.calling) < maxInline {
			s.calling[key] = true
			text := value
			for _, a := range args {
				text += " " + a.source()
			}
			s.script(text, seg)
			delete(s.calling, key)
		}
		return true
	}
	if fd, ok := s.funcs[name]; ok {
		if !s.calling[name] && len(s.calling) < maxInline {
			s.inline(fd, args)
		}
		return true
	}
	if s.sessionName(name) {
		s.add("dynamic-command", seg, name+" is a function or alias the session defined in an earlier call: what it runs is only known at run time")
		s.couldRun(sessionWho(name), args, io, seg, redir)
		return true
	}
	return false
}

// sessionName reports whether the session defined name (a function or an
// alias) in an earlier call.
func (s *scanner) sessionName(name string) bool {
	for _, n := range s.ctx.Names {
		if n == name {
			return true
		}
	}
	return false
}

// inline walks the body of a function with its arguments as the
// positional parameters, as a call runs it.
func (s *scanner) inline(fd *syntax.FuncDecl, args []arg) {
	name := fd.Name.Value
	s.calling[name] = true
	restore := s.savePositional()
	s.setPositional(args)
	funcs, text := s.inFunc, s.text
	s.inFunc = 0
	if t, ok := s.funcText[fd]; ok {
		s.text = t
	}
	s.walk(fd.Body)
	s.inFunc, s.text = funcs, text
	restore()
	delete(s.calling, name)
}

// savePositional returns a function that restores the positional
// parameters as they are now.
func (s *scanner) savePositional() func() {
	pos, known := s.pos, s.posKnown
	names := []string{"@", "*", "#", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}
	saved := make(map[string]*cands, len(names))
	for _, n := range names {
		if c, ok := s.vars[n]; ok {
			saved[n] = &c
		} else {
			saved[n] = nil
		}
	}
	return func() {
		s.pos, s.posKnown = pos, known
		for n, c := range saved {
			if c == nil {
				delete(s.vars, n)
			} else {
				s.vars[n] = *c
			}
		}
	}
}

// unknownPositional reports a program berth checks whose arguments include
// "$@" while the positional parameters are not known: outside a function
// they are what an earlier call's set -- left, options included.
func (s *scanner) unknownPositional(argv []arg, seg string) {
	if s.posKnown || s.inFunc > 0 {
		return
	}
	name := path.Base(argv[0].first())
	if _, ok := lookupCheck(name); !ok && wrappers[name] == nil {
		return
	}
	for _, a := range argv[1:] {
		if a.node != nil && allPositional(a.node) {
			s.add("dynamic-command", seg, a.source()+": the positional parameters an earlier call may have set")
			return
		}
	}
}

// plainName reports whether v looks like a program name or path: a word
// with other characters came from splitting an expansion at an unusual IFS.
func plainName(v string) bool {
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._+-/[", r)) {
			return false
		}
	}
	return v != ""
}

// procSubstOf returns the <(...) a word is, or nil.
func procSubstOf(w *syntax.Word) *syntax.ProcSubst {
	if w == nil || len(w.Parts) != 1 {
		return nil
	}
	ps, _ := w.Parts[0].(*syntax.ProcSubst)
	return ps
}

// openFds records what the descriptors opened by a bare exec read (exec
// 3<<<text, exec 3<<EOF, exec 3< <(cmd)): a later shell reading one
// (bash <&3, bash /dev/fd/3) runs that text.
func (s *scanner) openFds(st *syntax.Stmt) {
	call, ok := st.Cmd.(*syntax.CallExpr)
	if !ok || len(call.Args) != 1 || call.Args[0].Lit() != "exec" {
		return
	}
	for _, r := range st.Redirs {
		if r.N == nil {
			continue
		}
		fd := r.N.Value
		switch r.Op {
		case syntax.WordHdoc:
			t := s.wordCands(r.Word).vals[0] + "\n"
			s.fds[fd] = fdSource{text: &t}
		case syntax.Hdoc, syntax.DashHdoc:
			t := ""
			if r.Hdoc != nil {
				t = s.wordCands(r.Hdoc).vals[0]
			}
			s.fds[fd] = fdSource{text: &t}
		case syntax.RdrIn, syntax.RdrInOut:
			if ps := procSubstOf(r.Word); ps != nil {
				s.fds[fd] = fdSource{up: ps.Stmts}
			} else {
				delete(s.fds, fd) // a file: its content is not known
			}
		default:
			delete(s.fds, fd)
		}
	}
}

// fdPath returns the descriptor a /dev/fd/N or /dev/stdin path names.
func fdPath(p string) (string, bool) {
	switch p {
	case "/dev/stdin", "-", "/proc/self/fd/0":
		return "0", true
	}
	for _, pre := range []string{"/dev/fd/", "/proc/self/fd/"} {
		if n, ok := strings.CutPrefix(p, pre); ok && isDigits(n) {
			return n, true
		}
	}
	return "", false
}

// spawnLoop reports an endless loop that only starts background commands
// (while :; do sh & done): it multiplies processes as a fork bomb does.
func (s *scanner) spawnLoop(w *syntax.WhileClause) {
	if len(w.Do) == 0 || !alwaysTrue(w.Cond, w.Until) {
		return
	}
	for _, st := range w.Do {
		if !st.Background {
			return
		}
	}
	s.add("fork-bomb", Clip(s.nodeText(w)), "an endless loop that only starts background commands")
}

// alwaysTrue reports whether a loop condition never ends the loop: while
// :, while true, until false.
func alwaysTrue(cond []*syntax.Stmt, until bool) bool {
	if len(cond) != 1 || cond[0].Negated {
		return false
	}
	call, ok := cond[0].Cmd.(*syntax.CallExpr)
	if !ok || len(call.Args) != 1 {
		return false
	}
	switch call.Args[0].Lit() {
	case ":", "true":
		return !until
	case "false":
		return until
	}
	return false
}

// mutualForkBombs reports functions of the text that call each other in a
// cycle, at least twice per round and in the background or a pipeline
// (g(){ h & h; }; h(){ g & g; }; g): a fork bomb spread over several names.
func (s *scanner) mutualForkBombs() {
	if len(s.funcs) < 2 {
		return
	}
	type edge struct {
		calls  int
		spread bool
	}
	graph := map[string]map[string]*edge{}
	calledIn := func(n syntax.Node) map[string]bool {
		in := map[string]bool{}
		s.visit(n, func(m syntax.Node) bool {
			if c, ok := m.(*syntax.CallExpr); ok && len(c.Args) > 0 && s.funcs[c.Args[0].Lit()] != nil {
				in[c.Args[0].Lit()] = true
			}
			return true
		})
		return in
	}
	budget := 200000 // nodes visited in all, so that many functions stay cheap
	for name, fd := range s.funcs {
		out := map[string]*edge{}
		get := func(callee string) *edge {
			if out[callee] == nil {
				out[callee] = &edge{}
			}
			return out[callee]
		}
		s.visit(fd.Body, func(n syntax.Node) bool {
			if budget--; budget < 0 {
				return false
			}
			switch n := n.(type) {
			case *syntax.CallExpr:
				if len(n.Args) > 0 && s.funcs[n.Args[0].Lit()] != nil {
					get(n.Args[0].Lit()).calls++
				}
			case *syntax.Stmt:
				if n.Background {
					for callee := range calledIn(n) {
						get(callee).spread = true
					}
				}
			case *syntax.BinaryCmd:
				if n.Op == syntax.Pipe || n.Op == syntax.PipeAll {
					for callee := range calledIn(n) {
						get(callee).spread = true
					}
				}
			}
			return true
		})
		graph[name] = out
	}
	reach := func(from string) map[string]bool {
		seen := map[string]bool{}
		stack := []string{from}
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for m := range graph[n] {
				if !seen[m] {
					seen[m] = true
					stack = append(stack, m)
				}
			}
		}
		return seen
	}
	for name := range graph {
		from := reach(name)
		if !from[name] {
			continue
		}
		calls, spread := 0, false
		for callee, e := range graph[name] {
			if reach(callee)[name] { // the callee leads back: on the cycle
				calls += e.calls
				spread = spread || e.spread
			}
		}
		if calls >= 2 && spread {
			var b bytes.Buffer
			_ = syntax.NewPrinter(syntax.SingleLine(true)).Print(&b, s.funcs[name])
			s.add("fork-bomb", Clip(b.String()), name+" (through functions that call it back)")
			return
		}
	}
}

// arith evaluates an arithmetic expression whose operands are all known
// ($((-1)), $((0-1)), $((x*2)) with x known); ok is false otherwise.
func (s *scanner) arith(x syntax.ArithmExpr, depth int) (int, bool) {
	if depth > 64 {
		return 0, false
	}
	switch x := x.(type) {
	case *syntax.Word:
		v, ok := s.word(x).lit()
		if !ok {
			return 0, false
		}
		if isName(v) {
			c, known := s.lookup(v)
			if !known || c.dyn || len(c.vals) != 1 {
				return 0, false
			}
			v = c.vals[0]
		}
		return parseArithNumber(strings.TrimSpace(v))
	case *syntax.ParenArithm:
		return s.arith(x.X, depth+1)
	case *syntax.UnaryArithm:
		if x.Op == syntax.Inc || x.Op == syntax.Dec {
			return 0, false
		}
		n, ok := s.arith(x.X, depth+1)
		if !ok {
			return 0, false
		}
		switch x.Op {
		case syntax.Minus:
			return -n, true
		case syntax.Plus:
			return n, true
		case syntax.Not:
			if n == 0 {
				return 1, true
			}
			return 0, true
		case syntax.BitNegation:
			return ^n, true
		}
	case *syntax.BinaryArithm:
		a, ok := s.arith(x.X, depth+1)
		if !ok {
			return 0, false
		}
		b, ok := s.arith(x.Y, depth+1)
		if !ok {
			return 0, false
		}
		switch x.Op {
		case syntax.Add:
			return a + b, true
		case syntax.Sub:
			return a - b, true
		case syntax.Mul:
			return a * b, true
		case syntax.Quo:
			if b != 0 {
				return a / b, true
			}
		case syntax.Rem:
			if b != 0 {
				return a % b, true
			}
		case syntax.And:
			return a & b, true
		case syntax.Or:
			return a | b, true
		case syntax.Xor:
			return a ^ b, true
		case syntax.Shl:
			if b >= 0 && b < 64 {
				return a << b, true
			}
		case syntax.Shr:
			if b >= 0 && b < 64 {
				return a >> b, true
			}
		case syntax.Comma:
			return b, true
		}
	}
	return 0, false
}

// parseArithNumber reads a number as shell arithmetic does: decimal, 0x
// hexadecimal, 0 octal, or base#digits.
func parseArithNumber(v string) (int, bool) {
	neg := false
	if strings.HasPrefix(v, "-") {
		neg, v = true, v[1:]
	}
	var n int64
	var err error
	switch {
	case strings.Contains(v, "#"):
		base, digits, _ := strings.Cut(v, "#")
		b, berr := strconv.Atoi(base)
		if berr != nil || b < 2 || b > 36 {
			return 0, false
		}
		n, err = strconv.ParseInt(digits, b, 64)
	case strings.HasPrefix(v, "0x") || strings.HasPrefix(v, "0X"):
		n, err = strconv.ParseInt(v[2:], 16, 64)
	case len(v) > 1 && v[0] == '0':
		n, err = strconv.ParseInt(v[1:], 8, 64)
	default:
		n, err = strconv.ParseInt(v, 10, 64)
	}
	if err != nil {
		return 0, false
	}
	if neg {
		n = -n
	}
	return int(n), true
}
