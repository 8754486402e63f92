// Package manager keeps one environment per environment key (the task id):
// created lazily on first use through the backend registry, reused for every
// later call, and torn down on request or at shutdown.
package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/session"
	"github.com/a55dbaac/berth/terminal"
)

// DefaultKey is the environment key used when a caller gives none.
const DefaultKey = "default"

// Manager owns the environments of one berth process. It is safe for
// concurrent use; concurrent first calls for one key create exactly one
// environment.
type Manager struct {
	cfg *config.Config
	log *slog.Logger

	mu     sync.Mutex
	envs   map[string]*entry
	closed bool
}

type entry struct {
	ready chan struct{} // closed once env or err is set
	env   *terminal.Env
	err   error
}

// New returns a manager for the given configuration.
func New(cfg *config.Config, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	return &Manager{cfg: cfg, log: log, envs: map[string]*entry{}}
}

// Config returns the configuration the manager was built with.
func (m *Manager) Config() *config.Config { return m.cfg }

// ErrClosed is returned after CloseAll.
var ErrClosed = errors.New("manager: shut down")

// Env returns the environment for key, creating it on first use. A backend
// that cannot be built or reached is an error; there is never a fallback to
// another backend.
func (m *Manager) Env(ctx context.Context, key string) (*terminal.Env, error) {
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
		e.env, e.err = m.create(ctx, key)
		close(e.ready)
		if e.err != nil {
			m.mu.Lock()
			if m.envs[key] == e {
				delete(m.envs, key)
			}
			m.mu.Unlock()
		}
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

// create builds a backend and its environment for key.
func (m *Manager) create(ctx context.Context, key string) (*terminal.Env, error) {
	t := m.cfg.Terminal
	reg, ok := backend.Lookup(t.Backend)
	if !ok {
		return nil, fmt.Errorf("backend %q is not available in this build (available: %s); refusing to run anywhere else",
			t.Backend, strings.Join(backend.Names(), ", "))
	}
	be, err := reg.New(ctx, backend.Options{Key: key, Config: t, Home: m.cfg.Home, Getenv: m.cfg.Getenv})
	if err != nil {
		return nil, fmt.Errorf("%s backend for %q: %w", t.Backend, key, err)
	}
	cwd := ""
	if path.IsAbs(t.Cwd) || t.Cwd == "~" || strings.HasPrefix(t.Cwd, "~/") {
		cwd = t.Cwd
	}
	env := terminal.New(be, terminal.Options{
		DefaultTimeout: time.Duration(t.Timeout) * time.Second,
		MaxOutputChars: m.cfg.MaxOutputChars,
		SpillDir:       filepath.Join(m.cfg.Home, "spill"),
		Session: session.Options{
			Cwd:    cwd,
			Grace:  time.Duration(t.DaemonTermGraceSeconds * float64(time.Second)),
			Logger: m.log,
		},
	})
	m.log.Debug("environment created", "backend", t.Backend, "key", key)
	return env, nil
}

// Run runs a foreground request in key's environment.
func (m *Manager) Run(ctx context.Context, key string, req terminal.Request) terminal.Result {
	if err := terminal.Validate(req); err != nil {
		msg := err.Error()
		return terminal.Result{ExitCode: -1, Error: &msg}
	}
	env, err := m.Env(ctx, key)
	if err != nil {
		msg := err.Error()
		return terminal.Result{ExitCode: -1, Error: &msg}
	}
	return env.Run(ctx, req)
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
// deleted, by its backend).
func (m *Manager) Close(ctx context.Context, key string) error {
	m.mu.Lock()
	e, ok := m.envs[key]
	delete(m.envs, key)
	m.mu.Unlock()
	if !ok {
		return nil
	}
	<-e.ready
	if e.env == nil {
		return nil
	}
	return e.env.Close(ctx)
}

// CloseAll tears every environment down and refuses new ones.
func (m *Manager) CloseAll(ctx context.Context) error {
	m.mu.Lock()
	m.closed = true
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
