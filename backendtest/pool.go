package backendtest

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
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/session"
	"github.com/a55dbaac/berth/terminal"
)

// PoolOptions enable the Pool group (Options.Pool) for a backend whose
// registration keeps warm pools (Registration.Pool). The group runs the
// pools as the daemon does (manager.Pools over the backend's Pooler), on a
// pool of one or two environments; it makes five or six (the pool's, a
// fresh one to compare a claimed one with, a dead berth's), so a backend
// runs it in a secondary configuration of its own (Groups: "Pool"),
// whose count of environments is its own.
type PoolOptions struct {
	// Options returns options for a fresh environment key of the
	// configuration the group pools (throwaway, as every pooled
	// environment is); every call gives the same shape.
	Options func(t testing.TB) backend.Options
	// Orphan makes one environment of opts' shape as a berth that has
	// since died would have left it in its pool: unclaimed, with the
	// owner mark of a process that has exited. It returns its ID
	// (backend.Pooled.ID, as the backend's env listing gives it).
	Orphan func(t testing.TB, opts backend.Options) string
	// Sweep runs, once, what the backend's next start runs against what
	// crashed berths left (its crash sweep).
	Sweep func(t testing.TB, opts backend.Options)
}

// poolWait bounds the wait for a pool to fill (a hang guard: an image
// already pulled, a container or pod to start on a loaded machine).
const poolWait = 5 * time.Minute

// poolFwd is the variable each claim forwards (docker_forward_env), with
// a value of the claimant's own.
const poolFwd = "BERTH_POOL_TEST_FWD"

// countingPooler counts the environments a pool makes into the suite's
// count (MaxEnvironments), and notes their IDs.
type countingPooler struct {
	backend.Pooler
	count func()
	mu    *sync.Mutex
	made  map[string]bool
}

func (c countingPooler) Make(ctx context.Context, opts backend.Options) (backend.Pooled, error) {
	c.count()
	m, err := c.Pooler.Make(ctx, opts)
	if err == nil {
		c.mu.Lock()
		c.made[m.ID()] = true
		c.mu.Unlock()
	}
	return m, err
}

// ours reports whether this group's pools made id.
func (c countingPooler) ours(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.made[id]
}

// noRoom is a Pooler whose backend reports no room: the pool must make
// nothing.
type noRoom struct {
	backend.Pooler
	asked chan struct{}
	once  sync.Once
	made  chan struct{}
}

func (n *noRoom) Room(context.Context, backend.Options) (int, error) {
	n.once.Do(func() { close(n.asked) })
	return 0, nil
}

func (n *noRoom) Make(context.Context, backend.Options) (backend.Pooled, error) {
	close(n.made)
	return nil, errors.New("made with no room")
}

// poolGroup is the Pool group: claim and refill, no state crossing
// claims, a claimed environment like a fresh one, the crash sweep, and
// the limits. Its cases run in order on one pool.
func (s *Suite) poolGroup(t *testing.T, name string) {
	po := s.opts.Pool
	reg, ok := backend.Lookup(name)
	if !ok || reg.Pool == nil {
		t.Fatalf("backendtest: Options.Pool is set, but backend %s registers no Pooler (Registration.Pool)", name)
	}
	if reg.Envs == nil {
		t.Fatalf("backendtest: backend %s keeps pools but registers no EnvAdmin to list them", name)
	}
	counted := countingPooler{Pooler: reg.Pool, count: s.count, mu: &sync.Mutex{}, made: map[string]bool{}}
	reg.Pool = counted
	ps := manager.NewPools(nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := ps.Close(ctx); err != nil {
			t.Errorf("close the pools: %v", err)
		}
	})
	ctx := context.Background()
	base := po.Options(t)
	shape, err := reg.Pool.Shape(ctx, base)
	if err != nil {
		t.Fatalf("Shape: %v", err)
	}
	tag := newTag()
	// claimOpts are a claimant's options: a fresh key (whose environment
	// lives until the group's end), and a variable to forward with a
	// value of its own.
	group := t
	claimOpts := func() backend.Options {
		o := po.Options(group)
		o.Config.DockerForwardEnv = append(slices.Clone(o.Config.DockerForwardEnv), poolFwd)
		get := o.Getenv
		val := "claimant-" + o.Key
		o.Getenv = func(k string) string {
			if k == poolFwd {
				return val
			}
			if get != nil {
				return get(k)
			}
			return ""
		}
		return o
	}
	status := func() backend.PoolStatus {
		for _, st := range ps.Status() {
			if st.Shape == shape {
				return st
			}
		}
		return backend.PoolStatus{}
	}
	// waitReady waits until the pool has n ready environments.
	waitReady := func(t *testing.T, n int) backend.PoolStatus {
		t.Helper()
		deadline := time.Now().Add(poolWait)
		for {
			st := status()
			if st.Ready >= n {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("the pool has %d environments ready after %v, want %d (status %+v)", st.Ready, poolWait, n, st)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	listed := func(t *testing.T) []backend.EnvInfo {
		t.Helper()
		envs, err := reg.Envs.List(ctx, base)
		if err != nil {
			t.Fatalf("env ls: %v", err)
		}
		return envs
	}
	find := func(envs []backend.EnvInfo, id string) (backend.EnvInfo, bool) {
		for _, e := range envs {
			if e.ID == id {
				return e, true
			}
		}
		return backend.EnvInfo{}, false
	}
	// claim claims an environment for opts, closed at the end of the
	// group (later cases use it).
	claim := func(t *testing.T, opts backend.Options) (*terminal.Environment, string) {
		t.Helper()
		before := status().Members
		be, err := ps.Claim(ctx, reg, opts, status().Size)
		if err != nil {
			t.Fatalf("claim for %s: %v", opts.Key, err)
		}
		e := s.poolEnv(group, be)
		// Which member it was: the listing shows it under the key now.
		id := ""
		for _, env := range listed(t) {
			if env.Key == opts.Key {
				id = env.ID
			}
		}
		if id == "" || !slices.Contains(before, id) {
			t.Fatalf("claimed %s: env ls lists it as %q, not one of the pool's %v", opts.Key, id, before)
		}
		return e, id
	}

	var (
		e1, e2     *terminal.Environment
		id1        string
		k1, k2     backend.Options
		stateFile  = "/tmp/berth-pool-" + tag
		stateVar   = "BERTH_POOL_STATE_" + tag
		stateSleep = "1002" + tag
		// stateSleepRE matches stateSleep's command line, not its own.
		stateSleepRE = "100[2]" + tag
	)
	ok = t.Run("ClaimAndRefill", func(t *testing.T) {
		if err := ps.Prewarm(ctx, reg, base, 1); err != nil {
			t.Fatalf("Prewarm: %v", err)
		}
		st := waitReady(t, 1)
		m1 := st.Members[0]
		got, ok := find(listed(t), m1)
		if !ok || got.Pool == "" || got.Key != "" {
			t.Fatalf("env ls lists the pooled environment %s as %+v (found %v), want a pool entry without a key", m1, got, ok)
		}
		k1 = claimOpts()
		e1, id1 = claim(t, k1)
		if id1 != m1 {
			t.Errorf("claimed %s, not the pool's ready %s", id1, m1)
		}
		expect(t, e1, cmd(`echo "$`+poolFwd+`"`), "claimant-"+k1.Key, 0)
		if got, _ := find(listed(t), id1); got.Key != k1.Key || got.Pool != "" {
			t.Errorf("env ls lists the claimed environment as %+v, want key %s and no pool", got, k1.Key)
		}
		st = waitReady(t, 1)
		if slices.Contains(st.Members, id1) {
			t.Errorf("the claimed environment %s is back in the pool: %v", id1, st.Members)
		}
	})
	if !ok {
		return
	}
	ok = t.Run("NoStateCrossesClaims", func(t *testing.T) {
		expect(t, e1, cmd(fmt.Sprintf(`echo kept > %s && export %s=1 && (sleep %s >/dev/null 2>&1 &) && echo ok`, stateFile, stateVar, stateSleep)), "ok", 0)
		ctx2, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := e1.Close(ctx2); err != nil {
			t.Fatalf("close the first claimant's environment: %v", err)
		}
		if e, still := find(listed(t), id1); still && !going(e) {
			t.Errorf("the first claimant's environment %s is still there after its close", id1)
		}
		k2 = claimOpts()
		var id2 string
		e2, id2 = claim(t, k2)
		if id2 == id1 {
			t.Fatalf("the second claim got the first claimant's environment %s", id1)
		}
		script := fmt.Sprintf(`test -e %s && echo file; [ -n "${%s+x}" ] && echo export; for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -q 'sleep %s' && echo process; echo "$%s"`,
			stateFile, stateVar, stateSleepRE, poolFwd)
		expect(t, e2, cmd(script), "claimant-"+k2.Key, 0)
	})
	if !ok {
		return
	}
	t.Run("IndistinguishableFromFresh", func(t *testing.T) {
		fo := claimOpts()
		s.count()
		ctx2, cancel := context.WithTimeout(ctx, poolWait)
		defer cancel()
		fresh, err := reg.New(ctx2, fo)
		if err != nil {
			t.Fatalf("a fresh environment of the same shape: %v", err)
		}
		ef := s.poolEnv(t, fresh)
		// What a command sees of its environment, its own forwarded value
		// and the few variables that differ between any two environments
		// (the host name, the session's mark) by name only.
		script := `pwd; id; umask; ulimit -a 2>/dev/null | LC_ALL=C sort; echo "fwd=${` + poolFwd + `%%-*}"
env | LC_ALL=C sort | sed -E 's/^(HOSTNAME|BERTH_TREE|_|` + poolFwd + `)=.*/\1=*/'
awk '{print $5, $9}' /proc/self/mountinfo | LC_ALL=C sort
tr '\0' ' ' < /proc/1/cmdline; echo
ls -la / /root /tmp /workspace 2>&1 | sed -E 's/^([^ ]+) +[0-9]+ /\1 /; s/ +[A-Z][a-z][a-z] +[0-9]+ +[0-9:]+ / DATE /'`
		pooled := run(t, e2, cmd(script)).Output
		made := run(t, ef, cmd(script)).Output
		if pooled != made {
			t.Errorf("a claimed environment differs from a fresh one of its shape: lines only the claimed one shows: %q; only the fresh one: %q",
				lineDiff(pooled, made), lineDiff(made, pooled))
		}
	})
	t.Run("SweepAfterCrash", func(t *testing.T) {
		live := waitReady(t, 1).Members
		id := po.Orphan(t, base)
		if got, ok := find(listed(t), id); !ok || got.Pool == "" {
			t.Fatalf("env ls lists the dead berth's pooled environment %s as %+v (found %v), want a pool entry", id, got, ok)
		}
		po.Sweep(t, base)
		envs := listed(t)
		if e, still := find(envs, id); still && !going(e) {
			t.Errorf("the pooled environment %s of a dead berth survived the sweep", id)
		}
		for _, m := range live {
			if _, ok := find(envs, m); !ok {
				t.Errorf("the sweep removed %s, of this live berth's pool", m)
			}
		}
	})
	t.Run("Limits", func(t *testing.T) {
		room, err := reg.Pool.Room(ctx, base)
		if err != nil || room < -1 {
			t.Fatalf("Room = %d, %v; want -1 (no limit known) or what is left", room, err)
		}
		// A backend with no room: the pool makes nothing and claims
		// nothing.
		nr := &noRoom{Pooler: reg.Pool, asked: make(chan struct{}), made: make(chan struct{})}
		none := reg
		none.Pool = nr
		ps2 := manager.NewPools(nil)
		defer ps2.Close(context.Background())
		if err := ps2.Prewarm(ctx, none, base, 2); err != nil {
			t.Fatal(err)
		}
		select {
		case <-nr.asked:
		case <-time.After(poolWait):
			t.Fatal("the pool never asked the backend for room")
		}
		if _, err := ps2.Claim(ctx, none, claimOpts(), 2); !errors.Is(err, backend.ErrPoolEmpty) {
			t.Errorf("claim from a pool with no room: %v, want ErrPoolEmpty", err)
		}
		select {
		case <-nr.made:
			t.Error("the pool made an environment the backend had no room for")
		default:
		}
		// Never more than its size: two ready, three claims at once, one
		// of which finds it empty at once.
		if err := ps.Prewarm(ctx, reg, base, 2); err != nil {
			t.Fatal(err)
		}
		st := waitReady(t, 2)
		if n := len(st.Members) + st.Making; n > 2 {
			t.Errorf("a pool of 2 holds %d environments (status %+v)", n, st)
		}
		unclaimed := 0
		for _, e := range listed(t) {
			if e.Pool != "" && counted.ours(e.ID) {
				unclaimed++
			}
		}
		if unclaimed > 2 {
			t.Errorf("env ls lists %d unclaimed environments of a pool of 2", unclaimed)
		}
		var wg sync.WaitGroup
		errs := make([]error, 3)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				be, err := ps.Claim(ctx, reg, claimOpts(), 2)
				if err == nil {
					s.poolEnv(t, be)
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		empty := 0
		for _, err := range errs {
			switch {
			case errors.Is(err, backend.ErrPoolEmpty):
				empty++
			case err != nil:
				t.Errorf("claim: %v", err)
			}
		}
		if empty != 1 {
			t.Errorf("three claims on a pool of 2 ready: %d found it empty, want 1 (%v)", empty, errs)
		}
		// Stopping: what the pool holds or makes goes.
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := ps.Close(cctx); err != nil {
			t.Fatal(err)
		}
		for _, e := range listed(t) {
			if counted.ours(e.ID) && e.Pool != "" && !going(e) {
				t.Errorf("after the pools closed, env ls still lists %s, which the pool made and nobody claimed (%+v)", e.ID, e)
			}
		}
	})
}

// poolEnv is the terminal layer over a claimed or fresh backend, closed
// with the backend at the end of the test.
func (s *Suite) poolEnv(t testing.TB, be backend.Backend) *terminal.Environment {
	e := terminal.New(be, terminal.Options{
		DefaultTimeout: 60 * time.Second,
		MaxOutputChars: 50000,
		SpillDir:       t.TempDir(),
		Session:        session.Options{Grace: s.opts.Grace, Cwd: s.opts.Cwd},
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		e.Close(ctx)
	})
	return e
}

// going reports whether a listed environment is being removed: an engine
// that removes asynchronously (a pod's grace period) lists it until it is
// gone, as "terminating" or "removing".
func going(e backend.EnvInfo) bool {
	return e.State == "terminating" || e.State == "removing"
}

// lineDiff returns the lines of a that b lacks.
func lineDiff(a, b string) []string {
	have := map[string]int{}
	for _, l := range strings.Split(b, "\n") {
		have[l]++
	}
	var out []string
	for _, l := range strings.Split(a, "\n") {
		if have[l] > 0 {
			have[l]--
			continue
		}
		out = append(out, l)
	}
	return out
}
