package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
)

// approvalEnv is a private berth home with a config file, and a PATH whose
// first entry is a fake rm that records its arguments instead of removing
// anything: a floor command that got through would be seen, and harm
// nothing.
type approvalEnv struct {
	home, config, record string
	env                  []string
}

func newApprovalEnv(t *testing.T, configText string) *approvalEnv {
	t.Helper()
	dir := t.TempDir()
	shim := filepath.Join(dir, "shim")
	record := filepath.Join(dir, "rm-called")
	if err := os.MkdirAll(shim, 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '" + record + "'\nexit 1\n"
	if err := os.WriteFile(filepath.Join(shim, "rm"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "berth")
	cfg := filepath.Join(home, "config.yaml")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(configText), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "BERTH_HOME="+home, "BERTH_CONFIG=", "TERMINAL_ENV=", "BERTH_APPROVALS_MODE=", "BERTH_NO_DAEMON=1",
		"PATH="+shim+string(os.PathListSeparator)+os.Getenv("PATH"))
	return &approvalEnv{home: home, config: cfg, record: record, env: env}
}

// run runs the built berth with extra variables and stdin.
func (a *approvalEnv) run(t *testing.T, extra []string, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(berthBin, args...)
	cmd.Env = append(append([]string(nil), a.env...), extra...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run berth %v: %v", args, err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

func (a *approvalEnv) noRm(t *testing.T) {
	t.Helper()
	if b, err := os.ReadFile(a.record); err == nil {
		t.Errorf("rm reached the shell: %s", b)
	}
}

// The acceptance check: berth exec -- 'rm -rf --no-preserve-root /'
// exits non-zero with the BLOCKED message and runs nothing, with approvals
// on and off, from the file or the environment.
func TestExecFloorCommandIsBlocked(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		extra        []string
	}{
		{"manual", "", nil},
		{"off in the file", "approvals:\n  mode: off\ncommand_allowlist: [\"*\", \"rule:no-preserve-root\"]\n", nil},
		{"off from the environment", "", []string{"BERTH_APPROVALS_MODE=off"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newApprovalEnv(t, tc.config)
			out, errs, code := a.run(t, tc.extra, "", "exec", "--", "rm -rf --no-preserve-root /")
			if code != blockedStatus || out != "" || !strings.Contains(errs, "BLOCKED: ") || !strings.Contains(errs, "hardline floor") {
				t.Errorf("exit %d stdout %q stderr %q", code, out, errs)
			}
			out, _, code = a.run(t, tc.extra, "", "exec", "--json", "--", "sudo", "rm", "-rf", "$HOME/")
			var r struct {
				Error    string
				ExitCode int `json:"exit_code"`
				Approval struct{ Decision, By, Rule string }
			}
			if err := json.Unmarshal([]byte(out), &r); err != nil || code != blockedStatus || !strings.HasPrefix(r.Error, "BLOCKED: ") ||
				r.Approval.Decision != "blocked" || r.Approval.By != "floor" || r.Approval.Rule != "rm-system-dir" || r.ExitCode != 126 {
				t.Errorf("--json: exit %d %q (%v)", code, out, err)
			}
			a.noRm(t)
		})
	}
}

// Without a terminal, a dangerous command is refused, and the message
// hands the agent no config line (review 2026-11-25 N1); the user's
// allowlist entry for it makes it run.
func TestExecDangerousBlockedThenAllowlisted(t *testing.T) {
	a := newApprovalEnv(t, "# mine\nterminal:\n  timeout: 60 # s\n")
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	cmd := "chmod -R u+rw " + dir + " && : > " + marker
	_, errs, code := a.run(t, nil, "", "exec", "--", cmd)
	if code != blockedStatus || !strings.Contains(errs, "BLOCKED: ") || !strings.Contains(errs, "chmod-recursive") {
		t.Fatalf("exit %d stderr %q", code, errs)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the blocked command ran")
	}
	if strings.Contains(errs, "berth config set") || !strings.Contains(errs, "Only the user can allow it") {
		t.Fatalf("the message hands the agent a config line, or does not say who may allow it: %q", errs)
	}
	list := `["chmod -R u+rw ` + dir + `"]`
	if _, errs, code := a.run(t, nil, "", "config", "set", "command_allowlist", list); code != 0 {
		t.Fatalf("config set command_allowlist %s: exit %d %s", list, code, errs)
	}
	text, _ := os.ReadFile(a.config)
	if !strings.HasPrefix(string(text), "# mine\nterminal:\n  timeout: 60 # s\ncommand_allowlist: [") {
		t.Errorf("config file:\n%s", text)
	}
	out, errs, code := a.run(t, nil, "", "exec", "--json", "--", cmd)
	if code != 0 || !strings.Contains(out, `"decision":"allowed","by":"allowlist"`) {
		t.Fatalf("after allowlisting: exit %d %q %q", code, out, errs)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Error("the allowlisted command did not run")
	}
	if got, _, _ := a.run(t, nil, "", "config", "get", "command_allowlist"); strings.TrimSpace(got) != list {
		t.Errorf("config get command_allowlist = %q, want %s", got, list)
	}
}

func TestConfigApprovalKeys(t *testing.T) {
	a := newApprovalEnv(t, "")
	if out, _, _ := a.run(t, nil, "", "config", "get", "approvals.mode"); out != "manual\n" {
		t.Errorf("get approvals.mode = %q", out)
	}
	if out, _, _ := a.run(t, []string{"BERTH_APPROVALS_MODE=off"}, "", "config", "get", "approvals.mode"); out != "off\n" {
		t.Errorf("get approvals.mode with BERTH_APPROVALS_MODE=off = %q", out)
	}
	if _, errs, code := a.run(t, nil, "", "config", "set", "approvals.mode", "smart"); code == 0 || !strings.Contains(errs, "does not support smart approvals") {
		t.Errorf("set smart: exit %d %q", code, errs)
	}
	if _, errs, code := a.run(t, nil, "", "config", "set", "approvals.deny", `["ok", "[bad"]`); code == 0 || !strings.Contains(errs, `approvals.deny[1]: pattern "[bad"`) {
		t.Errorf("set bad deny: exit %d %q", code, errs)
	}
	out, _, _ := a.run(t, nil, "", "config", "keys")
	for _, k := range []string{"approvals.mode", "BERTH_APPROVALS_MODE", "approvals.timeout", "approvals.deny", "command_allowlist"} {
		if !strings.Contains(out, k) {
			t.Errorf("config keys lacks %s", k)
		}
	}
}

// berth shell reading a pipe cannot ask: dangerous commands are BLOCKED,
// the others run, and the exit status says a command was refused.
func TestBatchShellBlocks(t *testing.T) {
	a := newApprovalEnv(t, "")
	out, _, code := a.run(t, nil, "echo one\ngit push --force origin nowhere\n", "shell", "--json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"output":"one"`) || !strings.Contains(lines[1], `"error":"BLOCKED: `) || code != blockedStatus {
		t.Errorf("exit %d output %q", code, out)
	}
}

// ptyReader collects what berth writes to its terminal.
type ptyReader struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (r *ptyReader) copy(f io.Reader) {
	b := make([]byte, 4096)
	for {
		n, err := f.Read(b)
		r.mu.Lock()
		r.buf.Write(b[:n])
		r.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// waitFor waits until the output after offset from contains s and returns
// the offset after it.
func (r *ptyReader) waitFor(t *testing.T, from int, s string) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		text := r.buf.String()
		r.mu.Unlock()
		if i := strings.Index(text[from:], s); i >= 0 {
			return from + i + len(s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t.Fatalf("terminal never showed %q; it shows:\n%s", s, r.buf.String()[from:])
	return 0
}

// On an interactive berth shell the question is asked on the terminal:
// "always" runs the command and saves it in the config file, "deny"
// refuses.
func TestInteractiveShellAsks(t *testing.T) {
	t.Run("one process", func(t *testing.T) { testInteractiveShellAsks(t, false) })
	// Through the daemon the question travels back to the caller's terminal.
	t.Run("daemon", func(t *testing.T) { testInteractiveShellAsks(t, true) })
}

func testInteractiveShellAsks(t *testing.T, viaDaemon bool) {
	a := newApprovalEnv(t, "# mine\n")
	cmd := exec.Command(berthBin, "shell")
	cmd.Env = a.env
	if viaDaemon {
		cmd.Env = append(append([]string(nil), a.env...), "BERTH_NO_DAEMON=")
		t.Cleanup(func() {
			stop := exec.Command(berthBin, "daemon", "stop")
			stop.Env = cmd.Env
			if out, err := stop.CombinedOutput(); err != nil {
				t.Errorf("berth daemon stop: %v: %s", err, out)
			}
		})
	}
	f, err := pty.Start(cmd)
	if err != nil {
		t.Fatalf("start berth shell on a pty: %v", err)
	}
	t.Cleanup(func() {
		f.Close()
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	r := &ptyReader{}
	go r.copy(f)
	const answerPrompt = "[o]nce / [s]ession / [a]lways / [d]eny: "
	at := r.waitFor(t, 0, "$ ")

	dir := t.TempDir()
	io.WriteString(f, "chmod -R u+rw "+dir+" && echo RAN-$((40+2))\n")
	at = r.waitFor(t, at, answerPrompt)
	io.WriteString(f, "a\n")
	at = r.waitFor(t, at, "RAN-42")
	at = r.waitFor(t, at, "$ ")

	io.WriteString(f, "git push --force origin nowhere; echo PUSH-$((1+1))\n")
	at = r.waitFor(t, at, answerPrompt)
	io.WriteString(f, "d\n")
	at = r.waitFor(t, at, "BLOCKED: the user denied")
	r.waitFor(t, at, "$ ")
	io.WriteString(f, "\x04")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("berth shell: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("berth shell did not end on Ctrl-D")
	}
	r.mu.Lock()
	all := r.buf.String()
	r.mu.Unlock()
	if strings.Contains(all, "PUSH-2") {
		t.Error("the denied command ran")
	}
	text, _ := os.ReadFile(a.config)
	// As in Hermes, always saves the pattern's key (item 11).
	if !strings.HasPrefix(string(text), "# mine\ncommand_allowlist: [\"recursive permission change\"]") {
		t.Errorf("config file after always:\n%s", text)
	}
}
