package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/bench"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/terminal"
)

func newBenchCmd() *cobra.Command {
	var c common
	var n, spawnN, execN, sandboxN int
	var sizes string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure berth against one new process per command, in the same run",
		Long: `Measure, on the configured backend: the latency of a trivial command through
berth's persistent session (full terminal path), the same command started as
a new process per call through the same backend (bash -c locally, one exec
per command on docker, one channel per command on ssh), the time from
creating the environment to the first command's result, the wall time of a
whole "berth exec" call (process start included) on a warm environment
through the background daemon — the light berth front binary next to this
engine, and the engine itself — against "berth exec --no-daemon" (a
private berth home, stopped afterwards), and output throughput with the peak memory
growth of the berth process. On the local backend it also compares
local_sandbox off and workspace (kernel confinement) in the same run:
environment start, per-command latency and a new process per command.`,
		Example: `  berth bench
  berth bench --backend docker -n 1000
  berth bench --sizes 100MB,1GB`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.load()
			if err != nil {
				return err
			}
			var sz []int64
			if sizes != "" {
				for _, s := range strings.Split(sizes, ",") {
					v, err := parseSize(s)
					if err != nil {
						return fmt.Errorf("--sizes %q: %w", s, err)
					}
					sz = append(sz, v)
				}
			}
			return withManager(cmd.Context(), cfg, func(ctx context.Context, m *manager.Manager) error {
				start := time.Now()
				env, err := m.Env(ctx, c.Task)
				if err != nil {
					return err
				}
				if r := env.Run(ctx, terminal.Request{Command: "true"}); r.Error != nil {
					return fmt.Errorf("first command: %s", *r.Error)
				}
				firstCmd := time.Since(start)
				lat, err := bench.Latency(ctx, env, n)
				if err != nil {
					return err
				}
				spawn, err := bench.Spawn(ctx, env.Backend(), spawnN)
				if err != nil {
					return err
				}
				fmt.Printf("berth bench: backend %s, %d CPUs, %s/%s\n\n", cfg.Terminal.Backend, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)
				fmt.Printf("%-34s %10s %10s %8s\n", "per trivial command ("+bench.TrivialCommand+")", "p50", "p90", "calls")
				fmt.Printf("%-34s %10s %10s %8d\n", "berth (persistent session)", ms(lat.P50), ms(lat.P90), lat.N)
				baseline := "new process per command"
				if _, ok := env.Backend().(backend.OneShotRunner); ok {
					baseline = "reference one-shot per command"
				}
				fmt.Printf("%-34s %10s %10s %8d\n", baseline, ms(spawn.P50), ms(spawn.P90), spawn.N)
				fmt.Printf("%-34s %9.1fx\n\n", "berth speed-up at p50", float64(spawn.P50)/float64(lat.P50))
				fmt.Printf("%-34s %10s\n\n", "create to first command", ms(firstCmd))
				if execN > 0 {
					r, err := benchExec(ctx, cfg, c.Backend, execN)
					if err != nil {
						return err
					}
					fmt.Printf("%-34s %10s %10s %8s\n", "whole berth exec call ("+bench.TrivialCommand+")", "p50", "p90", "calls")
					warmName := "warm, berth (front) + daemon"
					if r.front == "" {
						warmName = "warm, berth-engine + daemon"
					}
					fmt.Printf("%-34s %10s %10s %8d\n", warmName, ms(r.warm.P50), ms(r.warm.P90), r.warm.N)
					if r.front != "" {
						fmt.Printf("%-34s %10s %10s %8d\n", "warm, berth-engine + daemon", ms(r.engine.P50), ms(r.engine.P90), r.engine.N)
					}
					fmt.Printf("%-34s %10s %10s %8d\n", "--no-daemon", ms(r.cold.P50), ms(r.cold.P90), r.cold.N)
					fmt.Printf("%-34s %9.1fx\n\n", "daemon speed-up at p50", float64(r.cold.P50)/float64(r.warm.P50))
					if r.front == "" {
						fmt.Printf("(no berth front binary next to %s: the warm row is the engine's)\n\n", r.engineExe)
					}
				}
				if sandboxN > 0 && declares(cfg.Terminal.Backend, sandboxKey) {
					if err := benchSandbox(ctx, cfg, n, spawnN, sandboxN); err != nil {
						return err
					}
				}
				if len(sz) > 0 {
					fmt.Printf("%-34s %10s %12s %14s\n", "output volume", "time", "throughput", "peak RSS growth")
					for _, s := range sz {
						r, err := bench.Throughput(ctx, env, s)
						if err != nil {
							return err
						}
						rss := "n/a"
						if r.PeakRSSGrowth >= 0 {
							rss = fmt.Sprintf("%.1f MiB", float64(r.PeakRSSGrowth)/(1<<20))
						}
						fmt.Printf("%-34s %9.2fs %7.0f MB/s %14s\n", humanSize(s), r.Elapsed.Seconds(), r.MBPerSec(), rss)
					}
				}
				return nil
			})
		},
	}
	c.addConfigFlag(cmd)
	cmd.Flags().StringVar(&c.Backend, "backend", "", "backend to measure (default: configured): "+backend.Choices())
	cmd.Flags().StringVar(&c.Task, "task", "bench", "environment key")
	cmd.Flags().IntVarP(&n, "n", "n", 1000, "berth calls to time")
	cmd.Flags().IntVar(&spawnN, "spawn-n", 100, "baseline calls to time")
	cmd.Flags().IntVar(&execN, "exec-n", 20, "whole berth exec calls to time, each way (0 to skip)")
	cmd.Flags().StringVar(&sizes, "sizes", "100MB,1GB", "output volumes for the throughput test (empty to skip)")
	cmd.Flags().IntVar(&sandboxN, "sandbox-n", 10, "environment starts to time in each "+sandboxKey+" mode, where the backend has one (0 to skip)")
	return cmd
}

// sandboxKey is the setting of a backend that confines its commands in the
// kernel (the local backend's); berth bench compares its modes.
const sandboxKey = "local_sandbox"

// declares reports whether backend name declares the configuration key.
func declares(name, key string) bool {
	reg, ok := backend.Lookup(name)
	if !ok {
		return false
	}
	for _, k := range reg.Keys {
		if k.Name == key {
			return true
		}
	}
	return false
}

// benchSandbox compares the configured backend unconfined (sandboxKey off)
// and confined (workspace) in the same run, each in a fresh working
// directory: environment start (interleaved, starts times each), a
// trivial command through the persistent session (n calls), and a new
// process per command (spawnN).
func benchSandbox(ctx context.Context, cfg *config.Config, n, spawnN, starts int) error {
	modes := []string{"off", "workspace"}
	type figures struct{ start, lat, spawn bench.Stats }
	got := make([]figures, len(modes))
	mgrs := make([]*manager.Manager, len(modes))
	for i, mode := range modes {
		c := *cfg
		dir, err := os.MkdirTemp("", "berth-bench-sandbox-")
		if err != nil {
			return fmt.Errorf("bench: working directory: %w", err)
		}
		defer os.RemoveAll(dir)
		c.Terminal.Cwd = dir
		if err := c.Terminal.Set(sandboxKey, mode); err != nil {
			return err
		}
		m := manager.New(&c, slog.Default())
		defer m.CloseAll(context.Background())
		mgrs[i] = m
	}
	startTimes := make([][]time.Duration, len(modes))
	for r := range starts {
		for i, m := range mgrs {
			key := fmt.Sprintf("bench-start-%d", r)
			s, err := bench.EnvStart(ctx, func(ctx context.Context) (*terminal.Environment, error) { return m.Env(ctx, key) }, 1)
			if err != nil {
				return fmt.Errorf("%s=%s: %w", sandboxKey, modes[i], err)
			}
			m.Close(ctx, key)
			startTimes[i] = append(startTimes[i], s.P50)
		}
	}
	for i, m := range mgrs {
		got[i].start = bench.Summarise(startTimes[i])
		env, err := m.Env(ctx, "bench-latency")
		if err != nil {
			return fmt.Errorf("%s=%s: %w", sandboxKey, modes[i], err)
		}
		if got[i].lat, err = bench.Latency(ctx, env, n); err != nil {
			return err
		}
		if got[i].spawn, err = bench.Spawn(ctx, env.Backend(), spawnN); err != nil {
			return err
		}
	}
	fmt.Printf("%s: kernel confinement, same run   %21s %21s\n", sandboxKey, "off (p50 / p90)", "workspace (p50 / p90)")
	row := func(name string, f func(figures) bench.Stats) {
		a, b := f(got[0]), f(got[1])
		fmt.Printf("%-38s %21s %21s   %+.1f%% at p50\n", name, ms2(a), ms2(b), 100*(float64(b.P50)/float64(a.P50)-1))
	}
	row(fmt.Sprintf("environment start to first result (%d)", starts), func(f figures) bench.Stats { return f.start })
	row(fmt.Sprintf("per trivial command, berth (%d)", n), func(f figures) bench.Stats { return f.lat })
	row(fmt.Sprintf("new process per command (%d)", spawnN), func(f figures) bench.Stats { return f.spawn })
	fmt.Println()
	return nil
}

// ms2 prints p50 / p90 in milliseconds.
func ms2(s bench.Stats) string {
	return fmt.Sprintf("%.3f / %.3f ms", float64(s.P50)/float64(time.Millisecond), float64(s.P90)/float64(time.Millisecond))
}

// execTimes are the whole-call timings of benchExec.
type execTimes struct {
	warm, engine, cold bench.Stats
	// front is the berth front binary timed for warm (next to this
	// engine), "" when there is none and warm is the engine's.
	front, engineExe string
}

// benchExec times whole `berth exec -- true` calls, each a new process:
// the berth front binary (next to this engine) through a warm daemon, this
// engine through the same daemon, and with --no-daemon. It uses a private
// berth home (the configuration file is the caller's) and a non-persistent
// environment, and stops that daemon at the end.
func benchExec(ctx context.Context, cfg *config.Config, backendFlag string, n int) (r execTimes, err error) {
	exe, err := os.Executable()
	if err != nil {
		return r, fmt.Errorf("bench: find the berth executable: %w", err)
	}
	r.engineExe = exe
	if p := filepath.Join(filepath.Dir(exe), "berth"); p != exe {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			r.front = p
		}
	}
	home, err := os.MkdirTemp("", "berth-bench-")
	if err != nil {
		return r, fmt.Errorf("bench: private home: %w", err)
	}
	defer os.RemoveAll(home)
	env := append(os.Environ(), "BERTH_HOME="+home, "BERTH_CONFIG="+cfg.Path, "BERTH_NO_DAEMON=", "TERMINAL_DAEMON=true",
		"TERMINAL_CONTAINER_PERSISTENT=false")
	// Two keys: a one-process berth closing its environment at exit must
	// not take the daemon's (a container of the same key) with it.
	call := func(bin string, extra ...string) (time.Duration, error) {
		key := fmt.Sprintf("bench-exec-%d-%d", os.Getpid(), len(extra))
		args := []string{"exec", "--task", key}
		if backendFlag != "" {
			args = append(args, "--backend", backendFlag)
		}
		cmd := exec.CommandContext(ctx, bin, append(append(args, extra...), "--", bench.TrivialCommand)...)
		cmd.Env = env
		var errb bytes.Buffer
		cmd.Stderr = &errb
		start := time.Now()
		err := cmd.Run()
		d := time.Since(start)
		if err != nil {
			return d, fmt.Errorf("bench: %s exec %v: %w: %s", filepath.Base(bin), extra, err, strings.TrimSpace(errb.String()))
		}
		return d, nil
	}
	defer func() {
		stop := exec.Command(exe, "daemon", "stop")
		stop.Env = env
		_ = stop.Run()
	}()
	if _, err := call(exe); err != nil { // starts the daemon and the environment
		return r, err
	}
	// One series after the other: a one-process call's cleanup goes on
	// for a moment after it exits, and would slow the call after it.
	series := func(bin string, extra ...string) ([]time.Duration, error) {
		var ds []time.Duration
		for range n {
			d, err := call(bin, extra...)
			if err != nil {
				return nil, err
			}
			ds = append(ds, d)
		}
		return ds, nil
	}
	var w []time.Duration
	if r.front != "" {
		if w, err = series(r.front); err != nil {
			return r, err
		}
	}
	e, err := series(exe)
	if err != nil {
		return r, err
	}
	c, err := series(exe, "--no-daemon")
	if err != nil {
		return r, err
	}
	r.engine, r.cold = stats(e), stats(c)
	r.warm = r.engine
	if r.front != "" {
		r.warm = stats(w)
	}
	return r, nil
}

// stats summarises timings like the bench package does.
func stats(d []time.Duration) bench.Stats {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return bench.Stats{N: len(d), P50: d[len(d)/2], P90: d[len(d)*9/10], Mean: sum / time.Duration(len(d))}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond)) }

// parseSize reads sizes like 100MB, 1GB, 512KB or a plain byte count
// (decimal units).
func parseSize(s string) (int64, error) {
	s = strings.ToUpper(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range []struct {
		suf string
		m   int64
	}{{"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}} {
		if strings.HasSuffix(s, u.suf) {
			s, mult = strings.TrimSuffix(s, u.suf), u.m
			break
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("not a size (use e.g. 100MB, 1GB or a byte count)")
	}
	return v * mult, nil
}

func humanSize(b int64) string {
	switch {
	case b >= 1e9 && b%1e9 == 0:
		return fmt.Sprintf("%d GB", b/1e9)
	case b >= 1e6 && b%1e6 == 0:
		return fmt.Sprintf("%d MB", b/1e6)
	}
	return fmt.Sprintf("%d bytes", b)
}
