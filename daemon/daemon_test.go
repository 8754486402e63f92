package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a55dbaac/berth/daemon/wire"
	"github.com/a55dbaac/berth/terminal"

	_ "github.com/a55dbaac/berth/backend/all"
)

// serve starts an in-process daemon for a fresh home and returns the home
// and a channel that receives Serve's error.
func serve(t *testing.T, lifetime time.Duration) (string, chan error) {
	t.Helper()
	home, err := os.MkdirTemp("", "bdu")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	ready := make(chan struct{})
	errc := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		errc <- Serve(ctx, ServeOptions{Home: home, Lifetime: lifetime, Ready: func() { close(ready) }})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-errc:
		case <-time.After(20 * time.Second):
			t.Error("daemon did not stop")
		}
	})
	select {
	case <-ready:
	case err := <-errc:
		t.Fatalf("Serve: %v", err)
	}
	return home, errc
}

func inputs(t *testing.T, home string) wire.Inputs {
	wd, _ := os.Getwd()
	return wire.Inputs{Env: []string{"BERTH_HOME=" + home, "HOME=" + os.Getenv("HOME"), "PATH=" + os.Getenv("PATH")}, Cwd: wd}
}

func TestSocketModesAndSecondDaemon(t *testing.T) {
	home, _ := serve(t, 0)
	p, err := wire.PathsFor(home)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{p.Dir: 0o700, p.Socket: 0o600} {
		st, err := os.Stat(path)
		if err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", path, st.Mode().Perm(), err, want)
		}
	}
	if err := Serve(context.Background(), ServeOptions{Home: home}); !errors.Is(err, ErrRunning) {
		t.Fatalf("second Serve on the home: %v, want ErrRunning", err)
	}
	// The first one still answers.
	c, err := wire.Dial(context.Background(), wire.DialOptions{Home: home, NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.Do(wire.Request{Op: wire.OpStatus})
	if err != nil || r.Status.PID != os.Getpid() || r.Status.Socket != p.Socket {
		t.Fatalf("status %+v, %v", r, err)
	}
}

func TestPeerUIDIsOwnUser(t *testing.T) {
	home, _ := serve(t, 0)
	p, _ := wire.PathsFor(home)
	nc, err := net.Dial("unix", p.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	uid, err := PeerUID(nc.(*net.UnixConn))
	if err != nil || uid != os.Getuid() {
		t.Fatalf("PeerUID %d, %v; want %d", uid, err, os.Getuid())
	}
}

// A socket left by a daemon that is gone (nobody holds the pid lock) is
// replaced; a client meanwhile sees "not running".
func TestStaleSocketReplaced(t *testing.T) {
	home, err := os.MkdirTemp("", "bdu")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(home)
	p, _ := wire.PathsFor(home)
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", p.Socket)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if _, err := wire.Dial(context.Background(), wire.DialOptions{Home: home, NoStart: true}); !errors.Is(err, wire.ErrNotRunning) {
		t.Fatalf("dial a stale socket: %v, want ErrNotRunning", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ServeOptions{Home: home, Ready: func() { close(ready) }}) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	c, err := wire.Dial(context.Background(), wire.DialOptions{Home: home, NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	cancel()
	<-done
	if _, err := os.Stat(p.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left after shutdown: %v", err)
	}
}

// Runs stream their output, keep state, and an idle daemon with no
// environment exits by itself.
func TestRunStreamsAndIdleExit(t *testing.T) {
	home, errc := serve(t, 300*time.Millisecond)
	c, err := wire.Dial(context.Background(), wire.DialOptions{Home: home, NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	in := inputs(t, home)
	in.Env = append(in.Env, "TERMINAL_LIFETIME_SECONDS=1")
	var out strings.Builder
	r, err := c.Run(context.Background(), wire.Request{Op: wire.OpRun, Inputs: in, Key: "k", Command: "cd /tmp; export A=1; echo one; echo two", Stream: true}, wire.RunOptions{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != "one\ntwo" || r.Tail != "" || r.Cwd != "/tmp" { // the last newline is trailing whitespace
		t.Fatalf("streamed %q, tail %q, cwd %q", out.String(), r.Tail, r.Cwd)
	}
	r, err = c.Run(context.Background(), wire.Request{Op: wire.OpRun, Inputs: in, Key: "k", Command: "echo $A"}, wire.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var res terminal.Result
	if err := json.Unmarshal(r.Result, &res); err != nil || res.Output != "1" {
		t.Fatalf("second run %s (%v)", r.Result, err)
	}
	c.Close()
	// The environment is swept after its lifetime (1 s), then the daemon
	// goes once idle for its own.
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
		errc <- nil // for the cleanup
	case <-time.After(20 * time.Second):
		t.Fatal("idle daemon did not exit")
	}
}

// TestTapTail: what berth exec prints through the daemon (the streamed
// chunks, the tail, a final newline if missing) is what the one-process
// berth exec prints, the result's output and a newline, whatever the
// command's trailing whitespace, and the stream holds back only that
// whitespace.
func TestTapTail(t *testing.T) {
	for _, c := range []struct {
		writes   []string
		out      string
		streamed string
	}{
		{[]string{"hello\n"}, "hello", "hello"},
		{[]string{"abc"}, "abc", "abc"},
		{[]string{"x\n"}, "x\n[Command timed out after 2s]", "x"},
		{[]string{"x"}, "x\n[Command interrupted]", "x"},
		{nil, "[Command interrupted]", ""},
		{[]string{"a\n\n\n"}, "a", "a"},
		{[]string{"one\n", "\n", "two\n\n", " \t\n"}, "one\n\ntwo", "one\n\ntwo"},
		{[]string{"50%\r", "60%\r", "done\n"}, "50%\r60%\rdone", "50%\r60%\rdone"},
		{[]string{"a  ", "b\n"}, "a  b", "a  b"},
	} {
		rc := &recordConn{}
		tw := newTap(wire.NewConn(rc))
		for _, w := range c.writes {
			tw.Write([]byte(w))
		}
		tail, dropped := tw.finish(c.out)
		tw.flush()
		if dropped != 0 {
			t.Errorf("writes %q: %d bytes dropped", c.writes, dropped)
		}
		streamed := rc.streamed(t)
		if streamed != c.streamed {
			t.Errorf("writes %q: streamed %q, want %q", c.writes, streamed, c.streamed)
		}
		printed := streamed + tail
		if printed != "" && !strings.HasSuffix(printed, "\n") {
			printed += "\n"
		}
		if printed != c.out+"\n" {
			t.Errorf("writes %q, output %q: printed %q, want %q", c.writes, c.out, printed, c.out+"\n")
		}
	}
	// Whitespace past the bound is sent rather than held.
	rc := &recordConn{}
	tw := newTap(wire.NewConn(rc))
	tw.Write([]byte("x"))
	tw.Write(bytes.Repeat([]byte("\n"), maxHeld+1))
	tw.finish("")
	tw.flush()
	if got := rc.streamed(t); got != "x"+strings.Repeat("\n", maxHeld+1) {
		t.Errorf("after %d newlines, streamed %d bytes", maxHeld+1, len(got))
	}
}

// recordConn keeps what the daemon sends.
type recordConn struct {
	mu sync.Mutex
	bytes.Buffer
}

func (r *recordConn) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.Buffer.Write(p)
}

func (*recordConn) Read([]byte) (int, error) { return 0, errors.New("closed") }
func (*recordConn) Close() error             { return nil }

// streamed returns the data of the out frames sent.
func (r *recordConn) streamed(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(r.String()), "\n") {
		if line == "" {
			continue
		}
		var f wire.Frame
		if err := json.Unmarshal([]byte(line), &f); err != nil {
			t.Fatalf("frame %q: %v", line, err)
		}
		b.Write(f.Data)
	}
	return b.String()
}

func TestPathTooLong(t *testing.T) {
	if _, err := wire.PathsFor("/" + strings.Repeat("x", 120)); !errors.Is(err, wire.ErrPathTooLong) {
		t.Fatalf("long home: %v", err)
	}
}

// TestQuickRequests: a Quick request (the front, which has not read the
// configuration) is handed back, with nothing run, when the caller's
// configuration turns the daemon off or its timeout is out of range; it
// runs otherwise, with berth exec's exit status in the reply. A request
// of another protocol version is refused, naming both and what to do.
func TestQuickRequests(t *testing.T) {
	home, _ := serve(t, 0)
	marker := t.TempDir() + "/ran"
	touch := "touch " + marker
	c, err := wire.Dial(context.Background(), wire.DialOptions{Home: home, NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	in := inputs(t, home)
	off := in
	off.Env = append(append([]string{}, in.Env...), "TERMINAL_DAEMON=false")
	for name, req := range map[string]wire.Request{
		"daemon off":  {Op: wire.OpRun, Inputs: off, Key: "q", Command: touch, Quick: true},
		"bad timeout": {Op: wire.OpRun, Inputs: in, Key: "q", Command: touch, Quick: true, Timeout: terminal.MaxTimeout + 1},
	} {
		r, err := c.Run(context.Background(), req, wire.RunOptions{})
		if err != nil || !r.Fallback || len(r.Result) != 0 {
			t.Fatalf("%s: reply %+v, err %v; want a fallback with no result", name, r, err)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("%s: the command ran", name)
		}
	}
	for _, tc := range []struct {
		command string
		exit    int
		msg     string
	}{
		{"exit 3", 3, ""},
		{"rm -rf /", terminal.StatusBlocked, "BLOCKED: "},
		{"echo ok", 0, ""},
	} {
		r, err := c.Run(context.Background(), wire.Request{Op: wire.OpRun, Inputs: in, Key: "q", Command: tc.command, Quick: true}, wire.RunOptions{})
		if err != nil || r.Fallback || r.Exit != tc.exit || !strings.HasPrefix(r.ExitMessage, tc.msg) || (tc.msg == "" && r.ExitMessage != "") {
			t.Fatalf("quick %q: reply %+v, err %v; want exit %d, message %q", tc.command, r, err, tc.exit, tc.msg)
		}
	}
	// Not Quick: the caller read its configuration and chose the daemon.
	if r, err := c.Run(context.Background(), wire.Request{Op: wire.OpRun, Inputs: off, Key: "q", Command: touch}, wire.RunOptions{}); err != nil || r.Fallback || r.Exit != 0 {
		t.Fatalf("non-quick run with daemon off: reply %+v, err %v", r, err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("non-quick run did not run: %v", err)
	}

	// Another version (a berth from before Quick requests).
	os.Remove(marker)
	p, _ := wire.PathsFor(home)
	nc, err := net.Dial("unix", p.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	wc := wire.NewConn(nc)
	if f, err := wc.Recv(); err != nil || f.T != wire.FrameHello || f.Hello.Protocol != wire.ProtocolVersion || f.Hello.PID != os.Getpid() {
		t.Fatalf("first frame %+v, %v; want this daemon's hello", f, err)
	}
	if err := wc.Send(wire.Frame{T: wire.FrameRequest, Req: &wire.Request{Version: 1, Op: wire.OpRun, Inputs: in, Key: "q", Command: touch}}); err != nil {
		t.Fatal(err)
	}
	f, err := wc.Recv()
	if err != nil || f.Reply == nil || f.Reply.Code != wire.CodeVersion || !strings.Contains(f.Reply.Error, fmt.Sprintf("protocol %d, the caller 1", wire.ProtocolVersion)) || !strings.Contains(f.Reply.Error, "berth daemon stop") {
		t.Fatalf("version 1 request: frame %+v, err %v; want a refusal naming both versions", f, err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the version 1 request ran")
	}
	// Status (and stop) are answered to any version: a berth of another
	// build can still stop this daemon.
	if err := wc.Send(wire.Frame{T: wire.FrameRequest, Req: &wire.Request{Version: 1, Op: wire.OpStatus}}); err != nil {
		t.Fatal(err)
	}
	if f, err := wc.Recv(); err != nil || f.Reply == nil || f.Reply.Error != "" || f.Reply.Status == nil || f.Reply.Status.PID != os.Getpid() {
		t.Fatalf("version 1 status: frame %+v, err %v; want this daemon's status", f, err)
	}
}

// TestStopAnsweredBeforeServeReturns: the answer to berth daemon stop is
// sent before Serve returns (after which the process exits, and a
// connection closed unanswered reads as a daemon that died: seen in CI as
// "the berth daemon closed the connection before answering"). The hook
// holds the answer back; Serve must wait for it.
func TestStopAnsweredBeforeServeReturns(t *testing.T) {
	beforeStopReply = func() { time.Sleep(2 * time.Second) }
	t.Cleanup(func() { beforeStopReply = nil })
	home, errc := serve(t, 0)
	c, err := wire.Dial(context.Background(), wire.DialOptions{Home: home, NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	replied := make(chan error, 1)
	go func() {
		_, err := c.Do(wire.Request{Op: wire.OpStop, Version: wire.ProtocolVersion})
		replied <- err
	}()
	select {
	case err := <-errc:
		errc <- err // for serve's cleanup
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return after berth daemon stop")
	}
	// Sent before Serve returned, the answer is read at once; held back,
	// it would come a second later still.
	select {
	case err := <-replied:
		if err != nil {
			t.Fatalf("stop: %v", err)
		}
	case <-time.After(time.Second):
		t.Fatal("Serve returned before the answer to berth daemon stop was sent")
	}
}
