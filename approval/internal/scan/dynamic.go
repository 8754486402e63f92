package scan

import (
	"maps"
	"path"
	"sort"
	"strings"
	"sync"
)

// A command whose program berth cannot see is checked against the floor
// by what it could run. That is a function or alias the session defined in
// an earlier call whose definition berth does not have (Context.Names
// without Context.Definitions), and a program name only known at run time
// ($CMD, "$RM"). Such a
// command is dynamic-command (asked in manual mode), and it is blocked in
// every mode when any of these could hit the floor:
//
//   - its arguments as a command line: a forwarder (h(){ "$@"; }, alias
//     h=sudo) runs them, so h rm -rf / is rm -rf /;
//   - its arguments given to each program the floor's own checks cover
//     (floorPrograms, read from the checks table so that it stays in step
//     with it): alias x=rm makes x -rf / rm -rf /, g(){ kill "$@"; } makes
//     g -9 -1 kill -9 -1;
//   - its stdin, when known, as a script (the name may be a shell).
//
// What keeps ordinary calls (build -rf dist, myfn /tmp/x, ll /, g -9 1234)
// off the floor:
//
//   - an argument is taken at the values berth knows for it, an unknown
//     part as empty (as everywhere in the checker: rm -rf $DIR/ is rm -rf
//     /), never as "anything": myfn "$x" would otherwise be mkfs of an
//     unknown device;
//   - a floor rule a program reports with no arguments at all (reboot,
//     halt, killall5) says nothing about the arguments: every call would
//     match it;
//   - the power rule, whose triggers are everyday words for any other
//     program (a runlevel 0, 1 or s for init, -f or -e for kexec, sleep
//     for loginctl), counts only when an argument names the power action
//     itself (reboot, poweroff, halt, kexec, their D-Bus methods);
//   - only floor findings count; the rest of what the candidates match is
//     dropped (the command is asked anyway, as dynamic-command).

// maxForwarding bounds the dynamic commands checked one inside another
// (h h h rm -rf /).
const maxForwarding = 8

// maxCandidateWork bounds the arguments given to candidate programs over
// one check (each program the floor covers, for each dynamic command),
// which keeps a dynamic command with a huge argument list, or very many of
// them, from making the check slow. Past it, what the command could run is
// not checked, and it is blocked (dynamic-unchecked): no ordinary command
// comes near it (it is some 18 000 arguments to dynamic commands in all),
// and anything past it cannot be let through in mode off unchecked.
const maxCandidateWork = 1 << 20

// maxCloned bounds the variables copied, over one check, to keep what the
// candidates assign from leaking into the rest of the command; past it
// they share the command's variables (what leaks is only what the
// candidates could assign).
const maxCloned = 1 << 20

// floorPrograms are the programs whose check can report a floor rule,
// sorted, each with the floor rules it reports even with no arguments.
var floorPrograms = sync.OnceValue(func() []floorProgram {
	var out []floorProgram
	for name, c := range checks {
		floorRule := false
		for _, id := range c.rules {
			if mustRule(id).Level == Floor {
				floorRule = true
			}
		}
		if !floorRule {
			continue
		}
		bare := newScanner(Context{})
		c.fn(bare, call{name: name, seg: name})
		always := map[string]bool{}
		for _, f := range bare.findings {
			if f.Rule.Level == Floor {
				always[f.Rule.ID] = true
			}
		}
		out = append(out, floorProgram{name: name, check: c, always: always})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
})

// ruleOrder is each rule's place in rules.
var ruleOrder = func() map[string]int {
	m := make(map[string]int, len(rules))
	for i, r := range rules {
		m[r.ID] = i
	}
	return m
}()

// floorProgram is a program the floor covers.
type floorProgram struct {
	name   string
	check  check
	always map[string]bool // floor rules it reports with no arguments
}

// powerWords name a power action itself, as a systemctl or loginctl verb,
// a target, or a D-Bus method.
var powerWords = map[string]bool{
	"poweroff": true, "reboot": true, "halt": true, "kexec": true, "soft-reboot": true,
	"PowerOff": true, "Reboot": true, "Halt": true, "KExec": true, "SoftReboot": true,
	"PowerOffWithFlags": true, "RebootWithFlags": true, "HaltWithFlags": true, "KExecWithFlags": true,
}

// namesPower reports whether some argument names a power action.
func namesPower(args []arg) bool {
	for _, a := range args {
		for _, v := range a.vals {
			v = strings.TrimSuffix(v, ".target")
			if i := strings.LastIndexByte(v, '.'); i >= 0 {
				v = v[i+1:]
			}
			if powerWords[v] {
				return true
			}
		}
	}
	return false
}

// couldRun checks a command whose program berth cannot see (who says
// which, for the finding) against the floor by what it could run, and
// adds the floor findings of every candidate to seg.
func (s *scanner) couldRun(who string, args []arg, io ioInfo, seg, redir string) {
	s.couldRunOnly(who, args, io, seg, redir, nil, nil)
}

// couldRunOnly is couldRun keeping only the floor rules of only (all of
// them when nil), and checking texts as scripts too (the command as the
// shell could read it: $IFS as a blank).
func (s *scanner) couldRunOnly(who string, args []arg, io ioInfo, seg, redir string, only map[string]bool, texts []string) {
	if s.silent || s.forwarding >= maxForwarding {
		return
	}
	s.forwarding++
	defer func() { s.forwarding-- }()
	progs := floorPrograms()
	if s.candWork += len(progs) * (len(args) + 1); s.candWork > maxCandidateWork {
		s.add("dynamic-unchecked", seg, who+" with more arguments than berth checks by what it could run")
		return
	}

	// The candidates run with the scanner's state saved, and restored
	// after them: what they could do (cd, assignments, findings, commands)
	// is not what the text does. Only their floor findings are kept.
	findings, seen := s.findings, s.seen
	segments, segSeen := s.segments, s.segSeen
	cwd, pos, posKnown, ifsSet, stopped := s.cwd, s.pos, s.posKnown, s.ifsSet, s.stopped
	vars, arrays, files, copies := s.vars, s.arrays, s.files, s.copies
	if s.cloned+len(vars)+len(arrays) <= maxCloned {
		s.cloned += len(vars) + len(arrays)
		s.vars, s.arrays = maps.Clone(vars), maps.Clone(arrays)
	}
	s.files, s.copies = maps.Clone(files), maps.Clone(copies)
	s.findings, s.seen = nil, map[string]bool{}
	s.segments, s.segSeen = nil, map[string]bool{}
	var kept []Finding
	keepFloor := func(from int, keep func(Finding) bool) {
		for _, f := range s.findings[from:] {
			if f.Rule.Level == Floor && (keep == nil || keep(f)) && (only == nil || only[f.Rule.ID]) || s.stopped && !stopped {
				kept = append(kept, f)
			}
		}
	}

	// Its arguments as a command line, its stdin as a script, and its
	// arguments given to a shell (${SHELL} -c TEXT); the texts given.
	if len(args) > 0 {
		s.command(args, io, redir)
		s.shell(args, io, seg)
	}
	s.stdinCode(io, seg, true)
	for _, t := range texts {
		s.script(t, seg)
	}
	keepFloor(0, nil)

	// Its arguments given to each program the floor covers, at the values
	// berth knows for them.
	known := make([]arg, len(args))
	for i, a := range args {
		known[i] = arg{vals: a.vals, src: a.src, node: a.node, text: a.text}
	}
	power := namesPower(known)
	for _, p := range progs {
		from := len(s.findings)
		argv := append([]arg{litArg(p.name)}, known...)
		p.check.fn(s, call{name: p.name, args: known, io: io, seg: s.segment(argv, redir), redir: redir})
		keepFloor(from, func(f Finding) bool {
			return !p.always[f.Rule.ID] && (f.Rule.ID != "power" || power)
		})
	}

	s.findings, s.seen = findings, seen
	s.segments, s.segSeen = segments, segSeen
	s.cwd, s.pos, s.posKnown, s.ifsSet = cwd, pos, posKnown, ifsSet
	s.vars, s.arrays, s.files, s.copies = vars, arrays, files, copies
	// The first finding names the command in the BLOCKED message: by the
	// order of the rules (rm-system-dir first), not of the programs.
	sort.SliceStable(kept, func(i, j int) bool { return ruleOrder[kept[i].Rule.ID] < ruleOrder[kept[j].Rule.ID] })
	for _, f := range kept {
		if s.stopped && !stopped {
			// The bound of commands was reached inside a candidate, and
			// the whole text read word by word: all of it counts.
			s.addAt(f.Rule.ID, f.Command, f.Detail, f.Targets, f.Located)
			continue
		}
		s.addCould(f, who, seg)
	}
}

// addCould records the floor finding f of what a command could run as a
// finding of the command seg.
func (s *scanner) addCould(f Finding, who, seg string) {
	could := f.Command
	if could == "" {
		could = seg
	}
	detail := who + " could run " + could
	if f.Detail != "" {
		detail += " (" + f.Detail + ")"
	}
	key := f.Rule.ID + "\x00" + seg + "\x00" + detail
	if s.seen[key] {
		return
	}
	s.seen[key] = true
	s.findings = append(s.findings, Finding{Rule: f.Rule, Command: seg, Detail: detail, Could: could, Targets: f.Targets, Located: f.Located, Remote: f.Remote})
}

// dynamicWho names a program word only known at run time, for a finding.
func dynamicWho(p arg) string {
	return p.source() + " (known only at run time)"
}

// sessionWho names a function or alias of an earlier call, for a finding.
func sessionWho(name string) string {
	return path.Base(name) + " (a function or alias the session defined in an earlier call)"
}
