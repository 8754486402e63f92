package cli

import "strings"

// execFlags are the flags of berth exec as ParseExec reads them: the rows
// of the flag table for the commands that run things and may go through
// the daemon (flagset.AddRun and flagset.AddNoDaemon), with the front's
// defaults.
func execFlags() map[string]Flag {
	m := map[string]Flag{}
	for _, fl := range Table("", "") {
		if fl.In("run") || fl.In("daemon") {
			m[fl.Name] = fl
		}
	}
	return m
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
	flags := execFlags()
	for _, fl := range flags {
		if fl.Default != "" {
			*fl.Field(&f).(*string) = fl.Default
		}
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return f, append(command, args[i+1:]...), true
		case strings.HasPrefix(a, "--"):
			name, value, hasValue := strings.Cut(a[2:], "=")
			fl, known := flags[name]
			if !known {
				return f, nil, false
			}
			if fl.Kind == "bool" {
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
			switch p := fl.Field(&f).(type) {
			case *string:
				*p = value
			case *int:
				if *p, ok = plainInt(value); !ok {
					return f, nil, false
				}
			case *bool:
				*p = true
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
