package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/a55dbaac/berth/approval"
	"github.com/a55dbaac/berth/cmd/internal/cli"
	"github.com/a55dbaac/berth/cmd/internal/cli/flagset"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/daemon"
	"github.com/a55dbaac/berth/daemon/wire"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/process"
	"github.com/a55dbaac/berth/terminal"
)

func newDaemonCmd() *cobra.Command {
	var c common
	root := &cobra.Command{
		Use:   "daemon",
		Short: "Show or stop the background berth that keeps environments warm",
		Long: `berth exec and berth shell run through a background berth (one per berth home)
that holds their environments, so a later call finds the shell, its cwd and
exported variables, and the container or ssh connection of the earlier one
(like OpenSSH's ControlPersist). The first call starts it; it listens on
$BERTH_HOME/daemon/berth-<build>.sock (directory 0700, socket 0600) and logs
to $BERTH_HOME/daemon/berth.log. It serves only its own user, in its own
namespaces: a caller in a sandbox (another mount, PID, network or user
namespace, or seccomp filter) is refused and runs in one process, inside
its sandbox. It exits after terminal.lifetime_seconds with no environment
left and no connection open (an environment is kept while a command or a
background process runs in it), closing everything as a one-process berth
does at exit.

Each build of berth has a daemon of its own: after an upgrade the next call
starts a new one, and the old one exits once idle. status and stop show and
stop the daemons of every build in the home.

--no-daemon, terminal.daemon: false or BERTH_NO_DAEMON=1 run each call in
one process instead.`,
		Example: `  berth daemon status
  berth daemon status --json
  berth daemon stop`,
	}
	flagset.AddConfig(root.PersistentFlags(), &c.Flags)

	var asJSON bool
	status := &cobra.Command{
		Use:   "status",
		Short: "Show the daemons of this home: pid, socket, uptime and the environments they hold",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			home, err := config.HomeDir(nil)
			if err != nil {
				return err
			}
			all, err := daemonStatuses(home)
			if err != nil {
				return err
			}
			var self *wire.Status
			var others []*wire.Status
			for _, st := range all {
				if st.Identity == wire.SelfIdentity() && self == nil {
					self = st
				} else {
					others = append(others, st)
				}
			}
			if asJSON {
				out := struct {
					Running bool `json:"running"`
					*wire.Status
					OtherBuilds []*wire.Status `json:"other_builds,omitempty"`
				}{self != nil, self, others}
				b, err := wire.MarshalJSON(out)
				if err != nil {
					return err
				}
				fmt.Printf("%s\n", b)
			} else {
				if self == nil {
					fmt.Printf("no berth daemon of this build running for %s\n", home)
				}
				for _, st := range all {
					printStatus(st, st == self)
				}
			}
			if len(all) == 0 {
				return exitError{3}
			}
			return nil
		},
	}
	status.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON: this build's daemon, and other_builds")
	root.AddCommand(status)

	root.AddCommand(&cobra.Command{
		Use:   "stop",
		Short: "Stop the daemons of this home, of every build, closing their environments (running commands are interrupted)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			home, err := config.HomeDir(nil)
			if err != nil {
				return err
			}
			paths, err := wire.Daemons(home)
			if err != nil {
				return err
			}
			var errs []error
			for _, p := range paths {
				if err := stopDaemon(home, p); err != nil {
					errs = append(errs, err)
				}
			}
			return errors.Join(errs...)
		},
	})

	root.AddCommand(&cobra.Command{
		Use:    "serve",
		Short:  "Run the daemon in the foreground (berth exec starts it by itself)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// main made this process non-dumpable already; Serve does too,
			// so a daemon serving only remote backends is never dumpable.
			cfg, err := config.Load(config.LoadOptions{ConfigPath: c.ConfigPath})
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
			slog.SetDefault(log)
			err = daemon.Serve(cmd.Context(), daemon.ServeOptions{
				Home:     cfg.Home,
				Lifetime: time.Duration(cfg.Terminal.LifetimeSeconds) * time.Second,
				Logger:   log,
			})
			if errors.Is(err, daemon.ErrRunning) {
				log.Info("daemon: another one serves this home; leaving")
				return nil
			}
			return err
		},
	})
	return root
}

// daemonStatuses asks every daemon in the home for its status, this
// build's first; a socket nobody answers is skipped.
func daemonStatuses(home string) ([]*wire.Status, error) {
	paths, err := wire.Daemons(home)
	if err != nil {
		return nil, err
	}
	var out []*wire.Status
	for _, p := range paths {
		cl, err := wire.Connect(home, p)
		if errors.Is(err, wire.ErrNotRunning) {
			continue
		}
		if err != nil {
			return nil, err
		}
		r, err := cl.Do(wire.Request{Op: wire.OpStatus})
		cl.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Socket, err)
		}
		if r.Status.Identity == "" {
			r.Status.Identity = p.Identity
		}
		out = append(out, r.Status)
	}
	return out, nil
}

// printStatus prints one daemon's status for people.
func printStatus(st *wire.Status, self bool) {
	build := "this build"
	if !self {
		build = "another build (" + st.Identity + "); it exits once idle, or stop it with berth daemon stop"
	}
	fmt.Printf("berth daemon pid %d, %s, up %s, socket %s\n", st.PID, build, st.Uptime.Round(time.Second), st.Socket)
	fmt.Printf("exits after %s with no environment and no connection\n", st.Lifetime)
	if len(st.Environments) == 0 {
		fmt.Println("no environments")
	} else {
		fmt.Printf("%-20s %-12s %-6s %5s %10s  %s\n", "TASK", "BACKEND", "BUSY", "BG", "IDLE", "CWD")
		for _, e := range st.Environments {
			fmt.Printf("%-20s %-12s %-6v %5d %10s  %s\n", e.Key, e.Backend, e.Busy, e.Processes, time.Since(e.LastUsed).Round(time.Second), e.Cwd)
		}
	}
	for _, p := range st.Pools {
		shape := p.Shape
		if len(shape) > 12 {
			shape = shape[:12]
		}
		fmt.Printf("warm pool %s on %s: %d of %d ready, %d being made, %d claimed", shape, p.Backend, p.Ready, p.Size, p.Making, p.Claimed)
		if p.Failed > 0 {
			fmt.Printf(", %d failed (last: %s)", p.Failed, p.LastError)
		}
		fmt.Println()
	}
}

// stopDaemon stops the daemon of p and waits until its process is gone.
func stopDaemon(home string, p wire.Paths) error {
	cl, err := wire.Connect(home, p)
	if errors.Is(err, wire.ErrNotRunning) {
		return nil
	}
	if err != nil {
		return err
	}
	defer cl.Close()
	st, err := cl.Do(wire.Request{Op: wire.OpStatus})
	if err != nil {
		return err
	}
	if _, err := cl.Do(wire.Request{Op: wire.OpStop}); err != nil {
		return err
	}
	// The reply comes once every environment is closed; the process is
	// gone a moment later.
	deadline := time.Now().Add(10 * time.Second)
	for processAlive(st.Status.PID) {
		if time.Now().After(deadline) {
			return fmt.Errorf("berth daemon %d closed its environments but has not exited", st.Status.PID)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// processAlive reports whether pid runs. A zombie does not, once it is
// only a zombie: while its other threads still exit it holds its files,
// the daemon's listening socket among them, which would still queue a
// next call's connection.
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	if !strings.HasPrefix(rest, "Z") {
		return true
	}
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	return len(tasks) > 1
}

// useDaemon reports whether exec and shell go through the daemon.
func useDaemon(cfg *config.Config, noDaemon bool) bool {
	return !noDaemon && cfg.Terminal.Daemon && !cli.DaemonOffInEnv()
}

// runner runs the commands of berth exec and berth shell, in this process
// or through the daemon.
type runner interface {
	// run runs line. With out set, the output is printed there as berth
	// exec prints it (streamed as it comes through the daemon).
	run(ctx context.Context, line string, out io.Writer) (terminal.Result, error)
	// meta answers a ":verb ..." line; false for an ordinary command.
	meta(ctx context.Context, line string) (json.RawMessage, bool, error)
	// where returns the backend and the shell's cwd.
	where(ctx context.Context) (backend, cwd string, err error)
	// setAsker sets who answers approval questions (nil: nobody).
	setAsker(a approval.Asker)
}

// withRunner runs fn with a runner: through the daemon unless the caller
// or the configuration says otherwise, the socket path cannot work, or the
// daemon refuses this caller as one in another sandbox (it then runs in
// this process, inside the caller's sandbox).
func withRunner(ctx context.Context, cfg *config.Config, c *common, fn func(ctx context.Context, r runner) error) error {
	if useDaemon(cfg, c.NoDaemon) {
		in, err := c.Inputs()
		if err != nil {
			return err
		}
		cl, err := wire.Dial(ctx, wire.DialOptions{Home: cfg.Home, Args: []string{"daemon", "serve"}})
		if err == nil {
			if _, err = cl.Hello(); err != nil {
				cl.Close()
			}
		}
		switch {
		case errors.Is(err, wire.ErrPathTooLong):
			slog.Warn("running without the daemon", "err", err)
		case wire.IsCode(err, wire.CodeSandboxed):
			slog.Info("running without the daemon", "err", err)
		case err != nil:
			return fmt.Errorf("%w (or run with --no-daemon)", err)
		default:
			defer cl.Close()
			return fn(ctx, &daemonRunner{cl: cl, c: c, in: in, onTimeout: cfg.Terminal.OnTimeout})
		}
	}
	return withManager(ctx, cfg, func(ctx context.Context, m *manager.Manager) error {
		return fn(ctx, &localRunner{m: m, c: c})
	})
}

// localRunner runs in this process.
type localRunner struct {
	m     *manager.Manager
	c     *common
	asker approval.Asker
	// oneShot is set for berth exec: the process ends with the call, so a
	// command cannot be moved to the background at its timeout (it would
	// be killed at exit anyway); it is stopped as on_timeout kill does.
	oneShot bool
}

func (r *localRunner) setAsker(a approval.Asker) { r.asker = a }

// callOptions are the manager's call options: the asker, when one is set.
func (r *localRunner) callOptions() []manager.CallOption {
	if r.asker == nil {
		return nil
	}
	return []manager.CallOption{manager.WithAsker(r.asker)}
}

func (r *localRunner) run(ctx context.Context, line string, out io.Writer) (terminal.Result, error) {
	req := terminal.Request{Command: line, Timeout: r.c.Timeout, Workdir: r.c.Workdir}
	if r.oneShot {
		req.OnTimeout = terminal.OnTimeoutKill
	}
	res := r.m.Run(ctx, r.c.Task, req, r.callOptions()...)
	if out != nil && res.Output != "" {
		fmt.Fprintln(out, res.Output)
	}
	return res, nil
}

func (r *localRunner) meta(ctx context.Context, line string) (json.RawMessage, bool, error) {
	l, ok := process.ParseLine(line)
	if !ok {
		return nil, false, nil
	}
	b, err := wire.MarshalJSON(l.Do(ctx, r.m.Doer(r.callOptions()...), r.c.Task, r.c.Workdir))
	return b, true, err
}

func (r *localRunner) where(ctx context.Context) (string, string, error) {
	env, err := r.m.Env(ctx, r.c.Task)
	if err != nil {
		return "", "", err
	}
	return r.m.Config().Terminal.Backend, env.Session().Cwd(), nil
}

// daemonRunner runs through the daemon.
type daemonRunner struct {
	cl    *wire.Client
	c     *common
	in    wire.Inputs
	asker approval.Asker

	onTimeout    string // the caller's terminal.on_timeout
	backend, cwd string
}

func (r *daemonRunner) setAsker(a approval.Asker) { r.asker = a }

func (r *daemonRunner) request(op string) wire.Request {
	return r.c.Request(op, r.in, r.onTimeout, r.asker != nil)
}

// notes prints the daemon's notes and remembers where the shell is.
func (r *daemonRunner) notes(rep *wire.Reply) {
	cli.PrintNotes(os.Stderr, rep)
	r.remember(rep)
}

// remember remembers where the shell is after rep.
func (r *daemonRunner) remember(rep *wire.Reply) {
	if rep.Backend != "" {
		r.backend = rep.Backend
	}
	if rep.Cwd != "" {
		r.cwd = rep.Cwd
	}
}

func (r *daemonRunner) run(ctx context.Context, line string, out io.Writer) (terminal.Result, error) {
	req := r.request(wire.OpRun)
	req.Command = line
	rep, err := cli.RunStreamed(ctx, r.cl, req, out, daemon.AskWith(r.asker), os.Stderr)
	if err != nil {
		return terminal.Result{}, err
	}
	r.remember(rep)
	var res terminal.Result
	if err := json.Unmarshal(rep.Result, &res); err != nil {
		return terminal.Result{}, fmt.Errorf("daemon: decode result: %w", err)
	}
	return res, nil
}

// exec runs berth exec's command and returns berth's exit status.
func (r *daemonRunner) exec(ctx context.Context, line string, asJSON bool) (int, error) {
	req := r.request(wire.OpRun)
	req.Command = line
	return cli.Exec(ctx, r.cl, req, asJSON, daemon.AskWith(r.asker), os.Stdout, os.Stderr)
}

func (r *daemonRunner) meta(ctx context.Context, line string) (json.RawMessage, bool, error) {
	if !strings.HasPrefix(line, ":") {
		return nil, false, nil
	}
	req := r.request(wire.OpMeta)
	req.Line = line
	rep, err := r.cl.Run(ctx, req, wire.RunOptions{Ask: daemon.AskWith(r.asker)})
	if wire.IsCode(err, wire.CodeNotMeta) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, err
	}
	r.notes(rep)
	return rep.Result, true, nil
}

func (r *daemonRunner) where(ctx context.Context) (string, string, error) {
	rep, err := r.cl.Run(ctx, r.request(wire.OpEnv), wire.RunOptions{})
	if err != nil {
		return "", "", err
	}
	r.notes(rep)
	return r.backend, r.cwd, nil
}
