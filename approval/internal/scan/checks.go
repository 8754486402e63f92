package scan

import (
	"fmt"
	"path"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// call is one program run with its arguments, as a checker sees it.
type call struct {
	name  string // the program's base name
	args  []arg  // its arguments, wrappers removed
	io    ioInfo // what it reads on stdin, and how it was started
	seg   string // the normalized simple command, for findings
	redir string // its output redirections, as written
}

// checker checks one call and adds its findings to s.
type checker func(s *scanner, c call)

// check is what berth knows about one program: the rules its checker can
// report, beside the checker, so the two are read together.
type check struct {
	rules []string
	fn    checker
}

// checks maps a program's base name to its check. Each family of programs
// has its table in its own file: fs.go (removal, permissions, copies,
// in-place edits), disk.go (formatting and wiping), fetch.go (downloads),
// vcs.go (git), db.go (SQL clients), proc.go (signals, services, power),
// shell.go (shells, eval, interpreters, the builtins that set variables)
// and berth.go (berth itself, and Hermes' configuration); wrappers.go holds the
// programs that run another command (sudo, env, xargs ...).
var checks map[string]check

// prefixChecks are the checks of program families named by a prefix
// (mkfs.ext4, python3.12), tried when no name matches exactly.
var prefixChecks = []struct {
	prefix string // the family's prefix
	name   string // the program whose check the family shares
}{
	{"mkfs.", "mkfs"},
	{"python3.", "python3"},
	{"python2.", "python2"},
}

// families are the tables of checks by family, each named as its cases
// file (testdata/<family>.txt).
var families = []struct {
	name  string
	table func() map[string]check
}{
	{"fs", fsChecks}, {"disk", diskChecks}, {"fetch", fetchChecks}, {"vcs", vcsChecks}, {"db", dbChecks},
	{"proc", procChecks}, {"shell", shellChecks}, {"berth", berthChecks}, {"vars", varChecks},
	{"remote", remoteChecks},
}

// scannerFamilies are the families of what the scanner checks itself, for
// every command, each with its cases file too: wrappers (wrappers.go),
// what the shell resolves before any program (flow.go), programs only
// known at run time (dynamic.go), writes by redirection, and words.
var scannerFamilies = []string{"wrappers", "flow", "dynamic", "writes", "words"}

func init() {
	checks = map[string]check{}
	for _, family := range families {
		for name, c := range family.table() {
			if _, dup := checks[name]; dup {
				panic("approval: two checks for " + name)
			}
			checks[name] = c
		}
	}
}

// lookupCheck returns the check of the program name.
func lookupCheck(name string) (check, bool) {
	if c, ok := checks[name]; ok {
		return c, true
	}
	for _, p := range prefixChecks {
		if strings.HasPrefix(name, p.prefix) {
			c, ok := checks[p.name]
			return c, ok
		}
	}
	return check{}, false
}

// scannerRules are the rules the scanner reports itself, for every
// command, rather than a program's checker: writes through redirections,
// fork bombs, and what it cannot follow.
var scannerRules = []string{"dynamic-command", "dynamic-unchecked", "too-large", "unparsed", "too-deep", "fork-bomb", "disk-write", "sysrq",
	"write-etc", "write-ssh", "write-shell-rc", "write-netrc", "write-dotenv", "write-berth-config", "write-git-hooks", "write-git-config", "berth-env"}

// command checks one simple command.
func (s *scanner) command(argv []arg, io ioInfo, redir string) {
	if s.stopped && !s.wordByWord || len(argv) == 0 || s.halted {
		return
	}
	if s.cmdDepth >= maxCmdDepth {
		s.large(fmt.Sprintf("commands run by commands (wrappers such as time, sudo, env, find -exec) nested more than %d deep", maxCmdDepth))
		return
	}
	s.cmdDepth++
	defer func() { s.cmdDepth-- }()
	if !s.wordByWord {
		s.steps++
		if s.steps > maxCommands {
			// Past the bound the walk stops; the whole text is then read
			// word by word, which finds the floor commands of the rest.
			s.stopped = true
			s.add("too-deep", Clip(s.root), fmt.Sprintf("more than %d commands: berth read the rest word by word only", maxCommands))
			s.fallback(s.root)
			return
		}
	}
	seg := s.segment(argv, redir)
	s.record(seg)
	p := argv[0]
	if p.dyn && s.inFunc > 0 && p.node != nil && positionalWord(p.node) {
		// "$@" in the body of a function as it is defined: its words are
		// the arguments of a call, checked where it is called.
	} else if p.dyn {
		s.add("dynamic-command", seg, p.source())
		s.couldRunOnly(dynamicWho(p), argv[1:], io, seg, redir, nil, s.ifsTexts(argv))
	}
	if v, ok := p.lit(); ok && p.node != nil && splittable(p.node) && !s.ifsSet && s.ctx.IFS == nil && !plainName(v) {
		s.add("dynamic-command", seg, p.source()+": its words depend on IFS, which an earlier call may have set")
	}
	s.unknownPositional(argv, seg)
	done := map[string]bool{}
	for _, n := range p.vals {
		if n == "" || strings.Contains(n, unknownPart) {
			continue
		}
		if !strings.Contains(n, "/") && s.called(n, argv[1:], io, seg, redir) {
			continue
		}
		base := path.Base(n)
		if strings.Contains(n, "/") {
			if base = s.pathProgram(n, argv[1:], io, seg, redir); base == "" {
				continue // a script the command wrote: checked as its text
			}
		}
		if done[base] {
			continue
		}
		done[base] = true
		s.program(base, argv[1:], io, seg, redir)
	}
}

// program checks the program name run with args: a wrapper is seen
// through, anything else goes to its family's checker.
func (s *scanner) program(name string, args []arg, io ioInfo, seg, redir string) {
	if w, ok := s.unwrap(name, args); ok {
		if w.host != "" {
			defer s.enterRemote(&remoteCtx{host: w.host}, homeMark)()
		}
		for _, t := range w.writes {
			s.writeTarget(t, seg)
		}
		for _, v := range w.sets {
			s.setsVarWord(v, seg)
		}
		if w.script != nil {
			s.scriptArg(*w.script, seg)
		}
		if len(w.joined) > 0 {
			s.scriptArg(s.joinArgs(w.joined), seg)
		}
		if len(w.inner) > 0 {
			if w.xargs {
				io.xargs = true
			}
			s.command(w.inner, io, redir)
		}
		for _, t := range w.tries {
			s.command(t, io, redir)
		}
		if w.stdin {
			s.stdinCode(io, seg, true)
		}
		if w.shell != nil {
			s.shell(w.shell, io, seg)
		}
		return
	}
	if c, ok := lookupCheck(name); ok {
		if known := longOptions[name]; known != nil {
			args = expandLong(args, known)
		}
		c.fn(s, call{name: name, args: args, io: io, seg: seg, redir: redir})
	}
}

// longOptions are the long options of programs that, as GNU getopt does,
// take any unique prefix of one (rm --rec --fo / is rm --recursive
// --force /): their checks see the whole name.
var longOptions = map[string][]string{
	"rm":      {"force", "interactive", "one-file-system", "no-preserve-root", "preserve-root", "recursive", "dir", "verbose", "help", "version"},
	"chmod":   chLong,
	"chown":   append([]string{"from"}, chLong...),
	"chgrp":   chLong,
	"mv":      {"backup", "force", "interactive", "no-clobber", "strip-trailing-slashes", "suffix", "target-directory", "no-target-directory", "update", "verbose", "context", "exchange", "no-copy", "debug", "help", "version"},
	"shred":   {"force", "iterations", "random-source", "size", "remove", "verbose", "exact", "zero", "help", "version"},
	"wipefs":  {"all", "backup", "force", "no-act", "no-headings", "offset", "output", "parsable", "quiet", "types", "lock", "help", "version"},
	"sed":     {"quiet", "silent", "debug", "expression", "file", "follow-symlinks", "in-place", "line-length", "posix", "regexp-extended", "separate", "sandbox", "unbuffered", "null-data", "zero-terminated", "help", "version"},
	"tar":     {"remove-files", "recursion", "recursive-unlink"},
	"kill":    {"signal", "list", "table", "timeout", "queue", "verbose", "help", "version"},
	"pkill":   {"signal", "count", "delimiter", "full", "pgroup", "group", "ignore-ancestors", "ignore-case", "newest", "oldest", "older", "parent", "session", "terminal", "euid", "uid", "exact", "pidfile", "logpidfile", "runstates", "ns", "nslist", "cgroup", "env", "echo", "inverse", "require-handler", "help", "version"},
	"killall": {"exact", "ignore-case", "process-group", "interactive", "quiet", "regexp", "signal", "user", "verbose", "wait", "older-than", "younger-than", "ns", "context", "help", "version"},
}

var chLong = []string{"changes", "silent", "quiet", "verbose", "dereference", "no-dereference", "no-preserve-root", "preserve-root", "reference", "recursive", "help", "version"}

// expandLong rewrites each long option of args that is a unique prefix of
// one of known to its whole name (the =value kept); an exact name, an
// ambiguous prefix (which the program refuses) and anything after -- stay
// as written.
func expandLong(args []arg, known []string) []arg {
	out := args
	for i, a := range args {
		v, ok := a.lit()
		if !ok || !strings.HasPrefix(v, "--") {
			continue
		}
		if v == "--" {
			break
		}
		name, val, hasEq := strings.Cut(v[2:], "=")
		if name == "" || contains(known, name) {
			continue
		}
		full := ""
		for _, k := range known {
			if strings.HasPrefix(k, name) {
				if full != "" {
					full = ""
					break
				}
				full = k
			}
		}
		if full == "" {
			continue
		}
		if &out[0] == &args[0] {
			out = append([]arg(nil), args...)
		}
		w := "--" + full
		if hasEq {
			w += "=" + val
		}
		out[i] = arg{vals: []string{w}, src: a.src, node: a.node, text: a.text}
	}
	return out
}

// opts is a command line parsed GNU style.
type opts struct {
	short    map[byte]int
	shortArg map[byte][]arg
	long     map[string][]arg
	operands []arg
}

func (o *opts) has(c byte) bool { return o.short[c] > 0 }

func (o *opts) hasLong(n string) bool { _, ok := o.long[n]; return ok }

func (o *opts) val(c byte) (arg, bool) { v := o.shortArg[c]; return last(v) }

func (o *opts) longVal(n string) (arg, bool) {
	v := o.long[n]
	return last(v)
}

func last(v []arg) (arg, bool) {
	if len(v) == 0 {
		return arg{}, false
	}
	return v[len(v)-1], true
}

// suffix returns the part of a after its first n bytes (e.g. the value of
// --opt=value).
func suffix(a arg, n int) arg {
	out := arg{dyn: a.dyn, src: a.src, node: a.node, text: a.text}
	for _, v := range a.vals {
		if len(v) >= n {
			out.vals = append(out.vals, v[n:])
		}
	}
	if len(out.vals) == 0 {
		out.vals = []string{""}
	}
	return out
}

// parseOpts parses args: short options (clusters allowed) of which those in
// shortVal take a value (attached or next), long options of which those in
// longVal take a value when not given with '='. With permute, options may
// follow operands (GNU); without, the first operand ends the options (as
// for wrappers, whose operands are a command line).
func parseOpts(args []arg, shortVal string, longVal []string, permute bool) *opts {
	o := &opts{short: map[byte]int{}, shortArg: map[byte][]arg{}, long: map[string][]arg{}}
	ended := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		v := a.first()
		isOpt := !ended && len(v) > 1 && v[0] == '-'
		if !isOpt {
			if !permute {
				o.operands = append(o.operands, args[i:]...)
				return o
			}
			o.operands = append(o.operands, a)
			continue
		}
		if v == "--" {
			ended = true
			if !permute {
				o.operands = append(o.operands, args[i+1:]...)
				return o
			}
			continue
		}
		if strings.HasPrefix(v, "--") {
			name, _, hasEq := strings.Cut(v[2:], "=")
			val := arg{vals: []string{""}}
			if hasEq {
				val = suffix(a, len(name)+3)
			} else if contains(longVal, name) && i+1 < len(args) {
				i++
				val = args[i]
			}
			o.long[name] = append(o.long[name], val)
			continue
		}
		for j := 1; j < len(v); j++ {
			c := v[j]
			o.short[c]++
			if strings.IndexByte(shortVal, c) >= 0 {
				var val arg
				if j+1 < len(v) {
					val = suffix(a, j+1)
				} else if i+1 < len(args) {
					i++
					val = args[i]
				}
				o.shortArg[c] = append(o.shortArg[c], val)
				break
			}
		}
	}
	return o
}

// stripAssigns drops leading NAME=value words (env, sudo).
func stripAssigns(args []arg) []arg {
	_, rest := splitAssigns(args)
	return rest
}

// splitAssigns splits leading NAME=value words (env, sudo) from the
// command line after them.
func splitAssigns(args []arg) (assigns, rest []arg) {
	for i, a := range args {
		name, _, ok := strings.Cut(a.first(), "=")
		if !ok || !isName(name) {
			return args[:i], args[i:]
		}
	}
	return args, nil
}

func isName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9' {
			continue
		}
		return false
	}
	return true
}

// operandsOnly returns the words that do not start with '-'.
func operandsOnly(args []arg) []arg {
	var out []arg
	for _, a := range args {
		if !strings.HasPrefix(a.first(), "-") {
			out = append(out, a)
		}
	}
	return out
}

// deviceArg reports whether a names a device, or is not known before it
// runs (a formatting or wiping tool pointed at an unknown name is treated
// as pointed at a disk).
func (s *scanner) deviceArg(a arg) bool {
	if a.dyn {
		return true
	}
	for _, v := range a.vals {
		p, _ := s.resolvePath(v)
		if isDisk(p) || isDevicePath(p) {
			return true
		}
	}
	return false
}

// devices adds rule id when any of args names a device.
func (s *scanner) devices(args []arg, id, seg string) {
	for _, a := range args {
		if s.deviceArg(a) {
			at, located := s.targetsOf(a)
			s.addAt(id, seg, a.show(), at, located)
			return
		}
	}
}

// writeTarget checks a file a command writes.
func (s *scanner) writeTarget(a arg, seg string) {
	for _, v := range a.vals {
		if v == "" {
			continue
		}
		p, abs := s.resolvePath(v)
		r := s.lands(v)
		at, located := []string{r}, abs && !strings.HasPrefix(p, homeMark)
		if id := s.sensitiveWrite(p); id != "" {
			s.addAt(id, seg, p, at, located)
		}
		if r != p {
			if id := s.sensitiveWrite(r); id != "" {
				s.addAt(id, seg, p+" (a link to "+r+")", at, located)
			}
		}
	}
}

// innerName returns the program an argv runs, wrappers removed.
func (s *scanner) innerName(argv []arg) (string, []arg) {
	for range 8 {
		if len(argv) == 0 {
			return "", nil
		}
		name := path.Base(argv[0].first())
		w, ok := s.unwrap(name, argv[1:])
		if !ok || len(w.inner) == 0 {
			return name, argv
		}
		argv = w.inner
	}
	return "", nil
}

// ifsTexts returns the command as the shell could read it when its words
// hold unquoted $IFS or ${IFS}, which split them where they stand (with
// the default IFS, a blank): rm${IFS}-rf${IFS}/ is rm -rf /. Nil when none
// does.
func (s *scanner) ifsTexts(argv []arg) []string {
	var b strings.Builder
	found := false
	for i, a := range argv {
		if a.node == nil {
			return nil
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		for _, part := range a.node.Parts {
			if pe, ok := part.(*syntax.ParamExp); ok && isParam(pe, "IFS") {
				b.WriteByte(' ')
				found = true
				continue
			}
			from, to := int(part.Pos().Offset()), int(part.End().Offset())
			if from < 0 || from > to || to > len(a.text) {
				return nil
			}
			b.WriteString(a.text[from:to])
		}
	}
	if !found {
		return nil
	}
	return []string{b.String()}
}

// positionalWord reports whether w is only positional parameters ("$@",
// $1, "${2}", $*), quoted or not.
func positionalWord(w *syntax.Word) bool {
	ps := w.Parts
	if len(ps) == 1 {
		if dq, ok := ps[0].(*syntax.DblQuoted); ok {
			ps = dq.Parts
		}
	}
	if len(ps) == 0 {
		return false
	}
	for _, p := range ps {
		pe, ok := p.(*syntax.ParamExp)
		if !ok || pe.Param == nil || pe.Exp != nil || pe.Index != nil || pe.Slice != nil || pe.Repl != nil || pe.Length || pe.Excl {
			return false
		}
		if v := pe.Param.Value; v != "@" && v != "*" && !isDigits(v) {
			return false
		}
	}
	return true
}
