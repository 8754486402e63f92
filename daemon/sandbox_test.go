package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/a55dbaac/berth/daemon/wire"
	"github.com/a55dbaac/berth/internal/testenv"
)

// TestMain lets this test binary be a daemon client: with
// BERTH_TEST_CLIENT_HOME set it runs BERTH_TEST_CLIENT_COMMAND through the
// home's daemon and prints what happened as JSON (sandboxClient).
func TestMain(m *testing.M) {
	if home := os.Getenv("BERTH_TEST_CLIENT_HOME"); home != "" {
		os.Exit(sandboxClient(home, os.Getenv("BERTH_TEST_CLIENT_COMMAND")))
	}
	os.Exit(m.Run())
}

// clientOutcome is what sandboxClient prints.
type clientOutcome struct {
	Code  string `json:"code,omitempty"`
	Error string `json:"error,omitempty"`
	Exit  int    `json:"exit"`
}

func sandboxClient(home, command string) int {
	var out clientOutcome
	c, err := wire.Dial(context.Background(), wire.DialOptions{Home: home, NoStart: true})
	if err == nil {
		wd, _ := os.Getwd()
		env, names := wire.CallerEnv(os.Environ())
		var r *wire.Reply
		r, err = c.Run(context.Background(), wire.Request{Op: wire.OpRun, Inputs: wire.Inputs{Env: env, Names: names, Cwd: wd}, Command: command}, wire.RunOptions{})
		if r != nil {
			out.Exit = r.Exit
		}
	}
	if err != nil {
		out.Error = err.Error()
		var re *wire.ReplyError
		if ok := asReplyError(err, &re); ok {
			out.Code = re.Code
		}
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
	return 0
}

func asReplyError(err error, re **wire.ReplyError) bool {
	for e := err; e != nil; {
		if r, ok := e.(*wire.ReplyError); ok {
			*re = r
			return true
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		e = u.Unwrap()
	}
	return false
}

// runClient runs this binary as a client of home's daemon, under the
// sandbox command prefix wrap, and returns what it printed.
func runClient(t *testing.T, home, command string, wrap ...string) clientOutcome {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{}, wrap...), exe)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "BERTH_HOME="+home, "BERTH_TEST_CLIENT_HOME="+home, "BERTH_TEST_CLIENT_COMMAND="+command)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client under %q: %v: %s", wrap, err, out)
	}
	var o clientOutcome
	if err := json.Unmarshal(out, &o); err != nil {
		t.Fatalf("client under %q printed %q: %v", wrap, out, err)
	}
	return o
}

// TestDaemonRefusesSandboxedCallers (N9): a caller in another mount, PID,
// network or user namespace than the daemon's, or under no_new_privs, is
// refused with CodeSandboxed before anything runs (its command would have
// run outside its sandbox); a caller beside the daemon is served.
func TestDaemonRefusesSandboxedCallers(t *testing.T) {
	testenv.Need(t, testenv.Namespaces, testenv.Programs("unshare", "bwrap", "setpriv"))
	home, _ := serve(t, 0)
	dir := t.TempDir()
	sandboxes := map[string][]string{
		"user namespace":     {"unshare", "--user", "--map-root-user"},
		"user+net namespace": {"unshare", "--user", "--map-root-user", "--net"},
		"user+mount":         {"unshare", "--user", "--map-root-user", "--mount"},
		"no_new_privs":       {"setpriv", "--no-new-privs"},
		// The review's: a read-only root, its own PID and network
		// namespaces.
		"bwrap": {"bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--unshare-net", "--die-with-parent"},
	}
	if os.Getuid() == 0 { // namespaces one at a time, without a user namespace
		sandboxes["net namespace"] = []string{"unshare", "--net"}
		sandboxes["mount namespace"] = []string{"unshare", "--mount"}
		sandboxes["pid namespace"] = []string{"unshare", "--pid", "--fork"}
	}
	for name, wrap := range sandboxes {
		marker := filepath.Join(dir, "ran-"+strings.ReplaceAll(name, " ", "-"))
		o := runClient(t, home, "touch "+marker, wrap...)
		if o.Code != wire.CodeSandboxed {
			t.Errorf("%s: %+v; want the daemon's refusal, code %q", name, o, wire.CodeSandboxed)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Errorf("%s: the command ran through the daemon", name)
		}
	}
	// Beside the daemon, the same client is served.
	marker := filepath.Join(dir, "ran-beside")
	if o := runClient(t, home, "touch "+marker); o.Code != "" || o.Exit != 0 {
		t.Fatalf("unsandboxed client: %+v; want it served", o)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("unsandboxed client's command did not run: %v", err)
	}
}

// BenchmarkReadConfinement: what the peer check reads of a caller, once
// per connection.
func BenchmarkReadConfinement(b *testing.B) {
	for b.Loop() {
		if _, err := readConfinement("self"); err != nil {
			b.Fatal(err)
		}
	}
}
