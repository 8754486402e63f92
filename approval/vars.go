package approval

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
				}
			}
		}},
		"read": names("adinNptu", func(o *opts) []arg {
			out := append([]arg(nil), o.shortArg['a']...)
			if len(o.operands) == 0 && len(out) == 0 {
				return []arg{litArg("REPLY")}
			}
			return append(out, o.operands...)
		}),
		"mapfile":   names("dnOsuCc", func(o *opts) []arg { return lastOr(o.operands, "MAPFILE") }),
		"readarray": names("dnOsuCc", func(o *opts) []arg { return lastOr(o.operands, "MAPFILE") }),
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
