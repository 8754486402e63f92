package mcpserver

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/local"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/manager"
)

// panicky is a local backend whose first starts panic, as a bug in a
// backend would.
type panicky struct {
	backend.Backend
	left *atomic.Int32
}

func (p panicky) Start(ctx context.Context, spec backend.ProcSpec) (backend.Process, error) {
	if p.left.Add(-1) >= 0 {
		panic("backend bug: nil map write")
	}
	return p.Backend.Start(ctx, spec)
}

// F4: a panic inside a tool call becomes that call's error result; the
// server and the environment go on.
func TestPanicBecomesToolError(t *testing.T) {
	cfg, err := config.Load(config.LoadOptions{Getenv: func(k string) string {
		return map[string]string{"BERTH_HOME": t.TempDir()}[k]
	}})
	if err != nil {
		t.Fatal(err)
	}
	left := &atomic.Int32{}
	left.Store(2)
	m := manager.NewWithFactory(cfg, nil, func(ctx context.Context, opts backend.Options) (backend.Backend, error) {
		be, err := local.New(opts)
		return panicky{be, left}, err
	})
	t.Cleanup(func() { m.CloseAll(context.Background()) })
	cs := connect(t, m, nil)
	for _, tool := range []string{"terminal", "read_file"} {
		args := map[string]any{"command": "echo hi"}
		if tool == "read_file" {
			args = map[string]any{"path": "relative.txt"}
		}
		r, isErr := call(t, cs, tool, args)
		if !isErr || !strings.Contains(fmt.Sprint(r["error"]), "internal error") || !strings.Contains(fmt.Sprint(r["error"]), "nil map write") {
			t.Fatalf("%s with a panicking backend: %v (isError %v), want an error result naming the panic", tool, r, isErr)
		}
	}
	r, isErr := call(t, cs, "terminal", map[string]any{"command": "echo still here"})
	if isErr || r["output"] != "still here" {
		t.Fatalf("after the panics: %v", r)
	}
}

// F5: Shutdown interrupts a running call and its result (exit 130, the
// interrupt marker) still reaches the client before the session closes.
func TestShutdownInterruptsAndAnswers(t *testing.T) {
	m := newManager(t, false)
	srv := New(m, Options{Logger: slog.New(slog.DiscardHandler)})
	ts := httptest.NewServer(Handler(srv, "secret", nil))
	t.Cleanup(ts.Close)
	cs := httpClient(t, ts.URL, "secret")
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	arg := fmt.Sprintf("31339.%06d", time.Now().UnixNano()/1000%1000000) // no other process has it
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "terminal", Arguments: map[string]any{"command": "echo started; sleep " + arg}})
		done <- answer{res, err}
	}()
	waitFor(t, "the sleep to start", func() bool { return countProcs("sleep\x00"+arg) == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
	var a answer
	select {
	case a = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the call did not return after Shutdown")
	}
	if a.err != nil {
		t.Fatalf("the interrupted call got no result: %v", a.err)
	}
	r := decode(t, a.res)
	if r["exit_code"] != 130.0 || r["output"] != "started\n[Command interrupted]" {
		t.Fatalf("result %v, want exit 130 and the interrupt marker", r)
	}
	if n := countProcs("sleep\x00" + arg); n != 0 {
		t.Fatalf("%d sleep left running", n)
	}
	// Later calls are refused at once, not run.
	r2, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "terminal", Arguments: map[string]any{"command": "echo late"}})
	if err == nil && !r2.IsError && decode(t, r2)["output"] == "late" {
		t.Fatal("a call after Shutdown ran")
	}
}

// L7: a session sees and reaches only its own background processes.
func TestProcessesBelongToTheirSession(t *testing.T) {
	m := newManager(t, false)
	srv := New(m, Options{Logger: slog.New(slog.DiscardHandler)})
	ts := httptest.NewServer(Handler(srv, "secret", nil))
	t.Cleanup(ts.Close)
	a := httpClient(t, ts.URL, "secret")
	b := httpClient(t, ts.URL, "secret")
	r, _ := call(t, a, "terminal", map[string]any{"command": "sleep 31340", "background": true})
	id, _ := r["session_id"].(string)
	if !strings.HasPrefix(id, "proc_") {
		t.Fatalf("background start: %v", r)
	}
	r, _ = call(t, b, "process", map[string]any{"action": "list"})
	if list, _ := r["processes"].([]any); len(list) != 0 {
		t.Fatalf("B lists A's process: %v", r)
	}
	for _, action := range []string{"poll", "log", "wait", "write", "submit", "close", "kill"} {
		for _, ref := range []string{id, id[5:9], id[5:]} {
			r, isErr := call(t, b, "process", map[string]any{"action": action, "session_id": ref, "data": "x", "timeout": 1})
			if !isErr || r["status"] != "not_found" {
				t.Fatalf("B's %s of A's process by %q: %v", action, ref, r)
			}
		}
	}
	r, _ = call(t, a, "process", map[string]any{"action": "poll", "session_id": id[5:9]})
	if r["status"] != "running" {
		t.Fatalf("A's process after B's attempts: %v", r)
	}
	if r, _ = call(t, a, "process", map[string]any{"action": "kill", "session_id": id}); r["status"] != "killed" {
		t.Fatalf("A's kill: %v", r)
	}
}

// L8: over the session cap a new session is refused with a clear error;
// once one ends, a new one is accepted.
func TestSessionCap(t *testing.T) {
	m := newManager(t, false)
	srv := New(m, Options{Logger: slog.New(slog.DiscardHandler)})
	ts := httptest.NewServer(Handler(srv, "secret", &HTTPOptions{MaxSessions: 2}))
	t.Cleanup(ts.Close)
	a := httpClient(t, ts.URL, "secret")
	httpClient(t, ts.URL, "secret")
	tr := &mcp.StreamableClientTransport{Endpoint: ts.URL, HTTPClient: &http.Client{Transport: bearer{"secret", http.DefaultTransport}}, MaxRetries: -1}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "third", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	if err == nil {
		cs.Close()
		t.Fatal("a third session was accepted with a cap of 2")
	}
	// The refusal explains itself (the Go SDK shows only the status of a
	// 503; other clients show the body).
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	req, _ := http.NewRequest("POST", ts.URL, strings.NewReader(init))
	req.Header.Set("Authorization", "Bearer secret")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var rpc struct {
		ID    int                      `json:"id"`
		Error struct{ Message string } `json:"error"`
	}
	json.Unmarshal(body, &rpc)
	if resp.StatusCode != http.StatusServiceUnavailable || rpc.ID != 1 || !strings.Contains(rpc.Error.Message, "2 MCP sessions are open") || !strings.Contains(rpc.Error.Message, "--max-sessions") {
		t.Fatalf("refusal: status %d, body %s", resp.StatusCode, body)
	}
	a.Close()
	waitFor(t, "the closed session to end", func() bool {
		n := 0
		for ss := range srv.Sessions() {
			if ss.InitializeParams() != nil {
				n++
			}
		}
		return n == 1
	})
	httpClient(t, ts.URL, "secret")
}

// F8: a write_file within the content limit works over HTTP whatever its
// size; above it, or above the message limit, the call gets a tool error
// naming the limit (never a bare 413) and the session goes on.
func TestLargeWritesOverHTTP(t *testing.T) {
	m := newManager(t, false)
	srv := New(m, Options{Logger: slog.New(slog.DiscardHandler)})
	ts := httptest.NewServer(Handler(srv, "secret", nil))
	t.Cleanup(ts.Close)
	cs := httpClient(t, ts.URL, "secret")
	dir := t.TempDir()
	// 5 MiB (over the SDK's 4 MiB default body limit), with escaping.
	content := strings.Repeat("a \"quoted\" line\twith\\escapes\n", 5<<20/30)
	r, isErr := callWithin(t, 5*time.Minute, cs, "write_file", map[string]any{"path": dir + "/five.txt", "content": content})
	if isErr || r["bytes_written"] != float64(len(content)) {
		t.Fatalf("5 MiB write: %v", r)
	}
	if got, _ := os.ReadFile(dir + "/five.txt"); string(got) != content {
		t.Fatal("5 MiB write: content differs")
	}
	r, isErr = callWithin(t, 5*time.Minute, cs, "write_file", map[string]any{"path": dir + "/big.txt", "content": strings.Repeat("y", MaxContentBytes+1)})
	if !isErr || !strings.Contains(fmt.Sprint(r["error"]), "at most "+maxContentText) {
		t.Fatalf("write over the content limit: %v", r)
	}
	if _, err := os.Stat(dir + "/big.txt"); err == nil {
		t.Fatal("an over-limit write created the file")
	}

	// Over the message limit (a small one here): answered from the head
	// of the body, the rest never read.
	small := httptest.NewServer(Handler(srv, "secret", &HTTPOptions{MaxMessageBytes: 1 << 20}))
	t.Cleanup(small.Close)
	cs2 := httpClient(t, small.URL, "secret")
	r, isErr = callWithin(t, 5*time.Minute, cs2, "write_file", map[string]any{"path": dir + "/two.txt", "content": strings.Repeat("z", 2<<20)})
	if !isErr || !strings.Contains(fmt.Sprint(r["error"]), "write_file: the request is larger than 1 MiB") {
		t.Fatalf("write over the message limit: %v (isError %v)", r, isErr)
	}
	r, isErr = call(t, cs2, "terminal", map[string]any{"command": "echo after"})
	if isErr || r["output"] != "after" {
		t.Fatalf("session after an oversized message: %v", r)
	}
	// A request over the limit that is not a tool call gets a JSON-RPC
	// error with a message, not a bare status.
	body := `{"jsonrpc":"2.0","id":9,"method":"ping","params":{"pad":"` + strings.Repeat("p", 2<<20) + `"}}`
	req, _ := http.NewRequest("POST", small.URL, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer secret")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rpc struct {
		ID    int `json:"id"`
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&rpc); err != nil || rpc.ID != 9 || rpc.Error.Code != -32600 || !strings.Contains(rpc.Error.Message, "larger than 1 MiB") {
		t.Fatalf("oversized ping: status %d, %+v, %v", resp.StatusCode, rpc, err)
	}
}

// The limit the model is told is the limit enforced.
func TestAdvertisedContentLimit(t *testing.T) {
	if manager.SizeText(MaxContentBytes) != maxContentText {
		t.Fatalf("maxContentText %q, MaxContentBytes is %s", maxContentText, manager.SizeText(MaxContentBytes))
	}
	cs := connect(t, newManager(t, false), nil)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range res.Tools {
		if tool.Name != "write_file" {
			continue
		}
		schema, _ := json.Marshal(tool.InputSchema)
		if !strings.Contains(tool.Description, "at most "+maxContentText) || !strings.Contains(string(schema), "up to "+maxContentText) {
			t.Fatalf("write_file does not state the %s limit: %s / %s", maxContentText, tool.Description, schema)
		}
		if strings.Contains(tool.Description+string(schema), "50 MiB") {
			t.Fatal("write_file still promises 50 MiB")
		}
		return
	}
	t.Fatal("no write_file tool")
}

// L17: a NUL in workdir is refused, not dropped by the shell.
func TestWorkdirNULRefused(t *testing.T) {
	cs := connect(t, newManager(t, false), nil)
	for _, bg := range []bool{false, true} {
		r, isErr := call(t, cs, "terminal", map[string]any{"command": "pwd", "workdir": "/tmp\x00/etc", "background": bg})
		if !isErr || !strings.Contains(fmt.Sprint(r["error"]), "NUL") {
			t.Fatalf("workdir with a NUL (background %v): %v", bg, r)
		}
	}
}

// L1 (transport part): over-long lines are answered from their head;
// requests in them are not lost silently.
func TestStdioTransportOverlongLine(t *testing.T) {
	m := newManager(t, false)
	srv := New(m, Options{Logger: slog.New(slog.DiscardHandler)})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() {
		ran <- srv.Run(ctx, &StdioTransport{Reader: inR, Writer: outW, MaxMessageBytes: 4096, Logger: slog.New(slog.DiscardHandler)}, time.Second)
		outW.Close()
	}()
	lines := bufio.NewScanner(outR)
	lines.Buffer(nil, 1<<20)
	send := func(s string) {
		if _, err := io.WriteString(inW, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	next := func() map[string]any {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("no reply: %v", lines.Err())
		}
		var v map[string]any
		if err := json.Unmarshal(lines.Bytes(), &v); err != nil {
			t.Fatalf("reply %q: %v", lines.Text(), err)
		}
		return v
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	next()
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/tmp/x","content":"` + strings.Repeat("q", 10000) + `"}}}`)
	v := next()
	res, _ := v["result"].(map[string]any)
	if v["id"] != 2.0 || res["isError"] != true || !strings.Contains(fmt.Sprint(res["structuredContent"]), "larger than 4096 bytes") {
		t.Fatalf("over-long tools/call: %v", v)
	}
	send(`{"jsonrpc":"2.0","id":3,"method":"ping","params":{"x":"` + strings.Repeat("q", 10000) + `"}}`)
	if v = next(); v["id"] != 3.0 || v["error"] == nil {
		t.Fatalf("over-long ping: %v", v)
	}
	send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"terminal","arguments":{"command":"echo alive"}}}`)
	if v = next(); v["id"] != 4.0 || !strings.Contains(fmt.Sprint(v["result"]), "alive") {
		t.Fatalf("after the over-long lines: %v", v)
	}
	inW.Close()
	if err := <-ran; err != nil {
		t.Fatalf("Run after the input ended: %v", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// countProcs counts live processes whose raw cmdline contains needle.
func countProcs(needle string) int {
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	n := 0
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), needle) {
			n++
		}
	}
	return n
}
