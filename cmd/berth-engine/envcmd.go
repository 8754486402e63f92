package main

import (
	"fmt"
	"os"
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
		Short: "List and remove the environments berth keeps (containers and their volumes)",
		Long: `Environments that outlive a berth process — persistent containers with their
/root and /workspace volumes — are listed and removed here. The local and ssh
backends keep none.`,
		Example: `  berth env ls
  berth env rm build
  berth env prune --older-than 24h`,
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
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "BACKEND\tKEY\tSTATE\tAGE\tID\tIMAGE")
			var errs []error
			for _, r := range admins(cfg) {
				envs, err := r.Envs.List(cmd.Context(), opts(cfg))
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", r.Name, err))
					continue
				}
				for _, e := range envs {
					id := e.ID
					if len(id) > 12 {
						id = id[:12]
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Backend, e.Key, e.State, time.Since(e.Created).Round(time.Second), id, e.Image)
				}
			}
			w.Flush()
			for _, err := range errs {
				fmt.Fprintln(os.Stderr, "berth:", err)
			}
			if len(errs) > 0 {
				return exitError{1}
			}
			return nil
		},
	})
	var backendName string
	rm := &cobra.Command{
		Use:     "rm KEY...",
		Short:   "Remove environments (container and volumes) by key",
		Example: "  berth env rm default build",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.load()
			if err != nil {
				return err
			}
			name := backendName
			if name == "" {
				name = cfg.Terminal.Backend
			}
			r, ok := backend.Lookup(name)
			if !ok || r.Envs == nil {
				return fmt.Errorf("backend %q keeps no environments to remove (use --backend docker)", name)
			}
			for _, key := range args {
				if err := r.Envs.Remove(cmd.Context(), opts(cfg), key); err != nil {
					return fmt.Errorf("remove %s environment %q: %w", name, key, err)
				}
				fmt.Printf("removed %s environment %q\n", name, key)
			}
			return nil
		},
	}
	rm.Flags().StringVar(&backendName, "backend", "", "backend holding the environments (default: configured backend)")
	root.AddCommand(rm)

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
