package scan

import "strings"

// wrapped is what a wrapper (sudo, env, xargs ...) runs.
type wrapped struct {
	inner  []arg  // the command it runs
	xargs  bool   // more arguments arrive at run time
	script *arg   // shell text it runs (su -c, flock -c)
	joined []arg  // words it joins with spaces into shell text it runs (watch, ssh, sg)
	host   string // it runs what it runs on this other host (ssh)
	writes []arg  // files it writes (sudoedit)
	sets   []arg  // variables it sets (NAME=value) or unsets (NAME) for inner
	stdin  bool   // it runs a shell reading its script from stdin (at, script)
	shell  []arg  // it runs a shell with these arguments (capsh -- ARGS)
	tries  [][]arg
	// tries are the command lines it may run when its options cannot be
	// told from its command: every word that could start the command is
	// tried, so a dangerous command anywhere in it is found.
}

// unwrapper reads a wrapper's arguments: what it runs, or nothing.
type unwrapper func(name string, args []arg) wrapped

// wrappers are the programs that run another command line; the scanner
// sees through them with their options and checks what they run.
var wrappers = map[string]unwrapper{
	"sudo": func(_ string, args []arg) wrapped {
		o := parseOpts(args, "ugpCDrtUTR", []string{"user", "group", "prompt", "close-from", "chdir", "role", "type", "other-user", "host", "command-timeout", "chroot"}, false)
		if o.has('e') || o.hasLong("edit") {
			return wrapped{writes: o.operands}
		}
		sets, inner := splitAssigns(o.operands)
		return wrapped{inner: inner, sets: sets}
	},
	"sudoedit": func(_ string, args []arg) wrapped {
		return wrapped{writes: parseOpts(args, "ugpCDrtUTR", nil, true).operands}
	},
	"doas": func(_ string, args []arg) wrapped {
		return wrapped{inner: parseOpts(args, "uC", nil, false).operands}
	},
	"pkexec": func(_ string, args []arg) wrapped {
		return wrapped{inner: parseOpts(args, "", []string{"user"}, false).operands}
	},
	"env": func(_ string, args []arg) wrapped {
		o := parseOpts(args, "uCSP", []string{"unset", "chdir", "split-string"}, false)
		sets, inner := splitAssigns(o.operands)
		sets = append(append(sets, o.shortArg['u']...), o.long["unset"]...)
		split, ok := o.val('S')
		if !ok {
			split, ok = o.longVal("split-string")
		}
		if ok {
			var pre []arg
			for _, f := range strings.Fields(split.first()) {
				pre = append(pre, litArg(f))
			}
			more, rest := splitAssigns(pre)
			sets = append(sets, more...)
			inner = append(rest, inner...)
		}
		return wrapped{inner: inner, sets: sets}
	},
	"exec": func(_ string, args []arg) wrapped {
		return wrapped{inner: parseOpts(args, "a", nil, false).operands}
	},
	"nohup":     plainWrapper,
	"builtin":   plainWrapper,
	"nocorrect": plainWrapper,
	"noglob":    plainWrapper,
	"unbuffer":  plainWrapper,
	"setsid": func(_ string, args []arg) wrapped {
		return wrapped{inner: parseOpts(args, "", nil, false).operands}
	},
	"time": func(_ string, args []arg) wrapped {
		return wrapped{inner: parseOpts(args, "fo", []string{"format", "output"}, false).operands}
	},
	"nice": func(_ string, args []arg) wrapped {
		return wrapped{inner: parseOpts(args, "n", []string{"adjustment"}, false).operands}
	},
	"ionice": func(_ string, args []arg) wrapped {
		o := parseOpts(args, "cnpPu", []string{"class", "classdata", "pid", "pgid", "uid"}, false)
		if o.has('p') || o.has('P') || o.has('u') {
			return wrapped{}
		}
		return wrapped{inner: o.operands}
	},
	"timeout": func(_ string, args []arg) wrapped {
		o := parseOpts(args, "sk", []string{"signal", "kill-after"}, false)
		if len(o.operands) > 0 {
			return wrapped{inner: o.operands[1:]}
		}
		return wrapped{}
	},
	"busybox": func(_ string, args []arg) wrapped {
		if len(args) > 0 && strings.HasPrefix(args[0].first(), "-") {
			return wrapped{}
		}
		return wrapped{inner: args}
	},
	"command": func(_ string, args []arg) wrapped {
		o := parseOpts(args, "", nil, false)
		if o.has('v') || o.has('V') {
			return wrapped{}
		}
		return wrapped{inner: o.operands}
	},
	"xargs": func(_ string, args []arg) wrapped {
		o := parseOpts(args, "adEILnPs", []string{"arg-file", "delimiter", "max-args", "max-procs", "max-chars", "max-lines", "process-slot-var"}, false)
		inner := o.operands
		if len(inner) == 0 {
			inner = []arg{litArg("echo")}
		}
		return wrapped{inner: inner, xargs: true}
	},
	"chroot": func(_ string, args []arg) wrapped {
		o := parseOpts(args, "", []string{"userspec", "groups"}, false)
		if len(o.operands) > 1 {
			return wrapped{inner: o.operands[1:]}
		}
		return wrapped{}
	},
	"stdbuf": func(_ string, args []arg) wrapped {
		return wrapped{inner: parseOpts(args, "ioe", []string{"input", "output", "error"}, false).operands}
	},
	"caffeinate": func(_ string, args []arg) wrapped {
		return wrapped{inner: parseOpts(args, "tw", nil, false).operands}
	},
	"flock": func(_ string, args []arg) wrapped {
		o := parseOpts(args, "wEc", []string{"timeout", "conflict-exit-code", "command"}, false)
		if c, ok := o.val('c'); ok {
			return wrapped{script: &c}
		}
		if c, ok := o.longVal("command"); ok {
			return wrapped{script: &c}
		}
		if len(o.operands) > 1 {
			// flock FILE [options] -c TEXT: options may follow the file.
			after := parseOpts(o.operands[1:], "wEc", []string{"timeout", "conflict-exit-code", "command"}, false)
			if c, ok := after.val('c'); ok {
				return wrapped{script: &c}
			}
			if c, ok := after.longVal("command"); ok {
				return wrapped{script: &c}
			}
			return wrapped{inner: after.operands}
		}
		return wrapped{}
	},
	"taskset": func(_ string, args []arg) wrapped {
		o := parseOpts(args, "", nil, false)
		if o.has('p') || o.hasLong("pid") || len(o.operands) < 2 {
			return wrapped{}
		}
		return wrapped{inner: o.operands[1:]}
	},
	"watch": func(_ string, args []arg) wrapped {
		o := parseOpts(args, "n", []string{"interval"}, false)
		if o.has('x') || o.hasLong("exec") {
			return wrapped{inner: o.operands}
		}
		if len(o.operands) == 0 {
			return wrapped{}
		}
		return wrapped{joined: o.operands}
	},
	"su":      suWrapper,
	"runuser": suWrapper,
	// ssh HOST CMD runs CMD there; ssh HOST alone runs the shell text on
	// its stdin there (ssh -N, -f, -O run nothing).
	"ssh": func(_ string, args []arg) wrapped {
		o := parseOpts(args, "BbcDEeFIiJLlmOopQRSWw", nil, false)
		if len(o.operands) == 0 || o.has('N') || o.has('O') {
			return wrapped{}
		}
		host := o.operands[0].show()
		if _, h, ok := strings.Cut(host, "@"); ok {
			host = h
		}
		rest := o.operands[1:]
		if len(rest) > 0 && rest[0].first() == "--" {
			rest = rest[1:]
		}
		if len(rest) == 0 {
			return wrapped{host: host, stdin: true}
		}
		return wrapped{joined: rest, host: host}
	},
	// script -c TEXT runs TEXT in a shell; without -c, an interactive
	// shell reading stdin.
	"script": func(_ string, args []arg) wrapped {
		o := parseOpts(args, "cEIOBTmo", []string{"command", "echo", "log-in", "log-out", "log-io", "log-timing", "logging-format", "output-limit"}, true)
		if c, ok := o.val('c'); ok {
			return wrapped{script: &c}
		}
		if c, ok := o.longVal("command"); ok {
			return wrapped{script: &c}
		}
		return wrapped{stdin: true}
	},
	"systemd-run": func(_ string, args []arg) wrapped {
		o := parseOpts(args, "pEMHuC", []string{"property", "setenv", "machine", "host", "unit", "description", "slice",
			"on-active", "on-boot", "on-startup", "on-unit-active", "on-unit-inactive", "on-calendar", "timer-property",
			"path-property", "socket-property", "uid", "gid", "nice", "working-directory", "service-type", "capsule", "expand-environment"}, false)
		return wrapped{inner: o.operands}
	},
	// at and batch read the job's shell text from stdin (or -f FILE).
	"at":    atWrapper,
	"batch": atWrapper,
	"parallel": func(_ string, args []arg) wrapped {
		o := parseOpts(args, "jSadEIiNnLlXsPm", []string{"jobs", "sshlogin", "arg-file", "colsep", "delimiter", "eof", "replace",
			"max-args", "max-lines", "max-procs", "joblog", "results", "tmpdir", "workdir", "timeout", "delay", "halt", "env", "basefile", "memfree", "load", "nice", "retries", "sshloginfile", "tag-string", "transfer-file", "return", "cleanup-cmd"}, false)
		return parallelCommand(o.operands)
	},
	"chrt": func(_ string, args []arg) wrapped {
		o := parseOpts(args, "TPD", []string{"sched-runtime", "sched-period", "sched-deadline"}, false)
		if o.has('p') || o.hasLong("pid") || len(o.operands) < 2 {
			return wrapped{}
		}
		return wrapped{inner: o.operands[1:]}
	},
	"nsenter": func(_ string, args []arg) wrapped {
		o := parseOpts(args, "tSGL", []string{"target", "setuid", "setgid", "user-parent", "env"}, false)
		if len(o.operands) == 0 {
			return wrapped{stdin: true}
		}
		return wrapped{inner: o.operands}
	},
	"unshare": func(_ string, args []arg) wrapped {
		o := parseOpts(args, "SGRwl", []string{"setuid", "setgid", "root", "wd", "propagation", "setgroups", "map-user", "map-group", "map-users", "map-groups", "load-interp"}, false)
		if len(o.operands) == 0 {
			return wrapped{stdin: true}
		}
		return wrapped{inner: o.operands}
	},
	"strace": func(_ string, args []arg) wrapped {
		o := parseOpts(args, "eoPpsuEabIOSXU", []string{"output", "attach", "string-limit", "user", "env", "columns", "trace", "signal", "status", "decode-fds", "trace-path", "summary-columns"}, false)
		return wrapped{inner: o.operands}
	},
	"ltrace": func(_ string, args []arg) wrapped {
		o := parseOpts(args, "eoplsuaADFnxX", []string{"output", "library", "config", "align", "indent"}, false)
		return wrapped{inner: o.operands}
	},
	"fakeroot": func(_ string, args []arg) wrapped {
		return wrapped{inner: parseOpts(args, "lsib", []string{"lib", "faked", "fd-base"}, false).operands}
	},
	"toybox": func(_ string, args []arg) wrapped {
		if len(args) > 0 && strings.HasPrefix(args[0].first(), "-") {
			return wrapped{}
		}
		return wrapped{inner: args}
	},
	"eatmydata": plainWrapper,
	"catchsegv": plainWrapper,
	"torsocks":  plainWrapper,
	// capsh runs bash with the arguments after --.
	"capsh": func(_ string, args []arg) wrapped {
		for i, a := range args {
			if a.first() == "--" {
				return wrapped{shell: args[i+1:]}
			}
		}
		return wrapped{}
	},
	// sg GROUP -c TEXT, or sg GROUP COMMAND..., which sg runs with /bin/sh -c.
	"sg": func(_ string, args []arg) wrapped {
		if len(args) < 2 {
			return wrapped{}
		}
		rest := args[1:]
		if rest[0].first() == "-c" && len(rest) > 1 {
			return wrapped{script: &rest[1]}
		}
		return wrapped{joined: rest}
	},
	// Wrappers whose options cannot be told from the command they run.
	"setpriv":          triesWrapper,
	"prlimit":          triesWrapper,
	"numactl":          triesWrapper,
	"firejail":         triesWrapper,
	"bwrap":            triesWrapper,
	"proot":            triesWrapper,
	"xvfb-run":         triesWrapper,
	"valgrind":         triesWrapper,
	"cgexec":           triesWrapper,
	"runcon":           triesWrapper,
	"proxychains":      triesWrapper,
	"proxychains4":     triesWrapper,
	"dbus-run-session": triesWrapper,
	"tsp":              triesWrapper,
	"nq":               triesWrapper,
	"daemonize":        triesWrapper,
	"chpst":            triesWrapper,
	"setuidgid":        triesWrapper,
	"envdir":           triesWrapper,
	"sem":              triesWrapper,
}

// atWrapper reads at and batch: the job comes from stdin unless -f names
// a file, and -l, -r, -d, -c list, remove or print jobs.
func atWrapper(_ string, args []arg) wrapped {
	o := parseOpts(args, "qft", nil, true)
	if o.has('f') || o.has('l') || o.has('r') || o.has('d') || o.has('c') {
		return wrapped{}
	}
	return wrapped{stdin: true}
}

// parallelCommand reads GNU parallel's command line: COMMAND ::: ARGS runs
// COMMAND once per argument ({} replaced by it, else appended); without
// ::: the arguments come from stdin, as for xargs.
func parallelCommand(operands []arg) wrapped {
	var cmd, inputs []arg
	seps := false
	for _, a := range operands {
		switch a.first() {
		case ":::", "::::", ":::+", "::::+":
			seps = true
			continue
		}
		if seps {
			inputs = append(inputs, a)
		} else {
			cmd = append(cmd, a)
		}
	}
	if len(cmd) == 0 {
		return wrapped{}
	}
	if !seps {
		if len(cmd) == 1 {
			return wrapped{script: &cmd[0]}
		}
		return wrapped{inner: cmd, xargs: true}
	}
	var tries [][]arg
	for _, in := range inputs {
		line := make([]arg, 0, len(cmd)+1)
		replaced := false
		for _, c := range cmd {
			if strings.Contains(c.first(), "{}") {
				replaced = true
				c = litArg(strings.ReplaceAll(c.first(), "{}", in.first()))
			}
			line = append(line, c)
		}
		if !replaced {
			line = append(line, in)
		}
		if len(line) == 1 {
			// parallel 'rm -rf {}' ::: /: one word is shell text.
			j := line[0]
			return wrapped{script: &j, tries: tries}
		}
		tries = append(tries, line)
		if len(tries) >= maxTries {
			break
		}
	}
	return wrapped{tries: tries}
}

// maxTries bounds the command lines tried for one wrapper.
const maxTries = 8

// triesWrapper tries every word that could start the command a wrapper
// runs: its option layout is not known, so a word may be an option's value
// or the command itself.
func triesWrapper(_ string, args []arg) wrapped {
	var tries [][]arg
	for i, a := range args {
		if v := a.first(); !strings.HasPrefix(v, "-") && !strings.Contains(v, "=") && v != "" {
			tries = append(tries, args[i:])
			if len(tries) >= maxTries {
				break
			}
		}
	}
	return wrapped{tries: tries}
}

// plainWrapper runs its arguments as a command line (after an optional --).
func plainWrapper(_ string, args []arg) wrapped {
	if len(args) > 0 && args[0].first() == "--" {
		args = args[1:]
	}
	return wrapped{inner: args}
}

// suWrapper reads su and runuser: -c text, or (runuser -u) a command line.
func suWrapper(name string, args []arg) wrapped {
	o := parseOpts(args, "cgGsuw", []string{"command", "group", "supp-group", "shell", "whitelist-environment", "user"}, true)
	if c, ok := o.val('c'); ok {
		return wrapped{script: &c}
	}
	if c, ok := o.longVal("command"); ok {
		return wrapped{script: &c}
	}
	if name == "runuser" && (o.has('u') || o.hasLong("user")) {
		return wrapped{inner: o.operands}
	}
	return wrapped{}
}

// unwrap sees through a wrapper. ok is false when name is not one.
func (s *scanner) unwrap(name string, args []arg) (w wrapped, ok bool) {
	u, ok := wrappers[name]
	if !ok {
		return wrapped{}, false
	}
	return u(name, args), true
}

// joinArgs joins words with spaces, as ssh and eval do.
func (s *scanner) joinArgs(as []arg) arg {
	out := one("")
	var src []string
	dyn := false
	for i, a := range as {
		if i > 0 {
			out = s.cross(out, one(" "))
		}
		out = s.cross(out, cands{vals: a.vals, dyn: a.dyn})
		src = append(src, a.source())
		dyn = dyn || a.dyn
	}
	j := arg{vals: out.vals, dyn: out.dyn || dyn, src: strings.Join(src, " ")}
	if len(as) == 1 {
		j.node = as[0].node
	}
	return j
}
