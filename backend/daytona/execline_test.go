package daytona

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/a55dbaac/berth/internal/testenv/daytonafake"
)

// TestExecLineMeansTheSameToEveryDaemon runs execLine's command line both
// ways Daytona's daemons have run it — split into argv without a shell,
// and piped into the user's shell — and checks that the program gets
// exactly the arguments berth gave, whatever bytes they hold.
func TestExecLineMeansTheSameToEveryDaemon(t *testing.T) {
	args := []string{"plain", "", "two words", `it's`, `"dq"`, `$HOME`, "`id`", `$(id)`, `a\b`, "tab\there", "new\nline\n",
		"*", "~", "!x", "; rm -rf /tmp/nothing", "é ü", "\x01\x7f", `%s %b \n`, "-c"}
	argv := append([]string{"/bin/sh", "-c", `for a do printf '[%s]' "$a"; done`, "x"}, args...)
	var want strings.Builder
	for _, a := range args {
		want.WriteString("[" + a + "]")
	}
	line := execLine(argv)
	if strings.ContainsAny(line, "\n\t\x00") {
		t.Fatalf("the line holds a raw control byte: %q", line)
	}
	check := func(how string, cmd *exec.Cmd) {
		t.Helper()
		out, err := cmd.CombinedOutput()
		if err != nil || string(out) != want.String() {
			t.Errorf("%s: %v\n got %q\nwant %q", how, err, out, want.String())
		}
	}
	words := daytonafake.ParseCommand(line) // as the daemon splits it without a shell
	check("split without a shell", exec.Command(words[0], words[1:]...))
	for _, sh := range []string{"sh", "dash", "bash", "zsh", "busybox"} {
		path, err := exec.LookPath(sh)
		if err != nil {
			continue
		}
		cmd := exec.Command(path)
		if sh == "busybox" {
			cmd = exec.Command(path, "sh")
		}
		cmd.Stdin = strings.NewReader(line)
		check("piped into "+sh, cmd)
	}
}
