package cli

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// Flags are the flags of the commands that run things, and their one
// table: each field's tags define its flag, and both parsers read that
// row (Table): package flagset defines it on the engine's cobra commands,
// and ParseExec reads it in the front, so the two parse the same flags the
// same way (flagset's tests hold them to it).
//
// The tags of a field (a string, an int or a bool):
//
//   - flag: the long name;
//   - in: the commands that take it: "config" (every command that reads
//     the configuration, flagset.AddConfig), "run" (the commands that run
//     things, flagset.AddRun) and "daemon" (those that may go through the
//     daemon, flagset.AddNoDaemon); berth exec takes "run" and "daemon",
//     which is what ParseExec reads;
//   - usage: the help, where {backends} stands for the backends' names;
//   - default (string fields only): the default, where {task} stands for
//     the default environment key (the engine's; "" in the front, which
//     leaves it to the daemon).
//
// So a flag of berth exec is defined in one place: its field here. A flag
// that applies per call rather than to the configuration (as --timeout
// and --workdir do) travels with each request to the daemon and touches
// three more, four places in all:
//
//   - a field of wire.Request (daemon/wire/wire.go), set in Flags.Request
//     (cli.go);
//   - daemon's run (daemon/run.go), which passes it to manager.Run, as
//     terminal.Request does;
//   - the engine's localRunner.run (cmd/berth-engine/daemoncmd.go), the
//     same call in one process.
//
// A flag that sets a configuration key instead goes into Inputs.Flags
// (cli.go), and the daemon loads it with the rest of the configuration; if
// that key must not make a new environment when it changes, declare it
// per call (config.PerCall).
type Flags struct {
	ConfigPath string `flag:"config" in:"config,run" usage:"config file (default $BERTH_CONFIG, else $BERTH_HOME/config.yaml)"`
	Backend    string `flag:"backend" in:"run" usage:"backend: {backends} (overrides TERMINAL_ENV and the file)"`
	Task       string `flag:"task" in:"run" default:"{task}" usage:"environment key: commands with the same task share one environment"`
	Timeout    int    `flag:"timeout" in:"run" usage:"seconds before the command and everything it started are killed (default terminal.timeout)"`
	Workdir    string `flag:"workdir" in:"run" usage:"absolute directory for this command only (the session's cwd does not move)"`
	JSON       bool   `flag:"json" in:"run" usage:"print the result object as JSON instead of the output"`
	NoDaemon   bool   `flag:"no-daemon" in:"daemon" usage:"run in this process instead of the background berth that keeps environments warm (also BERTH_NO_DAEMON=1, terminal.daemon: false)"`
}

// A Flag is one row of the flag table: a field of Flags and its tags.
type Flag struct {
	Name    string // the long name, without "--"
	Kind    string // the field's type as pflag names it: "string", "int" or "bool"
	Usage   string // the help text
	Default string // a string flag's default ("" for the others)

	in    []string // the commands that take it
	index int      // the field's index in Flags
}

// Table returns the flags in the order of Flags's fields, with {task} in
// a default read as defaultTask and {backends} in a usage as backends.
func Table(defaultTask, backends string) []Flag {
	rows := slices.Clone(table())
	for i := range rows {
		rows[i].Usage = strings.ReplaceAll(rows[i].Usage, "{backends}", backends)
		rows[i].Default = strings.ReplaceAll(rows[i].Default, "{task}", defaultTask)
	}
	return rows
}

// table is the rows as the tags read, once.
var table = sync.OnceValue(func() []Flag {
	t := reflect.TypeFor[Flags]()
	rows := make([]Flag, 0, t.NumField())
	for i := range t.NumField() {
		sf := t.Field(i)
		fl := Flag{
			Name:    sf.Tag.Get("flag"),
			Kind:    sf.Type.Kind().String(),
			Usage:   sf.Tag.Get("usage"),
			Default: sf.Tag.Get("default"),
			in:      strings.Split(sf.Tag.Get("in"), ","),
			index:   i,
		}
		if err := fl.check(sf); err != nil {
			panic(err) // a mistake in the tags above; TestTable finds it
		}
		rows = append(rows, fl)
	}
	return rows
})

// check reports a row the parsers could not read alike.
func (fl Flag) check(sf reflect.StructField) error {
	switch {
	case fl.Name == "" || strings.HasPrefix(fl.Name, "-") || strings.ContainsAny(fl.Name, "= "):
		return fmt.Errorf("cli.Flags.%s: flag tag %q is not a long flag name", sf.Name, fl.Name)
	case fl.Kind != "string" && fl.Kind != "int" && fl.Kind != "bool":
		return fmt.Errorf("cli.Flags.%s: a flag is a string, an int or a bool, not %s", sf.Name, sf.Type)
	case fl.Kind != "string" && sf.Tag.Get("default") != "":
		return fmt.Errorf("cli.Flags.%s: only a string flag has a default", sf.Name)
	case fl.Usage == "":
		return fmt.Errorf("cli.Flags.%s: no usage tag", sf.Name)
	}
	for _, set := range fl.in {
		if set != "config" && set != "run" && set != "daemon" {
			return fmt.Errorf("cli.Flags.%s: in tag %q: the sets are config, run and daemon", sf.Name, sf.Tag.Get("in"))
		}
	}
	return nil
}

// In reports whether the commands of set ("config", "run" or "daemon"; see
// Flags) take the flag.
func (fl Flag) In(set string) bool { return slices.Contains(fl.in, set) }

// Field returns the flag's field of f: a *string, *int or *bool, as Kind
// says.
func (fl Flag) Field(f *Flags) any {
	return reflect.ValueOf(f).Elem().Field(fl.index).Addr().Interface()
}
