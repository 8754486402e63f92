package main

import (
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
