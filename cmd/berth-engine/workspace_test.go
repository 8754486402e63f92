package main

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// homeEnv is a private $HOME, holding berth's home (~/.berth, BERTH_HOME
// unset) with a config file in workspace mode, that berth is started in:
// the workspace is then $HOME itself, the default the 2026-11-28 review's
// R1 attacked.
type homeEnv struct {
	home, berthHome, config string
	env                     []string
}

// workspaceConfig is the config file: workspace mode, the gate at its
// default (manual).
const workspaceConfig = "terminal:\n  local_sandbox: workspace\n"

func newHomeEnv(t *testing.T, daemon bool) *homeEnv {
	t.Helper()
	// A short path: the daemon's socket lies below it.
	home, err := os.MkdirTemp("", "bh")
	if err != nil {
		t.Fatal(err)
	}
	h := &homeEnv{home: home, berthHome: filepath.Join(home, ".berth")}
	h.config = filepath.Join(h.berthHome, "config.yaml")
	if err := os.MkdirAll(h.berthHome, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.config, []byte(workspaceConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BERTH_") && !strings.HasPrefix(kv, "TERMINAL_") && !strings.HasPrefix(kv, "HOME=") {
			h.env = append(h.env, kv)
		}
	}
	h.env = append(h.env, "HOME="+home)
	if !daemon {
		h.env = append(h.env, "BERTH_NO_DAEMON=1")
	}
	t.Cleanup(func() {
		if daemon {
			h.run(t, "daemon", "stop")
		}
		os.RemoveAll(home)
	})
	return h
}

// run runs berth in $HOME.
func (h *homeEnv) run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(berthBin, args...)
	cmd.Env = h.env
	cmd.Dir = h.home
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run berth %v: %v", args, err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// lowerScript is R1's reproduction: a script the command writes, whose
// path to berth's file is assembled at run time (no rule can read it),
// appends text to it.
func lowerScript(file, text string) string {
	dir, base := filepath.Base(filepath.Dir(file)), filepath.Base(file)
	b64 := base64.StdEncoding.EncodeToString([]byte(text))
	return `printf '%s\n' "import os,base64" "p=os.path.join(os.environ['HOME'],'` + dir[:3] + `'+'` + dir[3:] + `','` + base[:3] + `'+'` + base[3:] + `')" "open(p,'a').write(base64.b64decode('` + b64 + `').decode())" > tidy.py; python3 tidy.py`
}

// TestWorkspaceKeepsBerthsSettings is R1 end to end, through the daemon
// and without it: in workspace mode with berth started in $HOME, a script
// appending approvals.mode off to berth's config, and one writing
// TERMINAL_LOCAL_SANDBOX=off to the .env beside it, fail with EROFS and
// leave both as they were; the next call is still confined (rm -rf of a
// directory outside fails) and the gate still asks (chmod 777 is blocked
// with no one to ask).
func TestWorkspaceKeepsBerthsSettings(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not found")
	}
	for _, c := range []struct {
		name   string
		daemon bool
	}{{"daemon", true}, {"no-daemon", false}} {
		t.Run(c.name, func(t *testing.T) {
			h := newHomeEnv(t, c.daemon)
			if out, errs, code := h.run(t, "exec", "--", "true"); code != 0 {
				t.Skipf("workspace mode cannot start here: %s%s", out, errs)
			}
			for _, attack := range []struct{ file, text string }{
				{h.config, "approvals:\n  mode: \"off\"\n"},
				{filepath.Join(h.berthHome, ".env"), "TERMINAL_LOCAL_SANDBOX=off\nBERTH_APPROVALS_MODE=off\n"},
			} {
				out, errs, code := h.run(t, "exec", "--", lowerScript(attack.file, attack.text))
				if code == 0 || !strings.Contains(out+errs, "Read-only file system") {
					t.Errorf("writing %s: exit %d, %q %q; want EROFS", attack.file, code, out, errs)
				}
			}
			if b, err := os.ReadFile(h.config); err != nil || string(b) != workspaceConfig {
				t.Fatalf("berth's config changed: %q %v", b, err)
			}
			if _, err := os.Lstat(filepath.Join(h.berthHome, ".env")); err == nil {
				t.Fatal("a .env appeared in berth's home")
			}
			victim := t.TempDir()
			keep := filepath.Join(victim, "keep")
			if err := os.WriteFile(keep, []byte("precious\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			out, errs, code := h.run(t, "exec", "--", "rm -rf "+victim)
			if _, err := os.Stat(keep); err != nil || code == 0 || !strings.Contains(out+errs, "Permission denied") {
				t.Fatalf("rm -rf outside the workspace, the next call: exit %d %q %q, victim: %v", code, out, errs, err)
			}
			out, errs, code = h.run(t, "exec", "--", "touch f; chmod 777 f")
			if code != 126 || !strings.Contains(errs, "BLOCKED") || !strings.Contains(errs, "needs the user's approval") {
				t.Fatalf("chmod 777, the gate: exit %d %q %q; want it blocked, no one being there to ask", code, out, errs)
			}
		})
	}
}

// TestWorkspaceKeepsGitHooks is R10 end to end: a confined command cannot
// plant .git/hooks/pre-commit or core.fsmonitor in .git/config of a
// repository in the workspace, which the user's own git would run
// unconfined.
func TestWorkspaceKeepsGitHooks(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not found")
	}
	h := newHomeEnv(t, false)
	if out, errs, code := h.run(t, "exec", "--", "true"); code != 0 {
		t.Skipf("workspace mode cannot start here: %s%s", out, errs)
	}
	repo := filepath.Join(h.home, "src", "project")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	gitConfig, _ := os.ReadFile(filepath.Join(repo, ".git", "config"))
	for _, c := range []string{
		`cd src/project && printf '#!/bin/sh\ntouch "$HOME/pwned"\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit`,
		`cd src/project && git config core.fsmonitor 'touch "$HOME/pwned"'`,
		`d=src/project/.g; python3 -c "open('$d'+'it/config', 'a').write('[core]\n\thooksPath = /tmp\n')"`,
		`cd src && mv project project.old && mkdir -p project/.git/hooks && echo x > project/.git/hooks/pre-commit`,
	} {
		out, errs, code := h.run(t, "exec", "--", c)
		if code == 0 || !strings.Contains(out+errs, "Read-only file system") && !strings.Contains(out+errs, "Device or resource busy") {
			t.Errorf("%s: exit %d %q %q; want a refusal", c, code, out, errs)
		}
	}
	if _, err := os.Lstat(filepath.Join(repo, ".git", "hooks", "pre-commit")); err == nil {
		t.Error("a pre-commit hook was planted")
	}
	if b, _ := os.ReadFile(filepath.Join(repo, ".git", "config")); !bytes.Equal(b, gitConfig) {
		t.Errorf(".git/config changed:\n%s", b)
	}
}

// TestWorkspaceRefusesWhereItCannotProtect is R1's other side: as a user
// without privileges (uid daemon, as the review ran it), berth cannot keep
// its home read-only inside the workspace and refuses to start, naming the
// home and the fix; with BERTH_HOME elsewhere it runs.
func TestWorkspaceRefusesWhereItCannotProtect(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run berth as another user")
	}
	bin := nobodyBin(t)
	h := newHomeEnv(t, false)
	elsewhere, err := os.MkdirTemp("", "bhx")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(elsewhere)
	for _, dir := range []string{h.home, elsewhere} {
		if err := exec.Command("chown", "-R", "1:1", dir).Run(); err != nil {
			t.Fatal(err)
		}
	}
	asDaemon := func(extra ...string) (stdout, stderr string, code int) {
		cmd := exec.Command(filepath.Join(bin, "berth"), "exec", "--", "echo ran")
		cmd.Env = append(append([]string(nil), h.env...), extra...)
		cmd.Dir = h.home
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1, Gid: 1}}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		cmd.Run()
		return out.String(), errb.String(), cmd.ProcessState.ExitCode()
	}
	out, errs, code := asDaemon()
	for _, want := range []string{"berth's home " + h.berthHome + " lies inside the writable tree " + h.home, "Set terminal.cwd to a narrower directory", "BERTH_HOME="} {
		if code == 0 || out != "" || !strings.Contains(errs, want) {
			t.Fatalf("as uid 1 with berth's home in the workspace: exit %d %q %q; want a refusal with %q", code, out, errs, want)
		}
	}
	if err := os.WriteFile(filepath.Join(elsewhere, "config.yaml"), []byte(workspaceConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chown(filepath.Join(elsewhere, "config.yaml"), 1, 1)
	if out, errs, code := asDaemon("BERTH_HOME=" + elsewhere); code != 0 || out != "ran\n" {
		t.Fatalf("as uid 1 with BERTH_HOME outside the workspace: exit %d %q %q", code, out, errs)
	}
}
