// Command berth runs an AI agent's shell commands in a configured
// environment — this machine, a hardened Docker container, a remote host
// over SSH — through one persistent shell per environment.
package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/a55dbaac/berth/backend"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/terminal"

	_ "github.com/a55dbaac/berth/backend/all"
)

// exitError carries a process exit status up to main without printing.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// errorStatus is berth's own failure status (bad flags, unreachable
// backend), distinct from any status a command returns; docker run uses the
// same number.
const errorStatus = 125

// common holds the flags shared by commands that run things.
type common struct {
	configPath string
	backend    string
	task       string
	timeout    int
	workdir    string
	jsonOut    bool
	verbose    bool
	noDaemon   bool
}

func (c *common) addConfigFlag(cmd *cobra.Command) {
	cmd.Flags().StringVar(&c.configPath, "config", "", "config file (default $BERTH_CONFIG, else $BERTH_HOME/config.yaml)")
}

func (c *common) addRunFlags(cmd *cobra.Command) {
	c.addConfigFlag(cmd)
	cmd.Flags().StringVar(&c.backend, "backend", "", "backend: "+backend.Choices()+" (overrides TERMINAL_ENV and the file)")
	cmd.Flags().StringVar(&c.task, "task", manager.DefaultKey, "environment key: commands with the same task share one environment")
	cmd.Flags().IntVar(&c.timeout, "timeout", 0, "seconds before the command and everything it started are killed (default terminal.timeout)")
	cmd.Flags().StringVar(&c.workdir, "workdir", "", "absolute directory for this command only (the session's cwd does not move)")
	cmd.Flags().BoolVar(&c.jsonOut, "json", false, "print the result object as JSON instead of the output")
}

// load reads the configuration with the command-line overrides applied.
func (c *common) load() (*config.Config, error) {
	flags := map[string]string{}
	if c.backend != "" {
		flags["backend"] = c.backend
	}
	if c.timeout < 0 {
		return nil, fmt.Errorf("--timeout %d: must be a whole number of seconds >= 1", c.timeout)
	}
	if c.timeout > terminal.MaxTimeout {
		// Also the default timeout of berth mcp and serve, which no
		// request validates: refused here before it can overflow.
		return nil, fmt.Errorf("--timeout %d: at most %d seconds (one day); run longer work in the background", c.timeout, terminal.MaxTimeout)
	}

	if c.timeout > 0 {
		flags["timeout"] = fmt.Sprint(c.timeout)
	}
	cfg, err := config.Load(config.LoadOptions{ConfigPath: c.configPath, Flags: flags})
	if err != nil {
		return nil, err
	}
	for _, w := range cfg.Warnings {
		slog.Warn(w)
	}
	return cfg, nil
}

// withManager runs fn with a manager and tears every environment down
// afterwards. The teardown gets 15 s, but after a shutdown signal only what
// is left of daemon_term_grace_seconds + 2.5 s since the signal: berth then
// exits within the grace period plus 3 s, as supervisors expect.
func withManager(ctx context.Context, cfg *config.Config, fn func(ctx context.Context, m *manager.Manager) error) error {
	m := manager.New(cfg, slog.Default())
	defer func() {
		budget := 15 * time.Second
		if at := shutdownAt.Load(); at != 0 {
			grace := time.Duration(cfg.Terminal.DaemonTermGraceSeconds * float64(time.Second))
			budget = min(budget, max(time.Until(time.Unix(0, at).Add(grace+2500*time.Millisecond)), 250*time.Millisecond))
		}
		cctx, cancel := context.WithTimeout(context.Background(), budget)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- m.CloseAll(cctx) }()
		select {
		case err := <-done:
			if err != nil {
				slog.Warn("cleanup", "err", err)
			}
		case <-cctx.Done():
			slog.Warn("cleanup: environments not closed in time; leaving them", "budget", budget.Round(time.Millisecond))
		}
	}()
	return fn(ctx, m)
}

func newRoot() *cobra.Command {
	var verbose bool
	root := &cobra.Command{
		Use:   "berth",
		Short: "Run an AI agent's commands locally, in Docker or over SSH through one persistent shell",
		Long: `berth is an execution layer for AI agents. Every command runs in a configured
environment (terminal.backend: local, docker, ssh, ...) through one persistent
shell, so cd, exported variables and functions carry over between commands,
and a trivial command costs well under a millisecond.

Configuration is the terminal: section of a YAML file (Hermes-compatible),
overridden by TERMINAL_* variables and then by flags.`,
		Example: `  berth exec -- uname -a
  berth exec --backend docker --timeout 30 -- 'make test'
  printf 'cd /tmp\nexport A=1\necho $A; pwd\n' | berth shell --json
  berth doctor`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, args []string) {
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelDebug
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
		},
	}
	root.PersistentFlags().BoolVarP(&verbose, "verbose", "v", false, "log diagnostics to stderr")
	root.AddCommand(newExecCmd(), newShellCmd(), newDoctorCmd(), newConfigCmd(), newBenchCmd(), newEnvCmd(), newMCPCmd(), newServeCmd(), newPsCmd(), newDaemonCmd())
	return root
}

// interrupts receives SIGINT while a command has claimed it (the
// interactive shell, to interrupt the running command); otherwise SIGINT
// cancels the command's context like SIGTERM does.
var (
	interruptsClaimed atomic.Bool
	interrupts        = make(chan os.Signal, 1)
)

// shutdownAt is when the first shutdown signal arrived (Unix nanoseconds),
// 0 before.
var shutdownAt atomic.Int64

// handleSignals turns SIGTERM, SIGHUP and SIGINT (unless claimed) into a
// cancel of the root context: running commands are interrupted and every
// environment is closed. A second shutdown signal exits at once.
func handleSignals(cancel context.CancelFunc) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP, os.Interrupt)
	go func() {
		for sig := range sigs {
			if sig == os.Interrupt && interruptsClaimed.Load() && shutdownAt.Load() == 0 {
				select {
				case interrupts <- sig:
				default:
				}
				continue
			}
			if shutdownAt.Load() != 0 {
				fmt.Fprintf(os.Stderr, "berth: second signal (%v): exiting now, without cleaning up\n", sig)
				code := 128 + 15
				if s, ok := sig.(syscall.Signal); ok {
					code = 128 + int(s)
				}
				os.Exit(code)
			}
			shutdownAt.Store(time.Now().UnixNano())
			slog.Debug("shutting down", "signal", sig)
			cancel()
		}
	}()
}

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	handleSignals(cancel)
	err := newRoot().ExecuteContext(ctx)
	var ee exitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		os.Exit(ee.code)
	default:
		fmt.Fprintln(os.Stderr, "berth:", err)
		os.Exit(errorStatus)
	}
}
