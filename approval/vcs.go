package approval

import (
	"strings"
)

// vcsChecks is git: the subcommands that throw work away.
func vcsChecks() map[string]check {
	return map[string]check{
		"git": {[]string{"git-reset-hard", "git-clean-force", "git-push-force", "git-branch-force-delete"}, func(s *scanner, c call) {
			s.git(c.args, c.seg)
		}},
	}
}

// git checks destructive git subcommands.
func (s *scanner) git(args []arg, seg string) {
	i := 0
	for ; i < len(args); i++ {
		v := args[i].first()
		switch v {
		case "-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env", "--exec-path":
			i++
			continue
		}
		if strings.HasPrefix(v, "-") {
			continue
		}
		break
	}
	if i >= len(args) {
		return
	}
	sub := args[i].first()
	rest := args[i+1:]
	short := func(c string) bool {
		for _, a := range rest {
			v := a.first()
			if v == "--" {
				return false
			}
			if len(v) > 1 && v[0] == '-' && v[1] != '-' && strings.Contains(v[1:], c) {
				return true
			}
		}
		return false
	}
	long := func(names ...string) bool {
		for _, a := range rest {
			v := a.first()
			for _, n := range names {
				if v == n || strings.HasPrefix(v, n+"=") {
					return true
				}
			}
		}
		return false
	}
	switch sub {
	case "reset":
		if long("--hard") {
			s.add("git-reset-hard", seg, "")
		}
	case "clean":
		if (short("f") || long("--force")) && !short("n") && !long("--dry-run") {
			s.add("git-clean-force", seg, "")
		}
	case "push":
		force := short("f") || long("--force", "--force-with-lease", "--mirror")
		for _, a := range rest {
			if strings.HasPrefix(a.first(), "+") {
				force = true
			}
		}
		if force {
			s.add("git-push-force", seg, "")
		}
	case "branch":
		if short("D") || (short("d") || long("--delete")) && (short("f") || long("--force")) {
			s.add("git-branch-force-delete", seg, "")
		}
	}
}
