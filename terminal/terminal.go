// Package terminal is the tool layer of berth: it takes the terminal tool's
// requests, runs them in an environment's persistent session and returns the
// contract's result object, with output bounded, cleaned, redacted and
// truncated by the output pipeline.
package terminal

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/a55dbaac/berth/approval"
	"github.com/a55dbaac/berth/backend"
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
	// Err is the Go error behind Error, for callers that tell errors apart
	// with errors.Is and errors.As (a *backend.UnreachableError,
	// session.ErrShellLost); it is not part of the JSON contract.
	Err error `json:"-"`
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

// MaxTimeout is the longest timeout a request may ask for, in seconds (one
// day); longer work belongs in the background.
const MaxTimeout = 86400

// Validate checks a request's fields and returns an error naming the bad
// value and what is accepted.
func Validate(req Request) error {
	if strings.TrimSpace(req.Command) == "" {
		return errors.New("command is empty: give the shell command to run")
	}
	if strings.IndexByte(req.Command, 0) >= 0 {
		return errors.New("command contains a NUL byte, which no shell can receive")
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
	return nil
}

// Run executes a foreground request. Cancelling ctx interrupts the command
// (exit 130 with the interrupt marker); the request's timeout stops it with
// exit 124 and the timeout marker. Either way the command's whole process
// tree inside the environment is killed and the session stays usable.
func (e *Environment) Run(ctx context.Context, req Request) Result {
	if err := Validate(req); err != nil {
		return ErrorResult(err)
	}
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
	capture := output.NewCapture(output.Options{MaxChars: e.opts.MaxOutputChars, SpillDir: e.opts.SpillDir})
	sreq := session.Request{Command: req.Command, Timeout: timeout, Workdir: req.Workdir}
	if req.StdinData != nil {
		sreq.Stdin = []byte(*req.StdinData)
	}
	res, err := e.sess.Run(ctx, sreq, capture)
	if e.opts.FreshShell {
		defer e.sess.Reset()
	}
	if err != nil {
		capture.Finish("")
		return ErrorResult(err)
	}
	marker := ""
	switch {
	case res.TimedOut:
		marker = fmt.Sprintf(timeoutMarker, int(timeout.Round(time.Second)/time.Second))
	case res.Interrupted:
		marker = interruptMarker
	}
	out := capture.Finish(marker)
	r := Result{
		Output:          out.Output,
		ExitCode:        res.ExitCode,
		ExitCodeMeaning: ExitCodeMeaning(req.Command, res.ExitCode),
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
