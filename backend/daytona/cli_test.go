package daytona

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/a55dbaac/berth/internal/randhex"
	"github.com/a55dbaac/berth/internal/testenv/daytonafake"
	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
)

// The CLI's berth exec and berth shell, end to end through the binaries
// users run (built from ./cmd/... once, the first time a test needs them),
// against the fake Daytona in its kind and its realistic preset.

var (
	binDir   string // where TestMain lets the binaries be built
	binOnce  sync.Once
	binErr   error
	berthBin string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "berth-daytona-bin-")
	if err != nil {
		panic(err)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// binaries builds berth and berth-engine side by side, as installed.
func binaries(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		build := exec.Command("go", "build", "-o", binDir+"/", "../../cmd/...")
		var errb bytes.Buffer
		build.Stderr = &errb
		if err := build.Run(); err != nil {
			binErr = errors.New("go build ../../cmd/...: " + err.Error() + ": " + errb.String())
			return
		}
		berthBin = filepath.Join(binDir, "berth")
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return berthBin
}

// cliEnv is a berth home set up for the daytona backend on a fake.
type cliEnv struct {
	home string
	env  []string
	bin  string
}

func newCLIEnv(t *testing.T, fake *daytonafake.Server) *cliEnv {
	t.Helper()
	bin := binaries(t)
	home, err := os.MkdirTemp("", "bdt") // short: the daemon's socket path must fit in 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	c := &cliEnv{home: home, bin: bin}
	c.env = append(os.Environ(), "BERTH_HOME="+home, "BERTH_CONFIG=", "BERTH_NO_DAEMON=", "TERMINAL_DAEMON=",
		"TERMINAL_ENV=daytona", "TERMINAL_DAYTONA_IMAGE="+dockerenv.Image(t), "TERMINAL_CONTAINER_PERSISTENT=false",
		EnvAPIURL+"="+fake.APIURL(), EnvAPIKey+"="+fake.APIKey(), EnvJWT+"=", EnvOrg+"=", EnvTarget+"=")
	t.Cleanup(func() {
		c.run(t, "", "daemon", "stop")
		if b, err := os.ReadFile(filepath.Join(home, "daemon", "berth.pid")); err == nil {
			if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid > 0 && syscall.Kill(pid, 0) == nil {
				t.Errorf("daemon %d still running after berth daemon stop; killing it", pid)
				syscall.Kill(pid, syscall.SIGKILL)
			}
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

// run runs berth to completion, within two minutes.
func (c *cliEnv) run(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(c.bin, args...)
	cmd.Env = c.env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() })
	err := cmd.Wait()
	timer.Stop()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("berth %q: %v", args, err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// must runs berth and checks its exit status and stdout.
func (c *cliEnv) must(t *testing.T, stdin string, code int, want string, args ...string) {
	t.Helper()
	out, errs, got := c.run(t, stdin, args...)
	if got != code || out != want {
		t.Fatalf("berth %q: exit %d, stdout %q; want exit %d, %q\nstderr: %s", args, got, out, code, want, errs)
	}
}

// TestCLI runs berth exec and berth shell, in one process and through the
// daemon, against the kind fake and the realistic one, and checks that
// every throwaway sandbox is gone afterwards.
func TestCLI(t *testing.T) {
	for _, preset := range []struct {
		name string
		u    daytonafake.Unkind
	}{{"kind", daytonafake.Unkind{}}, {"realistic", daytonafake.Realistic()}} {
		t.Run(preset.name, func(t *testing.T) {
			fake := daytonafake.StartUnkind(t, preset.u)
			c := newCLIEnv(t, fake)
			key := "cli-" + randhex.String(4)

			// One process per call.
			c.must(t, "", 3, "hi\n", "exec", "--no-daemon", "--task", key, "--", "echo hi; exit 3")
			c.must(t, "", 0, "300000\n", "exec", "--no-daemon", "--task", key, "--", `head -c 300000 /dev/zero | tr '\000' a | wc -c`)
			if out, _, code := c.run(t, "", "exec", "--no-daemon", "--timeout", "2", "--task", key, "--", "echo go; sleep 1234"); code != 124 || !strings.HasPrefix(out, "go\n") {
				t.Fatalf("timeout: exit %d, %q", code, out)
			}
			out, errs, code := c.run(t, "cd /tmp\nexport A=1\necho $A; pwd\n", "shell", "--no-daemon", "--json", "--task", key)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			var last map[string]any
			if code != 0 || len(lines) != 3 || json.Unmarshal([]byte(lines[2]), &last) != nil || last["output"] != "1\n/tmp" {
				t.Fatalf("shell --json: exit %d, %q, stderr %s", code, out, errs)
			}

			// Through the daemon: the state carries from one call to the next.
			c.must(t, "", 0, "", "exec", "--task", key, "--", "cd /tmp && export B=2")
			c.must(t, "", 0, "2\n/tmp\n", "exec", "--task", key, "--", "echo $B; pwd")
			out, errs, code = c.run(t, "echo $B\ncd /\n", "shell", "--json", "--task", key)
			if code != 0 || !strings.Contains(out, `"output":"2"`) {
				t.Fatalf("shell through the daemon: exit %d, %q, stderr %s", code, out, errs)
			}
			c.must(t, "", 0, "/\n", "exec", "--task", key, "--", "pwd")
			c.run(t, "", "daemon", "stop")

			// Every sandbox of the key is gone: the one-process calls and
			// the daemon deleted theirs as they let go.
			ctx := ctxT(t)
			for {
				left := 0
				for _, id := range fake.SandboxIDs() {
					if info, ok := fake.Sandbox(id); ok && info.Labels[LabelKey] == key {
						left++
					}
				}
				if left == 0 {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("%d sandboxes of %s left after berth let go of them", left, key)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}
