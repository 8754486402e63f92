package bench_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	_ "github.com/a55dbaac/berth/backend/docker"
	_ "github.com/a55dbaac/berth/backend/kubernetes"
	_ "github.com/a55dbaac/berth/backend/local"
	"github.com/a55dbaac/berth/bench"
	"github.com/a55dbaac/berth/bench/floor"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
	"github.com/a55dbaac/berth/internal/testenv/k8senv"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/terminal"
)

// The benchmarks of this file compare berth with the physical floor of
// each path in the same run (package floor): a trivial command through
// berth (the daemon's path, manager.Run) and the same command on the
// engine's own stream, interleaved; an environment ready cold beside a
// bare start; N environments at once beside N bare starts. They report
// the p50s and the ratio as metrics (x-floor). The .../Berth, .../Terminal
// and .../Floor sub-benchmarks run one path alone, to profile it
// (-cpuprofile, -memprofile, -benchmem).
//
//	go test -run '^$' -bench 'Local|Docker|Kubernetes' ./bench/
//	go test -run '^$' -bench 'DockerCommand/Berth' -cpuprofile cpu.out ./bench/

var (
	atOnce      = flag.Int("at-once", 64, "environments BenchmarkDockerAtOnce starts at once")
	idleProfile = flag.String("idle-heap", "", "write a heap profile to this file while the idle environments of BenchmarkLocalIdle or BenchmarkDockerIdle are alive")
)

// fixture is one backend's environment through a manager, as the daemon
// holds it, with the options its backend was made with (for the floors).
type fixture struct {
	m    *manager.Manager
	cfg  *config.Config
	key  string
	env  *terminal.Environment
	opts backend.Options
}

// newFixture builds a manager over the configuration set makes from the
// defaults and opens key's environment; both are closed at the end.
func newFixture(tb testing.TB, name string, set func(*config.Terminal)) *fixture {
	tb.Helper()
	cfg := config.Default()
	cfg.Home = tb.TempDir()
	cfg.Terminal.Backend = name
	cfg.Terminal.ContainerPersistent = false
	cfg.Terminal.Cwd = tb.TempDir()
	if set != nil {
		set(&cfg.Terminal)
	}
	m := manager.New(cfg, slog.New(slog.DiscardHandler))
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		m.CloseAll(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f := &fixture{m: m, cfg: cfg, key: "bench"}
	env, err := m.Env(ctx, f.key)
	if err != nil {
		tb.Fatal(err)
	}
	if err := bench.Run(ctx, env); err != nil {
		tb.Fatal(err)
	}
	f.env = env
	f.opts = backend.Options{Key: f.key, Config: cfg.Terminal, Home: cfg.Home, Getenv: cfg.Getenv}
	return f
}

func mustSet(tb testing.TB, t *config.Terminal, key string, v any) {
	tb.Helper()
	if err := t.Set(key, v); err != nil {
		tb.Fatal(err)
	}
}

func localFixture(tb testing.TB) *fixture { return newFixture(tb, "local", nil) }

func dockerFixture(tb testing.TB) *fixture {
	img := dockerenv.Image(tb)
	return newFixture(tb, "docker", func(t *config.Terminal) {
		mustSet(tb, t, "docker_image", img)
	})
}

func kubernetesFixture(tb testing.TB) *fixture {
	cl := k8senv.Require(tb)
	ns, img := cl.Namespace(tb), cl.Image(tb)
	return newFixture(tb, "kubernetes", func(t *config.Terminal) {
		mustSet(tb, t, "kubernetes_kubeconfig", cl.Kubeconfig)
		mustSet(tb, t, "kubernetes_namespace", ns)
		mustSet(tb, t, "kubernetes_image", img)
		t.ContainerCPU, t.ContainerMemory, t.ContainerDisk = 0, 256, 1024
	})
}

// floors are the fixture's engine floors, closed at the end.
func (f *fixture) floors(tb testing.TB) *floor.Floors {
	tb.Helper()
	fl, err := floor.For(context.Background(), f.env.Backend(), f.opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { fl.Close() })
	return fl
}

// berth runs the trivial command as the daemon does (manager.Run:
// validation, the approval check, the process registry, the terminal
// path).
func (f *fixture) berth() error {
	return bench.ResultErr(f.m.Run(context.Background(), f.key, terminal.Request{Command: bench.TrivialCommand}))
}

// benchCommand is one fixture's per-command benchmarks: the paths alone,
// for profiles, and interleaved against the floor, for the ratio.
func benchCommand(b *testing.B, fixture func(testing.TB) *fixture) {
	f := fixture(b)
	fl := f.floors(b)
	sh, err := fl.Shell(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sh.Close() })
	own, err := bench.StartShell(context.Background(), f.env.Backend())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { own.Close() })
	// loop runs fn alone and reports, beside the wall time, this
	// process's CPU time (all its threads, the shell excluded) and its
	// threads' voluntary context switches (a thread that sleeps because a
	// goroutine waits and nothing else can run) per call: a loaded machine
	// moves them much less than the wall time.
	loop := func(b *testing.B, fn func() error) {
		start := usage()
		for b.Loop() {
			if err := fn(); err != nil {
				b.Fatal(err)
			}
		}
		end := usage()
		b.ReportMetric(us(end.cpu-start.cpu)/float64(b.N), "cpu-µs/op")
		b.ReportMetric(float64(end.switches-start.switches)/float64(b.N), "vcsw/op")
	}
	b.Run("Berth", func(b *testing.B) { loop(b, f.berth) })
	b.Run("Terminal", func(b *testing.B) { loop(b, func() error { return bench.Run(context.Background(), f.env) }) })
	b.Run("BackendStream", func(b *testing.B) { loop(b, own.RoundTrip) })
	b.Run("Floor", func(b *testing.B) { loop(b, sh.RoundTrip) })
	b.Run("VsFloor", func(b *testing.B) {
		for b.Loop() {
			st, err := bench.Interleave(200, 5, f.berth, sh.RoundTrip)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(us(st[0].P50), "berth-p50-µs")
			b.ReportMetric(us(st[1].P50), "floor-p50-µs")
			b.ReportMetric(float64(st[0].P50)/float64(st[1].P50), "x-floor")
			b.ReportMetric(fl.StreamMax, "x-target")
		}
	})
}

// rusage is what this process has used so far: CPU time (user and
// system) and voluntary context switches.
type rusage struct {
	cpu      time.Duration
	switches int64
}

func usage() rusage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return rusage{}
	}
	return rusage{cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), switches: ru.Nvcsw}
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkLocalCommand: a trivial command through berth against a bash
// kept open over pipes (target: at most 3x).
func BenchmarkLocalCommand(b *testing.B) { benchCommand(b, localFixture) }

// BenchmarkDockerCommand: against one exec attached once through the
// Engine API, kept open (target: at most 1.5x).
func BenchmarkDockerCommand(b *testing.B) { benchCommand(b, dockerFixture) }

// BenchmarkKubernetesCommand: against one pods/exec stream kept open
// (target: at most 1.5x).
func BenchmarkKubernetesCommand(b *testing.B) { benchCommand(b, kubernetesFixture) }

// benchReady times an environment ready cold through berth (created,
// first answer; closed untimed) beside the engine's bare start, one of
// each per iteration, and reports both and the ratio.
func benchReady(b *testing.B, fixture func(testing.TB) *fixture) {
	f := fixture(b)
	fl := f.floors(b)
	ctx := context.Background()
	var berth, bare []time.Duration
	i := 0
	for b.Loop() {
		key := fmt.Sprintf("ready-%d", i)
		i++
		start := time.Now()
		env, err := f.m.Env(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		if err := bench.Run(ctx, env); err != nil {
			b.Fatal(err)
		}
		berth = append(berth, time.Since(start))
		if err := f.m.Close(ctx, key); err != nil {
			b.Fatal(err)
		}
		d, _, err := floor.Time(ctx, fl.BareStart)
		if err != nil {
			b.Fatal(err)
		}
		bare = append(bare, d)
	}
	bs, fs := bench.Summarise(berth), bench.Summarise(bare)
	b.ReportMetric(ms(bs.P50), "berth-p50-ms")
	b.ReportMetric(ms(fs.P50), "bare-p50-ms")
	b.ReportMetric(float64(bs.P50)/float64(fs.P50), "x-bare")
	b.ReportMetric(fl.BareMax, "x-target")
}

// BenchmarkDockerReady: environment ready cold against docker run --rm
// IMAGE true (target: at most 1.2x).
func BenchmarkDockerReady(b *testing.B) { benchReady(b, dockerFixture) }

// BenchmarkKubernetesReady: against a bare pod created, running and exec'd
// into (target: at most 1.2x).
func BenchmarkKubernetesReady(b *testing.B) { benchReady(b, kubernetesFixture) }

// BenchmarkDockerAtOnce starts -at-once environments at once through
// berth (create, one command, remove), then as many bare docker runs at
// once, per iteration, and reports the wall times and the ratio (target:
// at most 1.2x).
func BenchmarkDockerAtOnce(b *testing.B) {
	f := dockerFixture(b)
	fl := f.floors(b)
	n := *atOnce
	round := 0
	var berth, bare []time.Duration
	for b.Loop() {
		round++
		wall, _, err := bench.Concurrently(context.Background(), n, func(ctx context.Context, i int) error {
			key := fmt.Sprintf("once-%d-%d", round, i)
			env, err := f.m.Env(ctx, key)
			if err != nil {
				return err
			}
			err = bench.Run(ctx, env)
			if cerr := f.m.Close(ctx, key); err == nil {
				err = cerr
			}
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		berth = append(berth, wall)
		wall, _, err = bench.Concurrently(context.Background(), n, func(ctx context.Context, i int) error {
			_, err := fl.BareStart(ctx)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		bare = append(bare, wall)
	}
	bs, fs := bench.Summarise(berth), bench.Summarise(bare)
	b.ReportMetric(bs.P50.Seconds(), "berth-wall-s")
	b.ReportMetric(fs.P50.Seconds(), "bare-wall-s")
	b.ReportMetric(float64(bs.P50)/float64(fs.P50), "x-bare")
	b.ReportMetric(1.2, "x-target")
}

// TestFloorsLocal checks the local floors run and measure what they say
// (not how fast): the kept-open bash answers round trips, its start has
// its step.
func TestFloorsLocal(t *testing.T) {
	f := localFixture(t)
	fl := f.floors(t)
	sh, err := fl.Shell(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	s, err := bench.RoundTrips(sh, 20)
	if err != nil || s.N != 20 || s.P50 <= 0 {
		t.Fatalf("RoundTrips: %+v %v", s, err)
	}
	if fl.BareStart != nil {
		t.Errorf("local floors have a bare start (%s); a local environment has no image to start", fl.Bare)
	}
	ph, err := fl.ReadyStart(context.Background())
	if err != nil || len(ph) != 1 || ph.Total() <= 0 {
		t.Fatalf("ReadyStart: %v %v", ph, err)
	}
	if fl.StreamMax != 3 {
		t.Errorf("local target %v, want 3 (issue 30)", fl.StreamMax)
	}
}

// benchIdle adds 20 idle environments (one trivial command each) to the
// fixture's manager, as the daemon holds them, and reports what each
// keeps of this process's heap and goroutine stacks (runtime.MemStats
// after a collection) and how many goroutines. The target is the
// daemon's resident memory, at most 150 kB per idle environment (berth
// bench --idle-n measures it on a real daemon); -idle-heap FILE with
// -test.memprofilerate 1 writes a heap profile while the environments
// are alive (go tool pprof -sample_index=inuse_space).
func benchIdle(b *testing.B, fixture func(testing.TB) *fixture) {
	f := fixture(b)
	const n = 20
	ctx := context.Background()
	round := 0
	for b.Loop() {
		round++
		before, gBefore := memNow()
		var keys []string
		for i := range n {
			key := fmt.Sprintf("idle-%d-%d", round, i)
			env, err := f.m.Env(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			if err := bench.Run(ctx, env); err != nil {
				b.Fatal(err)
			}
			keys = append(keys, key)
		}
		time.Sleep(time.Second) // what starts with an environment settles
		after, gAfter := memNow()
		if *idleProfile != "" {
			writeHeap(b, *idleProfile)
		}
		b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/n, "heap-B/env")
		b.ReportMetric(float64(int64(after.StackInuse)-int64(before.StackInuse))/n, "stack-B/env")
		b.ReportMetric(float64(gAfter-gBefore)/n, "goroutines/env")
		b.StopTimer()
		for _, k := range keys {
			f.m.Close(ctx, k)
		}
		b.StartTimer()
	}
}

// writeHeap writes a heap profile (inuse_space shows who holds memory
// now) to name.
func writeHeap(b *testing.B, name string) {
	f, err := os.Create(name)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}

// memNow collects garbage and reads the memory statistics and the number
// of goroutines.
func memNow() (runtime.MemStats, int) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m, runtime.NumGoroutine()
}

// BenchmarkLocalIdle: what an idle local environment keeps.
func BenchmarkLocalIdle(b *testing.B) { benchIdle(b, localFixture) }

// BenchmarkDockerIdle: what an idle docker environment keeps.
func BenchmarkDockerIdle(b *testing.B) { benchIdle(b, dockerFixture) }
