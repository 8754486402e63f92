package main

import (
	"context"
	"fmt"
	"github.com/a55dbaac/berth/backend"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/a55dbaac/berth/bench"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/terminal"
)

func newBenchCmd() *cobra.Command {
	var c common
	var n, spawnN int
	var sizes string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure berth against one new process per command, in the same run",
		Long: `Measure, on the configured backend: the latency of a trivial command through
berth's persistent session (full terminal path), the same command started as
a new process per call through the same backend (bash -c locally, one exec
per command on docker, one channel per command on ssh), the time from
creating the environment to the first command's result, and output
throughput with the peak memory growth of the berth process.`,
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
				env, err := m.Env(ctx, c.task)
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
				fmt.Printf("%-34s %10s %10s %8d\n", "new process per command", ms(spawn.P50), ms(spawn.P90), spawn.N)
				fmt.Printf("%-34s %9.1fx\n\n", "berth speed-up at p50", float64(spawn.P50)/float64(lat.P50))
				fmt.Printf("%-34s %10s\n\n", "create to first command", ms(firstCmd))
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
	cmd.Flags().StringVar(&c.backend, "backend", "", "backend to measure (default: configured): "+backend.Choices())
	cmd.Flags().StringVar(&c.task, "task", "bench", "environment key")
	cmd.Flags().IntVarP(&n, "n", "n", 1000, "berth calls to time")
	cmd.Flags().IntVar(&spawnN, "spawn-n", 100, "baseline calls to time")
	cmd.Flags().StringVar(&sizes, "sizes", "100MB,1GB", "output volumes for the throughput test (empty to skip)")
	return cmd
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
