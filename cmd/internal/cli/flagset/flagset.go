// Package flagset defines the flags of cli.Flags on a pflag (cobra) flag
// set, for the berth-engine commands. It is apart from package cli so that
// the front binary, which parses the one command it answers with
// cli.ParseExec, does not link pflag (and package net with it).
package flagset

import (
	"github.com/spf13/pflag"

	"github.com/a55dbaac/berth/cmd/internal/cli"
)

// AddConfig adds --config.
func AddConfig(fs *pflag.FlagSet, f *cli.Flags) {
	fs.StringVar(&f.ConfigPath, "config", "", "config file (default $BERTH_CONFIG, else $BERTH_HOME/config.yaml)")
}

// AddRun adds the flags of a command that runs things: --config,
// --backend (backends lists the choices), --task (defaultTask is the
// environment key without it), --timeout, --workdir and --json.
func AddRun(fs *pflag.FlagSet, f *cli.Flags, defaultTask, backends string) {
	AddConfig(fs, f)
	fs.StringVar(&f.Backend, "backend", "", "backend: "+backends+" (overrides TERMINAL_ENV and the file)")
	fs.StringVar(&f.Task, "task", defaultTask, "environment key: commands with the same task share one environment")
	fs.IntVar(&f.Timeout, "timeout", 0, "seconds before the command and everything it started are killed (default terminal.timeout)")
	fs.StringVar(&f.Workdir, "workdir", "", "absolute directory for this command only (the session's cwd does not move)")
	fs.BoolVar(&f.JSON, "json", false, "print the result object as JSON instead of the output")
}

// AddNoDaemon adds --no-daemon.
func AddNoDaemon(fs *pflag.FlagSet, f *cli.Flags) {
	fs.BoolVar(&f.NoDaemon, "no-daemon", false, "run in this process instead of the background berth that keeps environments warm (also "+cli.NoDaemonEnv+"=1, terminal.daemon: false)")
}
