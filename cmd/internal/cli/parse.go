package cli

import "strings"

// execFlag is a long flag of `berth exec` that ParseExec knows: its kind
// as pflag names it ("string", "int" or "bool") and how it is stored.
type execFlag struct {
	kind string
	set  func(f *Flags, value string) bool
}

// execFlags are the flags of flagset.AddRun and flagset.AddNoDaemon; the
// test of package flagset holds the two together.
var execFlags = map[string]execFlag{
	"config":    {"string", func(f *Flags, v string) bool { f.ConfigPath = v; return true }},
	"backend":   {"string", func(f *Flags, v string) bool { f.Backend = v; return true }},
	"task":      {"string", func(f *Flags, v string) bool { f.Task = v; return true }},
	"workdir":   {"string", func(f *Flags, v string) bool { f.Workdir = v; return true }},
	"timeout":   {"int", func(f *Flags, v string) (ok bool) { f.Timeout, ok = plainInt(v); return ok }},
	"json":      {"bool", func(f *Flags, _ string) bool { f.JSON = true; return true }},
	"no-daemon": {"bool", func(f *Flags, _ string) bool { f.NoDaemon = true; return true }},
}

// ExecFlagKinds returns the long flags ParseExec knows, each with its
// pflag kind.
func ExecFlagKinds() map[string]string {
	kinds := make(map[string]string, len(execFlags))
	for name, fl := range execFlags {
		kinds[name] = fl.kind
	}
	return kinds
}

// ParseExec parses the arguments of `berth exec` (after "exec") as the
// engine's flag set does (pflag, flags and arguments interspersed, "--"
// ending the flags), for the front binary. It is deliberately narrow: it
// reports false for anything it is not certain to read the same way —
// a flag it does not know, a shorthand (-v, -h), "--json=false", a
// timeout that is not a plain decimal number, a flag value that starts
// with "-" — and the caller then leaves the call to the engine. The
// Task default is "" (the daemon's default key).
func ParseExec(args []string) (f Flags, command []string, ok bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return f, append(command, args[i+1:]...), true
		case strings.HasPrefix(a, "--"):
			name, value, hasValue := strings.Cut(a[2:], "=")
			fl, known := execFlags[name]
			if !known {
				return f, nil, false
			}
			if fl.kind == "bool" {
				if hasValue {
					return f, nil, false
				}
			} else if !hasValue {
				if i+1 == len(args) || strings.HasPrefix(args[i+1], "-") {
					return f, nil, false
				}
				i++
				value = args[i]
			}
			if !fl.set(&f, value) {
				return f, nil, false
			}
		case strings.HasPrefix(a, "-"):
			return f, nil, false
		default:
			command = append(command, a)
		}
	}
	return f, command, true
}

// plainInt reads a non-negative decimal number without a sign or leading
// zeros, of at most 9 digits.
func plainInt(s string) (int, bool) {
	if s == "" || len(s) > 9 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}
