package manager_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a55dbaac/berth/approval"
	"github.com/a55dbaac/berth/backend"
	_ "github.com/a55dbaac/berth/backend/local"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/process"
	"github.com/a55dbaac/berth/terminal"
)

// guard wraps the local backend and watches everything berth sends into
// the environment (argv and stdin). Text containing a forbidden marker is
// recorded and never passed on, so a gate that failed to stop a floor
// command cannot damage this machine: the test sees it instead.
type guard struct {
	backend.Backend
	forbidden []string

	mu   sync.Mutex
	sent strings.Builder
	hits []string
}

func (g *guard) check(s string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, f := range g.forbidden {
		if strings.Contains(s, f) {
			g.hits = append(g.hits, s)
			return fmt.Errorf("guard: refused to pass on %q", f)
		}
	}
	g.sent.WriteString(s)
	return nil
}

// Sent returns everything passed on so far.
func (g *guard) Sent() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sent.String()
}

// Hits returns the writes the guard refused.
func (g *guard) Hits() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.hits...)
}

func (g *guard) Start(ctx context.Context, spec backend.ProcSpec) (backend.Process, error) {
	if err := g.check(strings.Join(spec.Argv, " ") + "\n"); err != nil {
		return nil, err
	}
	p, err := g.Backend.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &guardedProc{Process: p, g: g}, nil
}

type guardedProc struct {
	backend.Process
	g *guard
}

func (p *guardedProc) Stdin() io.WriteCloser { return &guardedStdin{w: p.Process.Stdin(), g: p.g} }

type guardedStdin struct {
	w io.WriteCloser
	g *guard
}

func (s *guardedStdin) Write(b []byte) (int, error) {
	if err := s.g.check(string(b)); err != nil {
		// End the shell (EOF) so the session fails at once instead of
		// waiting for a command that never came.
		_ = s.w.Close()
		return 0, err
	}
	return s.w.Write(b)
}

func (s *guardedStdin) Close() error { return s.w.Close() }

// floorMarkers are parts of the floor commands below that nothing else the
// tests send contains.
var floorMarkers = []string{"--no-preserve-root", "kill -9 -1", ":|:", "mkfs", "rm -rf ~", "rm -rf $HOME"}

// floorCommands are on the hardline floor on the local backend.
var floorCommands = []string{
	"rm -rf --no-preserve-root /",
	"sudo rm -rf ~",
	"cd /tmp && bash -c 'rm -rf $HOME'",
	"kill -9 -1",
	":(){ :|:& };:",
	"mkfs.ext4 /dev/sda1",
}

// setup loads a configuration from a config file holding text (in a fresh
// berth home) and returns a manager whose local environments are guarded.
func setup(t *testing.T, text string, env map[string]string) (*manager.Manager, *guard, string) {
	t.Helper()
	dir := t.TempDir()
	home := filepath.Join(dir, "berth")
	path := filepath.Join(home, "config.yaml")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"HOME": dir, "BERTH_HOME": home}
	for k, v := range env {
		vars[k] = v
	}
	cfg, err := config.Load(config.LoadOptions{Getenv: func(k string) string { return vars[k] }})
	if err != nil {
		t.Fatal(err)
	}
	g := &guard{forbidden: floorMarkers}
	m := manager.NewWithFactory(cfg, nil, func(ctx context.Context, opts backend.Options) (backend.Backend, error) {
		reg, _ := backend.Lookup("local")
		be, err := reg.New(ctx, opts)
		if err != nil {
			return nil, err
		}
		g.Backend = be
		return g, nil
	})
	t.Cleanup(func() { _ = m.CloseAll(context.Background()) })
	return m, g, path
}

// asker is the human in these tests: it answers from a script, or never.
type asker struct {
	mu        sync.Mutex
	answers   []approval.Answer
	silent    bool
	questions []approval.Question
}

func (a *asker) Ask(ctx context.Context, q approval.Question) (approval.Answer, error) {
	a.mu.Lock()
	a.questions = append(a.questions, q)
	silent := a.silent
	var ans approval.Answer
	if !silent && len(a.answers) > 0 {
		ans, a.answers = a.answers[0], a.answers[1:]
	}
	a.mu.Unlock()
	if silent {
		<-ctx.Done()
		return "", ctx.Err()
	}
	if ans == "" {
		return "", errors.New("test asker: no answer scripted")
	}
	return ans, nil
}

func (a *asker) asked() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.questions)
}

func errText(r terminal.Result) string {
	if r.Error == nil {
		return ""
	}
	return *r.Error
}

// The floor holds in both modes, with an asker ready to say yes and with
// every rule allowlisted: nothing reaches the environment.
func TestFloorBlocksInEveryMode(t *testing.T) {
	for _, mode := range []string{"manual", "off"} {
		t.Run(mode, func(t *testing.T) {
			allow := `["rule:rm-system-dir", "rule:no-preserve-root", "rule:kill-all", "rule:fork-bomb", "rule:mkfs-device", "*"]`
			m, g, _ := setup(t, "approvals:\n  mode: "+mode+"\ncommand_allowlist: "+allow+"\n", nil)
			a := &asker{answers: []approval.Answer{approval.AnswerAlways, approval.AnswerAlways}}
			ctx, ask := context.Background(), manager.WithAsker(a)
			if r := m.Run(ctx, "k", terminal.Request{Command: "echo ready"}, ask); r.Error != nil || strings.TrimSpace(r.Output) != "ready" {
				t.Fatalf("harmless command: %+v", r)
			}
			for _, cmd := range floorCommands {
				r := m.Run(ctx, "k", terminal.Request{Command: cmd}, ask)
				if !strings.HasPrefix(errText(r), "BLOCKED: ") || r.ExitCode != terminal.StatusBlocked {
					t.Errorf("%s: error %q exit %d, want BLOCKED", cmd, errText(r), r.ExitCode)
				}
				if r.Approval == nil || r.Approval.Outcome != approval.Blocked || r.Approval.By != approval.ByFloor {
					t.Errorf("%s: approval %+v, want blocked by floor", cmd, r.Approval)
				}
				var be *approval.BlockedError
				if !errors.As(r.Err, &be) {
					t.Errorf("%s: Err %v is not a BlockedError", cmd, r.Err)
				}
				s := m.Background(ctx, "k", terminal.Request{Command: cmd, Background: true}, ask)
				if s.Error == nil || !strings.HasPrefix(*s.Error, "BLOCKED: ") || s.SessionID != "" || s.Approval == nil || s.Approval.By != approval.ByFloor {
					t.Errorf("%s in the background: %+v", cmd, s)
				}
			}
			if a.asked() != 0 {
				t.Errorf("the floor asked the user %d times", a.asked())
			}
			if h := g.Hits(); len(h) > 0 {
				t.Errorf("floor commands reached the environment: %q", h)
			}
		})
	}
}

// A dangerous command with nobody to ask is blocked with a message that
// says only the user can allow it, and hands the agent no config line
// (review 2026-11-25 N1); with mode off it runs, and says so.
func TestDangerousWithoutAsker(t *testing.T) {
	m, g, _ := setup(t, "terminal:\n  timeout: 30\n", nil)
	dir := t.TempDir()
	cmd := "chmod -R u+rw " + dir + " && echo CHMOD-RAN"
	r := m.Run(context.Background(), "k", terminal.Request{Command: cmd})
	msg := errText(r)
	for _, want := range []string{"BLOCKED: ", "chmod-recursive", "Only the user can allow it"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "berth config set") {
		t.Errorf("message %q hands the agent a config line", msg)
	}
	if r.Approval == nil || r.Approval.Outcome != approval.Blocked || r.Approval.By != approval.ByRule {
		t.Errorf("approval %+v", r.Approval)
	}
	if strings.Contains(g.Sent(), "CHMOD-RAN") {
		t.Error("the blocked command reached the environment")
	}

	m, g, _ = setup(t, "approvals:\n  mode: off\n", nil)
	r = m.Run(context.Background(), "k", terminal.Request{Command: cmd})
	if r.Error != nil || strings.TrimSpace(r.Output) != "CHMOD-RAN" {
		t.Fatalf("mode off: %+v", r)
	}
	if r.Approval == nil || r.Approval.Outcome != approval.Allowed || r.Approval.By != approval.ByMode {
		t.Errorf("mode off approval %+v", r.Approval)
	}
	// Harmless commands carry no approval field.
	if r := m.Run(context.Background(), "k", terminal.Request{Command: "echo fine"}); r.Approval != nil {
		t.Errorf("harmless command has approval %+v", r.Approval)
	}
	_ = g
}

// The user's answers: once runs once and asks again; session stops asking
// for that session only; deny refuses; always is saved into the config
// file in place and holds for a manager built from the reloaded file.
func TestAnswers(t *testing.T) {
	const text = "# my settings\napprovals:\n  mode: manual # ask\n"
	m, g, path := setup(t, text, nil)
	dir := t.TempDir()
	cmd := "chmod -R u+rw " + dir + " && echo RAN"
	run := func(key string, a *asker) terminal.Result {
		return m.Run(context.Background(), key, terminal.Request{Command: cmd}, manager.WithAsker(a))
	}

	a := &asker{answers: []approval.Answer{approval.AnswerOnce, approval.AnswerOnce}}
	for i := range 2 {
		r := run("once", a)
		if r.Error != nil || strings.TrimSpace(r.Output) != "RAN" || r.Approval == nil || r.Approval.Outcome != approval.ApprovedOnce || r.Approval.By != approval.ByUser {
			t.Fatalf("once #%d: %+v approval %+v", i, r, r.Approval)
		}
	}
	if a.asked() != 2 {
		t.Errorf("once: asked %d times, want 2", a.asked())
	}
	q := a.questions[0]
	if q.Kind != "command" || q.Subject != cmd || q.Backend != "local" || len(q.Findings) == 0 || q.Findings[0].Rule.ID != "chmod-recursive" {
		t.Errorf("question %+v", q)
	}

	a = &asker{answers: []approval.Answer{approval.AnswerSession}}
	for i := range 2 {
		if r := run("sess", a); r.Error != nil || r.Approval.Outcome != approval.ApprovedSession {
			t.Fatalf("session #%d: %+v", i, r.Approval)
		}
	}
	if a.asked() != 1 {
		t.Errorf("session: asked %d times, want 1", a.asked())
	}
	// Another session is asked again; closing the session forgets it.
	other := &asker{answers: []approval.Answer{approval.AnswerDeny}}
	r := run("other", other)
	if other.asked() != 1 || r.Approval.Outcome != approval.Denied || r.Approval.By != approval.ByUser || !strings.HasPrefix(errText(r), "BLOCKED: the user denied") {
		t.Errorf("other session: asked %d, %+v", other.asked(), r.Approval)
	}
	if err := m.Close(context.Background(), "sess"); err != nil {
		t.Fatal(err)
	}
	again := &asker{answers: []approval.Answer{approval.AnswerDeny}}
	if r := run("sess", again); again.asked() != 1 || r.Approval.Outcome != approval.Denied {
		t.Errorf("after Close: asked %d, %+v", again.asked(), r.Approval)
	}

	a = &asker{answers: []approval.Answer{approval.AnswerAlways}}
	r = run("always", a)
	if r.Error != nil || r.Approval.Outcome != approval.ApprovedAlways || r.Approval.Pattern == "" {
		t.Fatalf("always: %+v %+v", r, r.Approval)
	}
	saved, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(saved), text) || !strings.Contains(string(saved), "command_allowlist: [") {
		t.Errorf("config file after always:\n%s", saved)
	}
	cfg, err := config.Load(config.LoadOptions{ConfigPath: path, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.CommandAllowlist) != 1 || cfg.CommandAllowlist[0] != r.Approval.Pattern {
		t.Errorf("saved allowlist %q, decision pattern %q", cfg.CommandAllowlist, r.Approval.Pattern)
	}
	// A fresh manager from the file runs it without asking anyone.
	m2 := manager.New(cfg, nil)
	t.Cleanup(func() { _ = m2.CloseAll(context.Background()) })
	r = m2.Run(context.Background(), "k", terminal.Request{Command: cmd})
	if r.Error != nil || r.Approval == nil || r.Approval.Outcome != approval.Allowed || r.Approval.By != approval.ByAllowlist {
		t.Errorf("after always, new manager: %+v %+v", r, r.Approval)
	}
	if h := g.Hits(); len(h) > 0 {
		t.Errorf("guard hits: %q", h)
	}
}

// Silence denies after approvals.timeout.
func TestTimeoutDenies(t *testing.T) {
	m, g, _ := setup(t, "approvals:\n  timeout: 1\n", nil)
	a := &asker{silent: true}
	r := m.Run(context.Background(), "k", terminal.Request{Command: "git push --force origin main # NEVER-SENT"}, manager.WithAsker(a))
	if r.Approval == nil || r.Approval.Outcome != approval.Denied || r.Approval.By != approval.ByTimeout {
		t.Fatalf("approval %+v", r.Approval)
	}
	if !strings.Contains(errText(r), "did not answer within 1s") {
		t.Errorf("message %q", errText(r))
	}
	if strings.Contains(g.Sent(), "NEVER-SENT") {
		t.Error("the command reached the environment")
	}
}

// approvals.deny blocks in mode off, whatever the allowlist says.
func TestDenyPattern(t *testing.T) {
	m, g, _ := setup(t, "approvals:\n  mode: off\n  deny: [\"echo SECRET*\"]\ncommand_allowlist: [\"echo SECRET*\"]\n", nil)
	r := m.Run(context.Background(), "k", terminal.Request{Command: "true && echo SECRET-STUFF"})
	if r.Approval == nil || r.Approval.Outcome != approval.Blocked || r.Approval.By != approval.ByDeny || r.Approval.Pattern != "echo SECRET*" {
		t.Fatalf("approval %+v", r.Approval)
	}
	if strings.Contains(g.Sent(), "SECRET-STUFF") {
		t.Error("the denied command reached the environment")
	}
}

// isolatedGuard is a guard that reports an isolation, as a backend
// instance does from its own settings.
type isolatedGuard struct {
	*guard
	iso backend.Isolation
}

func (g isolatedGuard) Capabilities() backend.Capabilities {
	return backend.Capabilities{Isolation: g.iso}
}

// setupIsolated is setup with environments that report iso.
func setupIsolated(t *testing.T, text string, iso backend.Isolation) (*manager.Manager, *guard) {
	t.Helper()
	_, _, path := setup(t, text, nil)
	home := filepath.Dir(path)
	vars := map[string]string{"HOME": filepath.Dir(home), "BERTH_HOME": home}
	cfg, err := config.Load(config.LoadOptions{Getenv: func(k string) string { return vars[k] }})
	if err != nil {
		t.Fatal(err)
	}
	g := &guard{forbidden: floorMarkers}
	m := manager.NewWithFactory(cfg, nil, func(ctx context.Context, opts backend.Options) (backend.Backend, error) {
		reg, _ := backend.Lookup("local")
		be, err := reg.New(ctx, opts)
		if err != nil {
			return nil, err
		}
		g.Backend = be
		return isolatedGuard{g, iso}, nil
	})
	t.Cleanup(func() { _ = m.CloseAll(context.Background()) })
	return m, g
}

// An environment whose backend reports image isolation runs dangerous
// commands without asking, whatever the configured backend is called.
func TestImageIsolationDoesNotAsk(t *testing.T) {
	for _, name := range []string{"local", "ssh", "modal"} {
		m, _ := setupIsolated(t, "terminal:\n  backend: "+name+"\n", backend.IsolationImage)
		a := &asker{}
		dir := t.TempDir()
		r := m.Run(context.Background(), "k", terminal.Request{Command: "chmod -R u+rw " + dir + " && echo OK"}, manager.WithAsker(a))
		if r.Error != nil || r.Approval == nil || r.Approval.By != approval.BySandbox || a.asked() != 0 {
			t.Errorf("%s: %+v approval %+v asked %d", name, r, r.Approval, a.asked())
		}
	}
}

// An environment that reports no isolation meets the floor and the
// questions whatever its backend's name: singularity or docker with a host
// directory bound in are no sandbox (the hole where singularity with
// singularity_binds counted as one by name).
func TestNoIsolationMeetsTheFloor(t *testing.T) {
	for _, name := range []string{"singularity", "docker", "modal"} {
		m, g := setupIsolated(t, "terminal:\n  backend: "+name+"\napprovals:\n  mode: off\n", backend.IsolationNone)
		r := m.Run(context.Background(), "k", terminal.Request{Command: "rm -rf ~"})
		if r.Approval == nil || r.Approval.Outcome != approval.Blocked || r.Approval.By != approval.ByFloor {
			t.Errorf("%s: rm -rf ~ approval %+v", name, r.Approval)
		}
		if len(g.Hits()) > 0 {
			t.Errorf("%s: the floor command reached the environment: %q", name, g.Hits())
		}
	}
}

// File-tool writes from Go go through the same gate as from MCP: the
// manager is the one door, and a refused write writes nothing.
func TestWriteFileMeetsTheGate(t *testing.T) {
	m, _, _ := setup(t, "", nil)
	home := m.Config().Getenv("HOME")
	keys := filepath.Join(home, ".ssh", "authorized_keys")
	_, err := m.WriteFile(context.Background(), "k", keys, "ssh-ed25519 AAAA attacker\n")
	var be *approval.BlockedError
	if !errors.As(err, &be) || be.Decision.Outcome != approval.Blocked || !strings.HasPrefix(be.Decision.Message, "BLOCKED: ") {
		t.Errorf("write to ~/.ssh: %v", err)
	}
	if _, err := os.Stat(keys); !os.IsNotExist(err) {
		t.Errorf("the refused write wrote: %v", err)
	}
	_, err = m.Patch(context.Background(), "k", keys, "a", "b", false)
	if !errors.As(err, &be) {
		t.Errorf("patch of ~/.ssh: %v", err)
	}
	notes := filepath.Join(t.TempDir(), "notes.txt")
	if res, err := m.WriteFile(context.Background(), "k", notes, "hi\n"); err != nil || res.BytesWritten != 3 {
		t.Errorf("ordinary write: %+v, %v", res, err)
	}
	a := &asker{answers: []approval.Answer{approval.AnswerOnce}}
	rc := filepath.Join(home, ".bashrc")
	if _, err := m.WriteFile(context.Background(), "k", rc, "export X=1\n", manager.WithAsker(a)); err != nil || a.asked() != 1 || a.questions[0].Kind != "write" {
		t.Errorf("write to ~/.bashrc approved once: %v asked %d", err, a.asked())
	}
	if b, err := os.ReadFile(rc); err != nil || string(b) != "export X=1\n" {
		t.Errorf("the approved write: %q %v", b, err)
	}
	if _, err := m.WriteFile(context.Background(), "k", notes, strings.Repeat("x", manager.MaxContentBytes+1)); err == nil || !strings.Contains(err.Error(), "at most 10 MiB") {
		t.Errorf("oversized write: %v", err)
	}
}

// Input to a background process is checked like a command: a shell reading
// its stdin would run it. The process here is cat, so a gate that failed
// would show the text in the file instead of running it. A command split
// over several writes is seen whole when its line ends, and ending the
// input (a shell runs an unfinished last line) is checked too.
func TestFloorHoldsForInputToProcesses(t *testing.T) {
	m, _, _ := setup(t, "approvals:\n  mode: off\ncommand_allowlist: [\"*\"]\n", nil)
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "got")
	st := m.Background(ctx, "k", terminal.Request{Command: "cat > " + file, Background: true})
	if st.Error != nil {
		t.Fatalf("start: %+v", st)
	}
	do := func(action, data string) process.Result {
		return m.Process(ctx, "k", process.Request{Action: action, SessionID: st.SessionID, Data: data})
	}
	blocked := func(what string, r process.Result) {
		t.Helper()
		d, _ := r["approval"].(*approval.Decision)
		if r["status"] != "blocked" || !strings.HasPrefix(fmt.Sprint(r["error"]), "BLOCKED: ") || d == nil || d.By != approval.ByFloor {
			t.Errorf("%s: %v, want blocked by the floor", what, r)
		}
	}
	for _, cmd := range floorCommands {
		blocked("submit "+cmd, do("submit", cmd))
	}
	if r := do("submit", "echo harmless"); r["status"] != "ok" {
		t.Fatalf("harmless submit: %v", r)
	}
	// Split across writes: each part ends no line and runs nothing.
	for _, part := range []string{"kill -9", " -1"} {
		if r := do("write", part); r["status"] != "ok" {
			t.Fatalf("write %q: %v", part, r)
		}
	}
	blocked("the newline ending it", do("write", "\n"))
	blocked("a submit ending it", do("submit", ""))
	blocked("end of input after the unfinished line", do("close", ""))
	// A line that is harmless whole goes through; once cat has copied it,
	// all that was sent before it is in the file too.
	if r := do("submit", "1; echo end"); r["status"] != "ok" {
		t.Fatalf("harmless end of the line: %v", r)
	}
	for i := 0; i < 500; i++ {
		if got, _ := os.ReadFile(file); strings.Contains(string(got), "echo end") {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	m.Process(ctx, "k", process.Request{Action: "kill", SessionID: st.SessionID})
	got, _ := os.ReadFile(file)
	if want := "echo harmless\nkill -9 -11; echo end\n"; string(got) != want {
		t.Errorf("what reached the process:\n%q\nwant\n%q", got, want)
	}
}

// A workspace-confined environment is this machine's filesystem even
// though its file tools go through the shell: a write to berth's own
// configuration meets the write-berth-config rule there too.
func TestWorkspaceConfinedKnowsBerthsFiles(t *testing.T) {
	m, _ := setupIsolated(t, "", backend.IsolationWorkspace)
	_, err := m.WriteFile(context.Background(), "k", m.Config().Path, "approvals:\n  mode: \"off\"\n")
	var be *approval.BlockedError
	if !errors.As(err, &be) || be.Decision.Rule != "write-berth-config" {
		t.Errorf("write to berth's config under workspace confinement: %v", err)
	}
}
