package manager

import (
	"context"
	"fmt"

	"github.com/a55dbaac/berth/approval"
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
// *approval.BlockedError, whose Decision says why; the user is asked
// through the call's asker (WithAsker), as for commands.

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
// tool), after the approval gate allowed the write. opts give the call's
// asker (Call).
func (m *Manager) WriteFile(ctx context.Context, key, path, content string, opts ...CallOption) (files.WriteResult, error) {
	if len(content) > MaxContentBytes {
		return files.WriteResult{}, fmt.Errorf("write_file: content is %s; at most %s can be written in one call (write the file in parts: create it with the first part, then append the rest with the terminal, or generate it there)",
			SizeText(len(content)), SizeText(MaxContentBytes))
	}
	env, check, err := m.writeCheck(ctx, key, callOf(opts).Asker)
	if err != nil {
		return files.WriteResult{}, err
	}
	return files.Write(ctx, env, path, content, files.WithCheck(check))
}

// Patch replaces old with new in path in key's environment (the patch
// tool), after the approval gate allowed the write. opts give the call's
// asker (Call).
func (m *Manager) Patch(ctx context.Context, key, path, old, new string, replaceAll bool, opts ...CallOption) (files.PatchResult, error) {
	if n := max(len(old), len(new)); n > MaxContentBytes {
		return files.PatchResult{}, fmt.Errorf("patch: old_string or new_string is %s; each may be at most %s (use write_file or the terminal for larger changes)",
			SizeText(n), SizeText(MaxContentBytes))
	}
	env, check, err := m.writeCheck(ctx, key, callOf(opts).Asker)
	if err != nil {
		return files.PatchResult{}, err
	}
	return files.Patch(ctx, env, path, old, new, replaceAll, files.WithCheck(check))
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

// writeCheck returns key's environment and the check a file tool's write
// passes there before anything is written: the approval gate, asked about
// the place the write lands. On this machine's files the files package
// resolves the path's symbolic links once and gives the result to the
// check, which the gate then judges (its Resolve answers that result for
// the path), and the write goes exactly there, following no link: a link
// swapped between the check and the write cannot carry it into berth's
// home or anywhere else the gate did not see (N2). A refusal is the
// decision's *BlockedError.
func (m *Manager) writeCheck(ctx context.Context, key string, asker approval.Asker) (*terminal.Environment, files.Check, error) {
	if key == "" {
		key = DefaultKey
	}
	env, err := m.Env(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	check := func(path, lands string) error {
		c := m.approvalContext(env, "")
		if lands != "" {
			resolve := c.Resolve
			c.Resolve = func(p string) string {
				if p == path {
					return lands
				}
				if resolve == nil {
					return p
				}
				return resolve(p)
			}
		}
		if d := m.gate.Write(ctx, key, path, c, asker); !d.Allowed() {
			return d.Err()
		}
		env.Touch()
		return nil
	}
	return env, check, nil
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
