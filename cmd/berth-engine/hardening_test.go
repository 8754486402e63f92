package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const (
	initLine = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`
	noteLine = `{"jsonrpc":"2.0","method":"notifications/initialized"}`
	// grace is terminal.daemon_term_grace_seconds's default; berth must
	// exit within it plus 3 s of a shutdown signal.
	grace = 2 * time.Second
)

// toolCall is a tools/call line with its members in the order clients
// write them (the SDKs put id and method before params, name before
// arguments).
func toolCall(id int, name string, args any) string {
	type params struct {
		Name      string `json:"name"`
		Arguments any    `json:"arguments"`
	}
	type request struct {
		JSONRPC string `json:"jsonrpc"`
		ID      int    `json:"id"`
		Method  string `json:"method"`
		Params  params `json:"params"`
	}
	b, _ := json.Marshal(request{"2.0", id, "tools/call", params{name, args}})
	return string(b)
}

// rawMCP is `berth mcp` driven line by line over its real stdin/stdout.
type rawMCP struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan map[string]any
	exited chan struct{}
}

func startRawMCP(t *testing.T, extraEnv ...string) *rawMCP {
	t.Helper()
	cmd := exec.Command(berthBin, "mcp")
	cmd.Env = berthEnv(t, extraEnv...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b := &rawMCP{cmd: cmd, stdin: stdin, lines: make(chan map[string]any, 100), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			var v map[string]any
			if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
				v = map[string]any{"unparsable": sc.Text()}
			}
			b.lines <- v
		}
		close(b.lines)
		cmd.Wait()
		close(b.exited)
	}()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-b.exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-b.exited
		}
	})
	b.send(t, initLine)
	if r := b.reply(t, 1); r["result"] == nil {
		t.Fatalf("initialize: %v", r)
	}
	b.send(t, noteLine)
	return b
}

func (b *rawMCP) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(b.stdin, line+"\n"); err != nil {
		t.Fatalf("write to berth mcp: %v", err)
	}
}

// reply returns the next message with the given id (float64 in JSON), or
// with a null id when id is nil.
func (b *rawMCP) reply(t *testing.T, id any) map[string]any {
	t.Helper()
	want := id
	if n, ok := id.(int); ok {
		want = float64(n)
	}
	deadline := time.After(60 * time.Second)
	for {
		select {
		case v, ok := <-b.lines:
			if !ok {
				t.Fatalf("berth mcp ended its output before answering id %v", id)
			}
			if v["id"] == want {
				return v
			}
		case <-deadline:
			t.Fatalf("no answer for id %v", id)
		}
	}
}

// toolResult decodes the structured content of a tools/call answer.
func toolResult(t *testing.T, v map[string]any) (map[string]any, bool) {
	t.Helper()
	res, _ := v["result"].(map[string]any)
	sc, _ := res["structuredContent"].(map[string]any)
	if sc == nil {
		t.Fatalf("not a tool result: %v", v)
	}
	isErr, _ := res["isError"].(bool)
	return sc, isErr
}

// uniqueArg is a sleep argument no other process has: n seconds and a
// fraction unique to this run.
func uniqueArg(n int) string {
	return fmt.Sprintf("%d.%06d", n, time.Now().UnixNano()/1000%1000000)
}

// waitProcs waits until n processes have needle in their cmdline.
func waitProcs(t *testing.T, needle string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for countHostProcs(needle) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d processes with %q, want %d", countHostProcs(needle), needle, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// killLeftovers kills, by pid, processes this test started that are still
// running (after a test that exits berth without cleaning up).
func killLeftovers(needle string) {
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), needle) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// F5: SIGTERM, SIGINT or SIGHUP to berth mcp interrupts the foreground
// command (its result, exit 130 with the marker, still goes out), closes
// the environment and exits within the grace period plus 3 s.
func TestMCPSignalInterruptsForeground(t *testing.T) {
	for i, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			b := startRawMCP(t)
			arg := uniqueArg(31350 + i)
			needle := "sleep\x00" + arg
			b.send(t, toolCall(2, "terminal", map[string]any{"command": "echo started; sleep " + arg}))
			waitProcs(t, needle, 1)
			start := time.Now()
			b.cmd.Process.Signal(sig)
			select {
			case <-b.exited:
			case <-time.After(grace + 3*time.Second):
				t.Fatalf("berth mcp still running %s after %v", grace+3*time.Second, sig)
			}
			t.Logf("exited %s after %v", time.Since(start).Round(time.Millisecond), sig)
			r, _ := toolResult(t, b.reply(t, 2))
			if r["exit_code"] != 130.0 || r["output"] != "started\n[Command interrupted]" {
				t.Fatalf("interrupted call: %v", r)
			}
			if n := countHostProcs(needle); n != 0 {
				t.Fatalf("%d sleep left running after %v", n, sig)
			}
			if code := b.cmd.ProcessState.ExitCode(); code != 0 {
				t.Fatalf("exit status %d after %v", code, sig)
			}
		})
	}
}

// F5: a second signal exits at once, even while the first one waits for a
// command that ignores it.
func TestMCPSecondSignalExitsAtOnce(t *testing.T) {
	arg := uniqueArg(31360)
	t.Cleanup(func() { killLeftovers("sleep\x00" + arg) })
	b := startRawMCP(t, "TERMINAL_DAEMON_TERM_GRACE_SECONDS=60")
	b.send(t, toolCall(2, "terminal", map[string]any{"command": "trap '' INT TERM HUP; sleep " + arg}))
	waitProcs(t, "sleep\x00"+arg, 1)
	b.cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(500 * time.Millisecond)
	select {
	case <-b.exited:
		t.Fatal("berth exited on the first signal without waiting for the command's grace")
	default:
	}
	b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(3 * time.Second):
		t.Fatal("berth mcp did not exit at once on the second signal")
	}
	if code := b.cmd.ProcessState.ExitCode(); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit status %d after a second SIGTERM, want %d", code, 128+int(syscall.SIGTERM))
	}
}

// F5: berth exec and berth shell interrupt their command on SIGTERM and
// exit within the grace period plus 3 s, leaving nothing behind.
func TestExecAndShellSignal(t *testing.T) {
	arg := uniqueArg(31361)
	for name, args := range map[string][]string{
		"exec":  {"exec", "--", "sleep " + arg},
		"shell": {"shell", "--json"},
	} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(berthBin, args...)
			cmd.Env = berthEnv(t)
			stdin, err := cmd.StdinPipe() // kept open: the shell waits for more
			if err != nil {
				t.Fatal(err)
			}
			defer stdin.Close()
			var out strings.Builder
			cmd.Stdout = &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if name == "shell" {
				io.WriteString(stdin, "sleep "+arg+"\n")
			}
			waitProcs(t, "sleep\x00"+arg, 1)
			cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(grace + 3*time.Second):
				cmd.Process.Kill()
				<-done
				t.Fatalf("berth %s still running %s after SIGTERM", name, grace+3*time.Second)
			}
			if code := cmd.ProcessState.ExitCode(); code != 130 {
				t.Fatalf("exit status %d, want 130; output %q", code, out.String())
			}
			if !strings.Contains(out.String(), "[Command interrupted]") {
				t.Fatalf("output %q lacks the interrupt marker", out.String())
			}
			if n := countHostProcs("sleep\x00" + arg); n != 0 {
				t.Fatalf("%d sleep left running", n)
			}
		})
	}
}

// F5: berth serve on SIGTERM interrupts a session's foreground command,
// answers the call, and exits within the grace period plus 3 s.
func TestServeSignalInterruptsForeground(t *testing.T) {
	cmd := exec.Command(berthBin, "serve", "--listen", "127.0.0.1:0", "--token", "tok")
	cmd.Env = berthEnv(t)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if _, u, ok := strings.Cut(sc.Text(), "listening on "); ok {
				urlc <- u
			}
		}
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	url := <-urlc
	arg := uniqueArg(31362)
	tr := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: withToken{"tok"}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "terminal", Arguments: map[string]any{"command": "echo started; sleep " + arg}})
		done <- answer{res, err}
	}()
	waitProcs(t, "sleep\x00"+arg, 1)
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace + 3*time.Second):
		t.Fatalf("berth serve still running %s after SIGTERM", grace+3*time.Second)
	}
	a := <-done
	if a.err != nil {
		t.Fatalf("the interrupted call got no answer: %v", a.err)
	}
	var r map[string]any
	json.Unmarshal([]byte(a.res.Content[0].(*mcp.TextContent).Text), &r)
	if r["exit_code"] != 130.0 || r["output"] != "started\n[Command interrupted]" {
		t.Fatalf("interrupted call: %v", r)
	}
	if n := countHostProcs("sleep\x00" + arg); n != 0 {
		t.Fatalf("%d sleep left running", n)
	}
}

// L1: malformed lines get a JSON-RPC error and the server goes on.
func TestMCPMalformedLines(t *testing.T) {
	b := startRawMCP(t)
	for _, c := range []struct {
		line string
		code float64
	}{
		{"not json", -32700},
		{"}", -32700},
		{"[]", -32600},
		{`{"jsonrpc":"2.0","id":5,"method":"tools/list"}}`, -32700},
		{"{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tools/list\",\"x\":\"\xff\xfe\"}", -32700},
		{`{"jsonrpc":"1.0","id":7,"method":"tools/list"}`, -32600},
	} {
		b.send(t, c.line)
		var v map[string]any
		for v == nil || v["error"] == nil {
			var ok bool
			select {
			case v, ok = <-b.lines:
				if !ok {
					t.Fatalf("%q: berth mcp ended its output instead of answering", c.line)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("%q: no answer", c.line)
			}
		}
		e, _ := v["error"].(map[string]any)
		if e["code"] != c.code || e["message"] == "" {
			t.Fatalf("%q: answer %v, want code %v", c.line, v, c.code)
		}
	}
	b.send(t, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`)
	if v := b.reply(t, 3); v["result"] == nil {
		t.Fatalf("tools/list after the bad lines: %v", v)
	}
	b.send(t, toolCall(4, "terminal", map[string]any{"command": "echo alive"}))
	if r, _ := toolResult(t, b.reply(t, 4)); r["output"] != "alive" {
		t.Fatalf("terminal after the bad lines: %v", r)
	}
	b.stdin.Close()
	<-b.exited
	if code := b.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit status %d after stdin closed", code)
	}
}

// F8: over stdio, write_file takes its whole advertised limit even fully
// escaped; above it, or above the message limit, the call gets a tool
// error naming the limit and the server goes on.
func TestMCPLargeWrites(t *testing.T) {
	b := startRawMCP(t)
	dir := t.TempDir()
	// 10 MiB of control bytes: 60 MiB once JSON-escaped as \u0001.
	b.sendBigWrite(t, 2, dir+"/ctl.bin", `\u0001`, 10<<20)
	r, isErr := toolResult(t, b.reply(t, 2))
	if isErr || r["bytes_written"] != float64(10<<20) {
		t.Fatalf("10 MiB escaped write: %v", r)
	}
	if fi, err := os.Stat(dir + "/ctl.bin"); err != nil || fi.Size() != 10<<20 {
		t.Fatalf("file after the 10 MiB write: %v %v", fi, err)
	}
	b.sendBigWrite(t, 3, dir+"/over.txt", "y", 10<<20+1)
	r, isErr = toolResult(t, b.reply(t, 3))
	if !isErr || !strings.Contains(fmt.Sprint(r["error"]), "at most 10 MiB") {
		t.Fatalf("write over the content limit: %v", r)
	}
	// A line over the 64 MiB message limit.
	b.sendBigWrite(t, 4, dir+"/huge.txt", `\u0002`, 12<<20)
	r, isErr = toolResult(t, b.reply(t, 4))
	if !isErr || !strings.Contains(fmt.Sprint(r["error"]), "write_file: the request is larger than 64 MiB") {
		t.Fatalf("write over the message limit: %v", r)
	}
	for _, f := range []string{"over.txt", "huge.txt"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Fatalf("%s was created", f)
		}
	}
	b.send(t, toolCall(5, "terminal", map[string]any{"command": "echo alive"}))
	if r, _ := toolResult(t, b.reply(t, 5)); r["output"] != "alive" {
		t.Fatalf("after the large writes: %v", r)
	}
}

// sendBigWrite streams a write_file line whose content is n times the
// JSON-escaped character esc. It is never held in memory: a child forked
// by a later test would inherit it in its peak RSS, which tests measure.
func (b *rawMCP) sendBigWrite(t *testing.T, id int, path, esc string, n int) {
	t.Helper()
	p, _ := json.Marshal(path)
	chunk := strings.Repeat(esc, 64<<10)
	w := bufio.NewWriterSize(b.stdin, 1<<20)
	fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"write_file","arguments":{"path":%s,"content":"`, id, p)
	for ; n >= 64<<10; n -= 64 << 10 {
		w.WriteString(chunk)
	}
	w.WriteString(strings.Repeat(esc, n))
	w.WriteString("\"}}}\n")
	if err := w.Flush(); err != nil {
		t.Fatalf("write to berth mcp: %v", err)
	}
}

// L8, L18: berth serve caps sessions, accepts the scheme in any case,
// closes unauthenticated and idle connections.
func TestServeLimits(t *testing.T) {
	url := startServe(t, "--token", "tok", "--max-sessions", "1", "--idle-timeout", "1s")
	post := func(auth, session string) (*http.Response, string) {
		req, _ := http.NewRequest("POST", url, strings.NewReader(initLine))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", auth)
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(body)
	}
	resp, body := post("bearer tok", "")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") == "" {
		t.Fatalf("lower-case scheme: %d %s", resp.StatusCode, body)
	}
	resp, body = post("BEARER tok", "")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "1 MCP sessions are open") {
		t.Fatalf("second session with a cap of 1: %d %s", resp.StatusCode, body)
	}

	host := strings.TrimPrefix(strings.TrimSuffix(url, "/mcp"), "http://")
	// An unauthenticated request gets 401 and its connection closed.
	conn, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /ps HTTP/1.1\r\nHost: %s\r\n\r\n", host)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, _ := io.ReadAll(conn)
	if !strings.HasPrefix(string(got), "HTTP/1.1 401") {
		t.Fatalf("unauthenticated: %q", got)
	}
	// An authenticated keep-alive connection left idle is closed.
	conn2, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	fmt.Fprintf(conn2, "GET /ps HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer tok\r\n\r\n", host)
	br := bufio.NewReader(conn2)
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/ps: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	conn2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle keep-alive connection: read %v, want EOF (closed by the server)", err)
	}
}

// L11: a --timeout that would overflow is refused with its value named.
func TestTimeoutOverflowRefused(t *testing.T) {
	for _, args := range [][]string{
		{"exec", "--timeout", "18446744074", "--", "echo ran"},
		{"exec", "--timeout", "9223372037", "--", "echo ran"},
		{"exec", "--timeout", "86401", "--", "echo ran"},
		{"mcp", "--timeout", "18446744074"}, // the default timeout, which no request checks
	} {
		out, errs, code, _ := berth(t, "", args...)
		if code != errorStatus || strings.Contains(out, "ran") || !strings.Contains(errs, "--timeout "+args[2]) || !strings.Contains(errs, "at most 86400") {
			t.Fatalf("%v: exit %d, out %q, err %q", args, code, out, errs)
		}
	}
	if out, errs, code, _ := berth(t, "", "exec", "--timeout", "86400", "--", "echo ran"); code != 0 || out != "ran\n" {
		t.Fatalf("the largest timeout: exit %d %q %q", code, out, errs)
	}
}
