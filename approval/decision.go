package approval

// Outcome is what was decided about a command.
type Outcome string

// The outcomes.
const (
	// Allowed: it ran without asking (allowlist, mode off, sandbox).
	Allowed Outcome = "allowed"
	// ApprovedOnce: the user approved this one run.
	ApprovedOnce Outcome = "approved_once"
	// ApprovedSession: the user approved it for the rest of the session
	// (now or earlier).
	ApprovedSession Outcome = "approved_session"
	// ApprovedAlways: the user approved it and it was added to
	// command_allowlist.
	ApprovedAlways Outcome = "approved_always"
	// Denied: the user said no, or did not answer in time.
	Denied Outcome = "denied"
	// Blocked: the floor, approvals.deny, or a rule that needed approval
	// when nobody could be asked.
	Blocked Outcome = "blocked"
	// Pending: the question went to the MCP client, which answers by
	// calling the tool again (multi round-trip). Nothing ran.
	Pending Outcome = "pending"
)

// By says who or what decided.
type By string

// The deciders.
const (
	ByFloor     By = "floor"     // the hardline floor
	ByDeny      By = "deny"      // an approvals.deny pattern
	ByRule      By = "rule"      // a dangerous rule, and nobody could be asked
	ByAllowlist By = "allowlist" // a command_allowlist pattern
	ByUser      By = "user"      // the human's answer
	ByTimeout   By = "timeout"   // no answer within approvals.timeout
	ByMode      By = "mode"      // approvals.mode off
	BySandbox   By = "sandbox"   // a sandboxed backend: nothing is asked
)

// Decision is the terminal result's "approval" field: what was decided
// about a command that matched a rule, by whom, and why. Commands that
// match no rule carry no decision.
type Decision struct {
	// Outcome is allowed, approved_once, approved_session,
	// approved_always, denied, blocked (or pending, never in a final result).
	Outcome Outcome `json:"decision"`
	// By is floor, deny, rule, allowlist, user, timeout, mode or sandbox.
	By By `json:"by"`
	// Rule is the id of the (first) rule that matched, Description its text.
	Rule        string `json:"rule,omitempty"`
	Description string `json:"description,omitempty"`
	// Rules lists every matched rule id when there is more than one.
	Rules []string `json:"rules,omitempty"`
	// Command is the simple command the rule matched.
	Command string `json:"command,omitempty"`
	// Pattern is the approvals.deny or command_allowlist entry involved
	// (for approved_always, the one added).
	Pattern string `json:"pattern,omitempty"`
	// Message is the text for the result's error when the command did not
	// run ("BLOCKED: ..."), or a note.
	Message string `json:"message,omitempty"`
}

// Allowed reports whether the command may run. A nil decision (nothing
// matched) allows.
func (d *Decision) Allowed() bool {
	if d == nil {
		return true
	}
	switch d.Outcome {
	case Allowed, ApprovedOnce, ApprovedSession, ApprovedAlways:
		return true
	}
	return false
}

// Err returns a *BlockedError when the command may not run, else nil.
func (d *Decision) Err() error {
	if d.Allowed() {
		return nil
	}
	return &BlockedError{Decision: d}
}

// BlockedError is the error of a command that did not run because of its
// approval decision; its text is the decision's BLOCKED message.
type BlockedError struct {
	Decision *Decision
}

func (e *BlockedError) Error() string { return e.Decision.Message }

// newDecision fills a decision from the findings that decided.
func newDecision(o Outcome, by By, need []Finding, pattern, msg string) *Decision {
	d := &Decision{Outcome: o, By: by, Pattern: pattern, Message: msg}
	if len(need) > 0 {
		d.Rule = need[0].Rule.ID
		d.Description = need[0].Rule.Description
		d.Command = need[0].Command
	}
	seen := map[string]bool{}
	for _, f := range need {
		if !seen[f.Rule.ID] {
			seen[f.Rule.ID] = true
			d.Rules = append(d.Rules, f.Rule.ID)
		}
	}
	if len(d.Rules) < 2 {
		d.Rules = nil
	}
	return d
}
