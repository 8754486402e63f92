package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/a55dbaac/berth/backend/local/confine"
	"github.com/a55dbaac/berth/daemon/wire"
	"github.com/a55dbaac/berth/internal/testenv"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/terminal"
)

// The daemon forks, checkpoints and restores the environments it holds
// (local in workspace mode here), reports the copy's progress as it goes,
// lists and removes checkpoints, and refuses bad input with errors naming
// the value.
func TestForkCheckpointRestoreThroughTheDaemon(t *testing.T) {
	testenv.Need(t, testenv.Landlock, func() error {
		if m := confine.Probe().Missing(confine.Policy{}); len(m) > 0 {
			return fmt.Errorf("this kernel cannot confine: %s", strings.Join(m, "; "))
		}
		return nil
	})
	home, _ := serve(t, 0)
	t.Cleanup(func() { os.RemoveAll(home + "-workspaces") }) // local forks' workspaces
	in := inputs(t, home)
	in.Env = append(in.Env, "TERMINAL_LOCAL_SANDBOX=workspace", "TERMINAL_CWD="+t.TempDir())
	c, err := wire.Dial(context.Background(), wire.DialOptions{Home: home, NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var mu sync.Mutex
	var steps []string
	do := func(req wire.Request) (*wire.Reply, error) {
		req.Inputs = in
		return c.Run(context.Background(), req, wire.RunOptions{Progress: func(p wire.Progress) {
			mu.Lock()
			steps = append(steps, p.Step)
			mu.Unlock()
		}})
	}
	run := func(key, command string) string {
		t.Helper()
		r, err := do(wire.Request{Op: wire.OpRun, Key: key, Command: command})
		if err != nil {
			t.Fatal(err)
		}
		var res terminal.Result
		if err := json.Unmarshal(r.Result, &res); err != nil || res.Error != nil {
			t.Fatalf("%s: %q: %s %v", key, command, r.Result, err)
		}
		return res.Output
	}
	run("a", "mkdir d && cd d && echo x > f && export V=1")
	r, err := do(wire.Request{Op: wire.OpFork, Key: "a", Target: "b"})
	if err != nil {
		t.Fatal(err)
	}
	var fr manager.ForkResult
	if err := json.Unmarshal(r.Result, &fr); err != nil || fr.To != "b" || r.Backend != "local" || r.Cwd != fr.Cwd {
		t.Fatalf("fork reply: %+v %s %v", r, r.Result, err)
	}
	if out := run("b", "pwd; cat f; echo $V"); out != fr.Cwd+"\nx\n1" || !strings.HasPrefix(fr.Cwd, home+"-workspaces/b/") {
		t.Fatalf("the fork: %q (cwd %s)", out, fr.Cwd)
	}
	mu.Lock()
	copied := strings.Contains(strings.Join(steps, "\n"), "copying workspace")
	mu.Unlock()
	if !copied {
		t.Errorf("no progress of the copy reached the caller: %q", steps)
	}
	if _, err := do(wire.Request{Op: wire.OpCheckpoint, Key: "b", Name: "cp1"}); err != nil {
		t.Fatal(err)
	}
	run("b", "echo y > f && export V=2 && cd /")
	if _, err := do(wire.Request{Op: wire.OpRestore, Key: "b", Name: "cp1"}); err != nil {
		t.Fatal(err)
	}
	if out := run("b", "pwd; cat f; echo $V"); out != fr.Cwd+"\nx\n1" {
		t.Fatalf("after the restore: %q", out)
	}
	r, err = do(wire.Request{Op: wire.OpCheckpoints})
	var list []manager.CheckpointInfo
	if err != nil || json.Unmarshal(r.Result, &list) != nil || len(list) != 1 || list[0].Key != "b" || list[0].Name != "cp1" {
		t.Fatalf("checkpoints: %s %v", r.Result, err)
	}
	if _, err := do(wire.Request{Op: wire.OpRemoveCheckpoint, Key: "b", Name: "cp1"}); err != nil {
		t.Fatal(err)
	}
	if r, _ = do(wire.Request{Op: wire.OpCheckpoints, Key: "b"}); string(r.Result) != "[]" {
		t.Errorf("checkpoints after the removal: %s", r.Result)
	}
	for _, c := range []struct {
		req  wire.Request
		want string
	}{
		{wire.Request{Op: wire.OpFork, Key: "zz", Target: "y"}, `no environment "zz" in the berth daemon (it holds a, b`},
		{wire.Request{Op: wire.OpFork, Key: "a", Target: "a"}, `both "a"`},
		{wire.Request{Op: wire.OpFork, Key: "a", Target: "b"}, `environment "b" exists`},
		{wire.Request{Op: wire.OpCheckpoint, Key: "a", Name: "x/y"}, `"x/y" has a slash`},
		{wire.Request{Op: wire.OpRestore, Key: "a", Name: "nope"}, `no checkpoint "nope"`},
	} {
		if _, err := do(c.req); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s %s %s: %v, want %q", c.req.Op, c.req.Key, c.req.Target, c.req.Name, err, c.want)
		}
	}
}
