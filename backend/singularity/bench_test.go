package singularity

import (
	"context"
	"testing"
	"time"

	"github.com/a55dbaac/berth/bench"
	"github.com/a55dbaac/berth/session"
	"github.com/a55dbaac/berth/terminal"
)

// BenchmarkPerCommand compares, in one run and on one instance, a trivial
// command through berth's persistent shell (the full terminal path) with
// the reference's way: one `apptainer exec instance://NAME bash -c true`
// per command. Each sub-benchmark reports its p50 and p90 (timings of a
// series of bench.Latency / bench.Spawn calls) besides ns/op. Against the
// stand-in apptainer the exec figure is lower than a real Apptainer's
// (0.18 s per exec measured on the VM): read the ratio as a lower bound.
func BenchmarkPerCommand(b *testing.B) {
	e := setup(b)
	be := newBackend(b, e.options("", nil))
	env := terminal.New(be, terminal.Options{
		DefaultTimeout: 60 * time.Second,
		MaxOutputChars: 50000,
		SpillDir:       b.TempDir(),
		Session:        session.Options{Grace: time.Second},
	})
	b.Cleanup(func() { env.Close(context.Background()) })
	ctx := context.Background()

	b.Run("berth_persistent_shell", func(b *testing.B) {
		var last bench.Stats
		for b.Loop() {
			st, err := bench.Latency(ctx, env, 20)
			if err != nil {
				b.Fatal(err)
			}
			last = st
		}
		b.ReportMetric(float64(last.P50.Microseconds()), "p50-µs/cmd")
		b.ReportMetric(float64(last.P90.Microseconds()), "p90-µs/cmd")
	})
	b.Run("exec_instance_per_command", func(b *testing.B) {
		var last bench.Stats
		for b.Loop() {
			st, err := bench.Spawn(ctx, be, 20)
			if err != nil {
				b.Fatal(err)
			}
			last = st
		}
		b.ReportMetric(float64(last.P50.Microseconds()), "p50-µs/cmd")
		b.ReportMetric(float64(last.P90.Microseconds()), "p90-µs/cmd")
	})
}
