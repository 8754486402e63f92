package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// berthEnv is the environment of a berth process under test: a private
// BERTH_HOME and no configuration from the machine.
func berthEnv(t *testing.T, extra ...string) []string {
	return append(os.Environ(), append([]string{"BERTH_HOME=" + t.TempDir(), "BERTH_CONFIG=", "TERMINAL_ENV=", "BERTH_TOKEN=", "BERTH_NO_DAEMON=1"}, extra...)...)
}

// mcpCall calls a tool and decodes the JSON text of its result.
func mcpCall(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	if len(res.Content) != 1 {
		t.Fatalf("%s: %d content blocks", name, len(res.Content))
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &out); err != nil {
		t.Fatalf("%s: result is not JSON: %v", name, err)
	}
	if res.StructuredContent == nil {
		t.Fatalf("%s: no structured content", name)
	}
	return out
}

// exercise runs the scenario both transports share: tools listed, a
// command, cwd persistence, write/patch/read, and an interrupted command.
func exercise(t *testing.T, cs *mcp.ClientSession) {
	ctx := context.Background()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	sort.Strings(names)
	for _, want := range []string{"patch", "process", "read_file", "search_files", "terminal", "write_file"} {
		if i := sort.SearchStrings(names, want); i == len(names) || names[i] != want {
			t.Fatalf("tools %v lack %s", names, want)
		}
	}

	dir := t.TempDir()
	r := mcpCall(t, cs, "terminal", map[string]any{"command": "cd " + dir + " && echo hello"})
	if r["output"] != "hello" || r["exit_code"] != 0.0 || r["error"] != nil || r["cwd"] != dir {
		t.Fatalf("first command: %v", r)
	}
	r = mcpCall(t, cs, "terminal", map[string]any{"command": "pwd; export FOO=bar"})
	if r["output"] != dir {
		t.Fatalf("cwd did not persist: %v", r)
	}
	r = mcpCall(t, cs, "terminal", map[string]any{"command": "echo $FOO"})
	if r["output"] != "bar" {
		t.Fatalf("exported variable did not persist: %v", r)
	}

	r = mcpCall(t, cs, "write_file", map[string]any{"path": "notes/todo.txt", "content": "one\ntwo\nthree\n"})
	if r["bytes_written"] != 14.0 || r["path"] != dir+"/notes/todo.txt" {
		t.Fatalf("write_file: %v", r)
	}
	r = mcpCall(t, cs, "patch", map[string]any{"path": "notes/todo.txt", "old_string": "two\n", "new_string": "2\n"})
	if r["replacements"] != 1.0 || !strings.Contains(r["diff"].(string), "-two\n+2\n") {
		t.Fatalf("patch: %v", r)
	}
	r = mcpCall(t, cs, "read_file", map[string]any{"path": dir + "/notes/todo.txt", "offset": 2, "limit": 1})
	if r["content"] != "     2|2" || r["total_lines"] != 3.0 || r["truncated"] != true || !strings.Contains(r["hint"].(string), "offset=3") {
		t.Fatalf("read_file: %v", r)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "notes/todo.txt")); err != nil || string(b) != "one\n2\nthree\n" {
		t.Fatalf("file on disk: %q %v", b, err)
	}
	r = mcpCall(t, cs, "read_file", map[string]any{"path": "notes/todo.tx"})
	if e, _ := r["error"].(string); !strings.Contains(e, "todo.txt") {
		t.Fatalf("missing file: %v", r)
	}

	// A background process inherits the session's state and is followed
	// with the process tool until it exits.
	r = mcpCall(t, cs, "terminal", map[string]any{"command": "sleep 0.3; echo \"bg $FOO $PWD\"", "background": true})
	id, _ := r["session_id"].(string)
	if r["output"] != "Background process started" || !strings.HasPrefix(id, "proc_") {
		t.Fatalf("background start: %v", r)
	}
	r = mcpCall(t, cs, "process", map[string]any{"action": "wait", "session_id": id, "timeout": 30})
	if r["status"] != "exited" || r["exit_code"] != 0.0 || r["output"] != "bg bar "+dir {
		t.Fatalf("process wait: %v", r)
	}

	// A cancelled call interrupts its command: afterwards nothing of it
	// runs and the shell still works.
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "terminal", Arguments: map[string]any{"command": "sleep 31338"}})
		errc <- err
	}()
	time.Sleep(700 * time.Millisecond)
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("cancelled call succeeded")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r = mcpCall(t, cs, "terminal", map[string]any{"command": "ps -eo args | grep -c '^sleep 31338' || true"})
		if r["output"] == "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sleep still running after the cancel: %v", r)
		}
		time.Sleep(100 * time.Millisecond)
	}
	r = mcpCall(t, cs, "terminal", map[string]any{"command": "pwd; echo $FOO"})
	if r["output"] != dir+"\nbar" {
		t.Fatalf("state after the interrupt: %v", r)
	}
}

// TestMCPStdio drives the real `berth mcp` binary with the SDK's client
// over stdio.
func TestMCPStdio(t *testing.T) {
	cmd := exec.Command(berthBin, "mcp")
	cmd.Env = berthEnv(t)
	cmd.Stderr = os.Stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "berth-test", Version: "1"}, nil).
		Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	exercise(t, cs)
	if err := cs.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	if cmd.ProcessState == nil {
		t.Fatal("berth mcp still running after the client closed")
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("berth mcp exited with %d after stdin closed", code)
	}
}

// startServe starts `berth serve` on a free loopback port and returns its
// MCP URL; the process is stopped with SIGTERM at the end of the test.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(berthBin, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = berthEnv(t)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	urlc := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		for sc.Scan() {
			line := sc.Text()
			if _, url, ok := strings.Cut(line, "listening on "); ok {
				urlc <- url
			}
			t.Log("serve: " + line)
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-scanned: // EOF on stderr: the process exited
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-scanned
			t.Error("berth serve did not stop within 20 s of SIGTERM")
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("berth serve after SIGTERM: %v", err)
		}
	})
	select {
	case url := <-urlc:
		return url
	case <-time.After(30 * time.Second):
		t.Fatal("berth serve did not report its address")
	}
	return ""
}

type withToken struct {
	token string
}

func (w withToken) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+w.token)
	return http.DefaultTransport.RoundTrip(r)
}

func TestServeHTTP(t *testing.T) {
	url := startServe(t, "--token", "test-token-123")

	// Without the token, or with a wrong one: 401, nothing reached.
	initBody := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	for _, auth := range []string{"", "Bearer wrong-token", "Bearer test-token-12", "test-token-123"} {
		req, _ := http.NewRequest("POST", url, strings.NewReader(initBody))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Mcp-Session-Id") != "" {
			t.Fatalf("Authorization %q: status %d, session %q, body %s", auth, resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), body)
		}
	}
	bad := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: withToken{"nope"}}, MaxRetries: -1}
	if cs, err := mcp.NewClient(&mcp.Implementation{Name: "x", Version: "1"}, nil).Connect(context.Background(), bad, nil); err == nil {
		cs.Close()
		t.Fatal("a client with a wrong token connected")
	}

	tr := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: withToken{"test-token-123"}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "berth-test", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	exercise(t, cs)

	// berth ps sees a background job started over MCP; wrong token: refused.
	bg := mcpCall(t, cs, "terminal", map[string]any{"command": "sleep 1242", "background": true})
	id, _ := bg["session_id"].(string)
	out, errs, code, _ := berthWithEnv(t, []string{"BERTH_TOKEN=test-token-123"}, "ps", "--url", url)
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "sleep 1242") || !strings.Contains(out, "running") {
		t.Fatalf("berth ps: exit %d out %q err %q, want %s running", code, out, errs, id)
	}
	_, errs, code, _ = berthWithEnv(t, []string{"BERTH_TOKEN=wrong"}, "ps", "--url", url)
	if code == 0 || !strings.Contains(errs, "401") {
		t.Fatalf("berth ps with a wrong token: exit %d err %q", code, errs)
	}
	mcpCall(t, cs, "process", map[string]any{"action": "kill", "session_id": id})
}

func TestServeTokenRules(t *testing.T) {
	// Public address without a token: refused before listening.
	_, errs, code, _ := berthWithEnv(t, []string{"BERTH_TOKEN="}, "serve", "--listen", "0.0.0.0:0")
	if code != errorStatus || !strings.Contains(errs, "refusing") || !strings.Contains(errs, "token") {
		t.Fatalf("0.0.0.0 without a token: exit %d, stderr %q", code, errs)
	}
	_, errs, code, _ = berthWithEnv(t, []string{"BERTH_TOKEN="}, "serve", "--listen", ":0")
	if code != errorStatus || !strings.Contains(errs, "refusing") {
		t.Fatalf(":0 without a token: exit %d, stderr %q", code, errs)
	}
	// Loopback without a token: a random one is made up and printed.
	cmd := exec.Command(berthBin, "serve", "--listen", "127.0.0.1:0")
	cmd.Env = berthEnv(t)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	sc := bufio.NewScanner(stderr)
	var token, url string
	for (token == "" || url == "") && sc.Scan() {
		if _, tok, ok := strings.Cut(sc.Text(), "use this one: "); ok {
			token = tok
		}
		if _, u, ok := strings.Cut(sc.Text(), "listening on "); ok {
			url = u
		}
	}
	if len(token) < 32 || url == "" {
		t.Fatalf("loopback without a token: token %q, url %q", token, url)
	}
	tr := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: withToken{token}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "x", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatalf("client with the printed token: %v", err)
	}
	cs.Close()
}

// berthWithEnv runs the binary to completion with extra environment.
func berthWithEnv(t *testing.T, extra []string, args ...string) (stdout, stderr string, code int, st *os.ProcessState) {
	t.Helper()
	cmd := exec.Command(berthBin, args...)
	cmd.Env = berthEnv(t, extra...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	done := make(chan struct{})
	go func() {
		cmd.Run()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("berth %v did not exit", args)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode(), cmd.ProcessState
}
