package mcpserver

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/terminal"
)

// shimRm puts a fake rm first on PATH (the local backend's shells inherit
// this process's environment) that records its arguments in a file instead
// of removing anything, so a floor command that got through would show up
// here and harm nothing. It returns the record file.
func shimRm(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	record := filepath.Join(dir, "rm-called")
	script := "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '" + record + "'\nexit 1\n"
	if err := os.WriteFile(filepath.Join(dir, "rm"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return record
}

// approvalServer is the real berth MCP server on the local backend with a
// config file in a private berth home.
type approvalServer struct {
	m      *manager.Manager
	config string // the config file
	home   string // $HOME as berth sees it
	record string // the rm shim's record
}

func newApprovalServer(t *testing.T, configText string) *approvalServer {
	t.Helper()
	record := shimRm(t)
	dir := t.TempDir()
	bh := filepath.Join(dir, "berth")
	path := filepath.Join(bh, "config.yaml")
	if err := os.MkdirAll(bh, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(configText), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"BERTH_HOME": bh, "HOME": dir}
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
	return &approvalServer{m: m, config: path, home: dir, record: record}
}

// connect serves a fresh server and connects a go-sdk client speaking
// version ("" = the SDK's latest) with copts.
func (a *approvalServer) connect(t *testing.T, version string, copts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	srv := New(a.m, Options{Logger: slog.New(slog.DiscardHandler)})
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, copts).Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
	})
	return cs
}

// noRm fails the test if the rm shim was ever called.
func (a *approvalServer) noRm(t *testing.T) {
	t.Helper()
	if b, err := os.ReadFile(a.record); err == nil {
		t.Errorf("rm reached the environment: %s", b)
	}
}

// dangerous returns a command on a rule that needs approval (a recursive
// chmod of a fresh directory) that creates marker when it runs.
func dangerous(t *testing.T) (cmd, marker string) {
	dir := t.TempDir()
	marker = filepath.Join(dir, "ran")
	return "chmod -R u+rw " + dir + " && echo RAN && : > " + marker, marker
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func TestServerApprovalAnswers(t *testing.T) {
	for _, pr := range protocols {
		t.Run(pr.name, func(t *testing.T) {
			a := newApprovalServer(t, "# mine\napprovals:\n  mode: manual # ask\n")

			// once: runs, and the result says who approved it.
			h := &human{reply: choose("once")}
			cs := a.connect(t, pr.version, &mcp.ClientOptions{ElicitationHandler: h.handler})
			cmd, marker := dangerous(t)
			out, isErr := call(t, cs, "terminal", map[string]any{"command": cmd})
			ap := approvalOf(out)
			if isErr || strings.TrimSpace(out["output"].(string)) != "RAN" || !exists(marker) || ap["decision"] != "approved_once" || ap["by"] != "user" || ap["rule"] != "chmod-recursive" {
				t.Fatalf("once: %v", out)
			}
			if h.asked() != 1 || !strings.Contains(h.messages[0], cmd) || !strings.Contains(h.messages[0], "chmod-recursive") {
				t.Errorf("question: %q", h.messages)
			}

			// decline and cancel: denied, nothing run.
			for _, action := range []string{"decline", "cancel"} {
				h := &human{reply: func(context.Context) (*mcp.ElicitResult, error) { return &mcp.ElicitResult{Action: action}, nil }}
				cs := a.connect(t, pr.version, &mcp.ClientOptions{ElicitationHandler: h.handler})
				cmd, marker := dangerous(t)
				out, isErr := call(t, cs, "terminal", map[string]any{"command": cmd})
				msg, _ := out["error"].(string)
				if !isErr || exists(marker) || approvalOf(out)["decision"] != "denied" || !strings.HasPrefix(msg, "BLOCKED: the user denied") || out["exit_code"] != float64(terminal.StatusBlocked) {
					t.Errorf("%s: %v", action, out)
				}
			}

			// always: runs, lands in the config file (comments kept), and is
			// not asked again, on this connection or the next one.
			h = &human{reply: choose("always")}
			cs = a.connect(t, pr.version, &mcp.ClientOptions{ElicitationHandler: h.handler})
			cmd, marker = dangerous(t)
			out, isErr = call(t, cs, "terminal", map[string]any{"command": cmd})
			if isErr || !exists(marker) || approvalOf(out)["decision"] != "approved_always" {
				t.Fatalf("always: %v", out)
			}
			text, err := os.ReadFile(a.config)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(text), "# mine\napprovals:\n  mode: manual # ask\n") || !strings.Contains(string(text), "command_allowlist: [") {
				t.Errorf("config file after always:\n%s", text)
			}
			cfg, err := config.Load(config.LoadOptions{ConfigPath: a.config, Getenv: func(string) string { return "" }})
			// As in Hermes, always saves the pattern's key (item 11).
			if err != nil || len(cfg.CommandAllowlist) != 1 || cfg.CommandAllowlist[0] != "recursive permission change" {
				t.Fatalf("saved allowlist %v, %v", cfg, err)
			}
			cs = a.connect(t, pr.version, &mcp.ClientOptions{ElicitationHandler: h.handler})
			out, isErr = call(t, cs, "terminal", map[string]any{"command": cmd})
			if ap := approvalOf(out); isErr || ap["decision"] != "allowed" || ap["by"] != "allowlist" || h.asked() != 1 {
				t.Errorf("after always: asked %d, %v", h.asked(), out)
			}
			a.noRm(t)
		})
	}
}

// Silence denies once approvals.timeout has passed.
func TestServerApprovalTimeout(t *testing.T) {
	for _, pr := range protocols {
		t.Run(pr.name, func(t *testing.T) {
			a := newApprovalServer(t, "approvals:\n  timeout: 1\n")
			// The user answers only after the timeout (or when the server
			// gives up on the question).
			h := &human{reply: func(ctx context.Context) (*mcp.ElicitResult, error) {
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(1500 * time.Millisecond):
				}
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "once"}}, nil
			}}
			cs := a.connect(t, pr.version, &mcp.ClientOptions{ElicitationHandler: h.handler})
			cmd, marker := dangerous(t)
			out, isErr := call(t, cs, "terminal", map[string]any{"command": cmd})
			ap := approvalOf(out)
			if !isErr || exists(marker) || ap["decision"] != "denied" || ap["by"] != "timeout" {
				t.Fatalf("timeout: %v", out)
			}
			if msg, _ := out["error"].(string); !strings.Contains(msg, "did not answer within 1s") {
				t.Errorf("message %q", msg)
			}
		})
	}
}

// A client without elicitation gets BLOCKED with what the user can do; the
// floor is blocked before any question, in every mode; write_file and patch
// to sensitive paths are gated like commands.
func TestServerApprovalWithoutElicitation(t *testing.T) {
	for _, mode := range []string{"manual", "off"} {
		t.Run(mode, func(t *testing.T) {
			a := newApprovalServer(t, "approvals:\n  mode: "+mode+"\n")
			cs := a.connect(t, "", nil)
			for _, cmd := range []string{"rm -rf --no-preserve-root /", "cd / && rm -rf *", "sudo -u root rm -rf /usr/.."} {
				out, isErr := call(t, cs, "terminal", map[string]any{"command": cmd})
				msg, _ := out["error"].(string)
				if !isErr || approvalOf(out)["by"] != "floor" || !strings.HasPrefix(msg, "BLOCKED: ") || !strings.Contains(msg, "hardline floor") {
					t.Errorf("floor %q: %v", cmd, out)
				}
				out, isErr = call(t, cs, "terminal", map[string]any{"command": cmd, "background": true})
				if !isErr || approvalOf(out)["by"] != "floor" || out["session_id"] != nil {
					t.Errorf("floor in the background %q: %v", cmd, out)
				}
			}
			a.noRm(t)

			cmd, marker := dangerous(t)
			out, isErr := call(t, cs, "terminal", map[string]any{"command": cmd})
			if mode == "off" {
				if isErr || !exists(marker) || approvalOf(out)["by"] != "mode" {
					t.Errorf("mode off: %v", out)
				}
				return
			}
			msg, _ := out["error"].(string)
			if !isErr || exists(marker) || approvalOf(out)["decision"] != "blocked" ||
				!strings.Contains(msg, "does not support elicitation") ||
				!strings.Contains(msg, "Only the user can allow it") ||
				strings.Contains(msg, "berth config set") {
				t.Errorf("without elicitation: %v", out)
			}

			rc := filepath.Join(a.home, ".bashrc")
			out, isErr = call(t, cs, "write_file", map[string]any{"path": rc, "content": "alias ls=rm\n"})
			if msg, _ := out["error"].(string); !isErr || exists(rc) || !strings.HasPrefix(msg, "BLOCKED: ") || approvalOf(out)["rule"] == nil {
				t.Errorf("write_file %s: %v", rc, out)
			}
			env := filepath.Join(t.TempDir(), ".env")
			if err := os.WriteFile(env, []byte("A=1\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			out, isErr = call(t, cs, "patch", map[string]any{"path": env, "old_string": "A=1", "new_string": "A=2"})
			if b, _ := os.ReadFile(env); !isErr || string(b) != "A=1\n" || approvalOf(out)["decision"] != "blocked" {
				t.Errorf("patch %s: %v (file %q)", env, out, b)
			}
			// An ordinary file is written without a question.
			plain := filepath.Join(t.TempDir(), "notes.txt")
			if out, isErr := call(t, cs, "write_file", map[string]any{"path": plain, "content": "x"}); isErr || !exists(plain) {
				t.Errorf("ordinary write: %v", out)
			}
		})
	}
}

// With elicitation, a write to a sensitive path is asked like a command.
func TestServerApprovalWriteAsked(t *testing.T) {
	a := newApprovalServer(t, "")
	h := &human{reply: choose("once")}
	cs := a.connect(t, "2025-11-25", &mcp.ClientOptions{ElicitationHandler: h.handler})
	rc := filepath.Join(a.home, ".bashrc")
	out, isErr := call(t, cs, "write_file", map[string]any{"path": rc, "content": "export A=1\n"})
	if b, _ := os.ReadFile(rc); isErr || string(b) != "export A=1\n" || h.asked() != 1 || !strings.Contains(h.messages[0], rc) {
		t.Errorf("write after once: %v asked %d", out, h.asked())
	}
}

// Input to a background process that needs approval (a shell runs what it
// is sent) is asked like a command, through the process tool's own call.
func TestServerProcessInputAsked(t *testing.T) {
	for _, pr := range protocols {
		t.Run(pr.name, func(t *testing.T) {
			a := newApprovalServer(t, "")
			h := &human{reply: choose("once")}
			cs := a.connect(t, pr.version, &mcp.ClientOptions{ElicitationHandler: h.handler})
			out, isErr := call(t, cs, "terminal", map[string]any{"command": "exec bash --norc --noprofile", "background": true})
			id, _ := out["session_id"].(string)
			if isErr || id == "" {
				t.Fatalf("start: %v", out)
			}
			t.Cleanup(func() { call(t, cs, "process", map[string]any{"action": "kill", "session_id": id}) })
			cmd, marker := dangerous(t)
			out, isErr = call(t, cs, "process", map[string]any{"action": "submit", "session_id": id, "data": cmd})
			if isErr || out["status"] != "ok" || h.asked() != 1 || !strings.Contains(h.messages[0], "chmod-recursive") {
				t.Fatalf("submit approved once: %v, asked %d", out, h.asked())
			}
			for deadline := time.Now().Add(30 * time.Second); !exists(marker); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the approved input did not run")
				}
			}
		})
	}
}
