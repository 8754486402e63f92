package mcpserver

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// stdioRig drives a server over its stdio transport with raw JSON-RPC
// lines, so a test can send what the SDK's client does not (a cancel with
// a reason).
type stdioRig struct {
	t     *testing.T
	in    *io.PipeWriter
	lines chan map[string]any
}

func newStdioRig(t *testing.T) *stdioRig {
	t.Helper()
	m := newManager(t, false)
	srv := New(m, Options{Logger: slog.New(slog.DiscardHandler)})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() {
		ran <- srv.Run(ctx, &StdioTransport{Reader: inR, Writer: outW, Logger: slog.New(slog.DiscardHandler)}, 5*time.Second)
		outW.Close()
	}()
	r := &stdioRig{t: t, in: inW, lines: make(chan map[string]any, 16)}
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var v map[string]any
			if json.Unmarshal(sc.Bytes(), &v) == nil {
				r.lines <- v
			}
		}
		close(r.lines)
	}()
	t.Cleanup(func() {
		inW.Close()
		cancel()
		<-ran
	})
	r.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	r.reply(1)
	r.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return r
}

func (r *stdioRig) send(line string) {
	r.t.Helper()
	if _, err := io.WriteString(r.in, line+"\n"); err != nil {
		r.t.Fatal(err)
	}
}

// reply returns the structured result (or the error) of request id.
func (r *stdioRig) reply(id float64) map[string]any {
	r.t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case v, ok := <-r.lines:
			if !ok {
				r.t.Fatalf("the server ended before answering %v", id)
			}
			if v["id"] != id {
				continue
			}
			if res, ok := v["result"].(map[string]any); ok {
				if sc, ok := res["structuredContent"].(map[string]any); ok {
					return sc
				}
				return res
			}
			return v
		case <-deadline:
			r.t.Fatalf("no answer to %v", id)
		}
	}
}

func (r *stdioRig) tool(id int, name string, args map[string]any) {
	r.t.Helper()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": map[string]any{"name": name, "arguments": args}})
	r.send(string(b))
}

// foregroundID waits until process list shows a foreground command and
// returns its session_id (list is request id).
func (r *stdioRig) foregroundID(id int) string {
	r.t.Helper()
	for i := 0; i < 200; i++ {
		r.tool(id+i, "process", map[string]any{"action": "list"})
		items, _ := r.reply(float64(id + i))["processes"].([]any)
		for _, it := range items {
			m, _ := it.(map[string]any)
			if m["status"] == "foreground" {
				return m["session_id"].(string)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.t.Fatal("no foreground command in process list")
	return ""
}

func TestCancelWithReasonDetaches(t *testing.T) {
	r := newStdioRig(t)
	r.tool(2, "terminal", map[string]any{"command": "cd /tmp && export DV=7"})
	r.reply(2)
	r.tool(3, "terminal", map[string]any{"command": "echo begun; sleep 3; echo finished; exit 5", "timeout": 60})
	id := r.foregroundID(100)
	r.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3,"reason":"background"}}`)
	res := r.reply(3)
	if res["moved_to_background"] != true || res["session_id"] != id || res["exit_code"] != nil ||
		!strings.HasSuffix(fmt.Sprint(res["output"]), "[Command moved to the background on request as session_id "+id+"; follow it with the process tool (poll, log, wait, kill)]") {
		t.Fatalf("the cancelled call's answer: %v", res)
	}
	r.tool(4, "terminal", map[string]any{"command": "echo $DV; pwd"})
	if v := r.reply(4); v["output"] != "7\n/tmp" {
		t.Fatalf("the session after the detach: %v", v)
	}
	r.tool(5, "process", map[string]any{"action": "wait", "session_id": id, "timeout": 30})
	if w := r.reply(5); w["status"] != "exited" || w["exit_code"] != 5.0 || w["output"] != "begun\nfinished" {
		t.Fatalf("wait on the detached command: %v", w)
	}
}

func TestCancelWithoutReasonStillInterrupts(t *testing.T) {
	r := newStdioRig(t)
	r.tool(2, "terminal", map[string]any{"command": "echo begun; sleep 31338", "timeout": 60})
	r.foregroundID(100)
	r.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"user pressed stop"}}`)
	if res := r.reply(2); res["exit_code"] != 130.0 || res["moved_to_background"] != nil {
		t.Fatalf("a cancel with another reason: %v, want the interrupt", res)
	}
	if n := countProcs("sleep 31338"); n != 0 {
		t.Fatalf("%d sleeps left after the interrupt", n)
	}
}

func TestDetachActionAndBadOnTimeout(t *testing.T) {
	cs := connect(t, newManager(t, false), nil)
	got := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "terminal", Arguments: map[string]any{"command": "echo up; sleep 31339", "timeout": 60}})
		if err != nil {
			t.Error(err)
		}
		got <- res
	}()
	var id string
	waitFor(t, "a foreground command in process list", func() bool {
		l, _ := call(t, cs, "process", map[string]any{"action": "list"})
		items, _ := l["processes"].([]any)
		for _, it := range items {
			if m, _ := it.(map[string]any); m["status"] == "foreground" {
				id = m["session_id"].(string)
			}
		}
		return id != ""
	})
	d, _ := call(t, cs, "process", map[string]any{"action": "detach", "session_id": id})
	if d["status"] != "detached" || d["process_status"] != "running" {
		t.Fatalf("detach: %v", d)
	}
	res := decode(t, <-got)
	if res["moved_to_background"] != true || res["session_id"] != id || res["exit_code"] != nil {
		t.Fatalf("the detached call's result: %v", res)
	}
	if k, _ := call(t, cs, "process", map[string]any{"action": "kill", "session_id": id}); k["status"] != "killed" {
		t.Fatalf("kill: %v", k)
	}
	if n := countProcs("sleep 31339"); n != 0 {
		t.Fatalf("%d sleeps left after the kill", n)
	}

	bad, isErr := call(t, cs, "terminal", map[string]any{"command": "true", "on_timeout": "later"})
	if !isErr || !strings.Contains(fmt.Sprint(bad["error"]), `on_timeout "later"`) || !strings.Contains(fmt.Sprint(bad["error"]), `"background"`) {
		t.Fatalf("on_timeout later: %v", bad)
	}
}
