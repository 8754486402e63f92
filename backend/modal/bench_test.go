package modal

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/bench"
	"github.com/a55dbaac/berth/terminal"
)

// BenchmarkTrivialCommand is berth's way on modal: `true` through the full
// terminal path, i.e. one stdin write to the shell's long-lived exec and
// the framed reply streamed back (fake Modal, real SDK).
func BenchmarkTrivialCommand(b *testing.B) {
	f := newFixture(b)
	env := newEnv(b, newBackend(b, f.options(b, "", nil)))
	ctx := context.Background()
	for range 5 {
		mustRun(b, env, terminal.Request{Command: bench.TrivialCommand})
	}
	for b.Loop() {
		if r := env.Run(ctx, terminal.Request{Command: bench.TrivialCommand}); r.Error != nil || r.ExitCode != 0 {
			b.Fatal(r.ExitCode, r.Error)
		}
	}
}

// BenchmarkExecPerCommand is the reference's way: one Sandbox.Exec of
// `bash -c true` per command, its output read to the end and waited for.
func BenchmarkExecPerCommand(b *testing.B) {
	f := newFixture(b)
	be := newBackend(b, f.options(b, "", nil))
	ctx := context.Background()
	for b.Loop() {
		p, err := be.Start(ctx, backend.ProcSpec{Argv: []string{"bash", "-c", bench.TrivialCommand}})
		if err != nil {
			b.Fatal(err)
		}
		p.Stdin().Close()
		io.Copy(io.Discard, p.Stdout())
		if code, err := p.Wait(); code != 0 || err != nil {
			b.Fatal(code, err)
		}
		p.Close()
	}
}

// BenchmarkCompare runs both in one benchmark with berth's bench package
// (what `berth bench --backend modal` prints) and reports the two p50s and
// their ratio.
func BenchmarkCompare(b *testing.B) {
	f := newFixture(b)
	be := newBackend(b, f.options(b, "", nil))
	env := newEnv(b, be)
	ctx := context.Background()
	const n = 50
	for b.Loop() {
		lat, err := bench.Latency(ctx, env, n)
		if err != nil {
			b.Fatal(err)
		}
		spawn, err := bench.Spawn(ctx, be, n)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(lat.P50.Microseconds())/1000, "berth-p50-ms")
		b.ReportMetric(float64(spawn.P50.Microseconds())/1000, "exec-p50-ms")
		b.ReportMetric(float64(spawn.P50)/float64(lat.P50), "x-faster")
	}
}

// BenchmarkWriteFile compares a 16 MiB write_file through Modal's file API
// (FileWriter) with the shell path a backend without one takes (a helper
// exec whose stdin carries the bytes).
func BenchmarkWriteFile(b *testing.B) {
	f := newFixture(b)
	be := newBackend(b, f.options(b, "", nil))
	ctx := context.Background()
	data := strings.Repeat("x", 16<<20)
	b.Run("FileAPI", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if err := be.WriteFile(ctx, "/tmp/bench.bin", strings.NewReader(data), int64(len(data)), 0o666); err != nil {
				b.Fatal(err)
			}
			sh(b, be, "rm /tmp/bench.bin")
		}
	})
	b.Run("ExecStdin", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			_, code, err := backend.Output(ctx, be, backend.ProcSpec{Argv: []string{"/bin/sh", "-c", "cat >/tmp/bench.bin"}}, strings.NewReader(data), 0)
			if err != nil || code != 0 {
				b.Fatal(code, err)
			}
			sh(b, be, "rm /tmp/bench.bin")
		}
	})
}
