package approval

import "strings"

// wrapped is what a wrapper (sudo, env, xargs ...) runs.
type wrapped struct {
	inner  []arg // the command it runs
	xargs  bool  // more arguments arrive at run time
	script *arg  // shell text it runs (su -c, flock -c, watch, ssh)
	writes []arg // files it writes (sudoedit)
	sets   []arg // variables it sets (NAME=value) or unsets (NAME) for inner
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
			return wrapped{inner: o.operands[1:]}
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
		j := joinArgs(o.operands)
		return wrapped{script: &j}
	},
	"su":      suWrapper,
	"runuser": suWrapper,
	"ssh": func(_ string, args []arg) wrapped {
		o := parseOpts(args, "BbcDEeFIiJLlmOopQRSWw", nil, false)
		if len(o.operands) > 1 {
			j := joinArgs(o.operands[1:])
			return wrapped{script: &j}
		}
		return wrapped{}
	},
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
