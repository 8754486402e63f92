package approval

import (
	"errors"
	"fmt"
	"strings"

	"github.com/a55dbaac/berth/approval/internal/scan"
	"github.com/a55dbaac/berth/internal/shparse"
)

// Configuration keys the approval model reads (the lead's config package
// owns them; the names are used in messages that tell the user what to set).
const (
	KeyMode      = "approvals.mode"
	KeyDeny      = "approvals.deny"
	KeyAllowlist = "command_allowlist"
	KeyTimeout   = "approvals.timeout"
)

// Mode is approvals.mode.
type Mode string

const (
	// ModeManual asks the human before a dangerous command runs (default).
	ModeManual Mode = "manual"
	// ModeOff runs dangerous commands without asking; the floor and
	// approvals.deny still hold.
	ModeOff Mode = "off"
)

// ParseMode parses approvals.mode; "" is manual. "smart" (an LLM judging
// each command, in the reference) is not supported and says so.
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "manual":
		return ModeManual, nil
	case "off":
		return ModeOff, nil
	case "smart":
		return "", fmt.Errorf("%s %q: berth does not support smart approvals (an LLM judging each command); use manual (ask the user) or off (never ask; the hardline floor and %s still hold)", KeyMode, s, KeyDeny)
	}
	return "", fmt.Errorf("%s %q: use manual (ask the user before dangerous commands, the default) or off (never ask; the hardline floor and %s still hold)", KeyMode, s, KeyDeny)
}

// Policy is the user's approval configuration: the mode and the deny and
// allow patterns. It is immutable; WithAllowed returns a new one.
type Policy struct {
	mode  Mode
	deny  []Pattern
	allow []Pattern
}

// NewPolicy builds a policy from approvals.mode, approvals.deny and
// command_allowlist. Every malformed entry is reported, each naming its
// key, index and text.
func NewPolicy(mode string, deny, allow []string) (*Policy, error) {
	m, err := ParseMode(mode)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	d, derrs := parsePatterns(KeyDeny, deny)
	a, aerrs := parsePatterns(KeyAllowlist, allow)
	errs = append(append(errs, derrs...), aerrs...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &Policy{mode: m, deny: d, allow: a}, nil
}

// DefaultPolicy is manual mode with no user patterns.
func DefaultPolicy() *Policy { return &Policy{mode: ModeManual} }

// Mode returns the mode.
func (p *Policy) Mode() Mode { return p.mode }

// Deny returns approvals.deny as written.
func (p *Policy) Deny() []string { return raws(p.deny) }

// Allowlist returns command_allowlist as written.
func (p *Policy) Allowlist() []string { return raws(p.allow) }

func raws(ps []Pattern) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.raw
	}
	return out
}

// WithAllowed returns a copy of the policy with patterns added to the
// allowlist (those already there are not repeated).
func (p *Policy) WithAllowed(patterns ...string) (*Policy, error) {
	q := &Policy{mode: p.mode, deny: p.deny, allow: append([]Pattern(nil), p.allow...)}
	have := map[string]bool{}
	for _, a := range p.allow {
		have[a.raw] = true
	}
	for _, s := range patterns {
		if have[s] {
			continue
		}
		pat, err := ParsePattern(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", KeyAllowlist, err)
		}
		have[s] = true
		q.allow = append(q.allow, pat)
	}
	return q, nil
}

// Action is what a verdict says to do.
type Action int

const (
	// Allow runs the command.
	Allow Action = iota + 1
	// Ask needs the human's approval first.
	Ask
	// Block refuses the command.
	Block
)

// String returns "allow", "ask" or "block".
func (a Action) String() string {
	switch a {
	case Allow:
		return "allow"
	case Ask:
		return "ask"
	case Block:
		return "block"
	}
	return "unknown"
}

// Verdict is the result of checking a command or a write against a policy.
type Verdict struct {
	// Action is Allow, Ask or Block.
	Action Action
	// By says what decided an Allow or Block: ByFloor, ByDeny, ByAllowlist,
	// ByMode, BySandbox, or "" when no rule matched at all.
	By By
	// Subject is what was checked: the command, or "write_file <path>".
	Subject string
	// Findings are every rule that matched.
	Findings []Finding
	// Need are the findings that decided: the floor findings of a Block by
	// floor, the findings needing approval for Ask, the matched finding(s)
	// otherwise.
	Need []Finding
	// Pattern is the approvals.deny or command_allowlist entry that decided.
	Pattern string
	// Segments are the normalized simple commands the subject contains.
	Segments []string
	// whole is the command as given (Subject is shortened).
	whole string
}

// Check checks a shell command: it parses it, walks every simple command
// (through wrappers, sh -c, eval, $(...), pipelines ...) and applies the
// rules, approvals.deny, the floor, the allowlist and the mode, in that
// order.
func (p *Policy) Check(command string, c Context) Verdict {
	return p.CheckScript(shparse.New(command), c)
}

// CheckScript is Check for a command already parsed (shparse.New): the
// caller's one parse of the command serves the check too.
func (p *Policy) CheckScript(sc *shparse.Script, c Context) Verdict {
	findings, segments := scan.Scan(sc, c)
	return p.judge(clip(sc.Text), findings, segments, sc.Text, c)
}

// CheckWrite checks a write by the file tools (write_file, patch) to path,
// against the same sensitive paths as shell writes.
func (p *Policy) CheckWrite(file string, c Context) Verdict {
	findings, seg := scan.ScanWrite(file, c)
	return p.judge(seg, findings, []string{seg}, seg, c)
}

// judge turns findings into a verdict.
func (p *Policy) judge(subject string, findings []Finding, segments []string, whole string, c Context) Verdict {
	findings = confinedFindings(c, findings)
	v := Verdict{Subject: subject, Findings: findings, Segments: segments, whole: whole}
	for _, d := range p.deny {
		hit := d.matchText(whole)
		var need []Finding
		for _, f := range findings {
			if d.matchFinding(f) {
				hit = true
				need = append(need, f)
			}
		}
		for _, seg := range segments {
			if d.matchText(seg) {
				hit = true
			}
		}
		if hit {
			v.Action, v.By, v.Pattern, v.Need = Block, ByDeny, d.raw, need
			return v
		}
	}
	if !c.Sandboxed {
		var floor []Finding
		for _, f := range findings {
			if f.Rule.Level == Floor {
				floor = append(floor, f)
			}
		}
		if len(floor) > 0 {
			v.Action, v.By, v.Need = Block, ByFloor, floor
			return v
		}
	}
	if len(findings) == 0 {
		v.Action = Allow
		return v
	}
	if c.Sandboxed {
		v.Action, v.By, v.Need = Allow, BySandbox, findings
		return v
	}
	var rest []Finding
	var used string
	for _, f := range findings {
		covered := false
		for _, a := range p.allow {
			if a.matchFinding(f) {
				covered = true
				if used == "" {
					used = a.raw
				}
				break
			}
		}
		if !covered {
			rest = append(rest, f)
		}
	}
	switch {
	case len(rest) == 0:
		v.Action, v.By, v.Need, v.Pattern = Allow, ByAllowlist, findings, used
	case p.mode == ModeOff:
		v.Action, v.By, v.Need = Allow, ByMode, rest
	default:
		v.Action, v.Need = Ask, rest
	}
	return v
}

// Decision returns the decision of a verdict that needs nobody's answer
// (Allow or Block); nil when nothing matched. For Ask it returns nil: the
// Gate decides.
func (v Verdict) Decision(p *Policy) *Decision {
	switch {
	case v.Action == Allow && len(v.Findings) == 0:
		return nil
	case v.Action == Allow:
		return newDecision(Allowed, v.By, v.Need, v.Pattern, "")
	case v.Action == Block && v.By == ByFloor && hasTooLarge(v.Need):
		f := tooLarge(v.Need)
		return newDecision(Blocked, ByFloor, append([]Finding{f}, v.Need...), "", fmt.Sprintf(
			"BLOCKED: %s is too large for berth to check (%s), so it does not run through berth as it is. Nothing was run. Write large data or long scripts with the file tools (write_file) and run a short command on them, or split the command into smaller ones.",
			quoteCmd(v.Subject), f.Detail))
	case v.Action == Block && v.By == ByFloor:
		f := v.Need[0]
		what := quoteCmd(v.Subject) + " is"
		if f.Could != "" {
			what = quoteCmd(v.Subject) + " could run " + quoteCmd(f.Could) + ", which is"
		}
		return newDecision(Blocked, ByFloor, v.Need, "", fmt.Sprintf(
			"BLOCKED: %s on berth's hardline floor (%s: %s) and never runs through berth, whatever %s or %s say. Nothing was run. Do not try another way; if it is really intended, the user must run it outside berth.",
			what, f.Rule.ID, f.Rule.Description, KeyMode, KeyAllowlist))
	case v.Action == Block:
		why := ""
		if len(v.Need) > 0 {
			why = fmt.Sprintf(" (%s: %s)", v.Need[0].Rule.ID, v.Need[0].Rule.Description)
		}
		return newDecision(Blocked, ByDeny, v.Need, v.Pattern, fmt.Sprintf(
			"BLOCKED: %s matches the user's %s pattern %q%s. Nothing was run. Only the user can lift this, by removing the pattern from berth's configuration themselves.",
			quoteCmd(v.Subject), KeyDeny, v.Pattern, why))
	}
	return nil
}

// quoteCmd shows a command in a message.
func quoteCmd(s string) string {
	return "`" + clip(s) + "`"
}

// hasTooLarge reports whether a finding is too-large: the check did not
// read the whole command.
func hasTooLarge(fs []Finding) bool {
	return tooLarge(fs).Rule.ID != ""
}

// tooLarge returns the too-large finding of fs, if any.
func tooLarge(fs []Finding) Finding {
	for _, f := range fs {
		if f.Rule.ID == "too-large" {
			return f
		}
	}
	return Finding{}
}
