package scan

import (
	"regexp"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// procChecks are the programs that signal processes, stop services or
// take the machine away (power).
func procChecks() map[string]check {
	power := check{[]string{"power"}, func(s *scanner, c call) {
		for _, a := range c.args {
			switch a.first() {
			case "--help", "--version", "-c":
				return
			case "-k", "-w", "--wtmp-only":
				return
			}
		}
		s.add("power", c.seg, c.name)
	}}
	runlevel := check{[]string{"power"}, func(s *scanner, c call) {
		if len(c.args) > 0 {
			switch c.args[0].first() {
			case "0", "1", "6", "s", "S", "single", "halt":
				s.add("power", c.seg, c.name+" "+c.args[0].first())
			}
		}
	}}
	byName := check{[]string{"kill-9-by-name", "kill-berth"}, func(s *scanner, c call) {
		if sigKill(c.args) {
			s.add("kill-9-by-name", c.seg, "")
		}
		s.killBerthByName(c)
	}}
	return map[string]check{
		"kill":     {[]string{"kill-all", "kill-berth"}, func(s *scanner, c call) { s.kill(c.args, c.seg) }},
		"killall5": {[]string{"kill-all"}, func(s *scanner, c call) { s.add("kill-all", c.seg, "") }},
		"pkill":    byName, "killall": byName,
		"shutdown": power, "reboot": power, "halt": power, "poweroff": power,
		"init": runlevel, "telinit": runlevel,
		"systemctl": {[]string{"power", "systemctl-stop"}, func(s *scanner, c call) { s.systemctl(c.args, c.seg) }},
		"loginctl": {[]string{"power"}, func(s *scanner, c call) {
			o := parseOpts(c.args, "HMpsnoP", []string{"host", "machine", "property", "signal", "lines", "output", "kill-whom", "what", "when"}, true)
			if len(o.operands) > 0 {
				switch v := o.operands[0].first(); v {
				case "poweroff", "reboot", "halt", "kexec", "suspend", "hibernate", "hybrid-sleep", "suspend-then-hibernate", "sleep", "soft-reboot":
					s.add("power", c.seg, "loginctl "+v)
				}
			}
		}},
		// kexec -e (or --exec, -f) boots another kernel at once.
		"kexec": {[]string{"power"}, func(s *scanner, c call) {
			for _, a := range c.args {
				switch v := a.first(); {
				case v == "--exec", v == "--force", strings.HasPrefix(v, "-") && !strings.HasPrefix(v, "--") && strings.ContainsAny(v[1:], "ef"):
					s.add("power", c.seg, "kexec "+v)
					return
				}
			}
		}},
		"busctl":    dbusPower,
		"gdbus":     dbusPower,
		"dbus-send": dbusPower,
		"qdbus":     dbusPower,
		"service": {[]string{"systemctl-stop"}, func(s *scanner, c call) {
			if len(c.args) >= 2 {
				switch c.args[1].first() {
				case "stop", "disable", "mask":
					s.add("systemctl-stop", c.seg, c.args[0].show())
				}
			}
		}},
	}
}

// kill checks for pid -1 (every process), and for berth's own pids.
func (s *scanner) kill(args []arg, seg string) {
	i := 0
	sigSeen, probe := false, false
	for i < len(args) {
		v := args[i].first()
		switch {
		case v == "--":
			i++
		case v == "-l" || v == "-L" || v == "--list" || v == "--table":
			return
		case !sigSeen && (v == "-s" || v == "-n" || v == "--signal"):
			sigSeen = true
			probe = i+1 < len(args) && args[i+1].first() == "0"
			i += 2
			continue
		case !sigSeen && len(v) > 1 && v[0] == '-':
			sigSeen = true
			probe = v == "-0" || v == "-s0" || v == "--signal=0"
			i++
			continue
		}
		break
	}
	if !probe && i < len(args) {
		s.killBerth(args[i:], seg)
	}
	for ; i < len(args); i++ {
		for _, v := range args[i].vals {
			if n, ok := parseArithNumber(strings.TrimSpace(v)); ok && n == -1 && strings.HasPrefix(strings.TrimSpace(v), "-") {
				s.add("kill-all", seg, v)
				return
			}
		}
		if s.listsAllPids(args[i].node) {
			s.add("kill-all", seg, args[i].source())
			return
		}
	}
}

// dbusPower checks D-Bus calls of logind's and systemd's power methods
// (busctl call org.freedesktop.login1 ... PowerOff b false).
var dbusPower = check{[]string{"power"}, func(s *scanner, c call) {
	for _, a := range c.args {
		v := a.first()
		if i := strings.LastIndexByte(v, '.'); i >= 0 {
			v = v[i+1:]
		}
		switch v {
		case "PowerOff", "Reboot", "Halt", "KExec", "PowerOffWithFlags", "RebootWithFlags", "HaltWithFlags",
			"KExecWithFlags", "Suspend", "Hibernate", "HybridSleep", "SuspendThenHibernate", "SoftReboot", "Sleep":
			s.add("power", c.seg, "D-Bus "+v)
			return
		}
	}
}}

// listsAllPids reports whether w holds a $(...) that lists every process:
// kill -9 $(ps -eo pid), $(ps ax -o pid=), $(pgrep .): the same as kill
// -1.
func (s *scanner) listsAllPids(w *syntax.Word) bool {
	found := false
	if w == nil {
		return false
	}
	s.visit(w, func(n syntax.Node) bool {
		cs, ok := n.(*syntax.CmdSubst)
		if !ok || found {
			return !found
		}
		for _, st := range cs.Stmts {
			if bc, ok := st.Cmd.(*syntax.BinaryCmd); ok && (bc.Op == syntax.Pipe || bc.Op == syntax.PipeAll) {
				st = flattenPipe(bc)[0] // ps -eo pid | tail -n +2
			}
			name, argv := s.stageCommand(st)
			switch name {
			case "ps":
				for _, a := range argv[1:] {
					v := a.first()
					if strings.HasPrefix(v, "-") && strings.ContainsAny(v[1:], "eA") && !strings.HasPrefix(v, "--") ||
						!strings.HasPrefix(v, "-") && strings.Contains(v, "a") && strings.Contains(v, "x") {
						found = true
					}
				}
			case "pgrep", "pidof":
				for _, a := range argv[1:] {
					if v := a.first(); v == "." || v == "" || v == ".*" || v == "^" {
						found = true
					}
				}
			}
		}
		return !found
	})
	return found
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

// berthNames are the names of berth's programs.
var berthNames = []string{"berth", "berth-engine"}

// killBerth reports pids (kill's operands) that are berth's own
// processes: a pid of Context.BerthPIDs (kill -9 $PPID from berth's
// shell), or a $(pgrep berth) or $(pidof berth-engine).
func (s *scanner) killBerth(pids []arg, seg string) {
	if s.remote != nil {
		return
	}
	for _, a := range pids {
		for _, v := range a.vals {
			if contains(s.ctx.BerthPIDs, strings.TrimSpace(v)) {
				s.add("kill-berth", seg, "pid "+v+" is berth's")
				return
			}
		}
		if a.node == nil {
			continue
		}
		found := false
		s.visit(a.node, func(n syntax.Node) bool {
			cs, ok := n.(*syntax.CmdSubst)
			if !ok || len(cs.Stmts) != 1 || found {
				return !found
			}
			name, argv := s.stageCommand(cs.Stmts[0])
			if name == "pgrep" || name == "pidof" {
				found = namesBerth(name, argv[1:])
			}
			return !found
		})
		if found {
			s.add("kill-berth", seg, a.source()+" lists berth's processes")
			return
		}
	}
}

// killBerthByName reports pkill and killall of berth's programs, with any
// signal but 0 (a probe).
func (s *scanner) killBerthByName(c call) {
	if s.remote != nil {
		return
	}
	for _, a := range c.args {
		switch v := a.first(); v {
		case "-0", "--signal=0", "-s0", "-l", "--list":
			return
		}
	}
	if namesBerth(c.name, c.args) {
		s.add("kill-berth", c.seg, "berth's processes")
	}
}

// namesBerth reports whether a pkill, pgrep, killall or pidof command
// line picks berth's programs by name: a pattern (pkill, pgrep: a regular
// expression, matched against the whole command line with -f) or a name
// (killall, pidof: exact, or a regular expression with -r) that matches
// berth or berth-engine.
func namesBerth(prog string, args []arg) bool {
	regex := prog == "pkill" || prog == "pgrep"
	exact := false
	valued := map[string]bool{"-s": true, "--signal": true, "-u": true, "--euid": true, "-U": true, "--uid": true, "-g": true, "--pgroup": true,
		"-G": true, "--group": true, "-P": true, "--parent": true, "-t": true, "--terminal": true, "-F": true, "--pidfile": true,
		"-o": true, "--older-than": true, "-y": true, "--younger-than": true, "-Z": true, "--context": true, "--ns": true, "--nslist": true, "-d": true, "--delimiter": true}
	for i := 0; i < len(args); i++ {
		v := args[i].first()
		switch {
		case valued[v]:
			i++
			continue
		case v == "-r" || v == "--regexp":
			regex = true
			continue
		case v == "-x" || v == "--exact" || v == "-e":
			exact = true
			continue
		case strings.HasPrefix(v, "-") && len(v) > 1:
			if strings.Contains(v[1:], "r") && !strings.HasPrefix(v, "--") && (prog == "killall") {
				regex = true
			}
			continue
		}
		for _, val := range args[i].vals {
			if val == "" {
				continue
			}
			for _, name := range berthNames {
				if !regex {
					if val == name {
						return true
					}
					continue
				}
				pat := val
				if exact {
					pat = "^(?:" + val + ")$"
				}
				if re, err := regexp.Compile(pat); err == nil && re.MatchString(name) {
					return true
				}
			}
		}
	}
	return false
}
