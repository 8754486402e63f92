package approval

import "github.com/a55dbaac/berth/approval/internal/scan"

// The shell analyser (internal/scan) reads a command and reports what it
// does as findings of rules; this package decides what to do about them.
// Its vocabulary is approval's API under these names.
type (
	// Context is where a command or write would happen (see scan.Context).
	Context = scan.Context
	// Finding is one rule that matched one simple command.
	Finding = scan.Finding
	// Rule is one thing the checker looks for.
	Rule = scan.Rule
	// Level says how serious a rule is.
	Level = scan.Level
)

const (
	// Dangerous rules need the human's approval (or an allowlist entry,
	// approvals.mode off, or a sandboxed backend) before the command runs.
	Dangerous = scan.Dangerous
	// Floor rules are the hardline floor: on a backend that can damage the
	// host the command never runs, whatever the mode or the allowlist say.
	Floor = scan.Floor
)

// Rules returns every rule, floor rules first.
func Rules() []Rule { return scan.Rules() }

// LookupRule returns the rule with the given id.
func LookupRule(id string) (Rule, bool) { return scan.LookupRule(id) }

// NativeResolve follows the symbolic links of an absolute path on this
// machine: Context.Resolve for environments whose files are this
// machine's (see scan.NativeResolve).
func NativeResolve(p string) string { return scan.NativeResolve(p) }

// NativeParentPID returns the parent of process pid on this machine, or
// "" (see scan.NativeParentPID): for Context.PPID.
func NativeParentPID(pid string) string { return scan.NativeParentPID(pid) }

// clip shortens text for a message.
func clip(s string) string { return scan.Clip(s) }

// mustRule returns the rule with id; a typo here is a programming error.
func mustRule(id string) Rule {
	r, ok := LookupRule(id)
	if !ok {
		panic("approval: unknown rule " + id)
	}
	return r
}
