package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/process"
	"github.com/a55dbaac/berth/session"
	"github.com/a55dbaac/berth/terminal"
)

// Fork, checkpoint and restore (docs/fork.md).
//
// A checkpoint is the environment's files, copied by its backend's native
// means (backend.Checkpointer), and the shell's state, captured from the
// live shell (session.Hold): the working directory, exported variables,
// functions, aliases, shell options and umask. Background processes are
// never carried. Fork makes a new environment from a transient checkpoint
// of a live one, which keeps running untouched; Checkpoint keeps a named
// one, whose record lives in berth's home (<home>/checkpoints/<backend>/
// <key>/<name>.json) and survives restarts; Restore replaces an
// environment with a new one made from a named checkpoint.
//
// None of them copies an environment under a running command: each waits
// for the foreground command of the environment to end, at most ForkWait
// and never past the call's context, and otherwise fails with an error
// wrapping ErrBusy that names the command and what to do.

// ForkWait bounds how long Fork, Checkpoint and Restore wait for the
// environment's running foreground command to end (the call's context may
// end the wait sooner).
const ForkWait = 30 * time.Second

// The kinds of error of Fork, Checkpoint, Restore and RemoveCheckpoint,
// for errors.Is; the errors' own text says what happened and what to do.
var (
	// ErrNoEnvironment: the key has no live environment in this manager.
	ErrNoEnvironment = errors.New("no such environment")
	// ErrEnvironmentExists: a fork's target key has an environment.
	ErrEnvironmentExists = errors.New("environment exists")
	// ErrNoCheckpoint: the key has no checkpoint of that name.
	ErrNoCheckpoint = errors.New("no such checkpoint")
	// ErrCannotCheckpoint: the environment's backend cannot checkpoint it.
	ErrCannotCheckpoint = errors.New("the backend cannot checkpoint this environment")
	// ErrBusy: a foreground command was still running when the wait ended.
	ErrBusy = errors.New("a command is running")
	// ErrBound: a checkpoint would pass checkpoints.max_per_environment or
	// checkpoints.max_total_mb; nothing kept was lost.
	ErrBound = errors.New("checkpoint bound reached")
)

// forkError is an error of one of the kinds above.
type forkError struct {
	kind error
	msg  string
	err  error // the cause, if any
}

func (e *forkError) Error() string        { return e.msg }
func (e *forkError) Is(target error) bool { return target == e.kind }
func (e *forkError) Unwrap() error        { return e.err }

func newError(kind, cause error, format string, args ...any) error {
	return &forkError{kind: kind, msg: fmt.Sprintf(format, args...), err: cause}
}

// forkState is what a manager keeps for forks and checkpoints.
type forkState struct {
	// admin removes checkpoints of a manager made with NewWithFactory
	// (SetCheckpointAdmin); others ask the backend registry.
	admin backend.CheckpointAdmin
}

// SetCheckpointAdmin gives a manager made with NewWithFactory the means
// to remove the checkpoints its backends make (what
// backend.Registration.Checkpoints is to the registry's backends): the
// transient checkpoint of a fork, a checkpoint removed or pushed past a
// bound. Call it before the first fork or checkpoint.
func (m *Manager) SetCheckpointAdmin(a backend.CheckpointAdmin) { m.forks.admin = a }

// Carried says what a fork, a checkpoint or a restore carries into the
// new environment, and what it does not.
type Carried struct {
	// Files says how the environment's files were copied: the backend's
	// Capabilities.Checkpoint ("workspace copied with reflinks").
	Files string `json:"files"`
	// Shell is the shell whose state was carried: bash, or sh (then no
	// functions, aliases or shell options).
	Shell string `json:"shell"`
	// Cwd is the shell's working directory (in the new environment, for
	// a fork or a restore).
	Cwd string `json:"cwd,omitempty"`
	// Variables are the exported variables carried: set, changed or
	// unset by the commands (their values are not shown).
	Variables []string `json:"exported_variables"`
	// Functions and Aliases are the names of those carried.
	Functions []string `json:"functions"`
	Aliases   []string `json:"aliases"`
	// ShellOptions says the shell options (shopt, set -o) were carried.
	ShellOptions bool   `json:"shell_options"`
	Umask        string `json:"umask,omitempty"`
	// NotCarried says what stayed behind: background processes always.
	NotCarried []string `json:"not_carried"`
}

// carriedOf describes what st and a backend's copy of files carry.
func carriedOf(files string, st session.State, cwd string, background string) Carried {
	c := Carried{Files: files, Shell: st.Shell, Cwd: cwd, Umask: st.Umask,
		Variables: st.VariableNames(), Functions: st.FunctionNames(), Aliases: st.AliasNames(), ShellOptions: st.Options != ""}
	for _, l := range []*[]string{&c.Variables, &c.Functions, &c.Aliases} {
		if *l == nil {
			*l = []string{}
		}
	}
	c.NotCarried = []string{"background processes" + background, "shell variables that were not exported", "traps, jobs and the directory stack"}
	if st.Shell == "sh" {
		c.NotCarried = append(c.NotCarried, "functions, aliases and shell options (the shell is POSIX sh, which cannot list them)")
	}
	return c
}

// ForkResult is what Fork did.
type ForkResult struct {
	From    string `json:"from"`
	To      string `json:"to"`
	Backend string `json:"backend"`
	Carried
}

// RestoreResult is what Restore did.
type RestoreResult struct {
	Key     string `json:"key"`
	Name    string `json:"name"`
	Backend string `json:"backend"`
	// Replaced says key had an environment, which was closed and removed
	// (a persistent one too) to make way for the restored one.
	Replaced bool `json:"replaced"`
	Carried
}

// backendName is the name of the manager's backend, which its
// checkpoints' records are filed under.
func (m *Manager) backendName() string { return m.cfg.Terminal.Backend }

// store is the record store of the manager's home.
func (m *Manager) store() store { return store{home: m.cfg.Home} }

// backendOptions are the options the manager gives its backend's
// administration for key (what create gives the constructor).
func (m *Manager) backendOptions(key string) backend.Options {
	return backend.Options{Key: key, Config: m.cfg.Terminal, Home: m.cfg.Home, ConfigFile: m.cfg.Path, Logger: m.log, Getenv: m.cfg.Getenv, Progress: m.progress}
}

// checkpointAdmin is what removes checkpoints of backendName.
func (m *Manager) checkpointAdmin(backendName string) backend.CheckpointAdmin {
	if m.factory != nil {
		return m.forks.admin
	}
	if r, ok := backend.Lookup(backendName); ok {
		return r.Checkpoints
	}
	return nil
}

// envAdmin is what lists and removes the environments the backend keeps,
// nil for a manager made with NewWithFactory.
func (m *Manager) envAdmin() backend.EnvAdmin {
	if m.factory != nil {
		return nil
	}
	if r, ok := backend.Lookup(m.backendName()); ok {
		return r.Envs
	}
	return nil
}

// removeCheckpoint removes what the backend keeps for cp.
func (m *Manager) removeCheckpoint(ctx context.Context, cp backend.Checkpoint) error {
	a := m.checkpointAdmin(cp.Backend)
	if a == nil {
		return fmt.Errorf("the %s backend has no way to remove checkpoints (Registration.Checkpoints); %s stays", cp.Backend, cp.ID)
	}
	if err := a.Remove(ctx, m.backendOptions(cp.Key), cp); err != nil {
		return fmt.Errorf("remove %s checkpoint %s: %w", cp.Backend, cp.ID, err)
	}
	return nil
}

// live returns key's environment, waiting for one being made; an error
// of kind ErrNoEnvironment when the manager has none.
func (m *Manager) live(ctx context.Context, key string) (*terminal.Environment, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	e, ok := m.envs[key]
	m.mu.Unlock()
	if ok {
		select {
		case <-e.ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("environment %q: still being created: %w", key, ctx.Err())
		}
		if e.env != nil {
			return e.env, nil
		}
	}
	return nil, newError(ErrNoEnvironment, nil, "no environment %q here: an environment exists once a command has run in it (berth daemon status lists the daemon's, berth env ls the kept ones)", key)
}

// reserve claims key for an environment being made: callers of Env wait
// for it. An error of kind ErrEnvironmentExists when key has one.
func (m *Manager) reserve(key string) (*entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if _, ok := m.envs[key]; ok {
		return nil, newError(ErrEnvironmentExists, nil, "environment %q exists: choose another name, or remove it first (berth env rm %s)", key, key)
	}
	e := &entry{ready: make(chan struct{})}
	m.envs[key] = e
	return e, nil
}

// release gives up a reservation that made nothing.
func (m *Manager) release(key string, e *entry, err error) {
	e.err = err
	close(e.ready)
	m.mu.Lock()
	if m.envs[key] == e {
		delete(m.envs, key)
	}
	m.mu.Unlock()
}

// kept reports whether the backend keeps an environment of key beyond
// this manager (a persistent container from an earlier berth).
func (m *Manager) kept(ctx context.Context, key string) bool {
	if m.factory != nil {
		return false
	}
	return Kept(ctx, m.cfg, key)
}

// Kept reports whether cfg's backend keeps an environment of key beyond
// any berth process (a persistent container, a local fork's workspace:
// what berth env ls lists); false when it keeps none or cannot be asked.
func Kept(ctx context.Context, cfg *config.Config, key string) bool {
	r, ok := backend.Lookup(cfg.Terminal.Backend)
	if !ok || r.Envs == nil {
		return false
	}
	envs, err := r.Envs.List(ctx, backend.Options{Key: key, Config: cfg.Terminal, Home: cfg.Home, ConfigFile: cfg.Path, Getenv: cfg.Getenv})
	if err != nil {
		return false
	}
	for _, e := range envs {
		if e.Key == key {
			return true
		}
	}
	return false
}

// busyError is the error of a wait that ended while key's command ran.
func (m *Manager) busyError(key string, cause error) error {
	what, id := "", ""
	if res := m.procs.Do(context.Background(), key, process.Request{Action: "list"}); res != nil {
		if items, ok := res["processes"].([]map[string]any); ok {
			for _, it := range items {
				if it["status"] == process.StatusForeground {
					id, _ = it["session_id"].(string)
					cmd, _ := it["command"].(string)
					what = fmt.Sprintf(" (%s: %q)", id, cmd)
					break
				}
			}
		}
	}
	hint := "wait for it to end, or stop it, then try again"
	if id != "" {
		hint = fmt.Sprintf("wait for it to end, move it to the background (process detach %s) or stop it (process kill %s), then try again", id, id)
	}
	return newError(ErrBusy, cause, "environment %q is running a command%s: berth never copies an environment under a running command, and it was still running when the wait ended (%v); %s",
		key, what, cause, hint)
}

// capture takes a checkpoint of env's files named name ("" for a fork's
// transient one) together with its shell's state, under no running
// command (session.Hold).
func (m *Manager) capture(ctx context.Context, key string, env *terminal.Environment, name string) (backend.Checkpoint, session.State, string, error) {
	be := env.Backend()
	caps := backend.CapabilitiesOf(be)
	cpr, ok := be.(backend.Checkpointer)
	if !ok || caps.Checkpoint == "" {
		why := caps.NoCheckpoint
		if why == "" {
			why = "it does not implement checkpoints"
		}
		return backend.Checkpoint{}, session.State{}, "", newError(ErrCannotCheckpoint, nil, "the %s backend cannot checkpoint, fork or restore environment %q: %s", be.Name(), key, why)
	}
	var cp backend.Checkpoint
	var st session.State
	err := env.Session().Hold(ctx, ForkWait, func(s session.State) error {
		st = s
		what := "checkpoint " + name + " of " + key
		if name == "" {
			what = "copying " + key
		}
		step := backend.Options{Progress: m.progress}.Begin(what, "")
		c, err := cpr.Checkpoint(ctx, name)
		step.End(err)
		if err != nil {
			return fmt.Errorf("%s backend: checkpoint of %q: %w", be.Name(), key, err)
		}
		cp = c
		return nil
	})
	env.Touch()
	if errors.Is(err, session.ErrBusy) {
		return cp, st, "", m.busyError(key, err)
	}
	if err != nil {
		return cp, st, "", err
	}
	if cp.Backend == "" {
		cp.Backend = be.Name()
	}
	if cp.Key == "" {
		cp.Key = key
	}
	cp.Name = name
	if cp.Created.IsZero() {
		cp.Created = time.Now()
	}
	return cp, st, caps.Checkpoint, nil
}

// buildFrom makes key's environment in e from cp and replays st in its
// shell, then answers everyone waiting on e (as build does, however the
// making ends).
func (m *Manager) buildFrom(ctx context.Context, key string, e *entry, cp *backend.Checkpoint, st session.State) {
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
	e.env, e.err = m.createFrom(ctx, key, cp, st)
	returned = true
}

// createFrom makes key's environment from cp, and sets st in its shell
// with paths mapped through the new backend's Relocator.
func (m *Manager) createFrom(ctx context.Context, key string, cp *backend.Checkpoint, st session.State) (*terminal.Environment, error) {
	step := backend.Options{Progress: m.progress}.Begin("making "+key+" from the copy", "")
	env, err := m.create(ctx, key, cp)
	step.End(err)
	if err != nil {
		return nil, err
	}
	var relocate func(string) string
	if r, ok := env.Backend().(backend.Relocator); ok {
		relocate = r.Relocate
	}
	if err := env.Session().Replay(ctx, st, relocate); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if cerr := env.Close(cctx); cerr != nil {
			m.log.Warn("manager: close an environment whose shell state could not be restored", "key", key, "err", cerr)
		}
		return nil, fmt.Errorf("environment %q: %w", key, err)
	}
	return env, nil
}

// Fork makes a new environment to from a copy of the live environment
// from: its files (as its backend copies them, Capabilities.Checkpoint)
// and its shell's state, with the working directory (and exported paths)
// mapped into the copy where the backend keeps it elsewhere
// (backend.Relocator). The source keeps running, untouched; its
// background processes are not carried. See ForkTo.
func (m *Manager) Fork(ctx context.Context, from, to string, opts ...CallOption) (ForkResult, error) {
	return m.ForkTo(ctx, from, m, to, opts...)
}

// ForkTo is Fork with the new environment made in dst, a manager of the
// same backend and configuration (the daemon keeps one manager per key).
// It waits for a foreground command of from to end (ForkWait, the call's
// context), and fails with an error of kind ErrBusy otherwise; with
// ErrNoEnvironment when from has no live environment, ErrEnvironmentExists
// when to has one (here or kept by the backend), ErrCannotCheckpoint when
// from's backend cannot copy it. The transient checkpoint is removed once
// the new environment is made.
func (m *Manager) ForkTo(ctx context.Context, from string, dst *Manager, to string, opts ...CallOption) (ForkResult, error) {
	if from == "" {
		from = DefaultKey
	}
	if to == "" {
		return ForkResult{}, errors.New("fork: the new environment needs a key (berth env fork SRC DST)")
	}
	if from == to {
		return ForkResult{}, fmt.Errorf("fork: source and target are both %q: give the new environment another key", from)
	}
	if dst.backendName() != m.backendName() {
		return ForkResult{}, fmt.Errorf("fork: %q runs on %s, and the target's configuration says %s: a fork stays on its source's backend", from, m.backendName(), dst.backendName())
	}
	src, err := m.live(ctx, from)
	if err != nil {
		return ForkResult{}, err
	}
	e, err := dst.reserve(to)
	if err != nil {
		return ForkResult{}, err
	}
	if dst.kept(ctx, to) {
		err := newError(ErrEnvironmentExists, nil, "environment %q exists on %s (berth env ls lists it): choose another name, or remove it first (berth env rm %s)", to, dst.backendName(), to)
		dst.release(to, e, err)
		return ForkResult{}, err
	}
	cp, st, files, err := m.capture(ctx, from, src, "")
	if err != nil {
		dst.release(to, e, err)
		return ForkResult{}, err
	}
	defer func() {
		// The copy is the new environment's now (or nobody's): the
		// transient checkpoint goes, even when the call was cancelled.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := m.removeCheckpoint(rctx, cp); err != nil {
			m.log.Warn("manager: remove a fork's transient checkpoint", "from", from, "to", to, "err", err)
		}
	}()
	dst.buildFrom(ctx, to, e, &cp, st)
	if e.err != nil {
		return ForkResult{}, fmt.Errorf("fork %s into %s: %w", from, to, e.err)
	}
	bg := ""
	if n := m.procs.Running(from); n > 0 {
		bg = fmt.Sprintf(" (%d running in %s, which keeps them)", n, from)
	}
	return ForkResult{From: from, To: to, Backend: m.backendName(), Carried: carriedOf(files, st, e.env.Session().Cwd(), bg)}, nil
}

// bounds are the checkpoint bounds of a call: the call's own, else the
// configuration's.
func (m *Manager) bounds(call Call) config.Checkpoints {
	b := m.cfg.Checkpoints
	if call.Bounds != nil {
		b = *call.Bounds
	}
	if b.MaxPerEnvironment <= 0 {
		b.MaxPerEnvironment = config.DefaultMaxCheckpoints
	}
	if b.MaxTotalMB <= 0 {
		b.MaxTotalMB = config.DefaultMaxCheckpointTotalMB
	}
	return b
}

// Checkpoint keeps a copy of key's live environment named name: its files
// (the backend's checkpoint) and its shell's state, recorded in berth's
// home so that Restore can bring them back, also after a restart. It
// waits for a running foreground command as Fork does. A checkpoint of an
// existing name replaces it: the new one is taken first, the old one
// removed once the new one is recorded. Past a bound
// (checkpoints.max_per_environment, checkpoints.max_total_mb, or the
// call's WithCheckpointBounds) the error is of kind ErrBound, names the
// key and the value, and every checkpoint already kept stays.
func (m *Manager) Checkpoint(ctx context.Context, key, name string, opts ...CallOption) (CheckpointInfo, error) {
	if key == "" {
		key = DefaultKey
	}
	if err := CheckName(name); err != nil {
		return CheckpointInfo{}, err
	}
	if err := checkKey(key); err != nil {
		return CheckpointInfo{}, err
	}
	env, err := m.live(ctx, key)
	if err != nil {
		return CheckpointInfo{}, err
	}
	bounds := m.bounds(callOf(opts))
	st := m.store()
	be := m.backendName()
	unlock, err := st.lock(ctx, be, key)
	if err != nil {
		return CheckpointInfo{}, err
	}
	defer unlock()
	recs, err := st.list(be, key)
	if err != nil {
		m.log.Warn("manager: list checkpoints", "key", key, "err", err)
	}
	var old *record
	var total int64
	for i, r := range recs {
		if r.Info.Name == name {
			old = &recs[i]
			continue
		}
		total += r.Info.Size
	}
	maxBytes := int64(bounds.MaxTotalMB) << 20
	kept := len(recs)
	if old != nil {
		kept--
	}
	if kept >= bounds.MaxPerEnvironment {
		return CheckpointInfo{}, newError(ErrBound, nil, "environment %q keeps %d checkpoints, as many as checkpoints.max_per_environment (%d) allows: remove one first (berth env rm %s --checkpoint NAME; berth env checkpoints %s lists them), or reuse a name to replace it",
			key, kept, bounds.MaxPerEnvironment, key, key)
	}
	if total >= maxBytes {
		return CheckpointInfo{}, newError(ErrBound, nil, "environment %q's checkpoints take %s, as much as checkpoints.max_total_mb (%d) allows: remove one first (berth env rm %s --checkpoint NAME)",
			key, mb(total), bounds.MaxTotalMB, key)
	}
	cp, state, files, err := m.capture(ctx, key, env, name)
	if err != nil {
		return CheckpointInfo{}, err
	}
	if total+cp.Size > maxBytes {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if rerr := m.removeCheckpoint(rctx, cp); rerr != nil {
			m.log.Warn("manager: remove a checkpoint past the size bound", "key", key, "name", name, "err", rerr)
		}
		return CheckpointInfo{}, newError(ErrBound, nil, "checkpoint %s of environment %q takes %s, and with the %s its other checkpoints take that passes checkpoints.max_total_mb (%d); it was removed again, the others are kept: remove one (berth env rm %s --checkpoint NAME) or raise the bound",
			name, key, mb(cp.Size), mb(total), bounds.MaxTotalMB, key)
	}
	info := CheckpointInfo{Backend: be, Key: key, Name: name, Created: cp.Created, Size: cp.Size, ID: cp.ID,
		Carried: carriedOf(files, state, state.Cwd, "")}
	if err := st.write(record{Info: info, Checkpoint: cp, State: state}); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if rerr := m.removeCheckpoint(rctx, cp); rerr != nil {
			m.log.Warn("manager: remove a checkpoint that could not be recorded", "key", key, "name", name, "err", rerr)
		}
		return CheckpointInfo{}, err
	}
	if old != nil {
		info.Replaced = true
		if old.Checkpoint.ID != cp.ID || old.Checkpoint.Backend != cp.Backend {
			if err := m.removeCheckpoint(ctx, old.Checkpoint); err != nil {
				m.log.Warn("manager: remove the checkpoint a new one replaced", "key", key, "name", name, "err", err)
			}
		}
	}
	return info, nil
}

// mb shows n bytes in MB.
func mb(n int64) string {
	return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
}

// Restore replaces key's environment with a new one made from its
// checkpoint name: the checkpoint's files, and its shell's state (the
// working directory mapped as in Fork). An environment key had is closed
// and removed first — also a persistent one, whose files are the ones
// replaced — after waiting for its running foreground command as Fork
// does; its background processes are stopped. The checkpoint stays, and
// can be restored again. If making the new environment fails, key has
// none (the next command makes a fresh one) and the error says so.
func (m *Manager) Restore(ctx context.Context, key, name string, opts ...CallOption) (RestoreResult, error) {
	if key == "" {
		key = DefaultKey
	}
	if err := CheckName(name); err != nil {
		return RestoreResult{}, err
	}
	if err := checkKey(key); err != nil {
		return RestoreResult{}, err
	}
	rec, err := m.store().load(m.backendName(), key, name)
	if errors.Is(err, errNoRecord) {
		return RestoreResult{}, m.noCheckpoint(key, name)
	}
	if err != nil {
		return RestoreResult{}, err
	}
	if rec.Checkpoint.Backend != "" && rec.Checkpoint.Backend != m.backendName() {
		return RestoreResult{}, fmt.Errorf("checkpoint %s of %q was made by the %s backend, and this configuration's is %s: restore it with terminal.backend %s", name, key, rec.Checkpoint.Backend, m.backendName(), rec.Checkpoint.Backend)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return RestoreResult{}, ErrClosed
	}
	old := m.envs[key]
	e := &entry{ready: make(chan struct{})}
	m.envs[key] = e
	m.mu.Unlock()
	replaced := false
	stopped := 0
	if old != nil {
		select {
		case <-old.ready:
		case <-ctx.Done():
			m.putBack(key, e, old)
			return RestoreResult{}, fmt.Errorf("restore %s: environment %q is still being created: %w", name, key, ctx.Err())
		}
		if old.env != nil {
			if err := old.env.Session().WaitIdle(ctx, ForkWait); err != nil {
				m.putBack(key, e, old)
				return RestoreResult{}, m.busyError(key, err)
			}
			replaced = true
			stopped = m.procs.Running(key)
			m.procs.KillAll(ctx, key)
			if err := old.env.Close(ctx); err != nil {
				m.log.Warn("manager: close the environment a restore replaces", "key", key, "err", err)
			}
		}
	}
	if a := m.envAdmin(); a != nil {
		if err := a.Remove(ctx, m.backendOptions(key), key); err != nil {
			err = fmt.Errorf("restore %s of %q: remove the environment it replaces: %w", name, key, err)
			m.release(key, e, err)
			return RestoreResult{}, err
		}
	}
	m.buildFrom(ctx, key, e, &rec.Checkpoint, rec.State)
	if e.err != nil {
		gone := ""
		if replaced {
			gone = "; the environment it replaces was removed"
		}
		return RestoreResult{}, fmt.Errorf("restore %s of %q: %w%s; the checkpoint is kept: try again (berth env restore %s %s)", name, key, e.err, gone, key, name)
	}
	bg := ""
	if stopped > 0 {
		bg = fmt.Sprintf(" (%d of the replaced environment were stopped)", stopped)
	}
	return RestoreResult{Key: key, Name: name, Backend: m.backendName(), Replaced: replaced,
		Carried: carriedOf(rec.Info.Files, rec.State, e.env.Session().Cwd(), bg)}, nil
}

// putBack undoes Restore's claim on key: old stays key's environment,
// and whoever waited on e gets it.
func (m *Manager) putBack(key string, e, old *entry) {
	m.mu.Lock()
	if m.envs[key] == e {
		m.envs[key] = old
	}
	m.mu.Unlock()
	select {
	case <-old.ready:
		e.env, e.err = old.env, old.err
	default:
		e.err = fmt.Errorf("environment %q: a restore gave up while it was being created; try again", key)
	}
	close(e.ready)
}

// noCheckpoint is the error of a checkpoint name key does not have.
func (m *Manager) noCheckpoint(key, name string) error {
	return noCheckpoint(m.cfg.Home, m.backendName(), key, name)
}

// noCheckpoint is the error of a checkpoint name key does not have on
// backendName in berth's home home.
func noCheckpoint(home, backendName, key, name string) error {
	have, _ := ListCheckpoints(home, backendName, key)
	names := make([]string, len(have))
	for i, c := range have {
		names[i] = c.Name
	}
	slices.Sort(names)
	list := "it has none"
	if len(names) > 0 {
		list = "it has " + strings.Join(names, ", ")
	}
	return newError(ErrNoCheckpoint, nil, "environment %q has no checkpoint %q on %s (%s; berth env checkpoints %s lists them)", key, name, backendName, list, key)
}

// Checkpoints lists the named checkpoints of key on the manager's backend
// ("" for every key), oldest first within a key; they are read from
// berth's home, whether or not the environment lives.
func (m *Manager) Checkpoints(ctx context.Context, key string) ([]CheckpointInfo, error) {
	return ListCheckpoints(m.cfg.Home, m.backendName(), key)
}

// RemoveCheckpoint removes key's checkpoint name: what its backend keeps
// (Registration.Checkpoints), then berth's record. An environment made
// from it goes on.
func (m *Manager) RemoveCheckpoint(ctx context.Context, key, name string) error {
	if key == "" {
		key = DefaultKey
	}
	return removeNamed(ctx, m.store(), m.backendName(), key, name, m.removeCheckpoint)
}

// RemoveCheckpoint removes key's checkpoint name kept by backendName (""
// for cfg's terminal.backend) in cfg's berth home, as Manager.
// RemoveCheckpoint does, for a caller with no manager (berth env rm
// --checkpoint): no environment is needed.
func RemoveCheckpoint(ctx context.Context, cfg *config.Config, backendName, key, name string) error {
	if backendName == "" {
		backendName = cfg.Terminal.Backend
	}
	remove := func(ctx context.Context, cp backend.Checkpoint) error {
		r, ok := backend.Lookup(cp.Backend)
		if !ok || r.Checkpoints == nil {
			return fmt.Errorf("the %s backend (not in this build, or without checkpoints) cannot remove checkpoint %s", cp.Backend, cp.ID)
		}
		opts := backend.Options{Key: cp.Key, Config: cfg.Terminal, Home: cfg.Home, ConfigFile: cfg.Path, Getenv: cfg.Getenv}
		if err := r.Checkpoints.Remove(ctx, opts, cp); err != nil {
			return fmt.Errorf("remove %s checkpoint %s: %w", cp.Backend, cp.ID, err)
		}
		return nil
	}
	return removeNamed(ctx, store{home: cfg.Home}, backendName, key, name, remove)
}

// removeNamed removes key's checkpoint name: what the backend keeps
// (remove), then the record, under the key's lock.
func removeNamed(ctx context.Context, st store, be, key, name string, remove func(context.Context, backend.Checkpoint) error) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if err := checkKey(key); err != nil {
		return err
	}
	unlock, err := st.lock(ctx, be, key)
	if err != nil {
		return err
	}
	defer unlock()
	rec, err := st.load(be, key, name)
	if errors.Is(err, errNoRecord) {
		return noCheckpoint(st.home, be, key, name)
	}
	if err != nil {
		return err
	}
	if err := remove(ctx, rec.Checkpoint); err != nil {
		return fmt.Errorf("checkpoint %s of %q: %w (its record stays, so that removing it again can finish)", name, key, err)
	}
	return st.remove(be, key, name)
}
