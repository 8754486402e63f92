package approval

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/a55dbaac/berth/internal/shparse"
)

// Answer is the human's answer to a Question.
type Answer string

// The answers.
const (
	AnswerOnce    Answer = "once"    // run it this time
	AnswerSession Answer = "session" // allow it for the rest of the session
	AnswerAlways  Answer = "always"  // add it to command_allowlist
	AnswerDeny    Answer = "deny"    // refuse
)

// Question is what the human is asked.
type Question struct {
	// Kind is "command" or "write".
	Kind string
	// Subject is the whole command, or the path of a write.
	Subject string
	// Cwd and Backend say where it would run; Cwd is "" when not known
	// yet (the environment's first command).
	Cwd     string
	Backend string
	// Findings are the rules that need approval, each with the simple
	// command it matched.
	Findings []Finding
	// Timeout is how long the answer may take; silence is a denial.
	Timeout time.Duration
	// Session says what a "session" answer allows, in words; Always what
	// an "always" answer allows and saves, or "" when always is not
	// offered (it then counts as session).
	Session string
	Always  string
}

// Text returns the question for a human: where it would run, the command
// (control characters made visible, cut at MaxShown characters with a note
// of how much is left), every simple command that needs approval and why,
// and what each answer allows.
func (q Question) Text() string {
	var b strings.Builder
	where := q.Backend
	if where == "" {
		where = "this machine"
	}
	cwd := q.Cwd
	if cwd == "" {
		cwd = "the environment's starting directory (not known before its first command)"
	}
	where += ", in " + Visible(cwd)
	if q.Kind == "write" {
		fmt.Fprintf(&b, "berth: let the agent write %s (%s)?\n\n", Visible(q.Subject), where)
	} else {
		shown, more := Shown(q.Subject)
		fmt.Fprintf(&b, "berth: let the agent run this command (%s)?\n\n    %s\n", where, strings.ReplaceAll(shown, "\n", "\n    "))
		if more > 0 {
			fmt.Fprintf(&b, "    (command truncated; %d more characters)\n", more)
		}
		b.WriteString("\n")
	}
	type line struct{ cmd, rule string }
	seen := map[line]bool{}
	whys := map[string]bool{}
	listed := 0
	for _, f := range q.Findings {
		l := line{f.Command, f.Rule.ID}
		if seen[l] {
			continue
		}
		seen[l] = true
		if listed++; listed > 20 {
			continue
		}
		cmd := f.Command
		if cmd == "" {
			cmd = "(the command as a whole)"
		}
		fmt.Fprintf(&b, "It runs: %s (%s)\n", Visible(cmd), f.Rule.ID)
	}
	if listed > 20 {
		fmt.Fprintf(&b, "... and %d more.\n", listed-20)
	}
	for _, f := range q.Findings {
		if !whys[f.Rule.ID] {
			whys[f.Rule.ID] = true
			why := f.Rule.Description
			if (f.Rule.ID == "too-deep" || f.Rule.ID == "unparsed") && f.Detail != "" {
				why += " (" + Visible(f.Detail) + ")"
			}
			fmt.Fprintf(&b, "Why %s: %s.\n", f.Rule.ID, why)
		}
	}
	session := q.Session
	if session == "" {
		session = "allow this command again for the rest of this session"
	}
	fmt.Fprintf(&b, "\nAnswer once (run it this time), session (%s)", session)
	if q.Always != "" {
		fmt.Fprintf(&b, ", always (%s)", q.Always)
	}
	b.WriteString(", or deny.")
	if q.Always == "" {
		b.WriteString(" (always is not offered here: it would count as session.)")
	}
	if q.Timeout > 0 {
		fmt.Fprintf(&b, " No answer within %s denies it.", q.Timeout.Round(time.Second))
	}
	return b.String()
}

// MaxShown is how much of a command a question shows.
const MaxShown = 2000

// Shown returns text as a question shows it: made Visible and cut at
// MaxShown characters, with the number of characters left out.
func Shown(text string) (shown string, more int) {
	n := utf8.RuneCountInString(text)
	if n <= MaxShown {
		return Visible(text), 0
	}
	cut := 0
	for i := range text {
		if cut == MaxShown {
			return Visible(text[:i]) + "…", n - MaxShown
		}
		cut++
	}
	return Visible(text), 0
}

// Visible returns s with every character a terminal or a renderer would
// act on instead of showing made visible as an escape: C0 controls but
// newline and tab, DEL, C1 controls, bidirectional and zero-width
// formatting characters, and bytes that are not UTF-8. The user sees what
// would run, not what it draws.
func Visible(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\x%02x", r)
		case r >= 0x80 && r <= 0x9f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069,
			r >= 0x200b && r <= 0x200f, r == 0x061c, r == 0xfeff, r == 0x2028, r == 0x2029:
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// Asker asks the human. Ask returns the answer, or an error: one wrapping
// ErrCannotAsk when there is no way to ask (the caller reports BLOCKED),
// ErrAskPending when the question was handed to the client to answer on a
// later call, or the context's error when it ended first (a timeout is a
// denial).
type Asker interface {
	Ask(ctx context.Context, q Question) (Answer, error)
}

// ErrCannotAsk says there is no way to ask the human (no elicitation
// support, no terminal).
var ErrCannotAsk = errors.New("cannot ask the user")

// ErrAskPending says the question went to the MCP client, which will call
// the tool again with the answer (MCP multi round-trip): the call ends now
// without running anything.
var ErrAskPending = errors.New("the question was sent to the client; the answer comes with the retried call")

// DefaultTimeout is how long the Gate waits for an answer by default (the
// reference's approvals.timeout).
const DefaultTimeout = 60 * time.Second

// GateOptions configures a Gate.
type GateOptions struct {
	// Timeout bounds the wait for an answer; 0 means DefaultTimeout.
	Timeout time.Duration
	// Persist saves command_allowlist after an "always" answer: it receives
	// the whole new list (the old entries and the new ones) and should
	// rewrite the config file in place, as `berth config set` does. nil
	// means "always" cannot be saved and acts as "session".
	Persist func(allowlist []string) error
	// Logger receives diagnostics; nil means slog.Default().
	Logger *slog.Logger
}

// Gate applies a Policy and asks the human when a rule needs approval. It
// remembers "this session" answers per session key (an environment key)
// and saves "always" answers through GateOptions.Persist. It is safe for
// concurrent use.
type Gate struct {
	opts GateOptions
	log  *slog.Logger

	mu       sync.Mutex
	policy   *Policy
	sessions map[string]map[string]bool

	// verdicts are the policy's verdicts on the commands checked so far.
	verdicts verdictCache
}

// NewGate returns a gate for p (nil means DefaultPolicy).
func NewGate(p *Policy, opts GateOptions) *Gate {
	if p == nil {
		p = DefaultPolicy()
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Gate{opts: opts, log: log, policy: p, sessions: map[string]map[string]bool{}}
}

// Policy returns the current policy ("always" answers add to it).
func (g *Gate) Policy() *Policy {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.policy
}

// SetPolicy replaces the policy (after the config file changed).
func (g *Gate) SetPolicy(p *Policy) {
	g.mu.Lock()
	g.policy = p
	g.mu.Unlock()
	g.verdicts.reset()
}

// EndSession forgets the "this session" answers of session.
func (g *Gate) EndSession(session string) {
	g.mu.Lock()
	delete(g.sessions, session)
	g.mu.Unlock()
}

// Command decides whether command may run in session's environment. A nil
// decision means no rule matched; otherwise Decision.Allowed says whether
// to run it and Decision.Message is the BLOCKED text when not. a asks the
// user when a rule needs approval (the MCP client's elicitation, a
// terminal prompt); with a nil a, a command that needs approval is
// blocked. The asker is an argument of the call, never something found in
// ctx: who may say yes changes what runs, and is not to be hidden.
func (g *Gate) Command(ctx context.Context, session, command string, c Context, a Asker) *Decision {
	return g.CommandScript(ctx, session, shparse.New(command), c, a)
}

// CommandScript is Command for a command already parsed (shparse.New), so
// that the caller's one parse serves the gate, the session and the result.
func (g *Gate) CommandScript(ctx context.Context, session string, sc *shparse.Script, c Context, a Asker) *Decision {
	p := g.Policy()
	return g.decide(ctx, session, p, g.verdicts.check(p, sc, c), c, "command", a)
}

// Write decides whether a file tool may write path, like Command.
func (g *Gate) Write(ctx context.Context, session, file string, c Context, a Asker) *Decision {
	p := g.Policy()
	return g.decide(ctx, session, p, p.CheckWrite(file, c), c, "write", a)
}

// sessionKey names what a session approval of f covers, as in Hermes:
// its pattern key (so "session" allows every later command of that
// pattern), or, for a rule of narrowRules, this very command (the whole
// text, not only the part the finding shows).
func sessionKey(f Finding, whole string) string {
	if key, wide := keyOf(f); wide {
		return "key\x00" + key
	}
	sum := sha256.Sum256([]byte(whole))
	return "cmd\x00" + f.Rule.ID + "\x00" + f.Command + "\x00" + hex.EncodeToString(sum[:])
}

// scope says, in words, what "session" and "always" would allow for the
// findings, and which keys "always" would save ("" and none when always is
// not offered).
func scope(need []Finding) (session, always string, keys []string) {
	examples := map[string]string{}
	narrow := false
	for _, f := range need {
		key, wide := keyOf(f)
		if !wide {
			narrow = true
			continue
		}
		if _, ok := examples[key]; !ok {
			examples[key] = f.Command
			keys = append(keys, key)
		}
	}
	if len(keys) == 0 {
		return "allow this same command again for the rest of this session", "", nil
	}
	var parts, quoted []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%q commands, like `%s`", k, Visible(clip(examples[k]))))
		quoted = append(quoted, strconv.Quote(k))
	}
	session = "allow " + strings.Join(parts, ", and ") + ", for the rest of this session"
	always = "allow them from now on: adds " + strings.Join(quoted, " and ") + " to " + KeyAllowlist
	if narrow {
		session += ", and this same command again"
		always += "; the rest of this command is allowed for this session only"
	}
	return session, always, keys
}

func (g *Gate) decide(ctx context.Context, session string, p *Policy, v Verdict, c Context, kind string, asker Asker) *Decision {
	if v.Action != Ask {
		return v.Decision(p)
	}
	g.mu.Lock()
	approved := true
	for _, f := range v.Need {
		if !g.sessions[session][sessionKey(f, v.whole)] {
			approved = false
		}
	}
	g.mu.Unlock()
	if approved {
		return newDecision(ApprovedSession, ByUser, v.Need, "", "")
	}
	if asker == nil {
		return g.blocked(p, v, "no one can be asked here (no MCP client with elicitation, no terminal)")
	}
	sess, alw, keys := scope(v.Need)
	q := Question{Kind: kind, Subject: v.whole, Cwd: c.Cwd, Backend: c.Backend, Findings: slices.Clone(v.Need), Timeout: g.opts.Timeout, Session: sess, Always: alw}
	if kind == "write" {
		q.Subject = strings.TrimPrefix(v.whole, "write_file ")
	}
	actx, cancel := context.WithTimeout(ctx, g.opts.Timeout)
	ans, err := asker.Ask(actx, q)
	timedOut := actx.Err() != nil && ctx.Err() == nil
	cancel()
	switch {
	case errors.Is(err, ErrAskPending):
		return newDecision(Pending, ByUser, v.Need, "", fmt.Sprintf(
			"BLOCKED: %s is waiting for the user's approval. Nothing was run.", quoteCmd(v.Subject)))
	case err != nil && ctx.Err() != nil:
		return g.blocked(p, v, "the call ended while waiting for the user's answer")
	case err != nil && (timedOut || errors.Is(err, context.DeadlineExceeded)):
		d := newDecision(Denied, ByTimeout, v.Need, "", fmt.Sprintf(
			"BLOCKED: the user did not answer within %s whether to allow %s, so it was denied. Nothing was run; do not retry it without asking the user. %s",
			g.opts.Timeout.Round(time.Second), quoteCmd(v.Subject), howToAllow))
		return d
	case errors.Is(err, ErrCannotAsk):
		return g.blocked(p, v, err.Error())
	case err != nil:
		return g.blocked(p, v, "asking the user failed: "+err.Error())
	}
	switch ans {
	case AnswerOnce:
		return newDecision(ApprovedOnce, ByUser, v.Need, "", "")
	case AnswerSession:
		g.remember(session, v.Need, v.whole)
		return newDecision(ApprovedSession, ByUser, v.Need, "", "")
	case AnswerAlways:
		if len(keys) == 0 {
			g.remember(session, v.Need, v.whole)
			return newDecision(ApprovedSession, ByUser, v.Need, "", fmt.Sprintf(
				"approved for this session only: %s is never saved to %s", v.Need[0].Rule.ID, KeyAllowlist))
		}
		return g.always(session, v, keys)
	}
	return newDecision(Denied, ByUser, v.Need, "", fmt.Sprintf(
		"BLOCKED: the user denied %s (%s). Nothing was run; do not retry it or work around it: ask the user what to do instead.",
		quoteCmd(v.Subject), v.Need[0].Rule.Description))
}

// remember records session approvals.
func (g *Gate) remember(session string, need []Finding, whole string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := g.sessions[session]
	if m == nil {
		m = map[string]bool{}
		g.sessions[session] = m
	}
	for _, f := range need {
		m[sessionKey(f, whole)] = true
	}
}

// always approves the findings for the session, adds their pattern keys
// to command_allowlist and saves it. Findings of narrow rules are only
// approved for the session: their keys are never saved, and neither is a
// bare rule.
func (g *Gate) always(session string, v Verdict, keys []string) *Decision {
	g.remember(session, v.Need, v.whole)
	g.mu.Lock()
	defer g.mu.Unlock()
	next, err := g.policy.WithAllowed(keys...)
	if err == nil && g.opts.Persist == nil {
		err = errors.New("this berth cannot save its configuration")
	}
	if err == nil {
		err = g.opts.Persist(next.Allowlist())
	}
	if err != nil {
		g.log.Warn("approval: could not save command_allowlist", "keys", keys, "err", err)
		return newDecision(ApprovedSession, ByUser, v.Need, "", fmt.Sprintf(
			"approved for this session; adding it to %s failed: %v", KeyAllowlist, err))
	}
	g.policy = next
	g.verdicts.reset()
	return newDecision(ApprovedAlways, ByUser, v.Need, strings.Join(keys, "\n"), "")
}

// blocked is the decision for a command that needed approval nobody gave.
func (g *Gate) blocked(p *Policy, v Verdict, reason string) *Decision {
	if msg, ok := unparsedMessage(v); ok {
		return newDecision(Blocked, ByRule, v.Need, "", msg)
	}
	f := v.Need[0]
	why := f.Rule.Description
	if (f.Rule.ID == "too-deep" || f.Rule.ID == "unparsed") && f.Detail != "" {
		why += ": " + f.Detail
	}
	return newDecision(Blocked, ByRule, v.Need, "", fmt.Sprintf(
		"BLOCKED: %s needs the user's approval (%s: %s), and %s. Nothing was run; do not try to get around this. %s",
		quoteCmd(v.Subject), f.Rule.ID, why, reason, howToAllow))
}

// unparsedMessage is the BLOCKED text of a command that needed approval
// only because berth's parser rejected it (a sed -i with broken quoting,
// an unclosed if): no forbidden action, but text the agent can fix. It
// says what did not parse, where, and that a fixed command may be sent
// again; ok is false when other rules need approval too.
func unparsedMessage(v Verdict) (string, bool) {
	var where []string
	for _, f := range v.Need {
		if f.Rule.ID != "unparsed" {
			return "", false
		}
		what := "the command"
		if f.Command != "" && f.Command != clip(v.whole) {
			what = "the shell text of " + quoteCmd(f.Command)
		}
		where = append(where, fmt.Sprintf("%s, at line:column %s", what, f.Detail))
	}
	return fmt.Sprintf(
		"BLOCKED: berth could not parse %s: %s. Nothing was run. This is no verdict on what the command does: fix the shell syntax (quoting, an unclosed if, case or loop, a stray parenthesis) and send it again. If it is valid bash that berth's parser cannot read, only the user can approve it, where berth can ask them.",
		quoteCmd(v.Subject), strings.Join(where, "; ")), true
}

// howToAllow says who can let such a command run. It speaks about the
// user, never to the agent: it names no command, key or value the agent
// could run or set itself to lower the gate (a berth config write from the
// agent is itself a command that needs the user's approval).
const howToAllow = "Only the user can allow it: by answering berth's question where berth can ask them (an interactive berth shell, or an MCP client that supports elicitation), or by changing berth's approval settings themselves."
