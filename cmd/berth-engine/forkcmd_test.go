package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/a55dbaac/berth/backend/local/confine"
	"github.com/a55dbaac/berth/internal/testenv"
	"github.com/a55dbaac/berth/manager"
)

// The quick start's fork, end to end through the daemon: a task's
// environment (local, workspace mode) forked, the fork run with berth exec,
// a checkpoint listed (--json and the table), restored, removed with berth
// env rm --checkpoint; bad input refused with the value named.
func TestEnvForkThroughTheDaemon(t *testing.T) {
	testenv.Need(t, testenv.Landlock, func() error {
		if m := confine.Probe().Missing(confine.Policy{}); len(m) > 0 {
			return fmt.Errorf("this kernel cannot confine: %s", strings.Join(m, "; "))
		}
		return nil
	})
	ws := t.TempDir()
	d := newDaemonEnv(t, "TERMINAL_LOCAL_SANDBOX=workspace", "TERMINAL_CWD="+ws, "BERTH_APPROVALS_MODE=off")
	t.Cleanup(func() { os.RemoveAll(d.home + "-workspaces") })
	d.mustRun(t, 0, "exec", "--task", "main", "--", "mkdir -p app && cd app && echo v1 > version && export STAGE=one")
	out := d.mustRun(t, 0, "env", "fork", "main", "try-1")
	for _, want := range []string{"forked main into try-1 (local)", "files: workspace copied", "STAGE)", "not carried: background processes"} {
		if !strings.Contains(out, want) {
			t.Errorf("env fork printed no %q:\n%s", want, out)
		}
	}
	if got := d.mustRun(t, 0, "exec", "--task", "try-1", "--", "cat version; echo $STAGE; pwd"); got != "v1\none\n"+d.home+"-workspaces/try-1/app\n" {
		t.Errorf("the fork: %q", got)
	}
	d.mustRun(t, 0, "exec", "--task", "try-1", "--", "echo v2 > version")
	if got := d.mustRun(t, 0, "exec", "--task", "main", "--", "cat version"); got != "v1\n" {
		t.Errorf("the source after a write in the fork: %q", got)
	}
	d.mustRun(t, 0, "env", "checkpoint", "try-1", "good")
	d.mustRun(t, 0, "exec", "--task", "try-1", "--", "echo broken > version && export STAGE=bad")
	var cps []manager.CheckpointInfo
	if err := json.Unmarshal([]byte(d.mustRun(t, 0, "env", "checkpoints", "--json")), &cps); err != nil || len(cps) != 1 || cps[0].Key != "try-1" || cps[0].Name != "good" {
		t.Fatalf("env checkpoints --json: %+v %v", cps, err)
	}
	if table := d.mustRun(t, 0, "env", "checkpoints", "try-1"); !strings.Contains(table, "NAME") || !strings.Contains(table, "good") {
		t.Errorf("env checkpoints:\n%s", table)
	}
	var res manager.RestoreResult
	if err := json.Unmarshal([]byte(d.mustRun(t, 0, "env", "restore", "try-1", "good", "--json")), &res); err != nil || !res.Replaced {
		t.Fatalf("env restore --json: %+v %v", res, err)
	}
	if got := d.mustRun(t, 0, "exec", "--task", "try-1", "--", "cat version; echo $STAGE"); got != "v2\none\n" {
		t.Errorf("after the restore: %q", got)
	}
	if out := d.mustRun(t, 0, "env", "rm", "try-1", "--checkpoint", "good"); !strings.Contains(out, "removed local checkpoint good") {
		t.Errorf("env rm --checkpoint: %q", out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"env", "fork", "main", "main"}, `both "main"`},
		{[]string{"env", "fork", "nope", "x"}, `no environment "nope"`},
		{[]string{"env", "fork", "main"}, "fork takes SRC DST"},
		{[]string{"env", "checkpoint", "main", "a/b"}, `"a/b" has a slash`},
		{[]string{"env", "restore", "main", "gone"}, `no checkpoint "gone"`},
		{[]string{"env", "rm", "main", "--checkpoint", "gone"}, `no checkpoint "gone"`},
	} {
		if _, errs, code := d.run(t, "", c.args...); code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("berth %s: exit %d, stderr %q; want an error with %q", strings.Join(c.args, " "), code, errs, c.want)
		}
	}
}
