package approval

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/a55dbaac/berth/approval/internal/scan"
)

// Pattern is one entry of approvals.deny or command_allowlist.
//
// Three forms:
//
//   - "rule:ID" matches every finding of the rule ID (see Rules), e.g.
//     "rule:git-push-force" or "rule:rm-recursive".
//   - a pattern key, the form the Hermes agent saves an "always" answer in
//     and berth too: "recursive delete", "git force push (rewrites remote
//     history)", "SQL DROP", or an older Hermes version's regex-derived
//     key such as `rm\s+-[^\s]*r`. It matches the findings of the pattern
//     it names (see patternKeys).
//   - anything else is a glob matched against each normalized simple
//     command (see Finding.Command): wrappers (sudo, env, nice ...)
//     removed, the program by its base name, quotes resolved, words joined
//     by one space, output redirections appended. '*' matches any run of
//     characters (spaces and slashes included), '?' one character,
//     "[abc]", "[a-z]" and "[!abc]" one character of a class, and '\'
//     makes the next character literal. Whitespace runs in the pattern
//     count as one space; the match is on the whole command, case-sensitive.
//     File-tool writes are matched as "write_file <absolute path>".
//
// Examples: "git push --force*", "rm -rf /srv/cache/*", "* > /etc/hosts",
// "write_file */.env", "curl * | sh" (a deny pattern is also matched
// against the whole command line).
type Pattern struct {
	raw  string
	rule string
	key  *patternKey
	re   *regexp.Regexp
}

// String returns the pattern as written.
func (p Pattern) String() string { return p.raw }

// ParsePattern parses one pattern; a malformed one is an error that names it
// and says what is wrong.
func ParsePattern(s string) (Pattern, error) {
	norm := strings.Join(strings.Fields(s), " ")
	if norm == "" {
		return Pattern{}, fmt.Errorf("pattern %q is empty: give a glob such as \"git push --force*\" or a rule such as \"rule:git-push-force\"", s)
	}
	for _, k := range []string{s, strings.TrimSpace(s), norm} {
		if pk, ok := keyByName[k]; ok {
			return Pattern{raw: s, key: &pk}, nil
		}
	}
	if id, ok := strings.CutPrefix(norm, "rule:"); ok {
		id = strings.TrimSpace(id)
		if _, known := LookupRule(id); !known {
			return Pattern{}, fmt.Errorf("pattern %q: no rule %q (rules: %s)", s, id, strings.Join(ruleIDs(), ", "))
		}
		return Pattern{raw: s, rule: id}, nil
	}
	re, err := scan.GlobRegexp(norm)
	if err != nil {
		return Pattern{}, fmt.Errorf("pattern %q: %v", s, err)
	}
	return Pattern{raw: s, re: re}, nil
}

// EscapeGlob returns a pattern that matches s literally.
func EscapeGlob(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// matchText reports whether the pattern (a glob) matches a command text.
func (p Pattern) matchText(text string) bool {
	if p.re == nil {
		return false
	}
	return p.re.MatchString(strings.Join(strings.Fields(text), " "))
}

// matchFinding reports whether the pattern covers a finding.
func (p Pattern) matchFinding(f Finding) bool {
	if p.rule != "" {
		return p.rule == f.Rule.ID
	}
	if p.key != nil {
		return p.key.rule == f.Rule.ID && (p.key.match == nil || p.key.match(f))
	}
	return p.matchText(f.Command)
}

// parsePatterns parses a list, naming the config key in errors.
func parsePatterns(key string, list []string) ([]Pattern, []error) {
	var out []Pattern
	var errs []error
	for i, s := range list {
		p, err := ParsePattern(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s[%d]: %w", key, i, err))
			continue
		}
		out = append(out, p)
	}
	return out, errs
}

// ruleIDs returns the ids of the rules, sorted, for error messages.
func ruleIDs() []string {
	var ids []string
	for _, r := range Rules() {
		ids = append(ids, r.ID)
	}
	sort.Strings(ids)
	return ids
}
