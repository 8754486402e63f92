package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/cmd/internal/cli/flagset"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/manager"
)

func newConfigCmd() *cobra.Command {
	var c common
	root := &cobra.Command{
		Use:   "config",
		Short: "Show or change settings in the config file",
		Long: `Read and edit berth's YAML configuration. Keys are terminal.<name> (or just
<name>), tool_output.max_bytes, approvals.mode, approvals.timeout,
approvals.deny and the top-level command_allowlist; "berth config keys"
lists them all, with the keys each built-in backend declares. Lists and maps
take JSON.`,
		Example: `  berth config path
  berth config keys
  berth config get terminal.backend
  berth config set terminal.backend docker
  berth config set docker_volumes '["/data:/data:ro"]'
  berth config set command_allowlist '["git push --force*"]'
  berth config set approvals.mode off`,
	}
	flagset.AddConfig(root.PersistentFlags(), &c.Flags)

	root.AddCommand(&cobra.Command{
		Use:     "path",
		Short:   "Print the config file berth uses",
		Example: "  berth config path",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, _, err := config.ResolvePath(c.ConfigPath, os.Getenv)
			if err != nil {
				return err
			}
			fmt.Println(p)
			return nil
		},
	})
	root.AddCommand(&cobra.Command{
		Use:   "get KEY",
		Short: "Print a setting's effective value (file, environment and defaults merged)",
		Example: `  berth config get terminal.timeout
  TERMINAL_ENV=docker berth config get backend`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load(config.LoadOptions{ConfigPath: c.ConfigPath})
			if err != nil {
				return err
			}
			v, err := cfg.Get(args[0])
			if err != nil {
				return err
			}
			fmt.Println(v)
			return nil
		},
	})
	root.AddCommand(&cobra.Command{
		Use:   "set KEY VALUE",
		Short: "Change a setting in the config file, keeping comments and other keys",
		Example: `  berth config set terminal.backend docker
  berth config set terminal.docker_env '{"DEBUG":"1"}'`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if key := gateKey(args[0]); key != "" && manager.Nested(config.Default()) {
				return fmt.Errorf("config set %s refused: this berth runs under another berth (a command berth started, or one below it), "+
					"and the approval and sandbox settings are the user's to change, not a command's; "+
					"the user can change them from their own terminal", key)
			}
			p, _, err := config.ResolvePath(c.ConfigPath, os.Getenv)
			if err != nil {
				return err
			}
			if err := config.Set(p, args[0], args[1]); err != nil {
				return err
			}
			fmt.Printf("%s = %s in %s\n", args[0], args[1], p)
			if key := strings.TrimPrefix(strings.ToLower(args[0]), "terminal."); key == "backend" {
				name := strings.ToLower(strings.TrimSpace(args[1]))
				if _, ok := backend.Lookup(name); !ok {
					fmt.Fprintf(os.Stderr, "note: backend %s is not built into this berth (choices: %s)\n", name, backend.Choices())
				}
			}
			return nil
		},
	})
	root.AddCommand(&cobra.Command{
		Use:   "keys",
		Short: "List every key with its variable, default, backend and meaning",
		Example: `  berth config keys
  berth config keys | grep ssh_`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			printKeys(os.Stdout)
			return nil
		},
	})
	return root
}

// gateKey returns the dotted name of key when it is one of the settings
// that decide what runs without the user's say (approvals.*,
// command_allowlist, terminal.local_sandbox*), "" for any other key.
func gateKey(key string) string {
	n := strings.ToLower(strings.TrimSpace(key))
	for _, k := range config.Keys() {
		if k != n && (strings.Contains(n, ".") || k != "terminal."+n) {
			continue
		}
		if strings.HasPrefix(k, "approvals.") || k == "command_allowlist" || strings.HasPrefix(k, "terminal.local_sandbox") {
			return k
		}
		return ""
	}
	return ""
}

// printKeys lists every configuration key: shared ones, then the keys of
// each registered backend.
func printKeys(w io.Writer) {
	for _, d := range config.Describe() {
		owner := "shared"
		if len(d.Backends) > 0 {
			owner = strings.Join(d.Backends, ", ")
		}
		def := d.Default
		if def == "" {
			def = `""`
		}
		env := d.Env
		if env == "" {
			env = "-"
		}
		fmt.Fprintf(w, "%s  [%s]  %s  default %s\n    %s\n", d.Key, owner, env, def, d.Help)
	}
	if _, missing := config.BackendNames(); len(missing) > 0 {
		fmt.Fprintf(w, "\nNot in this build (their keys are ignored): %s\n", strings.Join(missing, ", "))
	}
}
