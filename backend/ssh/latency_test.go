package ssh

import (
	"context"
	"io"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/testenv/sshenv"
)

func percentiles(d []time.Duration) (p50, p90, p99 time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	at := func(q float64) time.Duration { return d[int(q*float64(len(d)-1))] }
	return at(0.5), at(0.9), at(0.99)
}

// testLatencyReport logs connect time, channel-open latency and persistent
// shell round trips (set BERTH_SSH_LATENCY=1 to run; timings are reported,
// never asserted).
func testLatencyReport(t *testing.T) {
	if os.Getenv("BERTH_SSH_LATENCY") == "" {
		t.Skip("set BERTH_SSH_LATENCY=1 to measure")
	}
	s := sshenv.Start(t)
	opts := testOptions(s, nil)
	var connects []time.Duration
	for i := 0; i < 10; i++ {
		b, err := New(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		st := time.Now()
		if err := b.Connect(context.Background()); err != nil {
			t.Fatal(err)
		}
		connects = append(connects, time.Since(st))
		b.Close(context.Background())
	}
	p50, p90, p99 := percentiles(connects)
	t.Logf("connect+auth: p50 %v p90 %v max %v", p50, p90, p99)

	b := newTestBackend(t, opts)
	if err := b.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	var opens, trues []time.Duration
	for i := 0; i < 20; i++ {
		st := time.Now()
		p, err := b.Start(context.Background(), backend.ProcSpec{Argv: []string{"true"}})
		if err != nil {
			t.Fatal(err)
		}
		opens = append(opens, time.Since(st))
		io.Copy(io.Discard, p.Stdout())
		p.Wait()
		trues = append(trues, time.Since(st))
		p.Close()
	}
	p50, p90, p99 = percentiles(opens)
	t.Logf("Start (channel open + exec accepted): p50 %v p90 %v max %v", p50, p90, p99)
	p50, p90, p99 = percentiles(trues)
	t.Logf("Start+Wait `true` (includes remote login shell startup): p50 %v p90 %v max %v", p50, p90, p99)

	sh1 := startShell(t, b)
	sh1.do("echo warm")
	var rts []time.Duration
	for i := 0; i < 500; i++ {
		st := time.Now()
		if got, err := sh1.do("echo x"); got != "x\n" || err != nil {
			t.Fatal(got, err)
		}
		rts = append(rts, time.Since(st))
	}
	p50, p90, p99 = percentiles(rts)
	t.Logf("persistent shell round trip: p50 %v p90 %v p99 %v", p50, p90, p99)
}
