package bench

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/local"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/terminal"
)

func localEnv(b *testing.B) (*terminal.Environment, backend.Backend) {
	be, err := local.New(backend.Options{})
	if err != nil {
		b.Fatal(err)
	}
	env := terminal.New(be, terminal.Options{SpillDir: b.TempDir()})
	b.Cleanup(func() { env.Close(context.Background()) })
	return env, be
}

// BenchmarkLocalTrivialCommand is one trivial command through the full
// terminal path on the persistent local session.
func BenchmarkLocalTrivialCommand(b *testing.B) {
	env, _ := localEnv(b)
	ctx := context.Background()
	env.Run(ctx, terminal.Request{Command: "true"})
	b.ResetTimer()
	for b.Loop() {
		if r := env.Run(ctx, terminal.Request{Command: TrivialCommand}); r.ExitCode != 0 {
			b.Fatalf("exit %d", r.ExitCode)
		}
	}
}

// BenchmarkLocalSpawnBaseline is the spawn-per-call baseline: a new bash -c
// per command.
func BenchmarkLocalSpawnBaseline(b *testing.B) {
	_, be := localEnv(b)
	ctx := context.Background()
	for b.Loop() {
		if err := spawnOnce(ctx, be, "bash"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLocalThroughput100MB streams 100 MB of output through the
// pipeline and reports MB/s and the peak RSS growth.
func BenchmarkLocalThroughput100MB(b *testing.B) {
	env, _ := localEnv(b)
	for b.Loop() {
		r, err := Throughput(context.Background(), env, 100_000_000)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(r.MBPerSec(), "MB/s")
		b.ReportMetric(float64(r.PeakRSSGrowth)/(1<<20), "peakRSS-MiB")
	}
}

// sandboxModes are the local backend's confinement modes, compared in the
// same run.
var sandboxModes = []string{"off", "workspace"}

// sandboxBackend builds a local backend in mode, working in a fresh
// directory.
func sandboxBackend(tb testing.TB, mode string) backend.Backend {
	cfg := config.Default().Terminal
	cfg.Cwd = tb.TempDir()
	if err := cfg.Set("local_sandbox", mode); err != nil {
		tb.Fatal(err)
	}
	be, err := local.New(backend.Options{Config: cfg})
	if err != nil {
		tb.Fatal(err)
	}
	return be
}

// BenchmarkLocalSandbox compares the local backend unconfined (off) and in
// workspace mode: a trivial command through the persistent session, a new
// process per command (bash -c, forked from the confined thread), and an
// environment's start to its first result.
func BenchmarkLocalSandbox(b *testing.B) {
	ctx := context.Background()
	for _, mode := range sandboxModes {
		b.Run(mode+"/TrivialCommand", func(b *testing.B) {
			be := sandboxBackend(b, mode)
			env := terminal.New(be, terminal.Options{SpillDir: b.TempDir()})
			b.Cleanup(func() { env.Close(ctx) })
			env.Run(ctx, terminal.Request{Command: "true"})
			for b.Loop() {
				if r := env.Run(ctx, terminal.Request{Command: TrivialCommand}); r.ExitCode != 0 {
					b.Fatalf("exit %d", r.ExitCode)
				}
			}
		})
		b.Run(mode+"/Spawn", func(b *testing.B) {
			be := sandboxBackend(b, mode)
			b.Cleanup(func() { be.Close(ctx) })
			for b.Loop() {
				if err := spawnOnce(ctx, be, "bash"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(mode+"/EnvStart", func(b *testing.B) {
			spill := b.TempDir()
			for b.Loop() {
				_, err := EnvStart(ctx, func(ctx context.Context) (*terminal.Environment, error) {
					return terminal.New(sandboxBackend(b, mode), terminal.Options{SpillDir: spill}), nil
				}, 1)
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestLatencyAndSpawnRun checks the measuring functions work (not how fast).
func TestLatencyAndSpawnRun(t *testing.T) {
	be, err := local.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	env := terminal.New(be, terminal.Options{SpillDir: t.TempDir()})
	defer env.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Latency(ctx, env, 20)
	if err != nil || s.N != 20 || s.P50 <= 0 || s.P90 < s.P50 {
		t.Fatalf("Latency: %+v %v", s, err)
	}
	s, err = Spawn(ctx, be, 5)
	if err != nil || s.N != 5 || s.P50 <= 0 {
		t.Fatalf("Spawn: %+v %v", s, err)
	}
	r, err := Throughput(ctx, env, 2_000_000)
	if err != nil || r.Bytes != 2_000_000 || r.Output > 50000 || r.Output < 40000 {
		t.Fatalf("Throughput: %+v %v", r, err)
	}
	s, err = EnvStart(ctx, func(ctx context.Context) (*terminal.Environment, error) {
		be, err := local.New(backend.Options{})
		if err != nil {
			return nil, err
		}
		return terminal.New(be, terminal.Options{SpillDir: t.TempDir()}), nil
	}, 3)
	if err != nil || s.N != 3 || s.P50 <= 0 {
		t.Fatalf("EnvStart: %+v %v", s, err)
	}
}

// TestShellReadsTheStatus checks a round trip writes the command with its
// marker, skips what comes before the marker, and fails on a status other
// than 0 or an output that ends first.
func TestShellReadsTheStatus(t *testing.T) {
	var in strings.Builder
	sh := NewShell(&in, strings.NewReader("noise\n__floor_1 0\n__floor_2 1\n"), nil)
	if err := sh.RoundTrip(); err != nil {
		t.Fatalf("first round trip: %v", err)
	}
	if want := "true; echo __floor_1 $?\n"; in.String() != want {
		t.Fatalf("wrote %q, want %q", in.String(), want)
	}
	if err := sh.RoundTrip(); err == nil || !strings.Contains(err.Error(), "exited 1") {
		t.Fatalf("second round trip (status 1): %v, want an exit error", err)
	}
	if err := sh.RoundTrip(); err == nil {
		t.Fatal("third round trip on an ended output: no error")
	}
}

// TestInterleave checks the calls alternate round by round and each
// series has its count.
func TestInterleave(t *testing.T) {
	var order []string
	rec := func(s string) func() error { return func() error { order = append(order, s); return nil } }
	st, err := Interleave(3, 1, rec("a"), rec("b"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, ""); got != "abababab" {
		t.Fatalf("order %q, want abababab (one warm-up round, three timed)", got)
	}
	if len(st) != 2 || st[0].N != 3 || st[1].N != 3 {
		t.Fatalf("stats %+v", st)
	}
	if _, err := Interleave(2, 0, rec("a"), func() error { return errors.New("boom") }); err == nil {
		t.Fatal("a failing call: no error")
	}
}

// TestConcurrentlyRunsAllAtOnce checks every call runs at the same time:
// each waits until all have started (a hang guard ends it if not).
func TestConcurrentlyRunsAllAtOnce(t *testing.T) {
	const n = 16
	var started sync.WaitGroup
	started.Add(n)
	all := make(chan struct{})
	go func() { started.Wait(); close(all) }()
	_, st, err := Concurrently(context.Background(), n, func(ctx context.Context, i int) error {
		started.Done()
		select {
		case <-all:
			return nil
		case <-time.After(time.Minute):
			return errors.New("not all calls started together")
		}
	})
	if err != nil || st.N != n {
		t.Fatalf("Concurrently: %+v %v", st, err)
	}
	_, _, err = Concurrently(context.Background(), 4, func(ctx context.Context, i int) error {
		if i == 2 {
			return errors.New("call 2 failed")
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "call 2 failed") {
		t.Fatalf("a failing call: %v", err)
	}
}

// TestStartShellThroughTheBackend checks the shell kept open on a
// backend's Start answers round trips.
func TestStartShellThroughTheBackend(t *testing.T) {
	be, err := local.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sh, err := StartShell(context.Background(), be)
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	if s, err := RoundTrips(sh, 10); err != nil || s.N != 10 {
		t.Fatalf("RoundTrips: %+v %v", s, err)
	}
}
