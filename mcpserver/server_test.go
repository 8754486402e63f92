package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	_ "github.com/a55dbaac/berth/backend/local"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/manager"
)

// newManager returns a manager on the local backend with a private home.
func newManager(t *testing.T, share bool) *manager.Manager {
	t.Helper()
	home := t.TempDir()
	env := map[string]string{"BERTH_HOME": home}
	if share {
		env["TERMINAL_SHARE_ENVIRONMENT"] = "true"
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

// recorder keeps the results of tools/call as the server produced them,
// including calls the client cancelled (whose responses are never sent).
type recorder struct {
	mu      sync.Mutex
	results []*mcp.CallToolResult
}

func (r *recorder) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if ctr, ok := res.(*mcp.CallToolResult); ok && method == "tools/call" {
			r.mu.Lock()
			r.results = append(r.results, ctr)
			r.mu.Unlock()
		}
		return res, err
	}
}

func (r *recorder) last() *mcp.CallToolResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.results) == 0 {
		return nil
	}
	return r.results[len(r.results)-1]
}

// connect serves a new server for m in memory and returns a client session.
func connect(t *testing.T, m *manager.Manager, rec *recorder) *mcp.ClientSession {
	t.Helper()
	srv := New(m, Options{Logger: slog.New(slog.DiscardHandler)})
	if rec != nil {
		srv.AddReceivingMiddleware(rec.middleware)
	}
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
	})
	return cs
}

// call invokes a tool and decodes its JSON text content, checking that the
// structured content says the same.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (map[string]any, bool) {
	t.Helper()
	return callWithin(t, time.Minute, cs, name, args)
}

// callWithin is call with its own hang guard, for calls that carry
// megabytes: under the race detector on a busy machine they take a minute
// or more, and how long is not what the tests check.
func callWithin(t *testing.T, guard time.Duration, cs *mcp.ClientSession, name string, args map[string]any) (map[string]any, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		shown := fmt.Sprint(args)
		if len(shown) > 300 {
			shown = shown[:300] + fmt.Sprintf("... (%d bytes)", len(shown))
		}
		t.Fatalf("%s %s: %v", name, shown, err)
	}
	return decode(t, res), res.IsError
}

func decode(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	if len(res.Content) != 1 {
		t.Fatalf("result has %d content blocks, want 1", len(res.Content))
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content is %T, want text", res.Content[0])
	}
	var text map[string]any
	if err := json.Unmarshal([]byte(tc.Text), &text); err != nil {
		t.Fatalf("text content is not a JSON object: %q", tc.Text)
	}
	sc, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var structured map[string]any
	if err := json.Unmarshal(sc, &structured); err != nil || !jsonEqual(text, structured) {
		t.Fatalf("structured content %s differs from text %s", sc, tc.Text)
	}
	return text
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func TestToolsListed(t *testing.T) {
	cs := connect(t, newManager(t, false), nil)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	props := map[string][]string{}
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		schema, _ := json.Marshal(tool.InputSchema)
		var s struct {
			Properties map[string]any `json:"properties"`
			Required   []string       `json:"required"`
		}
		json.Unmarshal(schema, &s)
		for p := range s.Properties {
			props[tool.Name] = append(props[tool.Name], p)
		}
		sort.Strings(props[tool.Name])
		if tool.Description == "" {
			t.Errorf("%s has no description", tool.Name)
		}
		if tool.Name == "terminal" && strings.Join(s.Required, ",") != "command" {
			t.Errorf("terminal requires %v, want [command]", s.Required)
		}
	}
	sort.Strings(names)
	if got := strings.Join(names, ","); got != "patch,process,read_file,search_files,terminal,write_file" {
		t.Fatalf("tools %s", got)
	}
	want := map[string]string{
		"terminal":     "background,command,on_timeout,pty,timeout,workdir",
		"read_file":    "limit,offset,path",
		"write_file":   "content,path",
		"patch":        "new_string,old_string,path,replace_all",
		"search_files": "context,file_glob,limit,offset,path,pattern,target",
		"process":      "action,data,limit,offset,session_id,timeout",
	}
	for tool, w := range want {
		if got := strings.Join(props[tool], ","); got != w {
			t.Errorf("%s parameters %s, want %s", tool, got, w)
		}
	}
}

func TestTerminalAndCwdPersist(t *testing.T) {
	cs := connect(t, newManager(t, false), nil)
	dir := t.TempDir()
	r, isErr := call(t, cs, "terminal", map[string]any{"command": "cd " + dir + " && echo hi"})
	if isErr || r["output"] != "hi" || r["exit_code"] != 0.0 || r["error"] != nil || r["cwd"] != dir {
		t.Fatalf("first call: %v", r)
	}
	if _, present := r["error"]; !present {
		t.Fatal("error field missing; the contract wants it always present")
	}
	r, _ = call(t, cs, "terminal", map[string]any{"command": "pwd"})
	if r["output"] != dir {
		t.Fatalf("cwd did not persist: %v", r)
	}
	r, _ = call(t, cs, "terminal", map[string]any{"command": "pwd", "workdir": "/"})
	if r["output"] != "/" {
		t.Fatalf("workdir: %v", r)
	}
	r, _ = call(t, cs, "terminal", map[string]any{"command": "grep x /dev/null"})
	if r["exit_code"] != 1.0 || r["exit_code_meaning"] == nil {
		t.Fatalf("grep no match: %v", r)
	}
	r, _ = call(t, cs, "terminal", map[string]any{"command": "sleep 5", "timeout": 1})
	if r["exit_code"] != 124.0 || !strings.HasSuffix(r["output"].(string), "[Command timed out after 1s]") {
		t.Fatalf("timeout: %v", r)
	}
	r, isErr = call(t, cs, "terminal", map[string]any{"command": "pwd", "workdir": "relative"})
	if !isErr || r["error"] == nil || r["exit_code"] != -1.0 || !strings.Contains(r["error"].(string), "absolute") {
		t.Fatalf("bad workdir: %v (isError %v)", r, isErr)
	}
}

func TestBackgroundAndProcessTool(t *testing.T) {
	cs := connect(t, newManager(t, false), nil)
	r, isErr := call(t, cs, "terminal", map[string]any{"command": `read line; echo "got:$line"`, "background": true})
	id, _ := r["session_id"].(string)
	if isErr || r["output"] != "Background process started" || !strings.HasPrefix(id, "proc_") || r["exit_code"] != 0.0 {
		t.Fatalf("background start: %v", r)
	}
	if _, ok := r["pid"]; !ok {
		t.Fatalf("background result lacks pid: %v", r)
	}
	r, _ = call(t, cs, "process", map[string]any{"action": "list"})
	if list, _ := r["processes"].([]any); len(list) != 1 {
		t.Fatalf("list: %v", r)
	}
	if r, _ = call(t, cs, "process", map[string]any{"action": "submit", "session_id": id[5:11], "data": "over mcp"}); r["status"] != "ok" {
		t.Fatalf("submit by prefix: %v", r)
	}
	r, _ = call(t, cs, "process", map[string]any{"action": "wait", "session_id": id, "timeout": 20})
	if r["status"] != "exited" || r["output"] != "got:over mcp" || r["exit_code"] != 0.0 {
		t.Fatalf("wait: %v", r)
	}
	r, isErr = call(t, cs, "process", map[string]any{"action": "poll", "session_id": "proc_000000000000"})
	if !isErr || r["status"] != "not_found" {
		t.Fatalf("unknown id: %v (isError %v)", r, isErr)
	}
	r, _ = call(t, cs, "terminal", map[string]any{"command": "echo long", "timeout": 601})
	if id, _ := r["session_id"].(string); !strings.HasPrefix(id, "proc_") || !strings.Contains(fmt.Sprint(r["output"]), "background") {
		t.Fatalf("timeout over the foreground limit: %v", r)
	}
}

func TestFileTools(t *testing.T) {
	cs := connect(t, newManager(t, false), nil)
	dir := t.TempDir()
	call(t, cs, "terminal", map[string]any{"command": "cd " + dir})
	r, isErr := call(t, cs, "write_file", map[string]any{"path": "src/hello.py", "content": "def hello():\n    return 'hi'\n"})
	if isErr || r["bytes_written"] != 29.0 || r["path"] != dir+"/src/hello.py" {
		t.Fatalf("write_file: %v", r)
	}
	r, isErr = call(t, cs, "patch", map[string]any{"path": "src/hello.py", "old_string": "'hi'", "new_string": "'hello'"})
	if isErr || r["replacements"] != 1.0 || !strings.Contains(r["diff"].(string), "-    return 'hi'\n+    return 'hello'\n") {
		t.Fatalf("patch: %v", r)
	}
	r, isErr = call(t, cs, "read_file", map[string]any{"path": dir + "/src/hello.py"})
	if isErr || r["content"] != "     1|def hello():\n     2|    return 'hello'" || r["total_lines"] != 2.0 || r["truncated"] != false {
		t.Fatalf("read_file: %v", r)
	}
	r, isErr = call(t, cs, "search_files", map[string]any{"pattern": "hello", "file_glob": "*.py"})
	if isErr || r["total"] != 2.0 || len(r["matches"].([]any)) != 2 {
		t.Fatalf("search_files: %v", r)
	}
	r, isErr = call(t, cs, "search_files", map[string]any{"pattern": "*.py", "target": "files"})
	if isErr || r["total"] != 1.0 || r["files"].([]any)[0] != dir+"/src/hello.py" {
		t.Fatalf("search_files files: %v", r)
	}
	r, isErr = call(t, cs, "read_file", map[string]any{"path": "src/helo.py"})
	if !isErr || len(r) != 1 || !strings.Contains(r["error"].(string), "hello.py") {
		t.Fatalf("read of a missing file: %v (isError %v), want only an error naming hello.py", r, isErr)
	}
	r, isErr = call(t, cs, "patch", map[string]any{"path": "src/hello.py", "old_string": "nope", "new_string": "x"})
	if !isErr || !strings.Contains(r["error"].(string), "not found") {
		t.Fatalf("patch not found: %v", r)
	}
	os.WriteFile(filepath.Join(dir, "img.png"), []byte("\x89PNG\r\n\x1a\n\x00\x00"), 0o644)
	r, isErr = call(t, cs, "read_file", map[string]any{"path": "img.png"})
	if !isErr || !strings.Contains(r["error"].(string), "PNG") {
		t.Fatalf("binary read: %v", r)
	}
}

// TestCancelInterrupts checks that a client's cancel reaches the command:
// the server's result carries the interrupt marker and 130, the command's
// process is gone, and the session keeps working.
func TestCancelInterrupts(t *testing.T) {
	rec := &recorder{}
	cs := connect(t, newManager(t, false), rec)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "terminal", Arguments: map[string]any{"command": "echo started; sleep 31337"}})
		done <- err
	}()
	time.Sleep(700 * time.Millisecond)
	start := time.Now()
	cancel()
	if err := <-done; err == nil {
		t.Fatal("cancelled call returned no error")
	}
	deadline := time.Now().Add(10 * time.Second)
	var res *mcp.CallToolResult
	for time.Now().Before(deadline) {
		if res = rec.last(); res != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if res == nil {
		t.Fatal("the server never finished the cancelled call")
	}
	t.Logf("server finished %s after the cancel", time.Since(start))
	r := decode(t, res)
	if r["exit_code"] != 130.0 || r["output"] != "started\n[Command interrupted]" {
		t.Fatalf("cancelled result %v, want exit 130 and the interrupt marker", r)
	}
	r, _ = call(t, cs, "terminal", map[string]any{"command": "ps -eo args | grep -c '^sleep 31337' || true"})
	if r["output"] != "0" {
		t.Fatalf("sleep still running after the cancel: %v", r)
	}
}

func TestEnvironmentPerSessionOrShared(t *testing.T) {
	for _, share := range []bool{false, true} {
		m := newManager(t, share)
		srv := New(m, Options{Logger: slog.New(slog.DiscardHandler)})
		ts := httptest.NewServer(Handler(srv, "secret", nil))
		t.Cleanup(ts.Close)
		a := httpClient(t, ts.URL, "secret")
		b := httpClient(t, ts.URL, "secret")
		call(t, a, "terminal", map[string]any{"command": "cd /tmp"})
		r, _ := call(t, b, "terminal", map[string]any{"command": "pwd"})
		if shared := r["output"] == "/tmp"; shared != share {
			t.Fatalf("share_environment %v: second session's cwd %v", share, r["output"])
		}
		if n := len(m.Keys()); share && n != 1 || !share && n != 2 {
			t.Fatalf("share_environment %v: %d environments (%v)", share, n, m.Keys())
		}
		if !share {
			a.Close()
			deadline := time.Now().Add(10 * time.Second)
			for len(m.Keys()) != 1 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if len(m.Keys()) != 1 {
				t.Fatalf("environment of a closed session was not closed: %v", m.Keys())
			}
		}
	}
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func httpClient(t *testing.T, url, token string) *mcp.ClientSession {
	t.Helper()
	tr := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func TestRequireToken(t *testing.T) {
	reached := false
	h := RequireToken("s3cret", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached = true }))
	for _, hdr := range []string{"", "Bearer", "Bearer wrong", "Bearer s3cre", "Bearer s3cret2", "Basic s3cret", "Bearers3cret", "Bear s3cret", "Bearer-s3cret"} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/mcp", strings.NewReader("{}"))
		if hdr != "" {
			req.Header.Set("Authorization", hdr)
		}
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized || reached {
			t.Fatalf("Authorization %q: status %d, reached %v", hdr, rec.Code, reached)
		}
	}
	// The scheme is case-insensitive (RFC 9110 §11.1).
	for _, hdr := range []string{"Bearer s3cret", "bearer s3cret", "BEARER s3cret", "bEaReR s3cret "} {
		reached = false
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/mcp", nil)
		req.Header.Set("Authorization", hdr)
		h.ServeHTTP(rec, req)
		if !reached {
			t.Fatalf("Authorization %q: the right token did not get through (status %d)", hdr, rec.Code)
		}
	}
	var rec *httptest.ResponseRecorder
	var req *http.Request
	reached = false
	empty := RequireToken("", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached = true }))
	rec = httptest.NewRecorder()
	req = httptest.NewRequest("POST", "/mcp", nil)
	req.Header.Set("Authorization", "Bearer ")
	empty.ServeHTTP(rec, req)
	if reached || rec.Code != http.StatusUnauthorized {
		t.Fatal("an empty token let a request through")
	}
}
