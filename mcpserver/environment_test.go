package mcpserver

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend/local/confine"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/testenv"
	"github.com/a55dbaac/berth/manager"
)

// managerWith returns a manager on the local backend with a private home
// and the given variables.
func managerWith(t *testing.T, env map[string]string) *manager.Manager {
	t.Helper()
	if env["BERTH_HOME"] == "" {
		env["BERTH_HOME"] = t.TempDir()
	}
	cfg, err := config.Load(config.LoadOptions{Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatal(err)
	}
	m := manager.New(cfg, nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		m.CloseAll(ctx)
	})
	return m
}

func toolNames(t *testing.T, m *manager.Manager) []string {
	t.Helper()
	res, err := connect(t, m, nil).ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	return names
}

// The environment tool is offered only with checkpoints.environment_tool
// set; where the environment cannot be checkpointed (unconfined local) it
// says why, and bad input is named.
func TestEnvironmentToolOptIn(t *testing.T) {
	if names := toolNames(t, newManager(t, false)); slices.Contains(names, "environment") {
		t.Fatalf("the environment tool is offered by default: %v", names)
	}
	m := managerWith(t, map[string]string{"BERTH_CHECKPOINTS_ENVIRONMENT_TOOL": "true"})
	if names := toolNames(t, m); !slices.Contains(names, "environment") {
		t.Fatalf("the environment tool is not offered with checkpoints.environment_tool: %v", names)
	}
	cs := connect(t, m, nil)
	if out, isErr := call(t, cs, "environment", map[string]any{"action": "checkpoint", "name": "c1"}); !isErr || !strings.Contains(fmt.Sprint(out["error"]), "an unconfined local environment cannot be checkpointed") {
		t.Errorf("checkpoint of an unconfined environment: %v", out)
	}
	if out, isErr := call(t, cs, "environment", map[string]any{"action": "list"}); isErr || fmt.Sprint(out["checkpoints"]) != "[]" {
		t.Errorf("list: %v", out)
	}
	if out, isErr := call(t, cs, "environment", map[string]any{"action": "fork"}); !isErr || !strings.Contains(fmt.Sprint(out["error"]), `action "fork"`) {
		t.Errorf("an unknown action: %v", out)
	}
	if out, isErr := call(t, cs, "environment", map[string]any{"action": "restore", "name": "../x"}); !isErr || !strings.Contains(fmt.Sprint(out["error"]), `"../x"`) {
		t.Errorf("a bad name: %v", out)
	}
}

// In workspace mode the agent checkpoints its own environment, changes
// files and state, and restores them; checkpoints pass the configured
// bound.
func TestEnvironmentToolCheckpointRestore(t *testing.T) {
	testenv.Need(t, testenv.Landlock, func() error {
		if m := confine.Probe().Missing(confine.Policy{}); len(m) > 0 {
			return fmt.Errorf("this kernel cannot confine: %s", strings.Join(m, "; "))
		}
		return nil
	})
	home := t.TempDir()
	t.Cleanup(func() { os.RemoveAll(home + "-workspaces") })
	m := managerWith(t, map[string]string{"BERTH_HOME": home, "BERTH_CHECKPOINTS_ENVIRONMENT_TOOL": "1", "BERTH_CHECKPOINTS_MAX_PER_ENVIRONMENT": "1",
		"TERMINAL_LOCAL_SANDBOX": "workspace", "TERMINAL_CWD": t.TempDir()})
	cs := connect(t, m, nil)
	term := func(command string) string {
		t.Helper()
		out, isErr := call(t, cs, "terminal", map[string]any{"command": command})
		if isErr {
			t.Fatalf("%q: %v", command, out)
		}
		return fmt.Sprint(out["output"])
	}
	term("echo one > f && export KEEP=k")
	out, isErr := call(t, cs, "environment", map[string]any{"action": "checkpoint", "name": "c1"})
	if isErr || out["name"] != "c1" || !strings.Contains(fmt.Sprint(out["not_carried"]), "background processes") {
		t.Fatalf("checkpoint: %v", out)
	}
	if out, isErr := call(t, cs, "environment", map[string]any{"action": "checkpoint", "name": "c2"}); !isErr || !strings.Contains(fmt.Sprint(out["error"]), "checkpoints.max_per_environment (1)") {
		t.Errorf("a second checkpoint past the bound: %v", out)
	}
	term("echo two > f && unset KEEP")
	if out, isErr := call(t, cs, "environment", map[string]any{"action": "restore", "name": "c1"}); isErr || out["replaced"] != true {
		t.Fatalf("restore: %v", out)
	}
	if got := term("cat f; echo $KEEP"); got != "one\nk" {
		t.Errorf("after the restore: %q", got)
	}
	if out, _ := call(t, cs, "environment", map[string]any{"action": "list"}); !strings.Contains(fmt.Sprint(out["checkpoints"]), "name:c1") {
		t.Errorf("list: %v", out)
	}
}
