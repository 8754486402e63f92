package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
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
say what to do when it cannot; list the settings of the configured backend.
Exits 1 when the configured backend is not usable.`,
		Example: `  berth doctor
  berth doctor --config ~/.hermes/config.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.load()
			if err != nil {
				return err
			}
			if !doctor(cmd.Context(), os.Stdout, cfg) {
				return exitError{1}
			}
			return nil
		},
	}
	c.addConfigFlag(cmd)
	cmd.Flags().StringVar(&c.Backend, "backend", "", "check as if this backend were configured: "+backend.Choices())
	return cmd
}

// doctorNames returns the backends doctor reports on: the contract's, in
// its order, then any other registered one.
func doctorNames() []string {
	names := config.ContractBackends()
	for _, n := range backend.Names() {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// doctor prints the state of every backend and the settings of the
// configured one to w; it reports whether the configured backend is usable.
func doctor(ctx context.Context, w io.Writer, cfg *config.Config) bool {
	path := cfg.Path
	if path == "" {
		path = "(none; defaults)"
	}
	fmt.Fprintf(w, "config:  %s\nhome:    %s\nbackend: %s (from %s)\n\n", path, cfg.Home, cfg.Terminal.Backend, source(cfg, "terminal.backend"))
	configuredOK := false
	for _, name := range doctorNames() {
		reg, ok := backend.Lookup(name)
		mark, line, fix := "✗", "", ""
		var details []string
		switch {
		case !ok:
			line = "not built into this berth"
		case reg.Doctor == nil:
			mark, line = "?", "no checks available"
		default:
			dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			fp := reg.Doctor(dctx, backend.Options{Key: "doctor", Config: cfg.Terminal, Home: cfg.Home, ConfigFile: cfg.Path, Getenv: cfg.Getenv})
			cancel()
			line, fix, details = tidyFingerprint(name, fp)
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
		fmt.Fprintf(w, "%s %s %-12s %s\n", sel, mark, name, line)
		for _, d := range details {
			fmt.Fprintf(w, "                 %s\n", d)
		}
		if fix != "" {
			fmt.Fprintf(w, "                 fix: %s\n", fix)
		}
	}
	if reg, ok := backend.Lookup(cfg.Terminal.Backend); ok && len(reg.Keys) > 0 {
		fmt.Fprintf(w, "\n%s settings:\n", reg.Name)
		for _, k := range reg.Keys {
			v, err := cfg.Get(k.Name)
			switch {
			case err != nil:
				v = "?"
			case v == "":
				v = `""`
			}
			fmt.Fprintf(w, "  %s = %s (%s)\n      %s\n", k.Name, v, source(cfg, k.Name), k.Help)
		}
	}
	return configuredOK
}

// tidyFingerprint gives each thing a backend's check says one line, once:
// the backend's name is already in its column, so a "NAME: " prefix goes;
// a detail that repeats the summary or the fix goes, and one that starts
// with the whole summary and says more takes the summary's place; a fix
// the summary or a detail already spells out is not printed again.
func tidyFingerprint(name string, fp backend.Fingerprint) (summary, fix string, details []string) {
	summary, fix = withoutName(name, fp.Summary), withoutName(name, fp.Fix)
	for _, d := range fp.Details {
		d = withoutName(name, d)
		if d == "" || strings.Contains(summary, d) || fix != "" && strings.Contains(fix, d) {
			continue
		}
		if summary != "" && strings.HasPrefix(d, summary) {
			summary = d
			continue
		}
		details = append(details, d)
	}
	if fix != "" {
		for _, said := range append([]string{summary}, details...) {
			if strings.Contains(said, fix) {
				fix = ""
				break
			}
		}
	}
	return summary, fix, details
}

func source(cfg *config.Config, key string) string {
	s, err := cfg.Source(key)
	if err != nil {
		return "?"
	}
	return s
}
