package config

import (
	"fmt"
	"maps"
	"slices"
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
	return Approvals{Mode: "manual", Timeout: DefaultApprovalTimeout, Deny: []string{}}
}

// AddCheck adds a validation to one of config's own keys (not a key a
// backend declares; those bring their Check with them). What the approval
// keys' values mean belongs to the approval engine, which config does not
// link (every backend links config, and the backend contract carries no
// policy): the package that builds policies from them registers their
// checks here at init, as database/sql's drivers register themselves. The
// check's error text follows the key and the bad value in messages.
func AddCheck(key string, check func(v any) error) error {
	regMu.Lock()
	defer regMu.Unlock()
	old, ok := keyByFull[key]
	if !ok {
		return fmt.Errorf("config: AddCheck: no key %q", key)
	}
	if old.field == fieldDeclared {
		return fmt.Errorf("config: AddCheck: %s is declared by backend %s; its checks come with the declaration", key, old.owners[0])
	}
	k := *old
	k.checks = append(slices.Clone(old.checks), check)
	table := slices.Clone(keyTable)
	table[slices.Index(table, old)] = &k
	byFull, byEnv := maps.Clone(keyByFull), maps.Clone(keyByEnv)
	byFull[key] = &k
	if k.env != "" {
		byEnv[k.env] = &k
	}
	keyTable, keyByFull, keyByEnv = table, byFull, byEnv
	return nil
}

// approvalKeys are the keys of the approvals: section and the top-level
// command_allowlist. They are fields of Config, not of Terminal. Mode, deny
// and the allowlist are per call: a long-lived berth (the daemon) re-reads
// them into its gate on every call. The timeout is not: the gate holds it
// from its start.
func approvalKeys() []*keyInfo {
	mode := &keyInfo{
		section: "approvals", name: "mode", env: "BERTH_APPROVALS_MODE", kind: kindString, field: fieldConfig,
		help: "manual: ask the user before a dangerous command; off: never ask (the hardline floor and approvals.deny still hold)",
		rule: "approvals.mode is manual or off",
		def:  "manual", perCall: true,
		getc: func(c *Config) any { return c.Approvals.Mode },
		setc: func(c *Config, v any) { c.Approvals.Mode = v.(string) },
	}
	timeout := &keyInfo{
		section: "approvals", name: "timeout", env: "BERTH_APPROVALS_TIMEOUT", kind: kindInt, field: fieldConfig,
		help:  "seconds a question to the user waits; no answer in time denies the command",
		rule:  "approvals.timeout must be a whole number of seconds >= 1",
		check: intMin(1),
		def:   DefaultApprovalTimeout,
		getc:  func(c *Config) any { return c.Approvals.Timeout },
		setc:  func(c *Config, v any) { c.Approvals.Timeout = v.(int) },
	}
	deny := &keyInfo{
		section: "approvals", name: "deny", kind: kindList, field: fieldConfig,
		help: `patterns blocked on every backend and in every mode, e.g. ["git push --force*", "rule:sql-destructive"]`,
		rule: kindRule("approvals.deny", kindList, `["git push --force*"]`),
		def:  []string{}, perCall: true,
		getc: func(c *Config) any { return c.Approvals.Deny },
		setc: func(c *Config, v any) { c.Approvals.Deny = v.([]string) },
	}
	allow := &keyInfo{
		section: "", name: "command_allowlist", kind: kindList, field: fieldConfig,
		help: `patterns that run without asking (never over the floor or approvals.deny); "always" answers are added here`,
		rule: kindRule("command_allowlist", kindList, `["git push --force*"]`),
		def:  []string{}, perCall: true,
		getc: func(c *Config) any { return c.CommandAllowlist },
		setc: func(c *Config, v any) { c.CommandAllowlist = v.([]string) },
	}
	return []*keyInfo{mode, timeout, deny, allow}
}
