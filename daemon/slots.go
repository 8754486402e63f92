package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/daemon/wire"
	"github.com/a55dbaac/berth/internal/procmark"
	"github.com/a55dbaac/berth/manager"
)

// slot is one environment key: its manager (which holds at most this
// key's environment) and the configuration it was made with.
type slot struct {
	key     string
	fp      string   // fingerprint of the configuration
	values  []string // key=value of the configuration, for telling what changed
	m       *manager.Manager
	env     *envRef // the environment its configuration reads: the latest caller's
	backend string
	created time.Time
	cwd     string // the shell's cwd after the last request; under Server.mu
	// progress relays the backends' progress to the caller of a fork,
	// checkpoint or restore while one runs (fork.go).
	progress progressRelay
}

// callerEnv is a caller's environment as the daemon sees it: the values
// the request sent (wire.CallerEnv), the names of the others, and, while
// the call runs, a way to ask the caller for the value of one of them. A
// lookup of a name the caller has but did not send asks for it (a getenv
// frame): a backend's credentials, the env_passthrough and
// docker_forward_env variables. So the daemon holds only what it reads.
//
// The owner mark (procmark.OwnerVar), which makes the caller a nested
// berth (manager.Nested), is also read from the caller's process tree: a
// caller that removed the variable from its own environment (`env -u
// BERTH_OWNER berth exec …`) still runs below the shell berth started it
// from.
type callerEnv struct {
	mu     sync.Mutex
	values map[string]string
	names  map[string]bool
	owner  string                                 // the owner mark of the caller's ancestry, "" if none
	ask    func(names []string) ([]string, error) // nil outside the call
	log    func(msg string, args ...any)
}

func newCallerEnv(in wire.Inputs) *callerEnv {
	e := &callerEnv{values: make(map[string]string, len(in.Env)), names: make(map[string]bool, len(in.Names))}
	for _, kv := range in.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			e.values[k] = v
		}
	}
	for _, n := range in.Names {
		e.names[n] = true
	}
	return e
}

// Getenv returns the caller's value of name, asking the caller for it
// when it has the variable and did not send it.
func (e *callerEnv) Getenv(name string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if v, ok := e.values[name]; ok || !e.names[name] {
		if v == "" && name == procmark.OwnerVar {
			return e.owner
		}
		return v
	}
	if e.ask == nil {
		if e.log != nil {
			e.log("daemon: a variable the caller has was read after its call ended; it reads as unset", "name", name)
		}
		return ""
	}
	got, err := e.ask([]string{name})
	if err != nil {
		if e.log != nil {
			e.log("daemon: could not get a variable from the caller; it reads as unset", "name", name, "err", err)
		}
		delete(e.names, name)
		return ""
	}
	for _, kv := range got {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			e.values[k] = v
		}
	}
	if _, ok := e.values[name]; !ok {
		delete(e.names, name) // the caller no longer has it
	}
	return e.values[name]
}

// endCall stops asking the caller: the connection may be gone.
func (e *callerEnv) endCall() {
	e.mu.Lock()
	e.ask = nil
	e.mu.Unlock()
}

// envRef points a configuration's Getenv at the environment of the caller
// it serves now: a slot's configuration is loaded once, but each request
// brings its caller's values.
type envRef struct{ p atomic.Pointer[callerEnv] }

func (r *envRef) Getenv(name string) string {
	if e := r.p.Load(); e != nil {
		return e.Getenv(name)
	}
	return ""
}

// loaded is a caller's configuration as loadConfig returns it.
type loaded struct {
	cfg    *config.Config
	fp     string   // fingerprint of the keys that make an environment
	values []string // those keys, key=value
	env    *envRef  // the configuration's environment
}

// loadConfig loads the caller's configuration from its inputs, reading
// its environment through ce, and refuses a configuration file another
// user may write (wire.CheckFile; a group-writable one is a warning).
// Keys declared PerCall (the timeout, the approval keys re-read on every
// call, ...) are left out of the fingerprint: they do not make an
// environment.
func (s *Server) loadConfig(in wire.Inputs, ce *callerEnv) (*loaded, error) {
	ref := &envRef{}
	ref.p.Store(ce)
	cfg, err := config.Load(config.LoadOptions{ConfigPath: in.ConfigPath, Flags: in.Flags, Getenv: ref.Getenv})
	if err != nil {
		return nil, err
	}
	if filepath.Clean(cfg.Home) != filepath.Clean(s.opts.Home) {
		return nil, fmt.Errorf("this berth daemon serves home %s, the caller's is %s", s.opts.Home, cfg.Home)
	}
	path, _, err := config.ResolvePath(in.ConfigPath, ref.Getenv)
	if err != nil {
		return nil, err
	}
	for _, f := range []struct{ what, path string }{
		{"the configuration file", path},
		{"the .env file", filepath.Join(filepath.Dir(path), ".env")},
	} {
		warn, err := wire.CheckFile(f.what, f.path)
		if err != nil {
			return nil, err
		}
		if warn != "" {
			cfg.Warnings = append(cfg.Warnings, warn)
		}
	}
	values := []string{"path=" + cfg.Path}
	for _, k := range config.Keys() {
		if config.PerCall(k) {
			continue
		}
		v, err := cfg.Get(k)
		if err != nil {
			return nil, err
		}
		values = append(values, k+"="+v)
	}
	h := sha256.New()
	for _, v := range values {
		h.Write([]byte(v))
		h.Write([]byte{0})
	}
	// A local environment starts where the call that creates it runs,
	// as a one-process berth does; later calls find it where its shell is.
	if reg, ok := backend.Lookup(cfg.Terminal.Backend); ok && reg.HostFS && in.Cwd != "" && !filepath.IsAbs(cfg.Terminal.Cwd) && !strings.HasPrefix(cfg.Terminal.Cwd, "~") {
		cfg.Terminal.Cwd = filepath.Join(in.Cwd, cfg.Terminal.Cwd)
	}
	return &loaded{cfg: cfg, fp: hex.EncodeToString(h.Sum(nil)), values: values, env: ref}, nil
}

// slotFor returns key's slot for the caller's configuration (loadConfig
// and slotWith). The caller holds key's lock.
func (s *Server) slotFor(ctx context.Context, in wire.Inputs, ce *callerEnv, key string) (*slot, []string, error) {
	l, err := s.loadConfig(in, ce)
	if err != nil {
		return nil, nil, err
	}
	return s.slotWith(ctx, key, l)
}

// errShuttingDown is the reply to a request that comes while the daemon
// stops.
var errShuttingDown = errors.New("the berth daemon is shutting down; try again")

// slotWith returns key's slot for the loaded configuration, replacing one
// made with another configuration (its environment is closed: a request
// never silently runs in an environment configured otherwise). The slot's
// configuration then reads this caller's environment, and its approval
// gate this caller's approval settings (approvals.mode, approvals.deny,
// command_allowlist), re-read on every call: an allowlist entry the user
// revoked ends at once, and none of them makes a new environment. The
// caller holds key's lock.
func (s *Server) slotWith(ctx context.Context, key string, l *loaded) (*slot, []string, error) {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return nil, nil, errShuttingDown
	}
	old := s.slots[key]
	if old != nil && old.fp == l.fp {
		s.mu.Unlock()
		old.env.p.Store(l.env.p.Load())
		held, err := old.m.SetApprovals(l.cfg)
		if err != nil {
			return nil, nil, err
		}
		return old, s.heldNotes(key, held), nil
	}
	var notes []string
	if old != nil {
		delete(s.slots, key)
		s.mu.Unlock()
		changed := diffValues(old.values, l.values)
		s.log.Info("daemon: configuration changed; recreating the environment", "key", key, "changed", changed)
		if len(old.m.Keys()) > 0 {
			notes = append(notes, fmt.Sprintf("the configuration of task %q changed (%s) since its environment was created: it was closed and a new one made (shell state and background processes of the old one are gone)", key, strings.Join(changed, ", ")))
		}
		if err := old.m.CloseAll(ctx); err != nil {
			s.log.Warn("daemon: close environment", "key", key, "err", err)
		}
		s.mu.Lock()
	}
	log := s.log.With("key", key)
	sl := &slot{key: key, fp: l.fp, values: l.values, m: manager.New(l.cfg, log), env: l.env, backend: l.cfg.Terminal.Backend, created: time.Now()}
	sl.m.SetProgress(sl.progress.send)
	if old != nil {
		// The approval settings the key started with hold in the new
		// environment too: one the daemon makes is no fresh start.
		sl.m.KeepApprovalFloor(old.m)
		held, err := sl.m.SetApprovals(l.cfg)
		if err != nil {
			s.mu.Unlock()
			return nil, nil, err
		}
		notes = append(notes, s.heldNotes(key, held)...)
	}
	sl.m.StartSweeper(s.ctx)
	s.slots[key] = sl
	s.mu.Unlock()
	return sl, notes, nil
}

// heldNotes is the note of a reply whose caller's approval settings are
// lower than those key's environment started with (manager.SetApprovals
// held them), nil when none are.
func (s *Server) heldNotes(key string, held []string) []string {
	if len(held) == 0 {
		return nil
	}
	s.log.Warn("daemon: approval settings lowered since the environment was made; keeping the stricter ones", "key", key, "held", held)
	return []string{fmt.Sprintf("the approval settings of this call are lower than those task %q's environment was created with; "+
		"this berth daemon keeps the stricter ones until the user restarts it, so that no command lowers the approvals of the environment it runs in: %s",
		key, strings.Join(held, "; "))}
}

// diffValues names the keys whose values differ.
func diffValues(a, b []string) []string {
	am := map[string]string{}
	for _, kv := range a {
		k, v, _ := strings.Cut(kv, "=")
		am[k] = v
	}
	var out []string
	seen := map[string]bool{}
	for _, kv := range b {
		k, v, _ := strings.Cut(kv, "=")
		seen[k] = true
		if am[k] != v {
			out = append(out, k)
		}
	}
	for k := range am {
		if !seen[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func keyOf(req wire.Request) string {
	if req.Key == "" {
		return manager.DefaultKey
	}
	return req.Key
}
