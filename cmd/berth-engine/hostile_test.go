package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// F4 regressed and R3 of the 2026-11-28 security review, end to end: one
// command of `time time … true` (1.5 MB) or $((1?1?…:1)) (1.2 MB) ended
// the daemon (with every task's environment), berth mcp and berth serve
// with a stack overflow; $((a=a=…=1)) held its task for minutes
// (quadratic); a 5 MB ":;:;" command held a gigabyte. Each is now refused
// at once, with an error that names the bound, and the process keeps
// serving: another task's state is intact. (TestDeepNesting* cover
// brackets.)

// hostileLines are the shapes, each one line (berth shell reads lines).
func hostileLines() map[string]string {
	r := strings.Repeat
	return map[string]string{
		"time":         r("time ", 300000) + "true",
		"ternary":      "echo $((" + r("1?", 200000) + "1" + r(":1", 200000) + "))",
		"assign":       "echo $((" + r("a=", 120000) + "1))",
		"coproc":       r("coproc ", 150000) + "true",
		"let":          "let " + r("a=", 300000) + "1",
		"func headers": r("f() ", 250000) + "{ :; }",
		"after ${#x}":  "echo ${#x} " + r("(", 250000) + "1" + r(")", 250000),
		"fi as word":   r("if :; then echo $x fi; ", 50000),
		"colons":       r(":;", 5<<20/2),
	}
}

// refusedAsHostile reports whether an error refuses a hostile shape: too
// deep (naming the bound) or too large to check.
func refusedAsHostile(msg string) bool {
	return strings.Contains(msg, "nests at least") && strings.Contains(msg, nestBound) || strings.Contains(msg, "too large to check")
}

func sortedNames(m map[string]string) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// TestHostileInputsOverMCP: each shape as a tools/call over berth mcp's
// stdio.
func TestHostileInputsOverMCP(t *testing.T) {
	b := startRawMCP(t)
	b.send(t, toolCall(2, "terminal", map[string]any{"command": "export KEEP=kept; sleep 1271 &"}))
	if r, isErr := toolResult(t, b.reply(t, 2)); isErr {
		t.Fatalf("setting state: %v", r)
	}
	id := 3
	for _, name := range sortedNames(hostileLines()) {
		b.send(t, toolCall(id, "terminal", map[string]any{"command": hostileLines()[name]}))
		r, isErr := toolResult(t, b.reply(t, id))
		if !isErr || !refusedAsHostile(fmt.Sprint(r["error"])) {
			t.Fatalf("%s: %v, want it refused as too deep or too large to check", name, short(r))
		}
		id++
	}
	b.send(t, toolCall(id, "terminal", map[string]any{"command": "echo $KEEP; pgrep -f 'sleep 1271' >/dev/null && echo job-alive; pkill -f 'sleep 1271'"}))
	if r, _ := toolResult(t, b.reply(t, id)); r["output"] != "kept\njob-alive" {
		t.Fatalf("after the refusals: %v, want the environment as it was", r)
	}
}

// TestHostileInputsOverServe: the same over berth serve's HTTP, from one
// session while another holds state.
func TestHostileInputsOverServe(t *testing.T) {
	url := startServe(t, "--token", "tok-hostile")
	tr := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: withToken{"tok-hostile"}}}
	a, err := mcp.NewClient(&mcp.Implementation{Name: "hostile", Version: "1"}, nil).Connect(t.Context(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	mcpCall(t, a, "terminal", map[string]any{"command": "export KEEP=kept-a; cd /tmp"})

	post := func(session string, body string) (*http.Response, string) {
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer tok-hostile")
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST: %v (berth serve gone?)", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp, string(b)
	}
	resp, body := post("", initLine)
	session := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || session == "" {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	post(session, noteLine)
	for i, name := range sortedNames(hostileLines()) {
		resp, body = post(session, toolCall(2+i, "terminal", map[string]any{"command": hostileLines()[name]}))
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"isError":true`) || !refusedAsHostile(body) {
			t.Fatalf("%s: %d %.400s, want a tool error refusing it as too deep or too large to check", name, resp.StatusCode, body)
		}
	}
	if r := mcpCall(t, a, "terminal", map[string]any{"command": "echo $KEEP; pwd"}); r["output"] != "kept-a\n/tmp" {
		t.Fatalf("the other session after the refusals: %v", r)
	}
	resp, body = post(session, toolCall(99, "terminal", map[string]any{"command": "echo still-serving"}))
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `still-serving`) {
		t.Fatalf("the refusing session: %d %.300s", resp.StatusCode, body)
	}
}

// TestHostileInputsThroughDaemon: the same through a warm daemon, each
// shape a line of berth shell, while another task holds state.
func TestHostileInputsThroughDaemon(t *testing.T) {
	d := newDaemonEnv(t)
	d.mustRun(t, 0, "exec", "--task", "other", "--", "export KEEP=kept-other; cd /tmp")
	pid := d.pid()
	if pid == 0 {
		t.Fatal("no daemon after the first call")
	}
	for _, name := range sortedNames(hostileLines()) {
		cmd := exec.Command(berthBin, "shell", "--json", "--task", "t")
		cmd.Env = d.env
		cmd.Stdin = strings.NewReader(hostileLines()[name] + "\n")
		var outb, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &outb, &errb
		cmd.Run()
		var r map[string]any
		if err := json.Unmarshal([]byte(outb.String()), &r); err != nil || !refusedAsHostile(fmt.Sprint(r["error"])) {
			t.Fatalf("berth shell with %s: exit %d, %.300s (%v), stderr %.300s", name, cmd.ProcessState.ExitCode(), outb.String(), err, errb.String())
		}
		if d.pid() != pid || !alive(pid) {
			t.Fatalf("after %s: the daemon %d is gone (now %d)", name, pid, d.pid())
		}
	}
	if out := d.mustRun(t, 0, "exec", "--task", "other", "--", "echo $KEEP; pwd"); out != "kept-other\n/tmp\n" {
		t.Fatalf("the other task after the refusals: %q", out)
	}
}
