// Package flagset defines the flags of cli.Flags on a pflag (cobra) flag
// set, for the berth-engine commands, from the one table in cli.Flags. It
// is apart from package cli so that the front binary, which parses the one
// command it answers with cli.ParseExec from the same table, does not link
// pflag (and package net with it).
package flagset

import (
	"github.com/spf13/pflag"

	"github.com/a55dbaac/berth/cmd/internal/cli"
)

// AddConfig adds --config: the flags of the table's "config" set.
func AddConfig(fs *pflag.FlagSet, f *cli.Flags) {
	add(fs, f, "config", "", "")
}

// AddRun adds the flags of a command that runs things (the table's "run"
// set): --config, --backend (backends lists the choices), --task
// (defaultTask is the environment key without it), --timeout, --workdir
// and --json.
func AddRun(fs *pflag.FlagSet, f *cli.Flags, defaultTask, backends string) {
	add(fs, f, "run", defaultTask, backends)
}

// AddNoDaemon adds --no-daemon: the flags of the table's "daemon" set.
func AddNoDaemon(fs *pflag.FlagSet, f *cli.Flags) {
	add(fs, f, "daemon", "", "")
}

// add defines the table's flags of set on fs, each bound to its field of f.
func add(fs *pflag.FlagSet, f *cli.Flags, set, defaultTask, backends string) {
	for _, fl := range cli.Table(defaultTask, backends) {
		if !fl.In(set) {
			continue
		}
		switch p := fl.Field(f).(type) {
		case *string:
			fs.StringVar(p, fl.Name, fl.Default, fl.Usage)
		case *int:
			fs.IntVar(p, fl.Name, 0, fl.Usage)
		case *bool:
			fs.BoolVar(p, fl.Name, false, fl.Usage)
		}
	}
}
