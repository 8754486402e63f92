package kubernetes

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/terminal"
)

// forkCases are the environments the fork benchmarks fork: a small
// project (20 directories of 15 files, 4 MiB) in a throwaway and in a
// persistent environment, and the same with 100 MiB more in one file.
var forkCases = []struct {
	name       string
	persistent bool
	extraMB    int
}{
	{"throwaway", false, 0},
	{"persistent", true, 0},
	{"throwaway-100MB", false, 100},
}

// forkSource is the script that writes the source's files.
func forkSource(extraMB int) string {
	s := `set -e; cd /workspace; for d in $(seq 1 20); do mkdir -p src/d$d; for i in $(seq 1 15); do head -c 13000 /dev/urandom > src/d$d/f$i; done; done`
	if extraMB > 0 {
		s += fmt.Sprintf("; head -c %d /dev/urandom > big", extraMB<<20)
	}
	return s
}

// forkSettings sizes the volume and the memory for extraMB.
func forkSettings(persistent bool, extraMB int) func(*config.Terminal) {
	return func(t *config.Terminal) {
		t.ContainerPersistent = persistent
		mustSet(t, keyVolumeSize, fmt.Sprintf("%dMi", 64+2*extraMB))
		t.ContainerMemory = 256 + extraMB
	}
}

// BenchmarkFork is `berth env fork SRC DST` as the user waits for it:
// manager.Fork (the session's state captured, the checkpoint, the new
// environment made from it with the state restored, the transient
// checkpoint removed) of a running environment, which keeps running. The
// test cluster's storage cannot clone or snapshot, so this is the copy
// through exec streams. It reports the p50 and max besides the mean.
func BenchmarkFork(b *testing.B) {
	for _, c := range forkCases {
		b.Run(c.name, func(b *testing.B) {
			f := newFixture(b)
			set := forkSettings(c.persistent, c.extraMB)
			cfg := &config.Config{Home: b.TempDir(), Terminal: f.options(b, set).Config, MaxOutputChars: 50000,
				Checkpoints: config.Default().Checkpoints}
			var made []backend.Options
			m := manager.NewWithFactory(cfg, slog.New(slog.DiscardHandler), func(ctx context.Context, o backend.Options) (backend.Backend, error) {
				opts := f.options(b, set)
				opts.Key, opts.From, opts.Home, opts.Progress = o.Key, o.From, o.Home, o.Progress
				made = append(made, opts)
				return New(ctx, opts)
			})
			m.SetCheckpointAdmin(fixtureCheckpoints{f.options(b, nil)})
			ctx := context.Background()
			b.Cleanup(func() {
				m.CloseAll(ctx)
				if c.persistent {
					for _, o := range made {
						envAdmin{}.Remove(ctx, o, o.Key)
					}
				}
			})
			if r := m.Run(ctx, "src", terminal.Request{Command: forkSource(c.extraMB) + "; cd src/d3; export FORKED=1"}); r.Error != nil || r.ExitCode != 0 {
				b.Fatalf("writing the project: %+v", r)
			}
			var took []time.Duration
			for i := 0; b.Loop(); i++ {
				to := fmt.Sprintf("dst-%d", i)
				t0 := time.Now()
				if _, err := m.Fork(ctx, "src", to); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(t0))
				b.StopTimer()
				if r := m.Run(ctx, to, terminal.Request{Command: "pwd; echo $FORKED; ls | wc -l"}); r.Output != "/workspace/src/d3\n1\n15" {
					b.Fatalf("the fork: %+v", r)
				}
				m.Close(ctx, to)
				b.StartTimer()
			}
			b.ReportMetric(ms(median(took)), "fork-p50-ms")
			b.ReportMetric(ms(maxOf(took)), "fork-max-ms")
		})
	}
}

// BenchmarkForkSteps splits a fork at the backend: its Checkpoint, then
// New from it until a first command answered.
func BenchmarkForkSteps(b *testing.B) {
	for _, c := range forkCases {
		b.Run(c.name, func(b *testing.B) {
			f := newFixture(b)
			set := forkSettings(c.persistent, c.extraMB)
			opts := f.options(b, set)
			if c.persistent {
				b.Cleanup(func() { envAdmin{}.Remove(context.Background(), opts, opts.Key) })
			}
			src := newBackend(b, opts)
			if out, code := run(b, src, forkSource(c.extraMB)); code != 0 {
				b.Fatalf("writing the project: %d %s", code, out)
			}
			ctx := context.Background()
			var cks, rests []time.Duration
			for b.Loop() {
				t0 := time.Now()
				cp, err := src.Checkpoint(ctx, "")
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				fopts := f.options(b, set)
				fopts.From = &cp
				fork, err := New(ctx, fopts)
				if err != nil {
					b.Fatal(err)
				}
				if out, code := run(b, fork, "true"); code != 0 {
					b.Fatal(out)
				}
				cks, rests = append(cks, t1.Sub(t0)), append(rests, time.Since(t1))
				b.StopTimer()
				fork.Close(ctx)
				if c.persistent {
					envAdmin{}.Remove(ctx, fopts, fopts.Key)
				}
				if err := (checkpointAdmin{}).Remove(ctx, opts, cp); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(ms(median(cks)), "checkpoint-p50-ms")
			b.ReportMetric(ms(median(rests)), "restore-p50-ms")
		})
	}
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func maxOf(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}
