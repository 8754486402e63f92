package cli

import "strings"

// ExecFlags names the long flags of `berth exec` that ParseExec knows, with
// their kinds ("string", "int" or "bool"): those of flagset.AddRun and
// flagset.AddNoDaemon. Its test holds the two together.
var ExecFlags = map[string]string{
	"config": "string", "backend": "string", "task": "string", "workdir": "string",
	"timeout": "int", "json": "bool", "no-daemon": "bool",
}

// set stores value into the flag name of f.
func (f *Flags) set(name, value string) bool {
	switch name {
	case "config":
		f.ConfigPath = value
	case "backend":
		f.Backend = value
	case "task":
		f.Task = value
	case "workdir":
		f.Workdir = value
	case "timeout":
		n, ok := plainInt(value)
		if !ok {
			return false
		}
		f.Timeout = n
	case "json":
		f.JSON = true
	case "no-daemon":
		f.NoDaemon = true
	default:
		return false
	}
	return true
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
			kind, known := ExecFlags[name]
			if !known {
				return f, nil, false
			}
			if kind == "bool" {
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
			if !f.set(name, value) {
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
