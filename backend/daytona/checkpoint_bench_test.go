package daytona

import (
	"context"
	"testing"
	"time"

	"github.com/a55dbaac/berth/internal/testenv/daytonafake"
)

// BenchmarkCheckpoint100MB measures, on the fake Daytona, a checkpoint of a
// sandbox that wrote 100 MB (a Daytona snapshot: the container committed
// while it runs) and a fork from it (a new sandbox made from the snapshot,
// started, its first shell ready), separately: checkpoint-ms and fork-ms
// are the medians. "kind" commits without pausing; "frozen" pauses the
// container for the commit, as Daytona's runner does
// (daytonafake.Unkind.SnapshotFreeze). The fake's snapshot is a local
// docker commit, with no push to a registry: on Daytona add the push of
// the new layer and the pull of the image on the fork's runner.
//
//	BERTH_TEST_ENGINES=docker go test -run '^$' -bench Checkpoint100MB -benchtime 5x ./backend/daytona
func BenchmarkCheckpoint100MB(b *testing.B) {
	for _, c := range []struct {
		name   string
		unkind daytonafake.Unkind
	}{{"kind", daytonafake.Unkind{}}, {"frozen", daytonafake.Unkind{SnapshotFreeze: true}}} {
		b.Run(c.name, func(b *testing.B) {
			fake := daytonafake.StartUnkind(b, c.unkind)
			src := newBackend(b, testOptions(b, fake, nil, nil))
			if o, code := run(b, src, "head -c 100000000 /dev/urandom >/tmp/big && sync", ""); code != 0 {
				b.Fatalf("write 100 MB: exit %d %s", code, o)
			}
			ctx := context.Background()
			var cps, forks []time.Duration
			for b.Loop() {
				start := time.Now()
				cp, err := src.Checkpoint(ctx, "bench")
				if err != nil {
					b.Fatal(err)
				}
				cps = append(cps, time.Since(start))
				opts := testOptions(b, fake, nil, nil)
				opts.From = &cp
				start = time.Now()
				fork, err := New(ctx, opts)
				if err != nil {
					b.Fatal(err)
				}
				forks = append(forks, time.Since(start))
				b.StopTimer()
				if o, code := run(b, fork, "wc -c </tmp/big", ""); code != 0 || o != "100000000\n" {
					b.Fatalf("the fork's file: exit %d %q", code, o)
				}
				fork.Close(ctx)
				if err := (checkpointAdmin{}).Remove(ctx, opts, cp); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(median(cps), "checkpoint-ms")
			b.ReportMetric(median(forks), "fork-ms")
		})
	}
}

// median returns the median of d in milliseconds.
func median(d []time.Duration) float64 {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return float64(s[len(s)/2].Microseconds()) / 1000
}
