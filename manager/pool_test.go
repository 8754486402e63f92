package manager_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/local"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/terminal"
)

// fakePool is a Pooler whose environments are local ones, made when
// claimed; it records what reaches it. Its makes wait for hold when set.
type fakePool struct {
	mu        sync.Mutex
	made      int
	claims    []string // keys
	discarded int
	news      []string // keys made cold by the registration's New
	getenv    []string // what Make read of its options' variables
	hold      chan struct{}
	shapeErr  error
}

var fp = &fakePool{}

func init() {
	backend.Register(backend.Registration{
		Name: "poolfake", Description: "local environments, with a fake warm pool (tests)",
		New: func(ctx context.Context, opts backend.Options) (backend.Backend, error) {
			fp.mu.Lock()
			fp.news = append(fp.news, opts.Key)
			fp.mu.Unlock()
			return local.New(opts)
		},
		Pool: fp,
	})
}

func (f *fakePool) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.made, f.claims, f.discarded, f.news, f.getenv, f.hold, f.shapeErr = 0, nil, 0, nil, nil, nil, nil
}

func (f *fakePool) Shape(_ context.Context, opts backend.Options) (string, error) {
	f.mu.Lock()
	err := f.shapeErr
	f.mu.Unlock()
	if err != nil {
		return "", err
	}
	opts.Getenv("POOL_SHAPE_VAR")
	return fmt.Sprintf("shape-%d", opts.Config.Timeout), nil
}

func (f *fakePool) Room(context.Context, backend.Options) (int, error) { return -1, nil }

func (f *fakePool) Make(ctx context.Context, opts backend.Options) (backend.Pooled, error) {
	f.mu.Lock()
	hold := f.hold
	f.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.made++
	f.getenv = append(f.getenv, opts.Getenv("POOL_SHAPE_VAR")+","+opts.Getenv("POOL_OTHER_VAR"))
	return &fakeMember{f: f, id: fmt.Sprintf("m%d", f.made)}, nil
}

type fakeMember struct {
	f  *fakePool
	id string
}

func (m *fakeMember) ID() string { return m.id }

func (m *fakeMember) Claim(_ context.Context, opts backend.Options) (backend.Backend, error) {
	m.f.mu.Lock()
	m.f.claims = append(m.f.claims, opts.Key)
	m.f.mu.Unlock()
	return local.New(opts)
}

func (m *fakeMember) Discard(context.Context) error {
	m.f.mu.Lock()
	m.f.discarded++
	m.f.mu.Unlock()
	return nil
}

func (f *fakePool) snapshot() fakePool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fakePool{made: f.made, claims: slices.Clone(f.claims), discarded: f.discarded, news: slices.Clone(f.news), getenv: slices.Clone(f.getenv)}
}

// poolConfig is a configuration of the poolfake backend with warm_pool n.
func poolConfig(t *testing.T, n int) *config.Config {
	cfg := config.Default()
	cfg.Home = t.TempDir()
	cfg.Terminal.Backend = "poolfake"
	cfg.Terminal.Cwd = t.TempDir()
	cfg.Terminal.WarmPool = n
	return cfg
}

// readyIn waits until ps has n environments ready in its one pool.
func readyIn(t *testing.T, ps *manager.Pools, n int) backend.PoolStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := ps.Status()
		if len(st) == 1 && st[0].Ready == n {
			return st[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("pools %+v: want one with %d ready", st, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// With terminal.warm_pool set, a key's environment is claimed from the
// pool (with that key's options) instead of made, and the pool refills.
func TestWarmPoolClaimedOnCreate(t *testing.T) {
	fp.reset()
	m := manager.New(poolConfig(t, 1), nil)
	ps := manager.NewPools(nil)
	m.SetPools(ps)
	defer ps.Close(context.Background())
	defer m.CloseAll(context.Background())
	if err := m.Prewarm(context.Background()); err != nil {
		t.Fatal(err)
	}
	readyIn(t, ps, 1)
	r := m.Run(context.Background(), "task-1", terminal.Request{Command: "echo hi"})
	if r.Error != nil || r.Output != "hi" {
		t.Fatalf("run: %+v", r)
	}
	got := fp.snapshot()
	if !slices.Equal(got.claims, []string{"task-1"}) || len(got.news) != 0 {
		t.Fatalf("claims %q, made cold %q; want task-1 claimed and nothing made cold", got.claims, got.news)
	}
	st := readyIn(t, ps, 1)
	if st.Claimed != 1 || fp.snapshot().made != 2 {
		t.Errorf("after the claim: %+v, %d made; want one claimed and the pool refilled", st, fp.snapshot().made)
	}
}

// With the pool empty, the environment is made at once, cold; nothing
// waits for the pool.
func TestWarmPoolEmptyMakesItCold(t *testing.T) {
	fp.reset()
	hold := make(chan struct{})
	fp.mu.Lock()
	fp.hold = hold
	fp.mu.Unlock()
	m := manager.New(poolConfig(t, 2), nil)
	defer m.CloseAll(context.Background())
	defer close(hold) // before CloseAll, which waits for the makes held
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := m.Env(ctx, "cold"); err != nil {
		t.Fatal(err)
	}
	got := fp.snapshot()
	if !slices.Equal(got.news, []string{"cold"}) || len(got.claims) != 0 {
		t.Fatalf("made cold %q, claimed %q; want cold made cold", got.news, got.claims)
	}
}

// A configuration the backend cannot pool is made cold, and no pool is
// started for it.
func TestWarmPoolUnsupportedShape(t *testing.T) {
	fp.reset()
	fp.mu.Lock()
	fp.shapeErr = fmt.Errorf("not this one: %w", backend.ErrUnsupported)
	fp.mu.Unlock()
	m := manager.New(poolConfig(t, 1), nil)
	ps := manager.NewPools(nil)
	m.SetPools(ps)
	defer m.CloseAll(context.Background())
	if _, err := m.Env(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	if got := fp.snapshot(); !slices.Equal(got.news, []string{"k"}) || got.made != 0 || len(ps.Status()) != 0 {
		t.Fatalf("made cold %q, pooled %d, pools %+v; want k made cold and no pool", got.news, got.made, ps.Status())
	}
}

// A manager's own pools go with CloseAll; pools it was given are their
// owner's to close.
func TestCloseAllEmptiesOwnPoolsOnly(t *testing.T) {
	fp.reset()
	m := manager.New(poolConfig(t, 2), nil)
	if err := m.Prewarm(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for fp.snapshot().made < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the pool never filled")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := m.CloseAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := fp.snapshot().discarded; got != 2 {
		t.Errorf("CloseAll discarded %d of the manager's own 2 pooled environments", got)
	}

	fp.reset()
	ps := manager.NewPools(nil)
	shared := manager.New(poolConfig(t, 1), nil)
	shared.SetPools(ps)
	if err := shared.Prewarm(context.Background()); err != nil {
		t.Fatal(err)
	}
	readyIn(t, ps, 1)
	if err := shared.CloseAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := fp.snapshot().discarded; got != 0 {
		t.Errorf("CloseAll of a manager discarded %d environments of pools it does not own", got)
	}
	if err := ps.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := fp.snapshot().discarded; got != 1 {
		t.Errorf("closing the pools discarded %d of 1", got)
	}
	if _, err := ps.Claim(context.Background(), mustLookup(t, "poolfake"), backend.Options{Key: "late", Config: poolConfig(t, 1).Terminal}, 1); !errors.Is(err, backend.ErrPoolEmpty) {
		t.Errorf("claim after Close: %v, want ErrPoolEmpty", err)
	}
}

// A pool makes its environments after the call that started it returned:
// it reads the variables the backend's Shape read, as they were then,
// and no other of the caller's.
func TestPoolReadsTheVariablesShapeRead(t *testing.T) {
	fp.reset()
	vals := map[string]string{"POOL_SHAPE_VAR": "then", "POOL_OTHER_VAR": "secret"}
	var mu sync.Mutex
	getenv := func(k string) string { mu.Lock(); defer mu.Unlock(); return vals[k] }
	ps := manager.NewPools(nil)
	defer ps.Close(context.Background())
	hold := make(chan struct{})
	fp.mu.Lock()
	fp.hold = hold
	fp.mu.Unlock()
	opts := backend.Options{Config: poolConfig(t, 1).Terminal, Getenv: getenv}
	if err := ps.Prewarm(context.Background(), mustLookup(t, "poolfake"), opts, 1); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	vals["POOL_SHAPE_VAR"] = "now" // the caller's environment moved on
	mu.Unlock()
	close(hold)
	readyIn(t, ps, 1)
	if got := fp.snapshot().getenv; !slices.Equal(got, []string{"then,"}) {
		t.Errorf("the pool's make read %q, want [\"then,\"]: Shape's variable as it was, nothing else", got)
	}
}

func mustLookup(t *testing.T, name string) backend.Registration {
	t.Helper()
	r, ok := backend.Lookup(name)
	if !ok {
		t.Fatalf("no backend %s", name)
	}
	return r
}

// A configuration asking for a pool on a backend that keeps none is told
// so, with the backends that do; one whose backend keeps them is not.
func TestPoolNote(t *testing.T) {
	cfg := poolConfig(t, 2)
	cfg.Terminal.Backend = "local"
	note := manager.New(cfg, nil).PoolNote(context.Background())
	if !strings.Contains(note, "terminal.warm_pool is 2") || !strings.Contains(note, "local backend keeps no warm pools") || !strings.Contains(note, "poolfake") {
		t.Errorf("note for warm_pool on local: %q; want it to name the key, local and the backends that keep pools (poolfake)", note)
	}
	if note := manager.New(poolConfig(t, 2), nil).PoolNote(context.Background()); note != "" {
		t.Errorf("note for warm_pool on a backend that keeps pools: %q, want none", note)
	}
	cfg.Terminal.WarmPool = 0
	if note := manager.New(cfg, nil).PoolNote(context.Background()); note != "" {
		t.Errorf("note without warm_pool: %q, want none", note)
	}
	// A configuration the backend cannot pool: the note says why.
	fp.reset()
	fp.mu.Lock()
	fp.shapeErr = fmt.Errorf("not this one: %w", backend.ErrUnsupported)
	fp.mu.Unlock()
	defer fp.reset()
	if note := manager.New(poolConfig(t, 2), nil).PoolNote(context.Background()); !strings.Contains(note, "cannot be pooled (not this one") {
		t.Errorf("note for a configuration the backend cannot pool: %q; want it to say why", note)
	}
}
