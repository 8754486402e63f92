package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// N1: a berth the agent starts inside a berth environment cannot run what
// the outer gate would ask about, however it is told to lower its own:
// with approvals.mode off in a variable, in its own config file, or in
// the variable the parent had. The outer berth runs with approvals off,
// so only the inner one stands between the command and the file.
func TestNestedBerthCannotLowerTheGate(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(filepath.Join(home, ".berth"), 0o700); err != nil {
		t.Fatal(err)
	}
	// The config the inner berth finds by default (its BERTH_HOME is
	// withheld, so it looks under $HOME): mode off and an allowlist.
	if err := os.WriteFile(filepath.Join(home, ".berth", "config.yaml"),
		[]byte("approvals:\n  mode: \"off\"\ncommand_allowlist: [\"chmod 777 *\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "x")
	if err := os.WriteFile(target, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, inner := range []string{
		"berth exec -- chmod 777 " + target,
		"BERTH_APPROVALS_MODE=off berth exec --no-daemon -- chmod 777 " + target,
		"berth exec --config " + filepath.Join(home, ".berth", "config.yaml") + " -- chmod 777 " + target,
	} {
		cmd := exec.Command(berthBin, "exec", "--", inner+"; echo inner=$?")
		cmd.Env = append(os.Environ(), "HOME="+home, "BERTH_HOME="+filepath.Join(dir, "outer"), "BERTH_CONFIG=", "TERMINAL_ENV=",
			"BERTH_NO_DAEMON=1", "BERTH_APPROVALS_MODE=off", "PATH="+filepath.Dir(berthBin)+":"+os.Getenv("PATH"))
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", inner, err, out)
		}
		if !strings.Contains(string(out), "inner=126") || !strings.Contains(string(out), "BLOCKED") {
			t.Errorf("%s: the inner berth did not block:\n%s", inner, out)
		}
		if st, err := os.Stat(target); err != nil || st.Mode().Perm() != 0o644 {
			t.Fatalf("%s: the file's mode changed: %v %v", inner, st.Mode(), err)
		}
	}
}

// scriptEnv is the environment of the review's N1 reproductions: a
// private HOME, BERTH_HOME unset (berth's home is ~/.berth), the default
// configuration (manual approvals) and nobody to ask; berth first in PATH.
// With daemon the calls go through a daemon, stopped at the end.
func scriptEnv(t *testing.T, daemon bool) (home, work string, env []string) {
	t.Helper()
	// A short path: the daemon socket's must fit in 107 bytes.
	home, err := os.MkdirTemp("", "bn")
	if err != nil {
		t.Fatal(err)
	}
	work = filepath.Join(home, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); name != "BERTH_HOME" && name != "BERTH_OWNER" && !strings.HasPrefix(name, "BERTH_APPROVALS_") {
			env = append(env, kv)
		}
	}
	noDaemon := "BERTH_NO_DAEMON=1"
	if daemon {
		noDaemon = "BERTH_NO_DAEMON="
	}
	env = append(env, "HOME="+home, "BERTH_CONFIG=", "TERMINAL_ENV=", "TERMINAL_DAEMON=", noDaemon,
		"PATH="+filepath.Dir(berthBin)+":"+os.Getenv("PATH"))
	t.Cleanup(func() {
		if daemon {
			stop := exec.Command(berthBin, "daemon", "stop")
			stop.Env, stop.Dir = env, work
			if out, err := stop.CombinedOutput(); err != nil {
				t.Errorf("berth daemon stop: %v\n%s", err, out)
			}
		}
		os.RemoveAll(home)
	})
	return home, work, env
}

// berthIn runs berth with env in dir, stdin closed (no terminal: nobody
// can be asked), and returns its combined output and exit status.
func berthIn(t *testing.T, env []string, dir string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(berthBin, args...)
	cmd.Env, cmd.Dir = env, dir
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("berth %q: %v", args, err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// TestScriptCannotLowerTheGate (N1): a script the agent wrote, which no
// gate reads, cannot lower the gate of the berth that runs it, through
// the daemon or in one process:
//   - `berth config set approvals.mode off` (also with the owner mark
//     removed) is refused, and the file keeps its settings;
//   - `env -u BERTH_OWNER BERTH_APPROVALS_MODE=off berth exec …` asks, as
//     every nested berth does, and so is blocked here;
//   - through the daemon, a configuration file the script rewrote itself
//     does not lower the approvals of the environment it runs in.
//
// After each, the next call's `chmod 777 x` is blocked and x keeps 0644.
func TestScriptCannotLowerTheGate(t *testing.T) {
	for _, daemon := range []bool{false, true} {
		name := "no-daemon"
		if daemon {
			name = "daemon"
		}
		t.Run(name, func(t *testing.T) {
			home, work, env := scriptEnv(t, daemon)
			cfgPath := filepath.Join(home, ".berth", "config.yaml")
			target := filepath.Join(work, "x")
			if err := os.WriteFile(target, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			// The scripts the agent wrote earlier (write_file, or base64
			// -d as in the review): the gate sees only `bash NAME`.
			scripts := map[string]string{
				"fix.sh":    "berth config set approvals.mode off\n",
				"fix2.sh":   "env -u BERTH_OWNER berth config set command_allowlist '[\"chmod 777 *\"]'\n",
				"fix3.sh":   "env -u BERTH_OWNER berth config set local_sandbox off\n",
				"lower.sh":  "env -u BERTH_OWNER BERTH_APPROVALS_MODE=off berth exec --no-daemon -- chmod 777 x\n",
				"lower2.sh": "env -u BERTH_OWNER BERTH_APPROVALS_MODE=off berth exec --task other -- chmod 777 x\n",
				"edit.sh":   "printf 'approvals:\\n  mode: \"off\"\\ncommand_allowlist: [\"chmod 777 *\"]\\n' > " + cfgPath + "\n",
			}
			for n, text := range scripts {
				if err := os.WriteFile(filepath.Join(work, n), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			// modeKept checks that x still has 0644, and gives it that mode
			// and the configuration file its first state (none) for the
			// next case.
			modeKept := func(after string) {
				t.Helper()
				if st, err := os.Stat(target); err != nil || st.Mode().Perm() != 0o644 {
					t.Errorf("after %s: x is %v (%v); want 0644", after, st.Mode().Perm(), err)
				}
				if err := os.Chmod(target, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			chmodBlocked := func(after string) {
				t.Helper()
				out, code := berthIn(t, env, work, "exec", "--json", "--", "chmod 777 x")
				if code != 126 || !strings.Contains(out, "BLOCKED") {
					t.Errorf("after %s: chmod 777 x: exit %d, want 126 (blocked):\n%s", after, code, out)
				}
				modeKept(after)
			}
			chmodBlocked("nothing")
			for _, script := range []string{"fix.sh", "fix2.sh", "fix3.sh"} {
				out, code := berthIn(t, env, work, "exec", "--", "bash "+script+"; echo script=$?")
				if code != 0 || !strings.Contains(out, "refused: this berth runs under another berth") || !strings.Contains(out, "script=125") {
					t.Errorf("bash %s: exit %d, want the inner config set refused:\n%s", script, code, out)
				}
				if b, err := os.ReadFile(cfgPath); err == nil {
					t.Errorf("bash %s: the configuration file was written:\n%s", script, b)
				}
				chmodBlocked(script)
				os.Remove(cfgPath)
			}
			lowers := []string{"lower.sh"}
			if daemon {
				lowers = append(lowers, "lower2.sh")
			}
			for _, script := range lowers {
				out, code := berthIn(t, env, work, "exec", "--", "bash "+script+"; echo script=$?")
				if code != 0 || !strings.Contains(out, "BLOCKED") || !strings.Contains(out, "script=126") {
					t.Errorf("bash %s: exit %d, want the nested berth to block chmod:\n%s", script, code, out)
				}
				modeKept(script)
				chmodBlocked(script)
			}
			if daemon {
				// The file rewritten by the script: the daemon holds the
				// lower settings and says so.
				out, code := berthIn(t, env, work, "exec", "--", "bash edit.sh; echo script=$?")
				if code != 0 || !strings.Contains(out, "script=0") {
					t.Fatalf("bash edit.sh: exit %d:\n%s", code, out)
				}
				out, code = berthIn(t, env, work, "exec", "--json", "--", "chmod 777 x")
				if code != 126 || !strings.Contains(out, "keeps the stricter ones") || !strings.Contains(out, "approvals.mode off (kept manual)") ||
					!strings.Contains(out, `command_allowlist entry "chmod 777 *" (not applied)`) {
					t.Errorf("after the script rewrote the configuration: exit %d, want 126 and the held settings named:\n%s", code, out)
				}
				modeKept("edit.sh")
			}
		})
	}
}
