package bench_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/a55dbaac/berth/bench"
)

var (
	buildOnce sync.Once
	builtDir  string
	buildErr  error
)

// binaries builds berth-engine and the berth front once per test process
// into a temporary directory, as users build them (go build), and returns
// the directory.
func binaries(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "berth-bench-bin-")
		if err != nil {
			buildErr = err
			return
		}
		cmd := exec.Command("go", "build", "-o", dir+"/", "../cmd/berth-engine", "../cmd/berth")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = err
			tb.Logf("go build: %s", out)
			return
		}
		builtDir = dir
	})
	if buildErr != nil {
		tb.Fatalf("build berth-engine and berth: %v", buildErr)
	}
	return builtDir
}

// BenchmarkEngineStart is the engine's start, process and all: exec
// `berth-engine --help` (every package's init, the command tree, the help
// printed) and wait for it. It also reports the package initialisation's
// own time (GODEBUG=inittrace=1, summed over packages), the part of the
// start the engine's imports decide. The memory of the start is a budget
// checked by cmd/berth-engine's TestEngineStartBudget; its time is
// measured here, never asserted.
func BenchmarkEngineStart(b *testing.B) {
	engine := filepath.Join(binaries(b), "berth-engine")
	env := append(os.Environ(), "BERTH_HOME="+b.TempDir(), "BERTH_CONFIG=")
	for b.Loop() {
		cmd := exec.Command(engine, "--help")
		cmd.Env = env
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
	}
	// One traced start, outside the timed loop: tracing costs time.
	cmd := exec.Command(engine, "--help")
	cmd.Env = append(env, "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatal(err)
	}
	var clock float64
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		// init PKG @T ms, C ms clock, B bytes, A allocs
		if len(f) == 11 && f[0] == "init" && f[6] == "clock," {
			c, _ := strconv.ParseFloat(f[4], 64)
			clock += c
		}
	}
	b.ReportMetric(clock, "init-ms")
}

// BenchmarkWarmExec is a whole `berth exec -- true` through the front and
// a warm daemon (local backend, a private berth home), interleaved with
// `bash -c true`, each a new process; it reports both p50s and the ratio
// (target: at most 1.3x).
func BenchmarkWarmExec(b *testing.B) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		b.Skip("no bash:", err)
	}
	d, err := bench.NewDaemon(filepath.Join(binaries(b), "berth-engine"), "", "local")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	warm := d.Exec(d.Warm(), "warm")
	if err := warm(); err != nil { // starts the daemon and the environment
		b.Fatal(err)
	}
	bashTrue := func() error { return exec.Command(bash, "-c", bench.TrivialCommand).Run() }
	for b.Loop() {
		st, err := bench.Interleave(30, 2, warm, bashTrue)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(ms(st[0].P50), "berth-exec-p50-ms")
		b.ReportMetric(ms(st[1].P50), "bash-p50-ms")
		b.ReportMetric(float64(st[0].P50)/float64(st[1].P50), "x-bash")
		b.ReportMetric(1.3, "x-target")
	}
}
