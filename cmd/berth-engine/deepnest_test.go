package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// F4 of the 2026-11-25 security review, end to end: one message of nested
// parentheses ended berth mcp, berth serve and the warm daemon with a
// stack overflow in the shell parser (which recover cannot catch), and
// with them every environment they held. Each now answers an error naming
// the bound and keeps serving; another environment's state is intact.

// nestBound is shparse.MaxNesting, as the error names it.
const nestBound = "1000"

// writeDeep writes echo hi; ((((…true…)))) with n levels to w, in chunks.
func writeDeep(w *bufio.Writer, n int) {
	w.WriteString("echo hi; ")
	open, closing := strings.Repeat("(", 64<<10), strings.Repeat(")", 64<<10)
	for k := n; k > 0; k -= 64 << 10 {
		w.WriteString(open[:min(k, 64<<10)])
	}
	w.WriteString("true")
	for k := n; k > 0; k -= 64 << 10 {
		w.WriteString(closing[:min(k, 64<<10)])
	}
}

// maxMCPLevels fills a 64 MiB MCP message (its limit) with nesting.
const maxMCPLevels = (64<<20 - 4096) / 2

// TestDeepNestingOverMCP: a 64 MiB tools/call of nested parentheses over
// berth mcp's stdio.
func TestDeepNestingOverMCP(t *testing.T) {
	b := startRawMCP(t)
	b.send(t, toolCall(2, "terminal", map[string]any{"command": "export KEEP=kept; sleep 1270 &"}))
	if r, isErr := toolResult(t, b.reply(t, 2)); isErr {
		t.Fatalf("setting state: %v", r)
	}
	w := bufio.NewWriterSize(b.stdin, 1<<20)
	w.WriteString(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"terminal","arguments":{"command":"`)
	writeDeep(w, maxMCPLevels)
	w.WriteString("\"}}}\n")
	if err := w.Flush(); err != nil {
		t.Fatalf("write to berth mcp: %v", err)
	}
	r, isErr := toolResult(t, b.reply(t, 3))
	if !isErr || !strings.Contains(fmt.Sprint(r["error"]), nestBound) {
		t.Fatalf("64 MiB of nesting: %v, want an error naming the bound", short(r))
	}
	b.send(t, toolCall(4, "terminal", map[string]any{"command": "echo $KEEP; pgrep -f 'sleep 1270' >/dev/null && echo job-alive; pkill -f 'sleep 1270'"}))
	if r, _ := toolResult(t, b.reply(t, 4)); r["output"] != "kept\njob-alive" {
		t.Fatalf("after the refusal: %v, want the environment as it was", r)
	}
}

// TestDeepNestingOverServe: the same over berth serve's HTTP, from one
// session while another holds state.
func TestDeepNestingOverServe(t *testing.T) {
	url := startServe(t, "--token", "tok-deep")
	connect := func() *mcp.ClientSession {
		tr := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: withToken{"tok-deep"}}}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "deep", Version: "1"}, nil).Connect(context.Background(), tr, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	a, b := connect(), connect()
	mcpCall(t, a, "terminal", map[string]any{"command": "export KEEP=kept-a; cd /tmp"})
	var sb strings.Builder
	w := bufio.NewWriter(&sb)
	writeDeep(w, maxMCPLevels-64) // JSON framing of the SDK's request
	w.Flush()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := b.CallTool(ctx, &mcp.CallToolParams{Name: "terminal", Arguments: map[string]any{"command": sb.String()}})
	sb.Reset()
	if err != nil {
		t.Fatalf("64 MiB of nesting: %v", err)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; !res.IsError || !strings.Contains(text, nestBound) {
		t.Fatalf("64 MiB of nesting: %.300s, want an error naming the bound", text)
	}
	if r := mcpCall(t, a, "terminal", map[string]any{"command": "echo $KEEP; pwd"}); r["output"] != "kept-a\n/tmp" {
		t.Fatalf("the other session after the refusal: %v", r)
	}
	if r := mcpCall(t, b, "terminal", map[string]any{"command": "echo still-serving"}); r["output"] != "still-serving" {
		t.Fatalf("the refused session: %v", r)
	}
}

// TestDeepNestingThroughDaemon: the same through a warm daemon, from
// berth shell (a line of up to 16 MiB) and from berth exec answered by the
// front (an argument of up to 128 KiB), while another task holds state.
func TestDeepNestingThroughDaemon(t *testing.T) {
	d := newDaemonEnv(t)
	d.mustRun(t, 0, "exec", "--task", "other", "--", "export KEEP=kept-other; cd /tmp")
	pid := d.pid()
	if pid == 0 {
		t.Fatal("no daemon after the first call")
	}
	var sb strings.Builder
	w := bufio.NewWriter(&sb)
	writeDeep(w, (16<<20-64)/2)
	w.WriteString("\n")
	w.Flush()
	out, errs, code := d.run(t, sb.String(), "shell", "--json", "--task", "t")
	sb.Reset()
	var r map[string]any
	if err := json.Unmarshal([]byte(out), &r); err != nil || !strings.Contains(fmt.Sprint(r["error"]), nestBound) {
		t.Fatalf("berth shell with 16 MiB of nesting: exit %d, %.300s (%v), stderr %.300s", code, out, err, errs)
	}
	arg := strings.Repeat("(", 60000) + "true" + strings.Repeat(")", 60000)
	_, errs, code = d.run(t, "", "exec", "--task", "t", "--", arg)
	if code == 0 || !strings.Contains(errs, nestBound) {
		t.Fatalf("berth exec with 60 000 levels: exit %d, stderr %.300s", code, errs)
	}
	if d.pid() != pid || !alive(pid) {
		t.Fatalf("the daemon %d is gone (now %d)", pid, d.pid())
	}
	if out := d.mustRun(t, 0, "exec", "--task", "other", "--", "echo $KEEP; pwd"); out != "kept-other\n/tmp\n" {
		t.Fatalf("the other task after the refusals: %q", out)
	}
}

// short bounds a result for a failure message.
func short(v any) string {
	s := fmt.Sprint(v)
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}
