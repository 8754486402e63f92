package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/a55dbaac/berth/backend"
)

// Pools are the warm pools of one berth process (terminal.warm_pool): one
// backend.Pool per backend and shape, shared by the managers that use it.
// The daemon holds one Pools for the managers of all its keys, so a task
// of any key claims from the pool of its shape; a Manager used on its own
// makes its own on its first environment with warm_pool set, and closes
// it in CloseAll. It is safe for concurrent use.
type Pools struct {
	log *slog.Logger

	mu     sync.Mutex
	pools  map[string]*pooled
	closed bool
}

// pooled is one pool and what it was made with.
type pooled struct {
	pool *backend.Pool
	// idle is how long the pool is kept with no claim or resize: twice
	// the lifetime_seconds of the configuration that started it.
	idle time.Duration
}

// NewPools returns an empty set of pools.
func NewPools(log *slog.Logger) *Pools {
	if log == nil {
		log = slog.Default()
	}
	return &Pools{log: log, pools: map[string]*pooled{}}
}

// Claim returns an environment for opts.Key from reg's pool of opts'
// shape, starting that pool with size environments (or resizing it) when
// needed. It returns an error wrapping backend.ErrPoolEmpty when no
// environment is ready — the caller makes one cold while the pool fills
// — and one wrapping backend.ErrUnsupported when reg keeps no pools or
// the configuration cannot be pooled.
func (ps *Pools) Claim(ctx context.Context, reg backend.Registration, opts backend.Options, size int) (backend.Backend, error) {
	p, err := ps.pool(ctx, reg, opts, size)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, backend.ErrPoolEmpty
	}
	return p.Claim(ctx, opts)
}

// Prewarm starts (or resizes) reg's pool of opts' shape without claiming
// from it; size 0 empties it.
func (ps *Pools) Prewarm(ctx context.Context, reg backend.Registration, opts backend.Options, size int) error {
	_, err := ps.pool(ctx, reg, opts, size)
	return err
}

// pool finds reg's pool of opts' shape, made or resized to size; nil when
// there is none and size is 0.
func (ps *Pools) pool(ctx context.Context, reg backend.Registration, opts backend.Options, size int) (*backend.Pool, error) {
	if reg.Pool == nil {
		return nil, fmt.Errorf("backend %s keeps no warm pools: %w", reg.Name, backend.ErrUnsupported)
	}
	rec := &recorder{get: opts.Getenv, seen: map[string]string{}}
	shapeOpts := opts
	shapeOpts.Getenv = rec.Getenv
	shape, err := reg.Pool.Shape(ctx, shapeOpts)
	if err != nil {
		return nil, err
	}
	ps.sweep()
	id := reg.Name + "\x00" + shape
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.closed {
		return nil, fmt.Errorf("%w: %w", ErrClosed, backend.ErrPoolEmpty)
	}
	e := ps.pools[id]
	switch {
	case e != nil:
		e.pool.Resize(size)
		return e.pool, nil
	case size <= 0:
		return nil, nil
	}
	// The pool makes its environments after this call has returned,
	// when the caller's environment may no longer answer (a daemon's
	// caller has gone): it reads the variables Shape read, as they
	// were.
	opts.Getenv = rec.frozen()
	e = &pooled{pool: backend.NewPool(reg.Name, reg.Pool, opts, shape, size),
		idle: 2 * time.Duration(max(opts.Config.LifetimeSeconds, 60)) * time.Second}
	ps.pools[id] = e
	ps.log.Info("manager: warm pool started", "backend", reg.Name, "shape", short(shape), "size", size)
	return e.pool, nil
}

// sweep closes the pools nobody claimed from or resized for their idle
// time: a configuration no caller uses any more.
func (ps *Pools) sweep() {
	ps.mu.Lock()
	var stale []*backend.Pool
	for id, e := range ps.pools {
		if time.Since(e.pool.LastUsed()) > e.idle {
			stale = append(stale, e.pool)
			delete(ps.pools, id)
		}
	}
	ps.mu.Unlock()
	for _, p := range stale {
		ps.log.Info("manager: closing an unused warm pool", "shape", short(p.Shape()))
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := p.Close(ctx); err != nil {
				ps.log.Warn("manager: closing a warm pool", "err", err)
			}
		}()
	}
}

// Status describes the pools, sorted by backend and shape.
func (ps *Pools) Status() []backend.PoolStatus {
	ps.mu.Lock()
	pools := make([]*backend.Pool, 0, len(ps.pools))
	for _, e := range ps.pools {
		pools = append(pools, e.pool)
	}
	ps.mu.Unlock()
	out := make([]backend.PoolStatus, len(pools))
	for i, p := range pools {
		out[i] = p.Status()
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Backend != out[j].Backend {
			return out[i].Backend < out[j].Backend
		}
		return out[i].Shape < out[j].Shape
	})
	return out
}

// Close empties every pool (their environments are removed, those being
// made included) and refuses new ones.
func (ps *Pools) Close(ctx context.Context) error {
	ps.mu.Lock()
	ps.closed = true
	pools := make([]*backend.Pool, 0, len(ps.pools))
	for _, e := range ps.pools {
		pools = append(pools, e.pool)
	}
	ps.pools = map[string]*pooled{}
	ps.mu.Unlock()
	errs := make([]error, len(pools))
	var wg sync.WaitGroup
	for i, p := range pools {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.Close(ctx)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// recorder notes the variables a backend's Shape reads, so that the pool
// it starts reads the same values later.
type recorder struct {
	get  func(string) string
	mu   sync.Mutex
	seen map[string]string
}

func (r *recorder) Getenv(name string) string {
	v := ""
	if r.get != nil {
		v = r.get(name)
	}
	r.mu.Lock()
	r.seen[name] = v
	r.mu.Unlock()
	return v
}

// frozen returns the values read so far; a name not read reads as unset.
func (r *recorder) frozen() func(string) string {
	r.mu.Lock()
	m := make(map[string]string, len(r.seen))
	for k, v := range r.seen {
		m[k] = v
	}
	r.mu.Unlock()
	return func(name string) string { return m[name] }
}

// SetPools makes m claim its environments from ps, which someone else
// owns (the daemon: one Pools for every key's manager) and closes; call it
// before the first environment is made. Without it, a manager whose
// configuration sets terminal.warm_pool makes pools of its own.
func (m *Manager) SetPools(ps *Pools) {
	m.mu.Lock()
	m.pools, m.ownPools = ps, false
	m.mu.Unlock()
}

// poolSet returns the pools m claims from, making its own on first use.
func (m *Manager) poolSet() *Pools {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pools == nil {
		m.pools, m.ownPools = NewPools(m.log), true
	}
	return m.pools
}

// Prewarm starts filling the warm pool of the manager's configuration
// (terminal.warm_pool environments), so that the first environment is
// claimed from it rather than made; without the key, or on a backend that
// keeps no pools, it does nothing.
func (m *Manager) Prewarm(ctx context.Context) error {
	t := m.cfg.Terminal
	reg, ok := backend.Lookup(t.Backend)
	if m.factory != nil || !ok || reg.Pool == nil || t.WarmPool <= 0 {
		return nil
	}
	err := m.poolSet().Prewarm(ctx, reg, m.options(""), t.WarmPool)
	if errors.Is(err, backend.ErrUnsupported) {
		m.log.Info("manager: terminal.warm_pool does not apply to this configuration", "why", err)
		return nil
	}
	return err
}

// PoolNote says why terminal.warm_pool does nothing in the manager's
// configuration — its backend keeps no warm pools (the note names those
// that do), or the backend cannot pool this configuration (the note says
// why) — and "" when the key is not set or pools apply. Callers show it to
// the user: a pool asked for and not kept is a surprise.
func (m *Manager) PoolNote(ctx context.Context) string {
	t := m.cfg.Terminal
	if t.WarmPool <= 0 || m.factory != nil {
		return ""
	}
	reg, ok := backend.Lookup(t.Backend)
	if !ok {
		return ""
	}
	if reg.Pool == nil {
		var with []string
		for _, n := range backend.Names() {
			if r, ok := backend.Lookup(n); ok && r.Pool != nil {
				with = append(with, n)
			}
		}
		return fmt.Sprintf("terminal.warm_pool is %d, but the %s backend keeps no warm pools (backends that do: %s); its environments are made when a task asks for one",
			t.WarmPool, reg.Name, strings.Join(with, ", "))
	}
	if _, err := reg.Pool.Shape(ctx, m.options("")); errors.Is(err, backend.ErrUnsupported) {
		return fmt.Sprintf("terminal.warm_pool is %d, but this configuration cannot be pooled (%v); its environments are made when a task asks for one", t.WarmPool, err)
	}
	return ""
}

// newBackend makes key's backend: claimed from the warm pool of its shape
// when terminal.warm_pool is set and one is ready, else made by reg.New
// (while the pool fills). An environment made from a checkpoint never
// comes from a pool.
func (m *Manager) newBackend(ctx context.Context, reg backend.Registration, opts backend.Options) (backend.Backend, error) {
	size := opts.Config.WarmPool
	if size <= 0 || reg.Pool == nil || opts.From != nil {
		if note := m.PoolNote(ctx); note != "" {
			m.poolNote.Do(func() { m.log.Warn("manager: " + note) })
		}
		return reg.New(ctx, opts)
	}
	start := time.Now()
	be, err := m.poolSet().Claim(ctx, reg, opts, size)
	switch {
	case err == nil:
		m.log.Debug("manager: environment claimed from the warm pool", "key", opts.Key, "took", time.Since(start))
		return be, nil
	case errors.Is(err, backend.ErrUnsupported):
		m.poolNote.Do(func() { m.log.Warn("manager: terminal.warm_pool does not apply to this configuration", "why", err) })
	case errors.Is(err, backend.ErrPoolEmpty):
		m.log.Debug("manager: the warm pool has no environment ready; making one", "key", opts.Key, "why", err)
	default:
		m.log.Warn("manager: the warm pool failed; making the environment", "key", opts.Key, "err", err)
	}
	return reg.New(ctx, opts)
}
