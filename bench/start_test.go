package bench_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
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
