package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/bench"
	"github.com/a55dbaac/berth/bench/floor"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/terminal"
)

func newBenchCmd() *cobra.Command {
	var c common
	var o benchOpts
	var sizes string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure berth against its physical floor and against one new process per command, in the same run",
		Long: `Measure berth on the configured backend beside the physical limit of each path,
in the same run, and print the ratio and the project's target for it:

  - a trivial command through berth (the daemon's path, manager.Run with the
    approval check, and the terminal path alone) against the same command
    round-tripped on a shell kept open on the backend's own stream, and on
    the engine's own stream with nothing of berth: a bash over pipes
    (local), one exec attached through the Engine API (docker), one
    pods/exec stream (kubernetes); the rounds are interleaved;
  - the same command started as a new process per call (bash -c locally,
    one exec per command on docker, one channel per command on ssh);
  - an environment ready cold (created, the first command answered)
    against a bare start of the same image (docker run --rm IMAGE true; a
    bare pod created, running and exec'd into), with the steps of each;
    and from the warm pool when one is configured (terminal.warm_pool);
  - --scale N environments at once (create, one command, remove) against
    N bare starts at once;
  - whole "berth exec -- true" calls (process start included) through the
    background daemon, against "bash -c true" and "--no-daemon";
  - --idle-n: the daemon's memory per idle environment;
  - output throughput with the peak memory growth of the berth process;
  - on the local backend, local_sandbox off and workspace side by side.`,
		Example: `  berth bench
  berth bench --backend docker -n 1000 --starts 10 --scale 64
  berth bench --sizes 100MB,1GB --idle-n 50`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.load()
			if err != nil {
				return err
			}
			if sizes != "" {
				for _, s := range strings.Split(sizes, ",") {
					v, err := parseSize(s)
					if err != nil {
						return fmt.Errorf("--sizes %q: %w", s, err)
					}
					o.sizes = append(o.sizes, v)
				}
			}
			for name, v := range map[string]int{"-n": o.n, "--spawn-n": o.spawnN, "--exec-n": o.execN,
				"--starts": o.starts, "--scale": o.scale, "--idle-n": o.idleN, "--sandbox-n": o.sandboxN} {
				if v < 0 || name == "-n" && v == 0 {
					return fmt.Errorf("%s %d: give a positive count (0 skips, except for -n)", name, v)
				}
			}
			o.backendFlag = c.Backend
			return withManager(cmd.Context(), cfg, func(ctx context.Context, m *manager.Manager) error {
				return runBench(ctx, cfg, m, c.Task, o)
			})
		},
	}
	c.addConfigFlag(cmd)
	cmd.Flags().StringVar(&c.Backend, "backend", "", "backend to measure (default: configured): "+backend.Choices())
	cmd.Flags().StringVar(&c.Task, "task", "bench", "environment key")
	cmd.Flags().IntVarP(&o.n, "n", "n", 1000, "rounds of the trivial command (berth and each floor, interleaved)")
	cmd.Flags().IntVar(&o.spawnN, "spawn-n", 100, "new-process-per-command calls to time (0 to skip)")
	cmd.Flags().IntVar(&o.starts, "starts", 5, "cold environment starts to time, each beside a bare start (0 to skip)")
	cmd.Flags().IntVar(&o.scale, "scale", 0, "environments to start at once, beside as many bare starts at once (0 to skip)")
	cmd.Flags().IntVar(&o.execN, "exec-n", 20, "whole berth exec calls to time, each way (0 to skip)")
	cmd.Flags().IntVar(&o.idleN, "idle-n", 0, "idle environments to add to the daemon to measure its memory per environment (0 to skip)")
	cmd.Flags().StringVar(&sizes, "sizes", "100MB,1GB", "output volumes for the throughput test (empty to skip)")
	cmd.Flags().IntVar(&o.sandboxN, "sandbox-n", 10, "environment starts to time in each "+sandboxKey+" mode, where the backend has one (0 to skip)")
	return cmd
}

// benchOpts are berth bench's counts.
type benchOpts struct {
	n, spawnN, starts, scale, execN, idleN, sandboxN int
	sizes                                            []int64
	backendFlag                                      string
}

// Targets the project sets itself (issue 30), as ratios to a floor
// measured in the same run; the per-engine ones come with the floors.
const (
	poolMax   = 0.1 // environment ready from a warm pool ÷ a cold one
	execMax   = 1.3 // warm berth exec -- true ÷ bash -c true
	idleMaxKB = 150 // daemon memory per idle environment
	scaleMax  = 1.2 // N environments at once ÷ N bare starts at once
)

// runBench measures and prints everything berth bench measures, on m's
// backend, with the environment key task.
func runBench(ctx context.Context, cfg *config.Config, m *manager.Manager, task string, o benchOpts) error {
	start := time.Now()
	env, err := m.Env(ctx, task)
	if err != nil {
		return err
	}
	if err := bench.Run(ctx, env); err != nil {
		return fmt.Errorf("first command: %w", err)
	}
	firstCmd := time.Since(start)
	be := env.Backend()
	fmt.Printf("berth bench: backend %s, %d CPUs, %s/%s, load average %s\n\n", be.Name(), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, loadAvg())

	opts := backend.Options{Key: task, Config: cfg.Terminal, Home: cfg.Home, Getenv: cfg.Getenv}
	fl, err := floor.For(ctx, be, opts)
	switch {
	case errors.Is(err, floor.ErrNone):
		fl = nil
		fmt.Printf("(no engine floor for %s here: berth is compared with a shell kept open on the backend's own stream only)\n\n", be.Name())
	case err != nil:
		fl = nil
		fmt.Printf("(the engine floor could not be set up, %v: berth is compared with a shell kept open on the backend's own stream only)\n\n", err)
	default:
		defer fl.Close()
	}

	if err := benchCommand(ctx, m, task, env, fl, o.n); err != nil {
		return err
	}
	if o.spawnN > 0 {
		spawn, err := bench.Spawn(ctx, be, o.spawnN)
		if err != nil {
			return err
		}
		lat, err := bench.Latency(ctx, env, min(o.n, 200))
		if err != nil {
			return err
		}
		baseline := "new process per command"
		if _, ok := be.(backend.OneShotRunner); ok {
			baseline = "reference one-shot per command"
		}
		fmt.Printf("%-50s %10s %10s %6d\n", baseline, ms(spawn.P50), ms(spawn.P90), spawn.N)
		fmt.Printf("%-50s %10s %10s %6d\n", "berth, terminal path, same run", ms(lat.P50), ms(lat.P90), lat.N)
		fmt.Printf("%-50s %9.1fx\n\n", "berth speed-up at p50", float64(spawn.P50)/float64(lat.P50))
	}
	fmt.Printf("%-50s %10s\n\n", "create to first command (this run's first)", ms(firstCmd))

	if o.starts > 0 || o.scale > 0 {
		sm, err := startManager(cfg)
		if err != nil {
			return err
		}
		defer sm.CloseAll(context.Background())
		var cold bench.Stats
		if o.starts > 0 {
			if cold, err = benchStarts(ctx, sm, fl, o.starts); err != nil {
				return err
			}
			if err := benchPool(ctx, cfg, sm, cold, o.starts); err != nil {
				return err
			}
		}
		if o.scale > 0 {
			if err := benchScale(ctx, sm, fl, o.scale); err != nil {
				return err
			}
		}
	}
	if o.execN > 0 || o.idleN > 0 {
		if err := benchExec(ctx, cfg, o.backendFlag, o.execN, o.idleN); err != nil {
			return err
		}
	}
	if o.sandboxN > 0 && declares(cfg.Terminal.Backend, sandboxKey) {
		if err := benchSandbox(ctx, cfg, o.n, o.spawnN, o.sandboxN); err != nil {
			return err
		}
	}
	if len(o.sizes) > 0 {
		fmt.Printf("%-34s %10s %12s %14s\n", "output volume", "time", "throughput", "peak RSS growth")
		for _, s := range o.sizes {
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
}

// benchCommand compares a trivial command through berth with its floors,
// in interleaved rounds: the daemon's path (manager.Run: validation, the
// approval check, the process registry, the terminal path), the terminal
// path alone (session, output pipeline, result), a shell kept open on the
// backend's own stream (its Start), and the engine's stream (fl).
func benchCommand(ctx context.Context, m *manager.Manager, task string, env *terminal.Environment, fl *floor.Floors, n int) error {
	own, err := bench.StartShell(ctx, env.Backend())
	if err != nil {
		return err
	}
	defer own.Close()
	names := []string{"berth, the daemon's path (manager.Run)", "berth, terminal path (session, output, result)",
		"shell kept open on the backend's Start"}
	fns := []func() error{
		func() error {
			return bench.ResultErr(m.Run(ctx, task, terminal.Request{Command: bench.TrivialCommand}))
		},
		func() error { return bench.Run(ctx, env) },
		own.RoundTrip,
	}
	if fl != nil {
		sh, err := fl.Shell(ctx)
		if err != nil {
			return err
		}
		defer sh.Close()
		names = append(names, "floor: "+fl.Stream)
		fns = append(fns, sh.RoundTrip)
	}
	st, err := bench.Interleave(n, 5, fns...)
	if err != nil {
		return err
	}
	fmt.Printf("%-50s %10s %10s %6s\n", "per trivial command ("+bench.TrivialCommand+"), interleaved", "p50", "p90", "calls")
	for i, s := range st {
		fmt.Printf("%-50s %10s %10s %6d\n", clip(names[i], 50), ms(s.P50), ms(s.P90), s.N)
	}
	if fl != nil {
		floorP50 := st[len(st)-1].P50
		ratioLine("berth (daemon's path) ÷ engine floor, p50", st[0].P50, floorP50, fl.StreamMax)
		ratioLine("terminal path ÷ engine floor, p50", st[1].P50, floorP50, 0)
		ratioLine("backend's stream ÷ engine floor, p50", st[2].P50, floorP50, 0)
	} else {
		ratioLine("berth (daemon's path) ÷ backend's stream, p50", st[0].P50, st[2].P50, 0)
	}
	fmt.Println()
	return nil
}

// ratioLine prints a ÷ b and, when max > 0, whether the target (at most
// max) is met.
func ratioLine(name string, a, b time.Duration, max float64) {
	r := float64(a) / float64(b)
	target := ""
	if max > 0 {
		verdict := "met"
		if r > max {
			verdict = "NOT met"
		}
		target = fmt.Sprintf("   target <= %.2gx: %s", max, verdict)
	}
	fmt.Printf("%-50s %9.2fx%s\n", name, r, target)
}

// clip shortens s to n characters for a table cell.
func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// startManager is a manager for environments started only to be timed and
// removed: like the caller's configuration, but never persistent, so
// nothing is left behind.
func startManager(cfg *config.Config) (*manager.Manager, error) {
	c := *cfg
	c.Terminal.ContainerPersistent = false
	// The first environment (the caller's manager) has said what the
	// backend warns about; each timed start would say it again.
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	return manager.New(&c, quiet), nil
}

// startKey is a fresh environment key for one timed start.
func startKey(kind string, i int) string {
	return fmt.Sprintf("bench-%s-%d-%d", kind, os.Getpid(), i)
}

// berthStart creates environment key through m, runs the trivial command
// in it and returns the time to its answer, with the time the environment
// existed (the backend made, before the shell's first answer); answered,
// when not nil, runs after the answer, before the environment is closed
// (untimed).
func berthStart(ctx context.Context, m *manager.Manager, key string, answered func()) (ready, made time.Duration, err error) {
	start := time.Now()
	env, err := m.Env(ctx, key)
	if err != nil {
		return 0, 0, err
	}
	made = time.Since(start)
	err = bench.Run(ctx, env)
	ready = time.Since(start)
	if answered != nil {
		answered()
	}
	if cerr := m.Close(ctx, key); err == nil && cerr != nil {
		err = fmt.Errorf("bench: close %s: %w", key, cerr)
	}
	return ready, made, err
}

// benchStarts times environments ready cold through berth (created, the
// first command answered) beside the engine's bare start and its least
// persistent-shell start, interleaved, and prints the steps of each (the
// median of each step's time over the starts).
func benchStarts(ctx context.Context, m *manager.Manager, fl *floor.Floors, n int) (bench.Stats, error) {
	var berth, bare, ready []time.Duration
	var berthPh, barePh, readyPh []floor.Phases
	for i := range n {
		key := startKey("start", i)
		var stop func() floor.Phases
		start := time.Now()
		if fl != nil && fl.Trace != nil {
			var err error
			if stop, err = fl.Trace(ctx, key, start); err != nil {
				return bench.Stats{}, err
			}
		}
		var ph floor.Phases
		d, made, err := berthStart(ctx, m, key, func() {
			if stop != nil {
				ph = stop()
			}
		})
		if err != nil {
			return bench.Stats{}, err
		}
		berth = append(berth, d)
		ph = append(ph, floor.Phase{Name: "environment made", At: made}, floor.Phase{Name: "first answer", At: d})
		slices.SortStableFunc(ph, func(a, b floor.Phase) int { return int(a.At - b.At) })
		berthPh = append(berthPh, ph)
		if fl == nil {
			continue
		}
		if fl.BareStart != nil {
			d, ph, err := floor.Time(ctx, fl.BareStart)
			if err != nil {
				return bench.Stats{}, err
			}
			bare, barePh = append(bare, d), append(barePh, ph)
		}
		if fl.ReadyStart != nil {
			d, ph, err := floor.Time(ctx, fl.ReadyStart)
			if err != nil {
				return bench.Stats{}, err
			}
			ready, readyPh = append(ready, d), append(readyPh, ph)
		}
	}
	cold := bench.Summarise(berth)
	fmt.Printf("%-50s %10s %10s %6s\n", "environment ready, cold (created, first answer)", "p50", "p90", "starts")
	fmt.Printf("%-50s %10s %10s %6d\n", "berth", ms(cold.P50), ms(cold.P90), cold.N)
	fmt.Printf("    steps (median): %s\n", medianSteps(berthPh))
	if len(bare) > 0 {
		s := bench.Summarise(bare)
		fmt.Printf("%-50s %10s %10s %6d\n", clip("floor: "+fl.Bare, 50), ms(s.P50), ms(s.P90), s.N)
		fmt.Printf("    (%s) steps (median): %s\n", fl.Bare, medianSteps(barePh))
	}
	if len(ready) > 0 {
		s := bench.Summarise(ready)
		fmt.Printf("%-50s %10s %10s %6d\n", clip("floor: "+fl.Ready, 50), ms(s.P50), ms(s.P90), s.N)
		fmt.Printf("    (%s) steps (median): %s\n", fl.Ready, medianSteps(readyPh))
	}
	if len(bare) > 0 {
		ratioLine("berth ÷ bare start, p50", cold.P50, bench.Summarise(bare).P50, fl.BareMax)
	}
	if len(ready) > 0 {
		ratioLine("berth ÷ least persistent-shell start, p50", cold.P50, bench.Summarise(ready).P50, 0)
	}
	fmt.Println()
	return cold, nil
}

// medianSteps is the median time each step took (from the end of the
// step before it) over runs, for the steps every run has, in the first
// run's order.
func medianSteps(runs []floor.Phases) string {
	if len(runs) == 0 {
		return ""
	}
	took := make([]map[string]time.Duration, len(runs))
	for i, r := range runs {
		took[i] = map[string]time.Duration{}
		var prev time.Duration
		for _, p := range r {
			if _, dup := took[i][p.Name]; !dup {
				took[i][p.Name] = p.At - prev
			}
			prev = p.At
		}
	}
	var out []string
	for _, p := range runs[0] {
		var d []time.Duration
		for _, t := range took {
			if v, ok := t[p.Name]; ok {
				d = append(d, v)
			}
		}
		if len(d) == len(runs) {
			out = append(out, fmt.Sprintf("%s %.1f ms", p.Name, float64(median(d))/float64(time.Millisecond)))
		}
	}
	return strings.Join(out, ", ")
}

// benchPool is the slot of the warm pool (terminal.warm_pool, issue 30):
// once a pool is configured, environments ready from it are timed like
// cold ones, each after the pool had the time of two cold starts to
// refill, and compared with the cold p50. Without the key, or with no
// pool, it prints nothing.
func benchPool(ctx context.Context, cfg *config.Config, m *manager.Manager, cold bench.Stats, n int) error {
	v, err := cfg.Get("terminal.warm_pool")
	if err != nil {
		return nil // not in this build
	}
	size, err := strconv.Atoi(v)
	if err != nil || size <= 0 {
		return nil
	}
	// Filling the pool starts with the first environment.
	if _, _, err := berthStart(ctx, m, startKey("pool-fill", 0), nil); err != nil {
		return err
	}
	var d []time.Duration
	for i := range n {
		time.Sleep(2 * cold.P50)
		ready, _, err := berthStart(ctx, m, startKey("pool", i), nil)
		if err != nil {
			return err
		}
		d = append(d, ready)
	}
	s := bench.Summarise(d)
	fmt.Printf("%-50s %10s %10s %6d\n", fmt.Sprintf("environment ready from the pool (warm_pool %d)", size), ms(s.P50), ms(s.P90), s.N)
	ratioLine("from the pool ÷ cold, p50", s.P50, cold.P50, poolMax)
	fmt.Println()
	return nil
}

// benchScale starts n environments at once through berth (create, one
// command, remove), then n bare starts at once, then n least
// persistent-shell starts at once, twice each in turn, and compares the
// wall times.
func benchScale(ctx context.Context, m *manager.Manager, fl *floor.Floors, n int) error {
	var berthWall, bareWall, readyWall []time.Duration
	var each bench.Stats
	atOnce := func(start func(context.Context) (floor.Phases, error)) (time.Duration, error) {
		wall, _, err := bench.Concurrently(ctx, n, func(ctx context.Context, i int) error {
			_, err := start(ctx)
			return err
		})
		return wall, err
	}
	for round := range 2 {
		wall, st, err := bench.Concurrently(ctx, n, func(ctx context.Context, i int) error {
			_, _, err := berthStart(ctx, m, startKey(fmt.Sprintf("scale%d", round), i), nil)
			return err
		})
		if err != nil {
			return err
		}
		berthWall, each = append(berthWall, wall), st
		if fl == nil {
			continue
		}
		if fl.BareStart != nil {
			if wall, err = atOnce(fl.BareStart); err != nil {
				return err
			}
			bareWall = append(bareWall, wall)
		}
		if fl.ReadyStart != nil {
			if wall, err = atOnce(fl.ReadyStart); err != nil {
				return err
			}
			readyWall = append(readyWall, wall)
		}
	}
	fmt.Printf("%d environments at once (create, one command, remove)   wall, each round\n", n)
	fmt.Printf("%-50s %s   (each: p50 %s, p90 %s)\n", "berth", durs(berthWall), ms(each.P50), ms(each.P90))
	if len(bareWall) > 0 {
		fmt.Printf("%-50s %s\n", clip(fmt.Sprintf("floor: %d x %s", n, fl.Bare), 50), durs(bareWall))
	}
	if len(readyWall) > 0 {
		fmt.Printf("%-50s %s\n", clip(fmt.Sprintf("floor: %d x %s", n, fl.Ready), 50), durs(readyWall))
	}
	if len(bareWall) > 0 {
		ratioLine("berth ÷ bare, wall (the rounds' medians)", median(berthWall), median(bareWall), scaleMax)
	}
	if len(readyWall) > 0 {
		ratioLine("berth ÷ least persistent-shell, wall", median(berthWall), median(readyWall), 0)
	}
	fmt.Println()
	return nil
}

func durs(d []time.Duration) string {
	var s []string
	for _, x := range d {
		s = append(s, fmt.Sprintf("%.2f s", x.Seconds()))
	}
	return strings.Join(s, ", ")
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// loadAvg is the first three fields of /proc/loadavg, or "n/a".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "n/a"
	}
	return strings.Join(f[:3], " ")
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

// benchExec times whole `berth exec -- true` calls, each a new process:
// the berth front binary (next to this engine) through a warm daemon,
// interleaved with `bash -c true`, then this engine through the same
// daemon, then with --no-daemon; and, with idleN > 0, adds idleN idle
// environments to the daemon and prints its memory per environment. The
// daemon has a private berth home (bench.Daemon) and is stopped at the
// end.
func benchExec(ctx context.Context, cfg *config.Config, backendFlag string, n, idleN int) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench: find the berth executable: %w", err)
	}
	d, err := bench.NewDaemon(exe, cfg.Path, backendFlag)
	if err != nil {
		return err
	}
	defer d.Close()
	// Two keys: a one-process berth closing its environment at exit must
	// not take the daemon's (a container of the same key) with it.
	warmKey := fmt.Sprintf("bench-exec-%d", os.Getpid())
	if err := d.Exec(exe, warmKey)(); err != nil { // starts the daemon and the environment
		return err
	}
	if n > 0 {
		bash, err := exec.LookPath("bash")
		if err != nil {
			return fmt.Errorf("bench: bash -c true, the yardstick of a whole call: %w", err)
		}
		bashTrue := func() error { return exec.CommandContext(ctx, bash, "-c", bench.TrivialCommand).Run() }
		st, err := bench.Interleave(n, 1, d.Exec(d.Warm(), warmKey), bashTrue)
		if err != nil {
			return err
		}
		// One series after the other: a one-process call's cleanup goes on
		// for a moment after it exits, and would slow the call after it.
		eng, err := bench.Series(n, 0, d.Exec(exe, warmKey))
		if err != nil {
			return err
		}
		cold, err := bench.Series(n, 0, d.Exec(exe, warmKey+"-cold", "--no-daemon"))
		if err != nil {
			return err
		}
		fmt.Printf("%-50s %10s %10s %6s\n", "whole call, process start included", "p50", "p90", "calls")
		warmName := "berth exec -- true: berth (front) + daemon"
		if d.Front == "" {
			warmName = "berth exec -- true: berth-engine + daemon"
		}
		fmt.Printf("%-50s %10s %10s %6d\n", warmName, ms(st[0].P50), ms(st[0].P90), st[0].N)
		fmt.Printf("%-50s %10s %10s %6d\n", "bash -c true (interleaved with the above)", ms(st[1].P50), ms(st[1].P90), st[1].N)
		if d.Front != "" {
			fmt.Printf("%-50s %10s %10s %6d\n", "berth exec -- true: berth-engine + daemon", ms(eng.P50), ms(eng.P90), eng.N)
		}
		fmt.Printf("%-50s %10s %10s %6d\n", "berth exec --no-daemon -- true", ms(cold.P50), ms(cold.P90), cold.N)
		ratioLine("warm berth exec ÷ bash -c true, p50", st[0].P50, st[1].P50, execMax)
		fmt.Printf("%-50s %9.1fx\n", "daemon speed-up at p50 (vs --no-daemon)", float64(cold.P50)/float64(st[0].P50))
		if d.Front == "" {
			fmt.Printf("(no berth front binary next to %s: the warm row is the engine's)\n", exe)
		}
		fmt.Println()
	}
	if idleN > 0 {
		m, err := d.IdleMemory(ctx, idleN, func(i int) string { return startKey("idle", i) }, 2*time.Second)
		if err != nil {
			return err
		}
		fmt.Printf("daemon memory, %d idle environments added: RSS %.1f -> %.1f MB, anonymous %.1f -> %.1f MB\n",
			idleN, float64(m.BeforeRSS)/1e6, float64(m.AfterRSS)/1e6, float64(m.BeforeAnon)/1e6, float64(m.AfterAnon)/1e6)
		verdict := "met"
		if m.PerEnvRSS() > idleMaxKB*1000 {
			verdict = "NOT met"
		}
		fmt.Printf("%-50s %7.0f kB (anonymous %.0f kB)   target <= %d kB: %s\n\n", "per idle environment (RSS)",
			m.PerEnvRSS()/1000, m.PerEnvAnon()/1000, idleMaxKB, verdict)
	}
	return nil
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
