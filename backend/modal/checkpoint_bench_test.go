package modal

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkCheckpoint100MB measures, on the fake Modal (a snapshot is a
// docker commit of the running container, without pausing it), a
// checkpoint of an environment that wrote 100 MB, and a fork from it: New
// from the checkpoint until its first command has answered. A benchmark,
// not a test: nothing is asserted about the times.
//
//	BERTH_TEST_ENGINES=docker go test -run '^$' -bench Checkpoint100MB -benchtime 3x ./backend/modal
func BenchmarkCheckpoint100MB(b *testing.B) {
	f := newFixture(b)
	src := newBackend(b, f.options(b, "", nil))
	if out, code := sh(b, src, "head -c 104857600 /dev/urandom >/root/big && stat -c %s /root/big"); code != 0 || out != "104857600\n" {
		b.Fatalf("write 100 MB: %q exit %d", out, code)
	}
	ctx := context.Background()
	var took, forked time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		cp, err := src.Checkpoint(ctx, fmt.Sprintf("bench-%d", i))
		if err != nil {
			b.Fatal(err)
		}
		took += time.Since(start)

		start = time.Now()
		opts := f.options(b, "", nil)
		opts.From = &cp
		fork, err := New(ctx, opts)
		if err != nil {
			b.Fatal(err)
		}
		out, code := sh(b, fork, "stat -c %s /root/big")
		forked += time.Since(start)
		if code != 0 || out != "104857600\n" {
			b.Fatalf("the fork's /root/big: %q exit %d", out, code)
		}

		b.StopTimer()
		if err := fork.Close(ctx); err != nil {
			b.Fatal(err)
		}
		if err := (checkpointAdmin{}).Remove(ctx, f.options(b, cp.Key, nil), cp); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(took.Seconds()/float64(b.N), "checkpoint-s/op")
	b.ReportMetric(forked.Seconds()/float64(b.N), "fork-s/op")
}
