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
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
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

// Series times n calls of fn after warm warm-up calls.
func Series(n, warm int, fn func() error) (Stats, error) {
	for range warm {
		if err := fn(); err != nil {
			return Stats{}, err
		}
	}
	d := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if err := fn(); err != nil {
			return Stats{}, err
		}
		d = append(d, time.Since(start))
	}
	return summarise(d), nil
}

// Interleave times n rounds of fns, one call of each per round in turn
// (a b c a b c ...), after warm rounds, and returns each one's statistics.
// Measured so, a ratio of two of them holds while the machine's speed
// drifts during the run (other work starting or stopping).
func Interleave(n, warm int, fns ...func() error) ([]Stats, error) {
	for range warm {
		for _, fn := range fns {
			if err := fn(); err != nil {
				return nil, err
			}
		}
	}
	d := make([][]time.Duration, len(fns))
	for range n {
		for i, fn := range fns {
			start := time.Now()
			if err := fn(); err != nil {
				return nil, err
			}
			d[i] = append(d[i], time.Since(start))
		}
	}
	st := make([]Stats, len(fns))
	for i := range d {
		st[i] = summarise(d[i])
	}
	return st, nil
}

// Concurrently runs fn(ctx, i) for i from 0 to n-1, all at once, and
// returns the wall time from the first start to the last end and the
// statistics of each call's own time. The first error is returned once
// every call has ended.
func Concurrently(ctx context.Context, n int, fn func(ctx context.Context, i int) error) (time.Duration, Stats, error) {
	d := make([]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := time.Now()
			errs[i] = fn(ctx, i)
			d[i] = time.Since(s)
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return wall, Stats{}, fmt.Errorf("bench: %d at once: %w", n, err)
	}
	return wall, summarise(d), nil
}

// Run runs TrivialCommand through env's terminal path (session, output
// pipeline, result) and fails unless it exits 0.
func Run(ctx context.Context, env *terminal.Environment) error {
	r := env.Run(ctx, terminal.Request{Command: TrivialCommand})
	return resultErr(r)
}

// resultErr is a result's failure as an error.
func resultErr(r terminal.Result) error {
	if r.Error != nil {
		return fmt.Errorf("bench: %s: %s", TrivialCommand, *r.Error)
	}
	if r.ExitCode != 0 {
		return fmt.Errorf("bench: %s exited %d", TrivialCommand, r.ExitCode)
	}
	return nil
}

// ResultErr is r's failure as an error: its error, or an exit other than
// 0; nil when the command succeeded.
func ResultErr(r terminal.Result) error { return resultErr(r) }
