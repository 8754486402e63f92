package scan

import (
	"strings"
)

// fetchChecks are the download tools: where they write.
func fetchChecks() map[string]check {
	c := check{writeRules, func(s *scanner, c call) { s.download(c.name, c.args, c.seg) }}
	return map[string]check{"curl": c, "wget": c}
}

// writeRules are the rules a write to a file can report (sensitiveWrite).
var writeRules = []string{"disk-write", "sysrq", "write-etc", "write-ssh", "write-shell-rc", "write-netrc", "write-dotenv", "write-berth-config", "write-git-hooks", "write-git-config"}

var fetchers = map[string]bool{"curl": true, "wget": true, "fetch": true, "aria2c": true}

// download checks where curl and wget write.
func (s *scanner) download(name string, args []arg, seg string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		v := a.first()
		next := func() {
			if i+1 < len(args) {
				i++
				if args[i].first() != "-" {
					s.writeTarget(args[i], seg)
				}
			}
		}
		switch name {
		case "curl":
			switch {
			case v == "--output":
				next()
			case strings.HasPrefix(v, "--output="):
				s.writeTarget(suffix(a, len("--output=")), seg)
			case len(v) > 1 && v[0] == '-' && v[1] != '-' && strings.HasSuffix(v, "o"):
				next()
			case strings.HasPrefix(v, "-o") && len(v) > 2:
				s.writeTarget(suffix(a, 2), seg)
			}
		case "wget":
			switch {
			case v == "-O" || v == "--output-document" || v == "-P" || v == "--directory-prefix":
				next()
			case strings.HasPrefix(v, "--output-document=") || strings.HasPrefix(v, "--directory-prefix="):
				_, val, _ := strings.Cut(v, "=")
				if val != "-" {
					s.writeTarget(suffix(a, len(v)-len(val)), seg)
				}
			case (strings.HasPrefix(v, "-O") || strings.HasPrefix(v, "-P")) && len(v) > 2 && v != "-O-":
				s.writeTarget(suffix(a, 2), seg)
			}
		}
	}
}
