package bench

import (
	"context"
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
