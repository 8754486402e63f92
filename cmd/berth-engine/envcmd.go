package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/cmd/internal/cli/flagset"
	"github.com/a55dbaac/berth/config"
)

func newEnvCmd() *cobra.Command {
	var c common
	root := &cobra.Command{
		Use:   "env",
		Short: "List, remove, fork, checkpoint and restore berth's environments",
		Long: `Environments that outlive a berth process — persistent containers with their
/root and /workspace volumes, local forks' workspaces — are listed and removed
here. The environments the daemon holds are forked, checkpointed and restored
here too (docs/fork.md).`,
		Example: `  berth env ls
  berth env rm build
  berth env prune --older-than 24h
  berth env fork main try-1
  berth env checkpoint main before-refactor
  berth env restore main before-refactor
  berth env rm main --checkpoint before-refactor`,
	}
	flagset.AddConfig(root.PersistentFlags(), &c.Flags)

	admins := func(cfg *config.Config) []backend.Registration {
		var regs []backend.Registration
		for _, name := range backend.Names() {
			if r, ok := backend.Lookup(name); ok && r.Envs != nil {
				regs = append(regs, r)
			}
		}
		return regs
	}
	opts := func(cfg *config.Config) backend.Options {
		return backend.Options{Config: cfg.Terminal, Home: cfg.Home, Getenv: cfg.Getenv}
	}

	root.AddCommand(&cobra.Command{
		Use:     "ls",
		Short:   "List berth's environments on every backend that keeps them",
		Example: "  berth env ls",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.load()
			if err != nil {
				return err
			}
			found, notAsked := listAll(cmd.Context(), admins(cfg), opts(cfg))
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "BACKEND\tKEY\tSTATE\tAGE\tID\tIMAGE")
			ids := shortIDs(found)
			for i, e := range found {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Backend, e.Key, e.State, time.Since(e.Created).Round(time.Second), ids[i], e.Image)
			}
			w.Flush()
			return reportNotAsked(notAsked, cfg.Terminal.Backend)
		},
	})
	var backendName, checkpointName string
	rm := &cobra.Command{
		Use:   "rm KEY...",
		Short: "Remove environments (container or sandbox, and volumes) by key, or a checkpoint",
		Long: `Remove the environments of the given keys, with their volumes. Each key is
removed where berth env ls finds it; --backend is needed only for a key that
exists on more than one backend.

With --checkpoint NAME, remove KEY's checkpoint NAME instead (what its backend
keeps, and berth's record of it); the environment stays.`,
		Example: "  berth env rm default build\n  berth env rm --backend docker build\n  berth env rm main --checkpoint before-refactor",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.load()
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("checkpoint") {
				return removeCheckpoint(cmd.Context(), cfg, backendName, args, checkpointName)
			}
			if backendName != "" {
				r, ok := backend.Lookup(backendName)
				if !ok || r.Envs == nil {
					return fmt.Errorf("--backend %q: that backend keeps no environments (backends that do: %s)", backendName, strings.Join(regNames(admins(cfg)), ", "))
				}
				for _, key := range args {
					if err := r.Envs.Remove(cmd.Context(), opts(cfg), key); err != nil {
						return fmt.Errorf("remove %s environment %q: %w", r.Name, key, err)
					}
					fmt.Printf("removed %s environment %q\n", r.Name, key)
				}
				return nil
			}
			found, notAsked := listAll(cmd.Context(), admins(cfg), opts(cfg))
			for _, key := range args {
				var where []string
				for _, e := range found {
					if e.Key == key && !slices.Contains(where, e.Backend) {
						where = append(where, e.Backend)
					}
				}
				if len(where) > 1 {
					return fmt.Errorf("environment %q exists on %s: say which to remove with --backend (e.g. berth env rm --backend %s %s)",
						key, strings.Join(where, " and "), where[0], key)
				}
				if len(where) == 0 {
					// A listing may lag a create (eventually consistent
					// APIs): the configured backend is asked by key too.
					r, ok := backend.Lookup(cfg.Terminal.Backend)
					if !ok || r.Envs == nil || !r.ListLags || notAsked[r.Name] != nil {
						_ = reportNotAsked(notAsked, "")
						return fmt.Errorf("no environment %q on any backend berth could ask (berth env ls lists them)", key)
					}
					where = []string{r.Name}
				}
				r, _ := backend.Lookup(where[0])
				if err := r.Envs.Remove(cmd.Context(), opts(cfg), key); err != nil {
					return fmt.Errorf("remove %s environment %q: %w", r.Name, key, err)
				}
				fmt.Printf("removed %s environment %q\n", r.Name, key)
			}
			return nil
		},
	}
	rm.Flags().StringVar(&backendName, "backend", "", "backend holding the environments (needed only when a key exists on several)")
	rm.Flags().StringVar(&checkpointName, "checkpoint", "", "remove KEY's checkpoint of this name, not the environment")
	root.AddCommand(rm)
	addForkCmds(root, &c)

	var olderThan time.Duration
	prune := &cobra.Command{
		Use:   "prune",
		Short: "Remove environments that have not been running for a while (persistent ones included)",
		Long: `Remove every berth environment that has not been running for longer than
--older-than, with its volumes. This includes stopped persistent environments:
their installed files and workspace are deleted.`,
		Example: "  berth env prune --older-than 72h",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.load()
			if err != nil {
				return err
			}
			if olderThan < 0 {
				return fmt.Errorf("--older-than %v: must not be negative", olderThan)
			}
			for _, r := range admins(cfg) {
				removed, err := r.Envs.Prune(cmd.Context(), opts(cfg), olderThan)
				for _, k := range removed {
					fmt.Printf("removed %s environment %q\n", r.Name, k)
				}
				if err != nil {
					return fmt.Errorf("prune %s: %w", r.Name, err)
				}
			}
			return nil
		},
	}
	prune.Flags().DurationVar(&olderThan, "older-than", 24*time.Hour, "only environments stopped for longer than this")
	root.AddCommand(prune)
	return root
}

// shortIDs are the IDs berth env ls shows, in the order of envs. An ID is
// shown whole (a pod's namespace/name, a sandbox's or an instance's id),
// unless it is a long hexadecimal digest (a container's id): that is cut
// to 12 digits, as docker ps shows it and docker takes it, and longer when
// another listed digest of its backend starts with the same digits, so a
// cut ID is never ambiguous among those listed.
func shortIDs(envs []backend.EnvInfo) []string {
	const short = 12
	ids := make([]string, len(envs))
	for i, e := range envs {
		ids[i] = e.ID
		if len(e.ID) <= short || !isHex(e.ID) {
			continue
		}
		n := short
		for j, o := range envs {
			if j == i || o.Backend != e.Backend || o.ID == e.ID {
				continue
			}
			for n < len(e.ID) && strings.HasPrefix(o.ID, e.ID[:n]) {
				n++
			}
		}
		ids[i] = e.ID[:n]
	}
	return ids
}

// isHex reports whether s is lower-case hexadecimal digits only.
func isHex(s string) bool {
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return s != ""
}

// listAll lists the environments of every backend in regs. A backend that
// could not be asked (not set up here, unreachable) is in notAsked with its
// error, once.
func listAll(ctx context.Context, regs []backend.Registration, opts backend.Options) ([]backend.EnvInfo, map[string]error) {
	var found []backend.EnvInfo
	notAsked := map[string]error{}
	for _, r := range regs {
		envs, err := r.Envs.List(ctx, opts)
		if err != nil {
			notAsked[r.Name] = err
			continue
		}
		found = append(found, envs...)
	}
	return found, notAsked
}

// reportNotAsked prints one line per backend that could not be asked, on
// stderr, and fails (exit 1) when the configured backend is among them: a
// backend the user has not set up is a note, not an error.
func reportNotAsked(notAsked map[string]error, configured string) error {
	for _, n := range slices.Sorted(maps.Keys(notAsked)) {
		fmt.Fprintf(os.Stderr, "berth: %s not asked: %s\n", n, withoutName(n, notAsked[n].Error()))
	}
	if notAsked[configured] != nil {
		return exitError{1}
	}
	return nil
}

// withoutName drops leading "NAME: " and "NAME backend: " from a backend's
// message, which is shown after the name already.
func withoutName(name, msg string) string {
	for {
		trimmed := msg
		for _, p := range []string{name + ": ", name + " backend: "} {
			if len(trimmed) >= len(p) && strings.EqualFold(trimmed[:len(p)], p) {
				trimmed = trimmed[len(p):]
			}
		}
		if trimmed == msg {
			return msg
		}
		msg = trimmed
	}
}

func regNames(regs []backend.Registration) []string {
	names := make([]string, len(regs))
	for i, r := range regs {
		names[i] = r.Name
	}
	return names
}
