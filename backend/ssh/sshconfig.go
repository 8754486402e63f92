package ssh

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The subset of ssh_config(5) the backend honours. Every other directive met
// in a matching block is listed in a debug log.
var supportedDirectives = map[string]bool{
	"host":                  true,
	"match":                 true, // only "Match all"; other criteria skip the block
	"include":               true,
	"hostname":              true,
	"user":                  true,
	"port":                  true,
	"identityfile":          true,
	"identitiesonly":        true,
	"userknownhostsfile":    true,
	"hashknownhosts":        true,
	"stricthostkeychecking": true,
	"connecttimeout":        true,
	"serveraliveinterval":   true,
	"serveralivecountmax":   true,
	"proxyjump":             true,
	"proxycommand":          true,
}

// SupportedConfigDirectives lists the ~/.ssh/config directives the backend
// honours, in lower case. Others are ignored and reported in a debug log.
func SupportedConfigDirectives() []string {
	out := make([]string, 0, len(supportedDirectives))
	for k := range supportedDirectives {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// hostSettings is what ~/.ssh/config says about one host. For every
// directive the first value obtained wins, as in OpenSSH; IdentityFile and
// UserKnownHostsFile accumulate.
type hostSettings struct {
	values        map[string]string // lower-cased directive → first value
	identityFiles []string
	knownHosts    []string
	unsupported   []string // directives met in matching blocks and ignored
}

func (h *hostSettings) get(key string) string { return h.values[key] }

// configLine is one directive of a config file.
type configLine struct {
	key  string // lower case
	args []string
	raw  string // the text after the keyword (and its '='), as written
	file string
	line int
}

const maxIncludeDepth = 16

// readSSHConfig parses path (a missing file is not an error) and returns the
// settings that apply to host. sshDir is the directory relative Include paths
// are resolved against.
func readSSHConfig(path, sshDir, host string, log *slog.Logger) (*hostSettings, error) {
	hs := &hostSettings{values: map[string]string{}}
	seenUnsupported := map[string]bool{}
	if err := applyConfigFile(path, sshDir, strings.ToLower(host), hs, seenUnsupported, 0, log); err != nil {
		return nil, err
	}
	return hs, nil
}

func applyConfigFile(path, sshDir, host string, hs *hostSettings, seen map[string]bool, depth int, log *slog.Logger) error {
	if depth > maxIncludeDepth {
		return fmt.Errorf("ssh config %s: Include nested more than %d deep", path, maxIncludeDepth)
	}
	lines, err := parseConfigFile(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	active := true // directives before the first Host line apply to every host
	for _, l := range lines {
		switch l.key {
		case "host":
			active = matchHostPatterns(host, l.args)
			continue
		case "match":
			if len(l.args) == 1 && strings.EqualFold(l.args[0], "all") {
				active = true
			} else {
				active = false
				log.Debug("ssh config: Match blocks are not supported; block skipped",
					"file", l.file, "line", l.line, "criteria", strings.Join(l.args, " "))
			}
			continue
		}
		if !active {
			continue
		}
		if l.key == "include" {
			for _, pat := range l.args {
				pat = expandTilde(pat, filepath.Dir(sshDir))
				if !filepath.IsAbs(pat) {
					pat = filepath.Join(sshDir, pat)
				}
				matches, err := filepath.Glob(pat)
				if err != nil {
					return fmt.Errorf("ssh config %s:%d: Include %q: %w", l.file, l.line, pat, err)
				}
				sort.Strings(matches)
				for _, m := range matches {
					if err := applyConfigFile(m, sshDir, host, hs, seen, depth+1, log); err != nil {
						return err
					}
				}
			}
			continue
		}
		if !supportedDirectives[l.key] {
			if !seen[l.key] {
				seen[l.key] = true
				hs.unsupported = append(hs.unsupported, l.key)
				log.Debug("ssh config: directive not supported; ignored",
					"directive", l.key, "file", l.file, "line", l.line)
			}
			continue
		}
		if len(l.args) == 0 {
			return fmt.Errorf("ssh config %s:%d: %s needs a value", l.file, l.line, l.key)
		}
		switch l.key {
		case "proxyjump", "proxycommand":
			// The two compete: whichever comes first wins, as in OpenSSH.
			_, jump := hs.values["proxyjump"]
			_, command := hs.values["proxycommand"]
			if jump || command {
				continue
			}
			if l.key == "proxyjump" {
				if len(l.args) != 1 {
					return fmt.Errorf("ssh config %s:%d: ProxyJump takes one comma-separated list of [user@]host[:port] without spaces, got %q", l.file, l.line, l.raw)
				}
				hs.values[l.key] = l.args[0]
			} else {
				// The command goes to /bin/sh -c as written, quotes included.
				hs.values[l.key] = l.raw
			}
		case "identityfile":
			hs.identityFiles = append(hs.identityFiles, l.args[0])
		case "userknownhostsfile":
			if _, done := hs.values[l.key]; !done {
				hs.values[l.key] = strings.Join(l.args, " ")
				hs.knownHosts = append(hs.knownHosts, l.args...)
			}
		default:
			if _, done := hs.values[l.key]; !done {
				hs.values[l.key] = l.args[0]
			}
		}
	}
	return nil
}

// parseConfigFile splits a config file into directives. Arguments may be
// double-quoted; "key=value" and "key value" are both accepted.
func parseConfigFile(path string) ([]configLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []configLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	n := 0
	for sc.Scan() {
		n++
		text := strings.TrimSpace(sc.Text())
		if text == "" || text[0] == '#' {
			continue
		}
		// The keyword ends at whitespace or '='.
		i := strings.IndexAny(text, " \t=")
		var key, rest string
		if i < 0 {
			key = text
		} else {
			key, rest = text[:i], strings.TrimLeft(text[i:], " \t")
			if strings.HasPrefix(rest, "=") {
				rest = strings.TrimLeft(rest[1:], " \t")
			}
		}
		args, err := splitConfigArgs(rest)
		if err != nil {
			return nil, fmt.Errorf("ssh config %s:%d: %w", path, n, err)
		}
		out = append(out, configLine{key: strings.ToLower(key), args: args, raw: rest, file: path, line: n})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("ssh config %s: %w", path, err)
	}
	return out, nil
}

func splitConfigArgs(s string) ([]string, error) {
	var args []string
	for {
		s = strings.TrimLeft(s, " \t")
		if s == "" || s[0] == '#' {
			return args, nil
		}
		if s[0] == '"' {
			end := strings.IndexByte(s[1:], '"')
			if end < 0 {
				return nil, fmt.Errorf("unterminated quote in %q", s)
			}
			args = append(args, s[1:1+end])
			s = s[end+2:]
			continue
		}
		end := strings.IndexAny(s, " \t")
		if end < 0 {
			end = len(s)
		}
		args = append(args, s[:end])
		s = s[end:]
	}
}

// matchHostPatterns reports whether host matches a Host line: at least one
// positive pattern matches and no negated ("!pat") pattern does. Patterns
// may be separated by spaces or commas.
func matchHostPatterns(host string, args []string) bool {
	matched := false
	for _, a := range args {
		for _, p := range strings.Split(a, ",") {
			if p == "" {
				continue
			}
			neg := strings.HasPrefix(p, "!")
			if neg {
				p = p[1:]
			}
			if wildcardMatch(strings.ToLower(p), host) {
				if neg {
					return false
				}
				matched = true
			}
		}
	}
	return matched
}

// wildcardMatch matches s against a pattern where '*' matches any run of
// characters and '?' exactly one, as in ssh_config(5) PATTERNS.
func wildcardMatch(pat, s string) bool {
	// Iterative matcher with backtracking to the last '*'.
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pat) && (pat[p] == '?' || pat[p] == s[i]):
			p++
			i++
		case p < len(pat) && pat[p] == '*':
			star, mark = p, i
			p++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pat) && pat[p] == '*' {
		p++
	}
	return p == len(pat)
}

// expandTilde replaces a leading "~" or "~/" with home.
func expandTilde(p, home string) string {
	if p == "~" {
		return home
	}
	if strings.HasPrefix(p, "~/") {
		return filepath.Join(home, p[2:])
	}
	return p
}

// expandTokens expands the ssh_config TOKENS berth supports: %% %d (local
// home) %h (remote host name) %n (host as given) %p (port) %r (remote user)
// %u (local user). Unknown tokens are an error, as in OpenSSH.
func expandTokens(s string, tok map[byte]string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 >= len(s) {
			return "", fmt.Errorf("ssh config: trailing %% in %q", s)
		}
		i++
		if s[i] == '%' {
			b.WriteByte('%')
			continue
		}
		v, ok := tok[s[i]]
		if !ok {
			return "", fmt.Errorf("ssh config: token %%%c in %q not supported", s[i], s)
		}
		b.WriteString(v)
	}
	return b.String(), nil
}
