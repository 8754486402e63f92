package approval

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

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
	// Subject is the command, or the path of a write.
	Subject string
	// Cwd and Backend say where it would run.
	Cwd     string
	Backend string
	// Findings are the rules that need approval.
	Findings []Finding
	// Timeout is how long the answer may take; silence is a denial.
	Timeout time.Duration
}

// Text returns the question for a human, in a few lines.
func (q Question) Text() string {
	var b strings.Builder
	where := q.Backend
	if where == "" {
		where = "this machine"
	}
	if q.Cwd != "" {
		where += ", in " + q.Cwd
	}
	if q.Kind == "write" {
		fmt.Fprintf(&b, "berth: let the agent write %s (%s)?\n", q.Subject, where)
	} else {
		fmt.Fprintf(&b, "berth: let the agent run this command (%s)?\n\n    %s\n\n", where, clip(q.Subject))
	}
	seen := map[string]bool{}
	for _, f := range q.Findings {
		if seen[f.Rule.ID] {
			continue
		}
		seen[f.Rule.ID] = true
		fmt.Fprintf(&b, "Why: %s (%s).\n", f.Rule.Description, f.Rule.ID)
	}
	b.WriteString("Answer once (run it this time), session (allow this for the rest of the session), always (add it to " + KeyAllowlist + "), or deny.")
	if q.Timeout > 0 {
		fmt.Fprintf(&b, " No answer within %s denies it.", q.Timeout.Round(time.Second))
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

type askerKey struct{}

// WithAsker returns a context that carries the Asker for one call: the MCP
// server puts an elicitation asker there, the interactive shell a terminal
// prompt.
func WithAsker(ctx context.Context, a Asker) context.Context {
	return context.WithValue(ctx, askerKey{}, a)
}

// AskerFrom returns the Asker of ctx, or nil.
func AskerFrom(ctx context.Context) Asker {
	a, _ := ctx.Value(askerKey{}).(Asker)
	return a
}

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
}

// EndSession forgets the "this session" answers of session.
func (g *Gate) EndSession(session string) {
	g.mu.Lock()
	delete(g.sessions, session)
	g.mu.Unlock()
}

// Command decides whether command may run in session's environment. A nil
// decision means no rule matched; otherwise Decision.Allowed says whether
// to run it and Decision.Message is the BLOCKED text when not. The Asker is
// taken from ctx (WithAsker); without one, a command that needs approval is
// blocked.
func (g *Gate) Command(ctx context.Context, session, command string, c Context) *Decision {
	return g.CommandScript(ctx, session, shparse.New(command), c)
}

// CommandScript is Command for a command already parsed (shparse.New), so
// that the caller's one parse serves the gate, the session and the result.
func (g *Gate) CommandScript(ctx context.Context, session string, sc *shparse.Script, c Context) *Decision {
	p := g.Policy()
	return g.decide(ctx, session, p, p.CheckScript(sc, c), c, "command")
}

// Write decides whether a file tool may write path, like Command.
func (g *Gate) Write(ctx context.Context, session, file string, c Context) *Decision {
	p := g.Policy()
	return g.decide(ctx, session, p, p.CheckWrite(file, c), c, "write")
}

// sessionKey names one approved finding.
func sessionKey(f Finding) string { return f.Rule.ID + "\x00" + f.Command }

func (g *Gate) decide(ctx context.Context, session string, p *Policy, v Verdict, c Context, kind string) *Decision {
	if v.Action != Ask {
		return v.Decision(p)
	}
	g.mu.Lock()
	approved := true
	for _, f := range v.Need {
		if !g.sessions[session][sessionKey(f)] {
			approved = false
		}
	}
	g.mu.Unlock()
	if approved {
		return newDecision(ApprovedSession, ByUser, v.Need, "", "")
	}
	asker := AskerFrom(ctx)
	if asker == nil {
		return g.blocked(p, v, "no one can be asked here (no MCP client with elicitation, no terminal)")
	}
	q := Question{Kind: kind, Subject: v.Subject, Cwd: c.Cwd, Backend: c.Backend, Findings: v.Need, Timeout: g.opts.Timeout}
	if kind == "write" {
		q.Subject = strings.TrimPrefix(v.Subject, "write_file ")
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
		g.remember(session, v.Need)
		return newDecision(ApprovedSession, ByUser, v.Need, "", "")
	case AnswerAlways:
		return g.always(session, v)
	}
	return newDecision(Denied, ByUser, v.Need, "", fmt.Sprintf(
		"BLOCKED: the user denied %s (%s). Nothing was run; do not retry it or work around it: ask the user what to do instead.",
		quoteCmd(v.Subject), v.Need[0].Rule.Description))
}

// remember records session approvals.
func (g *Gate) remember(session string, need []Finding) {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := g.sessions[session]
	if m == nil {
		m = map[string]bool{}
		g.sessions[session] = m
	}
	for _, f := range need {
		m[sessionKey(f)] = true
	}
}

// always adds the approved commands to command_allowlist and saves it.
func (g *Gate) always(session string, v Verdict) *Decision {
	g.remember(session, v.Need)
	pats := allowPatterns(v.Need)
	g.mu.Lock()
	defer g.mu.Unlock()
	next, err := g.policy.WithAllowed(pats...)
	if err == nil && g.opts.Persist == nil {
		err = errors.New("this berth cannot save its configuration")
	}
	if err == nil {
		err = g.opts.Persist(next.Allowlist())
	}
	if err != nil {
		g.log.Warn("approval: could not save command_allowlist", "patterns", pats, "err", err)
		return newDecision(ApprovedSession, ByUser, v.Need, "", fmt.Sprintf(
			"approved for this session; adding it to %s failed: %v", KeyAllowlist, err))
	}
	g.policy = next
	return newDecision(ApprovedAlways, ByUser, v.Need, strings.Join(pats, "\n"), "")
}

// allowPatterns returns the allowlist entries that cover exactly the
// given findings' commands.
func allowPatterns(need []Finding) []string {
	var out []string
	seen := map[string]bool{}
	for _, f := range need {
		p := EscapeGlob(f.Command)
		if p == "" {
			p = "rule:" + f.Rule.ID
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// blocked is the decision for a command that needed approval nobody gave.
func (g *Gate) blocked(p *Policy, v Verdict, reason string) *Decision {
	f := v.Need[0]
	why := f.Rule.Description
	if (f.Rule.ID == "too-deep" || f.Rule.ID == "unparsed") && f.Detail != "" {
		why += ": " + f.Detail
	}
	return newDecision(Blocked, ByRule, v.Need, "", fmt.Sprintf(
		"BLOCKED: %s needs the user's approval (%s: %s), and %s. Nothing was run; do not try to get around this. %s",
		quoteCmd(v.Subject), f.Rule.ID, why, reason, howToAllow))
}

// howToAllow says who can let such a command run. It speaks about the
// user, never to the agent: it names no command, key or value the agent
// could run or set itself to lower the gate (a berth config write from the
// agent is itself a command that needs the user's approval).
const howToAllow = "Only the user can allow it: by answering berth's question where berth can ask them (an interactive berth shell, or an MCP client that supports elicitation), or by changing berth's approval settings themselves."
