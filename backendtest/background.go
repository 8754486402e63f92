package backendtest

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/process"
	"github.com/a55dbaac/berth/terminal"
)

// backgroundTests are the process tool and lifecycle behaviours.
func backgroundTests() []namedTest {
	return []namedTest{
		{"BackgroundStartAndWait", (*Suite).testBackgroundStartWait, sharedEnv},
		{"BackgroundInheritsSessionState", (*Suite).testBackgroundState, sharedEnv},
		{"BackgroundSessionStaysFree", (*Suite).testBackgroundSessionFree, sharedEnv},
		{"BackgroundExitedWhileChildHoldsOutput", (*Suite).testBackgroundChildHoldsPipe, sharedEnv},
		{"BackgroundStdin", (*Suite).testBackgroundStdin, sharedEnv},
		{"BackgroundKillTree", (*Suite).testBackgroundKill, sharedEnv},
		{"BackgroundPTY", (*Suite).testBackgroundPTY, sharedEnv},
		{"BackgroundLogListAndIDs", (*Suite).testBackgroundLogList, sharedEnv},
		{"LongForegroundTimeoutGoesBackground", (*Suite).testForegroundPromotion, sharedEnv},
		{"ConcurrentFirstCallsMakeOneEnvironment", (*Suite).testConcurrentFirstCalls, sharedEnv},
		{"IdleEnvironmentSwept", (*Suite).testIdleSweep, freshEnv},
		{"OnTimeoutBackground", (*Suite).testOnTimeoutBackground, sharedEnv},
		{"DetachForeground", (*Suite).testDetachForeground, sharedEnv},
	}
}

// mgr builds a manager whose environments are the case's backends (s.f:
// handles on the group's environment, or environments of the case's own
// for a fresh case); it counts how many backends it asked for.
func (s *Suite) mgr(t *testing.T, lifetime int) (*manager.Manager, *atomic.Int32) {
	t.Helper()
	cfg := &config.Config{Home: t.TempDir(), Terminal: config.Default().Terminal, MaxOutputChars: 50000}
	cfg.Terminal.Cwd = s.opts.Cwd
	cfg.Terminal.DaemonTermGraceSeconds = s.opts.Grace.Seconds()
	cfg.Terminal.Timeout = 60
	if lifetime > 0 {
		cfg.Terminal.LifetimeSeconds = lifetime
	}
	var built atomic.Int32
	var m *manager.Manager
	var closeOnce sync.Once
	closeAll := func() {
		closeOnce.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			m.CloseAll(ctx)
		})
	}
	m = manager.NewWithFactory(cfg, nil, func(ctx context.Context, _ backend.Options) (backend.Backend, error) {
		built.Add(1)
		be := s.f(t)
		// Cleanups run last-registered first: the manager must close (and
		// kill its background processes) while the backend s.f registered
		// for closing still reaches the target.
		t.Cleanup(closeAll)
		return be, nil
	})
	t.Cleanup(closeAll)
	return m, &built
}

func start(t *testing.T, m *manager.Manager, req terminal.Request) process.StartResult {
	t.Helper()
	req.Background = true
	r := m.Background(context.Background(), "k", req)
	if r.Error != nil {
		t.Fatalf("background %q: %s", req.Command, *r.Error)
	}
	return r
}

func do(m *manager.Manager, id, action string) process.Result {
	return m.Process(context.Background(), "k", process.Request{Action: action, SessionID: id})
}

var idPattern = regexp.MustCompile(`^proc_[0-9a-f]{12}$`)

func (s *Suite) testBackgroundStartWait(t *testing.T) {
	m, _ := s.mgr(t, 0)
	r := start(t, m, terminal.Request{Command: "echo hi; sleep 1; echo bye; exit 3"})
	if !idPattern.MatchString(r.SessionID) || r.Output != "Background process started" || r.ExitCode != 0 {
		t.Fatalf("start result %+v", r)
	}
	if r.PID == nil || *r.PID <= 0 {
		t.Errorf("pid %v, want the process's pid", r.PID)
	}
	if p := do(m, r.SessionID, "poll"); p["status"] != process.Running {
		t.Fatalf("poll right after start: %v", p)
	}
	begin := time.Now()
	w := m.Process(context.Background(), "k", process.Request{Action: "wait", SessionID: r.SessionID, Timeout: 30})
	// The process lives about a second; the wait's own timeout is 30 s. A
	// wait that returned only at its timeout would say "timeout"; the hang
	// guard catches one that missed the exit altogether. How soon it
	// returns is measured by process's BenchmarkWaitAfterExit, not here.
	if d := time.Since(begin); d > hangGuard {
		t.Errorf("wait returned %v after the call, the process lived ~1 s", d)
	}
	if w["status"] != process.Exited || w["exit_code"] != 3 || w["output"] != "hi\nbye" {
		t.Fatalf("wait: %v", w)
	}
	if p := do(m, r.SessionID, "poll"); p["status"] != process.Exited || p["exit_code"] != 3 {
		t.Fatalf("poll after exit: %v", p)
	}
}

func (s *Suite) testBackgroundState(t *testing.T) {
	m, _ := s.mgr(t, 0)
	dir := fmt.Sprintf("%s/berth-bg-%d", s.opts.Scratch, time.Now().UnixNano())
	fg := m.Run(context.Background(), "k", terminal.Request{Command: "mkdir -p " + dir + " && cd " + dir + " && export BG_VAR='x y'"})
	if fg.Error != nil || fg.ExitCode != 0 {
		t.Fatalf("setup: %+v", fg)
	}
	defer m.Run(context.Background(), "k", terminal.Request{Command: "rm -rf " + dir})
	r := start(t, m, terminal.Request{Command: "echo \"$BG_VAR\"; pwd; echo $PAGER"})
	w := m.Process(context.Background(), "k", process.Request{Action: "wait", SessionID: r.SessionID, Timeout: 20})
	if w["output"] != "x y\n"+dir+"\ncat" {
		t.Fatalf("background did not inherit the session's state: %v", w)
	}
	r = start(t, m, terminal.Request{Command: "pwd", Workdir: "/"})
	w = m.Process(context.Background(), "k", process.Request{Action: "wait", SessionID: r.SessionID, Timeout: 20})
	if w["output"] != "/" {
		t.Fatalf("background workdir: %v", w)
	}
}

func (s *Suite) testBackgroundSessionFree(t *testing.T) {
	m, _ := s.mgr(t, 0)
	r := start(t, m, terminal.Request{Command: "sleep 1007" + s.tag})
	begin := time.Now()
	fg := m.Run(context.Background(), "k", terminal.Request{Command: "echo free"})
	// The background job sleeps for 1007 s: a session it held would keep
	// the foreground call far past the hang guard.
	if fg.Output != "free" || time.Since(begin) > hangGuard {
		t.Fatalf("foreground while a background job runs: %+v after %v", fg, time.Since(begin))
	}
	if k := do(m, r.SessionID, "kill"); k["status"] != "killed" {
		t.Fatalf("kill: %v", k)
	}
}

func (s *Suite) testBackgroundChildHoldsPipe(t *testing.T) {
	m, _ := s.mgr(t, 0)
	r := start(t, m, terminal.Request{Command: "sh -c '(sleep 1008" + s.tag + ") & exit 0'"})
	w := m.Process(context.Background(), "k", process.Request{Action: "wait", SessionID: r.SessionID, Timeout: 5})
	if w["status"] != process.Exited {
		t.Fatalf("process whose child holds the output: %v, want exited", w)
	}
	m.Run(context.Background(), "k", terminal.Request{Command: killProcs("1008" + s.tag)})
}

func (s *Suite) testBackgroundStdin(t *testing.T) {
	m, _ := s.mgr(t, 0)
	r := start(t, m, terminal.Request{Command: `read line; echo "got:$line"`})
	if res := m.Process(context.Background(), "k", process.Request{Action: "submit", SessionID: r.SessionID, Data: "hello"}); res["status"] != "ok" {
		// What the process printed and how it ended tells an early end of
		// its stdin ("got:") from a process that never read it.
		w := m.Process(context.Background(), "k", process.Request{Action: "wait", SessionID: r.SessionID, Timeout: 5})
		t.Fatalf("submit: %v (the process: %v)", res, w)
	}
	w := m.Process(context.Background(), "k", process.Request{Action: "wait", SessionID: r.SessionID, Timeout: 20})
	if w["output"] != "got:hello" || w["exit_code"] != 0 {
		t.Fatalf("after submit: %v", w)
	}

	r = start(t, m, terminal.Request{Command: "cat; echo END"})
	m.Process(context.Background(), "k", process.Request{Action: "write", SessionID: r.SessionID, Data: "abc"})
	m.Process(context.Background(), "k", process.Request{Action: "write", SessionID: r.SessionID, Data: "def\n"})
	if res := do(m, r.SessionID, "close"); res["status"] != "ok" {
		t.Fatalf("close: %v", res)
	}
	w = m.Process(context.Background(), "k", process.Request{Action: "wait", SessionID: r.SessionID, Timeout: 20})
	if w["output"] != "abcdef\nEND" || w["status"] != process.Exited {
		t.Fatalf("after write+close: %v", w)
	}
	if res := m.Process(context.Background(), "k", process.Request{Action: "write", SessionID: r.SessionID, Data: "x"}); res["error"] == nil {
		t.Fatalf("write to an exited process accepted: %v", res)
	}
}

func (s *Suite) testBackgroundKill(t *testing.T) {
	m, _ := s.mgr(t, 0)
	r := start(t, m, terminal.Request{Command: "sleep 1009" + s.tag + " & sh -c 'sleep 1009" + s.tag + "'; sleep 1009" + s.tag})
	time.Sleep(300 * time.Millisecond)
	if k := do(m, r.SessionID, "kill"); k["status"] != "killed" {
		t.Fatalf("kill: %v", k)
	}
	if p := do(m, r.SessionID, "poll"); p["status"] != process.Exited {
		t.Fatalf("poll after kill: %v", p)
	}
	fg := m.Run(context.Background(), "k", terminal.Request{Command: countProcs("1009" + s.tag)})
	if fg.Output != "0" {
		t.Fatalf("%s processes of the killed tree still running", fg.Output)
	}
	if k := do(m, r.SessionID, "kill"); k["status"] != "already_exited" {
		t.Fatalf("second kill: %v", k)
	}
}

func (s *Suite) testBackgroundPTY(t *testing.T) {
	m, _ := s.mgr(t, 0)
	r := start(t, m, terminal.Request{Command: "tty", PTY: true})
	w := m.Process(context.Background(), "k", process.Request{Action: "wait", SessionID: r.SessionID, Timeout: 20})
	out, _ := w["output"].(string)
	if !strings.HasPrefix(strings.TrimSpace(out), "/dev/") || w["exit_code"] != 0 {
		t.Fatalf("tty with pty: %v", w)
	}
	r = start(t, m, terminal.Request{Command: "tty"})
	w = m.Process(context.Background(), "k", process.Request{Action: "wait", SessionID: r.SessionID, Timeout: 20})
	if w["exit_code"] == 0 {
		t.Fatalf("tty without pty claims a terminal: %v", w)
	}
	r = start(t, m, terminal.Request{Command: `read line; echo "got:$line"`, PTY: true})
	m.Process(context.Background(), "k", process.Request{Action: "submit", SessionID: r.SessionID, Data: "typed"})
	w = m.Process(context.Background(), "k", process.Request{Action: "wait", SessionID: r.SessionID, Timeout: 20})
	if out, _ := w["output"].(string); !strings.Contains(out, "got:typed") {
		t.Fatalf("submit on a pty: %v", w)
	}
}

func (s *Suite) testBackgroundLogList(t *testing.T) {
	m, _ := s.mgr(t, 0)
	r := start(t, m, terminal.Request{Command: `i=0; while [ $i -lt 300 ]; do echo "line $i"; i=$((i+1)); done`})
	m.Process(context.Background(), "k", process.Request{Action: "wait", SessionID: r.SessionID, Timeout: 20})
	l := do(m, r.SessionID, "log")
	out, _ := l["output"].(string)
	lines := strings.Split(out, "\n")
	if l["total_lines"] != 300 || len(lines) != 200 || lines[0] != "line 100" || lines[199] != "line 299" {
		t.Fatalf("default log: total %v, %d lines from %q", l["total_lines"], len(lines), lines[0])
	}
	off, lim := 10, 3
	l = m.Process(context.Background(), "k", process.Request{Action: "log", SessionID: r.SessionID, Offset: &off, Limit: &lim})
	if l["output"] != "line 10\nline 11\nline 12" {
		t.Fatalf("log offset 10 limit 3: %v", l["output"])
	}
	short := strings.TrimPrefix(r.SessionID, "proc_")[:6]
	if p := do(m, short, "poll"); p["session_id"] != r.SessionID {
		t.Fatalf("prefix %q did not resolve: %v", short, p)
	}
	if p := do(m, "proc_"+short, "poll"); p["session_id"] != r.SessionID {
		t.Fatalf("prefix proc_%q did not resolve: %v", short, p)
	}
	if p := do(m, "ffffffffffff", "poll"); p["status"] != "not_found" || !strings.Contains(fmt.Sprint(p["error"]), "No process with ID") {
		t.Fatalf("unknown id: %v", p)
	}
	list := m.Process(context.Background(), "k", process.Request{Action: "list"})
	items, _ := list["processes"].([]map[string]any)
	if len(items) != 1 || items[0]["session_id"] != r.SessionID || items[0]["status"] != process.Exited || items[0]["exit_code"] != 0 {
		t.Fatalf("list: %v", list)
	}
	for _, f := range []string{"command", "cwd", "pid", "started_at", "uptime_seconds", "output_preview"} {
		if _, ok := items[0][f]; !ok {
			t.Errorf("list entry lacks %q", f)
		}
	}
}

func (s *Suite) testForegroundPromotion(t *testing.T) {
	m, _ := s.mgr(t, 0)
	res := m.Terminal(context.Background(), "k", terminal.Request{Command: "echo promoted", Timeout: 601})
	r := res.Background
	if r == nil || r.Error != nil || !idPattern.MatchString(r.SessionID) || !strings.Contains(r.Output, "background") {
		t.Fatalf("foreground request with timeout 601: %#v", res)
	}
	w := m.Process(context.Background(), "k", process.Request{Action: "wait", SessionID: r.SessionID, Timeout: 20})
	if w["output"] != "promoted" {
		t.Fatalf("promoted job: %v", w)
	}
	if m.Terminal(context.Background(), "k", terminal.Request{Command: "true", Timeout: 600}).Foreground == nil {
		t.Fatalf("timeout 600 should stay in the foreground")
	}
}

func (s *Suite) testConcurrentFirstCalls(t *testing.T) {
	m, built := s.mgr(t, 0)
	var wg sync.WaitGroup
	results := make([]terminal.Result, 20)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = m.Run(context.Background(), "shared", terminal.Request{Command: fmt.Sprintf("echo %d", i)})
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r.Error != nil || r.Output != fmt.Sprint(i) {
			t.Errorf("call %d: %+v", i, r)
		}
	}
	if n := built.Load(); n != 1 {
		t.Fatalf("20 concurrent first calls built %d environments, want 1", n)
	}
}

func (s *Suite) testIdleSweep(t *testing.T) {
	m, built := s.mgr(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m.StartSweeper(ctx)
	if r := m.Run(ctx, "idle", terminal.Request{Command: "true"}); r.Error != nil {
		t.Fatal(*r.Error)
	}
	busy := m.Background(ctx, "busy", terminal.Request{Command: "sleep 1010" + s.tag, Background: true})
	if busy.Error != nil {
		t.Fatal(*busy.Error)
	}
	// A shell job (`cmd &`) is work in progress too: sweeping would kill it.
	if r := m.Run(ctx, "shelljob", terminal.Request{Command: "sleep 1011" + s.tag + " >/dev/null 2>&1 &"}); r.Error != nil {
		t.Fatal(*r.Error)
	}
	want := []string{"busy", "shelljob"}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) && !slices.Equal(m.Keys(), want) {
		time.Sleep(100 * time.Millisecond)
	}
	if keys := m.Keys(); !slices.Equal(keys, want) {
		t.Fatalf("after the lifetime, environments %v; want %v kept (a background process, a shell job)", keys, want)
	}
	// Using a swept key again creates a fresh environment, and says so:
	// the shell state of the old one is gone.
	r := m.Run(ctx, "idle", terminal.Request{Command: "echo back"})
	if r.Output != "back" || !r.EnvironmentRecreated {
		t.Fatalf("reuse after sweep: %+v; want output back and environment_recreated", r)
	}
	if r := m.Run(ctx, "idle", terminal.Request{Command: "echo again"}); r.EnvironmentRecreated {
		t.Fatalf("second command after the sweep also says environment_recreated: %+v", r)
	}
	if n := built.Load(); n != 4 {
		t.Fatalf("built %d environments, want 4 (idle, busy, shelljob, idle again)", n)
	}
	if r := m.Process(ctx, "busy", process.Request{Action: "kill", SessionID: busy.SessionID}); r["status"] != "killed" {
		t.Errorf("kill of the busy key's process: %v", r)
	}
	m.Run(ctx, "shelljob", terminal.Request{Command: "kill %1"})
}

// procAlive is a command printing 1 while pid is a live (not zombie)
// process, else 0.
func procAlive(pid int) string {
	return fmt.Sprintf(`if IFS= read -r l 2>/dev/null </proc/%d/stat; then l=${l##*) }; case $l in Z*) echo 0;; *) echo 1;; esac; else echo 0; fi`, pid)
}

func (s *Suite) testOnTimeoutBackground(t *testing.T) {
	m, _ := s.mgr(t, 0)
	dir := fmt.Sprintf("%s/berth-ot-%d", s.opts.Scratch, time.Now().UnixNano())
	fg := m.Run(context.Background(), "k", terminal.Request{Command: "mkdir -p " + dir + " && cd " + dir + " && export OT_VAR='a b'"})
	if fg.Error != nil || fg.ExitCode != 0 {
		t.Fatalf("setup: %+v", fg)
	}
	defer m.Run(context.Background(), "k", terminal.Request{Command: "rm -rf " + dir})

	// The command runs until the test lets it end (a file appears), so
	// "still running" below never depends on how fast the next shell starts.
	res := m.Terminal(context.Background(), "k", terminal.Request{Command: "echo start; until [ -e " + dir + "/go ]; do sleep 0.1; done; echo end; exit 3", Timeout: 1, OnTimeout: terminal.OnTimeoutBackground})
	r := res.Foreground
	if r == nil || r.Error != nil {
		t.Fatalf("terminal: %#v", res)
	}
	if !r.MovedToBackground || !idPattern.MatchString(r.SessionID) || r.PID <= 0 {
		t.Fatalf("result does not say where the command went: %+v", r)
	}
	if !strings.HasPrefix(r.Output, "start\n[Command still running after 1s: moved to the background as session_id "+r.SessionID) {
		t.Fatalf("output %q: want the output so far and the note", r.Output)
	}
	b, err := json.Marshal(r)
	if err != nil || !strings.Contains(string(b), `"exit_code":null`) || !strings.Contains(string(b), `"session_id":"`+r.SessionID+`"`) {
		t.Fatalf("JSON %s (%v): want exit_code null and the session_id", b, err)
	}

	// The session answers at once, in a fresh shell with the state of
	// before, while the moved command still runs.
	now := m.Run(context.Background(), "k", terminal.Request{Command: `echo "$OT_VAR"; pwd`})
	if now.Error != nil || now.Output != "a b\n"+dir || now.ExitCode != 0 {
		t.Fatalf("next command: %+v", now)
	}
	if p := do(m, r.SessionID, "poll"); p["status"] != process.Running {
		t.Fatalf("the moved command is not running while the next one answered: %v", p)
	}
	if l := m.Process(context.Background(), "k", process.Request{Action: "list"}); !strings.Contains(fmt.Sprint(l), r.SessionID) {
		t.Fatalf("list does not show %s: %v", r.SessionID, l)
	}
	if g := m.Run(context.Background(), "k", terminal.Request{Command: "touch " + dir + "/go"}); g.Error != nil || g.ExitCode != 0 {
		t.Fatalf("letting the moved command end: %+v", g)
	}

	w := m.Process(context.Background(), "k", process.Request{Action: "wait", SessionID: r.SessionID, Timeout: 30})
	if w["status"] != process.Exited || w["exit_code"] != 3 {
		t.Fatalf("wait: %v", w)
	}
	if l := do(m, r.SessionID, "log"); l["output"] != "start\nend" {
		t.Fatalf("log: %v, want start and end", l)
	}
	// Nothing of it is left: the shell that ran it was reaped.
	if a := m.Run(context.Background(), "k", terminal.Request{Command: procAlive(r.PID)}); a.Output != "0" {
		t.Fatalf("the moved command's shell %d is still alive: %+v", r.PID, a)
	}
	if a := m.Run(context.Background(), "k", terminal.Request{Command: "echo $OT_VAR"}); a.Output != "a b" {
		t.Fatalf("session state after the moved command ended: %+v", a)
	}

	// kill stops a moved command and its whole tree.
	res = m.Terminal(context.Background(), "k", terminal.Request{Command: "sh -c 'sleep 1012" + s.tag + "' & sleep 1012" + s.tag, Timeout: 1, OnTimeout: terminal.OnTimeoutBackground})
	if r = res.Foreground; r == nil || !r.MovedToBackground {
		t.Fatalf("second move: %#v", res)
	}
	if k := do(m, r.SessionID, "kill"); k["status"] != "killed" {
		t.Fatalf("kill: %v", k)
	}
	if c := m.Run(context.Background(), "k", terminal.Request{Command: countProcs("1012" + s.tag)}); c.Output != "0" {
		t.Fatalf("%s processes of the killed command still running", c.Output)
	}
	if w := do(m, r.SessionID, "poll"); w["status"] != process.Exited {
		t.Fatalf("poll after kill: %v", w)
	}

	// The default stays kill.
	r = m.Terminal(context.Background(), "k", terminal.Request{Command: "sleep 1013" + s.tag, Timeout: 1}).Foreground
	if r == nil || r.MovedToBackground || r.ExitCode != 124 {
		t.Fatalf("on_timeout default: %+v", r)
	}
}

func (s *Suite) testDetachForeground(t *testing.T) {
	m, _ := s.mgr(t, 0)
	got := make(chan terminal.Result, 1)
	go func() {
		got <- m.Run(context.Background(), "k", terminal.Request{Command: "echo one; sleep 1014" + s.tag + "; echo two", Timeout: 50})
	}()
	// The running call is listed as a foreground command.
	var id string
	for deadline := time.Now().Add(20 * time.Second); id == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		items, _ := m.Process(context.Background(), "k", process.Request{Action: "list"})["processes"].([]map[string]any)
		for _, it := range items {
			if it["status"] == process.StatusForeground {
				id, _ = it["session_id"].(string)
			}
		}
	}
	if id == "" {
		t.Fatal("the running foreground call is not in process list")
	}
	if p := do(m, id, "poll"); p["error"] == nil || !strings.Contains(fmt.Sprint(p["error"]), "detach") {
		t.Fatalf("poll of a foreground command: %v, want an error pointing to detach", p)
	}
	d := do(m, id, "detach")
	if d["status"] != "detached" || d["session_id"] != id {
		t.Fatalf("detach: %v", d)
	}
	r := <-got
	// The detach may come before or after "one": either way it is in the
	// call's output or in the process's log, once.
	if !r.MovedToBackground || r.SessionID != id || !strings.HasSuffix(r.Output, "[Command moved to the background on request as session_id "+id+"; follow it with the process tool (poll, log, wait, kill)]") {
		t.Fatalf("the detached call's result: %+v", r)
	}
	if fg := m.Run(context.Background(), "k", terminal.Request{Command: "echo free"}); fg.Output != "free" {
		t.Fatalf("session after detach: %+v", fg)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		p := do(m, id, "poll")
		if p["status"] != process.Running {
			t.Fatalf("poll of the detached command: %v", p)
		}
		if strings.Contains(fmt.Sprint(p["output_preview"]), "one") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the detached command's output never showed in its log: %v", p)
		}
	}
	if w := do(m, id, "write"); w["error"] == nil {
		t.Fatalf("write to a detached foreground command accepted: %v", w)
	}
	if k := do(m, id, "kill"); k["status"] != "killed" {
		t.Fatalf("kill: %v", k)
	}
	if c := m.Run(context.Background(), "k", terminal.Request{Command: countProcs("1014" + s.tag)}); c.Output != "0" {
		t.Fatalf("%s processes of the detached command still running after kill", c.Output)
	}
	if d := do(m, id, "detach"); d["error"] == nil {
		t.Fatalf("detach of a background process: %v", d)
	}
}
