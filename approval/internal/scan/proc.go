package scan

import (
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
	byName := check{[]string{"kill-9-by-name"}, func(s *scanner, c call) {
		if sigKill(c.args) {
			s.add("kill-9-by-name", c.seg, "")
		}
	}}
	return map[string]check{
		"kill":     {[]string{"kill-all"}, func(s *scanner, c call) { s.kill(c.args, c.seg) }},
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
