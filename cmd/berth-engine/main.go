// Command berth-engine is berth's full command line: it runs an AI agent's
// shell commands in a configured environment — this machine, a hardened
// Docker container, a remote host over SSH, an Apptainer instance, a Modal
// or Daytona sandbox — through one persistent shell per environment, and
// holds every backend, the MCP server and the daemon. Users call it as
// berth: the light berth front binary answers a warm `berth exec` itself
// and runs this one, in its place, for everything else.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/hostproc"
	"github.com/a55dbaac/berth/cmd/internal/cli"
	"github.com/a55dbaac/berth/cmd/internal/cli/flagset"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/daemon/wire"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/terminal"

	_ "github.com/a55dbaac/berth/backend/all"
)

// exitError carries a process exit status up to main without printing.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// errorStatus is berth's own failure status (bad flags, unreachable
// backend), and blockedStatus that of a command its approval check
// refused to run.
const (
	errorStatus   = terminal.StatusError
	blockedStatus = terminal.StatusBlocked
)

// common holds the flags shared by commands that run things.
type common struct {
	cli.Flags
}

func (c *common) addConfigFlag(cmd *cobra.Command) { flagset.AddConfig(cmd.Flags(), &c.Flags) }

func (c *common) addRunFlags(cmd *cobra.Command) {
	flagset.AddRun(cmd.Flags(), &c.Flags, manager.DefaultKey, backend.Choices())
}

// load reads the configuration with the command-line overrides applied.
func (c *common) load() (*config.Config, error) {
	flags := map[string]string{}
	if c.Backend != "" {
		flags["backend"] = c.Backend
	}
	if c.Timeout < 0 {
		return nil, fmt.Errorf("--timeout %d: must be a whole number of seconds >= 1", c.Timeout)
	}
	if c.Timeout > terminal.MaxTimeout {
		// Also the default timeout of berth mcp and serve, which no
		// request validates: refused here before it can overflow.
		return nil, fmt.Errorf("--timeout %d: at most %d seconds (one day); run longer work in the background", c.Timeout, terminal.MaxTimeout)
	}

	if c.Timeout > 0 {
		flags["timeout"] = fmt.Sprint(c.Timeout)
	}
	cfg, err := config.Load(config.LoadOptions{ConfigPath: c.ConfigPath, Flags: flags})
	if err != nil {
		return nil, err
	}
	if err := checkConfigFiles(cfg, c.ConfigPath); err != nil {
		return nil, err
	}
	for _, w := range cfg.Warnings {
		slog.Warn(w)
	}
	return cfg, nil
}

// checkConfigFiles refuses a configuration file or .env (the files
// config.Load read for --config configPath) that another user may write
// (wire.CheckFile), as the daemon does, and adds a warning for one its
// group may write.
func checkConfigFiles(cfg *config.Config, configPath string) error {
	path, _, err := config.ResolvePath(configPath, os.Getenv)
	if err != nil {
		return err
	}
	for _, f := range []struct{ what, path string }{
		{"the configuration file", path},
		{"the .env file", filepath.Join(filepath.Dir(path), ".env")},
	} {
		warn, err := wire.CheckFile(f.what, f.path)
		if err != nil {
			return err
		}
		if warn != "" {
			cfg.Warnings = append(cfg.Warnings, warn)
		}
	}
	return nil
}

// withManager runs fn with a manager and tears every environment down
// afterwards. The teardown gets 15 s, but after a shutdown signal only what
// is left of daemon_term_grace_seconds + 2.5 s since the signal: berth then
// exits within the grace period plus 3 s, as supervisors expect.
func withManager(ctx context.Context, cfg *config.Config, fn func(ctx context.Context, m *manager.Manager) error) error {
	m := manager.New(cfg, slog.Default())
	m.SetProgress(terminalProgress(os.Stderr))
	defer func() {
		budget := 15 * time.Second
		if at := cli.ShutdownAt.Load(); at != 0 {
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

// checkFront refuses to run in place of a berth front of another build
// (wire.FrontBuildEnv): it would talk to a daemon its front does not
// know. The variable is removed, so that nothing berth starts inherits it.
func checkFront() error {
	front, ok := os.LookupEnv(wire.FrontBuildEnv)
	if !ok {
		return nil
	}
	os.Unsetenv(wire.FrontBuildEnv)
	if front == wire.Build() {
		return nil
	}
	self, _ := os.Executable()
	return fmt.Errorf("this berth-engine (%s, build %s) is not of the build of the berth that ran it (build %s): install both from one build, with `go install github.com/a55dbaac/berth/cmd/...@latest` or `go build -o DIR ./cmd/...`, and keep them side by side", self, wire.Build(), front)
}

func main() {
	// Before anything else: the environment holds the caller's secrets,
	// and a daemon started from here holds its callers'.
	if err := hostproc.Harden(); err != nil {
		fmt.Fprintln(os.Stderr, "berth:", err)
		os.Exit(errorStatus)
	}
	if err := checkFront(); err != nil {
		fmt.Fprintln(os.Stderr, "berth:", err)
		os.Exit(errorStatus)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cli.HandleSignals(cancel)
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
