// Package terminal is the tool layer of berth: it takes the terminal tool's
// requests, runs them in an environment's persistent session and returns the
// contract's result object, with output bounded, cleaned, redacted and
// truncated by the output pipeline.
package terminal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/a55dbaac/berth/approval"
	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/shparse"
	"github.com/a55dbaac/berth/output"
	"github.com/a55dbaac/berth/session"
)

// Request is a terminal tool call, with the contract's field names.
type Request struct {
	Command    string  `json:"command"`
	Background bool    `json:"background,omitempty"`
	Timeout    int     `json:"timeout,omitempty"` // seconds; 0 = the configured default
	Workdir    string  `json:"workdir,omitempty"`
	PTY        bool    `json:"pty,omitempty"`
	StdinData  *string `json:"stdin_data,omitempty"`
	// OnTimeout says what becomes of a foreground command still running
	// at its timeout: OnTimeoutKill (the default when the environment's
	// Options.OnTimeout is empty too) stops it and everything it started;
	// OnTimeoutBackground keeps it running as a tracked background process
	// (see Moved). "" means the environment's setting (terminal.on_timeout).
	OnTimeout string `json:"on_timeout,omitempty"`
}

// The values of on_timeout (Request.OnTimeout, terminal.on_timeout).
const (
	OnTimeoutKill       = "kill"
	OnTimeoutBackground = "background"
)

// CheckOnTimeout accepts "" and the values of on_timeout, and otherwise
// returns an error naming the bad value and the accepted ones. name is
// the field or key that held it ("on_timeout", "terminal.on_timeout").
func CheckOnTimeout(name, v string) error {
	switch v {
	case "", OnTimeoutKill, OnTimeoutBackground:
		return nil
	}
	return fmt.Errorf("%s %q: use %q (stop the command at its timeout, the default) or %q (keep it running as a background process followed with the process tool)",
		name, v, OnTimeoutKill, OnTimeoutBackground)
}

// Result is a foreground terminal result. Output, ExitCode and Error are
// always present; the rest only when meaningful.
type Result struct {
	Output               string  `json:"output"`
	ExitCode             int     `json:"exit_code"`
	Error                *string `json:"error"`
	Cwd                  string  `json:"cwd,omitempty"`
	OutputTotalChars     int     `json:"output_total_chars,omitempty"`
	FullOutputPath       string  `json:"full_output_path,omitempty"`
	TruncationNote       string  `json:"truncation_note,omitempty"`
	EnvironmentRecreated bool    `json:"environment_recreated,omitempty"`
	ExitCodeMeaning      string  `json:"exit_code_meaning,omitempty"`
	// Approval says what the approval check decided and by whom, for a
	// command that matched one of its rules (absent otherwise). When the
	// command did not run, Error holds the decision's "BLOCKED: ..."
	// message and Err is an *approval.BlockedError.
	Approval *approval.Decision `json:"approval,omitempty"`
	// MovedToBackground says the command was still running when the call
	// returned (its timeout with on_timeout "background", or a detach): it
	// goes on as the background process SessionID (pid PID, the pid of the
	// shell running it), followed with the process tool. Output holds what
	// it printed until then, followed by a note saying so; ExitCode is -1
	// here and null in JSON, since the command has not ended.
	MovedToBackground bool   `json:"moved_to_background,omitempty"`
	SessionID         string `json:"session_id,omitempty"`
	PID               int    `json:"pid,omitempty"`
	// Moved is what the process registry needs to track a command that was
	// moved to the background (set with MovedToBackground); the caller of
	// Environment.RunCall must adopt it. It is not part of the JSON
	// contract.
	Moved *Moved `json:"-"`
	// Err is the Go error behind Error, for callers that tell errors apart
	// with errors.Is and errors.As (a *backend.UnreachableError,
	// session.ErrShellLost); it is not part of the JSON contract.
	Err error `json:"-"`
}

// MarshalJSON encodes the result with the contract's field names; the
// exit_code of a command moved to the background is null.
func (r Result) MarshalJSON() ([]byte, error) {
	type plain Result
	if !r.MovedToBackground {
		return json.Marshal(plain(r))
	}
	return json.Marshal(struct {
		plain
		ExitCode *int `json:"exit_code"`
	}{plain: plain(r)})
}

// Moved is a foreground command moved to the background while it ran.
type Moved struct {
	// Handoff follows the command; its Output carries what the command
	// prints from the move on.
	Handoff *session.Handoff
	// Before is the raw output the command printed before the move (its
	// last MovedBeforeBytes bytes), for the background process's log.
	Before []byte
	// Cwd is the directory the command runs in.
	Cwd string
	// TimedOut says the move came from the timeout (else from a detach).
	TimedOut bool
}

// MovedBeforeBytes bounds the output before a move that is kept for the
// background process's log (its buffer keeps 200,000 characters).
const MovedBeforeBytes = 800 << 10

// Call is what a caller adds to a foreground request beyond its fields.
type Call struct {
	// ID names the call while it runs and, when the command is moved to
	// the background, the background process it becomes (the process
	// tool's session_id). Moving is only possible when it is set.
	ID string
	// Detach, when closed while the command runs, moves it to the
	// background at once (the process tool's detach action, an MCP cancel
	// asking for it).
	Detach <-chan struct{}
	// Script is the request's command already parsed (shparse.New), when
	// the caller parsed it for its own checks (the approval gate): the
	// session's analysis and the exit-code meaning read the same tree
	// instead of parsing the text again. nil (or the parse of another
	// text) means RunCall parses it.
	Script *shparse.Script
}

// Markers appended to output, exactly as the reference prints them.
const (
	timeoutMarker   = "\n[Command timed out after %ds]"
	interruptMarker = "\n[Command interrupted]"
)

// Options configures an environment's tool layer.
type Options struct {
	// DefaultTimeout applies when a request gives none (terminal.timeout).
	DefaultTimeout time.Duration
	// MaxOutputChars is tool_output.max_bytes.
	MaxOutputChars int
	// SpillDir receives the full output of truncated results.
	SpillDir string
	// Session configures the persistent shell.
	Session session.Options
	// FreshShell runs every command in a new shell with no state carried
	// over (terminal.persistent_shell: false).
	FreshShell bool
	// Replaces says this environment replaces one of the same key that was
	// cleaned up (an idle sweep): its shell state is gone, and the first
	// result says environment_recreated.
	Replaces bool
	// OnTimeout is the on_timeout of requests that give none
	// (terminal.on_timeout): "" or OnTimeoutKill, or OnTimeoutBackground.
	OnTimeout string
}

// Environment is one environment: a backend, its persistent session, and the tool
// layer around them. It is safe for concurrent use; foreground commands run
// one at a time.
type Environment struct {
	be   backend.Backend
	sess *session.Session
	opts Options

	mu       sync.Mutex
	lastUsed time.Time
	running  int // foreground commands in flight
	closed   bool
	replaced bool // the first result must say environment_recreated
}

// Busy reports whether a foreground command is running.
func (e *Environment) Busy() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.running > 0
}

// New returns an environment over be. Nothing is started until the first
// command.
func New(be backend.Backend, opts Options) *Environment {
	if opts.DefaultTimeout <= 0 {
		opts.DefaultTimeout = 180 * time.Second
	}
	if opts.MaxOutputChars <= 0 {
		opts.MaxOutputChars = 50000
	}
	if se, ok := be.(backend.SessionEnver); ok {
		env := map[string]string{}
		for k, v := range opts.Session.Env {
			env[k] = v
		}
		for k, v := range se.SessionEnv() {
			env[k] = v
		}
		opts.Session.Env = env
	}
	return &Environment{be: be, sess: session.New(be, opts.Session), opts: opts, lastUsed: time.Now(), replaced: opts.Replaces}
}

// Backend returns the environment's backend.
func (e *Environment) Backend() backend.Backend { return e.be }

// Session returns the environment's persistent shell.
func (e *Environment) Session() *session.Session { return e.sess }

// LastUsed reports when the environment last ran a command.
func (e *Environment) LastUsed() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lastUsed
}

// Touch marks the environment as used now (the idle sweeper spares it).
func (e *Environment) Touch() {
	e.mu.Lock()
	e.lastUsed = time.Now()
	e.mu.Unlock()
}

// ErrorResult is the result of a request that could not run: the error's
// text in "error", exit code -1, and the error itself in Err for Go callers.
func ErrorResult(err error) Result {
	msg := err.Error()
	return Result{ExitCode: -1, Error: &msg, Err: err}
}

// BlockedResult is the result of a command the approval gate refused
// (blocked, denied, or waiting for an answer): exit_code StatusBlocked, the
// shell's "found but cannot execute" and the status berth exec exits with,
// so a caller reads one number whichever way it asked; error is the
// decision's message.
func BlockedResult(d *approval.Decision) Result {
	res := ErrorResult(d.Err())
	res.ExitCode = StatusBlocked
	res.Approval = d
	return res
}

// MaxTimeout is the longest timeout a request may ask for, in seconds (one
// day); longer work belongs in the background.
const MaxTimeout = 86400

// Validate checks a request's fields and returns an error naming the bad
// value and what is accepted. A command nested deeper than the shell
// parser can safely follow (shparse.MaxNesting) is refused here, before
// anything parses it.
func Validate(req Request) error {
	if strings.TrimSpace(req.Command) == "" {
		return errors.New("command is empty: give the shell command to run")
	}
	if strings.IndexByte(req.Command, 0) >= 0 {
		return errors.New("command contains a NUL byte, which no shell can receive")
	}
	if err := shparse.Check(req.Command); err != nil {
		return err
	}
	if req.Timeout < 0 || req.Timeout > MaxTimeout {
		return fmt.Errorf("timeout %d: must be a whole number of seconds from 1 to %d (one day); run longer work with background: true", req.Timeout, MaxTimeout)
	}
	if strings.IndexByte(req.Workdir, 0) >= 0 {
		return fmt.Errorf("workdir %q contains a NUL byte, which no path can hold", req.Workdir)
	}
	if req.Workdir != "" && !path.IsAbs(req.Workdir) && req.Workdir != "~" && !strings.HasPrefix(req.Workdir, "~/") {
		return fmt.Errorf("workdir %q: must be an absolute path (or ~ or ~/...)", req.Workdir)
	}
	return CheckOnTimeout("on_timeout", req.OnTimeout)
}

// Checked is a request Check accepted: RunChecked runs it without
// validating it again, for a caller that validates a request before work
// of its own (the manager, before the approval gate parses the command).
// Only Check makes one; RunChecked refuses the zero value.
type Checked struct {
	req Request
	ok  bool
}

// Check validates req (Validate) and returns it checked.
func Check(req Request) (Checked, error) {
	if err := Validate(req); err != nil {
		return Checked{}, err
	}
	return Checked{req: req, ok: true}, nil
}

// Request returns the checked request.
func (c Checked) Request() Request { return c.req }

// Run executes a foreground request. Cancelling ctx interrupts the command
// (exit 130 with the interrupt marker); the request's timeout stops it with
// exit 124 and the timeout marker. Either way the command's whole process
// tree inside the environment is killed and the session stays usable. A
// command is never moved to the background by Run (on_timeout
// "background" acts like "kill"): that takes RunCall and a process
// registry to adopt it.
func (e *Environment) Run(ctx context.Context, req Request) Result {
	return e.RunCall(ctx, req, Call{})
}

// Marker notes appended to the output of a command moved to the
// background.
const (
	movedTimeoutNote = "\n[Command still running after %ds: moved to the background as session_id %s; follow it with the process tool (poll, log, wait, kill)]"
	movedDetachNote  = "\n[Command moved to the background on request as session_id %s; follow it with the process tool (poll, log, wait, kill)]"
)

// RunCall is Run for a call that may be moved to the background: when
// call.ID is set, a command still running at its timeout with on_timeout
// "background", or when call.Detach is closed, is not stopped; the result
// says moved_to_background with call.ID as session_id, carries the output
// so far and a note, and Moved, which the caller must hand to its process
// registry (process.Registry.Adopt). The session is free at once: the
// next command runs in a fresh shell with the cwd and exported variables
// of before the moved command.
//
// The request is validated first (Validate); a caller that validated it
// already calls RunChecked.
func (e *Environment) RunCall(ctx context.Context, req Request, call Call) Result {
	c, err := Check(req)
	if err != nil {
		return ErrorResult(err)
	}
	return e.RunChecked(ctx, c, call)
}

// RunChecked is RunCall for a request Check accepted, which it does not
// validate again.
func (e *Environment) RunChecked(ctx context.Context, c Checked, call Call) Result {
	if !c.ok {
		return ErrorResult(errors.New("terminal: RunChecked of a request Check did not accept (use RunCall)"))
	}
	req := c.req
	if req.Background {
		return ErrorResult(errors.New("background: true is handled by the process manager, not a foreground environment"))
	}
	e.mu.Lock()
	e.running++
	e.lastUsed = time.Now()
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.running--
		e.lastUsed = time.Now()
		e.mu.Unlock()
	}()
	timeout := e.opts.DefaultTimeout
	if req.Timeout > 0 {
		timeout = time.Duration(req.Timeout) * time.Second
	}
	if err := e.sess.Start(ctx); err != nil {
		return ErrorResult(err)
	}
	before := e.sess.Cwd()
	capture := output.NewCapture(output.Options{MaxChars: e.opts.MaxOutputChars, SpillDir: e.opts.SpillDir, Tap: output.TapFrom(ctx)})
	sc := shparse.Of(call.Script, req.Command)
	sreq := session.Request{Command: req.Command, Script: sc, Timeout: timeout, Workdir: req.Workdir}
	if req.StdinData != nil {
		sreq.Stdin = []byte(*req.StdinData)
	}
	var sink io.Writer = capture
	var tail *tailBuffer
	if call.ID != "" {
		onTimeout := req.OnTimeout
		if onTimeout == "" {
			onTimeout = e.opts.OnTimeout
		}
		sreq.BackgroundOnTimeout = onTimeout == OnTimeoutBackground
		sreq.Detach = call.Detach
		tail = &tailBuffer{max: MovedBeforeBytes}
		sink = io.MultiWriter(capture, tail)
	}
	res, err := e.sess.Run(ctx, sreq, sink)
	if e.opts.FreshShell {
		defer e.sess.Reset()
	}
	if err != nil {
		capture.Finish("")
		return ErrorResult(err)
	}
	marker := ""
	switch {
	case res.Handoff != nil && res.TimedOut:
		marker = fmt.Sprintf(movedTimeoutNote, int(timeout.Round(time.Second)/time.Second), call.ID)
	case res.Handoff != nil:
		marker = fmt.Sprintf(movedDetachNote, call.ID)
	case res.TimedOut:
		marker = fmt.Sprintf(timeoutMarker, int(timeout.Round(time.Second)/time.Second))
	case res.Interrupted:
		marker = interruptMarker
	}
	out := capture.Finish(marker)
	r := Result{
		Output:          out.Output,
		ExitCode:        res.ExitCode,
		ExitCodeMeaning: exitCodeMeaning(sc, res.ExitCode),
	}
	if h := res.Handoff; h != nil {
		cwd := req.Workdir
		if cwd == "" {
			cwd = before
		}
		r.ExitCode, r.ExitCodeMeaning = -1, ""
		r.MovedToBackground, r.SessionID, r.PID = true, call.ID, h.PID
		r.Moved = &Moved{Handoff: h, Before: tail.bytes(), Cwd: cwd, TimedOut: res.TimedOut}
	}
	if out.Truncated {
		r.OutputTotalChars = out.TotalChars
		r.FullOutputPath = out.FullOutputPath
		r.TruncationNote = out.TruncationNote
	}
	if res.Cwd != "" && res.Cwd != before {
		r.Cwd = res.Cwd
	}
	if rc, ok := e.be.(backend.Recreator); ok && rc.Recreated() {
		r.EnvironmentRecreated = true
	}
	e.mu.Lock()
	if e.replaced {
		r.EnvironmentRecreated, e.replaced = true, false
	}
	e.mu.Unlock()
	return r
}

// Close stops the session and releases the backend's environment.
func (e *Environment) Close(ctx context.Context) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.mu.Unlock()
	err := e.sess.Close()
	if berr := e.be.Close(ctx); berr != nil {
		err = errors.Join(err, berr)
	}
	return err
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max+t.max/4 {
		t.buf = t.buf[:copy(t.buf, t.buf[len(t.buf)-t.max:])]
	}
	return len(p), nil
}

func (t *tailBuffer) bytes() []byte {
	if len(t.buf) > t.max {
		return t.buf[len(t.buf)-t.max:]
	}
	return t.buf
}
