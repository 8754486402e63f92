package scan

import (
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/a55dbaac/berth/internal/shparse"
	"mvdan.cc/sh/v3/syntax"
)

// shellChecks are the shells, eval and source, the builtins that take
// shell text (alias, trap), and the interpreters of other languages.
func shellChecks() map[string]check {
	t := map[string]check{
		"eval": {[]string{"pipe-to-shell", "dynamic-command"}, func(s *scanner, c call) {
			if len(c.args) > 0 {
				s.scriptArg(s.joinArgs(c.args), c.seg)
			}
		}},
		"source": {[]string{"pipe-to-shell"}, sourceCheck},
		".":      {[]string{"pipe-to-shell"}, sourceCheck},
		"alias": {[]string{"dynamic-command"}, func(s *scanner, c call) {
			for _, a := range c.args {
				if name, val, ok := strings.Cut(a.first(), "="); ok {
					s.scriptArg(arg{vals: []string{val}, dyn: a.dyn, src: a.source()}, c.seg)
					if isAliasName(name) {
						s.aliases[name] = val
					}
				}
			}
		}},
		// trap's body runs later (at exit, before every command, on an
		// error or a signal), when nobody looks: it is checked now.
		"trap": {[]string{"dynamic-command"}, func(s *scanner, c call) {
			args := c.args
			if len(args) > 0 && args[0].first() == "--" {
				args = args[1:]
			}
			if len(args) == 0 || strings.HasPrefix(args[0].first(), "-") && !args[0].dyn {
				return // trap -p, trap -l, or trap -SIGNAL: nothing to run
			}
			if len(args) > 1 {
				s.scriptArg(args[0], c.seg)
			}
		}},
		// hash -p PATH NAME makes NAME run PATH, as an alias would.
		"hash": {nil, func(s *scanner, c call) {
			o := parseOpts(c.args, "pt", nil, true)
			if p, ok := o.val('p'); ok {
				for _, name := range o.operands {
					if v, lit := name.lit(); lit && isAliasName(v) {
						s.aliases[v] = shellQuote(p.first())
					}
				}
			}
		}},
		"make":    {[]string{"shell-from-pipe"}, func(s *scanner, c call) { s.make(c) }},
		"gmake":   {[]string{"shell-from-pipe"}, func(s *scanner, c call) { s.make(c) }},
		"crontab": {[]string{"dynamic-command"}, func(s *scanner, c call) { s.crontab(c) }},
		"perl":    {append([]string{"pipe-to-shell"}, writeRules...), inPlaceInterpreter},
		"ruby":    {append([]string{"pipe-to-shell"}, writeRules...), inPlaceInterpreter},
	}
	awk := check{[]string{"dynamic-command", "shell-from-pipe"}, func(s *scanner, c call) { s.awk(c.args, c.seg) }}
	for _, name := range []string{"awk", "gawk", "mawk", "nawk"} {
		t[name] = awk
	}
	for name := range shells {
		t[name] = check{[]string{"pipe-to-shell", "shell-from-pipe", "dynamic-command"}, func(s *scanner, c call) {
			s.shell(c.args, c.io, c.seg)
		}}
	}
	for _, name := range interpreters {
		if _, ok := t[name]; !ok {
			t[name] = check{[]string{"pipe-to-shell", "write-berth-config"}, func(s *scanner, c call) {
				s.interpreter(c.name, c.args, c.io, c.seg)
			}}
		}
	}
	return t
}

// codeNamesBerth reports code for another language (python -c, a heredoc
// fed to node ...) that names berth's home or configuration: berth does not
// read such code, and it may write them (open(".../config.yaml", "w")).
func (s *scanner) codeNamesBerth(args []arg, io ioInfo, seg string) {
	texts := []string{}
	for _, a := range args {
		texts = append(texts, a.vals...)
	}
	if io.stdinText != nil {
		texts = append(texts, *io.stdinText)
	}
	for _, t := range texts {
		if s.namesBerth(t) {
			s.add("write-berth-config", seg, "code that names berth's configuration")
			return
		}
	}
}

// inPlaceInterpreter checks perl and ruby: -i edits files in place.
func inPlaceInterpreter(s *scanner, c call) {
	s.perlInPlace(c.args, c.seg)
	s.interpreter(c.name, c.args, c.io, c.seg)
}

// sourceCheck checks source and .: the script they read, as a shell's
// operand (a <(...), /dev/stdin, a descriptor).
func sourceCheck(s *scanner, c call) {
	if len(c.args) > 0 {
		s.scriptFile(c.args[0], c.io, c.seg)
	}
}

// interpreters run programs in another language; python3.N and python2.N
// are found by prefix (prefixChecks).
var interpreters = []string{"python", "python2", "python3", "pypy", "pypy3", "perl", "ruby", "node", "nodejs", "php", "lua", "deno", "bun"}

var shells = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "mksh": true, "ash": true, "rbash": true, "yash": true, "posh": true, "fish": true, "tcsh": true, "csh": true}

// scriptArg checks shell text that a command runs (sh -c, eval, su -c,
// ssh host cmd). Unknown parts are read as empty for the checks; when an
// unknown part would be a program name, the text is dynamic.
func (s *scanner) scriptArg(a arg, seg string) {
	if a.node != nil && s.fetches(a.node) {
		s.add("pipe-to-shell", seg, "")
	}
	for i, v := range a.vals {
		if i >= 4 {
			break
		}
		s.script(v, seg)
	}
	if a.dyn && a.node != nil {
		s.dynamicProgram(a, seg)
	} else if a.dyn {
		s.add("dynamic-command", seg, a.source())
	}
}

// dynMark stands for an unknown part when shell text is checked for
// programs only known at run time.
const dynMark = "BERTH_UNKNOWN_9f1c"

// dynamicProgram re-reads shell text with its unknown parts marked, and
// reports the text as dynamic when a mark lands in command position.
func (s *scanner) dynamicProgram(a arg, seg string) {
	marked := markUnknown(a.node.Parts)
	f, err := shparse.Parse(marked)
	if err == nil && !s.charge(marked, f) {
		return
	}
	if err != nil {
		s.add("dynamic-command", seg, a.source())
		return
	}
	s.visit(f, func(n syntax.Node) bool {
		if c, ok := n.(*syntax.CallExpr); ok && len(c.Args) > 0 && strings.Contains(printWord(c.Args[0]), dynMark) {
			s.add("dynamic-command", seg, a.source())
		}
		return true
	})
}

// markUnknown renders word parts with literal parts kept and every
// expansion replaced by dynMark.
func markUnknown(ps []syntax.WordPart) string {
	var b strings.Builder
	for _, p := range ps {
		switch p := p.(type) {
		case *syntax.Lit:
			b.WriteString(unescapeLit(p.Value))
		case *syntax.SglQuoted:
			if p.Dollar {
				b.WriteString(ansiC(p.Value))
			} else {
				b.WriteString(p.Value)
			}
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				if l, ok := q.(*syntax.Lit); ok {
					b.WriteString(unescapeDQ(l.Value))
				} else {
					b.WriteString(dynMark)
				}
			}
		default:
			b.WriteString(dynMark)
		}
	}
	return b.String()
}

// fetches reports whether n contains a command that downloads (curl, wget),
// e.g. the $(curl ...) of bash -c "$(curl ...)" or the <(curl ...) of
// sh <(curl ...).
func (s *scanner) fetches(n syntax.Node) bool {
	if n == nil {
		return false
	}
	if w, ok := n.(*syntax.Word); ok && w == nil {
		return false
	}
	found := false
	s.visit(n, func(m syntax.Node) bool {
		if st, ok := m.(*syntax.Stmt); ok {
			if name, _ := s.stageCommand(st); fetchers[name] {
				found = true
			}
		}
		return !found
	})
	return found
}

// stageCommand returns the program a statement runs, wrappers removed.
func (s *scanner) stageCommand(st *syntax.Stmt) (string, []arg) {
	call, ok := st.Cmd.(*syntax.CallExpr)
	if !ok || len(call.Args) == 0 {
		return "", nil
	}
	return s.innerName(s.words(call.Args))
}

// pipeSeg returns a pipeline's text, for findings about the pipeline.
func (s *scanner) pipeSeg(up []*syntax.Stmt, seg string) string {
	var parts []string
	for _, st := range up {
		if call, ok := st.Cmd.(*syntax.CallExpr); ok {
			parts = append(parts, s.segment(s.words(call.Args), ""))
		}
	}
	return Clip(strings.Join(append(parts, seg), " | "))
}

// shell checks sh/bash/... with their options: -c text is checked as a
// script; without -c or a script file the shell runs its stdin.
func (s *scanner) shell(args []arg, io ioInfo, seg string) {
	cflag, sflag := false, false
	i := 0
loop:
	for ; i < len(args); i++ {
		v := args[i].first()
		switch {
		case v == "--" || v == "-":
			i++
			break loop
		case strings.HasPrefix(v, "--"):
			if v == "--rcfile" || v == "--init-file" {
				i++
			}
		case len(v) > 1 && (v[0] == '-' || v[0] == '+'):
			skip := 0
			for _, ch := range v[1:] {
				switch ch {
				case 'c':
					cflag = true
				case 's':
					sflag = true
				case 'o', 'O':
					skip++
				}
			}
			i += skip
		default:
			break loop
		}
	}
	var operands []arg
	if i < len(args) {
		operands = args[i:]
	}
	switch {
	case cflag:
		if len(operands) > 0 {
			restore := s.positional(operands[1:])
			s.scriptArg(operands[0], seg)
			restore()
		}
	case len(operands) > 0 && !sflag:
		restore := s.positional(operands)
		s.scriptFile(operands[0], io, seg)
		restore()
	default:
		s.stdinCode(io, seg, true)
	}
}

// scriptFile checks the script a shell runs (or source reads) from its
// operand: the text of a <(...) or of a descriptor (/dev/stdin, /dev/fd/N,
// -), which is code berth can often see. A script file on disk is not
// read.
func (s *scanner) scriptFile(a arg, io ioInfo, seg string) {
	if s.fetches(a.node) {
		s.add("pipe-to-shell", seg, "")
		return
	}
	if ps := procSubstOf(a.node); ps != nil {
		s.stdinCode(ioInfo{up: ps.Stmts}, seg, true)
		return
	}
	fd, ok := fdPath(a.first())
	switch {
	case !ok:
		if text, written := s.fileText(a.first()); written {
			s.script(text, seg) // a script the command itself wrote
		}
	case fd == "0":
		s.stdinCode(io, seg, true)
	case s.fds[fd].text != nil:
		s.script(*s.fds[fd].text, seg)
	case s.fds[fd].up != nil:
		s.stdinCode(ioInfo{up: s.fds[fd].up}, seg, true)
	default:
		s.add("shell-from-pipe", seg, "descriptor "+fd)
	}
}

// positional sets $0, $1 ... $@ for the text of sh -c TEXT NAME ARGS...,
// and returns a function that restores the previous values.
func (s *scanner) positional(args []arg) func() {
	pos, known := s.pos, s.posKnown
	if len(args) > 1 {
		s.pos, s.posKnown = append([]arg(nil), args[1:]...), true
	} else {
		s.pos, s.posKnown = nil, true
	}
	names := []string{"@", "*", "#"}
	for i := range 10 {
		names = append(names, strconv.Itoa(i))
	}
	saved := map[string]*cands{}
	for _, n := range names {
		if c, ok := s.vars[n]; ok {
			saved[n] = &c
		} else {
			saved[n] = nil
		}
		delete(s.vars, n)
	}
	var all cands
	for i, a := range args {
		c := cands{vals: a.vals, dyn: a.dyn}
		if i < 10 {
			s.vars[strconv.Itoa(i)] = c
		}
		if i > 0 {
			all = union(all, c)
		}
	}
	if len(args) > 1 {
		s.vars["@"], s.vars["*"] = all, all
	} else {
		s.vars["@"], s.vars["*"] = one(""), one("")
	}
	for i := len(args); i < 10; i++ {
		s.vars[strconv.Itoa(i)] = one("")
	}
	s.vars["#"] = one(strconv.Itoa(max(len(args)-1, 0)))
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

// stdinCode checks what a shell (asShell) or another interpreter reads as
// its program from stdin.
func (s *scanner) stdinCode(io ioInfo, seg string, asShell bool) {
	if io.stdinUnknown && asShell {
		s.add("shell-from-pipe", seg, "a descriptor whose content berth cannot see")
		return
	}
	if io.stdinText != nil {
		if asShell {
			s.script(*io.stdinText, seg)
		}
		return
	}
	if len(io.up) == 0 {
		return
	}
	for _, up := range io.up {
		if name, _ := s.stageCommand(up); fetchers[name] {
			s.add("pipe-to-shell", s.pipeSeg(io.up, seg), "")
			return
		}
	}
	if !asShell {
		return
	}
	lastSt := io.up[len(io.up)-1]
	name, argv := s.stageCommand(lastSt)
	switch name {
	case "echo", "printf":
		if texts, ok := literalOutputs(name, argv[1:]); ok {
			for _, t := range texts {
				s.script(t, seg)
			}
			return
		}
	case "cat":
		if len(operandsOnly(argv[1:])) > 0 {
			if texts, ok := s.pipeOutput(io.up); ok {
				for _, t := range texts {
					s.script(t, seg) // a script the command wrote
				}
			}
			return // a script file
		}
		for _, r := range lastSt.Redirs {
			if r.Op == syntax.Hdoc || r.Op == syntax.DashHdoc || r.Op == syntax.WordHdoc {
				w := r.Hdoc
				if r.Op == syntax.WordHdoc {
					w = r.Word
				}
				s.script(s.wordCands(w).vals[0], seg)
				return
			}
		}
	}
	if texts, ok := s.pipeOutput(io.up); ok {
		for _, t := range texts {
			s.script(t, seg) // text made from known text: base64 -d <<< ... | sh
		}
		return
	}
	s.add("shell-from-pipe", s.pipeSeg(io.up, seg), name)
}

// literalOutput returns what echo or printf prints when every word is
// known (for echo, as echo -e would).
func literalOutput(name string, args []arg) (string, bool) {
	texts, ok := literalOutputs(name, args)
	if !ok {
		return "", false
	}
	return texts[len(texts)-1], true
}

// literalOutputs returns what echo or printf prints when every word is
// known: printf with its format's escapes and %s, %b, %c, %d; echo as
// written and, when that differs, with its escapes decoded (echo -e, and
// the echo of dash and of bash in POSIX mode, decode them).
func literalOutputs(name string, args []arg) ([]string, bool) {
	var lits []string
	for _, a := range args {
		v, ok := a.lit()
		if !ok {
			return nil, false
		}
		lits = append(lits, v)
	}
	if name == "printf" {
		if len(lits) > 0 && lits[0] == "--" {
			lits = lits[1:]
		}
		if len(lits) == 0 {
			return nil, false
		}
		t, ok := printfText(lits[0], lits[1:])
		if !ok {
			return nil, false
		}
		return []string{t}, true
	}
	for len(lits) > 0 && len(lits[0]) > 1 && lits[0][0] == '-' && strings.Trim(lits[0][1:], "neE") == "" {
		lits = lits[1:]
	}
	raw := strings.Join(lits, " ")
	if dec := echoEscapes(raw); dec != raw {
		return []string{raw, dec}, true
	}
	return []string{raw}, true
}

// interpreter checks an interpreter that may run code piped from the
// network.
func (s *scanner) interpreter(name string, args []arg, io ioInfo, seg string) {
	s.codeNamesBerth(args, io, seg)
	codeFlags := map[string]string{"perl": "eE", "ruby": "e", "node": "ep", "nodejs": "ep", "php": "r", "lua": "e"}[name]
	if strings.HasPrefix(name, "python") || strings.HasPrefix(name, "pypy") {
		codeFlags = "cm"
	}
	var first *arg
	for i := range args {
		v := args[i].first()
		if v == "--eval" || v == "--print" || v == "eval" || v == "run" {
			return
		}
		if len(v) > 1 && v[0] == '-' && v[1] != '-' {
			if strings.ContainsAny(v[1:2], codeFlags) {
				return
			}
			continue
		}
		if strings.HasPrefix(v, "--") {
			continue
		}
		first = &args[i]
		break
	}
	if first != nil && first.first() != "-" {
		if s.fetches(first.node) {
			s.add("pipe-to-shell", seg, "")
		}
		return
	}
	s.stdinCode(io, seg, false)
}

// awkCalls find the shell commands an awk program runs: system("..."),
// "..." | getline, and print ... | "...".
var (
	awkSystem = regexp.MustCompile(`\bsystem\s*\(\s*"((?:[^"\\]|\\.)*)"\s*\)`)
	awkGetln  = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"\s*\|&?\s*getline`)
	awkPipe   = regexp.MustCompile(`\bprintf?\b[^;{}\n|]*\|&?\s*"((?:[^"\\]|\\.)*)"`)
	awkAnyRun = regexp.MustCompile(`\bsystem\s*\(|\|&?\s*getline|\bprintf?\b[^;{}\n|]*\|&?\s*[A-Za-z_("]`)
)

// awk checks the shell commands an awk program runs. A command built at
// run time (system(cmd), print | cmd) is dynamic.
func (s *scanner) awk(args []arg, seg string) {
	o := parseOpts(args, "Fvfeil", []string{"field-separator", "assign", "file", "source", "include", "load"}, true)
	progs := append(append([]arg(nil), o.shortArg['e']...), o.long["source"]...)
	if len(o.shortArg['f']) == 0 && len(o.long["file"]) == 0 && len(progs) == 0 && len(o.operands) > 0 {
		progs = append(progs, o.operands[0])
	}
	for _, p := range progs {
		for _, text := range p.vals {
			found := 0
			for _, re := range []*regexp.Regexp{awkSystem, awkGetln, awkPipe} {
				for _, m := range re.FindAllStringSubmatch(text, 8) {
					found++
					cmd := unescapeAwk(m[1])
					if re == awkPipe && shells[path.Base(strings.Fields(cmd + " x")[0])] {
						s.add("shell-from-pipe", seg, "awk prints into "+cmd)
						continue
					}
					s.script(cmd, seg)
				}
			}
			if found < len(awkAnyRun.FindAllStringIndex(text, -1)) {
				s.add("dynamic-command", seg, "awk runs a command built at run time")
			}
		}
	}
}

// unescapeAwk decodes the escapes of an awk string literal.
func unescapeAwk(v string) string {
	return ansiC(v)
}

// shellQuote quotes v as one shell word.
func shellQuote(v string) string {
	return "'" + strings.ReplaceAll(v, "'", `'\''`) + "'"
}
