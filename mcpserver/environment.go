package mcpserver

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/a55dbaac/berth/manager"
)

// The environment tool (opt-in: checkpoints.environment_tool): the agent
// checkpoints, restores and lists its own environment — the one its
// terminal and file tools run in, never another key's. Checkpoints pass the
// same bounds as berth env checkpoint (checkpoints.max_per_environment,
// checkpoints.max_total_mb). See docs/fork.md.

type environmentArgs struct {
	Action string `json:"action" jsonschema:"One of checkpoint, restore, list."`
	Name   string `json:"name,omitempty" jsonschema:"checkpoint and restore: the checkpoint's name, 1 to 64 letters, digits, '.', '-' and '_' (e.g. before-refactor). A checkpoint of an existing name replaces it."`
}

const environmentDesc = `Checkpoint and restore your environment: its files and your shell's state (working directory, exported variables, functions, aliases, shell options) together.

- checkpoint (name): keep a copy of the environment as it is now, e.g. before a risky change. A command still running in the foreground is waited for. The result says what was kept and what was not (background processes never are).
- restore (name): replace the environment with the checkpoint: files and shell state come back as they were; everything since is gone, and background processes are stopped. The checkpoint stays, so you can restore it again.
- list: your checkpoints, oldest first, with their names, times and sizes.

Checkpoints are bounded (a number per environment and a total size); past a bound the checkpoint fails and those kept stay: reuse a name to replace one.`

// environment answers the environment tool.
func (s *server) environment(ctx context.Context, req *mcp.CallToolRequest, in environmentArgs) (*mcp.CallToolResult, any, error) {
	key := s.key(req)
	switch in.Action {
	case "checkpoint":
		if in.Name == "" {
			return errorResult(fmt.Errorf("checkpoint needs a name (e.g. before-refactor)"))
		}
		// The agent's environment exists as far as it is concerned: make
		// it if no call has yet.
		if _, err := s.m.Env(ctx, key); err != nil {
			return errorResult(err)
		}
		info, err := s.m.Checkpoint(ctx, key, in.Name)
		return fileResult(info, err)
	case "restore":
		if in.Name == "" {
			return errorResult(fmt.Errorf("restore needs the checkpoint's name (action list shows them)"))
		}
		res, err := s.m.Restore(ctx, key, in.Name)
		return fileResult(res, err)
	case "list":
		list, err := s.m.Checkpoints(ctx, key)
		if list == nil {
			list = []manager.CheckpointInfo{}
		}
		return fileResult(map[string]any{"checkpoints": list}, err)
	}
	return errorResult(fmt.Errorf("action %q: use checkpoint, restore or list", in.Action))
}
