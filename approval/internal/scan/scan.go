package scan

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/a55dbaac/berth/internal/shparse"
	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
)

// Limits that keep a hostile command from making the checker slow, deep
// or large. The work of one check is linear in the length of the command:
// past a budget the command is too-large (on the floor), never let through
// unchecked.
const (
	maxDepth      = 6     // nested sh -c / eval / heredoc-to-shell levels
	maxCands      = 32    // candidate values of one word
	maxCommands   = 20000 // simple commands examined per check
	maxCmdDepth   = 128   // simple commands checked one inside another (wrappers, find -exec, xargs ...)
	maxPieceWords = 4096  // words of one piece the fallback reads
)

// budget sets what a check of a command of n bytes and e words and
// operators may spend: text parsed or read word by word (the command
// itself, the text of sh -c and eval, heredocs fed to a shell), elements
// parsed, nodes walked (function bodies are walked again where they are
// called; fork bombs, fetches and pid lists look inside subtrees), and
// bytes of values made by joining known parts. A value is never cut (a
// script longer than any fixed cap would hide its end), and X=$X$X
// doubling runs out of the budget at once. Every budget grows with the
// command, from a floor no ordinary command comes near.
func (s *scanner) budget(n, e int) {
	s.textLeft = 3*n + 1<<20
	s.elemsLeft = 3*e + 1<<16
	s.nodesLeft = 16*e + 1<<18
	s.valuesLeft = 4*n + 1<<20
}

// Finding is one rule that matched one simple command.
type Finding struct {
	// Rule is the rule that matched.
	Rule Rule
	// Command is the simple command it matched, normalized: wrappers such as
	// sudo or env removed, the program by its base name, quotes resolved,
	// words joined by single spaces, output redirections appended
	// ("git push --force", "tee -a /etc/hosts", "echo x > /etc/motd").
	// File-tool writes read "write_file <path>".
	Command string
	// Detail names what made it match, e.g. the path "/usr".
	Detail string
	// Targets are the absolute paths (links followed) the finding's action
	// writes, removes or changes, when all of them are known (Located):
	// under workspace confinement the kernel refuses those outside the
	// writable trees. A finding about what a command sends to another
	// host is never Located: the local kernel does not confine it.
	Targets []string `json:"-"`
	Located bool     `json:"-"`
	// Could is what a command whose program berth cannot see could run,
	// when that is what matched (x -rf / with x an alias of an earlier
	// call could run rm -rf /).
	Could string `json:"-"`
	// Remote names the other host (or container) the command runs the
	// matched command on, "" for this environment: confinement of the
	// environment never relaxes such a finding.
	Remote string `json:"-"`
}

// arg is one shell word after expansion as far as it can be done before
// the command runs.
type arg struct {
	vals []string     // candidate values; unknown parts substituted
	dyn  bool         // some part is only known at run time
	src  string       // the word as written (for display), if already known
	node *syntax.Word // nil for words the fallback lexer made
	text string       // the source node was parsed from
}

// lit returns the word's value when it is fully known.
func (a arg) lit() (string, bool) {
	if !a.dyn && len(a.vals) == 1 {
		return a.vals[0], true
	}
	return "", false
}

// first returns the first candidate value.
func (a arg) first() string {
	if len(a.vals) == 0 {
		return ""
	}
	return a.vals[0]
}

// show returns the word for a normalized command: its value when known,
// else its source.
func (a arg) show() string {
	if v, ok := a.lit(); ok {
		return v
	}
	return a.source()
}

// source returns the word as written (printed from the syntax tree only
// when asked for: printing every word of a deeply nested command would be
// quadratic).
func (a arg) source() string {
	if a.src != "" || a.node == nil {
		return a.src
	}
	from, to := int(a.node.Pos().Offset()), int(a.node.End().Offset())
	if from >= 0 && from <= to && to <= len(a.text) {
		return a.text[from:to]
	}
	return printWord(a.node)
}

// litArg makes a known word.
func litArg(v string) arg { return arg{vals: []string{v}, src: v} }

// cands is a set of candidate values.
type cands struct {
	vals []string
	dyn  bool
}

func one(v string) cands { return cands{vals: []string{v}} }

var unknown = cands{vals: []string{""}, dyn: true}

// ioInfo is what a simple command reads on stdin and how it was started.
type ioInfo struct {
	up           []*syntax.Stmt // earlier stages of its pipeline, or the statements of a <(...) it reads
	stdinText    *string        // heredoc or here-string body
	stdinFile    bool           // stdin redirected from a file
	stdinUnknown bool           // stdin is a descriptor whose content is not known (<&3)
	xargs        bool           // run by xargs or find -exec: more arguments arrive at run time
	fed          *cands         // the text on stdin, when known before the run (read, mapfile)
}

// scanner walks one command and collects findings.
type scanner struct {
	ctx        Context
	cwd        string
	vars       map[string]cands
	upstream   map[*syntax.Stmt][]*syntax.Stmt
	findings   []Finding
	seen       map[string]bool
	segments   []string
	segSeen    map[string]bool
	depth      int
	steps      int
	substDepth int    // nested $(...) being resolved
	text       string // the source being walked
	stopped    bool
	wordByWord bool   // the fallback is checking text word by word
	root       string // the whole command
	pos        []arg  // the positional parameters ("$@"), when posKnown
	posKnown   bool   // set --, sh -c ... ARGS, or a function call bound them
	inFunc     int    // walking the body of a function definition
	funcs      map[string]*syntax.FuncDecl
	funcText   map[*syntax.FuncDecl]string // the text each function was parsed from
	silent     bool                        // walking Context.Prelude: effects only
	aliases    map[string]string           // aliases defined in the text, name to value
	calling    map[string]bool             // functions being inlined (no recursion)
	fds        map[string]fdSource
	ifsSet     bool              // IFS is assigned in the text
	links      map[string]string // paths followed through their links (Context.Resolve)
	made       map[string]string // links the command makes (ln -s), link to target
	forwarding int               // dynamic commands being checked by what they could run (couldRun)
	cloned     int               // variables copied for couldRun's candidates
	candWork   int               // arguments given to couldRun's candidates, over the check
	callIFS    *cands            // IFS as the command being checked sees it, when it assigns it (IFS=: read ...)
	// What the check may still spend (see the limits above); halted is
	// set when one ran out: the command is too-large and nothing more is
	// read.
	cmdDepth   int
	textLeft   int
	elemsLeft  int
	valuesLeft int
	nodesLeft  int
	halted     bool
	pieceSeen  map[string]bool    // pieces the fallback already read
	remote     *remoteCtx         // the other host or container being checked, nil for this environment
	arrays     map[string][]arg   // arrays whose elements are known (c=(a b), read -a, mapfile)
	files      map[string]*string // files the command writes, by where they land: their text when known
	copies     map[string]string  // programs the command copies or links, by where the copy lands: the program
}

// fdSource is what a descriptor opened with exec (exec 3<<<text, exec 3<
// <(cmd), exec 3<file) reads.
type fdSource struct {
	text *string        // a here-string or heredoc
	up   []*syntax.Stmt // the statements of a <(...)
}

// Scan checks a parsed command against every rule: it returns the
// findings and every simple command the command contains, normalized (see
// Finding.Command), which deny patterns are matched against.
func Scan(sc *shparse.Script, c Context) (findings []Finding, segments []string) {
	s := run(sc, c)
	return s.findings, s.segments
}

// ScanWrite checks a write by the file tools (write_file, patch) to file,
// against the same sensitive paths as shell writes. subject names the
// write as findings show it: "write_file <path>", the path resolved when
// it can be.
func ScanWrite(file string, c Context) (findings []Finding, subject string) {
	s := newScanner(c)
	shown := file
	if r, abs := s.resolvePath(file); abs {
		shown = r
	}
	subject = "write_file " + shown
	s.writeTarget(litArg(file), subject)
	return s.findings, subject
}

// run checks a parsed command.
func run(sc *shparse.Script, c Context) *scanner {
	s := newScanner(c)
	s.root = sc.Text
	var se *shparse.SizeError
	if errors.As(sc.Err, &se) {
		s.large(se.Error()) // refused unread: nothing in it is looked at
		return s
	}
	s.budget(len(sc.Text)+len(c.Prelude)+len(c.Definitions), shparse.Measure(sc.Text).Elements+shparse.Measure(c.Prelude).Elements+shparse.Measure(c.Definitions).Elements)
	// The functions and aliases earlier calls defined: a call of one is
	// checked by what it runs.
	if c.Definitions != "" {
		if f, err := shparse.Parse(c.Definitions); err == nil && s.charge(c.Definitions, f) {
			s.silent, s.text, s.depth = true, c.Definitions, 1
			s.walk(f)
			s.silent, s.depth, s.steps, s.stopped = false, 0, 0, false
		}
	}
	if c.Prelude != "" {
		// What ran before in the same shell: its variables, functions,
		// aliases, cd and set -- hold for the command; its findings were
		// decided when it ran.
		if f, err := shparse.Parse(c.Prelude); err == nil && s.charge(c.Prelude, f) {
			s.silent, s.text, s.depth = true, c.Prelude, 1
			s.walk(f)
			s.silent, s.depth, s.steps, s.stopped = false, 0, 0, false
		}
	}
	if !s.halted && (sc.Err != nil || s.charge(sc.Text, sc.File)) {
		s.parsed(sc.Text, sc.File, sc.Err, sc.Text)
	}
	return s
}

// charge spends the budgets of text and elements on a parsed text, and
// reports whether there was enough; when not, the command is too-large.
func (s *scanner) charge(text string, f *syntax.File) bool {
	s.textLeft -= len(text)
	if f != nil {
		s.elemsLeft -= shparse.Measure(text).Elements
	}
	if s.textLeft < 0 || s.elemsLeft < 0 {
		s.large("more shell text (nested sh -c, eval, heredocs fed to a shell) than berth checks for a command of this size")
		return false
	}
	return true
}

// large stops the check: the command is too-large, on the floor.
func (s *scanner) large(why string) {
	if s.halted {
		return
	}
	s.halted, s.stopped = true, true
	s.findings = append(s.findings, Finding{Rule: mustRule("too-large"), Command: Clip(s.root), Detail: why})
}

// visit walks the subtree under n for a check that looks inside it (fork
// bombs, fetches, pid lists), as syntax.Walk does but without the f(nil)
// calls, spending the budget of nodes: it stops when that runs out.
func (s *scanner) visit(n syntax.Node, f func(syntax.Node) bool) {
	syntax.Walk(n, func(m syntax.Node) bool {
		if m == nil {
			return true
		}
		if s.halted || !s.spend(1) {
			return false
		}
		return f(m)
	})
}

// spend spends n of the budget of nodes the subtree checks visit, and
// reports whether there was enough.
func (s *scanner) spend(n int) bool {
	if s.nodesLeft -= n; s.nodesLeft < 0 {
		s.large("more checking of nested constructs than berth does for a command of this size")
		return false
	}
	return true
}

func newScanner(c Context) *scanner {
	s := &scanner{
		ctx: c, vars: map[string]cands{}, upstream: map[*syntax.Stmt][]*syntax.Stmt{},
		seen: map[string]bool{}, segSeen: map[string]bool{},
		funcs: map[string]*syntax.FuncDecl{}, funcText: map[*syntax.FuncDecl]string{}, aliases: map[string]string{}, calling: map[string]bool{}, fds: map[string]fdSource{},
		links: map[string]string{}, made: map[string]string{},
		pieceSeen: map[string]bool{}, arrays: map[string][]arg{}, files: map[string]*string{}, copies: map[string]string{},
	}
	s.budget(0, 0)
	if c.IFS != nil && *c.IFS != defaultIFS {
		s.vars["IFS"] = one(*c.IFS)
	}
	if c.Cwd != "" && (path.IsAbs(c.Cwd) || c.Cwd == "~" || strings.HasPrefix(c.Cwd, "~/")) {
		s.cwd = c.Cwd
		if c.Home != "" && (s.cwd == "~" || strings.HasPrefix(s.cwd, "~/")) {
			s.cwd = c.Home + s.cwd[1:]
		}
		s.cwd = path.Clean(s.cwd)
	}
	return s
}

// add records a finding once.
func (s *scanner) add(id, seg, detail string) {
	s.addAt(id, seg, detail, nil, false)
}

// maxSegments bounds the normalized commands kept for the deny patterns.
const maxSegments = 200000

// addAt records a finding whose action reaches only targets (absolute
// paths, links followed); located is false when some target is not known
// before the command runs.
//
// What a command runs on another host (or in a container, through the
// host paths mounted in it) is found as if it ran there, and never
// located: the kernel that confines this environment does not confine
// that host.
func (s *scanner) addAt(id, seg, detail string, targets []string, located bool) {
	if s.silent {
		return
	}
	if s.inFunc > 0 && mustRule(id).Level != Floor {
		// The body of a function where it is defined runs nothing: a call
		// of it (here, or in a later call, through Context.Definitions)
		// is checked by what the body runs with its arguments. The floor
		// is kept: no call makes rm -rf / a routine removal.
		return
	}
	host := ""
	if r := s.remote; r != nil {
		if r.keep != nil && !r.keep[id] {
			return // in a container: only what reaches the host's mounted paths
		}
		host, targets, located = r.host, nil, false
		detail = strings.TrimSuffix("on "+r.host+": "+detail, ": ")
	}
	key := id + "\x00" + seg + "\x00" + detail
	if s.seen[key] {
		return
	}
	s.seen[key] = true
	s.findings = append(s.findings, Finding{Rule: mustRule(id), Command: seg, Detail: detail, Targets: targets, Located: located, Remote: host})
}

// targetsOf returns where the words land (absolute, links followed), and
// whether every one is known.
func (s *scanner) targetsOf(args ...arg) ([]string, bool) {
	var out []string
	located := true
	for _, a := range args {
		if a.dyn {
			located = false
		}
		for _, v := range a.vals {
			if v == "" {
				continue
			}
			p, abs := s.resolvePath(v)
			if !abs || strings.HasPrefix(p, homeMark) {
				located = false
				continue
			}
			out = append(out, s.lands(v))
		}
	}
	return out, located && len(out) > 0
}

// record notes a normalized simple command.
func (s *scanner) record(seg string) {
	if s.silent {
		return
	}
	if seg != "" && !s.segSeen[seg] && len(s.segments) < maxSegments {
		s.segSeen[seg] = true
		s.segments = append(s.segments, seg)
	}
}

// script parses text as a shell script and walks it; display is what a
// finding about the text itself shows.
func (s *scanner) script(text, display string) {
	if s.stopped {
		return
	}
	if s.depth > maxDepth {
		s.add("too-deep", Clip(display), "")
		return
	}
	f, err := shparse.Parse(text)
	if err == nil && !s.charge(text, f) {
		return
	}
	s.parsed(text, f, err, display)
}

// parsed walks the tree f of text, or, when text did not parse (err),
// reports why and checks it word by word.
func (s *scanner) parsed(text string, f *syntax.File, err error, display string) {
	var ne *shparse.NestingError
	var se *shparse.SizeError
	switch {
	case errors.As(err, &se):
		s.large(se.Error())
		return
	case errors.As(err, &ne):
		s.add("too-deep", Clip(display), err.Error())
		s.fallback(text)
		return
	case err != nil:
		s.add("unparsed", Clip(display), err.Error())
		s.fallback(text)
		return
	}
	s.depth++
	prev := s.text
	s.text = text
	s.walk(f)
	if s.depth == 1 {
		s.mutualForkBombs()
	}
	s.text = prev
	s.depth--
}

// Clip shortens text for a finding (and a message): whitespace runs made
// one space, cut at 300 bytes.
func Clip(s string) string {
	if len(s) > 4*300 {
		// Only the start is shown: reading more would make a finding of
		// every node of a deep tree cost its whole text.
		cut := 4 * 300
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		cut := 300
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// frame is a node on the walk's stack and the cwd to restore after it.
type frame struct {
	scope bool
	cwd   string
	fn    bool // the node is a function definition
}

// walk visits every node of n in source order.
func (s *scanner) walk(n syntax.Node) {
	var stack []frame
	syntax.Walk(n, func(n syntax.Node) bool {
		if n != nil && (s.halted || !s.spend(1)) {
			return false
		}
		if n == nil {
			top := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if top.scope {
				s.cwd = top.cwd
			}
			if top.fn {
				s.inFunc--
			}
			return true
		}
		fr := frame{}
		switch n := n.(type) {
		case *syntax.Subshell, *syntax.CmdSubst, *syntax.ProcSubst:
			fr = frame{scope: true, cwd: s.cwd}
		case *syntax.WhileClause:
			s.spawnLoop(n)
		case *syntax.Stmt:
			s.stmt(n)
		case *syntax.BinaryCmd:
			if n.Op == syntax.Pipe || n.Op == syntax.PipeAll {
				stages := flattenPipe(n)
				for i, st := range stages {
					if _, ok := s.upstream[st]; !ok {
						s.upstream[st] = stages[:i]
					}
				}
			}
		case *syntax.FuncDecl:
			s.funcDecl(n)
			fr.fn = true
			s.inFunc++
		case *syntax.ForClause:
			if wi, ok := n.Loop.(*syntax.WordIter); ok && wi.Name != nil {
				var c cands
				for _, a := range s.words(wi.Items) {
					c.vals = append(c.vals, a.vals...)
					c.dyn = c.dyn || a.dyn
				}
				if len(wi.Items) == 0 {
					c = unknown
				}
				s.vars[wi.Name.Value] = capCands(c)
				s.setsVar(wi.Name.Value, "for "+wi.Name.Value)
			}
		case *syntax.DeclClause:
			for _, as := range n.Args {
				s.assign(as)
				switch {
				case as.Name != nil:
					s.setsVarAt(as.Name.Value, n)
				case as.Value != nil:
					s.setsVarWord(s.word(as.Value), Clip(s.nodeText(n)))
				}
			}
		case *syntax.ParamExp:
			if n.Param != nil && n.Exp != nil && (n.Exp.Op == syntax.AssignUnset || n.Exp.Op == syntax.AssignUnsetOrNull) {
				s.setsVarAt(n.Param.Value, n)
			}
		case *syntax.BinaryArithm:
			if w, ok := n.X.(*syntax.Word); ok && isArithAssign(n.Op) {
				s.setsVarAt(w.Lit(), n)
			}
		case *syntax.UnaryArithm:
			if w, ok := n.X.(*syntax.Word); ok && (n.Op == syntax.Inc || n.Op == syntax.Dec) {
				s.setsVarAt(w.Lit(), n)
			}
		}
		stack = append(stack, fr)
		return true
	})
}

// nodeText returns the source of n, as written.
func (s *scanner) nodeText(n syntax.Node) string {
	from, to := int(n.Pos().Offset()), int(n.End().Offset())
	if from >= 0 && from <= to && to <= len(s.text) {
		return s.text[from:to]
	}
	return ""
}

// isArithAssign reports whether op assigns ($((x=1)), ((x+=2))).
func isArithAssign(op syntax.BinAritOperator) bool {
	switch op {
	case syntax.Assgn, syntax.AddAssgn, syntax.SubAssgn, syntax.MulAssgn, syntax.QuoAssgn, syntax.RemAssgn,
		syntax.AndAssgn, syntax.OrAssgn, syntax.XorAssgn, syntax.ShlAssgn, syntax.ShrAssgn:
		return true
	}
	return false
}

// flattenPipe returns the stages of a pipeline in order.
func flattenPipe(b *syntax.BinaryCmd) []*syntax.Stmt {
	var out []*syntax.Stmt
	var add func(st *syntax.Stmt)
	add = func(st *syntax.Stmt) {
		if bc, ok := st.Cmd.(*syntax.BinaryCmd); ok && (bc.Op == syntax.Pipe || bc.Op == syntax.PipeAll) && len(st.Redirs) == 0 && !st.Background {
			add(bc.X)
			add(bc.Y)
			return
		}
		out = append(out, st)
	}
	add(b.X)
	add(b.Y)
	return out
}

// assign records a variable assignment.
func (s *scanner) assign(as *syntax.Assign) {
	if as == nil || as.Name == nil {
		return
	}
	name := as.Name.Value
	if name == "IFS" {
		s.ifsSet = true
	}
	if as.Naked {
		return
	}
	s.assignArray(as)
	switch {
	case as.Array != nil || as.Index != nil:
		s.vars[name] = unknown
		if elems, ok := s.arrays[name]; ok {
			s.vars[name] = argsCands(elems)
		}
	case as.Value == nil:
		s.vars[name] = one("")
	default:
		c := s.wordCands(as.Value)
		if as.Append {
			prev, ok := s.vars[name]
			if !ok {
				prev = unknown
			}
			c = s.cross(prev, c)
		}
		s.vars[name] = c
	}
}

// stmt checks one statement: its redirections, and its simple command.
func (s *scanner) stmt(st *syntax.Stmt) {
	if s.stopped {
		return
	}
	io := ioInfo{up: s.upstream[st]}
	var redirText []string
	var writes []arg
	for _, r := range st.Redirs {
		switch r.Op {
		case syntax.RdrOut, syntax.AppOut, syntax.RdrAll, syntax.AppAll, syntax.RdrClob, syntax.AppClob,
			syntax.RdrAllClob, syntax.AppAllClob, syntax.RdrInOut, syntax.DplOut:
			if r.Word == nil {
				continue
			}
			a := s.word(r.Word)
			if v, ok := a.lit(); ok && r.Op == syntax.DplOut && (v == "-" || isDigits(v)) {
				continue
			}
			redirText = append(redirText, r.Op.String()+" "+a.show())
			writes = append(writes, a)
			if r.N == nil || r.N.Value == "1" {
				switch r.Op {
				case syntax.RdrOut, syntax.RdrClob, syntax.AppOut, syntax.RdrAll, syntax.AppAll:
					defer s.wrote(a, st, s.upstream[st], r.Op == syntax.AppOut || r.Op == syntax.AppAll)
				}
			}
		default:
			s.stdinRedirect(r, &io)
		}
	}
	s.openFds(st)
	redir := strings.Join(redirText, " ")
	call, isCall := st.Cmd.(*syntax.CallExpr)
	var argv []arg
	if isCall {
		if len(call.Args) == 0 {
			for _, as := range call.Assigns {
				s.assign(as)
			}
		}
		argv = s.words(call.Args)
	}
	seg := s.segment(argv, redir)
	if isCall {
		for _, as := range call.Assigns {
			if as.Name != nil && berthVar(as.Name.Value) {
				s.setsVar(as.Name.Value, Clip(strings.TrimSpace(s.nodeText(as)+" "+seg)))
			}
		}
	}
	if len(writes) > 0 {
		if seg == "" {
			seg = redir
		}
		for _, w := range writes {
			s.writeTarget(w, seg)
		}
	}
	if len(argv) > 0 {
		ifs := s.callIFS
		if isCall {
			for _, as := range call.Assigns {
				if as.Name != nil && as.Name.Value == "IFS" && !as.Append && as.Index == nil && as.Array == nil {
					c := s.wordCands(as.Value)
					s.callIFS = &c
				}
			}
		}
		s.command(argv, io, redir)
		s.callIFS = ifs
	}
}

// stdinRedirect notes what a redirection of a statement feeds its stdin:
// a heredoc or here-string (known text), a file, a process substitution,
// or a descriptor opened by exec.
func (s *scanner) stdinRedirect(r *syntax.Redirect, io *ioInfo) {
	switch r.Op {
	case syntax.Hdoc, syntax.DashHdoc:
		if r.N != nil && r.N.Value != "0" {
			return
		}
		if r.Hdoc != nil {
			c := s.wordCands(r.Hdoc)
			t := c.vals[0]
			io.stdinText, io.fed = &t, &c
		} else {
			e := ""
			io.stdinText, io.fed = &e, &cands{vals: []string{""}}
		}
	case syntax.WordHdoc:
		if r.N != nil && r.N.Value != "0" {
			return
		}
		c := s.cross(s.wordCands(r.Word), one("\n"))
		t := c.vals[0]
		io.stdinText, io.fed = &t, &c
	case syntax.RdrIn:
		if r.N == nil || r.N.Value == "0" {
			io.fed = nil
			if ps := procSubstOf(r.Word); ps != nil {
				io.up = ps.Stmts // bash < <(cmd)
				io.fed = s.constOutput(ps.Stmts)
			} else {
				io.stdinFile = true
			}
		}
	case syntax.DplIn:
		if r.N == nil || r.N.Value == "0" {
			io.fed = nil
			if v, ok := s.word(r.Word).lit(); ok && v != "0" && v != "-" {
				src, known := s.fds[v]
				switch {
				case known && src.text != nil:
					io.stdinText = src.text
				case known && src.up != nil:
					io.up = src.up
				default:
					io.stdinUnknown = true
				}
			}
		}
	}
}

func isDigits(v string) bool {
	if v == "" {
		return false
	}
	for _, r := range v {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// segment returns the normalized text of a simple command.
func (s *scanner) segment(argv []arg, redir string) string {
	if len(argv) == 0 {
		return ""
	}
	parts := make([]string, 0, len(argv)+1)
	for i, a := range argv {
		w := a.show()
		if i == 0 {
			if v, ok := a.lit(); ok && strings.Contains(v, "/") {
				w = path.Base(v)
			}
		}
		parts = append(parts, w)
	}
	if redir != "" {
		parts = append(parts, redir)
	}
	return Clip(strings.Join(parts, " "))
}

// words expands shell words (brace expansion included) into args; "$@"
// is every positional parameter when they are known.
func (s *scanner) words(ws []*syntax.Word) []arg {
	out := make([]arg, 0, len(ws))
	for _, w := range ws {
		if elems, ok := s.arrayWords(w); ok {
			out = append(out, elems...)
			continue
		}
		switch {
		case s.posKnown && allPositional(w):
			out = append(out, s.pos...)
		case !hasBrace(w):
			a := s.word(w)
			if splittable(w) {
				out = append(out, s.split(a)...)
			} else {
				out = append(out, a)
			}
		default:
			out = append(out, s.wordExpanded(w)...)
		}
	}
	return out
}

// hasBrace reports whether a literal part of w has a brace: only then can
// brace expansion make several words of it.
func hasBrace(w *syntax.Word) bool {
	for _, p := range w.Parts {
		if l, ok := p.(*syntax.Lit); ok && strings.IndexByte(l.Value, '{') >= 0 {
			return true
		}
	}
	return false
}

// splittable reports whether w is one unquoted expansion ($X, ${X},
// $(cmd), $((n))), whose value the shell splits into words at IFS.
func splittable(w *syntax.Word) bool {
	if len(w.Parts) != 1 {
		return false
	}
	switch w.Parts[0].(type) {
	case *syntax.ParamExp, *syntax.CmdSubst, *syntax.ArithmExp:
		return true
	}
	return false
}

// split splits the known value of an unquoted expansion into words at the
// characters of IFS (a blank-separated default, or its value when the text
// sets it); when IFS is only known at run time, so are the words.
func (s *scanner) split(a arg) []arg {
	ifs := defaultIFS
	if c, ok := s.vars["IFS"]; ok {
		if c.dyn || len(c.vals) != 1 {
			a.dyn = true
			return []arg{a}
		}
		ifs = c.vals[0]
	}
	v, known := a.lit()
	if !known || ifs == "" || strings.IndexAny(v, ifs) < 0 {
		return []arg{a}
	}
	fields := strings.FieldsFunc(v, func(r rune) bool { return strings.ContainsRune(ifs, r) })
	if len(fields) == 1 && fields[0] == v {
		return []arg{a}
	}
	out := make([]arg, 0, len(fields))
	for _, f := range fields {
		out = append(out, litArg(f))
	}
	return out
}

// Brace expansion makes at most maxBraceWords words of one word, from at
// most maxBraceGroups groups ({a,b} or {1..9}); past either the command
// is too-large. Every word is checked: cutting the list would hide a
// floor path at its end ({x1,...,x40,/usr}, {100..-1}).
const (
	maxBraceWords  = 4096
	maxBraceGroups = 64
)

// wordExpanded resolves a word, brace expansion making several.
func (s *scanner) wordExpanded(w *syntax.Word) []arg {
	braces := 0
	for _, p := range w.Parts {
		if l, ok := p.(*syntax.Lit); ok {
			braces += strings.Count(l.Value, "{")
		}
	}
	if braces > 4*maxBraceGroups {
		// Splitting costs a node per brace: more than any group count
		// berth expands is not split at all.
		s.large(fmt.Sprintf("brace expansion from more than %d groups", maxBraceGroups))
		return []arg{s.word(w)}
	}
	cp := &syntax.Word{Parts: append([]syntax.WordPart(nil), w.Parts...)}
	if !syntax.SplitBraces(cp) {
		a := s.word(w)
		return []arg{a}
	}
	words, groups, ok := braceShape(cp.Parts)
	switch {
	case !ok:
		return []arg{s.word(w)} // a sequence berth cannot read is left as written
	case words > maxBraceWords || groups > maxBraceGroups:
		s.large(fmt.Sprintf("brace expansion into more than %d words or from more than %d groups", maxBraceWords, maxBraceGroups))
		return []arg{s.word(w)}
	}
	if s.elemsLeft -= words; s.elemsLeft < 0 {
		s.large("more words from brace expansion than berth checks for a command of this size")
		return []arg{s.word(w)}
	}
	out := make([]arg, 0, words)
	for bw, err := range expand.BracesSeq(nil, cp) {
		if err != nil {
			break
		}
		c := s.parts(bw.Parts, false)
		out = append(out, arg{vals: c.vals, dyn: c.dyn, node: w, text: s.text})
	}
	return out
}

// braceShape returns how many words brace expansion makes of parts (split
// by syntax.SplitBraces) and how many groups it expands, each at most
// maxBraceWords+1; ok is false for a sequence whose ends are not literal.
func braceShape(parts []syntax.WordPart) (words, groups int, ok bool) {
	const over = maxBraceWords + 1
	words = 1
	for _, p := range parts {
		br, isBrace := p.(*syntax.BraceExp)
		if !isBrace {
			continue
		}
		groups++
		n := 0
		if br.Sequence {
			if n, ok = seqLen(br); !ok {
				return 0, 0, false
			}
		} else {
			for _, e := range br.Elems {
				w, g, eok := braceShape(e.Parts)
				if !eok {
					return 0, 0, false
				}
				n, groups = min(n+w, over), min(groups+g, over)
			}
		}
		words = min(words*max(n, 1), over)
		if groups >= over {
			break
		}
	}
	return words, groups, true
}

// seqLen returns how many words a sequence {x..y[..incr]} makes, as
// expand.BracesSeq reads it (numbers, else the first bytes), at most
// maxBraceWords+1.
func seqLen(br *syntax.BraceExp) (int, bool) {
	if len(br.Elems) < 2 {
		return 0, false
	}
	from, to := br.Elems[0].Lit(), br.Elems[1].Lit()
	if from == "" || to == "" {
		return 0, false
	}
	a, err1 := strconv.ParseInt(from, 10, 64)
	b, err2 := strconv.ParseInt(to, 10, 64)
	if err1 != nil || err2 != nil {
		a, b = int64(from[0]), int64(to[0])
	}
	incr := int64(1)
	if len(br.Elems) > 2 {
		if n, _ := strconv.ParseInt(br.Elems[2].Lit(), 10, 64); n != 0 {
			incr = max(n, -n)
		}
	}
	span := b - a
	if span < 0 {
		span = -span
	}
	if span < 0 || incr <= 0 { // overflow
		return maxBraceWords + 1, true
	}
	return int(min(span/incr+1, maxBraceWords+1)), true
}

// word resolves one word without brace expansion.
func (s *scanner) word(w *syntax.Word) arg {
	c := s.wordCands(w)
	return arg{vals: c.vals, dyn: c.dyn, node: w, text: s.text}
}

func (s *scanner) wordCands(w *syntax.Word) cands {
	if w == nil {
		return one("")
	}
	return s.parts(w.Parts, false)
}

// printWord returns a word as written.
func printWord(w *syntax.Word) string {
	var b bytes.Buffer
	if err := syntax.NewPrinter().Print(&b, w); err != nil {
		return ""
	}
	return b.String()
}

// cross concatenates every value of a with every value of b. Joining two
// non-empty values spends the budget of values (valueBudget): past it the
// command is too-large, and the values are left as they are.
func (s *scanner) cross(a, b cands) cands {
	out := cands{dyn: a.dyn || b.dyn}
	for _, x := range a.vals {
		for _, y := range b.vals {
			if len(out.vals) >= maxCands {
				out.dyn = true
				return out
			}
			switch {
			case x == "":
				out.vals = append(out.vals, y)
			case y == "":
				out.vals = append(out.vals, x)
			case s.valuesLeft < len(x)+len(y):
				s.large("more values built from its words than berth follows for a command of this size")
				out.vals, out.dyn = append(out.vals, x), true
			default:
				s.valuesLeft -= len(x) + len(y)
				out.vals = append(out.vals, x+y)
			}
		}
	}
	return out
}

// capCands deduplicates and bounds a candidate set.
func capCands(c cands) cands {
	seen := map[string]bool{}
	out := cands{dyn: c.dyn}
	for _, v := range c.vals {
		if seen[v] {
			continue
		}
		if len(out.vals) >= maxCands {
			out.dyn = true
			break
		}
		seen[v] = true
		out.vals = append(out.vals, v)
	}
	if len(out.vals) == 0 {
		out.vals = []string{""}
	}
	return out
}

// union joins candidate sets.
func union(cs ...cands) cands {
	var out cands
	for _, c := range cs {
		out.vals = append(out.vals, c.vals...)
		out.dyn = out.dyn || c.dyn
	}
	return capCands(out)
}

// parts resolves word parts into candidate values.
func (s *scanner) parts(ps []syntax.WordPart, inDQ bool) cands {
	if len(ps) == 1 {
		switch p := ps[0].(type) {
		case *syntax.Lit:
			if inDQ {
				return one(unescapeDQ(p.Value))
			}
			return one(unescapeLit(p.Value))
		case *syntax.SglQuoted:
			if !p.Dollar {
				return one(p.Value)
			}
		}
	}
	acc := one("")
	for _, p := range ps {
		var c cands
		switch p := p.(type) {
		case *syntax.Lit:
			if inDQ {
				c = one(unescapeDQ(p.Value))
			} else {
				c = one(unescapeLit(p.Value))
			}
		case *syntax.SglQuoted:
			if p.Dollar {
				c = one(ansiC(p.Value))
			} else {
				c = one(p.Value)
			}
		case *syntax.DblQuoted:
			c = s.parts(p.Parts, true)
		case *syntax.ParamExp:
			c = s.param(p)
		case *syntax.CmdSubst:
			c = s.cmdSubst(p)
		case *syntax.ProcSubst:
			c = one("/dev/fd/63")
		case *syntax.ArithmExp:
			c = unknown
			if n, ok := s.arith(p.X, 0); ok {
				c = one(strconv.Itoa(n))
			}
		case *syntax.ExtGlob:
			c = one("*")
		case *syntax.BraceExp:
			var all []cands
			for _, e := range p.Elems {
				all = append(all, s.wordCands(e))
			}
			c = union(all...)
		default:
			c = unknown
		}
		acc = s.cross(acc, c)
	}
	return acc
}

// lookup returns what a variable holds, as far as is known.
func (s *scanner) lookup(name string) (cands, bool) {
	if c, ok := s.vars[name]; ok {
		return c, true
	}
	switch name {
	case "HOME":
		if s.ctx.Home != "" {
			return one(path.Clean(s.ctx.Home)), true
		}
		return one(homeMark), true
	case "PWD":
		if s.cwd != "" {
			return one(s.cwd), true
		}
	case "PPID":
		if s.ctx.PPID != "" && s.remote == nil {
			return one(s.ctx.PPID), true
		}
	case "BERTH_HOME":
		if s.ctx.BerthHome != "" {
			return one(path.Clean(s.ctx.BerthHome)), true
		}
	case "BERTH_CONFIG":
		if s.ctx.ConfigPath != "" {
			return one(path.Clean(s.ctx.ConfigPath)), true
		}
	}
	return unknown, false
}

// param resolves a parameter expansion. An unknown variable may be empty:
// "rm -rf $DIR/" is treated as "rm -rf /". ${X:?} fails when X is empty,
// so it stands for a non-empty unknown value.
func (s *scanner) param(p *syntax.ParamExp) cands {
	if p.Param == nil || p.NestedParam != nil || p.Excl || p.Length || p.Width || p.Index != nil && !wholeIndex(p.Index) ||
		p.Slice != nil || p.Repl != nil || p.Names != 0 {
		return unknown
	}
	val, known := s.lookup(p.Param.Value)
	if p.Exp == nil {
		return val
	}
	allSet := known && !val.dyn && !contains(val.vals, "")
	switch p.Exp.Op {
	case syntax.DefaultUnset, syntax.DefaultUnsetOrNull, syntax.AssignUnset, syntax.AssignUnsetOrNull:
		if allSet {
			return val
		}
		def := s.wordCands(p.Exp.Word)
		if known {
			return union(val, def)
		}
		alt := one(unknownPart)
		alt.dyn = true
		return union(def, alt)
	case syntax.ErrorUnsetOrNull:
		if allSet {
			return val
		}
		return cands{vals: []string{unknownPart}, dyn: true}
	case syntax.ErrorUnset:
		return val
	case syntax.AlternateUnset, syntax.AlternateUnsetOrNull:
		return union(s.wordCands(p.Exp.Word), one(""))
	case syntax.RemSmallSuffix, syntax.RemLargeSuffix, syntax.RemSmallPrefix, syntax.RemLargePrefix:
		// ${HOME%/*} is the home's parent: trim known values by a known
		// pattern, as the shell would.
		pat, ok := s.word(p.Exp.Word).lit()
		if !ok || val.dyn {
			return unknown
		}
		re, err := GlobRegexp(pat)
		if err != nil {
			return unknown
		}
		var out cands
		for _, v := range val.vals {
			if len(v) > 1024 {
				return unknown // no path; and trimming is quadratic
			}
			out.vals = append(out.vals, trimMatch(v, re, p.Exp.Op))
		}
		return capCands(out)
	}
	return unknown
}

// trimMatch removes from v the shortest or longest suffix or prefix that
// re (an anchored glob) matches, as ${v%pat}, ${v%%pat}, ${v#pat} and
// ${v##pat} do.
func trimMatch(v string, re interface{ MatchString(string) bool }, op syntax.ParExpOperator) string {
	n := len(v)
	switch op {
	case syntax.RemSmallSuffix:
		for i := n; i >= 0; i-- {
			if re.MatchString(v[i:]) {
				return v[:i]
			}
		}
	case syntax.RemLargeSuffix:
		for i := 0; i <= n; i++ {
			if re.MatchString(v[i:]) {
				return v[:i]
			}
		}
	case syntax.RemSmallPrefix:
		for i := 0; i <= n; i++ {
			if re.MatchString(v[:i]) {
				return v[i:]
			}
		}
	case syntax.RemLargePrefix:
		for i := n; i >= 0; i-- {
			if re.MatchString(v[:i]) {
				return v[i:]
			}
		}
	}
	return v
}

func contains(vs []string, v string) bool {
	for _, x := range vs {
		if x == v {
			return true
		}
	}
	return false
}

// cmdSubst resolves the few command substitutions whose output is known
// before they run: echo and printf of literal text, which/command -v/type
// -P of a name, pwd. Anything else is unknown and may be empty.
func (s *scanner) cmdSubst(cs *syntax.CmdSubst) cands {
	if len(cs.Stmts) != 1 || s.substDepth >= 4 {
		return unknown
	}
	s.substDepth++
	defer func() { s.substDepth-- }()
	call, ok := cs.Stmts[0].Cmd.(*syntax.CallExpr)
	if !ok || len(call.Args) == 0 || len(cs.Stmts[0].Redirs) > 0 {
		return unknown
	}
	switch prog, _ := s.word(call.Args[0]).lit(); path.Base(prog) {
	case "echo", "printf", "which", "command", "type", "pwd":
	default:
		return unknown
	}
	argv := s.words(call.Args)
	var lits []string
	for _, a := range argv {
		v, ok := a.lit()
		if !ok {
			return unknown
		}
		lits = append(lits, v)
	}
	switch path.Base(lits[0]) {
	case "echo", "printf":
		texts, ok := literalOutputs(path.Base(lits[0]), argv[1:])
		if !ok {
			return unknown
		}
		var c cands
		for _, t := range texts {
			c.vals = append(c.vals, strings.TrimRight(t, "\n")) // $(...) drops trailing newlines
		}
		return capCands(c)
	case "which", "command", "type":
		if len(lits) >= 2 {
			return one(lits[len(lits)-1])
		}
	case "pwd":
		if s.cwd != "" {
			return one(s.cwd)
		}
	}
	return unknown
}

// unescapeLit removes the backslashes of an unquoted literal.
func unescapeLit(v string) string {
	if !strings.Contains(v, `\`) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// unescapeDQ removes the backslashes that escape inside double quotes.
func unescapeDQ(v string) string {
	if !strings.Contains(v, `\`) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) && strings.IndexByte("$`\"\\\n", v[i+1]) >= 0 {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// ansiC decodes the body of a $'...' string.
func ansiC(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c != '\\' || i+1 >= len(v) {
			b.WriteByte(c)
			continue
		}
		i++
		switch e := v[i]; e {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'a':
			b.WriteByte(7)
		case 'b':
			b.WriteByte(8)
		case 'e', 'E':
			b.WriteByte(27)
		case 'f':
			b.WriteByte(12)
		case 'v':
			b.WriteByte(11)
		case 'c':
			if i+1 < len(v) {
				i++
				b.WriteByte(v[i] & 0x1f)
			}
		case 'x', 'u', 'U':
			max := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			j := i + 1
			for j < len(v) && j-i-1 < max && isHex(v[j]) {
				j++
			}
			if j == i+1 {
				b.WriteByte('\\')
				b.WriteByte(e)
				continue
			}
			n, _ := strconv.ParseUint(v[i+1:j], 16, 32)
			if e == 'x' {
				b.WriteByte(byte(n))
			} else {
				b.WriteRune(rune(n))
			}
			i = j - 1
		case '0', '1', '2', '3', '4', '5', '6', '7':
			j := i
			for j < len(v) && j-i < 3 && v[j] >= '0' && v[j] <= '7' {
				j++
			}
			n, _ := strconv.ParseUint(v[i:j], 8, 16)
			b.WriteByte(byte(n))
			i = j - 1
		default:
			b.WriteByte(e)
		}
	}
	return b.String()
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// funcDecl looks for a fork bomb: a function whose body calls itself at
// least twice, with a call in a pipeline or in the background.
func (s *scanner) funcDecl(fd *syntax.FuncDecl) {
	if fd.Name == nil || fd.Body == nil {
		return
	}
	name := fd.Name.Value
	if _, ok := s.funcs[name]; !ok || s.inFunc == 0 {
		s.funcs[name] = fd
		s.funcText[fd] = s.text
	}
	if name == "command_not_found_handle" {
		s.add("dynamic-command", Clip("command_not_found_handle() "+s.nodeText(fd.Body)), "command_not_found_handle runs for every command that is not found, with its words as arguments")
	}
	calls, spread := 0, false
	s.visit(fd.Body, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.CallExpr:
			if len(n.Args) > 0 && path.Base(s.wordCands(n.Args[0]).vals[0]) == name {
				calls++
			}
		case *syntax.Stmt:
			if n.Background && callsFunc(s, n, name) {
				spread = true
			}
		case *syntax.BinaryCmd:
			if (n.Op == syntax.Pipe || n.Op == syntax.PipeAll) && (callsFunc(s, n.X, name) || callsFunc(s, n.Y, name)) {
				spread = true
			}
		}
		return true
	})
	if calls >= 2 && spread {
		var b bytes.Buffer
		_ = syntax.NewPrinter(syntax.SingleLine(true)).Print(&b, fd)
		s.add("fork-bomb", Clip(b.String()), name)
	}
}

// callsFunc reports whether n runs the function name.
func callsFunc(s *scanner, n syntax.Node, name string) bool {
	found := false
	s.visit(n, func(m syntax.Node) bool {
		if c, ok := m.(*syntax.CallExpr); ok && len(c.Args) > 0 && path.Base(s.wordCands(c.Args[0]).vals[0]) == name {
			found = true
		}
		return !found
	})
	return found
}

// pieceEnd are the bytes the fallback cuts text at.
var pieceEnd = func() (t [256]bool) {
	for _, c := range []byte("\n`;&|(){}") {
		t[c] = true
	}
	return t
}()

// fallback checks text the parser rejected (or past the bound of commands
// the walk follows), crudely: it is cut at shell separators, quotes are
// dropped, and each piece is checked as a simple command with literal
// words. It can see more than the shell would (prose inside quotes), never
// less. It reads the text once, piece by piece, with no bound but the
// text's length.
func (s *scanner) fallback(text string) {
	if s.textLeft -= len(text); s.textLeft < 0 {
		s.large("more shell text read word by word than berth checks for a command of this size")
		return
	}
	was := s.wordByWord
	s.wordByWord = true
	defer func() { s.wordByWord = was }()
	unq := strings.NewReplacer(`"`, "", `'`, "", `\`, "")
	for len(text) > 0 && !s.halted {
		i := 0
		for i < len(text) && !pieceEnd[text[i]] {
			i++
		}
		if i == len(text) {
			i = -1
		}
		piece := text
		if i >= 0 {
			piece, text = text[:i], text[i+1:]
		} else {
			text = ""
		}
		piece = strings.TrimSpace(strings.TrimSuffix(piece, "$")) // the $ of $(
		if piece == "" || s.pieceSeen[piece] {
			continue // each piece once: it reads the same every time
		}
		if len(s.pieceSeen) < 1<<16 {
			s.pieceSeen[piece] = true
		}
		words := strings.Fields(unq.Replace(piece))
		if s.elemsLeft -= len(words); s.elemsLeft < 0 || len(words) > maxPieceWords {
			s.large("more words read word by word than berth checks for a command of this size")
			return
		}
		argv := make([]arg, len(words))
		for k, f := range words {
			argv[k] = litArg(f)
		}
		s.command(argv, ioInfo{}, "")
	}
}

// defaultIFS is IFS when the shell has not changed it (or unset it).
const defaultIFS = " \t\n"
