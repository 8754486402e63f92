package manager

import (
	"context"
	"fmt"

	"github.com/a55dbaac/berth/files"
	"github.com/a55dbaac/berth/terminal"
)

// MaxContentBytes is the most file content WriteFile accepts in one call,
// and the most text Patch takes in old or new. An agent's model writes far
// less in one turn (a few hundred KB at most); bigger files are generated
// in the environment with the terminal.
const MaxContentBytes = 10 << 20

// The file tools go through the manager as commands do, so a Go program
// gets the same environment, gate, questions and limits as an MCP client:
// the manager is the one door, as database/sql.DB is for a driver, and
// package files is the layer beneath it that checks nothing of policy.
// A write the approval gate refuses returns an error wrapping
// *approval.BlockedError, whose Decision says why; the Asker is taken from
// ctx (approval.WithAsker), as for commands.

// ReadFile reads path in key's environment (the read_file tool).
func (m *Manager) ReadFile(ctx context.Context, key, path string, offset, limit int) (files.ReadResult, error) {
	env, err := m.Env(ctx, key)
	if err != nil {
		return files.ReadResult{}, err
	}
	env.Touch()
	return files.Read(ctx, env, path, offset, limit)
}

// WriteFile writes content to path in key's environment (the write_file
// tool), after the approval gate allowed the write.
func (m *Manager) WriteFile(ctx context.Context, key, path, content string) (files.WriteResult, error) {
	if len(content) > MaxContentBytes {
		return files.WriteResult{}, fmt.Errorf("write_file: content is %s; at most %s can be written in one call (write the file in parts: create it with the first part, then append the rest with the terminal, or generate it there)",
			SizeText(len(content)), SizeText(MaxContentBytes))
	}
	env, err := m.approvedWrite(ctx, key, path)
	if err != nil {
		return files.WriteResult{}, err
	}
	return files.Write(ctx, env, path, content)
}

// Patch replaces old with new in path in key's environment (the patch
// tool), after the approval gate allowed the write.
func (m *Manager) Patch(ctx context.Context, key, path, old, new string, replaceAll bool) (files.PatchResult, error) {
	if n := max(len(old), len(new)); n > MaxContentBytes {
		return files.PatchResult{}, fmt.Errorf("patch: old_string or new_string is %s; each may be at most %s (use write_file or the terminal for larger changes)",
			SizeText(n), SizeText(MaxContentBytes))
	}
	env, err := m.approvedWrite(ctx, key, path)
	if err != nil {
		return files.PatchResult{}, err
	}
	return files.Patch(ctx, env, path, old, new, replaceAll)
}

// Search searches files in key's environment (the search_files tool).
func (m *Manager) Search(ctx context.Context, key string, req files.SearchRequest) (files.SearchResult, error) {
	env, err := m.Env(ctx, key)
	if err != nil {
		return files.SearchResult{}, err
	}
	env.Touch()
	return files.Search(ctx, env, req)
}

// approvedWrite returns key's environment once the gate allowed a file
// tool to write path there; a refusal is the decision's *BlockedError.
func (m *Manager) approvedWrite(ctx context.Context, key, path string) (*terminal.Environment, error) {
	if key == "" {
		key = DefaultKey
	}
	env, err := m.Env(ctx, key)
	if err != nil {
		return nil, err
	}
	if d := m.gate.Write(ctx, key, path, m.approvalContext(env, "")); !d.Allowed() {
		return nil, d.Err()
	}
	env.Touch()
	return env, nil
}

// SizeText is a byte count as people read it in a message: "10 MiB",
// "12.5 MiB", "800 bytes".
func SizeText(n int) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	if n >= 1<<20 {
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d bytes", n)
}
