package approval

import (
	"slices"
	"strings"
)

// Pattern keys: the names approvals are remembered and saved under, as in
// the Hermes agent's approval flow. There an answer of "session" approves
// the matched pattern (its key) for the rest of the session, and "always"
// adds the key to command_allowlist; the keys are the patterns'
// descriptions ("recursive delete", "git force push (rewrites remote
// history)"), or, in older configurations, a piece of the pattern's regular
// expression. berth answers the same way: a key covers the findings of one
// rule (or, where Hermes is finer, some of them), and a command_allowlist
// entry that is a key — berth's or Hermes' — allows them.
//
// Rules whose approval would reopen the gate itself, or that say only that
// berth cannot see what runs, are never approved as a whole: an answer
// covers that one command (see narrowRules).

// patternKey maps a key to the findings it covers.
type patternKey struct {
	key   string
	rule  string
	match func(f Finding) bool // narrower than the rule, when set
	saved bool                 // the key berth writes for an "always" answer
}

// narrowRules are approved one command at a time: "session" covers the
// same command again, and "always" is never offered. Approving them as a
// rule would let every later command of their kind through unseen: what a
// dynamic command, a shell fed from a pipe or a text past berth's bounds
// runs is not known, and a berth config write, a nested berth or a BERTH_*
// variable lowers the gate itself, a signal to berth's own processes
// ends every task's environment, and a repository's hooks and config are
// code the user's own git runs later, unconfined: each such write is
// seen.
var narrowRules = map[string]bool{
	"too-deep": true, "unparsed": true, "dynamic-command": true, "shell-from-pipe": true,
	"write-berth-config": true, "nested-berth": true, "berth-env": true, "kill-berth": true,
	"write-git-hooks": true, "write-git-config": true,
}

// sqlKind returns the first word of the statement a sql-destructive
// finding names.
func sqlKind(f Finding) string {
	w, _, _ := strings.Cut(strings.TrimSpace(f.Detail), " ")
	return w
}

func sqlIs(kinds ...string) func(Finding) bool {
	return func(f Finding) bool { return slices.Contains(kinds, sqlKind(f)) }
}

func findExec(f Finding) bool   { return strings.HasPrefix(f.Detail, "-exec") }
func findDelete(f Finding) bool { return !findExec(f) }

// patternKeys lists every key berth knows: first the one berth saves for
// each rule (Hermes' own description where Hermes has the same pattern, so
// the entry means the same to both), then the other Hermes descriptions
// and the legacy regex-derived keys that older Hermes configurations hold.
// Keys of Hermes patterns that are berth's floor are not listed: the floor
// is never approved.
var patternKeys = []patternKey{
	{"recursive delete", "rm-recursive", nil, true},
	{"xargs with rm", "xargs-rm", nil, true},
	{"find -delete", "find-delete", findDelete, true},
	{"find -exec/-execdir rm", "find-delete", findExec, true},
	{"world/other-writable permissions", "chmod-world-writable", nil, true},
	{"recursive permission change", "chmod-recursive", nil, true},
	{"recursive chown to root", "chown-recursive-root", nil, true},
	{"disk copy", "dd-if", nil, true},
	{"stop/restart system service", "systemctl-stop", nil, true},
	{"force kill processes", "kill-9-by-name", nil, true},
	{"pipe remote content to shell", "pipe-to-shell", nil, true},
	{"SQL DROP", "sql-destructive", sqlIs("DROP", "ALTER"), true},
	{"SQL DELETE without WHERE", "sql-destructive", sqlIs("DELETE", "WITH"), true},
	{"SQL UPDATE without WHERE", "sql-destructive", sqlIs("UPDATE"), true},
	{"SQL TRUNCATE", "sql-destructive", sqlIs("TRUNCATE"), true},
	{"git reset --hard (destroys uncommitted changes)", "git-reset-hard", nil, true},
	{"git clean with force (deletes untracked files)", "git-clean-force", nil, true},
	{"git force push (rewrites remote history)", "git-push-force", nil, true},
	{"git branch force delete", "git-branch-force-delete", nil, true},
	{"overwrite system config", "write-etc", nil, true},
	{"write to ~/.ssh", "write-ssh", nil, true},
	{"write to a shell startup file", "write-shell-rc", nil, true},
	{"write to ~/.netrc", "write-netrc", nil, true},
	{"overwrite project env/config file", "write-dotenv", nil, true},
	{"link to a sensitive path", "link-sensitive", nil, true},

	// Hermes' other descriptions of the same patterns.
	{"recursive delete (long flag)", "rm-recursive", nil, false},
	{"recursive delete (flags after operands)", "rm-recursive", nil, false},
	{"recursive world/other-writable (long flag)", "chmod-world-writable", nil, false},
	{"recursive chown to root (long flag)", "chown-recursive-root", nil, false},
	{"force kill processes (killall -KILL)", "kill-9-by-name", nil, false},
	{"force kill processes (killall -s KILL)", "kill-9-by-name", nil, false},
	{"execute remote script via process substitution", "pipe-to-shell", nil, false},
	{"execute remote content via command substitution", "pipe-to-shell", nil, false},
	{"git force push short flag (rewrites remote history)", "git-push-force", nil, false},
	{"git branch force delete (long flags)", "git-branch-force-delete", nil, false},
	{"git branch force delete (long flags, force-first)", "git-branch-force-delete", nil, false},
	{"copy/move file into system config path", "write-etc", nil, false},
	{"copy/move file into /etc/", "write-etc", nil, false},
	{"in-place edit of system config", "write-etc", nil, false},
	{"in-place edit of system config (long flag)", "write-etc", nil, false},
	{"overwrite project env/config via tee", "write-dotenv", nil, false},
	{"overwrite project env/config via redirection", "write-dotenv", nil, false},

	// Legacy keys: the piece of the pattern's regular expression older
	// Hermes versions saved.
	{`rm\s+-[^\s]*r`, "rm-recursive", nil, false},
	{`rm\s+--recursive`, "rm-recursive", nil, false},
	{`chmod\s+(-[^\s]*\s+)*(777|666|o\+[rwx]*w|a\+[rwx]*w)`, "chmod-world-writable", nil, false},
	{`chown\s+(-[^\s]*)?R\s+root`, "chown-recursive-root", nil, false},
	{`dd\s+.*if=`, "dd-if", nil, false},
	{`systemctl\s+(stop|restart|disable|mask)`, "systemctl-stop", nil, false},
	{`systemctl\s+(-[^\s]+\s+)*(stop|restart|disable|mask)`, "systemctl-stop", nil, false},
	{`pkill\s+-9`, "kill-9-by-name", nil, false},
	{`DROP\s+(TABLE|DATABASE)`, "sql-destructive", sqlIs("DROP", "ALTER"), false},
	{`DELETE\s+FROM`, "sql-destructive", sqlIs("DELETE", "WITH"), false},
	{`TRUNCATE\s+(TABLE)?\s*\w`, "sql-destructive", sqlIs("TRUNCATE"), false},
	{`git\s+reset\s+--hard`, "git-reset-hard", nil, false},
	{`git\s+reset\s+--h(?:a(?:r(?:d)?)?)?`, "git-reset-hard", nil, false},
	{`git\s+clean\s+-[^\s]*f`, "git-clean-force", nil, false},
	{`git\s+branch\s+-D`, "git-branch-force-delete", nil, false},
	{`git\s+branch\s+(?-i:-D)`, "git-branch-force-delete", nil, false},
	{`xargs\s+.*`, "xargs-rm", nil, false},
	{`find\b.*-delete`, "find-delete", findDelete, false},
}

// keyByName indexes patternKeys.
var keyByName = func() map[string]patternKey {
	m := make(map[string]patternKey, len(patternKeys))
	for _, k := range patternKeys {
		if _, dup := m[k.key]; dup {
			panic("approval: pattern key listed twice: " + k.key)
		}
		m[k.key] = k
	}
	return m
}()

// keyOf returns the key an approval of f is remembered and saved under,
// and whether it may cover more than this one command (a rule of
// narrowRules, or one without a key, covers only its command).
func keyOf(f Finding) (key string, wide bool) {
	if narrowRules[f.Rule.ID] || f.Command == "" {
		return "", false
	}
	for _, k := range patternKeys {
		if k.saved && k.rule == f.Rule.ID && (k.match == nil || k.match(f)) {
			return k.key, true
		}
	}
	return "", false
}
