package daemon

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/a55dbaac/berth/approval"
	"github.com/a55dbaac/berth/daemon/wire"
	"github.com/a55dbaac/berth/terminal"
)

// runIn runs command on key through c and decodes the result.
func runIn(t *testing.T, c *wire.Client, in wire.Inputs, key, command string) (*wire.Reply, terminal.Result) {
	t.Helper()
	r, err := c.Run(context.Background(), wire.Request{Op: wire.OpRun, Inputs: in, Key: key, Command: command}, wire.RunOptions{})
	if err != nil {
		t.Fatalf("run %q: %v", command, err)
	}
	var res terminal.Result
	if err := json.Unmarshal(r.Result, &res); err != nil {
		t.Fatalf("run %q: result %s: %v", command, r.Result, err)
	}
	return r, res
}

// TestApprovalsRereadEveryCall (N7): the approval settings are read from
// the caller's configuration on every call. An allowlist entry the user
// revokes stops allowing at once, and an approvals.deny added later
// blocks at once; neither change recreates the environment (its shell
// state stays).
func TestApprovalsRereadEveryCall(t *testing.T) {
	home, _ := serve(t, 0)
	cfgPath := filepath.Join(home, "config.yaml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(cfgPath, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("command_allowlist: [\"chmod 777 x\"]\n")
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := wire.Dial(context.Background(), wire.DialOptions{Home: home, NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	in := inputs(t, home)
	in.Cwd = work
	runIn(t, c, in, "a", "export KEEP=1")
	r, res := runIn(t, c, in, "a", "chmod 777 x")
	if r.Exit != 0 || res.Approval == nil || res.Approval.By != approval.ByAllowlist {
		t.Fatalf("allowlisted chmod: exit %d, approval %+v; want 0, allowed by the allowlist", r.Exit, res.Approval)
	}

	write("command_allowlist: []\n") // the user revokes it
	r, res = runIn(t, c, in, "a", "chmod 777 x")
	if r.Exit != terminal.StatusBlocked || res.Approval.Allowed() || len(r.Notes) != 0 {
		t.Fatalf("after the revocation: exit %d, approval %+v, notes %q; want %d, blocked, the same environment", r.Exit, res.Approval, r.Notes, terminal.StatusBlocked)
	}

	write("approvals:\n  deny: [\"echo denied*\"]\n")
	r, res = runIn(t, c, in, "a", "echo denied")
	if r.Exit != terminal.StatusBlocked || res.Approval == nil || res.Approval.By != approval.ByDeny || len(r.Notes) != 0 {
		t.Fatalf("after a deny was added: exit %d, approval %+v, notes %q; want %d, blocked by deny, the same environment", r.Exit, res.Approval, r.Notes, terminal.StatusBlocked)
	}
	if _, res = runIn(t, c, in, "a", "echo $KEEP"); res.Output != "1" || res.EnvironmentRecreated {
		t.Fatalf("shell state after the approval changes: %q (recreated %v); want the old shell's 1", res.Output, res.EnvironmentRecreated)
	}
}
