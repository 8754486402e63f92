// Package manager keeps one environment per environment key (the task id):
// created lazily on first use through the backend registry, reused for every
// later call, and torn down on request or at shutdown.
package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/a55dbaac/berth/approval"
	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/shparse"
	"github.com/a55dbaac/berth/process"
	"github.com/a55dbaac/berth/session"
	"github.com/a55dbaac/berth/terminal"
)

// DefaultKey is the environment key used when a caller gives none.
const DefaultKey = "default"

// Manager owns the environments of one berth process. It is safe for
// concurrent use; concurrent first calls for one key create exactly one
// environment.
type Manager struct {
	cfg     *config.Config
	factory backend.Factory
	log     *slog.Logger
	procs   *process.Registry
	gate    *approval.Gate
	floor   approvalFloor // the loosest approval settings SetApprovals applies
	input   inputLines    // unfinished lines of input to processes, for the gate
	// progress hears about backends' long set-up steps; nil: nobody.
	progress func(backend.Event)
	// forks is what Fork, Checkpoint and Restore keep (fork.go).
	forks forkState

	mu      sync.Mutex
	envs    map[string]*entry
	swept   map[string]bool // keys whose environment the idle sweep cleaned up
	closed  bool
	sweeper chan struct{} // closed to stop the sweeper
}

type entry struct {
	ready chan struct{} // closed once env or err is set
	env   *terminal.Environment
	err   error
}

// live returns the environment once it is built, nil while it is being
// created or when creating it failed.
func (e *entry) live() *terminal.Environment {
	select {
	case <-e.ready:
		return e.env
	default:
		return nil
	}
}

// New returns a manager for the given configuration. A configuration
// without a home (a hand-built one) gets the default berth home
// (BERTH_HOME, else ~/.berth), so spill files never land in the caller's
// working directory; MaxOutputChars 0 means the contract's default.
func New(cfg *config.Config, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	if cfg.Home == "" || cfg.MaxOutputChars <= 0 {
		c := *cfg
		if c.Home == "" {
			if home, err := config.HomeDir(nil); err == nil {
				c.Home = home
			} else {
				c.Home = filepath.Join(os.TempDir(), "berth")
				log.Warn("manager: no berth home; using a temporary one", "home", c.Home, "err", err)
			}
		}
		if c.MaxOutputChars <= 0 {
			c.MaxOutputChars = config.DefaultMaxOutputChars
		}
		cfg = &c
	}
	m := &Manager{
		cfg: cfg, log: log, envs: map[string]*entry{}, swept: map[string]bool{},
		procs: process.NewRegistry(time.Duration(cfg.Terminal.Timeout) * time.Second),
	}
	m.gate = newGate(cfg, log, &m.floor)
	return m
}

// Gate returns the approval gate every command passes before it reaches an
// environment.
func (m *Manager) Gate() *approval.Gate { return m.gate }

// approvalContext says where a command of env would run, for the gate:
// the backend, whether the backend keeps commands from any machine they
// could damage (its reported isolation, never its name), the working
// directory (workdir when given, else the shell's), and, when the
// environment is this machine's own filesystem, the home directory and
// berth's own files.
func (m *Manager) approvalContext(env *terminal.Environment, workdir string) approval.Context {
	c := approval.Context{Backend: m.cfg.Terminal.Backend}
	if env != nil {
		caps := backend.CapabilitiesOf(env.Backend())
		c.Sandboxed = caps.Isolation == backend.IsolationImage
		if caps.Isolation == backend.IsolationWorkspace {
			c.Writable = slices.Clone(caps.Confinement.Writable)
			c.Protected = slices.Clone(caps.Confinement.Protected)
			c.SignalsConfined = caps.Confinement.Signals
		}
		c.Cwd = env.Session().Cwd()
		// berth's own files and the home are this machine's when the
		// environment is: natively, or confined to its workspace on it (the
		// file tools then take the confined shell, but the paths are the
		// same).
		if caps.NativeFS || caps.Isolation == backend.IsolationWorkspace {
			if h := m.cfg.Getenv("HOME"); h != "" {
				c.Home = h
			} else {
				c.Home, _ = os.UserHomeDir()
			}
			c.BerthHome, c.ConfigPath = m.cfg.Home, m.cfg.Path
			c.Resolve = approval.NativeResolve
			// berth's own processes, which a command must not signal
			// unasked (kill -9 $PPID ends every task's environment).
			c.BerthPIDs = []string{strconv.Itoa(os.Getpid())}
			if c.PPID = env.Session().ShellParent(approval.NativeParentPID); c.PPID != "" && c.PPID != c.BerthPIDs[0] {
				c.BerthPIDs = append(c.BerthPIDs, c.PPID)
			}
			if c.Cwd == "" {
				// Before its first command the shell's cwd is not known yet:
				// on this machine's files it starts in terminal.cwd, read
				// against berth's own directory ("" and "." are that).
				c.Cwd = hostStartDir(m.cfg.Terminal.Cwd, c.Home)
			}
		}
		c.Names = env.Session().Names()
		c.Definitions = env.Session().Definitions()
		if ifs, ok := env.Session().IFS(); ok {
			c.IFS = &ifs
		}
	}
	if workdir != "" {
		c.Cwd = workdir
	}
	return c
}

// hostStartDir is where a shell on this machine's files starts for
// terminal.cwd cwd: absolute as given, ~ in home, anything else against
// berth's own working directory; "" when that cannot be known.
func hostStartDir(cwd, home string) string {
	switch {
	case filepath.IsAbs(cwd):
		return filepath.Clean(cwd)
	case cwd == "~" || strings.HasPrefix(cwd, "~/"):
		if home == "" {
			return ""
		}
		return filepath.Join(home, cwd[1:])
	}
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	return filepath.Join(wd, cwd)
}

// NewWithFactory returns a manager whose environments come from factory
// instead of the backend registry: for Go programs with their own backend,
// and for the conformance suite.
func NewWithFactory(cfg *config.Config, log *slog.Logger, factory backend.Factory) *Manager {
	m := New(cfg, log)
	m.factory = factory
	return m
}

// SetProgress sends the progress of the backends' long set-up steps (an
// image pull, a sandbox create, ...) to fn, for a person watching a
// terminal; call it before the first environment is made. It never reaches
// a tool's result.
func (m *Manager) SetProgress(fn func(backend.Event)) { m.progress = fn }

// Processes returns the registry of background processes.
func (m *Manager) Processes() *process.Registry { return m.procs }

// Config returns the configuration the manager was built with.
func (m *Manager) Config() *config.Config { return m.cfg }

// ErrClosed is returned after CloseAll.
var ErrClosed = errors.New("manager: shut down")

// Env returns the environment for key, creating it on first use. A backend
// that cannot be built or reached is an error; there is never a fallback to
// another backend.
func (m *Manager) Env(ctx context.Context, key string) (*terminal.Environment, error) {
	if key == "" {
		key = DefaultKey
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	e, ok := m.envs[key]
	if !ok {
		e = &entry{ready: make(chan struct{})}
		m.envs[key] = e
		m.mu.Unlock()
		m.build(ctx, key, e)
		return e.env, e.err
	}
	m.mu.Unlock()
	select {
	case <-e.ready:
		return e.env, e.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// build creates e's environment and answers everyone waiting on it. It
// answers them however create ends: also when the goroutine running it
// exits inside the backend's constructor (runtime.Goexit, as a test
// helper's t.Fatal does), so that a CloseAll waiting for this entry — a
// test's cleanup, run on that very goroutine — returns instead of
// waiting for ever.
func (m *Manager) build(ctx context.Context, key string, e *entry) {
	returned := false
	defer func() {
		if !returned {
			e.env, e.err = nil, fmt.Errorf("environment %q: creating it was abandoned (the goroutine creating it exited)", key)
		}
		close(e.ready)
		if e.err != nil {
			m.mu.Lock()
			if m.envs[key] == e {
				delete(m.envs, key)
			}
			m.mu.Unlock()
		}
	}()
	e.env, e.err = m.create(ctx, key, nil)
	returned = true
}

// create builds a backend and its environment for key, from the
// checkpoint from when it is not nil (a fork, a restore). A panic in a
// backend's constructor becomes this key's error, so callers waiting on the
// entry are answered instead of hanging.
func (m *Manager) create(ctx context.Context, key string, from *backend.Checkpoint) (env *terminal.Environment, err error) {
	defer func() {
		if p := recover(); p != nil {
			env, err = nil, fmt.Errorf("environment %q: backend constructor panicked: %v", key, p)
			m.log.Error("manager: backend constructor panicked", "key", key, "panic", p, "stack", string(debug.Stack()))
		}
	}()
	t := m.cfg.Terminal
	var be backend.Backend
	opts := backend.Options{Key: key, Config: t, Home: m.cfg.Home, ConfigFile: m.cfg.Path, Logger: m.log, Getenv: m.cfg.Getenv, Progress: m.progress, From: from}
	if m.factory != nil {
		be, err = m.factory(ctx, opts)
	} else {
		reg, ok := backend.Lookup(t.Backend)
		if !ok {
			return nil, fmt.Errorf("backend %q is not available in this build (available: %s); refusing to run anywhere else",
				t.Backend, strings.Join(backend.Names(), ", "))
		}
		be, err = reg.New(ctx, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("%s backend for %q: %w", t.Backend, key, err)
	}
	cwd := ""
	if path.IsAbs(t.Cwd) || t.Cwd == "~" || strings.HasPrefix(t.Cwd, "~/") {
		cwd = t.Cwd
	}
	if r, ok := be.(backend.Relocator); ok && cwd != "" {
		cwd = r.Relocate(cwd) // a fork's copy of the configured directory
	}
	env = terminal.New(be, terminal.Options{
		DefaultTimeout: time.Duration(t.Timeout) * time.Second,
		MaxOutputChars: m.cfg.MaxOutputChars,
		SpillDir:       filepath.Join(m.cfg.Home, "spill"),
		FreshShell:     !t.PersistentShell,
		Replaces:       m.takeSwept(key),
		OnTimeout:      t.OnTimeout,
		Session: session.Options{
			Cwd:    cwd,
			Grace:  time.Duration(t.DaemonTermGraceSeconds * float64(time.Second)),
			Logger: m.log,
		},
	})
	m.log.Debug("environment created", "backend", t.Backend, "key", key)
	return env, nil
}

// TerminalResult is a terminal tool call's answer: exactly one of
// Foreground and Background is set.
type TerminalResult struct {
	Foreground *terminal.Result
	Background *process.StartResult
}

// Value is the set result, for encoding as the tool's JSON result.
func (r TerminalResult) Value() any {
	if r.Background != nil {
		return *r.Background
	}
	return *r.Foreground
}

// Failed reports whether the call could not run (its "error" is set).
func (r TerminalResult) Failed() bool {
	if r.Background != nil {
		return r.Background.Error != nil
	}
	return r.Foreground.Error != nil
}

// Terminal answers a terminal tool call the way the contract describes: a
// background request starts a tracked process; a foreground request whose
// timeout exceeds max_foreground_timeout is run in the background instead
// and says so; anything else runs in the foreground. opts give the call's
// asker and detach (Call).
func (m *Manager) Terminal(ctx context.Context, key string, req terminal.Request, opts ...CallOption) TerminalResult {
	if req.Background {
		res := m.Background(ctx, key, req, opts...)
		return TerminalResult{Background: &res}
	}
	if limit := m.cfg.Terminal.MaxForegroundTimeout; limit > 0 && req.Timeout > limit {
		res := m.Background(ctx, key, req, opts...)
		if res.Error == nil {
			res.Output = fmt.Sprintf("Command timeout %ds exceeds the foreground limit of %ds (terminal.max_foreground_timeout), "+
				"so it was started in the background. Follow it with the process tool: "+
				"action \"wait\", \"poll\" or \"log\" with session_id %q.", req.Timeout, limit, res.SessionID)
		}
		return TerminalResult{Background: &res}
	}
	res := m.Run(ctx, key, req, opts...)
	return TerminalResult{Foreground: &res}
}

// Background starts req as a tracked background process in key's
// environment. opts give the call's asker (Call).
func (m *Manager) Background(ctx context.Context, key string, req terminal.Request, opts ...CallOption) process.StartResult {
	call := callOf(opts)
	if key == "" {
		key = DefaultKey
	}
	if err := terminal.Validate(req); err != nil {
		return process.StartError(err)
	}
	if req.PTY {
		if cmd := keyEditing(req.Command); cmd != "" {
			return process.StartError(fmt.Errorf("background process refused: %s", keyEditingRefusal(cmd)))
		}
	}
	env, err := m.Env(ctx, key)
	if err != nil {
		return process.StartError(err)
	}
	d := m.gate.CommandScript(ctx, key, shparse.New(req.Command), m.approvalContext(env, req.Workdir), call.Asker)
	if !d.Allowed() {
		res := process.StartError(d.Err())
		res.ExitCode = terminal.StatusBlocked
		res.Approval = d
		return res
	}
	env.Touch()
	res := m.procs.Start(ctx, env, key, req)
	res.Approval = d
	return res
}

// Process answers a process tool call; list shows the processes of key
// ("" for every key). opts give the call's asker (Call), which the input
// of write, submit and close may need.
func (m *Manager) Process(ctx context.Context, key string, req process.Request, opts ...CallOption) process.Result {
	if key == "" && req.Action != "list" {
		key = DefaultKey // where Background put it
	}
	switch req.Action {
	case "write", "submit", "close":
		if res := m.gateInput(ctx, key, req, callOf(opts).Asker); res != nil {
			return res
		}
	}
	return m.procs.Do(ctx, key, req)
}

// Run runs a foreground request in key's environment. A command still
// running at its timeout with on_timeout "background" (the request's, else
// terminal.on_timeout), or one the process tool's detach action names, is
// moved to the background: the result says moved_to_background and gives
// the session_id the process tool follows it with. opts give the call's
// asker and detach (Call).
func (m *Manager) Run(ctx context.Context, key string, req terminal.Request, opts ...CallOption) terminal.Result {
	call := callOf(opts)
	checked, err := terminal.Check(req)
	if err != nil {
		return terminal.ErrorResult(err)
	}
	if key == "" {
		key = DefaultKey
	}
	env, err := m.Env(ctx, key)
	if err != nil {
		return terminal.ErrorResult(err)
	}
	// The command is validated once (terminal.Check, which bounds its
	// nesting; RunChecked does not check it again) and parsed once: the
	// gate, the session and the result read the same tree.
	sc := shparse.New(req.Command)
	actx := m.approvalContext(env, req.Workdir)
	d := m.gate.CommandScript(ctx, key, sc, actx, call.Asker)
	if !d.Allowed() {
		return terminal.BlockedResult(d)
	}
	// The call is registered while it runs: process list shows it, and
	// process detach (or a command still running at its timeout with
	// on_timeout background) moves it to the background under its id.
	fg := m.procs.BeginForeground(key, req.Command, actx.Cwd)
	if ch := call.Detach; ch != nil {
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			select {
			case <-ch:
				fg.Detach()
			case <-stop:
			}
		}()
	}
	tc := fg.Call()
	tc.Script = sc
	res := env.RunChecked(ctx, checked, tc)
	m.procs.End(fg, env, req.Command, res)
	res.Approval = d
	return res
}

// Keys lists the keys with a live environment.
func (m *Manager) Keys() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	keys := make([]string, 0, len(m.envs))
	for k := range m.envs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Close tears down key's environment (a persistent one is stopped, not
// deleted, by its backend) and ends its approval session: "this session"
// answers given for key are forgotten.
func (m *Manager) Close(ctx context.Context, key string) error {
	return m.close(ctx, key, true)
}

// close tears down key's environment; endSession also forgets the
// session's "this session" approvals.
func (m *Manager) close(ctx context.Context, key string, endSession bool) error {
	m.mu.Lock()
	e, ok := m.envs[key]
	delete(m.envs, key)
	m.mu.Unlock()
	if endSession {
		m.gate.EndSession(key)
	}
	if !ok {
		return nil
	}
	select {
	case <-e.ready:
	case <-ctx.Done():
		return fmt.Errorf("environment %q: still being created when the close gave up: %w", key, ctx.Err())
	}
	if e.env == nil {
		return nil
	}
	m.procs.KillAll(ctx, key)
	return e.env.Close(ctx)
}

// StartSweeper starts the idle sweeper: environments unused for longer
// than lifetime_seconds are cleaned up, except those with a running
// background process. The sweep interval is a quarter of the lifetime,
// between 250 ms and 60 s, so short lifetimes (tests) are honoured
// promptly. It stops at CloseAll or when ctx ends.
func (m *Manager) StartSweeper(ctx context.Context) {
	lifetime := time.Duration(m.cfg.Terminal.LifetimeSeconds) * time.Second
	if lifetime <= 0 {
		return
	}
	interval := min(max(lifetime/4, 250*time.Millisecond), 60*time.Second)
	m.mu.Lock()
	if m.sweeper != nil || m.closed {
		m.mu.Unlock()
		return
	}
	stop := make(chan struct{})
	m.sweeper = stop
	m.mu.Unlock()
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				m.Sweep(ctx, lifetime)
			case <-stop:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
}

// Sweep cleans up the environments idle for longer than lifetime that have
// no running background process, and returns their keys.
func (m *Manager) Sweep(ctx context.Context, lifetime time.Duration) []string {
	var idle []string
	m.mu.Lock()
	for k, e := range m.envs {
		env := e.live()
		if env == nil || time.Since(env.LastUsed()) <= lifetime || env.Busy() {
			continue
		}
		if m.procs.Running(k) > 0 {
			continue
		}
		idle = append(idle, k)
	}
	envs := make([]*terminal.Environment, len(idle))
	for i, k := range idle {
		envs[i] = m.envs[k].env
	}
	m.mu.Unlock()
	var swept []string
	for i, k := range idle {
		// Jobs the shell itself started (`cmd &`) die with it: such an
		// environment is not idle.
		if envs[i].Session().HasJobs(ctx) {
			envs[i].Touch()
			continue
		}
		m.log.Debug("cleaning idle environment", "key", k, "lifetime", lifetime)
		m.mu.Lock()
		m.swept[k] = true // before Close: the next call may come at once
		m.mu.Unlock()
		// The environment is replaced on the next call of the same
		// session, so the session's approvals stay.
		if err := m.close(ctx, k, false); err != nil {
			m.log.Warn("clean idle environment", "key", k, "err", err)
		}
		swept = append(swept, k)
	}
	return swept
}

// takeSwept reports, once, whether key's environment was cleaned up by the
// idle sweep, so its replacement says environment_recreated.
func (m *Manager) takeSwept(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	was := m.swept[key]
	delete(m.swept, key)
	return was
}

// CloseAll tears every environment down and refuses new ones.
func (m *Manager) CloseAll(ctx context.Context) error {
	m.mu.Lock()
	m.closed = true
	if m.sweeper != nil {
		close(m.sweeper)
	}
	keys := make([]string, 0, len(m.envs))
	for k := range m.envs {
		keys = append(keys, k)
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(keys))
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.Close(ctx, k)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
