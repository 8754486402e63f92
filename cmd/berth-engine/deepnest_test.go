package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"

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
// session while another holds state. The 64 MiB request is streamed, as a
// client would send it (a test process holding it would pass it on to the
// children later tests fork, whose peak RSS they measure).
func TestDeepNestingOverServe(t *testing.T) {
	url := startServe(t, "--token", "tok-deep")
	tr := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: withToken{"tok-deep"}}}
	a, err := mcp.NewClient(&mcp.Implementation{Name: "deep", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	mcpCall(t, a, "terminal", map[string]any{"command": "export KEEP=kept-a; cd /tmp"})

	// Session b, by hand: initialize, initialized, then the streamed call.
	post := func(session string, body io.Reader) (*http.Response, string) {
		req, _ := http.NewRequest("POST", url, body)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer tok-deep")
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp, string(b)
	}
	resp, body := post("", strings.NewReader(initLine))
	session := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || session == "" {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	post(session, strings.NewReader(noteLine))
	pr, pw := io.Pipe()
	go func() {
		w := bufio.NewWriterSize(pw, 1<<20)
		w.WriteString(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"terminal","arguments":{"command":"`)
		writeDeep(w, maxMCPLevels)
		w.WriteString("\"}}}")
		w.Flush()
		pw.Close()
	}()
	resp, body = post(session, pr)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"isError":true`) || !strings.Contains(body, nestBound) {
		t.Fatalf("64 MiB of nesting: %d %.400s, want a tool error naming the bound", resp.StatusCode, body)
	}
	if r := mcpCall(t, a, "terminal", map[string]any{"command": "echo $KEEP; pwd"}); r["output"] != "kept-a\n/tmp" {
		t.Fatalf("the other session after the refusal: %v", r)
	}
	resp, body = post(session, strings.NewReader(toolCall(3, "terminal", map[string]any{"command": "echo still-serving"})))
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `still-serving`) {
		t.Fatalf("the refused session: %d %.300s", resp.StatusCode, body)
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
	cmd := exec.Command(berthBin, "shell", "--json", "--task", "t")
	cmd.Env = d.env
	pr, pw := io.Pipe()
	cmd.Stdin = pr
	go func() { // streamed: see TestDeepNestingOverServe
		w := bufio.NewWriterSize(pw, 1<<20)
		writeDeep(w, (16<<20-64)/2)
		w.WriteString("\n")
		w.Flush()
		pw.Close()
	}()
	var outb, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &outb, &errb
	cmd.Run()
	out, errs, code := outb.String(), errb.String(), cmd.ProcessState.ExitCode()
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
