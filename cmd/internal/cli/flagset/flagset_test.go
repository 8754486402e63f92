package flagset

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"github.com/a55dbaac/berth/cmd/internal/cli"
)

// execSet is the flag set of the engine's berth exec: the run flags,
// --no-daemon, and cobra's -v and -h.
func execSet(f *cli.Flags) *pflag.FlagSet {
	fs := pflag.NewFlagSet("exec", pflag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	AddRun(fs, f, "", "local")
	AddNoDaemon(fs, f)
	fs.BoolP("verbose", "v", false, "")
	fs.BoolP("help", "h", false, "")
	return fs
}

// execRows are the table's rows berth exec takes.
func execRows() []cli.Flag {
	var rows []cli.Flag
	for _, fl := range cli.Table("", "local") {
		if fl.In("run") || fl.In("daemon") {
			rows = append(rows, fl)
		}
	}
	return rows
}

// TestEngineDefinesTheTable: the engine's exec flag set holds every row of
// the table berth exec takes, each of its kind, and no other long flag
// (cobra's -v and -h aside).
func TestEngineDefinesTheTable(t *testing.T) {
	var f cli.Flags
	got := map[string]string{}
	execSet(&f).VisitAll(func(fl *pflag.Flag) {
		if fl.Shorthand == "" {
			got[fl.Name] = fl.Value.Type()
		}
	})
	want := map[string]string{}
	for _, fl := range execRows() {
		want[fl.Name] = fl.Kind
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("the engine's exec flags differ from the table (-table +engine):\n%s", diff)
	}
	// The sets: what a command that only reads the configuration takes.
	cfg := pflag.NewFlagSet("doctor", pflag.ContinueOnError)
	AddConfig(cfg, &f)
	var names []string
	cfg.VisitAll(func(fl *pflag.Flag) { names = append(names, fl.Name) })
	if strings.Join(names, ",") != "config" {
		t.Errorf("AddConfig defined %q, want only config", names)
	}
}

// TestEngineDefaults: AddRun gives --task the caller's default and
// --backend's help the caller's choices.
func TestEngineDefaults(t *testing.T) {
	var f cli.Flags
	fs := pflag.NewFlagSet("exec", pflag.ContinueOnError)
	AddRun(fs, &f, "default-key", "local, docker")
	if f.Task != "default-key" || fs.Lookup("task").DefValue != "default-key" {
		t.Errorf("--task default %q (field %q), want default-key", fs.Lookup("task").DefValue, f.Task)
	}
	if u := fs.Lookup("backend").Usage; !strings.Contains(u, "local, docker") || strings.Contains(u, "{") {
		t.Errorf("--backend usage %q does not list the choices", u)
	}
}

// parseCase is the arguments of one berth exec and whether the front
// answers it itself.
type parseCase struct {
	args   []string
	accept bool
}

// tableCases are the forms of every row of the table, made from its kind:
// what the front must read as pflag does, and what it must decline.
func tableCases(t *testing.T) []parseCase {
	var cases []parseCase
	add := func(accept bool, args ...string) { cases = append(cases, parseCase{args, accept}) }
	rows := execRows()
	if len(rows) == 0 {
		t.Fatal("the table has no flag berth exec takes")
	}
	for _, fl := range rows {
		n := "--" + fl.Name
		switch fl.Kind {
		case "string":
			add(true, n, "v a l", "--", "x")
			add(true, n+"=v", "--", "x")
			add(true, n+"=", "--", "x")
			add(true, n, "", "--", "x")
			add(true, n+"=-odd", "--", "x")
			add(true, "echo", n, "v", "hi") // interspersed, as cobra
			add(false, n)
			add(false, n, "-v", "--", "x")
			add(false, n, "--json", "--", "x")
		case "int":
			add(true, n, "5", "--", "x")
			add(true, n+"=7", "--", "x")
			add(true, n, "0", "--", "x")
			add(true, "echo", n, "3", "hi")
			add(false, n, "010", "--", "x") // octal to pflag
			add(false, n, "0x10", "--", "x")
			add(false, n, "-5", "--", "x")
			add(false, n, "5s", "--", "x")
			add(false, n+"=", "--", "x")
			add(false, n)
		case "bool":
			add(true, n, "--", "x")
			add(true, "echo", n, "hi")
			add(false, n+"=false", "--", "x")
			add(false, n+"=true", "--", "x")
		default:
			t.Fatalf("--%s: no cases for kind %q", fl.Name, fl.Kind)
		}
	}
	return cases
}

// TestBothParsersReadTheTableAlike: for every flag of the table, in every
// form its kind allows, whatever the front accepts it reads as the
// engine's pflag set does, and the value lands in the flag's field; what
// the front declines includes everything pflag refuses.
func TestBothParsersReadTheTableAlike(t *testing.T) {
	cases := append(tableCases(t),
		parseCase{[]string{"--", "true"}, true},
		parseCase{[]string{"echo", "hi"}, true},
		parseCase{[]string{"--task", "t", "--", "echo $A; pwd"}, true},
		parseCase{[]string{"--task=t", "--timeout", "5", "--workdir", "/tmp", "--", "ls", "-la"}, true},
		parseCase{[]string{"--json", "--backend", "docker", "--config", "/x.yaml", "--no-daemon", "--", "make"}, true},
		parseCase{[]string{"--", "--json", "-v"}, true},
		parseCase{[]string{"-v", "--", "x"}, false},
		parseCase{[]string{"-h"}, false},
		parseCase{[]string{"--help"}, false},
		parseCase{[]string{"--bogus", "--", "x"}, false},
		parseCase{[]string{"ls", "-la"}, false},
		parseCase{[]string{"-", "x"}, false},
	)
	for _, c := range cases {
		checkParse(t, c)
	}
}

// checkParse runs both parsers on c.args and compares them.
func checkParse(t *testing.T, c parseCase) {
	t.Helper()
	f, command, ok := cli.ParseExec(c.args)
	if ok != c.accept {
		t.Errorf("ParseExec(%q) ok = %v, want %v", c.args, ok, c.accept)
		return
	}
	if !ok {
		return
	}
	var want cli.Flags
	fs := execSet(&want)
	if err := fs.Parse(c.args); err != nil {
		t.Errorf("ParseExec accepted %q, which pflag refuses: %v", c.args, err)
		return
	}
	if diff := cmp.Diff(want, f); diff != "" {
		t.Errorf("ParseExec(%q) flags differ from pflag's (-pflag +front):\n%s", c.args, diff)
	}
	if diff := cmp.Diff(fs.Args(), command, cmp.Comparer(func(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") })); diff != "" {
		t.Errorf("ParseExec(%q) command differs from pflag's (-pflag +front):\n%s", c.args, diff)
	}
	// Each flag given landed in its own field.
	for _, fl := range execRows() {
		val, given := flagValue(fl, c.args)
		if !given {
			continue
		}
		if got := fmt.Sprint(reflect.ValueOf(fl.Field(&f)).Elem().Interface()); got != val {
			t.Errorf("ParseExec(%q): --%s's field holds %q, want %q", c.args, fl.Name, got, val)
		}
	}
}

// flagValue is the value args give fl (the last one, before "--"), as
// fmt prints its field.
func flagValue(fl cli.Flag, args []string) (string, bool) {
	val, given := "", false
	for i := 0; i < len(args) && args[i] != "--"; i++ {
		switch {
		case args[i] == "--"+fl.Name && fl.Kind == "bool":
			val, given = "true", true
		case args[i] == "--"+fl.Name && i+1 < len(args):
			val, given = args[i+1], true
			i++
		case strings.HasPrefix(args[i], "--"+fl.Name+"="):
			val, given = strings.TrimPrefix(args[i], "--"+fl.Name+"="), true
		}
	}
	return val, given
}
