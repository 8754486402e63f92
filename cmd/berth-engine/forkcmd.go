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
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/cmd/internal/cli/flagset"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/daemon/wire"
	"github.com/a55dbaac/berth/manager"
)

// berth env fork, checkpoint, restore and checkpoints (docs/fork.md). The
// environments are the warm daemon's (where `berth exec --task KEY` left
// them), so the first three go through it; with the daemon off they work
// on the environments the backend keeps (a persistent container, a local
// fork's workspace), opened in this process. Listing reads berth's
// records; removal is berth env rm KEY --checkpoint NAME.

// addForkCmds adds the fork commands to berth env.
func addForkCmds(root *cobra.Command, c *common) {
	var asJSON bool
	jsonFlag := func(cmd *cobra.Command) {
		cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	}
	runFlags := func(cmd *cobra.Command) {
		jsonFlag(cmd)
		cmd.Flags().StringVar(&c.Backend, "backend", "", "backend: "+backend.Choices()+" (overrides TERMINAL_ENV and the file)")
		flagset.AddNoDaemon(cmd.Flags(), &c.Flags)
	}

	fork := &cobra.Command{
		Use:   "fork SRC DST",
		Short: "Make environment DST a copy of SRC: its files and its shell's state",
		Long: `Make a new environment DST from a copy of the live environment SRC: its files,
copied by the backend's own means (a committed container and copied volumes, a
workspace copied with reflinks, a provider's snapshot), and its shell's state:
the working directory, exported variables, functions, aliases, shell options
and umask. Background processes are not carried. SRC keeps running, untouched.
A command running in SRC is waited for (up to 30 s), never copied under.
Then run commands in it with berth exec --task DST.`,
		Example: "  berth exec --task main -- 'cd repo && make setup'\n  berth env fork main try-1\n  berth exec --task try-1 -- 'git apply fix.patch && make test'",
		Args:    exactArgs("SRC DST", 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.forkOp(cmd.Context(), wire.Request{Op: wire.OpFork, Key: args[0], Target: args[1]}, asJSON)
		},
	}
	runFlags(fork)
	checkpoint := &cobra.Command{
		Use:   "checkpoint KEY NAME",
		Short: "Keep a named checkpoint of an environment's files and shell state",
		Long: `Keep a copy of environment KEY's files and shell state as checkpoint NAME, in
berth's home, to restore later (berth env restore KEY NAME), also after
berth restarts. A checkpoint of an existing name replaces it. An environment
keeps at most checkpoints.max_per_environment checkpoints (10) of at most
checkpoints.max_total_mb (4096 MB) together; past either, the checkpoint
fails and those kept stay.`,
		Example: "  berth env checkpoint main before-refactor",
		Args:    exactArgs("KEY NAME", 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.forkOp(cmd.Context(), wire.Request{Op: wire.OpCheckpoint, Key: args[0], Name: args[1]}, asJSON)
		},
	}
	runFlags(checkpoint)
	restore := &cobra.Command{
		Use:   "restore KEY NAME",
		Short: "Replace an environment with its checkpoint NAME",
		Long: `Replace environment KEY with a new one made from its checkpoint NAME: the
checkpoint's files and shell state. The environment KEY had is closed and
REMOVED, a persistent one too, with its background processes. The checkpoint
stays, and can be restored again.`,
		Example: "  berth env restore main before-refactor",
		Args:    exactArgs("KEY NAME", 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.forkOp(cmd.Context(), wire.Request{Op: wire.OpRestore, Key: args[0], Name: args[1]}, asJSON)
		},
	}
	runFlags(restore)
	var listBackend string
	list := &cobra.Command{
		Use:   "checkpoints [KEY]",
		Short: "List the checkpoints berth keeps (of KEY, or of every environment)",
		Long: `List the named checkpoints kept in berth's home: of environment KEY, or of
every environment; of every backend, or of --backend. Remove one with
berth env rm KEY --checkpoint NAME.`,
		Example: "  berth env checkpoints\n  berth env checkpoints main --json",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.load()
			if err != nil {
				return err
			}
			key := ""
			if len(args) == 1 {
				key = args[0]
			}
			if listBackend != "" {
				if _, ok := backend.Lookup(listBackend); !ok {
					return fmt.Errorf("--backend %q: not a backend of this build (%s)", listBackend, backend.Choices())
				}
			}
			cps, lerr := manager.ListCheckpoints(cfg.Home, listBackend, key)
			if lerr != nil {
				slog.Warn("some checkpoint records could not be read", "err", lerr)
			}
			if asJSON {
				if cps == nil {
					cps = []manager.CheckpointInfo{}
				}
				return printJSON(os.Stdout, cps)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "BACKEND\tKEY\tNAME\tAGE\tSIZE\tCWD")
			for _, cp := range cps {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", cp.Backend, cp.Key, cp.Name, time.Since(cp.Created).Round(time.Second), size(cp.Size), cp.Cwd)
			}
			return w.Flush()
		},
	}
	jsonFlag(list)
	list.Flags().StringVar(&listBackend, "backend", "", "only the checkpoints of this backend")
	root.AddCommand(fork, checkpoint, restore, list)
}

// exactArgs wants n arguments, named in the error.
func exactArgs(names string, n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return fmt.Errorf("%s takes %s (%d arguments), got %d: see berth env %s --help", cmd.Name(), names, n, len(args), cmd.Name())
		}
		return nil
	}
}

// size shows a checkpoint's size.
func size(n int64) string {
	if n <= 0 {
		return "-"
	}
	return amount(n, "bytes")
}

// printJSON prints v as berth prints results.
func printJSON(w io.Writer, v any) error {
	b, err := wire.MarshalJSON(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// forkOp runs a fork, checkpoint or restore: through the daemon, which
// holds the environments, unless it is off; then in this process, on the
// environments the backend keeps.
func (c *common) forkOp(ctx context.Context, req wire.Request, asJSON bool) error {
	cfg, err := c.load()
	if err != nil {
		return err
	}
	for _, k := range []string{req.Key, req.Target} {
		if strings.TrimSpace(k) != k || strings.ContainsAny(k, "\x00\n") {
			return fmt.Errorf("environment key %q: no surrounding spaces, newlines or NUL bytes", k)
		}
	}
	if req.Name != "" {
		if err := manager.CheckName(req.Name); err != nil {
			return err
		}
	}
	var res json.RawMessage
	if useDaemon(cfg, c.NoDaemon) {
		res, err = c.forkThroughDaemon(ctx, cfg, req)
		if errors.Is(err, errNoDaemon) {
			res, err = forkInProcess(ctx, cfg, req)
		}
	} else {
		res, err = forkInProcess(ctx, cfg, req)
	}
	if err != nil {
		return err
	}
	if asJSON {
		_, err := fmt.Fprintf(os.Stdout, "%s\n", res)
		return err
	}
	return printForkResult(os.Stdout, req, res)
}

// errNoDaemon says the daemon cannot serve this caller (a sandboxed one,
// a home path too long for a socket): the call runs in this process.
var errNoDaemon = errors.New("no daemon for this caller")

// forkThroughDaemon sends req to the daemon, drawing its progress on a
// terminal.
func (c *common) forkThroughDaemon(ctx context.Context, cfg *config.Config, req wire.Request) (json.RawMessage, error) {
	in, err := c.Inputs()
	if err != nil {
		return nil, err
	}
	req.Inputs = in
	cl, err := wire.Dial(ctx, wire.DialOptions{Home: cfg.Home, Args: []string{"daemon", "serve"}})
	if err == nil {
		if _, err = cl.Hello(); err != nil {
			cl.Close()
		}
	}
	switch {
	case errors.Is(err, wire.ErrPathTooLong), wire.IsCode(err, wire.CodeSandboxed):
		slog.Info("running without the daemon", "err", err)
		return nil, errNoDaemon
	case err != nil:
		return nil, fmt.Errorf("%w (or run with --no-daemon)", err)
	}
	defer cl.Close()
	var draw func(backend.Event)
	if fn := terminalProgress(os.Stderr); fn != nil {
		draw = fn
	}
	rep, err := cl.Run(ctx, req, wire.RunOptions{Progress: func(p wire.Progress) {
		if draw == nil {
			return
		}
		ev := backend.Event{Step: p.Step, Done: p.Done, Total: p.Total, Unit: p.Unit, End: p.End, Elapsed: p.Elapsed}
		if p.Err != "" {
			ev.Err = errors.New(p.Err)
		}
		draw(ev)
	}})
	if err != nil {
		var re *wire.ReplyError
		if errors.As(err, &re) {
			return nil, errors.New(re.Msg)
		}
		return nil, err
	}
	for _, n := range rep.Notes {
		fmt.Fprintln(os.Stderr, "berth:", n)
	}
	return rep.Result, nil
}

// forkInProcess runs req in this process: the source of a fork or a
// checkpoint must be an environment the backend keeps (berth env ls),
// whose shell starts fresh here; a restore makes the environment, which
// the backend keeps if it keeps any.
func forkInProcess(ctx context.Context, cfg *config.Config, req wire.Request) (json.RawMessage, error) {
	var out any
	err := withManager(ctx, cfg, func(ctx context.Context, m *manager.Manager) error {
		if req.Op != wire.OpRestore {
			if !manager.Kept(ctx, cfg, req.Key) {
				return fmt.Errorf("no environment %q to copy: without the daemon (terminal.daemon false, --no-daemon) berth copies only environments the backend keeps (berth env ls lists them), and %s keeps none of that key", req.Key, cfg.Terminal.Backend)
			}
			if _, err := m.Env(ctx, req.Key); err != nil {
				return err
			}
		}
		var err error
		switch req.Op {
		case wire.OpFork:
			out, err = m.Fork(ctx, req.Key, req.Target)
		case wire.OpCheckpoint:
			out, err = m.Checkpoint(ctx, req.Key, req.Name)
		case wire.OpRestore:
			out, err = m.Restore(ctx, req.Key, req.Name)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return wire.MarshalJSON(out)
}

// printForkResult prints what a fork, checkpoint or restore did.
func printForkResult(w io.Writer, req wire.Request, raw json.RawMessage) error {
	var c manager.Carried
	switch req.Op {
	case wire.OpFork:
		var r manager.ForkResult
		if err := json.Unmarshal(raw, &r); err != nil {
			return err
		}
		fmt.Fprintf(w, "forked %s into %s (%s)\n", r.From, r.To, r.Backend)
		c = r.Carried
	case wire.OpCheckpoint:
		var r manager.CheckpointInfo
		if err := json.Unmarshal(raw, &r); err != nil {
			return err
		}
		verb := "kept"
		if r.Replaced {
			verb = "replaced"
		}
		fmt.Fprintf(w, "checkpoint %s of %s %s (%s, %s)\n", r.Name, r.Key, verb, r.Backend, size(r.Size))
		c = r.Carried
	case wire.OpRestore:
		var r manager.RestoreResult
		if err := json.Unmarshal(raw, &r); err != nil {
			return err
		}
		fmt.Fprintf(w, "restored %s from checkpoint %s (%s)\n", r.Key, r.Name, r.Backend)
		if r.Replaced {
			fmt.Fprintf(w, "  the environment %s had was removed\n", r.Key)
		}
		c = r.Carried
	}
	fmt.Fprintf(w, "  files: %s\n", c.Files)
	if c.Cwd != "" {
		fmt.Fprintf(w, "  cwd: %s\n", c.Cwd)
	}
	var state []string
	if n := len(c.Variables); n > 0 {
		state = append(state, fmt.Sprintf("%d exported variables (%s)", n, strings.Join(c.Variables, ", ")))
	}
	if len(c.Functions) > 0 {
		state = append(state, "functions "+strings.Join(c.Functions, ", "))
	}
	if len(c.Aliases) > 0 {
		state = append(state, "aliases "+strings.Join(c.Aliases, ", "))
	}
	if c.ShellOptions {
		state = append(state, "shell options")
	}
	if c.Umask != "" {
		state = append(state, "umask "+c.Umask)
	}
	if len(state) > 0 {
		fmt.Fprintf(w, "  shell (%s): %s\n", c.Shell, strings.Join(state, "; "))
	}
	fmt.Fprintf(w, "  not carried: %s\n", strings.Join(c.NotCarried, "; "))
	return nil
}

// removeCheckpoint removes KEY's checkpoint name (berth env rm KEY
// --checkpoint NAME): of backendName, else of the one backend that has a
// checkpoint of that key and name.
func removeCheckpoint(ctx context.Context, cfg *config.Config, backendName string, keys []string, name string) error {
	if len(keys) != 1 {
		return fmt.Errorf("--checkpoint removes one environment's checkpoint: give one KEY, got %d (%s)", len(keys), strings.Join(keys, " "))
	}
	key := keys[0]
	if err := manager.CheckName(name); err != nil {
		return err
	}
	if backendName == "" {
		all, _ := manager.ListCheckpoints(cfg.Home, "", key)
		var where []string
		for _, cp := range all {
			if cp.Name == name {
				where = append(where, cp.Backend)
			}
		}
		switch len(where) {
		case 0:
			backendName = cfg.Terminal.Backend // its error lists what the key has
		case 1:
			backendName = where[0]
		default:
			return fmt.Errorf("environment %q has a checkpoint %q on %s: say which to remove with --backend (e.g. berth env rm %s --checkpoint %s --backend %s)",
				key, name, strings.Join(where, " and "), key, name, where[0])
		}
	}
	if err := manager.RemoveCheckpoint(ctx, cfg, backendName, key, name); err != nil {
		return err
	}
	fmt.Printf("removed %s checkpoint %s of %q\n", backendName, name, key)
	return nil
}
