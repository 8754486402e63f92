package flagset

import (
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

// TestParseExecKnowsEveryExecFlag holds cli.ExecFlagKinds (what the front
// parses) to the flags the engine defines.
func TestParseExecKnowsEveryExecFlag(t *testing.T) {
	var f cli.Flags
	fs := pflag.NewFlagSet("exec", pflag.ContinueOnError)
	AddRun(fs, &f, "", "local")
	AddNoDaemon(fs, &f)
	got := map[string]string{}
	fs.VisitAll(func(fl *pflag.Flag) { got[fl.Name] = fl.Value.Type() })
	if diff := cmp.Diff(cli.ExecFlagKinds(), got); diff != "" {
		t.Fatalf("cli.ExecFlagKinds differs from the engine's exec flags (-front +engine):\n%s", diff)
	}
}

// TestParseExecReadsAsPflagDoes: whatever the front accepts, it reads as
// the engine's pflag set does; what it declines includes everything pflag
// refuses.
func TestParseExecReadsAsPflagDoes(t *testing.T) {
	cases := []struct {
		args   []string
		accept bool // the front answers it itself
	}{
		{[]string{"--", "true"}, true},
		{[]string{"echo", "hi"}, true},
		{[]string{"--task", "t", "--", "echo $A; pwd"}, true},
		{[]string{"--task=t", "--timeout", "5", "--workdir", "/tmp", "--", "ls", "-la"}, true},
		{[]string{"--json", "--backend", "docker", "--config", "/x.yaml", "--", "make"}, true},
		{[]string{"echo", "--json", "hi"}, true}, // interspersed, as cobra
		{[]string{"--task=", "--", "x"}, true},
		{[]string{"--task", "", "--", "x"}, true},
		{[]string{"--timeout", "0", "--", "x"}, true},
		{[]string{"--no-daemon", "--", "x"}, true},
		{[]string{"--", "--json", "-v"}, true},
		{[]string{"--workdir=-odd", "--", "x"}, true},
		{[]string{"--timeout", "010", "--", "x"}, false}, // octal to pflag
		{[]string{"--timeout", "0x10", "--", "x"}, false},
		{[]string{"--timeout", "-5", "--", "x"}, false},
		{[]string{"--timeout", "5s", "--", "x"}, false},
		{[]string{"--json=false", "--", "x"}, false},
		{[]string{"-v", "--", "x"}, false},
		{[]string{"-h"}, false},
		{[]string{"--help"}, false},
		{[]string{"--bogus", "--", "x"}, false},
		{[]string{"ls", "-la"}, false},
		{[]string{"--task"}, false},
		{[]string{"--task", "--json", "--", "x"}, false},
		{[]string{"-", "x"}, false},
	}
	for _, c := range cases {
		f, command, ok := cli.ParseExec(c.args)
		if ok != c.accept {
			t.Errorf("ParseExec(%q) ok = %v, want %v", c.args, ok, c.accept)
			continue
		}
		if !ok {
			continue
		}
		var want cli.Flags
		fs := execSet(&want)
		if err := fs.Parse(c.args); err != nil {
			t.Errorf("ParseExec accepted %q, which pflag refuses: %v", c.args, err)
			continue
		}
		if diff := cmp.Diff(want, f); diff != "" {
			t.Errorf("ParseExec(%q) flags differ from pflag's (-pflag +front):\n%s", c.args, diff)
		}
		if diff := cmp.Diff(fs.Args(), command, cmp.Comparer(func(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") })); diff != "" {
			t.Errorf("ParseExec(%q) command differs from pflag's (-pflag +front):\n%s", c.args, diff)
		}
	}
}
