package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Pooler is a backend's side of warm pools (terminal.warm_pool): it makes
// environments before any task asks for one — started, idle, with a
// process already running to become the task's shell — and later binds
// one to the key of the task that claims it. A backend offers it in
// Registration.Pool; [Pool] keeps the environments of one shape and
// refills it.
//
// A claimed environment is indistinguishable from one New made for the
// key: the key, owner mark, labels that find it, working directory and
// the session's variables (SessionEnv: forwarded secrets,
// env_passthrough) are the claimant's, applied at the claim, and nothing
// of anyone else ran in it (an environment is claimed once, never
// returned to a pool). What a backend cannot change after the fact it
// keeps as provenance the commands never see (a container's label naming
// its pool).
//
// Pooled environments carry the owner mark of the process that made them,
// as everything a backend makes does, so what a crashed berth pooled is
// removed by the next start's sweep; Registration.Envs lists them (EnvInfo
// with Pool set) and its Prune removes them.
type Pooler interface {
	// Shape is the identity of what an environment of opts is made from
	// — image, limits, mounts, network, where it runs — and nothing of
	// its key: two options of the same shape give interchangeable
	// environments, and a Pool serves only claims of its own shape. A
	// configuration that cannot be pooled (a persistent environment,
	// whose files are its key's) is declined with an error wrapping
	// ErrUnsupported that says why.
	Shape(ctx context.Context, opts Options) (string, error)
	// Room is how many more unclaimed environments of opts' shape the
	// backend's own limits allow now (a namespace's quota, less the room
	// one environment made cold needs), or -1 when it knows no limit
	// beyond config.MaxWarmPool. A Pool makes a member only while Room
	// is not 0.
	Room(ctx context.Context, opts Options) (int, error)
	// Make creates one unclaimed environment of opts' shape (opts.Key is
	// not used) and returns once it is ready to be claimed: started, with
	// the process that will become the first Start already running.
	Make(ctx context.Context, opts Options) (Pooled, error)
}

// Pooled is one environment a Pooler made that no task claimed yet.
type Pooled interface {
	// ID is the backend's reference to it (a container id, a pod's
	// namespace/name), as EnvInfo.ID gives it.
	ID() string
	// Claim binds the environment to opts.Key — opts must have the shape
	// it was made for — and returns its Backend, as New(opts) would have
	// returned a fresh one. Whatever it returns, the environment is no
	// longer the pool's: when the claim fails it is removed.
	Claim(ctx context.Context, opts Options) (Backend, error)
	// Discard removes the environment unclaimed.
	Discard(ctx context.Context) error
}

// ErrPoolEmpty is returned by Pool.Claim when the pool has no environment
// ready: the caller makes one cold, as without a pool.
var ErrPoolEmpty = errors.New("backend: no pooled environment ready")

// PoolStatus describes a Pool now.
type PoolStatus struct {
	Backend string
	Shape   string
	// Size is the number of ready environments the pool keeps
	// (terminal.warm_pool); Ready are ready, Making being made.
	Size, Ready, Making int
	// Members are the IDs of the ready environments, oldest first.
	Members []string
	// Room is what the backend's limits allowed at the last look (-1:
	// no limit known).
	Room int
	// Claimed counts the environments claimed from the pool, Failed the
	// makes and claims that failed; LastError is the last failure's
	// message.
	Claimed, Failed int
	LastError       string
}

// Pool keeps Size environments of one shape made and ready, claims them
// for tasks and refills in the background. It is safe for concurrent use.
// Close removes what it holds.
type Pool struct {
	p     Pooler
	opts  Options
	name  string
	shape string
	log   *slog.Logger

	mu       sync.Mutex
	size     int
	ready    []Pooled
	making   int
	room     int
	closed   bool
	claimed  int
	failed   int
	lastErr  string
	backoff  time.Duration
	retry    *time.Timer
	lastUsed time.Time
	makes    sync.WaitGroup
}

// poolParallel bounds the makes one pool runs at once: a pool refills
// while tasks start their own environments on the same engine.
const poolParallel = 2

// NewPool returns a pool of size environments of shape, made by p with
// opts (the key is not used; the variables a session gets are the
// claimant's, so the pool drops opts' forwarded and passed-through names),
// and starts filling it. name is the backend's name, for status and logs.
func NewPool(name string, p Pooler, opts Options, shape string, size int) *Pool {
	opts.Key = ""
	opts.From = nil
	opts.Progress = nil
	opts.Config.DockerForwardEnv = nil
	opts.Config.EnvPassthrough = nil
	pl := &Pool{p: p, opts: opts, name: name, shape: shape, size: max(size, 0), room: -1,
		log: opts.Log().With("backend", name, "pool", shortShape(shape)), lastUsed: time.Now()}
	pl.mu.Lock()
	pl.fill()
	pl.mu.Unlock()
	return pl
}

func shortShape(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// Shape returns the shape of the pool's environments.
func (pl *Pool) Shape() string { return pl.shape }

// Resize sets the number of ready environments the pool keeps; fewer
// ready ones than before are removed.
func (pl *Pool) Resize(size int) {
	pl.mu.Lock()
	pl.lastUsed = time.Now()
	if pl.closed || size == pl.size {
		pl.mu.Unlock()
		return
	}
	pl.size = max(size, 0)
	var extra []Pooled
	if n := len(pl.ready) - pl.size; n > 0 {
		extra = append(extra, pl.ready[len(pl.ready)-n:]...)
		pl.ready = pl.ready[:len(pl.ready)-n]
	}
	pl.fill()
	pl.mu.Unlock()
	pl.discard(extra)
}

// LastUsed is when the pool was last claimed from or resized.
func (pl *Pool) LastUsed() time.Time {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.lastUsed
}

// Claim takes the oldest ready environment, binds it to opts.Key and
// returns its backend; the pool refills in the background. With none
// ready it returns ErrPoolEmpty at once, as it does after Close. A member
// whose claim fails (removed from outside meanwhile) is dropped and the
// next one tried.
func (pl *Pool) Claim(ctx context.Context, opts Options) (Backend, error) {
	var last error
	for {
		pl.mu.Lock()
		pl.lastUsed = time.Now()
		if pl.closed || len(pl.ready) == 0 {
			pl.mu.Unlock()
			if last != nil {
				return nil, fmt.Errorf("%w (the last claim failed: %v)", ErrPoolEmpty, last)
			}
			return nil, ErrPoolEmpty
		}
		m := pl.ready[0]
		pl.ready = pl.ready[1:]
		pl.fill()
		pl.mu.Unlock()

		b, err := m.Claim(ctx, opts)
		if err == nil {
			pl.mu.Lock()
			pl.claimed++
			pl.mu.Unlock()
			return b, nil
		}
		pl.note(err)
		pl.log.Warn("backend: claiming a pooled environment failed; trying the next", "member", m.ID(), "err", err)
		last = err
		if ctx.Err() != nil {
			return nil, err
		}
	}
}

// note records a failure for the status.
func (pl *Pool) note(err error) {
	pl.mu.Lock()
	pl.failed++
	pl.lastErr = err.Error()
	pl.mu.Unlock()
}

// fill starts the makes the pool lacks, at most poolParallel at once.
// Callers hold pl.mu.
func (pl *Pool) fill() {
	for !pl.closed && pl.retry == nil && pl.making < poolParallel && len(pl.ready)+pl.making < pl.size {
		pl.making++
		pl.makes.Add(1)
		go pl.make()
	}
}

// poolBackoff bounds the wait before a pool retries after a failed make.
const (
	poolBackoffMin = time.Second
	poolBackoffMax = time.Minute
)

// make makes one member: when the backend's limits allow it, and kept
// when the pool still wants it.
func (pl *Pool) make() {
	defer pl.makes.Done()
	// Not cut short by Close: an engine finishes a create whose request
	// was abandoned, and what it made would be left behind; Close waits
	// for the make and removes what it made.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	room, err := pl.p.Room(ctx, pl.opts)
	var m Pooled
	if err == nil && room != 0 {
		m, err = pl.p.Make(ctx, pl.opts)
	}
	pl.mu.Lock()
	pl.making--
	if err == nil {
		pl.room = room
	}
	switch {
	case err != nil:
		pl.failed++
		pl.lastErr = err.Error()
		pl.wait(err)
	case m == nil:
		// No room: look again later, as after a failure, quietly.
		pl.wait(nil)
	case pl.closed || len(pl.ready) >= pl.size:
		pl.mu.Unlock()
		pl.discard([]Pooled{m})
		return
	default:
		pl.ready = append(pl.ready, m)
		pl.backoff = 0
		pl.fill()
	}
	pl.mu.Unlock()
}

// wait holds further makes back for the current backoff, doubling it.
// Callers hold pl.mu.
func (pl *Pool) wait(err error) {
	if pl.closed {
		return
	}
	pl.backoff = min(max(2*pl.backoff, poolBackoffMin), poolBackoffMax)
	if err != nil {
		pl.log.Warn("backend: making a pooled environment failed; the pool retries", "in", pl.backoff, "err", err)
	} else {
		pl.log.Debug("backend: the backend's limits leave no room for the pool now", "retry_in", pl.backoff)
	}
	if pl.retry != nil {
		return
	}
	pl.retry = time.AfterFunc(pl.backoff, func() {
		pl.mu.Lock()
		pl.retry = nil
		pl.fill()
		pl.mu.Unlock()
	})
}

// discard removes members in the background of nobody: it returns once
// they are gone.
func (pl *Pool) discard(ms []Pooled) {
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := m.Discard(ctx); err != nil {
				pl.log.Warn("backend: removing a pooled environment failed", "member", m.ID(), "err", err)
			}
		}()
	}
	wg.Wait()
}

// Status describes the pool now.
func (pl *Pool) Status() PoolStatus {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	ids := make([]string, len(pl.ready))
	for i, m := range pl.ready {
		ids[i] = m.ID()
	}
	return PoolStatus{Backend: pl.name, Shape: pl.shape, Size: pl.size, Ready: len(pl.ready), Making: pl.making,
		Members: ids, Room: pl.room, Claimed: pl.claimed, Failed: pl.failed, LastError: pl.lastErr}
}

// Close stops refilling and removes every environment the pool holds,
// those of the makes in flight included once they end. It returns once
// they are gone or ctx ends; it is idempotent.
func (pl *Pool) Close(ctx context.Context) error {
	pl.mu.Lock()
	if !pl.closed {
		pl.closed = true
		if pl.retry != nil {
			pl.retry.Stop()
			pl.retry = nil
		}
	}
	ms := pl.ready
	pl.ready = nil
	pl.mu.Unlock()
	done := make(chan struct{})
	go func() {
		pl.discard(ms)
		pl.makes.Wait() // a make that ends now discards its member itself
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("backend: %s pool %s: not emptied when the close gave up: %w", pl.name, shortShape(pl.shape), ctx.Err())
	}
}
