package kubernetes

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
)

// BenchmarkFork is a fork as berth makes one: a checkpoint of a running
// environment (the source keeps running), then a new environment from it,
// ready once a first command answered in it. The source wrote a small
// project (a few hundred files, 4 MiB; with -bench 'Fork/.*100MB' also
// 100 MiB in one file). The test cluster's storage cannot clone or
// snapshot, so this is the copy through exec streams. It reports the
// checkpoint's and the restore's share, and the p50 and max of the whole.
func BenchmarkFork(b *testing.B) {
	for _, c := range []struct {
		name       string
		persistent bool
		extraMB    int
	}{
		{"throwaway", false, 0},
		{"persistent", true, 0},
		{"throwaway-100MB", false, 100},
	} {
		b.Run(c.name, func(b *testing.B) {
			f := newFixture(b)
			opts := f.options(b, func(t *config.Terminal) {
				t.ContainerPersistent = c.persistent
				mustSet(t, keyVolumeSize, fmt.Sprintf("%dMi", 64+2*c.extraMB))
				t.ContainerMemory = 256 + c.extraMB
			})
			if c.persistent {
				b.Cleanup(func() { envAdmin{}.Remove(context.Background(), opts, opts.Key) })
			}
			src := newBackend(b, opts)
			script := `set -e; cd /workspace; for d in $(seq 1 20); do mkdir -p src/d$d; for i in $(seq 1 15); do head -c 13000 /dev/urandom > src/d$d/f$i; done; done`
			if c.extraMB > 0 {
				script += fmt.Sprintf("; head -c %d /dev/urandom > big", c.extraMB<<20)
			}
			if out, code := run(b, src, script); code != 0 {
				b.Fatalf("writing the project: %d %s", code, out)
			}
			ctx := context.Background()
			var cks, rests, totals []time.Duration
			for b.Loop() {
				t0 := time.Now()
				cp, err := src.Checkpoint(ctx, "")
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				fopts := f.options(b, func(t *config.Terminal) {
					t.ContainerPersistent = c.persistent
					mustSet(t, keyVolumeSize, fmt.Sprintf("%dMi", 64+2*c.extraMB))
					t.ContainerMemory = 256 + c.extraMB
				})
				fopts.From = &cp
				fork, err := New(ctx, fopts)
				if err != nil {
					b.Fatal(err)
				}
				if out, code := run(b, fork, "true"); code != 0 {
					b.Fatal(out)
				}
				t2 := time.Now()
				cks, rests, totals = append(cks, t1.Sub(t0)), append(rests, t2.Sub(t1)), append(totals, t2.Sub(t0))
				b.StopTimer()
				fork.Close(ctx)
				if c.persistent {
					envAdmin{}.Remove(ctx, fopts, fopts.Key)
				}
				if err := (checkpointAdmin{}).Remove(ctx, backend.Options{Config: opts.Config, Getenv: opts.Getenv}, cp); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(ms(median(cks)), "checkpoint-ms")
			b.ReportMetric(ms(median(rests)), "restore-ms")
			b.ReportMetric(ms(median(totals)), "fork-p50-ms")
			b.ReportMetric(ms(maxOf(totals)), "fork-max-ms")
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
