// Package bench measures berth against the spawn-per-call baseline in the
// same run: per-command latency of a trivial command through the full
// terminal path, the same command started as a new process per call through
// the same backend, and output throughput with the berth process's peak
// memory growth. `berth bench` prints these; the package's Go benchmarks
// run them under `go test -bench`.
package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/terminal"
)

// Stats summarises a series of timings.
type Stats struct {
	N        int
	P50, P90 time.Duration
	Mean     time.Duration
}

func summarise(d []time.Duration) Stats {
	if len(d) == 0 {
		return Stats{}
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return Stats{N: len(d), P50: d[len(d)/2], P90: d[len(d)*9/10], Mean: sum / time.Duration(len(d))}
}

// Summarise returns the statistics of a series of timings (it sorts d).
func Summarise(d []time.Duration) Stats { return summarise(d) }

// EnvStart times n environment starts: each time, create makes a fresh
// environment, the trivial command runs in it, and the environment is
// closed; the time is from the call to create to the command's result,
// what a first call costs. Closing is not timed.
func EnvStart(ctx context.Context, create func(ctx context.Context) (*terminal.Environment, error), n int) (Stats, error) {
	d := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		env, err := create(ctx)
		if err != nil {
			return Stats{}, fmt.Errorf("bench: environment start %d: %w", i, err)
		}
		r := env.Run(ctx, terminal.Request{Command: TrivialCommand})
		d = append(d, time.Since(start))
		env.Close(ctx)
		if r.Error != nil || r.ExitCode != 0 {
			return Stats{}, fmt.Errorf("bench: environment start %d: exit %d %v", i, r.ExitCode, r.Error)
		}
	}
	return summarise(d), nil
}

// TrivialCommand is what the latency measurements run.
const TrivialCommand = "true"

// Latency runs the trivial command n times through env's full terminal path
// (session, output pipeline, result) after a short warm-up.
func Latency(ctx context.Context, env *terminal.Environment, n int) (Stats, error) {
	for i := 0; i < 5; i++ {
		if r := env.Run(ctx, terminal.Request{Command: TrivialCommand}); r.Error != nil {
			return Stats{}, fmt.Errorf("bench: warm-up: %s", *r.Error)
		}
	}
	d := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		r := env.Run(ctx, terminal.Request{Command: TrivialCommand})
		d = append(d, time.Since(start))
		if r.Error != nil || r.ExitCode != 0 {
			return Stats{}, fmt.Errorf("bench: run %d: exit %d %v", i, r.ExitCode, r.Error)
		}
	}
	return summarise(d), nil
}

// Spawn is the baseline: every call starts a new `bash -c` (or `sh -c` where
// bash is missing) through the backend, reads its output to the end and
// waits for it — what a spawn-per-call runner does (fork/exec locally, one
// exec per command on docker, one channel per command on ssh).
//
// A backend whose reference implementation runs commands another way
// (backend.OneShotRunner) is measured that way instead.
func Spawn(ctx context.Context, be backend.Backend, n int) (Stats, error) {
	shell := "bash"
	once := func() error { return spawnOnce(ctx, be, shell) }
	if r, ok := be.(backend.OneShotRunner); ok {
		once = func() error {
			code, err := r.RunOneShot(ctx, TrivialCommand)
			if err == nil && code != 0 {
				err = fmt.Errorf("exit %d", code)
			}
			return err
		}
	}
	if err := once(); err != nil {
		shell = "sh"
		if err := once(); err != nil {
			return Stats{}, fmt.Errorf("bench: spawn baseline on %s: %w", be.Name(), err)
		}
	}
	d := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		if err := once(); err != nil {
			return Stats{}, fmt.Errorf("bench: spawn %d on %s: %w", i, be.Name(), err)
		}
		d = append(d, time.Since(start))
	}
	return summarise(d), nil
}

// spawnOnce starts `shell -c TrivialCommand` through be, reads its output
// to the end and waits for it, as a spawn-per-call runner does.
func spawnOnce(ctx context.Context, be backend.Backend, shell string) error {
	_, code, err := backend.Output(ctx, be, backend.ProcSpec{Argv: []string{shell, "-c", TrivialCommand}}, nil, 0)
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("exit %d", code)
	}
	return nil
}

// ThroughputResult is one output-volume measurement.
type ThroughputResult struct {
	Bytes         int64
	Elapsed       time.Duration
	PeakRSSGrowth int64 // bytes; -1 when the kernel cannot report it
	Output        int   // characters in the truncated result
}

// MBPerSec is the throughput in MB/s (10^6 bytes).
func (t ThroughputResult) MBPerSec() float64 {
	return float64(t.Bytes) / 1e6 / t.Elapsed.Seconds()
}

// Throughput streams size bytes of output through env and reports the time
// taken and how much the berth process's peak resident memory grew.
func Throughput(ctx context.Context, env *terminal.Environment, size int64) (ThroughputResult, error) {
	cmd := fmt.Sprintf("head -c %d /dev/zero | tr '\\000' a", size)
	base, resetOK := resetPeakRSS()
	start := time.Now()
	r := env.Run(ctx, terminal.Request{Command: cmd, Timeout: 3600})
	elapsed := time.Since(start)
	if r.Error != nil || r.ExitCode != 0 {
		return ThroughputResult{}, fmt.Errorf("bench: throughput %d bytes: exit %d %v", size, r.ExitCode, r.Error)
	}
	growth := int64(-1)
	if resetOK {
		if peak, ok := statusKB("VmHWM"); ok {
			growth = (peak - base) * 1024
			if growth < 0 {
				growth = 0
			}
		}
	}
	if r.FullOutputPath != "" {
		os.Remove(r.FullOutputPath)
	}
	return ThroughputResult{Bytes: size, Elapsed: elapsed, PeakRSSGrowth: growth, Output: len([]rune(r.Output))}, nil
}

// resetPeakRSS resets the kernel's peak-RSS counter of this process (Linux
// clear_refs) and returns the current RSS in KiB.
func resetPeakRSS() (int64, bool) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return 0, false
	}
	rss, ok := statusKB("VmRSS")
	return rss, ok
}

// statusKB reads a "Name: N kB" line of /proc/self/status.
func statusKB(name string) (int64, bool) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, name+":"); ok {
			fields := strings.Fields(rest)
			if len(fields) > 0 {
				n, err := strconv.ParseInt(fields[0], 10, 64)
				return n, err == nil
			}
		}
	}
	return 0, false
}
