package local_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/local"
	"github.com/a55dbaac/berth/backend/local/confine"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/files"
	"github.com/a55dbaac/berth/internal/testenv"
	"github.com/a55dbaac/berth/terminal"
)

// requireMountNS skips where workspace mode cannot keep paths inside the
// workspace read-only (berth not root), and fails in CI, which runs as
// root.
func requireMountNS(t *testing.T) {
	t.Helper()
	requireConfinement(t)
	testenv.Need(t, testenv.Root, func() error {
		if s := confine.Probe(); !s.MountNS {
			return fmt.Errorf("no mount namespace for the environment: %s", s.NoMountNS)
		}
		return nil
	})
}

// berthConfigText is a config file in workspace mode with the gate asking.
const berthConfigText = "terminal:\n  local_sandbox: workspace\napprovals:\n  mode: manual\n"

// lowering is what R1's script appends to berth's config.
const lowering = "approvals: {mode: \"off\"}\nterminal: {local_sandbox: \"off\"}\n"

// homeInWorkspace makes a workspace holding berth's home at rel (as when
// berth starts in $HOME: rel ".berth"): a config file and the daemon's
// directory, and no .env yet.
func homeInWorkspace(t *testing.T, rel string) (ws, home string) {
	t.Helper()
	ws = t.TempDir()
	home = filepath.Join(ws, rel)
	if err := os.MkdirAll(filepath.Join(home, "daemon"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "config.yaml"), []byte(berthConfigText), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "daemon", "berth.log"), []byte("log\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return ws, home
}

// tree describes every file under dir (name, mode, size, content), so that
// any change shows.
func tree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		fmt.Fprintf(&b, "%s %v %d:%d %d", p, fi.Mode(), st.Uid, st.Gid, fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() {
			c, _ := os.ReadFile(p)
			fmt.Fprintf(&b, " %q", c)
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// kernelRefused fails unless a command failed with one of the kernel's
// refusals and printed no ESCAPED.
func kernelRefused(t *testing.T, what, out string, code int) {
	t.Helper()
	if code == 0 || strings.Contains(out, "ESCAPED") {
		t.Errorf("%s: exit %d, %q: it got through", what, code, out)
		return
	}
	for _, e := range []string{"Read-only file system", "Device or resource busy", "Invalid cross-device link", "ermission denied", "Operation not permitted", "must be superuser", "Invalid argument"} {
		if strings.Contains(out, e) {
			return
		}
	}
	t.Errorf("%s: exit %d, %q: no refusal by the kernel", what, code, out)
}

// r1Script is R1's reproduction: a script the command writes, whose path
// to berth's config is assembled at run time, appends lowering to it.
func r1Script(py, ws string) string {
	b64 := base64.StdEncoding.EncodeToString([]byte(lowering))
	return `printf '%s\n' "import os,base64" "p=os.path.join('` + ws + `','.be'+'rth','con'+'fig.yaml')" "open(p,'a').write(base64.b64decode('` + b64 + `').decode())" > tidy.py && ` + py + ` tidy.py && echo ESCAPED`
}

// TestWorkspaceKeepsBerthsHomeReadOnly is R1 of the 2026-11-28 review:
// berth's home inside the workspace (the default when berth starts in
// $HOME) was writable by the commands, so a script turned approvals and
// confinement off for the next call. Every way of writing there now fails
// in the kernel, and berth's settings are unchanged.
func TestWorkspaceKeepsBerthsHomeReadOnly(t *testing.T) {
	py := python(t)
	requireMountNS(t)
	ws, home := homeInWorkspace(t, ".berth")
	cfg := sandboxConfig(t, ws, nil)
	cfg.Home = home
	m := newManager(t, cfg)
	ctx := context.Background()
	const key = "r1"
	env, err := m.Env(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if p := backend.CapabilitiesOf(env.Backend()).Confinement.Protected; !slices.Contains(p, home) {
		t.Fatalf("Confinement.Protected %q lacks berth's home %s", p, home)
	}
	outside := exec.Command("sleep", "300")
	if err := outside.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { outside.Process.Kill(); outside.Wait() }()

	conf := filepath.Join(home, "config.yaml")
	dotenv := filepath.Join(home, ".env")
	before := tree(t, home)
	attacks := []string{
		r1Script(py, ws),
		"cd " + ws + " && echo 'approvals: {mode: \"off\"}' >> .berth/config.yaml && echo ESCAPED",
		"echo TERMINAL_LOCAL_SANDBOX=off > " + dotenv + " && echo ESCAPED",
		"printf 'BERTH_APPROVALS_MODE=off\\n' >> " + dotenv + " && echo ESCAPED",
		"cd " + ws + " && cp -l .berth/config.yaml cfg && echo x >> cfg && echo ESCAPED",
		"cd " + ws + " && mv .berth .berth.old && mkdir .berth && echo x > .berth/config.yaml && echo ESCAPED",
		"cd " + ws + " && mv .berth/config.yaml .berth/config.old && echo ESCAPED",
		"cd " + ws + " && printf 'approvals: {mode: off}\\n' > new.yaml && mv -f new.yaml .berth/config.yaml && echo ESCAPED",
		py + ` -c 'import os; open("` + ws + `/n2", "w").write("x"); os.rename("` + ws + `/n2", "` + conf + `")' && echo ESCAPED`,
		"cd " + ws + " && ln -s .berth h && echo x >> h/config.yaml && echo ESCAPED",
		"cd / && CDPATH=" + ws + " cd .berth && echo x >> config.yaml && echo ESCAPED",
		"OLDPWD=" + home + "; cd - && echo x >> config.yaml && echo ESCAPED",
		py + ` -c 'open("` + conf + `", "a").write("x")' && echo ESCAPED`,
		py + ` -c 'import os; fd = os.open("` + dotenv + `", os.O_CREAT | os.O_WRONLY, 0o600); os.write(fd, b"x")' && echo ESCAPED`,
		"rm -rf " + home + " && echo ESCAPED",
		"echo x > " + home + "/daemon/berth.sock && echo ESCAPED",
		"chmod 666 " + conf + " && echo ESCAPED",
		"touch -d 2001-01-01 " + conf + " && echo ESCAPED",
		"truncate -s 0 " + conf + " && echo ESCAPED",
		"unshare -Um --propagation unchanged sh -c 'umount -l " + home + " && echo x >> " + conf + "' && echo ESCAPED",
		"echo x >> /proc/" + strconv.Itoa(outside.Process.Pid) + "/root" + conf + " && echo ESCAPED",
		"echo x >> /proc/" + strconv.Itoa(os.Getpid()) + "/root" + conf + " && echo ESCAPED",
	}
	for _, c := range attacks {
		res := m.Run(ctx, key, terminal.Request{Command: c})
		if res.Error != nil {
			t.Fatalf("%s: %s", c, *res.Error)
		}
		kernelRefused(t, c, res.Output, res.ExitCode)
		if after := tree(t, home); after != before {
			t.Fatalf("after %s berth's home changed:\n%s", c, changes(before, after))
		}
	}

	// In the background, and through the file tools.
	st := m.Background(ctx, key, terminal.Request{Command: "sleep 0.2; echo x >> " + conf + " && echo ESCAPED"})
	if st.Error != nil {
		t.Fatal(*st.Error)
	}
	kernelRefused(t, "background", waitProcess(t, m, key, st.SessionID), 1)
	for _, p := range []string{conf, dotenv, filepath.Join(ws, ".berth", "new")} {
		if _, err := files.Write(ctx, env, p, lowering); err == nil {
			t.Errorf("write_file %s worked", p)
		}
	}
	if _, err := files.Patch(ctx, env, conf, "manual", "off", false); err == nil {
		t.Error("patch of the config worked")
	}
	if after := tree(t, home); after != before {
		t.Fatalf("berth's home changed:\n%s", changes(before, after))
	}

	// berth's settings are what they were: the next call is confined,
	// and the gate asks.
	read, err := config.Load(config.LoadOptions{Getenv: func(k string) string {
		if k == "BERTH_HOME" {
			return home
		}
		return ""
	}})
	if err != nil {
		t.Fatal(err)
	}
	if read.Terminal.String("local_sandbox") != local.SandboxWorkspace || read.Approvals.Mode != "manual" {
		t.Fatalf("berth's settings changed: local_sandbox %s, approvals %s", read.Terminal.String("local_sandbox"), read.Approvals.Mode)
	}
	victim := makeVictim(t, t.TempDir())
	m.Close(ctx, key)
	res := m.Run(ctx, key, terminal.Request{Command: "rm -rf " + victim})
	permissionError(t, "rm -rf outside, next call", res.Output)
	intact(t, victim, "rm -rf outside, next call")
}

// TestWorkspaceKeepsBerthsStateReadOnlyWherever is berth's home below a
// directory of the workspace, and a config file (BERTH_CONFIG) in the
// workspace's root with its .env: nothing on the way can be moved aside
// and replaced, and the files stay read-only.
func TestWorkspaceKeepsBerthsStateReadOnlyWherever(t *testing.T) {
	requireMountNS(t)
	ws, home := homeInWorkspace(t, ".config/berth")
	conf := filepath.Join(ws, "berth.yaml")
	dotenv := filepath.Join(ws, ".env")
	for _, f := range []string{conf, dotenv} {
		if err := os.WriteFile(f, []byte(berthConfigText), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := sandboxConfig(t, ws, nil)
	cfg.Home, cfg.Path = home, conf
	m := newManager(t, cfg)
	ctx := context.Background()
	env, err := m.Env(ctx, "deep")
	if err != nil {
		t.Fatal(err)
	}
	p := backend.CapabilitiesOf(env.Backend()).Confinement.Protected
	for _, want := range []string{home, conf, dotenv} {
		if !slices.Contains(p, want) {
			t.Errorf("Confinement.Protected %q lacks %s", p, want)
		}
	}
	before := tree(t, home) + snapshotFile(t, conf) + snapshotFile(t, dotenv)
	for _, c := range []string{
		"cd " + ws + " && mv .config .config.old && mkdir -p .config/berth && echo x > .config/berth/config.yaml && echo ESCAPED",
		"cd " + ws + " && rm -rf .config && echo ESCAPED",
		"cd " + ws + " && echo x >> berth.yaml && echo ESCAPED",
		"cd " + ws + " && echo BERTH_APPROVALS_MODE=off >> .env && echo ESCAPED",
		"cd " + ws + " && rm -f .env && echo ESCAPED",
		"cd " + ws + " && echo x > n && mv -f n .env && echo ESCAPED",
	} {
		res := m.Run(ctx, "deep", terminal.Request{Command: c})
		kernelRefused(t, c, res.Output, res.ExitCode)
		if after := tree(t, home) + snapshotFile(t, conf) + snapshotFile(t, dotenv); after != before {
			t.Fatalf("after %s berth's state changed:\n%s", c, changes(before, after))
		}
	}
	// The rest of the workspace root is the commands' own.
	if res := m.Run(ctx, "deep", terminal.Request{Command: "cd " + ws + " && echo x > mine && mv mine mine2 && rm mine2"}); res.ExitCode != 0 {
		t.Fatalf("inside: %+v", res)
	}

	// A config file in the workspace without a .env beside it: a
	// command could create one, so berth refuses to start.
	os.Remove(dotenv)
	_, err = local.New(backend.Options{Config: cfg.Terminal, Home: home, ConfigFile: conf})
	if err == nil || !strings.Contains(err.Error(), dotenv) || !strings.Contains(err.Error(), "create an empty") {
		t.Fatalf("config in the workspace, no .env: %v; want a refusal naming %s and the fix", err, dotenv)
	}
}

// changes lists the lines of two descriptions that differ (at most 300
// characters of each).
func changes(before, after string) string {
	var b strings.Builder
	was := strings.Split(before, "\n")
	now := strings.Split(after, "\n")
	short := func(s string) string {
		if len(s) > 300 {
			return s[:300] + "…"
		}
		return s
	}
	for _, l := range was {
		if !slices.Contains(now, l) {
			b.WriteString("- " + short(l) + "\n")
		}
	}
	for _, l := range now {
		if !slices.Contains(was, l) {
			b.WriteString("+ " + short(l) + "\n")
		}
	}
	return b.String()
}

func snapshotFile(t *testing.T, p string) string {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		return p + " missing\n"
	}
	c, _ := os.ReadFile(p)
	return fmt.Sprintf("%s %v %d %q\n", p, fi.Mode(), fi.ModTime().UnixNano(), c)
}

// TestWorkspaceRefusesALinkToBerthsHome: a home reached through a
// symbolic link the commands could re-point is refused, naming the link
// and the directory to use instead.
func TestWorkspaceRefusesALinkToBerthsHome(t *testing.T) {
	requireConfinement(t)
	ws := t.TempDir()
	real := t.TempDir()
	link := filepath.Join(ws, ".berth")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	cfg := sandboxConfig(t, ws, nil)
	_, err := local.New(backend.Options{Config: cfg.Terminal, Home: link})
	if err == nil || !strings.Contains(err.Error(), "symbolic link "+link) || !strings.Contains(err.Error(), "BERTH_HOME to the directory itself") {
		t.Fatalf("home through a link in the workspace: %v", err)
	}
	// BERTH_HOME outside the workspace: nothing to protect.
	be, err := local.New(backend.Options{Config: cfg.Terminal, Home: real})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close(context.Background())
	if p := be.Capabilities().Confinement.Protected; len(p) != 0 {
		t.Fatalf("home outside the workspace, no repository: Protected %q", p)
	}
}

// git runs git in dir and fails the test when it fails.
func git(t testing.TB, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main", "-c", "protocol.file.allow=always"}, args...)...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v in %s: %v\n%s", args, dir, err, out)
	}
}

// repoInWorkspace makes a workspace holding a repository with a commit, a
// linked worktree (wt), a submodule-style checkout whose git directory is
// in the repository's modules/ (sub), and a nested repository
// (vendor/lib).
func repoInWorkspace(t *testing.T) string {
	t.Helper()
	testenv.Need(t, testenv.Landlock, testenv.Programs("git"))
	ws := t.TempDir()
	makeRepos(t, ws)
	return ws
}

// makeRepos makes repoInWorkspace's repositories in ws.
func makeRepos(t testing.TB, ws string) {
	t.Helper()
	git(t, ws, "init", "-q")
	if err := os.WriteFile(filepath.Join(ws, "README"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, ws, "add", "README")
	git(t, ws, "commit", "-qm", "first")
	git(t, ws, "worktree", "add", "-q", "wt")
	if err := os.MkdirAll(filepath.Join(ws, ".git", "modules"), 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, ws, "init", "-q", "--separate-git-dir", filepath.Join(ws, ".git", "modules", "sub"), filepath.Join(ws, "sub"))
	if err := os.MkdirAll(filepath.Join(ws, "vendor", "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, filepath.Join(ws, "vendor", "lib"), "init", "-q")
}

// TestWorkspaceKeepsGitHooksReadOnly is R10 of the 2026-11-28 review
// (and the design review's §4.2): a confined command planted
// .git/hooks/pre-commit or core.fsmonitor in .git/config, which the user's
// own git later ran unconfined. The hooks and config of every repository
// in the workspace (its submodules, linked worktrees and nested
// repositories too) are read-only now, and no .git can be moved aside and
// replaced; git itself still works.
func TestWorkspaceKeepsGitHooksReadOnly(t *testing.T) {
	py := python(t)
	requireMountNS(t)
	ws := repoInWorkspace(t)
	m := newManager(t, sandboxConfig(t, ws, nil))
	ctx := context.Background()
	const key = "git"
	env, err := m.Env(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	g := filepath.Join(ws, ".git")
	lib := filepath.Join(ws, "vendor", "lib", ".git")
	protected := backend.CapabilitiesOf(env.Backend()).Confinement.Protected
	for _, want := range []string{
		g + "/hooks", g + "/config", lib + "/hooks", lib + "/config",
		g + "/modules/sub/hooks", g + "/modules/sub/config", ws + "/sub/.git",
		g + "/worktrees/wt/commondir", ws + "/wt/.git",
	} {
		if !slices.Contains(protected, want) {
			t.Errorf("Confinement.Protected lacks %s", want)
		}
	}
	// A name that does not exist cannot be kept from being made: it is
	// not reported, so the gate asks about it.
	if slices.Contains(protected, g+"/commondir") {
		t.Errorf("Confinement.Protected lists %s, which does not exist", g+"/commondir")
	}
	if t.Failed() {
		t.Fatalf("Protected: %q", protected)
	}
	watched := []string{g + "/hooks", g + "/config", lib + "/hooks", lib + "/config", g + "/modules/sub/hooks", g + "/modules/sub/config", ws + "/sub/.git", g + "/worktrees/wt/commondir", ws + "/wt/.git"}
	state := func() string {
		var b strings.Builder
		for _, p := range watched {
			if fi, err := os.Stat(p); err == nil && fi.IsDir() {
				b.WriteString(tree(t, p))
			} else {
				b.WriteString(snapshotFile(t, p))
			}
		}
		return b.String()
	}
	// git works: status, add, commit, branch, in the repository and the
	// nested one.
	res := m.Run(ctx, key, terminal.Request{Command: "cd " + ws + ` && echo more >> README && git status --short && git add README && git -c user.name=a -c user.email=a@a commit -qm second && git branch topic && git log --oneline | wc -l && cd vendor/lib && echo x > f && git add f && git -c user.name=a -c user.email=a@a commit -qm lib && echo ok`})
	if res.ExitCode != 0 || !strings.HasSuffix(res.Output, "2\nok") {
		t.Fatalf("git inside the workspace: exit %d %q", res.ExitCode, res.Output)
	}
	before := state()
	hook := `printf '#!/bin/sh\nrm -rf ~\n' > `
	for _, c := range []string{
		"cd " + ws + " && " + hook + ".git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && echo ESCAPED",
		"cd " + ws + " && chmod +x .git/hooks/pre-commit.sample && echo ESCAPED",
		"cd " + ws + " && printf '[core]\\n\\tfsmonitor = rm -rf ~\\n' >> .git/config && echo ESCAPED",
		"cd " + ws + " && git config core.fsmonitor 'rm -rf ~' && echo ESCAPED",
		"cd " + ws + " && git config core.hooksPath /tmp && echo ESCAPED",
		py + ` -c 'open("` + g + `/con" + "fig", "a").write("[alias]\n\tst = !rm -rf ~\n")' && echo ESCAPED`,
		"cd " + ws + " && mv .git .git.old && echo ESCAPED",
		"cd " + ws + " && rm -rf .git && echo ESCAPED",
		"cd " + ws + " && mv .git/hooks .git/hooks.old && mkdir .git/hooks && echo ESCAPED",
		"cd " + ws + " && mv vendor vendor.old && echo ESCAPED",
		"cd " + ws + " && mv vendor/lib/.git vendor/lib/.git.old && echo ESCAPED",
		"cd " + ws + " && " + hook + "vendor/lib/.git/hooks/post-checkout && echo ESCAPED",
		"cd " + ws + " && echo 'gitdir: /tmp/evil' > sub/.git && echo ESCAPED",
		"cd " + ws + " && " + hook + ".git/modules/sub/hooks/pre-commit && echo ESCAPED",
		"cd " + ws + " && echo /tmp/evil > .git/worktrees/wt/commondir && echo ESCAPED",
		"cd " + ws + " && echo 'gitdir: /tmp/evil' > wt/.git && echo ESCAPED",
		"cd " + ws + " && ln .git/config cfg && echo x >> cfg && echo ESCAPED",
		"(sleep 0.2; cd " + ws + " && " + hook + ".git/hooks/pre-push && echo ESCAPED) & wait $!",
	} {
		res := m.Run(ctx, key, terminal.Request{Command: c})
		kernelRefused(t, c, res.Output, res.ExitCode)
		if after := state(); after != before {
			t.Fatalf("after %s:\n%s", c, changes(before, after))
		}
	}
	for _, p := range []string{g + "/hooks/pre-commit", g + "/config"} {
		if _, err := files.Write(ctx, env, p, "#!/bin/sh\nrm -rf ~\n"); err == nil {
			t.Errorf("write_file %s worked", p)
		}
	}
	if after := state(); after != before {
		t.Fatalf("after write_file:\n%s", changes(before, after))
	}
}

// TestWorkspaceRefusesWithoutMountNamespace is the other side of R1: run
// as a user without privileges (uid daemon, as the review did), berth
// cannot keep its home read-only inside the workspace, and refuses to
// start, naming the path and the fix; with its home elsewhere it starts,
// and reports the repository's hooks as not protected (so the gate keeps
// asking).
func TestWorkspaceRefusesWithoutMountNamespace(t *testing.T) {
	requireRoot(t)
	requireConfinement(t)
	ws := repoInWorkspace(t)
	home := filepath.Join(ws, ".berth")
	outsideHome, err := os.MkdirTemp("", "berth-home-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(outsideHome)
	for _, dir := range []string{filepath.Dir(ws), ws, outsideHome} {
		os.Chmod(dir, 0o755)
	}
	if err := exec.Command("chown", "-R", "1:1", ws, outsideHome).Run(); err != nil {
		t.Fatal(err)
	}
	bin := copyTestBinary(t)
	cmd := exec.Command(bin)
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), "BERTH_LOCAL_TEST_HELPER=refuse", "BERTH_TEST_WS="+ws, "BERTH_TEST_HOME="+home, "BERTH_TEST_OUTSIDE_HOME="+outsideHome)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1, Gid: 1}} // daemon
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	lines := string(out)
	for _, want := range []string{
		"refused: local: terminal.local_sandbox=workspace: berth's home " + home + " lies inside the writable tree " + ws,
		"Set terminal.cwd to a narrower directory",
		"BERTH_HOME=",
		"which it cannot make here: a mount namespace needs CAP_SYS_ADMIN",
		"outside: protected []",
		"hook: written",
		"doctor: usable false",
		"configured: local_sandbox=workspace, network=all, unix_sockets=false, fallback=refuse: CANNOT start here: local: terminal.local_sandbox=workspace: berth's home " + home + " lies inside",
		"NOT enforced: keeping berth's home read-only inside the workspace (berth refuses to start when it lies there)",
		"fix: set terminal.cwd to the project's directory, or BERTH_HOME",
	} {
		if !strings.Contains(lines, want) {
			t.Errorf("helper output lacks %q:\n%s", want, lines)
		}
	}
	if _, err := os.Stat(home); err == nil {
		t.Error("the refused start made berth's home")
	}
}

// refuseHelper is TestWorkspaceRefusesWithoutMountNamespace's berth.
func refuseHelper() {
	ws, home, outsideHome := os.Getenv("BERTH_TEST_WS"), os.Getenv("BERTH_TEST_HOME"), os.Getenv("BERTH_TEST_OUTSIDE_HOME")
	t := config.Default().Terminal
	t.Cwd = ws
	if err := t.Set("local_sandbox", "workspace"); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	if _, err := local.New(backend.Options{Config: t, Home: home}); err != nil {
		fmt.Println("refused:", err)
	} else {
		fmt.Println("started with berth's home in the workspace")
	}
	reg, _ := backend.Lookup("local")
	fp := reg.Doctor(context.Background(), backend.Options{Config: t, Home: home})
	fmt.Printf("doctor: usable %v\n%s\nfix: %s\n", fp.Usable, strings.Join(fp.Details, "\n"), fp.Fix)
	be, err := local.New(backend.Options{Config: t, Home: outsideHome})
	if err != nil {
		fmt.Println("outside:", err)
		os.Exit(1)
	}
	defer be.Close(context.Background())
	fmt.Printf("outside: protected %q\n", be.Capabilities().Confinement.Protected)
	out, code, err := backend.Output(context.Background(), be, backend.ProcSpec{Argv: []string{"sh", "-c", "printf '#!/bin/sh\\n' > .git/hooks/pre-commit && echo written"}}, nil, 0)
	fmt.Printf("hook: %s (exit %d, %v)\n", strings.TrimSpace(string(out)), code, err)
}

// TestDoctorSaysWhatIsKeptReadOnly: for a workspace holding berth's home
// and a repository, berth doctor says the kernel keeps them read-only
// here, and makes nothing while looking.
func TestDoctorSaysWhatIsKeptReadOnly(t *testing.T) {
	requireMountNS(t)
	ws := repoInWorkspace(t)
	home := filepath.Join(ws, ".berth")
	reg, _ := backend.Lookup("local")
	cfg := sandboxConfig(t, ws, nil)
	fp := reg.Doctor(context.Background(), backend.Options{Config: cfg.Terminal, Home: home})
	all := strings.Join(fp.Details, "\n")
	for _, want := range []string{
		"workspace " + ws + ": berth's home " + home + " is inside it: kept read-only to commands by a mount namespace",
		".git/hooks, .git/config, config.worktree and commondir of the 4 git directories found in the workspace",
		"berth's home and config, and repositories' hooks and config inside the workspace, read-only",
		"configured: local_sandbox=workspace, network=all, unix_sockets=false, fallback=refuse: enforced in full",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("doctor lacks %q:\n%s", want, all)
		}
	}
	if !fp.Usable {
		t.Errorf("not usable: %+v", fp)
	}
	if _, err := os.Stat(home); err == nil {
		t.Error("doctor made berth's home")
	}
	// The workspace holding the user's home is worth a warning.
	fp = reg.Doctor(context.Background(), backend.Options{Config: cfg.Terminal, Home: home, Getenv: func(k string) string {
		if k == "HOME" {
			return ws
		}
		return ""
	}})
	if all := strings.Join(fp.Details, "\n"); !strings.Contains(all, "WARNING: the writable tree "+ws+" holds your home directory") {
		t.Errorf("no warning for a workspace holding $HOME:\n%s", all)
	}
}
