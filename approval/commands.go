package approval

import (
	"path"
	"strconv"
	"strings"

	"github.com/a55dbaac/berth/internal/shparse"
	"mvdan.cc/sh/v3/syntax"
)

// opts is a command line parsed GNU style.
type opts struct {
	short    map[byte]int
	shortArg map[byte][]arg
	long     map[string][]arg
	operands []arg
}

func (o *opts) has(c byte) bool        { return o.short[c] > 0 }
func (o *opts) hasLong(n string) bool  { _, ok := o.long[n]; return ok }
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
	for len(args) > 0 {
		v := args[0].first()
		name, _, ok := strings.Cut(v, "=")
		if !ok || !isName(name) {
			break
		}
		args = args[1:]
	}
	return args
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

// wrapped is what a wrapper (sudo, env, xargs ...) runs.
type wrapped struct {
	inner  []arg // the command it runs
	xargs  bool  // more arguments arrive at run time
	script *arg  // shell text it runs (su -c, flock -c, watch, ssh)
	writes []arg // files it writes (sudoedit)
}

// unwrap sees through a wrapper. ok is false when name is not one.
func (s *scanner) unwrap(name string, args []arg) (w wrapped, ok bool) {
	switch name {
	case "sudo":
		o := parseOpts(args, "ugpCDrtUTR", []string{"user", "group", "prompt", "close-from", "chdir", "role", "type", "other-user", "host", "command-timeout", "chroot"}, false)
		if o.has('e') || o.hasLong("edit") {
			return wrapped{writes: o.operands}, true
		}
		return wrapped{inner: stripAssigns(o.operands)}, true
	case "sudoedit":
		o := parseOpts(args, "ugpCDrtUTR", nil, true)
		return wrapped{writes: o.operands}, true
	case "doas":
		o := parseOpts(args, "uC", nil, false)
		return wrapped{inner: o.operands}, true
	case "pkexec":
		o := parseOpts(args, "", []string{"user"}, false)
		return wrapped{inner: o.operands}, true
	case "env":
		o := parseOpts(args, "uCSP", []string{"unset", "chdir", "split-string"}, false)
		inner := stripAssigns(o.operands)
		split, ok := o.val('S')
		if !ok {
			split, ok = o.longVal("split-string")
		}
		if ok {
			var pre []arg
			for _, f := range strings.Fields(split.first()) {
				pre = append(pre, litArg(f))
			}
			inner = append(stripAssigns(pre), inner...)
		}
		return wrapped{inner: inner}, true
	case "exec":
		return wrapped{inner: parseOpts(args, "a", nil, false).operands}, true
	case "nohup", "builtin", "nocorrect", "noglob", "unbuffer":
		if len(args) > 0 && args[0].first() == "--" {
			args = args[1:]
		}
		return wrapped{inner: args}, true
	case "setsid":
		return wrapped{inner: parseOpts(args, "", nil, false).operands}, true
	case "time":
		return wrapped{inner: parseOpts(args, "fo", []string{"format", "output"}, false).operands}, true
	case "nice":
		return wrapped{inner: parseOpts(args, "n", []string{"adjustment"}, false).operands}, true
	case "ionice":
		o := parseOpts(args, "cnpPu", []string{"class", "classdata", "pid", "pgid", "uid"}, false)
		if o.has('p') || o.has('P') || o.has('u') {
			return wrapped{}, true
		}
		return wrapped{inner: o.operands}, true
	case "timeout":
		o := parseOpts(args, "sk", []string{"signal", "kill-after"}, false)
		if len(o.operands) > 0 {
			return wrapped{inner: o.operands[1:]}, true
		}
		return wrapped{}, true
	case "busybox":
		if len(args) > 0 && strings.HasPrefix(args[0].first(), "-") {
			return wrapped{}, true
		}
		return wrapped{inner: args}, true
	case "command":
		o := parseOpts(args, "", nil, false)
		if o.has('v') || o.has('V') {
			return wrapped{}, true
		}
		return wrapped{inner: o.operands}, true
	case "xargs":
		o := parseOpts(args, "adEILnPs", []string{"arg-file", "delimiter", "max-args", "max-procs", "max-chars", "max-lines", "process-slot-var"}, false)
		inner := o.operands
		if len(inner) == 0 {
			inner = []arg{litArg("echo")}
		}
		return wrapped{inner: inner, xargs: true}, true
	case "chroot":
		o := parseOpts(args, "", []string{"userspec", "groups"}, false)
		if len(o.operands) > 1 {
			return wrapped{inner: o.operands[1:]}, true
		}
		return wrapped{}, true
	case "stdbuf":
		return wrapped{inner: parseOpts(args, "ioe", []string{"input", "output", "error"}, false).operands}, true
	case "caffeinate":
		return wrapped{inner: parseOpts(args, "tw", nil, false).operands}, true
	case "flock":
		o := parseOpts(args, "wEc", []string{"timeout", "conflict-exit-code", "command"}, false)
		if c, ok := o.val('c'); ok {
			return wrapped{script: &c}, true
		}
		if c, ok := o.longVal("command"); ok {
			return wrapped{script: &c}, true
		}
		if len(o.operands) > 1 {
			return wrapped{inner: o.operands[1:]}, true
		}
		return wrapped{}, true
	case "taskset":
		o := parseOpts(args, "", nil, false)
		if o.has('p') || o.hasLong("pid") || len(o.operands) < 2 {
			return wrapped{}, true
		}
		return wrapped{inner: o.operands[1:]}, true
	case "watch":
		o := parseOpts(args, "n", []string{"interval"}, false)
		if o.has('x') || o.hasLong("exec") {
			return wrapped{inner: o.operands}, true
		}
		if len(o.operands) == 0 {
			return wrapped{}, true
		}
		j := joinArgs(o.operands)
		return wrapped{script: &j}, true
	case "su", "runuser":
		o := parseOpts(args, "cgGsuw", []string{"command", "group", "supp-group", "shell", "whitelist-environment", "user"}, true)
		if c, ok := o.val('c'); ok {
			return wrapped{script: &c}, true
		}
		if c, ok := o.longVal("command"); ok {
			return wrapped{script: &c}, true
		}
		if name == "runuser" && (o.has('u') || o.hasLong("user")) {
			return wrapped{inner: o.operands}, true
		}
		return wrapped{}, true
	case "ssh":
		o := parseOpts(args, "BbcDEeFIiJLlmOopQRSWw", nil, false)
		if len(o.operands) > 1 {
			j := joinArgs(o.operands[1:])
			return wrapped{script: &j}, true
		}
		return wrapped{}, true
	}
	return wrapped{}, false
}

// joinArgs joins words with spaces, as ssh and eval do.
func joinArgs(as []arg) arg {
	out := one("")
	var src []string
	dyn := false
	for i, a := range as {
		if i > 0 {
			out = cross(out, one(" "))
		}
		out = cross(out, cands{vals: a.vals, dyn: a.dyn})
		src = append(src, a.source())
		dyn = dyn || a.dyn
	}
	j := arg{vals: out.vals, dyn: out.dyn || dyn, src: strings.Join(src, " ")}
	if len(as) == 1 {
		j.node = as[0].node
	}
	return j
}

var shells = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "mksh": true, "ash": true, "rbash": true, "yash": true, "posh": true, "fish": true, "tcsh": true, "csh": true}

var fetchers = map[string]bool{"curl": true, "wget": true, "fetch": true, "aria2c": true}

// command checks one simple command.
func (s *scanner) command(argv []arg, io ioInfo, redir string) {
	if s.stopped || len(argv) == 0 {
		return
	}
	s.steps++
	if s.steps > maxCommands {
		s.stopped = true
		s.add("too-deep", "", "more than 20000 commands")
		return
	}
	seg := s.segment(argv, redir)
	s.record(seg)
	p := argv[0]
	if p.dyn {
		s.add("dynamic-command", seg, p.source())
	}
	done := map[string]bool{}
	for _, n := range p.vals {
		if n == "" || strings.Contains(n, unknownPart) {
			continue
		}
		base := path.Base(n)
		if done[base] {
			continue
		}
		done[base] = true
		s.program(base, argv[1:], io, seg, redir)
	}
}

// program checks the program name run with args.
func (s *scanner) program(name string, args []arg, io ioInfo, seg, redir string) {
	if w, ok := s.unwrap(name, args); ok {
		for _, t := range w.writes {
			s.writeTarget(t, seg)
		}
		if w.script != nil {
			s.scriptArg(*w.script, seg)
		}
		if len(w.inner) > 0 {
			if w.xargs {
				io.xargs = true
			}
			s.command(w.inner, io, redir)
		}
		return
	}
	if shells[name] {
		s.shell(args, io, seg)
		return
	}
	if name == "perl" {
		s.perlInPlace(args, seg)
	}
	if isInterpreter(name) {
		s.interpreter(name, args, io, seg)
		return
	}
	switch {
	case name == "mkfs" || strings.HasPrefix(name, "mkfs.") || name == "mke2fs" || name == "mkswap" ||
		name == "mkdosfs" || name == "mkntfs" || name == "mkexfatfs" || name == "mkvfat":
		s.mkfs(args, seg)
		return
	}
	switch name {
	case "cd", "pushd":
		s.cd(args)
	case "eval":
		if len(args) > 0 {
			s.scriptArg(joinArgs(args), seg)
		}
	case "source", ".":
		if len(args) > 0 && s.fetches(args[0].node) {
			s.add("pipe-to-shell", seg, "")
		}
	case "alias":
		for _, a := range args {
			if _, val, ok := strings.Cut(a.first(), "="); ok {
				s.scriptArg(arg{vals: []string{val}, dyn: a.dyn, src: a.source()}, seg)
			}
		}
	case "trap":
		if len(args) > 1 {
			s.scriptArg(args[0], seg)
		}
	case "find":
		s.find(args, seg)
	case "rm", "unlink":
		s.rm(name, args, io, seg)
	case "chmod", "chown", "chgrp":
		s.chperm(name, args, seg)
	case "mv":
		s.mv(args, seg)
	case "cp", "install", "ln", "rsync":
		s.copyLike(name, args, seg)
	case "tee":
		for _, t := range parseOpts(args, "", nil, true).operands {
			s.writeTarget(t, seg)
		}
	case "truncate":
		for _, t := range parseOpts(args, "sr", []string{"size", "reference"}, true).operands {
			s.writeTarget(t, seg)
		}
	case "touch":
		for _, t := range parseOpts(args, "dtr", []string{"date", "reference", "time"}, true).operands {
			s.writeTarget(t, seg)
		}
	case "sed":
		s.sed(args, seg)
	case "curl", "wget":
		s.download(name, args, seg)
	case "tar", "unzip":
		s.extract(name, args, seg)
	case "dd":
		for _, a := range args {
			v := a.first()
			switch {
			case strings.HasPrefix(v, "of="):
				s.writeTarget(suffix(a, 3), seg)
			case strings.HasPrefix(v, "if="):
				s.add("dd-if", seg, v[3:])
			}
		}
	case "shred":
		for _, t := range parseOpts(args, "ns", []string{"iterations", "size", "random-source"}, true).operands {
			if s.deviceArg(t) {
				s.add("disk-wipe", seg, t.show())
			} else {
				s.writeTarget(t, seg)
			}
		}
	case "wipefs":
		o := parseOpts(args, "oOt", []string{"offset", "output", "types", "backup"}, true)
		if (o.has('a') || o.hasLong("all") || o.has('o') || o.hasLong("offset")) && !o.has('n') && !o.hasLong("no-act") {
			s.devices(o.operands, "disk-wipe", seg)
		}
	case "sgdisk":
		zap := false
		for _, a := range args {
			v := a.first()
			if v == "--zap-all" || v == "--zap" || v == "--clear" {
				zap = true
			}
			if len(v) > 1 && v[0] == '-' && v[1] != '-' && strings.Trim(v[1:], "Zzo") == "" {
				zap = true
			}
		}
		if zap {
			s.devices(operandsOnly(args), "disk-wipe", seg)
		}
	case "blkdiscard":
		s.devices(parseOpts(args, "olps", []string{"offset", "length", "step"}, true).operands, "disk-wipe", seg)
	case "parted":
		for _, a := range args {
			switch strings.ToLower(a.first()) {
			case "mklabel", "mktable", "rm", "mkpart", "resizepart":
				s.devices(operandsOnly(args), "disk-wipe", seg)
				return
			}
		}
	case "sfdisk", "fdisk":
		for _, a := range args {
			switch a.first() {
			case "-l", "--list", "-d", "--dump", "-V", "--verify", "-s", "--show-size", "-g", "--show-geometry", "-J", "--json", "-h", "--help":
				return
			}
		}
		if name == "fdisk" && io.stdinText == nil && len(io.up) == 0 && !io.stdinFile {
			return // interactive: the agent's stdin is empty
		}
		s.devices(operandsOnly(args), "disk-wipe", seg)
	case "kill":
		s.kill(args, seg)
	case "killall5":
		s.add("kill-all", seg, "")
	case "pkill", "killall":
		if sigKill(args) {
			s.add("kill-9-by-name", seg, "")
		}
	case "shutdown", "reboot", "halt", "poweroff":
		for _, a := range args {
			switch a.first() {
			case "--help", "--version", "-c":
				return
			case "-k", "-w", "--wtmp-only":
				return
			}
		}
		s.add("power", seg, name)
	case "init", "telinit":
		if len(args) > 0 {
			switch args[0].first() {
			case "0", "1", "6", "s", "S", "single", "halt":
				s.add("power", seg, name+" "+args[0].first())
			}
		}
	case "systemctl":
		s.systemctl(args, seg)
	case "service":
		if len(args) >= 2 {
			switch args[1].first() {
			case "stop", "disable", "mask":
				s.add("systemctl-stop", seg, args[0].show())
			}
		}
	case "git":
		s.git(args, seg)
	case "psql", "mysql", "mariadb", "sqlite3":
		s.sql(name, args, io, seg)
	}
}

// perlInPlace checks perl -i: the files it edits are writes.
func (s *scanner) perlInPlace(args []arg, seg string) {
	o := parseOpts(args, "eEIMmlx", nil, true)
	if !o.has('i') {
		return
	}
	files := o.operands
	if !o.has('e') && !o.has('E') && len(files) > 0 {
		files = files[1:]
	}
	for _, f := range files {
		s.writeTarget(f, seg)
	}
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
			s.add(id, seg, a.show())
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
		p, _ := s.resolvePath(v)
		if id := s.sensitiveWrite(p); id != "" {
			s.add(id, seg, p)
		}
	}
}

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
	if err != nil {
		s.add("dynamic-command", seg, a.source())
		return
	}
	syntax.Walk(f, func(n syntax.Node) bool {
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
	syntax.Walk(n, func(m syntax.Node) bool {
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
	return clip(strings.Join(append(parts, seg), " | "))
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
		if s.fetches(operands[0].node) {
			s.add("pipe-to-shell", seg, "")
		}
	default:
		s.stdinCode(io, seg, true)
	}
}

// positional sets $0, $1 ... $@ for the text of sh -c TEXT NAME ARGS...,
// and returns a function that restores the previous values.
func (s *scanner) positional(args []arg) func() {
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
		text, ok := literalOutput(name, argv[1:])
		if ok {
			s.script(text, seg)
			return
		}
	case "cat":
		if len(operandsOnly(argv[1:])) > 0 {
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
	s.add("shell-from-pipe", s.pipeSeg(io.up, seg), name)
}

// literalOutput returns what echo or printf prints when every word is known.
func literalOutput(name string, args []arg) (string, bool) {
	var lits []string
	for _, a := range args {
		v, ok := a.lit()
		if !ok {
			return "", false
		}
		lits = append(lits, v)
	}
	if name == "printf" {
		if len(lits) == 0 {
			return "", false
		}
		f := strings.ReplaceAll(lits[0], `\n`, "\n")
		if strings.Contains(f, "%") {
			if f == "%s\n" || f == "%s" {
				return strings.Join(lits[1:], "\n"), true
			}
			return "", false
		}
		return f, true
	}
	for len(lits) > 0 && (lits[0] == "-n" || lits[0] == "-e" || lits[0] == "-E") {
		lits = lits[1:]
	}
	return strings.Join(lits, " "), true
}

// isInterpreter reports whether name runs programs in another language.
func isInterpreter(name string) bool {
	switch name {
	case "python", "python2", "python3", "pypy", "pypy3", "perl", "ruby", "node", "nodejs", "php", "lua", "deno", "bun":
		return true
	}
	return strings.HasPrefix(name, "python3.") || strings.HasPrefix(name, "python2.")
}

// interpreter checks an interpreter that may run code piped from the
// network.
func (s *scanner) interpreter(name string, args []arg, io ioInfo, seg string) {
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

// cd follows the working directory through the command.
func (s *scanner) cd(args []arg) {
	o := parseOpts(args, "", nil, false)
	if len(o.operands) == 0 {
		if s.ctx.Home != "" {
			s.cwd = path.Clean(s.ctx.Home)
		} else {
			s.cwd = homeMark
		}
		return
	}
	v, ok := o.operands[0].lit()
	if !ok || v == "-" || strings.HasPrefix(v, "+") {
		s.cwd = ""
		return
	}
	p, abs := s.resolvePath(v)
	if !abs {
		s.cwd = ""
		return
	}
	s.cwd = p
}

// rm checks rm and unlink.
func (s *scanner) rm(name string, args []arg, io ioInfo, seg string) {
	o := parseOpts(args, "", nil, true)
	rec := o.has('r') || o.has('R') || o.hasLong("recursive")
	if o.hasLong("no-preserve-root") {
		s.add("no-preserve-root", seg, "")
	}
	routine := len(o.operands) > 0 && !io.xargs
	for _, t := range o.operands {
		lit, isLit := t.lit()
		if !isLit {
			routine = false
		}
		for _, v := range t.vals {
			if v == "" {
				continue
			}
			p, abs := s.resolvePath(v)
			if rec && abs && s.isFloorTree(p) {
				s.add("rm-system-dir", seg, p)
			}
			if id := s.sensitiveWrite(p); id != "" && mustRule(id).Level == Dangerous {
				s.add(id, seg, p)
			}
			if isLit && !s.routineRemoval(lit, p) {
				routine = false
			}
		}
	}
	if rec && !routine {
		s.add("rm-recursive", seg, "")
	}
	if io.xargs && name == "rm" {
		s.add("xargs-rm", seg, "")
	}
}

// chperm checks chmod, chown and chgrp.
func (s *scanner) chperm(name string, args []arg, seg string) {
	rec, noPreserve, reference := false, false, false
	var operands []arg
	ended := false
	for _, a := range args {
		v := a.first()
		switch {
		case ended:
			operands = append(operands, a)
		case v == "--":
			ended = true
		case strings.HasPrefix(v, "--"):
			switch {
			case v == "--recursive":
				rec = true
			case v == "--no-preserve-root":
				noPreserve = true
			case strings.HasPrefix(v, "--reference"):
				reference = true
			}
		case len(v) > 1 && v[0] == '-' && (name != "chmod" || strings.Trim(v[1:], "cfvRhHLP") == ""):
			if strings.Contains(v, "R") {
				rec = true
			}
		default:
			operands = append(operands, a)
		}
	}
	if noPreserve {
		s.add("no-preserve-root", seg, "")
	}
	var spec arg
	targets := operands
	if !reference && len(operands) > 0 {
		spec, targets = operands[0], operands[1:]
	}
	if rec {
		for _, t := range targets {
			for _, v := range t.vals {
				if p, abs := s.resolvePath(v); abs && s.isFloorTree(p) {
					s.add("chmod-system-dir", seg, p)
				}
			}
		}
	}
	switch name {
	case "chmod":
		if !reference && worldWritable(spec.first()) {
			s.add("chmod-world-writable", seg, spec.first())
		}
		if rec {
			s.add("chmod-recursive", seg, "")
		}
	case "chown":
		owner := spec.first()
		if i := strings.IndexAny(owner, ":."); i >= 0 {
			owner = owner[:i]
		}
		if rec && !reference && (owner == "root" || owner == "0") {
			s.add("chown-recursive-root", seg, spec.first())
		}
	}
}

// worldWritable reports whether a chmod mode gives others write access.
func worldWritable(mode string) bool {
	if mode == "" {
		return false
	}
	if strings.Trim(mode, "01234567") == "" {
		return len(mode) >= 3 && (mode[len(mode)-1]-'0')&2 != 0
	}
	for _, clause := range strings.Split(mode, ",") {
		who := strings.TrimLeft(clause, "ugoa")
		whoPart := clause[:len(clause)-len(who)]
		if !strings.ContainsAny(whoPart, "oa") {
			continue
		}
		// who is now ops and perms: [+-=]perms...
		op := byte(0)
		for i := 0; i < len(who); i++ {
			c := who[i]
			switch {
			case c == '+' || c == '-' || c == '=':
				op = c
			case c == 'w' && (op == '+' || op == '='):
				return true
			}
		}
	}
	return false
}

// mv checks mv: moving a system directory away is on the floor; its sources
// and destination are writes.
func (s *scanner) mv(args []arg, seg string) {
	o := parseOpts(args, "tS", []string{"target-directory", "suffix"}, true)
	sources := o.operands
	var dest []arg
	if t, ok := o.val('t'); ok {
		dest = []arg{t}
	} else if t, ok := o.longVal("target-directory"); ok {
		dest = []arg{t}
	} else if len(sources) >= 2 {
		dest = sources[len(sources)-1:]
		sources = sources[:len(sources)-1]
	}
	for _, src := range sources {
		for _, v := range src.vals {
			if p, abs := s.resolvePath(v); abs && s.isFloorTree(p) {
				s.add("mv-system-dir", seg, p)
			}
		}
		s.writeTarget(src, seg)
	}
	for _, d := range dest {
		s.writeTarget(d, seg)
		s.intoDir(d, sources, seg)
	}
}

// intoDir checks dest/base(source) for each source, for copies into a
// directory (cp .bashrc ~).
func (s *scanner) intoDir(dest arg, sources []arg, seg string) {
	for _, src := range sources {
		b := path.Base(src.first())
		if b == "" || b == "." || b == "/" {
			continue
		}
		for _, v := range dest.vals {
			if v != "" {
				s.writeTarget(litArg(strings.TrimSuffix(v, "/")+"/"+b), seg)
			}
		}
	}
}

// copyLike checks cp, install, ln and rsync destinations.
func (s *scanner) copyLike(name string, args []arg, seg string) {
	shortVal := "tS"
	if name == "install" {
		shortVal = "tSmog"
	}
	if name == "rsync" {
		shortVal = "eTfB"
	}
	o := parseOpts(args, shortVal, []string{"target-directory", "suffix", "mode", "owner", "group", "rsh", "temp-dir", "filter", "exclude", "include", "files-from", "backup-dir", "partial-dir"}, true)
	if name == "install" && o.has('d') {
		for _, t := range o.operands {
			s.writeTarget(t, seg)
		}
		return
	}
	sources := o.operands
	var dest arg
	if t, ok := o.val('t'); ok && name != "rsync" {
		dest = t
	} else if t, ok := o.longVal("target-directory"); ok {
		dest = t
	} else if len(sources) >= 2 {
		dest = sources[len(sources)-1]
		sources = sources[:len(sources)-1]
	} else {
		return
	}
	if name == "rsync" && strings.Contains(dest.first(), ":") {
		return // remote destination
	}
	s.writeTarget(dest, seg)
	s.intoDir(dest, sources, seg)
}

// sed checks sed -i: the files it edits are writes.
func (s *scanner) sed(args []arg, seg string) {
	inPlace, scriptGiven := false, false
	var operands []arg
	for i := 0; i < len(args); i++ {
		v := args[i].first()
		switch {
		case v == "--in-place" || strings.HasPrefix(v, "--in-place="):
			inPlace = true
		case v == "--expression" || v == "--file":
			scriptGiven = true
			i++
		case strings.HasPrefix(v, "--expression=") || strings.HasPrefix(v, "--file="):
			scriptGiven = true
		case strings.HasPrefix(v, "--"):
		case len(v) > 1 && v[0] == '-':
		cluster:
			for j := 1; j < len(v); j++ {
				switch v[j] {
				case 'i':
					inPlace = true
					break cluster
				case 'e', 'f':
					scriptGiven = true
					if j == len(v)-1 {
						i++
					}
					break cluster
				case 'l':
					if j == len(v)-1 {
						i++
					}
					break cluster
				}
			}
		default:
			operands = append(operands, args[i])
		}
	}
	if !inPlace {
		return
	}
	if !scriptGiven && len(operands) > 0 {
		operands = operands[1:]
	}
	for _, f := range operands {
		s.writeTarget(f, seg)
	}
}

// download checks where curl and wget write.
func (s *scanner) download(name string, args []arg, seg string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		v := a.first()
		next := func() {
			if i+1 < len(args) {
				i++
				if args[i].first() != "-" {
					s.writeTarget(args[i], seg)
				}
			}
		}
		switch name {
		case "curl":
			switch {
			case v == "--output":
				next()
			case strings.HasPrefix(v, "--output="):
				s.writeTarget(suffix(a, len("--output=")), seg)
			case len(v) > 1 && v[0] == '-' && v[1] != '-' && strings.HasSuffix(v, "o"):
				next()
			case strings.HasPrefix(v, "-o") && len(v) > 2:
				s.writeTarget(suffix(a, 2), seg)
			}
		case "wget":
			switch {
			case v == "-O" || v == "--output-document" || v == "-P" || v == "--directory-prefix":
				next()
			case strings.HasPrefix(v, "--output-document=") || strings.HasPrefix(v, "--directory-prefix="):
				_, val, _ := strings.Cut(v, "=")
				if val != "-" {
					s.writeTarget(suffix(a, len(v)-len(val)), seg)
				}
			case (strings.HasPrefix(v, "-O") || strings.HasPrefix(v, "-P")) && len(v) > 2 && v != "-O-":
				s.writeTarget(suffix(a, 2), seg)
			}
		}
	}
}

// extract checks where tar -x and unzip put files.
func (s *scanner) extract(name string, args []arg, seg string) {
	var dir *arg
	extracting := name == "unzip"
	for i := 0; i < len(args); i++ {
		a := args[i]
		v := a.first()
		switch {
		case name == "tar" && i == 0 && !strings.HasPrefix(v, "-") && strings.Contains(v, "x"):
			extracting = true
		case name == "tar" && (v == "--extract" || v == "--get"):
			extracting = true
		case name == "tar" && (v == "-C" || v == "--directory") && i+1 < len(args):
			i++
			dir = &args[i]
		case name == "tar" && strings.HasPrefix(v, "--directory="):
			d := suffix(a, len("--directory="))
			dir = &d
		case name == "unzip" && v == "-d" && i+1 < len(args):
			i++
			dir = &args[i]
		case name == "tar" && len(v) > 1 && v[0] == '-' && v[1] != '-' && strings.Contains(v, "x"):
			extracting = true
		}
	}
	if !extracting {
		return
	}
	if dir == nil {
		d := litArg(".")
		dir = &d
	}
	s.writeTarget(*dir, seg)
}

// mkfs checks the formatting tools: a device (or a name only known at run
// time) as target is on the floor; an image file is fine.
func (s *scanner) mkfs(args []arg, seg string) {
	valued := map[string]bool{"-L": true, "-n": true, "-U": true, "-t": true, "-T": true, "-O": true, "-E": true,
		"-b": true, "-N": true, "-I": true, "-m": true, "-d": true, "-l": true, "-r": true, "-s": true, "-i": true,
		"-C": true, "-g": true, "-G": true, "-e": true, "-o": true, "--label": true, "--type": true}
	for i := 0; i < len(args); i++ {
		a := args[i]
		v := a.first()
		if valued[v] {
			if i+1 < len(args) && s.deviceArg(args[i+1]) && !args[i+1].dyn {
				s.add("mkfs-device", seg, args[i+1].show())
				return
			}
			i++
			continue
		}
		if strings.HasPrefix(v, "-") && !a.dyn {
			continue
		}
		if s.deviceArg(a) {
			s.add("mkfs-device", seg, a.show())
			return
		}
	}
}

// kill checks for pid -1 (every process).
func (s *scanner) kill(args []arg, seg string) {
	i := 0
	sigSeen := false
	for i < len(args) {
		v := args[i].first()
		switch {
		case v == "--":
			i++
		case v == "-l" || v == "-L" || v == "--list" || v == "--table":
			return
		case !sigSeen && (v == "-s" || v == "-n" || v == "--signal"):
			sigSeen = true
			i += 2
			continue
		case !sigSeen && len(v) > 1 && v[0] == '-':
			sigSeen = true
			i++
			continue
		}
		break
	}
	for ; i < len(args); i++ {
		for _, v := range args[i].vals {
			if v == "-1" {
				s.add("kill-all", seg, "-1")
				return
			}
		}
	}
}

// sigKill reports whether pkill/killall args choose SIGKILL.
func sigKill(args []arg) bool {
	isKill := func(v string) bool {
		v = strings.ToUpper(strings.TrimPrefix(v, "SIG"))
		v = strings.TrimPrefix(v, "SIG")
		return v == "9" || v == "KILL"
	}
	for i, a := range args {
		v := a.first()
		switch {
		case v == "-9" || strings.EqualFold(v, "-KILL") || strings.EqualFold(v, "-SIGKILL"):
			return true
		case (v == "-s" || v == "--signal") && i+1 < len(args) && isKill(strings.ToUpper(args[i+1].first())):
			return true
		case strings.HasPrefix(v, "--signal=") && isKill(strings.ToUpper(v[len("--signal="):])):
			return true
		case strings.HasPrefix(v, "-s") && len(v) > 2 && isKill(strings.ToUpper(v[2:])):
			return true
		}
	}
	return false
}

// systemctl checks systemctl verbs.
func (s *scanner) systemctl(args []arg, seg string) {
	o := parseOpts(args, "HMtspnoP", []string{"host", "machine", "type", "signal", "property", "lines", "output",
		"job-mode", "kill-whom", "kill-value", "root", "image", "what", "boot-loader-menu", "boot-loader-entry",
		"reboot-argument", "timestamp", "check-inhibitors", "preset-mode", "message", "when", "state"}, true)
	if len(o.operands) == 0 {
		return
	}
	verb := o.operands[0].first()
	switch verb {
	case "poweroff", "reboot", "halt", "kexec", "emergency", "rescue", "soft-reboot", "suspend", "hibernate", "hybrid-sleep", "suspend-then-hibernate":
		s.add("power", seg, "systemctl "+verb)
	case "isolate", "start":
		for _, u := range o.operands[1:] {
			switch strings.TrimSuffix(u.first(), ".target") {
			case "poweroff", "reboot", "halt", "kexec", "rescue", "emergency", "runlevel0", "runlevel6", "runlevel1":
				s.add("power", seg, "systemctl "+verb+" "+u.first())
			}
		}
	case "stop", "disable", "mask", "kill":
		s.add("systemctl-stop", seg, verb)
	}
}

// git checks destructive git subcommands.
func (s *scanner) git(args []arg, seg string) {
	i := 0
	for ; i < len(args); i++ {
		v := args[i].first()
		switch v {
		case "-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env", "--exec-path":
			i++
			continue
		}
		if strings.HasPrefix(v, "-") {
			continue
		}
		break
	}
	if i >= len(args) {
		return
	}
	sub := args[i].first()
	rest := args[i+1:]
	short := func(c string) bool {
		for _, a := range rest {
			v := a.first()
			if v == "--" {
				return false
			}
			if len(v) > 1 && v[0] == '-' && v[1] != '-' && strings.Contains(v[1:], c) {
				return true
			}
		}
		return false
	}
	long := func(names ...string) bool {
		for _, a := range rest {
			v := a.first()
			for _, n := range names {
				if v == n || strings.HasPrefix(v, n+"=") {
					return true
				}
			}
		}
		return false
	}
	switch sub {
	case "reset":
		if long("--hard") {
			s.add("git-reset-hard", seg, "")
		}
	case "clean":
		if (short("f") || long("--force")) && !short("n") && !long("--dry-run") {
			s.add("git-clean-force", seg, "")
		}
	case "push":
		force := short("f") || long("--force", "--force-with-lease", "--mirror")
		for _, a := range rest {
			if strings.HasPrefix(a.first(), "+") {
				force = true
			}
		}
		if force {
			s.add("git-push-force", seg, "")
		}
	case "branch":
		if short("D") || (short("d") || long("--delete")) && (short("f") || long("--force")) {
			s.add("git-branch-force-delete", seg, "")
		}
	}
}

// sql checks the SQL given to psql, mysql/mariadb and sqlite3 on the
// command line or on stdin.
func (s *scanner) sql(name string, args []arg, io ioInfo, seg string) {
	var texts []string
	add := func(a arg) { texts = append(texts, a.vals...) }
	switch name {
	case "psql", "mysql", "mariadb":
		flag, long := "-c", "--command"
		if name != "psql" {
			flag, long = "-e", "--execute"
		}
		for i := 0; i < len(args); i++ {
			v := args[i].first()
			switch {
			case (v == flag || v == long) && i+1 < len(args):
				i++
				add(args[i])
			case strings.HasPrefix(v, long+"="):
				add(suffix(args[i], len(long)+1))
			case strings.HasPrefix(v, flag) && len(v) > 2:
				add(suffix(args[i], 2))
			}
		}
	case "sqlite3":
		valued := map[string]bool{"-cmd": true, "-separator": true, "-newline": true, "-nullvalue": true, "-init": true,
			"-vfs": true, "-maxsize": true, "-mmap": true, "-pagecache": true, "-lookaside": true, "-heap": true, "-A": true}
		db := false
		for i := 0; i < len(args); i++ {
			v := args[i].first()
			switch {
			case v == "-cmd" && i+1 < len(args):
				i++
				add(args[i])
			case valued[v]:
				i++
			case strings.HasPrefix(v, "-"):
			case !db:
				db = true
			default:
				add(args[i])
			}
		}
	}
	if io.stdinText != nil {
		texts = append(texts, *io.stdinText)
	} else if len(io.up) > 0 {
		if n, argv := s.stageCommand(io.up[len(io.up)-1]); n == "echo" || n == "printf" {
			if t, ok := literalOutput(n, argv[1:]); ok {
				texts = append(texts, t)
			}
		}
	}
	for _, t := range texts {
		if stmt := destructiveSQL(t); stmt != "" {
			s.add("sql-destructive", seg, stmt)
			return
		}
	}
}

// find checks -delete and -exec rm, and checks the -exec command itself.
func (s *scanner) find(args []arg, seg string) {
	for i := 0; i < len(args); i++ {
		switch args[i].first() {
		case "-delete":
			s.add("find-delete", seg, "-delete")
		case "-exec", "-execdir", "-ok", "-okdir":
			j := i + 1
			for j < len(args) && args[j].first() != ";" && args[j].first() != "+" {
				j++
			}
			inner := args[i+1 : j]
			if len(inner) > 0 {
				name, _ := s.innerName(inner)
				if name == "rm" || name == "shred" || name == "unlink" {
					s.add("find-delete", seg, "-exec "+name)
				}
				s.command(inner, ioInfo{}, "")
			}
			i = j
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
