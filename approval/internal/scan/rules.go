package scan

// Level says how serious a rule is.
type Level int

const (
	// Dangerous rules need the human's approval (or an allowlist entry, or
	// approvals.mode off, or a sandboxed backend) before the command runs.
	Dangerous Level = iota + 1
	// Floor rules are the hardline floor: on a backend that can damage the
	// host (local, ssh, docker with host mounts) the command never runs,
	// whatever the mode or the allowlist say.
	Floor
)

// String returns "dangerous" or "floor".
func (l Level) String() string {
	switch l {
	case Floor:
		return "floor"
	case Dangerous:
		return "dangerous"
	}
	return "unknown"
}

// Rule is one thing the checker looks for.
type Rule struct {
	// ID is the stable name of the rule, usable in patterns as "rule:ID".
	ID string `json:"id"`
	// Level is Floor or Dangerous.
	Level Level `json:"-"`
	// Description says, for a human, what the rule catches and why it matters.
	Description string `json:"description"`
}

// The rules. Floor rules first.
var rules = []Rule{
	{"rm-system-dir", Floor, "recursive removal of / or a system directory (or the home directory, or everything in one of them)"},
	{"no-preserve-root", Floor, "--no-preserve-root turns off the one guard rm, chmod and chown have against destroying /"},
	{"chmod-system-dir", Floor, "recursive permission or ownership change of / or a system directory breaks the whole system"},
	{"mv-system-dir", Floor, "moving / or a system directory away breaks the whole system"},
	{"mkfs-device", Floor, "formatting a block device destroys everything on it"},
	{"disk-wipe", Floor, "wiping a disk's signatures, partition table or blocks destroys everything on it"},
	{"disk-write", Floor, "writing raw data onto a block device (or kernel memory) destroys the data on it"},
	{"sysrq", Floor, "writing to /proc/sysrq-trigger can reboot, crash or freeze the machine at once"},
	{"fork-bomb", Floor, "a function that calls itself twice in a pipeline or in the background multiplies processes until the machine stops"},
	{"kill-all", Floor, "kill with pid -1 (or killall5) signals every process the user may signal, the session and berth included"},
	{"power", Floor, "shutting down, rebooting, halting or switching runlevel takes the whole machine away"},
	{"dynamic-unchecked", Floor, "a command whose program is only known at run time (a function or alias an earlier call defined, $CMD), with more arguments than berth can check against the floor, might run anything the floor forbids"},
	{"too-large", Floor, "a command too large or too intricate for berth to check whole (longer than 4 MiB, more than 64 Ki words and operators, wrappers nested more than 128 deep, or more checking than its size allows) might run anything the floor forbids"},
	{"rm-recursive", Dangerous, "recursive removal deletes a whole tree, with no undo"},
	{"xargs-rm", Dangerous, "rm fed by xargs deletes whatever names arrive on its input, which nobody has seen"},
	{"find-delete", Dangerous, "find -delete or -exec rm deletes every file that matches, with no undo"},
	{"chmod-world-writable", Dangerous, "a world-writable mode (777, o+w) lets any user or process change the files"},
	{"chmod-recursive", Dangerous, "a recursive mode change touches every file in the tree"},
	{"chown-recursive-root", Dangerous, "a recursive chown to root takes the files away from their user"},
	{"dd-if", Dangerous, "dd with if= copies raw data and overwrites its output without asking"},
	{"kill-berth", Dangerous, "signalling berth's own processes (kill $PPID from the shell berth started, pkill berth, killall berth-engine) ends berth and every task's environment with it"},
	{"systemctl-stop", Dangerous, "stopping, disabling, masking or killing a system service can take the machine's services down"},
	{"kill-9-by-name", Dangerous, "pkill/killall with SIGKILL kills every matching process without letting it clean up"},
	{"pipe-to-shell", Dangerous, "running code fetched from the network (curl|sh, sh <(curl ...)) executes whatever the server sends"},
	{"shell-from-pipe", Dangerous, "a shell reading its script from another command's output runs code berth cannot see"},
	{"dynamic-command", Dangerous, "the program name (or eval/sh -c text) is only known at run time, so berth cannot check what runs"},
	{"unparsed", Dangerous, "berth could not parse the command, so it cannot check what it does"},
	{"too-deep", Dangerous, "commands nested deeper than berth follows (sh -c inside sh -c ..., more than 1000 levels of brackets in such text) or longer than it walks (20 000 commands) cannot be checked whole"},
	{"sql-destructive", Dangerous, "SQL DROP, TRUNCATE, or DELETE/UPDATE without WHERE destroys data in the database"},
	{"git-reset-hard", Dangerous, "git reset --hard throws away uncommitted changes"},
	{"git-clean-force", Dangerous, "git clean -f deletes untracked files (with -d, untracked directories), with no undo"},
	{"git-push-force", Dangerous, "a force push rewrites the remote branch's history for everyone"},
	{"git-branch-force-delete", Dangerous, "git branch -D deletes a branch even when its commits are not merged anywhere"},
	{"write-etc", Dangerous, "writing into /etc changes the system's configuration"},
	{"write-ssh", Dangerous, "writing into ~/.ssh changes who can log in and which hosts are trusted"},
	{"write-shell-rc", Dangerous, "writing a shell startup file (~/.bashrc, ~/.profile, ~/.zshrc ...) runs code in every future shell"},
	{"write-netrc", Dangerous, "~/.netrc holds login credentials for remote hosts"},
	{"write-dotenv", Dangerous, ".env files hold secrets and configuration"},
	{"write-git-hooks", Dangerous, "a repository's hooks run as the user at their next git commit, merge or checkout, outside any confinement"},
	{"write-git-config", Dangerous, "a repository's .git/config can name programs git runs (core.fsmonitor, core.hooksPath, aliases, filters) at the user's next git command"},
	{"link-sensitive", Dangerous, "a link to berth's files, ~/.ssh, a shell startup file, the home or a system directory lets later writes and removals through the link reach it"},
	{"write-berth-config", Dangerous, "berth's own configuration, .env and state decide what berth allows and where it runs"},
	{"nested-berth", Dangerous, "a nested berth runs commands under approvals of its own (and can stop or remove berth's environments)"},
	{"berth-env", Dangerous, "BERTH_* variables (approvals, config, home, owner, daemon) decide which configuration and approvals a berth started from the command obeys"},
}

var ruleByID = func() map[string]Rule {
	m := make(map[string]Rule, len(rules))
	for _, r := range rules {
		m[r.ID] = r
	}
	return m
}()

// Rules returns every rule, floor rules first.
func Rules() []Rule {
	out := make([]Rule, len(rules))
	copy(out, rules)
	return out
}

// LookupRule returns the rule with the given id.
func LookupRule(id string) (Rule, bool) {
	r, ok := ruleByID[id]
	return r, ok
}

// mustRule returns the rule with id; a typo here is a programming error.
func mustRule(id string) Rule {
	r, ok := ruleByID[id]
	if !ok {
		panic("approval: unknown rule " + id)
	}
	return r
}
