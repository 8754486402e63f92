package modal

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
	"github.com/a55dbaac/berth/internal/testenv/modalfake"
)

// The berth binaries, built from ./cmd/... the first time a test needs
// them, into a directory TestMain removes.
var (
	cliOnce sync.Once
	cliDir  string
	cliErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if cliDir != "" {
		os.RemoveAll(cliDir)
	}
	os.Exit(code)
}

// cliBinary returns the path of the built berth front (berth-engine is
// beside it, as installed).
func cliBinary(t *testing.T) string {
	t.Helper()
	cliOnce.Do(func() {
		if cliDir, cliErr = os.MkdirTemp("", "berth-modal-cli-"); cliErr != nil {
			return
		}
		build := exec.Command("go", "build", "-o", cliDir+"/", "./cmd/...")
		build.Dir = filepath.Join("..", "..")
		if out, err := build.CombinedOutput(); err != nil {
			cliErr = errors.New("go build ./cmd/...: " + err.Error() + "\n" + string(out))
		}
	})
	if cliErr != nil {
		t.Fatal(cliErr)
	}
	return filepath.Join(cliDir, "berth")
}

// cli is a berth home whose berth exec and berth shell run on the modal
// backend against a fake, through the daemon unless told otherwise; the
// daemon is stopped when the test ends.
type cli struct {
	bin string
	env []string
}

func newCLI(t *testing.T, f *fixture) *cli {
	t.Helper()
	// A short path: the daemon's socket must fit in 107 bytes.
	home, err := os.MkdirTemp("", "bm")
	if err != nil {
		t.Fatal(err)
	}
	c := &cli{bin: cliBinary(t)}
	c.env = append(os.Environ(),
		"BERTH_HOME="+home, "BERTH_CONFIG=", "TERMINAL_ENV=", "BERTH_NO_DAEMON=", "TERMINAL_DAEMON=",
		"TERMINAL_BACKEND=modal", "TERMINAL_MODAL_IMAGE="+dockerenv.ImageRef, "TERMINAL_CONTAINER_PERSISTENT=false",
		"HOME="+t.TempDir(), "MODAL_CONFIG_PATH="+filepath.Join(t.TempDir(), "none.toml"), "MODAL_PROFILE=", "MODAL_ENVIRONMENT=")
	for k, v := range f.srv.Env() {
		c.env = append(c.env, k+"="+v)
	}
	t.Cleanup(func() {
		if _, errs, code := c.run(t, "", "daemon", "stop"); code != 0 {
			t.Errorf("berth daemon stop: exit %d: %s", code, errs)
		}
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(home, "daemon", "berth.log")); err == nil {
				t.Logf("daemon log:\n%s", b)
			}
		}
		os.RemoveAll(home)
	})
	return c
}

func (c *cli) run(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(c.bin, args...)
	cmd.Env = c.env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run berth %v: %v", args, err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

func (c *cli) mustRun(t *testing.T, want int, stdin string, args ...string) string {
	t.Helper()
	out, errs, code := c.run(t, stdin, args...)
	if code != want {
		t.Fatalf("berth %q: exit %d, want %d\nstdout: %s\nstderr: %s", args, code, want, out, errs)
	}
	return out
}

// TestCLI runs berth exec and berth shell, built from ./cmd/..., on the
// modal backend end to end: against the plain fake and against one as
// unkind as the real Modal.
func TestCLI(t *testing.T) {
	for _, c := range []struct {
		name   string
		faults modalfake.Faults
	}{{"Plain", modalfake.Faults{}}, {"Realistic", modalfake.Realistic()}} {
		t.Run(c.name, func(t *testing.T) { testCLI(t, newFixtureWith(t, c.faults)) })
	}
}

func testCLI(t *testing.T, f *fixture) {
	c := newCLI(t, f)
	// A warm environment through the daemon: the cd and the export of one
	// berth exec are there in the next.
	c.mustRun(t, 0, "", "exec", "--task", "t", "--", "cd /tmp && export A=1")
	if out := c.mustRun(t, 0, "", "exec", "--task", "t", "--", "echo $A; pwd"); out != "1\n/tmp\n" {
		t.Fatalf("second berth exec: %q, want 1 and /tmp", out)
	}
	c.mustRun(t, 7, "", "exec", "--task", "t", "--", "echo out; exit 7")
	var res struct {
		Output   string  `json:"output"`
		ExitCode int     `json:"exit_code"`
		Error    *string `json:"error"`
	}
	out := c.mustRun(t, 1, "", "exec", "--task", "t", "--json", "--", "uname -s; grep -q x /dev/null")
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Output != "Linux" || res.ExitCode != 1 || res.Error != nil {
		t.Fatalf("berth exec --json: %q (%v)", out, err)
	}

	// One session, JSON Lines.
	out = c.mustRun(t, 0, "cd /root\nexport B=2\necho $B; pwd\n", "shell", "--task", "s", "--json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil || res.Output != "2\n/root" || res.ExitCode != 0 {
		t.Fatalf("berth shell --json, last line: %q (%v)", lines[len(lines)-1], err)
	}

	// The one-process berth.
	if out := c.mustRun(t, 0, "", "exec", "--no-daemon", "--task", "n", "--", "echo one"); out != "one\n" {
		t.Fatalf("berth exec --no-daemon: %q", out)
	}
}
