package scan

import (
	"path"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// berthChecks are berth itself (the front and the engine) and Hermes: an
// agent must not lower the gate it runs behind, by writing the
// configuration that decides it or by running commands through a berth of
// its own.
func berthChecks() map[string]check {
	b := check{[]string{"write-berth-config", "nested-berth"}, func(s *scanner, c call) { s.berth(c) }}
	return map[string]check{
		"berth": b, "berth-engine": b,
		"hermes": {[]string{"write-berth-config"}, func(s *scanner, c call) { s.hermes(c) }},
	}
}

// berthReads are the berth commands that neither write its configuration
// nor run anything: the rest are a nested berth, or a configuration write.
var berthReads = map[string]bool{
	"": true, "help": true, "completion": true, "version": true, "doctor": true, "ps": true,
	"config path": true, "config get": true, "config keys": true, "config": true,
	"daemon status": true, "daemon": true, "env ls": true, "env list": true, "env": true,
}

// subcommand returns the first one or two words of a CLI's command line,
// options left out: "exec", "config set". ok is false when a word is only
// known at run time.
func subcommand(args []arg, groups ...string) (sub string, ok bool) {
	var words []string
	for _, a := range args {
		v, lit := a.lit()
		if !lit {
			return "", false
		}
		if v == "--" {
			break
		}
		if strings.HasPrefix(v, "-") {
			continue
		}
		words = append(words, v)
		if len(words) == 2 || !contains(groups, words[0]) {
			break
		}
	}
	return strings.Join(words, " "), true
}

// berth checks berth and berth-engine: a write to its configuration
// (config set, edit, unset ...) or any command that runs commands, serves,
// or stops or removes environments with approvals of its own.
func (s *scanner) berth(c call) {
	sub, ok := subcommand(c.args, "config", "daemon", "env")
	switch {
	case !ok:
		s.add("nested-berth", c.seg, c.name+" with a subcommand only known at run time")
	case berthReads[sub]:
	case strings.HasPrefix(sub, "config "):
		// The CLI writes the file itself: where it lands is known.
		at, located := []string(nil), false
		if p := s.ctx.ConfigPath; p != "" && path.IsAbs(p) {
			at, located = []string{s.followed(path.Clean(p), true)}, true
		}
		s.addAt("write-berth-config", c.seg, c.name+" "+sub, at, located)
	default:
		s.add("nested-berth", c.seg, c.name+" "+sub)
	}
}

// hermes checks the Hermes agent's CLI: its configuration holds the same
// approval settings (approvals.mode, command_allowlist) berth reads.
func (s *scanner) hermes(c call) {
	sub, ok := subcommand(c.args, "config")
	switch {
	case !ok:
		s.add("write-berth-config", c.seg, "hermes with a subcommand only known at run time")
	case sub == "config", sub == "config show", sub == "config get", sub == "config path", sub == "config list", sub == "config check":
	case strings.HasPrefix(sub, "config "):
		s.add("write-berth-config", c.seg, "hermes "+sub)
	}
}

// berthVar reports whether name is a variable that decides which
// configuration, approvals, home or daemon a berth started from the
// command obeys.
func berthVar(name string) bool {
	switch name {
	case "BERTH_CONFIG", "BERTH_HOME", "BERTH_OWNER", "BERTH_PARENT_POLICY", "BERTH_NO_DAEMON":
		return true
	}
	return strings.HasPrefix(name, "BERTH_APPROVALS_")
}

// setsVar notes that the command sets, exports or unsets the variable name.
func (s *scanner) setsVar(name, seg string) {
	if berthVar(name) {
		s.add("berth-env", seg, name)
	}
}

// setsVarAt is setsVar for the assignment n, shown as written (only read
// when name is one of berth's).
func (s *scanner) setsVarAt(name string, n syntax.Node) {
	if berthVar(name) {
		s.setsVar(name, Clip(s.nodeText(n)))
	}
}

// setsVarWord is setsVar for a word that is NAME=value or NAME (env -u,
// unset, export): a name only known at run time may be any of them.
func (s *scanner) setsVarWord(a arg, seg string) {
	for _, v := range a.vals {
		name, _, _ := strings.Cut(v, "=")
		s.setsVar(name, seg)
	}
	if name, _, _ := strings.Cut(a.source(), "="); a.dyn && !isName(name) {
		s.add("berth-env", seg, "a variable whose name is only known at run time: "+a.source())
	}
}

// namesBerth reports whether text (code for another interpreter, which
// berth does not read) names berth's home or configuration: such code may
// write them.
func (s *scanner) namesBerth(text string) bool {
	for _, p := range []string{s.ctx.BerthHome, s.ctx.ConfigPath} {
		if p != "" && strings.Contains(text, strings.TrimSuffix(p, "/")) {
			return true
		}
	}
	return strings.Contains(text, "/.berth/") || strings.Contains(text, "~/.berth") || strings.Contains(text, "BERTH_HOME") ||
		strings.Contains(text, "/.hermes/config.yaml") || strings.Contains(text, "~/.hermes/")
}
