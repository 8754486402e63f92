package scan

import (
	"regexp"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// varChecks are the builtins that set or unset variables and the
// positional parameters. What they assign is read from input or computed
// at run time (read, mapfile, printf -v of unknown text): the variables
// hold unknown values afterwards. set -- and shift move the positional
// parameters, which "$@" then expands to.
func varChecks() map[string]check {
	names := func(short string, pick func(o *opts) []arg) check {
		return check{[]string{"berth-env"}, func(s *scanner, c call) {
			o := parseOpts(c.args, short, nil, true)
			for _, a := range pick(o) {
				s.setsVarWord(a, c.seg)
				for _, v := range a.vals {
					s.vars[v] = unknown
				}
			}
		}}
	}
	return map[string]check{
		"unset": {[]string{"berth-env"}, func(s *scanner, c call) {
			o := parseOpts(c.args, "", nil, true)
			if o.has('f') {
				return // functions
			}
			for _, a := range o.operands {
				s.setsVarWord(a, c.seg)
				for _, v := range a.vals {
					delete(s.vars, v)
					delete(s.arrays, v)
				}
			}
		}},
		"read":      {[]string{"berth-env"}, func(s *scanner, c call) { s.read(c) }},
		"mapfile":   {[]string{"berth-env"}, func(s *scanner, c call) { s.mapfile(c) }},
		"readarray": {[]string{"berth-env"}, func(s *scanner, c call) { s.mapfile(c) }},
		"getopts": names("", func(o *opts) []arg {
			if len(o.operands) > 1 {
				return o.operands[1:2]
			}
			return nil
		}),
		"printf": {[]string{"berth-env"}, func(s *scanner, c call) {
			if len(c.args) < 2 || !strings.HasPrefix(c.args[0].first(), "-v") {
				return
			}
			name, rest := c.args[1], c.args[2:]
			if v := c.args[0].first(); v != "-v" {
				name, rest = suffix(c.args[0], 2), c.args[1:]
			}
			s.setsVarWord(name, c.seg)
			val := unknown
			if text, ok := literalOutput("printf", rest); ok {
				val = one(text)
			}
			for _, v := range name.vals {
				s.vars[v] = val
			}
		}},
		"let": {[]string{"berth-env"}, func(s *scanner, c call) {
			for _, a := range c.args {
				for _, v := range a.vals {
					if m := letAssign.FindStringSubmatch(v); m != nil {
						s.setsVar(m[1], c.seg)
						s.vars[m[1]] = unknown
					}
				}
			}
		}},
		"set": {nil, func(s *scanner, c call) {
			for i, a := range c.args {
				v := a.first()
				if v == "--" || v == "-" {
					s.setPositional(c.args[i+1:])
					return
				}
				if a.dyn || !strings.HasPrefix(v, "-") && !strings.HasPrefix(v, "+") {
					s.setPositional(c.args[i:]) // set a b: the rest are the parameters
					return
				}
				if v == "-o" || v == "+o" {
					return // set -o name
				}
			}
		}},
		"shift": {nil, func(s *scanner, c call) {
			n := 1
			if len(c.args) > 0 {
				v, ok := c.args[0].lit()
				k, err := strconv.Atoi(v)
				if !ok || err != nil || k < 0 {
					s.setPositional(nil)
					s.posKnown = false
					return
				}
				n = k
			}
			if s.posKnown && n <= len(s.pos) {
				s.setPositional(s.pos[n:])
			}
		}},
	}
}

// read assigns the variables of read. What it reads is known when its
// stdin is (a here-string or heredoc of known text, or a process
// substitution of echo or printf of it: io.fed); else the variables hold
// unknown values afterwards.
func (s *scanner) read(c call) {
	o := parseOpts(c.args, "adinNptu", nil, true)
	array, isArray := o.val('a')
	targets := o.operands
	if isArray {
		targets = []arg{array}
	} else if len(targets) == 0 {
		targets = []arg{litArg("REPLY")}
	}
	var vals [][]string // per target, the values it may get
	known := c.io.fed != nil && !c.io.fed.dyn && !o.has('n') && !o.has('N') && !o.has('u')
	delim, ok := s.delimOpt(o)
	ifs, ifsKnown := s.ifs()
	known = known && ok && ifsKnown
	if known {
		vals = make([][]string, len(targets))
		for _, text := range c.io.fed.vals {
			line, _, _ := strings.Cut(text, delim)
			if !o.has('r') && strings.Contains(line, `\`) {
				known = false // backslash escapes and continued lines
				break
			}
			n := len(targets)
			if isArray {
				n = -1
			}
			fields := readFields(line, ifs, n)
			if isArray {
				vals[0] = append(vals[0], fields...)
				continue
			}
			for i := range targets {
				vals[i] = append(vals[i], fields[i])
			}
		}
	}
	for i, a := range targets {
		s.setsVarWord(a, c.seg)
		val := unknown
		if known {
			val = capCands(cands{vals: vals[i]})
		}
		for _, v := range a.vals {
			s.vars[v] = val
			delete(s.arrays, v)
			if isArray && known && len(c.io.fed.vals) == 1 {
				s.arrays[v] = litArgs(vals[0]) // read -a: the fields, in order
			}
		}
	}
}

// mapfile assigns the array of mapfile (readarray): the lines of its
// stdin, when that is known (as for read).
func (s *scanner) mapfile(c call) {
	o := parseOpts(c.args, "dnOsuCc", nil, true)
	target := lastOr(o.operands, "MAPFILE")[0]
	s.setsVarWord(target, c.seg)
	val := unknown
	delim, ok := s.delimOpt(o)
	count, skip := -1, 0
	for _, f := range []struct {
		c byte
		n *int
	}{{'n', &count}, {'s', &skip}} {
		if a, has := o.val(f.c); has {
			v, lit := a.lit()
			k, err := strconv.Atoi(v)
			if !lit || err != nil || k < 0 {
				ok = false
			}
			*f.n = k
			if f.c == 'n' && k == 0 {
				*f.n = -1 // -n 0 reads every line
			}
		}
	}
	if fed := c.io.fed; fed != nil && !fed.dyn && ok && !o.has('u') && !o.has('C') {
		var lines []string
		for _, text := range fed.vals {
			got := strings.SplitAfter(text, delim)
			if last := len(got) - 1; got[last] == "" {
				got = got[:last]
			}
			got = got[min(skip, len(got)):]
			if count >= 0 && count < len(got) {
				got = got[:count]
			}
			for _, l := range got {
				if o.has('t') {
					l = strings.TrimSuffix(l, delim)
				}
				lines = append(lines, l)
			}
		}
		val = capCands(cands{vals: lines})
		for _, v := range target.vals {
			if len(fed.vals) == 1 {
				s.arrays[v] = litArgs(lines) // the lines, in order
			}
		}
	}
	for _, v := range target.vals {
		s.vars[v] = val
		if val.dyn {
			delete(s.arrays, v)
		}
	}
}

// delimOpt returns the delimiter -d chooses (read, mapfile): a newline by
// default, NUL for -d ”.
func (s *scanner) delimOpt(o *opts) (string, bool) {
	a, has := o.val('d')
	if !has {
		return "\n", true
	}
	v, ok := a.lit()
	if !ok {
		return "", false
	}
	if v == "" {
		return "\x00", true
	}
	return v[:1], true
}

// ifs returns the IFS the command being checked sees, and whether it is
// known.
func (s *scanner) ifs() (string, bool) {
	c, ok := s.vars["IFS"]
	if s.callIFS != nil {
		c, ok = *s.callIFS, true
	}
	if !ok {
		return defaultIFS, true
	}
	if c.dyn || len(c.vals) != 1 {
		return "", false
	}
	return c.vals[0], true
}

// readFields splits a line as read does into n fields (n < 0: every field,
// as read -a): the IFS whitespace at both ends is dropped, a run of IFS
// whitespace or one other IFS character with the whitespace around it
// separates two fields, and the last of n fields holds the rest of the
// line (less one trailing IFS character when the rest is one field: "x:"
// is x).
func readFields(line, ifs string, n int) []string {
	isIFS := func(r rune) bool { return strings.ContainsRune(ifs, r) }
	isWS := func(r rune) bool { return isIFS(r) && (r == ' ' || r == '\t' || r == '\n') }
	line = strings.TrimLeftFunc(line, isWS)
	var out []string
	for n < 0 || len(out) < n-1 {
		if line == "" {
			break
		}
		i := strings.IndexFunc(line, isIFS)
		if i < 0 {
			out = append(out, line)
			line = ""
			break
		}
		out = append(out, line[:i])
		line = strings.TrimLeftFunc(line[i:], isWS)
		if line != "" && isIFS(rune(line[0])) && !isWS(rune(line[0])) {
			line = strings.TrimLeftFunc(line[1:], isWS)
		}
	}
	if n > 0 && len(out) < n {
		rest := strings.TrimRightFunc(line, isWS)
		if k := len(rest); k > 0 && isIFS(rune(rest[k-1])) && !isWS(rune(rest[k-1])) {
			if body := strings.TrimRightFunc(rest[:k-1], isWS); strings.IndexFunc(body, isIFS) < 0 {
				rest = body
			}
		}
		out = append(out, rest)
	}
	for len(out) < n {
		out = append(out, "")
	}
	return out
}

// constOutput returns what a process substitution of a constant command
// prints (<(echo /), <(printf '%s\n' a b): echo or printf of known words),
// or nil. Its output is known before it runs, as $(echo /) is (cmdSubst).
//
// Anything else a process substitution runs, and a pipe into read (a
// subshell: the variables do not outlive it), stays unknown. An unknown
// operand is no floor: rm -rf "$tmp" with tmp from mktemp -d, or from
// read < <(mktemp -d), is routine and needs approval only as
// rm-recursive; so a recursive removal of a value only known at run time
// is left to the dangerous rules rather than blocked everywhere.
func (s *scanner) constOutput(stmts []*syntax.Stmt) *cands {
	if len(stmts) != 1 || len(stmts[0].Redirs) > 0 || stmts[0].Background {
		return nil
	}
	name, argv := s.stageCommand(stmts[0])
	if name != "echo" && name != "printf" {
		return nil
	}
	texts, ok := literalOutputs(name, argv[1:])
	if !ok {
		return nil
	}
	c := capCands(cands{vals: texts})
	return &c
}

// wholeIndex reports whether an array index stands for the whole value
// as berth keeps it: ${a[@]}, ${a[*]}, ${a[0]} (a variable's candidate
// values are every element it may hold).
func wholeIndex(x syntax.ArithmExpr) bool {
	w, ok := x.(*syntax.Word)
	if !ok {
		return false
	}
	v := w.Lit()
	return v == "@" || v == "*" || isDigits(v)
}

// letAssign finds the variable a let expression assigns (x=1, x+=2, x++).
var letAssign = regexp.MustCompile(`^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:[-+*/%&|^]|<<|>>)?=|^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\+\+|--)`)

// lastOr returns the last of args, or a word holding def.
func lastOr(args []arg, def string) []arg {
	if len(args) == 0 {
		return []arg{litArg(def)}
	}
	return args[len(args)-1:]
}

// setPositional makes args the positional parameters $1 ... ("$@"); $0
// stays.
func (s *scanner) setPositional(args []arg) {
	s.pos, s.posKnown = append([]arg(nil), args...), true
	var all cands
	for i, a := range args {
		c := cands{vals: a.vals, dyn: a.dyn}
		if i < 9 {
			s.vars[strconv.Itoa(i+1)] = c
		}
		all = union(all, c)
	}
	if len(args) == 0 {
		all = one("")
	}
	s.vars["@"], s.vars["*"] = all, all
	for i := len(args); i < 9; i++ {
		s.vars[strconv.Itoa(i+1)] = one("")
	}
	s.vars["#"] = one(strconv.Itoa(len(args)))
}

// allPositional reports whether w is "$@" or $@ (or $* unquoted): a word
// that expands to every positional parameter, each its own word.
func allPositional(w *syntax.Word) bool {
	ps := w.Parts
	if len(ps) == 1 {
		if dq, ok := ps[0].(*syntax.DblQuoted); ok {
			ps = dq.Parts
			if len(ps) == 1 && isParam(ps[0], "@") {
				return true
			}
			return false
		}
	}
	return len(ps) == 1 && (isParam(ps[0], "@") || isParam(ps[0], "*"))
}

// isParam reports whether p is a plain $name or ${name}.
func isParam(p syntax.WordPart, name string) bool {
	pe, ok := p.(*syntax.ParamExp)
	return ok && pe.Param != nil && pe.Param.Value == name && pe.Exp == nil && pe.Index == nil &&
		pe.Slice == nil && pe.Repl == nil && !pe.Length && !pe.Excl && pe.NestedParam == nil && pe.Names == 0
}

// litArgs makes known words of values.
func litArgs(vals []string) []arg {
	out := make([]arg, len(vals))
	for i, v := range vals {
		out[i] = litArg(v)
	}
	return out
}

// argsCands is every value the words may have, as the candidates of one.
func argsCands(as []arg) cands {
	var c cands
	for _, a := range as {
		c.vals = append(c.vals, a.vals...)
		c.dyn = c.dyn || a.dyn
	}
	return capCands(c)
}

// maxArray bounds the elements of an array berth keeps.
const maxArray = 1024

// assignArray keeps the elements of an array assignment: name=(a b c)
// sets them, name+=(d) adds to them; any other assignment to the name
// (an element, a scalar) leaves them unknown.
func (s *scanner) assignArray(as *syntax.Assign) {
	name := as.Name.Value
	prev, had := s.arrays[name]
	delete(s.arrays, name)
	if as.Array == nil || as.Index != nil {
		return
	}
	var elems []arg
	if as.Append {
		if !had {
			return
		}
		elems = append(elems, prev...)
	}
	for _, e := range as.Array.Elems {
		if e.Index != nil || e.Value == nil {
			return // [k]=v: berth does not follow sparse arrays
		}
		elems = append(elems, s.words([]*syntax.Word{e.Value})...)
		if len(elems) > maxArray {
			return
		}
	}
	s.arrays[name] = elems
}

// arrayWords expands a word that is a whole array whose elements are
// known ("${c[@]}", ${c[@]}, ${c[*]}, "${c[*]}") as the shell does: one
// word per element, split at blanks when unquoted, or one word of them
// joined by a space for "${c[*]}". ok is false for any other word.
func (s *scanner) arrayWords(w *syntax.Word) ([]arg, bool) {
	ps, quoted := w.Parts, false
	if len(ps) == 1 {
		if dq, isDQ := ps[0].(*syntax.DblQuoted); isDQ {
			ps, quoted = dq.Parts, true
		}
	}
	if len(ps) != 1 {
		return nil, false
	}
	pe, isPE := ps[0].(*syntax.ParamExp)
	if !isPE || pe.Param == nil || pe.Index == nil || pe.Exp != nil || pe.Slice != nil || pe.Repl != nil || pe.Length || pe.Excl || pe.NestedParam != nil || pe.Names != 0 {
		return nil, false
	}
	iw, isWord := pe.Index.(*syntax.Word)
	if !isWord || iw.Lit() != "@" && iw.Lit() != "*" {
		return nil, false
	}
	elems, ok := s.arrays[pe.Param.Value]
	if !ok {
		return nil, false
	}
	switch {
	case quoted && iw.Lit() == "*":
		j := s.joinArgs(elems)
		j.node = w
		return []arg{j}, true
	case quoted:
		return append([]arg(nil), elems...), true
	}
	var out []arg
	for _, e := range elems {
		out = append(out, s.split(e)...)
	}
	return out, true
}
