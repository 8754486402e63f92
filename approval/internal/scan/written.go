package scan

import (
	"encoding/base32"
	"encoding/base64"
	"path"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// What a command writes and then runs, in the same text, is checked as
// what it runs:
//
//   - a file it writes with known text (echo, printf or cat of a heredoc,
//     into > or >>) is a script when a shell or source reads it (bash
//     x.sh, . x.sh), when it runs it by its path (./x.sh), and a makefile
//     or crontab when make (-f FILE, or Makefile) or crontab reads it;
//   - a program it copies or links (cp /bin/rm ./r, ln -s /bin/rm r) is
//     that program when it runs the copy by its path;
//   - a program run by its path that berth does not know (./r) is checked
//     against the floor's path rules by what it could be (couldRun), as a
//     program only known at run time is: an unknown program given -rf /
//     is not let through.
//
// Text a pipeline makes from known text (echo, printf, cat of a heredoc,
// base64 -d, base32 -d, rev) is known too: base64 -d <<< cm0gLXJmIC8= |
// sh runs rm -rf /.

// pathFloor are the floor rules a program run by its path that berth does
// not know is checked against: those about paths, devices and signals
// (not power: "reboot" is an everyday argument of a script).
var pathFloor = map[string]bool{
	"rm-system-dir": true, "chmod-system-dir": true, "mv-system-dir": true, "no-preserve-root": true,
	"mkfs-device": true, "disk-wipe": true, "disk-write": true, "sysrq": true, "kill-all": true, "too-large": true,
}

// maxFiles bounds the files whose text a check keeps.
const maxFiles = 64

// wrote notes the text a statement writes into the file of redirection
// target a: known when the statement's output is (appended to what the
// file held, for >>), else unknown.
func (s *scanner) wrote(a arg, st *syntax.Stmt, up []*syntax.Stmt, appendTo bool) {
	v, ok := a.lit()
	if !ok || len(s.files) >= maxFiles {
		return
	}
	p, abs := s.resolvePath(v)
	if !abs {
		return
	}
	key := s.lands(p)
	stages := append(append([]*syntax.Stmt(nil), up...), &syntax.Stmt{Cmd: st.Cmd, Redirs: stdinRedirs(st.Redirs)})
	texts, known := s.pipeOutput(stages)
	if !known || len(texts) != 1 {
		s.files[key] = nil
		return
	}
	text := texts[0]
	if appendTo {
		prev, had := s.files[key]
		if had && prev == nil {
			return
		}
		if had {
			text = *prev + text
		}
	}
	s.files[key] = &text
}

// stdinRedirs are the redirections of a statement that feed its stdin.
func stdinRedirs(rs []*syntax.Redirect) []*syntax.Redirect {
	var out []*syntax.Redirect
	for _, r := range rs {
		switch r.Op {
		case syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc, syntax.RdrIn:
			if r.N == nil || r.N.Value == "0" {
				out = append(out, r)
			}
		}
	}
	return out
}

// fileText returns the text of a file the command wrote, by its name.
func (s *scanner) fileText(name string) (string, bool) {
	p, abs := s.resolvePath(name)
	if !abs {
		return "", false
	}
	t := s.files[s.lands(p)]
	if t == nil {
		return "", false
	}
	return *t, true
}

// copied notes what cp, install, ln or mv put at dest from source: a
// program (by the base name of where the source lands) runs as that
// program from there.
func (s *scanner) copied(source, dest arg, intoDir bool) {
	src, ok := source.lit()
	d, dok := dest.lit()
	if !ok || !dok || len(s.copies) >= maxFiles {
		return
	}
	prog := path.Base(src)
	if p, abs := s.resolvePath(src); abs {
		prog = path.Base(s.lands(p))
	}
	if _, known := lookupCheck(prog); !known && wrappers[prog] == nil {
		return
	}
	if intoDir {
		d = path.Join(d, path.Base(src))
	}
	if p, abs := s.resolvePath(d); abs {
		s.copies[p] = prog
	}
}

// pathProgram checks a program run by its path (n holds a slash): a
// script the command wrote, a program it copied, the program a link
// points to; or, when berth knows none of these, what it could run. It
// returns the name to check it as, "" when it was checked here.
func (s *scanner) pathProgram(n string, args []arg, io ioInfo, seg, redir string) string {
	if text, ok := s.fileText(n); ok {
		restore := s.positional(append([]arg{litArg(n)}, args...))
		s.script(text, seg)
		restore()
		return ""
	}
	p, abs := s.resolvePath(n)
	if abs {
		if prog, ok := s.copies[p]; ok {
			return prog
		}
		if landed := s.lands(p); landed != p {
			return path.Base(landed) // a link: the program it points to
		}
	}
	base := path.Base(n)
	if _, known := lookupCheck(base); known || wrappers[base] != nil || shells[base] {
		return base
	}
	s.couldRunOnly(n+" (a program berth does not know)", args, io, seg, redir, pathFloor, nil)
	return base
}

// maxDecoded bounds the text a decoding stage of a pipeline makes.
const maxDecoded = 1 << 20

// pipeOutput returns the candidate texts the last stage of a pipeline
// prints, when they are known before it runs: echo and printf of known
// words, cat of a heredoc or of the stages before it, and base64 -d,
// base32 -d and rev of known text.
func (s *scanner) pipeOutput(stages []*syntax.Stmt) ([]string, bool) {
	if len(stages) == 0 || len(stages) > 16 {
		return nil, false
	}
	last := stages[len(stages)-1]
	name, argv := s.stageCommand(last)
	if len(argv) == 0 {
		return nil, false
	}
	input := func() ([]string, bool) {
		for _, r := range last.Redirs {
			switch r.Op {
			case syntax.Hdoc, syntax.DashHdoc:
				if r.Hdoc == nil {
					return []string{""}, true
				}
				c := s.wordCands(r.Hdoc)
				return c.vals, !c.dyn
			case syntax.WordHdoc:
				c := s.cross(s.wordCands(r.Word), one("\n"))
				return c.vals, !c.dyn
			case syntax.RdrIn:
				if t, ok := s.fileText(s.word(r.Word).first()); ok {
					return []string{t}, true
				}
				return nil, false
			}
		}
		return s.pipeOutput(stages[:len(stages)-1])
	}
	switch name {
	case "printf":
		return literalOutputs(name, argv[1:])
	case "echo":
		texts, ok := literalOutputs(name, argv[1:])
		newline := true
		for _, a := range argv[1:] {
			v := a.first()
			if len(v) < 2 || v[0] != '-' || strings.Trim(v[1:], "neE") != "" {
				break
			}
			newline = newline && !strings.Contains(v, "n")
		}
		for i := range texts {
			if newline {
				texts[i] += "\n"
			}
		}
		return texts, ok
	case "cat":
		ops := operandsOnly(argv[1:])
		if len(ops) == 1 {
			if t, ok := s.fileText(ops[0].first()); ok {
				return []string{t}, true
			}
		}
		if len(ops) > 0 {
			return nil, false
		}
		return input()
	case "base64", "base32", "rev":
		decode := name == "rev"
		for _, a := range argv[1:] {
			if v := a.first(); v == "-d" || v == "--decode" || v == "-D" || strings.HasPrefix(v, "-") && !strings.HasPrefix(v, "--") && strings.Contains(v, "d") {
				decode = true
			}
		}
		if !decode {
			return nil, false
		}
		texts, ok := input()
		if !ok {
			return nil, false
		}
		var out []string
		for _, t := range texts {
			d, ok := decodeText(name, t)
			if !ok {
				return nil, false
			}
			out = append(out, d)
		}
		return out, true
	}
	return nil, false
}

// decodeText decodes t as base64 -d, base32 -d or rev would.
func decodeText(name, t string) (string, bool) {
	if len(t) > 2*maxDecoded {
		return "", false
	}
	clean := strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == ' ' || r == '\t' {
			return -1
		}
		return r
	}, t)
	switch name {
	case "base64":
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
			if b, err := enc.DecodeString(clean); err == nil {
				return string(b), true
			}
		}
	case "base32":
		for _, enc := range []*base32.Encoding{base32.StdEncoding, base32.StdEncoding.WithPadding(base32.NoPadding)} {
			if b, err := enc.DecodeString(clean); err == nil {
				return string(b), true
			}
		}
	case "rev":
		var b strings.Builder
		for _, line := range strings.SplitAfter(t, "\n") {
			nl := strings.HasSuffix(line, "\n")
			r := []rune(strings.TrimSuffix(line, "\n"))
			for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
				r[i], r[j] = r[j], r[i]
			}
			b.WriteString(string(r))
			if nl {
				b.WriteByte('\n')
			}
		}
		return b.String(), true
	}
	return "", false
}

// stdinText returns the candidate texts of a command's stdin when they
// are known: a heredoc or here-string, or a pipeline of known output.
func (s *scanner) stdinText(io ioInfo) ([]string, bool) {
	if io.stdinText != nil {
		if io.fed != nil {
			return io.fed.vals, !io.fed.dyn
		}
		return []string{*io.stdinText}, true
	}
	if len(io.up) > 0 {
		return s.pipeOutput(io.up)
	}
	return nil, false
}

// make checks make: the recipes of a makefile the command itself gives it
// (on stdin with -f -, or written in the same text) run as shell text.
func (s *scanner) make(c call) {
	o := parseOpts(c.args, "fCIjlEoOWe", []string{"file", "makefile", "directory", "include-dir", "jobs", "load-average", "old-file", "what-if", "assume-old", "assume-new", "eval", "output-sync"}, true)
	if o.has('C') || o.hasLong("directory") {
		return // another directory's makefile
	}
	files := append(append(append([]arg(nil), o.shortArg['f']...), o.long["file"]...), o.long["makefile"]...)
	var texts []string
	switch {
	case len(files) == 0:
		for _, n := range []string{"GNUmakefile", "makefile", "Makefile"} {
			if t, ok := s.fileText(n); ok {
				texts = append(texts, t)
				break
			}
		}
	default:
		for _, f := range files {
			if fd, isFd := fdPath(f.first()); isFd && fd == "0" {
				t, ok := s.stdinText(c.io)
				if !ok {
					if len(c.io.up) > 0 || c.io.stdinText != nil {
						s.add("shell-from-pipe", c.seg, "make reads its makefile from a pipe")
					}
					continue
				}
				texts = append(texts, t...)
			} else if t, ok := s.fileText(f.first()); ok {
				texts = append(texts, t)
			}
		}
	}
	for _, t := range texts {
		for _, line := range strings.Split(t, "\n") {
			if !strings.HasPrefix(line, "\t") {
				continue
			}
			line = strings.TrimLeft(strings.TrimPrefix(line, "\t"), "@-+ \t")
			s.script(strings.ReplaceAll(line, "$$", "$"), c.seg)
		}
	}
}

// crontab checks crontab: the commands of the table it installs (from
// stdin, or a file written in the same text) run later, unattended.
func (s *scanner) crontab(c call) {
	o := parseOpts(c.args, "us", nil, true)
	if o.has('l') || o.has('r') || o.has('e') || o.has('V') {
		return
	}
	var texts []string
	known := false
	switch {
	case len(o.operands) == 0 || o.operands[0].first() == "-":
		texts, known = s.stdinText(c.io)
	default:
		if t, ok := s.fileText(o.operands[0].first()); ok {
			texts, known = []string{t}, true
		}
	}
	if !known {
		s.add("dynamic-command", c.seg, "crontab installs commands berth cannot see")
		return
	}
	for _, t := range texts {
		for _, line := range strings.Split(t, "\n") {
			if cmd, ok := cronCommand(line); ok {
				s.script(cmd, c.seg)
			}
		}
	}
}

// cronCommand returns the command of a crontab line: after the five time
// fields, or after an @reboot-style one, and before an unescaped % (which
// starts its stdin).
func cronCommand(line string) (string, bool) {
	line = strings.TrimSpace(line)
	if line == "" || strings.HasPrefix(line, "#") {
		return "", false
	}
	fields := 5
	if strings.HasPrefix(line, "@") {
		fields = 1
	} else if name, _, ok := strings.Cut(line, "="); ok && isName(strings.TrimSpace(name)) {
		return "", false // a variable
	}
	rest := line
	for range fields {
		rest = strings.TrimLeft(rest, " \t")
		i := strings.IndexAny(rest, " \t")
		if i < 0 {
			return "", false
		}
		rest = rest[i:]
	}
	for i := 0; i < len(rest); i++ {
		if rest[i] == '\\' {
			i++
			continue
		}
		if rest[i] == '%' {
			rest = rest[:i]
			break
		}
	}
	return strings.TrimSpace(rest), true
}
