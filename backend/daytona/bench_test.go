package daytona

import (
	"context"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/bench"
	"github.com/a55dbaac/berth/internal/testenv/daytonafake"
	"github.com/a55dbaac/berth/terminal"
)

// BenchmarkTrivialCommand compares, on the fake Daytona, berth's cost per
// trivial command (one exchange on the persistent shell's PTY websocket)
// with the reference's (a state check on the API, then one blocking
// toolbox execute), in the same run. Each reports its p50 besides ns/op.
//
//	go test -run '^$' -bench TrivialCommand ./backend/daytona
func BenchmarkTrivialCommand(b *testing.B) {
	fake := daytonafake.Start(b)
	be := newBackend(b, testOptions(b, fake, nil, nil))
	env := terminal.New(be, terminal.Options{SpillDir: b.TempDir()})
	b.Cleanup(func() { env.Close(context.Background()) })
	ctx := context.Background()

	b.Run("berth", func(b *testing.B) {
		if r := env.Run(ctx, terminal.Request{Command: bench.TrivialCommand}); r.Error != nil {
			b.Fatal(*r.Error)
		}
		var d []time.Duration
		for b.Loop() {
			start := time.Now()
			if r := env.Run(ctx, terminal.Request{Command: bench.TrivialCommand}); r.Error != nil || r.ExitCode != 0 {
				b.Fatalf("exit %d %v", r.ExitCode, r.Error)
			}
			d = append(d, time.Since(start))
		}
		reportP50(b, d)
	})
	b.Run("reference-oneshot", func(b *testing.B) {
		var d []time.Duration
		for b.Loop() {
			start := time.Now()
			if code, err := be.RunOneShot(ctx, bench.TrivialCommand); err != nil || code != 0 {
				b.Fatalf("exit %d %v", code, err)
			}
			d = append(d, time.Since(start))
		}
		reportP50(b, d)
	})
}

// BenchmarkBigOutput measures what pacing the output (see pty.go) costs
// against the same output passed on unpaced, in the same run, on the kind
// fake over loopback: 8 MB through a process without TTY. It reports MB/s.
//
//	go test -run '^$' -bench BigOutput ./backend/daytona
func BenchmarkBigOutput(b *testing.B) {
	fake := daytonafake.Start(b)
	be := newBackend(b, testOptions(b, fake, nil, nil))
	const n = 8000000
	for _, c := range []struct {
		name string
		pace bool
	}{{"paced", true}, {"unpaced", false}} {
		b.Run(c.name, func(b *testing.B) {
			old := unpaced.Swap(!c.pace)
			defer unpaced.Store(old)
			b.SetBytes(n)
			for b.Loop() {
				p, err := be.Start(context.Background(), backend.ProcSpec{Argv: []string{"head", "-c", strconv.Itoa(n), "/dev/zero"}})
				if err != nil {
					b.Fatal(err)
				}
				got, _ := io.Copy(io.Discard, p.Stdout())
				if code, err := p.Wait(); got != n || code != 0 || err != nil {
					b.Fatalf("%d bytes, exit %d, %v", got, code, err)
				}
				p.Close()
			}
		})
	}
}

func reportP50(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	for i := 1; i < len(d); i++ {
		for j := i; j > 0 && d[j] < d[j-1]; j-- {
			d[j], d[j-1] = d[j-1], d[j]
		}
	}
	b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "p50-ms")
}
