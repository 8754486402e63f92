package config

import (
	"fmt"
	"strings"

	"github.com/a55dbaac/berth/approval"
)

// Approvals is the approvals: section of the file (Hermes' keys): how berth
// treats commands that need the user's approval (see package approval).
type Approvals struct {
	// Mode is approvals.mode: "manual" (ask the user, the default) or "off"
	// (never ask; the hardline floor and Deny still hold). Hermes' "smart"
	// is refused at Load.
	Mode string
	// Timeout is approvals.timeout: seconds a question waits for an answer
	// before it counts as a denial (default 60).
	Timeout int
	// Deny is approvals.deny: patterns that are blocked on every backend,
	// in every mode, whatever the allowlist says.
	Deny []string
}

// DefaultApprovalTimeout is the default of approvals.timeout, in seconds.
const DefaultApprovalTimeout = 60

// defaultApprovals returns the approvals: section at its defaults.
func defaultApprovals() Approvals {
	return Approvals{Mode: string(approval.ModeManual), Timeout: DefaultApprovalTimeout, Deny: []string{}}
}

// ApprovalPolicy builds the approval policy of c: approvals.mode,
// approvals.deny and command_allowlist. Load has validated them, so an
// error means a hand-built Config with a bad value; it names the key, the
// index and the pattern.
func (c *Config) ApprovalPolicy() (*approval.Policy, error) {
	return approval.NewPolicy(c.Approvals.Mode, c.Approvals.Deny, c.CommandAllowlist)
}

// approvalKeys are the keys of the approvals: section and the top-level
// command_allowlist. They are fields of Config, not of Terminal.
func approvalKeys() []*keyInfo {
	mode := &keyInfo{
		section: "approvals", name: "mode", env: "BERTH_APPROVALS_MODE", kind: kindString, field: fieldConfig,
		help: "manual: ask the user before a dangerous command; off: never ask (the hardline floor and approvals.deny still hold)",
		rule: approval.KeyMode + " is manual or off",
		def:  string(approval.ModeManual),
		getc: func(c *Config) any { return c.Approvals.Mode },
		setc: func(c *Config, v any) { c.Approvals.Mode = v.(string) },
		checks: []func(any) error{func(v any) error {
			if _, err := approval.ParseMode(v.(string)); err != nil {
				// ParseMode names the key and value; the caller does too.
				_, why, _ := strings.Cut(err.Error(), ": ")
				return fmt.Errorf("%s", why)
			}
			return nil
		}},
	}
	timeout := &keyInfo{
		section: "approvals", name: "timeout", env: "BERTH_APPROVALS_TIMEOUT", kind: kindInt, field: fieldConfig,
		help:  "seconds a question to the user waits; no answer in time denies the command",
		rule:  approval.KeyTimeout + " must be a whole number of seconds >= 1",
		check: intMin(1),
		def:   DefaultApprovalTimeout,
		getc:  func(c *Config) any { return c.Approvals.Timeout },
		setc:  func(c *Config, v any) { c.Approvals.Timeout = v.(int) },
	}
	deny := &keyInfo{
		section: "approvals", name: "deny", kind: kindList, field: fieldConfig,
		help:   `patterns blocked on every backend and in every mode, e.g. ["git push --force*", "rule:sql-destructive"]`,
		rule:   kindRule(approval.KeyDeny, kindList, `["git push --force*"]`),
		def:    []string{},
		checks: []func(any) error{checkPatterns(approval.KeyDeny)},
		getc:   func(c *Config) any { return c.Approvals.Deny },
		setc:   func(c *Config, v any) { c.Approvals.Deny = v.([]string) },
	}
	allow := &keyInfo{
		section: "", name: "command_allowlist", kind: kindList, field: fieldConfig,
		help:   `patterns that run without asking (never over the floor or approvals.deny); "always" answers are added here`,
		rule:   kindRule(approval.KeyAllowlist, kindList, `["git push --force*"]`),
		def:    []string{},
		checks: []func(any) error{checkPatterns(approval.KeyAllowlist)},
		getc:   func(c *Config) any { return c.CommandAllowlist },
		setc:   func(c *Config, v any) { c.CommandAllowlist = v.([]string) },
	}
	return []*keyInfo{mode, timeout, deny, allow}
}

// checkPatterns validates every entry of a pattern list, naming the entry
// by its index.
func checkPatterns(key string) func(any) error {
	return func(v any) error {
		var errs []string
		for i, s := range v.([]string) {
			if _, err := approval.ParsePattern(s); err != nil {
				errs = append(errs, fmt.Sprintf("%s[%d]: %v", key, i, err))
			}
		}
		if len(errs) > 0 {
			return fmt.Errorf("%s", strings.Join(errs, "; "))
		}
		return nil
	}
}
