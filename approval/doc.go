// Package approval decides, before anything reaches a backend, whether an
// agent's shell command (or a file-tool write) may run: never, only after a
// human says yes, or freely.
//
// A command is parsed once (internal/shparse) and read by the shell
// analyser (internal/scan), which reports findings of rules: what the
// command removes, writes, signals or runs, and what it cannot see. This
// package is the policy over them: approvals.deny, the hardline floor,
// workspace confinement, command_allowlist, approvals.mode, and the Gate
// that asks the human. The rules, the floor and the analyser's model are
// described in internal/scan.
//
// # Scope
//
// The analyser reads shell text, and shell text can always be spelled
// another way: the guarantee belongs where it holds. So no new analysis
// for what Confinement (the kernel's workspace confinement) or an image
// (a sandboxed backend) already enforces: such findings are dropped
// (confine.go) or not asked (Sandboxed). What berth cannot see is not
// allowed: unknown means ask (dynamic-command, unparsed, too-deep), and
// what could reach the floor, or is too large to read whole, is blocked.
//
// # Order of the checks
//
//  1. approvals.deny: a matching pattern blocks the command on every
//     backend, in every mode, whatever the allowlist says.
//  2. The hardline floor (rules of Level Floor): on a backend that can
//     damage the host (Context Sandboxed false) the command is blocked in
//     every mode, whatever the allowlist says.
//  3. Workspace confinement (Context.Writable set): the findings the
//     kernel enforces are dropped (confine.go lists them).
//  4. No rule matched: the command runs, and its result carries no
//     approval field.
//  5. A sandboxed backend (an image of its own with nothing of the host
//     mounted) runs it without asking, as the reference does.
//  6. command_allowlist: when every matched rule is covered, it runs.
//  7. approvals.mode off: it runs without asking.
//  8. approvals.mode manual (the default): the Gate asks the human through
//     the Asker of the call (MCP elicitation, or a terminal prompt on an
//     interactive berth shell). The question shows where it would run (the
//     cwd, or that it is not known yet), the command (control characters
//     made visible, cut at MaxShown characters with a note of how much is
//     left), every simple command that needs approval and why, and what
//     each answer allows. The answers mean what they mean in Hermes: once
//     runs it this time; session approves the matched pattern (its key,
//     keys.go) for the rest of the session; always also adds that key to
//     command_allowlist; deny refuses. Rules whose approval would reopen
//     the gate, or that say only that berth cannot see what runs, are
//     approved one command at a time and never saved. No answer within
//     approvals.timeout (default 60 s) denies; no way to ask blocks with a
//     "BLOCKED: ..." message. The message speaks about the user and names
//     no command, key or value that would allow it: whatever berth prints
//     reaches the agent first, and a recipe there is an instruction to the
//     agent. smart mode (an LLM judging commands) is not supported.
//
// The agent cannot lower the gate it runs behind: writing berth's (or
// Hermes') configuration — berth config set|edit|unset, hermes config
// set, a redirection, cp, sed -i, yq -i, a link, or code of another
// language that names the file — is write-berth-config; a nested berth
// that runs commands (berth exec|shell|mcp|serve, berth-engine ..., daemon
// stop, env rm) is nested-berth, since it obeys approvals of its own;
// setting, exporting or unsetting BERTH_APPROVALS_*, BERTH_CONFIG,
// BERTH_HOME, BERTH_OWNER, BERTH_PARENT_POLICY or BERTH_NO_DAEMON is
// berth-env. All three are asked in manual mode, one command at a time.
// In mode off the user has chosen to run every dangerous command unasked,
// these included; "rule:write-berth-config" (or the other two) in
// approvals.deny refuses them in every mode.
//
// # Patterns
//
// approvals.deny and command_allowlist hold Patterns: "rule:ID" for every
// finding of a rule, a pattern key (as Hermes saves them: "recursive
// delete", "SQL DROP", or an older Hermes' regex-derived key), or a glob
// over each normalized simple command (see Pattern and Finding.Command). A
// malformed pattern is a configuration error naming the key, the index and
// the pattern.
package approval
