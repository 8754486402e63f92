package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
)

func newDoctorCmd() *cobra.Command {
	var c common
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check which backends are usable here and what to do about the others",
		Long: `For every backend, check whether it can work on this machine with the current
configuration (daemon reachable, host reachable and authenticating, ...) and
say what to do when it cannot. Exits 1 when the configured backend is not
usable.`,
		Example: `  berth doctor
  berth doctor --config ~/.hermes/config.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.load()
			if err != nil {
				return err
			}
			path := cfg.Path
			if path == "" {
				path = "(none; defaults)"
			}
			fmt.Printf("config:  %s\nhome:    %s\nbackend: %s (from %s)\n\n", path, cfg.Home, cfg.Terminal.Backend, source(cfg, "terminal.backend"))
			configuredOK := false
			for _, name := range config.Backends {
				reg, ok := backend.Lookup(name)
				mark, line, fix := "✗", "", ""
				var details []string
				switch {
				case !ok:
					line = "not built into this berth"
				case reg.Doctor == nil:
					mark, line = "?", "no checks available"
				default:
					ctx, cancel := context.WithTimeout(cmd.Context(), 20*time.Second)
					fp := reg.Doctor(ctx, backend.Options{Key: "doctor", Config: cfg.Terminal, Home: cfg.Home, Getenv: cfg.Getenv})
					cancel()
					line, fix, details = fp.Summary, fp.Fix, fp.Details
					if fp.Usable {
						mark = "✓"
						if name == cfg.Terminal.Backend {
							configuredOK = true
						}
					}
				}
				sel := " "
				if name == cfg.Terminal.Backend {
					sel = "*"
				}
				fmt.Printf("%s %s %-12s %s\n", sel, mark, name, line)
				for _, d := range details {
					fmt.Printf("                 %s\n", d)
				}
				if fix != "" {
					fmt.Printf("                 fix: %s\n", fix)
				}
			}
			if !slices.Contains(config.Backends, cfg.Terminal.Backend) || !configuredOK {
				return exitError{1}
			}
			return nil
		},
	}
	c.addConfigFlag(cmd)
	cmd.Flags().StringVar(&c.backend, "backend", "", "check as if this backend were configured")
	return cmd
}

func source(cfg *config.Config, key string) string {
	s, err := cfg.Source(key)
	if err != nil {
		return "?"
	}
	return s
}
