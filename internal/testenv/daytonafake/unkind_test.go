package daytonafake

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	apiclient "github.com/daytona/clients/api-client-go"
	toolbox "github.com/daytona/clients/toolbox-api-client-go"
	"github.com/gorilla/websocket"

	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
	"github.com/a55dbaac/berth/internal/testenv/fault"
)

// The tests of the unkind switches: each checks that the switch makes the
// fake do what its doc says the real service does.

// newPTY creates a PTY session and connects to it.
func newPTY(t *testing.T, s *Server, sandboxID, id string) *websocket.Conn {
	t.Helper()
	req := toolbox.NewPtyCreateRequest()
	req.SetId(id)
	if _, _, err := s.ToolboxClient(sandboxID, s.APIKey()).ProcessAPI.CreatePtySession(ctxT(t)).Request(*req).Execute(); err != nil {
		t.Fatalf("create pty %s: %v (%s)", id, err, body(err))
	}
	return ptyConn(t, s, sandboxID, id)
}

// TestUnkindSlowConsumerDroppedAtOnce: a client behind a link slower than
// the program's output is dropped with 1008 "slow consumer" as soon as its
// 256-message queue is full.
func TestUnkindSlowConsumerDroppedAtOnce(t *testing.T) {
	s := StartUnkind(t, Unkind{DropSlowConsumer: true, LinkBytesPerSec: 256 << 10})
	sb := create(t, s, apiclient.NewCreateSandbox())
	ws := newPTY(t, s, sb.Id, "fast")
	ws.WriteMessage(websocket.BinaryMessage, []byte("head -c 20000000 /dev/zero; echo; echo END-$((1+1))\n"))
	got := 0
	err := func() error {
		ws.SetReadDeadline(time.Now().Add(60 * time.Second))
		for {
			_, msg, err := ws.ReadMessage()
			if err != nil {
				return err
			}
			got += len(msg)
			if bytes.Contains(msg, []byte("END-2")) {
				return nil
			}
		}
	}()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.ClosePolicyViolation || ce.Text != "slow consumer" {
		t.Fatalf("after %d bytes: %v, want close 1008 slow consumer", got, err)
	}
	if got >= 20000000 {
		t.Fatalf("all %d bytes arrived before the drop", got)
	}
	if n := s.Unkindness().SlowConsumersDropped; n != 1 {
		t.Fatalf("%d clients counted as dropped, want 1", n)
	}
}

// TestUnkindCloseFirst: when the shell exits, its close message (with the
// exit code) overtakes the output still queued, which is lost.
func TestUnkindCloseFirst(t *testing.T) {
	// The slow link keeps output queued when the shell exits.
	s := StartUnkind(t, Unkind{CloseFirst: true, LinkBytesPerSec: 256 << 10})
	sb := create(t, s, apiclient.NewCreateSandbox())
	ws := newPTY(t, s, sb.Id, "bulk")
	ws.WriteMessage(websocket.BinaryMessage, []byte("head -c 2000000 /dev/zero; exit 5\n"))
	zeros := 0
	ws.SetReadDeadline(time.Now().Add(60 * time.Second))
	for {
		_, msg, err := ws.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			if !errors.As(err, &ce) || !strings.Contains(ce.Text, `"exitCode":5`) {
				t.Fatalf("end: %v", err)
			}
			break
		}
		zeros += bytes.Count(msg, []byte{0})
	}
	if zeros >= 2000000 {
		t.Fatalf("all %d bytes arrived before the close, want the queued tail lost", zeros)
	}
}

// TestUnkindListLag: a new sandbox is missing from lists until the lag
// passed, while get by id or name finds it at once.
func TestUnkindListLag(t *testing.T) {
	s := StartUnkind(t, Unkind{ListLag: time.Hour})
	req := apiclient.NewCreateSandbox()
	req.SetName("lagging")
	req.SetLabels(map[string]string{"lag": "1"})
	sb := create(t, s, req)
	api := s.APIClient(s.APIKey())
	ctx := ctxT(t)
	listed := func() bool {
		res, _, err := api.SandboxAPI.ListSandboxes(ctx).Labels(`{"lag":"1"}`).Execute()
		if err != nil {
			t.Fatal(err)
		}
		return len(res.Items) == 1 && res.Items[0].Id == sb.Id
	}
	if listed() {
		t.Fatal("a sandbox created just now is listed")
	}
	if got, _, err := api.SandboxAPI.GetSandbox(ctx, "lagging").Execute(); err != nil || got.Id != sb.Id {
		t.Fatalf("get by name: %v", err)
	}
	s.mu.Lock()
	s.sandboxes[sb.Id].createdAt = time.Now().Add(-2 * time.Hour)
	s.mu.Unlock()
	if !listed() {
		t.Fatal("a sandbox older than the lag is not listed")
	}
}

// TestUnkindRateLimit: one in every N calls of a bucket gets 429 with the
// throttler's Retry-After-<bucket> header, and is not done.
func TestUnkindRateLimit(t *testing.T) {
	s := StartUnkind(t, Unkind{RateLimitEvery: 2, RetryAfter: 7})
	api := s.APIClient(s.APIKey())
	ctx := ctxT(t)
	// Of two calls in a row one is refused; the seed says which.
	refused := 0
	for i := range 2 {
		_, resp, err := api.SandboxAPI.ListSandboxes(ctx).Execute()
		if err == nil {
			continue
		}
		if resp == nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After-authenticated") != "7" ||
			!strings.Contains(body(err), `"statusCode":429`) {
			t.Fatalf("list %d: %v %v", i+1, err, resp)
		}
		refused++
	}
	if refused != 1 {
		t.Fatalf("%d of two list calls refused, want one", refused)
	}
	// Creation has its own bucket: one of two creates is refused, and
	// creates nothing.
	made := ""
	for _, name := range []string{"first", "second"} {
		req := apiclient.NewCreateSandbox()
		req.SetName(name)
		_, resp, err := api.SandboxAPI.CreateSandbox(ctx).CreateSandbox(*req).Execute()
		if err == nil {
			made += name
			continue
		}
		if resp == nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After-sandbox-create") != "7" {
			t.Fatalf("create %s: %v %v", name, err, resp)
		}
		if _, ok := s.Sandbox(name); ok {
			t.Fatalf("the refused create of %s made a sandbox", name)
		}
	}
	if made != "first" && made != "second" {
		t.Fatalf("creates that passed: %q; want one of the two", made)
	}
	if err := s.WaitState(ctx, made, "started"); err != nil {
		t.Fatal(err)
	}
	if n := s.Unkindness().RateLimited; n != 2 {
		t.Fatalf("%d calls counted as rate-limited, want 2", n)
	}
}

// TestUnkindTransient: one in every N requests, toolbox and websocket
// upgrade included, gets 502 or 503 and is not done.
func TestUnkindTransient(t *testing.T) {
	s := StartUnkind(t, Unkind{TransientEvery: 2})
	api := s.APIClient(s.APIKey())
	ctx := ctxT(t)
	var codes []int
	for range 4 {
		_, resp, _ := api.SandboxAPI.ListSandboxes(ctx).Execute()
		codes = append(codes, resp.StatusCode)
	}
	for i, c := range codes {
		failed := c == 502 || c == 503
		if c != 200 && !failed || i > 0 && failed == (codes[i-1] != 200) {
			t.Fatalf("statuses %v, want 200 and 502 or 503 by turns", codes)
		}
	}
	// Of the next two requests, creates, one fails, and creates nothing.
	var sb *apiclient.Sandbox
	for _, name := range []string{"t-1", "t-2"} {
		req := apiclient.NewCreateSandbox()
		req.SetName(name)
		made, resp, err := api.SandboxAPI.CreateSandbox(ctx).CreateSandbox(*req).Execute()
		if err == nil {
			sb = made
			continue
		}
		if resp == nil || resp.StatusCode < 502 {
			t.Fatalf("create %s: %v", name, err)
		}
		if _, ok := s.Sandbox(name); ok {
			t.Fatalf("a create answered %d made a sandbox", resp.StatusCode)
		}
	}
	if sb == nil {
		t.Fatal("both creates failed")
	}
	if err := s.WaitState(ctx, sb.Id, "started"); err != nil {
		t.Fatal(err)
	}
	// The toolbox counts too: an execute answered 5xx ran nothing.
	tb := s.ToolboxClient(sb.Id, s.APIKey())
	for i := 0; i < 4; i++ {
		file := "/tmp/ran-" + string(rune('a'+i))
		_, resp, err := tb.ProcessAPI.ExecuteCommand(ctx).Request(*toolbox.NewExecuteRequest("touch " + file)).Execute()
		if err == nil {
			continue
		}
		if resp == nil || resp.StatusCode < 502 {
			t.Fatalf("execute: %v", err)
		}
		for {
			check, _, err := tb.ProcessAPI.ExecuteCommand(ctx).Request(*toolbox.NewExecuteRequest("ls " + file)).Execute()
			if err != nil {
				continue // the check itself met a transient answer
			}
			if check.GetExitCode() == 0 {
				t.Fatal("an execute answered 5xx ran")
			}
			return
		}
	}
	t.Fatal("no toolbox call got a transient 5xx")
}

// TestSeedReplaysDecisions: two fakes of one seed make the same decisions
// (which calls are refused, which 5xx, what delays) for the same requests;
// a fake of another seed makes others.
func TestSeedReplaysDecisions(t *testing.T) {
	u := Unkind{RateLimitEvery: 3, RetryAfter: 1, TransientEvery: 4, Jitter: fault.Jitter{Max: 2 * time.Millisecond}}
	decide := func(seed uint64) []fault.Decision {
		s := start(t, Options{Unkind: u, Seed: seed})
		api := s.APIClient(s.APIKey())
		ctx := ctxT(t)
		for range 12 {
			api.SandboxAPI.ListSandboxes(ctx).Execute()
		}
		req := apiclient.NewCreateSandbox()
		req.SetName("replay")
		id := ""
		for range 20 {
			if sb, _, err := api.SandboxAPI.CreateSandbox(ctx).CreateSandbox(*req).Execute(); err == nil {
				id = sb.Id
				break
			}
		}
		if id == "" {
			t.Fatal("no create passed in 20 tries")
		}
		if err := s.WaitState(ctx, id, "started"); err != nil {
			t.Fatal(err)
		}
		for range 12 {
			api.SandboxAPI.GetSandbox(ctx, id).Execute()
			api.SandboxAPI.GetSandbox(ctx, "replay").Execute()
			r, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.ToolboxProxyURL()+"/"+id+"/version", nil)
			r.Header.Set("Authorization", "Bearer "+s.APIKey())
			if resp, err := http.DefaultClient.Do(r); err == nil {
				resp.Body.Close()
			}
		}
		return s.Decisions()
	}
	a, b, other := decide(12345), decide(12345), decide(54321)
	hits := 0
	for _, d := range a {
		if d.Hit {
			hits++
		}
	}
	if hits == 0 {
		t.Fatalf("no fault hit: the test tests nothing (%v)", a)
	}
	if !slices.Equal(a, b) {
		t.Fatalf("two fakes of seed 12345 decided differently:\n%v\n%v", a, b)
	}
	if slices.Equal(a, other) {
		t.Fatal("seeds 12345 and 54321 made the same decisions: the seed plays no part")
	}
}

// TestSeedFromEnvironment: BERTH_FAKE_SEED gives the fake its seed; a
// value that is no number is refused with the variable's name.
func TestSeedFromEnvironment(t *testing.T) {
	t.Setenv(fault.SeedEnv, "4242")
	if s := StartRealistic(t); s.Seed() != 4242 {
		t.Fatalf("seed %d with BERTH_FAKE_SEED=4242", s.Seed())
	}
	t.Setenv(fault.SeedEnv, "x")
	if _, err := New(Options{Docker: dockerenv.Require(t)}); err == nil || !strings.Contains(err.Error(), "BERTH_FAKE_SEED") {
		t.Fatalf("BERTH_FAKE_SEED=x: %v", err)
	}
}

// TestUnkindExecShell: execute runs the command through the user's shell:
// expansions, operators and pipes work; a timeout kills the group at once.
func TestUnkindExecShell(t *testing.T) {
	s := StartUnkind(t, Unkind{ExecShell: true})
	sb := create(t, s, apiclient.NewCreateSandbox())
	tb := s.ToolboxClient(sb.Id, s.APIKey())
	res, _, err := execute(t, tb, `echo $HOME && echo a | tr a b; echo "$0" >/dev/null; exit 3`)
	if err != nil || res.Result != "/root\nb\n" || res.GetExitCode() != 3 {
		t.Fatalf("shell command: %v %q exit %d", err, res.GetResult(), res.GetExitCode())
	}
	// The old daemon's quote splitting would have given the literal text.
	res, _, err = execute(t, tb, `echo 'it''s' "$((6*7))"`)
	if err != nil || res.Result != "its 42\n" {
		t.Fatalf("quoting: %v %q", err, res.GetResult())
	}
	req := toolbox.NewExecuteRequest("sleep 1919 & sleep 1919")
	req.SetTimeout(1)
	if _, resp, err := tb.ProcessAPI.ExecuteCommand(ctxT(t)).Request(*req).Execute(); err == nil || resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("timeout: %v", err)
	}
	if res, _, err := execute(t, tb, `ps -o args | grep -c '^sleep 1919' || true`); err != nil || strings.TrimSpace(res.Result) != "0" {
		t.Fatalf("processes after the timeout: %v %q", err, res.GetResult())
	}
}

// TestUnkindNonRootUser: sandboxes report the user daytona and run as uid
// 1000 with home /home/daytona; /root is closed to it.
func TestUnkindNonRootUser(t *testing.T) {
	s := StartUnkind(t, Unkind{NonRootUser: true, ExecShell: true})
	sb := create(t, s, apiclient.NewCreateSandbox())
	if sb.User != "daytona" {
		t.Fatalf("user %q, want daytona", sb.User)
	}
	tb := s.ToolboxClient(sb.Id, s.APIKey())
	res, _, err := execute(t, tb, `id -u; echo $HOME; pwd; ls /root >/dev/null 2>&1 || echo closed`)
	if err != nil || res.Result != "1000\n/home/daytona\n/home/daytona\nclosed\n" {
		t.Fatalf("as the sandbox user: %v %q", err, res.GetResult())
	}
	home, _, err := tb.InfoAPI.GetUserHomeDir(ctxT(t)).Execute()
	if err != nil || home.Dir != "/home/daytona" {
		t.Fatalf("user-home-dir: %v %+v", err, home)
	}
	ws := newPTY(t, s, sb.Id, "home")
	ws.WriteMessage(websocket.BinaryMessage, []byte("echo \"at:$PWD:$(id -u)\"\n"))
	readUntil(t, ws, "at:/home/daytona:1000")
}

// TestUnkindIdleCut: a websocket that carries nothing is cut; one the
// client pings stays.
func TestUnkindIdleCut(t *testing.T) {
	s := StartUnkind(t, Unkind{IdleCut: 3 * time.Second}) // 30 pings' worth: no scheduling hiccup under load reaches it
	sb := create(t, s, apiclient.NewCreateSandbox())
	pinged := newPTY(t, s, sb.Id, "pinged")
	idle := newPTY(t, s, sb.Id, "idle")
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				pinged.WriteControl(websocket.PingMessage, nil, time.Now().Add(time.Second))
			}
		}
	}()
	go func() { // the pongs are read by reading
		for {
			if _, _, err := pinged.ReadMessage(); err != nil {
				return
			}
		}
	}()
	err := closeCode(t, idle)
	var ce *websocket.CloseError
	if errors.As(err, &ce) && ce.Code != websocket.CloseAbnormalClosure {
		t.Fatalf("idle connection ended with %v, want an abrupt cut", err)
	}
	// The pinged one outlives the idle one's cut by as long again.
	time.Sleep(3 * time.Second)
	if err := pinged.WriteMessage(websocket.BinaryMessage, []byte("echo alive-$((2+2))\n")); err != nil {
		t.Fatal(err)
	}
	if n := s.Unkindness().IdleCut; n != 1 {
		t.Fatalf("%d connections cut, want 1", n)
	}
}

// TestDisruptions: each disruption done to a sandbox in the middle of a
// PTY command, and recover for a recoverable error.
func TestDisruptions(t *testing.T) {
	s := Start(t)
	api := s.APIClient(s.APIKey())
	for _, d := range []Disruption{Stop, Archive, Delete, ErrorRecoverable, ErrorFatal} {
		t.Run(strings.ReplaceAll(d.String(), " ", "_"), func(t *testing.T) {
			ctx := ctxT(t)
			sb := create(t, s, apiclient.NewCreateSandbox())
			tb := s.ToolboxClient(sb.Id, s.APIKey())
			if res, _, err := execute(t, tb, `sh -c "echo kept >/root/kept"`); err != nil || res.GetExitCode() != 0 {
				t.Fatal(err)
			}
			done, err := s.DisruptOnOutput(sb.Id, "MID-2-CMD", d)
			if err != nil {
				t.Fatal(err)
			}
			ws := newPTY(t, s, sb.Id, "victim")
			ws.WriteMessage(websocket.BinaryMessage, []byte("echo MID-$((1+1))-CMD; sleep 2020\n"))
			if err := closeCode(t, ws); err == nil {
				t.Fatal("the connection outlived the disruption")
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			info, ok := s.Sandbox(sb.Id)
			switch d {
			case Stop:
				ok = ok && info.State == "stopped"
			case Archive:
				ok = ok && info.State == "archived"
			case Delete:
				ok = !ok
			default:
				ok = ok && info.State == "error" && info.Recoverable == (d == ErrorRecoverable)
			}
			if !ok {
				t.Fatalf("after %s: %+v", d, info)
			}
			if d != ErrorRecoverable && d != ErrorFatal {
				return
			}
			got, resp, err := api.SandboxAPI.GetSandbox(ctx, sb.Id).Execute()
			if err != nil || got.GetRecoverable() != (d == ErrorRecoverable) {
				t.Fatalf("recoverable in the DTO: %v %v", err, got.Recoverable)
			}
			_, resp, err = api.SandboxAPI.RecoverSandbox(ctx, sb.Id).Execute()
			if d == ErrorFatal {
				if err == nil || resp.StatusCode != 400 || !strings.Contains(body(err), "not in a recoverable state") {
					t.Fatalf("recover of a fatal error: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("recover: %v (%s)", err, body(err))
			}
			waitState(t, s, sb.Id, apiclient.SANDBOXSTATE_STARTED)
			if res, _, err := execute(t, tb, `cat /root/kept`); err != nil || res.Result != "kept\n" {
				t.Fatalf("file after recover: %v %q", err, res.GetResult())
			}
			if _, resp, err := api.SandboxAPI.RecoverSandbox(ctx, sb.Id).Execute(); err == nil || resp.StatusCode != 400 {
				t.Fatalf("recover of a started sandbox: %v", err)
			}
		})
	}
}

// TestBulkFiles checks the SDK's file calls: bulk upload of two files,
// bulk download of them and of a missing one (an error part).
func TestBulkFiles(t *testing.T) {
	s := Start(t)
	sb := create(t, s, apiclient.NewCreateSandbox())
	base := s.ToolboxProxyURL() + "/" + sb.Id
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	for i, f := range []struct{ path, data string }{{"/tmp/bulk/a", "alpha\n"}, {"/tmp/bulk/b c", "beta"}} {
		w, _ := mw.CreateFormField("files[" + string(rune('0'+i)) + "].path")
		io.WriteString(w, f.path)
		w, _ = mw.CreateFormFile("files["+string(rune('0'+i))+"].file", f.path)
		io.WriteString(w, f.data)
	}
	mw.Close()
	req, _ := http.NewRequestWithContext(ctxT(t), "POST", base+"/files/bulk-upload", &form)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Authorization", "Bearer "+s.APIKey())
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("bulk upload: %v %v", err, resp)
	}
	resp.Body.Close()

	js, _ := json.Marshal(toolbox.NewFilesDownloadRequest([]string{"/tmp/bulk/a", "/tmp/bulk/b c", "/tmp/bulk/none"}))
	req, _ = http.NewRequestWithContext(ctxT(t), "POST", base+"/files/bulk-download", bytes.NewReader(js))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.APIKey())
	resp, err = http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("bulk download: %v %v", err, resp)
	}
	defer resp.Body.Close()
	_, params, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	mr := multipart.NewReader(resp.Body, params["boundary"])
	got := map[string]string{}
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(p)
		_, cd, _ := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
		got[p.FormName()+" "+cd["filename"]] = string(b) // the whole path, as the SDK's busboy reads it (preservePath)
	}
	if got["file /tmp/bulk/a"] != "alpha\n" || got["file /tmp/bulk/b c"] != "beta" || !strings.Contains(got["error /tmp/bulk/none"], "file not found") {
		t.Fatalf("download parts: %q", got)
	}
	// Anything the fake does not serve says so.
	req, _ = http.NewRequestWithContext(ctxT(t), "GET", base+"/process/session", nil)
	req.Header.Set("Authorization", "Bearer "+s.APIKey())
	resp2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp2.Body)
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusNotImplemented || !strings.Contains(string(b), "not implemented") {
		t.Fatalf("unimplemented endpoint: %d %s", resp2.StatusCode, b)
	}
}

// TestRealisticTurnsEverySwitchOn: the realistic preset leaves no switch
// off, so a switch added later is not forgotten there.
func TestRealisticTurnsEverySwitchOn(t *testing.T) {
	v := reflect.ValueOf(Realistic())
	for i := 0; i < v.NumField(); i++ {
		if v.Field(i).IsZero() {
			t.Errorf("Realistic leaves %s off", v.Type().Field(i).Name)
		}
	}
	if !Realistic().On() || (Unkind{}).On() {
		t.Error("On does not tell the presets apart")
	}
}
