package scan

import (
	"strings"
)

// vcsChecks is git: the subcommands that throw work away.
func vcsChecks() map[string]check {
	return map[string]check{
		"git": {[]string{"git-reset-hard", "git-clean-force", "git-push-force", "git-branch-force-delete", "dynamic-command"}, func(s *scanner, c call) {
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
		case "-c":
			if i+1 < len(args) {
				s.gitConfig(args[i+1], seg)
			}
			i++
			continue
		case "-C", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env", "--exec-path":
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
	if known := gitLong[sub]; known != nil {
		rest = expandLong(rest, known) // git takes unique prefixes too: --force-w is --force-with-lease
	}
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
	case "config":
		// git config [--global] alias.x '!cmd': the command runs later.
		var words []arg
		for _, a := range rest {
			if !strings.HasPrefix(a.first(), "-") {
				words = append(words, a)
			}
		}
		if len(words) >= 2 {
			for _, k := range words[0].vals {
				s.gitConfigValue(k, words[1], seg)
			}
		}
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
			// --for, --forc: every option they could abbreviate forces.
			if name, _, _ := strings.Cut(a.first(), "="); len(name) >= len("--for") && strings.HasPrefix("--force", name) {
				force = true
			}
		}
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

// gitCommandKeys are git settings whose value is a shell command git runs.
var gitCommandKeys = map[string]bool{
	"core.pager": true, "core.editor": true, "core.sshcommand": true, "core.fsmonitor": true, "core.askpass": true,
	"sequence.editor": true, "diff.external": true, "credential.helper": true, "gpg.program": true,
	"uploadpack.packobjectshook": true, "core.hookspath": true,
}

// gitConfig checks a git -c KEY=VALUE: an alias starting with ! and the
// settings that name a command run shell text.
func (s *scanner) gitConfig(kv arg, seg string) {
	for _, v := range kv.vals {
		key, val, ok := strings.Cut(v, "=")
		if !ok {
			continue
		}
		s.gitConfigValue(key, arg{vals: []string{val}, dyn: kv.dyn, src: val}, seg)
	}
}

// gitConfigValue checks the value a git setting gets.
func (s *scanner) gitConfigValue(key string, val arg, seg string) {
	key = strings.ToLower(key)
	switch {
	case strings.HasPrefix(key, "alias."):
		for _, v := range val.vals {
			if text, ok := strings.CutPrefix(v, "!"); ok {
				s.scriptArg(arg{vals: []string{text}, dyn: val.dyn, src: text}, seg)
			}
		}
		if val.dyn {
			s.add("dynamic-command", seg, "a git alias only known at run time")
		}
	case gitCommandKeys[key] || strings.HasPrefix(key, "pager.") || strings.HasPrefix(key, "filter.") && (strings.HasSuffix(key, ".clean") || strings.HasSuffix(key, ".smudge") || strings.HasSuffix(key, ".process")):
		if key == "core.hookspath" {
			s.add("dynamic-command", seg, "git runs the hooks of another directory")
			return
		}
		s.scriptArg(val, seg)
	}
}

// gitLong are the long options of the git subcommands the checks read.
var gitLong = map[string][]string{
	"push": {"all", "branches", "prune", "mirror", "dry-run", "porcelain", "delete", "tags", "follow-tags", "signed", "no-signed",
		"atomic", "no-atomic", "push-option", "receive-pack", "exec", "force-with-lease", "no-force-with-lease", "force-if-includes",
		"no-force-if-includes", "force", "repo", "set-upstream", "thin", "no-thin", "quiet", "verbose", "progress", "no-progress",
		"recurse-submodules", "no-recurse-submodules", "verify", "no-verify", "ipv4", "ipv6"},
	"clean":  {"force", "dry-run", "quiet", "exclude", "interactive"},
	"reset":  {"hard", "soft", "mixed", "merge", "keep", "quiet", "no-quiet", "patch", "refresh", "no-refresh", "recurse-submodules", "no-recurse-submodules", "pathspec-from-file", "pathspec-file-nul", "intent-to-add"},
	"branch": {"delete", "force", "move", "copy", "list", "all", "remotes", "verbose", "quiet", "track", "no-track", "set-upstream-to", "unset-upstream", "contains", "no-contains", "merged", "no-merged", "column", "no-column", "sort", "points-at", "format", "color", "no-color", "abbrev", "no-abbrev", "ignore-case", "omit-empty", "show-current", "create-reflog", "edit-description", "recurse-submodules"},
}
