package local_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/local"
	"github.com/a55dbaac/berth/backend/local/confine"
	"github.com/a55dbaac/berth/backendtest"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/files"
	"github.com/a55dbaac/berth/internal/testenv"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/process"
	"github.com/a55dbaac/berth/terminal"
)

// requireConfinement skips unless BERTH_TEST_ENGINES selects landlock,
// and fails where it is selected and this kernel cannot confine.
func requireConfinement(t *testing.T) {
	t.Helper()
	testenv.Need(t, testenv.Landlock, func() error {
		if m := confine.Probe().Missing(confine.Policy{Network: confine.NetworkLoopback}); len(m) > 0 {
			return fmt.Errorf("this kernel cannot confine: %s", strings.Join(m, "; "))
		}
		return nil
	})
}

var (
	pythonOnce sync.Once
	pythonExe  string
)

// python returns the python3 interpreter itself (a version manager's
// shim costs seconds per start on a loaded machine); the confinement
// tests write their attacks in it.
func python(t *testing.T) string {
	t.Helper()
	testenv.Need(t, testenv.Landlock, testenv.Programs("python3"))
	pythonOnce.Do(func() {
		out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
		if pythonExe = strings.TrimSpace(string(out)); err != nil || pythonExe == "" {
			pythonExe = "python3"
		}
	})
	return pythonExe
}

// sandboxConfig is a configuration with the local backend in workspace
// mode in ws, approvals off (the kernel is the only guard), and settings.
func sandboxConfig(t *testing.T, ws string, settings map[string]any) *config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Home = t.TempDir()
	cfg.Approvals.Mode = "off"
	cfg.Terminal.Cwd = ws
	set := map[string]any{"local_sandbox": "workspace"}
	for k, v := range settings {
		set[k] = v
	}
	for k, v := range set {
		if err := cfg.Terminal.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	return cfg
}

func newManager(t *testing.T, cfg *config.Config) *manager.Manager {
	t.Helper()
	requireConfinement(t)
	m := manager.New(cfg, nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		m.CloseAll(ctx)
	})
	return m
}

// makeVictim makes a directory with files in it, in parent.
func makeVictim(t *testing.T, parent string) string {
	t.Helper()
	dir, err := os.MkdirTemp(parent, "victim-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"keep", "sub/deep"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("precious\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// intact fails unless dir holds what makeVictim put there.
func intact(t *testing.T, dir, after string) {
	t.Helper()
	for _, f := range []string{"keep", "sub/deep"} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err != nil || string(b) != "precious\n" {
			t.Fatalf("after %s: %s/%s is gone or changed (%q, %v)", after, dir, f, b, err)
		}
	}
}

// gone fails unless dir no longer exists.
func gone(t *testing.T, dir, after string) {
	t.Helper()
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Fatalf("after %s: %s still exists (%v)", after, dir, err)
	}
}

// permissionError fails unless out carries the kernel's refusal.
func permissionError(t *testing.T, what, out string) {
	t.Helper()
	if !strings.Contains(out, "Permission denied") && !strings.Contains(out, "PermissionError") && !strings.Contains(out, "permission denied") {
		t.Fatalf("%s: no permission error in %q", what, out)
	}
}

// removals are the ways of deleting a directory the issue lists: plain,
// through find, through Python, through a "$@" helper, through process
// substitution. %s is the directory.
var removals = []string{
	`rm -rf %s`,
	`find %s -delete`,
	`PY -c 'import shutil; shutil.rmtree("%s")'`,
	`f() { "$@"; }; f rm -rf %s`,
	`bash <(echo rm -rf %s)`,
}

// waitProcess waits for a background process and returns its output.
func waitProcess(t *testing.T, m *manager.Manager, key, id string) string {
	t.Helper()
	w := m.Process(context.Background(), key, process.Request{Action: "wait", SessionID: id, Timeout: 60})
	if w["status"] != "exited" {
		t.Fatalf("wait %s: %v", id, w)
	}
	out, _ := w["output"].(string)
	return out
}

func TestWorkspaceKeepsOutsideIntact(t *testing.T) {
	py := python(t)
	ws := t.TempDir()
	outside := t.TempDir()
	m := newManager(t, sandboxConfig(t, ws, nil))
	ctx := context.Background()
	const key = "guard"

	for _, r := range removals {
		dir := makeVictim(t, outside)
		cmd := strings.ReplaceAll(fmt.Sprintf(r, dir), "PY", py)
		res := m.Run(ctx, key, terminal.Request{Command: cmd})
		if res.Error != nil {
			t.Fatalf("%s: %s", cmd, *res.Error)
		}
		if res.ExitCode == 0 {
			t.Errorf("%s: exit 0", cmd)
		}
		permissionError(t, cmd, res.Output)
		intact(t, dir, cmd)
	}

	// In the background, and moved there by on_timeout.
	dir := makeVictim(t, outside)
	st := m.Background(ctx, key, terminal.Request{Command: "rm -rf " + dir})
	if st.Error != nil {
		t.Fatal(*st.Error)
	}
	permissionError(t, "background rm -rf", waitProcess(t, m, key, st.SessionID))
	intact(t, dir, "background rm -rf")

	res := m.Run(ctx, key, terminal.Request{Command: "sleep 2; rm -rf " + dir, Timeout: 1, OnTimeout: terminal.OnTimeoutBackground})
	if !res.MovedToBackground {
		t.Fatalf("on_timeout background: not moved: %+v", res)
	}
	permissionError(t, "rm -rf after on_timeout background", waitProcess(t, m, key, res.SessionID))
	intact(t, dir, "rm -rf after on_timeout background")

	// write_file and patch through a symlink pointing outside.
	env, err := m.Env(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dir, filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(ws, "link", "keep"), filepath.Join(ws, "link", "new"), "link/sub/deep"} {
		_, err := files.Write(ctx, env, p, "overwritten\n")
		if err == nil {
			t.Fatalf("write_file %s worked", p)
		}
		permissionError(t, "write_file "+p, err.Error())
	}
	if _, err := files.Patch(ctx, env, "link/keep", "precious", "patched", false); err == nil {
		t.Fatal("patch through the link worked")
	} else {
		permissionError(t, "patch link/keep", err.Error())
	}
	intact(t, dir, "write_file and patch through a symlink")
	if _, err := os.Stat(filepath.Join(dir, "new")); err == nil {
		t.Fatal("write_file made a file outside")
	}

	// A trap set in the shell runs when the environment closes.
	res = m.Run(ctx, key, terminal.Request{Command: "trap 'rm -rf " + dir + "' EXIT; bash -c \"trap 'rm -rf " + dir + "' EXIT; true\""})
	permissionError(t, "trap in a child shell", res.Output)
	if err := m.Close(ctx, key); err != nil {
		t.Fatal(err)
	}
	intact(t, dir, "trap 'rm -rf' EXIT and closing the environment")
}

func TestWorkspaceCommandsWorkInside(t *testing.T) {
	py := python(t)
	ws := t.TempDir()
	// A long TERM-to-KILL grace: the trap at the end runs rm at close,
	// and a loaded machine must not turn the grace's end into the test's
	// subject (the kill ends as soon as the shell has).
	m := newManager(t, sandboxConfig(t, ws, map[string]any{"daemon_term_grace_seconds": 60.0}))
	ctx := context.Background()
	const key = "inside"
	for _, r := range removals {
		dir := makeVictim(t, ws)
		cmd := strings.ReplaceAll(fmt.Sprintf(r, dir), "PY", py)
		if res := m.Run(ctx, key, terminal.Request{Command: cmd}); res.Error != nil || res.ExitCode != 0 {
			t.Fatalf("%s: exit %d %q", cmd, res.ExitCode, res.Output)
		}
		gone(t, dir, cmd)
	}
	dir := makeVictim(t, ws)
	st := m.Background(ctx, key, terminal.Request{Command: "rm -rf " + dir + " && echo removed"})
	if out := waitProcess(t, m, key, st.SessionID); out != "removed" {
		t.Fatalf("background: %q", out)
	}
	gone(t, dir, "background rm -rf")
	dir = makeVictim(t, ws)
	res := m.Run(ctx, key, terminal.Request{Command: "sleep 2; rm -rf " + dir + " && echo removed", Timeout: 1, OnTimeout: terminal.OnTimeoutBackground})
	if out := waitProcess(t, m, key, res.SessionID); out != "removed" {
		t.Fatalf("on_timeout background: %q", out)
	}
	gone(t, dir, "rm -rf after on_timeout background")

	// The file tools through a link that stays inside.
	dir = makeVictim(t, ws)
	if err := os.Symlink(dir, filepath.Join(ws, "inlink")); err != nil {
		t.Fatal(err)
	}
	env, _ := m.Env(ctx, key)
	if _, err := files.Write(ctx, env, "inlink/new", "fresh\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := files.Patch(ctx, env, "inlink/keep", "precious", "patched", false); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "keep")); string(b) != "patched\n" {
		t.Fatalf("patch inside: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "new")); string(b) != "fresh\n" {
		t.Fatalf("write_file inside: %q", b)
	}
	// A trap that cleans up its own scratch directory runs at close.
	dir = makeVictim(t, ws)
	if res := m.Run(ctx, key, terminal.Request{Command: "trap 'rm -rf " + dir + "' EXIT"}); res.Error != nil || res.ExitCode != 0 {
		t.Fatalf("trap: exit %d %q", res.ExitCode, res.Output)
	}
	m.Close(ctx, key)
	gone(t, dir, "trap 'rm -rf' EXIT inside and closing the environment")
}

func TestWorkspaceKillMinusOne(t *testing.T) {
	ws := t.TempDir()
	m := newManager(t, sandboxConfig(t, ws, nil))
	ctx := context.Background()
	outside := exec.Command("sleep", "300")
	if err := outside.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { outside.Wait(); close(exited) }()
	defer func() { outside.Process.Kill(); <-exited }()

	env, err := m.Env(ctx, "kill")
	if err != nil {
		t.Fatal(err)
	}
	// kill -9 -1 unconfined ends every process the user may signal on
	// this machine (as root: all of them). Never without the guard.
	if c := backend.CapabilitiesOf(env.Backend()); !c.Confinement.Signals || c.Isolation != backend.IsolationWorkspace {
		t.Fatal("the environment does not confine signals: refusing to run kill -9 -1")
	}
	// Through the environment itself: the approvals floor refuses this
	// command before it runs, and the kernel is what is tested here.
	r := env.Run(ctx, terminal.Request{Command: "sleep 300 & kill -9 -1"})
	if r.Error != nil {
		t.Fatalf("kill -9 -1: %s", *r.Error)
	}
	select {
	case <-exited:
		t.Fatal("kill -9 -1 in the environment killed a process outside it")
	default:
	}
	if err := syscallKill0(outside.Process.Pid); err != nil {
		t.Fatalf("the outside process is gone: %v", err)
	}
	// The environment answers. kill(-1) spares its caller, so the shell
	// may have lived on (it then reports the killed job first, as bash
	// does, when it notices) or been replaced by a new one.
	if r := env.Run(ctx, terminal.Request{Command: "echo alive"}); !answers(r.Output) {
		t.Fatalf("after kill -9 -1: %+v", r)
	}
	if r := env.Run(ctx, terminal.Request{Command: "kill -0 " + strconv.Itoa(os.Getpid())}); r.ExitCode == 0 {
		t.Fatal("the environment may signal berth")
	}
}

func syscallKill0(pid int) error { return syscall.Kill(pid, 0) }

// answers: the output is "alive", after any notices of killed jobs.
func answers(out string) bool {
	lines := strings.Split(out, "\n")
	for _, l := range lines[:len(lines)-1] {
		if !strings.Contains(l, "Killed") {
			return false
		}
	}
	return lines[len(lines)-1] == "alive"
}

func TestWorkspaceNetwork(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hello\n"))
			c.Close()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	connect := "exec 3<>/dev/tcp/127.0.0.1/" + port + " && head -1 <&3"
	for _, c := range []struct {
		network string
		works   bool
	}{{"none", false}, {"loopback", true}, {"all", true}} {
		m := newManager(t, sandboxConfig(t, t.TempDir(), map[string]any{"local_sandbox_network": c.network}))
		r := m.Run(context.Background(), "net", terminal.Request{Command: connect})
		if c.works && (r.ExitCode != 0 || r.Output != "hello") {
			t.Errorf("network %s: connect to 127.0.0.1: exit %d %q", c.network, r.ExitCode, r.Output)
		}
		if !c.works {
			if r.ExitCode == 0 {
				t.Errorf("network %s: connect to 127.0.0.1 worked", c.network)
			}
			permissionError(t, "network "+c.network, r.Output)
		}
	}
}

func TestWorkspaceReportsConfinement(t *testing.T) {
	requireConfinement(t)
	ws, extra := t.TempDir(), t.TempDir()
	cfg := sandboxConfig(t, ws, map[string]any{"local_sandbox_writable": []string{extra}, "local_sandbox_network": "loopback"})
	be, err := local.New(backend.Options{Config: cfg.Terminal})
	if err != nil {
		t.Fatal(err)
	}
	tmp := be.TempDir()
	if tmp == "" {
		t.Fatal("no private temporary directory")
	}
	caps := be.Capabilities()
	if caps.Isolation != backend.IsolationWorkspace {
		t.Fatalf("isolation %v", caps.Isolation)
	}
	c := caps.Confinement
	for _, want := range []string{ws, extra, tmp} {
		if !slices.Contains(c.Writable, want) {
			t.Errorf("Writable %q lacks %s", c.Writable, want)
		}
	}
	if !c.Signals || c.Network != "loopback" {
		t.Errorf("Confinement %+v", c)
	}
	if caps.NativeFS {
		t.Error("NativeFS under confinement: the file tools would write from berth's own process")
	}
	out, code, err := backend.Output(context.Background(), be, backend.ProcSpec{Argv: []string{"sh", "-c", `echo "$TMPDIR"; touch "$TMPDIR/x"`}}, nil, 0)
	if err != nil || code != 0 || strings.TrimSpace(string(out)) != tmp {
		t.Fatalf("TMPDIR: %q %d %v", out, code, err)
	}
	be.Close(context.Background())
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("the temporary directory outlived Close: %v", err)
	}
	if _, err := be.Start(context.Background(), backend.ProcSpec{Argv: []string{"true"}}); err == nil {
		t.Fatal("Start after Close")
	}

	// With unix sockets open a daemon can write for a command: no
	// isolation is claimed.
	open, err := local.New(backend.Options{Config: sandboxConfig(t, t.TempDir(), map[string]any{"local_sandbox_unix_sockets": true}).Terminal})
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close(context.Background())
	if c := open.Capabilities(); c.Isolation != backend.IsolationNone || c.NativeFS {
		t.Fatal("with local_sandbox_unix_sockets: true the backend claims isolation, or writes natively")
	}

	off, err := local.New(backend.Options{Config: config.Default().Terminal})
	if err != nil {
		t.Fatal(err)
	}
	if c := off.Capabilities(); c.Isolation != backend.IsolationNone || !c.NativeFS || c.Confinement.Writable != nil {
		t.Fatal("mode off reports confinement")
	}
}

func TestWorkspaceSettings(t *testing.T) {
	cfg := config.Default()
	for _, c := range []struct {
		key  string
		val  any
		want string
	}{
		{"local_sandbox", "strict", `terminal.local_sandbox "strict": use off, workspace`},
		{"local_sandbox_network", "lan", `terminal.local_sandbox_network "lan": use all, loopback, none`},
		{"local_sandbox_fallback", "yes", `terminal.local_sandbox_fallback "yes": use refuse, partial, off`},
		{"local_sandbox_writable", []string{"rel/dir"}, `"rel/dir" is not an absolute path`},
	} {
		err := cfg.Terminal.Set(c.key, c.val)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s=%v: %v; want %q", c.key, c.val, err, c.want)
		}
	}
	requireConfinement(t)
	missing := filepath.Join(t.TempDir(), "missing")
	for _, c := range []struct {
		cwd      string
		settings map[string]any
		want     string
	}{
		{"/", nil, "with / as the working directory"},
		{missing, nil, "needs the working directory " + missing + " to exist"},
		{t.TempDir(), map[string]any{"local_sandbox_writable": []string{missing}}, `terminal.local_sandbox_writable: "` + missing + `" is not an existing directory`},
		{t.TempDir(), map[string]any{"local_sandbox_unix_sockets": true, "local_sandbox_network": "loopback"}, "unix sockets cannot be allowed with loopback"},
	} {
		_, err := local.New(backend.Options{Config: sandboxConfig(t, c.cwd, c.settings).Terminal})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("cwd %s %v: %v; want %q", c.cwd, c.settings, err, c.want)
		}
	}
}

// TestWorkspaceSessionFiles is the session's private files under
// confinement: a large stdin and a terminal background process's preamble
// go to the environment's own temporary directory, the only one it may
// write.
func TestWorkspaceSessionFiles(t *testing.T) {
	ws := t.TempDir()
	m := newManager(t, sandboxConfig(t, ws, nil))
	ctx := context.Background()
	big := strings.Repeat("x", 64<<10)
	r := m.Run(ctx, "files", terminal.Request{Command: "wc -c", StdinData: &big})
	if r.Error != nil || r.Output != strconv.Itoa(len(big)) {
		t.Fatalf("large stdin: %+v", r)
	}
	st := m.Background(ctx, "files", terminal.Request{Command: "echo on a terminal; tty >/dev/null && echo yes", PTY: true})
	if st.Error != nil {
		t.Fatalf("pty background: %s", *st.Error)
	}
	if out := waitProcess(t, m, "files", st.SessionID); !strings.Contains(out, "on a terminal") || !strings.Contains(out, "yes") {
		t.Fatalf("pty background: %q", out)
	}
}

// TestConformanceWorkspace runs the conformance suite on the local
// backend's secondary configuration, workspace mode (the primary one runs
// in package session). Confinement changes what every process the backend
// starts may do — write, signal, reach — so the groups run here are all
// that start processes: Process (its capabilities case is the only one to
// see a workspace isolation), Terminal, Background (the process tool's kill
// under scoped signals), Hardening with berth's own shell code (its private
// files under a filesystem that refuses writes) and Files. The suite writes
// under /tmp and $HOME (its stated needs), so those are listed as
// writable; the tests above hold the confinement itself.
func TestConformanceWorkspace(t *testing.T) {
	requireConfinement(t)
	backendtest.Run(t, "local", backendtest.Config{
		Name:       "workspace",
		Groups:     []string{"Process", "Terminal", "Background", "Hardening", "Fork", "Files"},
		ShellTests: true,
		Setup: func(t *testing.T) backendtest.Target {
			ws := t.TempDir()
			home, _ := os.UserHomeDir()
			cfg := sandboxConfig(t, ws, map[string]any{"local_sandbox_writable": []string{"/tmp", home}})
			// The Fork group's berth home, where the copies live: outside
			// the writable trees (/tmp and $HOME here), as it must be.
			forkHome := forkHomeDir(t)
			reg, _ := backend.Lookup("local")
			return backendtest.Target{
				NewFrom: func(t testing.TB, opts backend.Options) backend.Backend {
					be, err := local.New(backend.Options{Config: cfg.Terminal, Home: forkHome, Key: opts.Key, From: opts.From, Progress: opts.Progress})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { be.Close(context.Background()) })
					return be
				},
				Checkpoints: homeAdmin{reg.Checkpoints, forkHome},
				New: func(t testing.TB) backend.Backend {
					// berth's home where no writable tree reaches: the
					// default, ~/.berth, would lie in the listed $HOME, to
					// be kept read-only (made first if missing) or, without
					// a mount namespace, refused.
					be, err := local.New(backend.Options{Config: cfg.Terminal, Home: "/nonexistent/berth-home"})
					if err != nil {
						t.Fatal(err)
					}
					if backend.CapabilitiesOf(be).Isolation != backend.IsolationWorkspace {
						t.Fatal("not confined")
					}
					t.Cleanup(func() { be.Close(context.Background()) })
					return be
				},
				Options: backendtest.Options{Scratch: ws},
			}
		},
	})
}

// forkHomeDir is a berth home for checkpoints outside /tmp and $HOME
// (the workspace configuration's writable trees), removed with t, and
// with it the forks' workspaces beside it.
func forkHomeDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "berth-fork-home-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.RemoveAll(dir)
		os.RemoveAll(dir + "-workspaces")
	})
	return dir
}

// homeAdmin is a CheckpointAdmin with berth's home set to its own.
type homeAdmin struct {
	backend.CheckpointAdmin
	home string
}

func (a homeAdmin) Remove(ctx context.Context, opts backend.Options, cp backend.Checkpoint) error {
	opts.Home = a.home
	return a.CheckpointAdmin.Remove(ctx, opts, cp)
}

func TestDoctorShowsConfinement(t *testing.T) {
	requireConfinement(t)
	reg, ok := backend.Lookup("local")
	if !ok || reg.Doctor == nil {
		t.Fatal("no local doctor")
	}
	cfg := sandboxConfig(t, t.TempDir(), map[string]any{"local_sandbox_network": "none"})
	fp := reg.Doctor(context.Background(), backend.Options{Config: cfg.Terminal})
	all := strings.Join(fp.Details, "\n")
	for _, want := range []string{
		fmt.Sprintf("Landlock ABI %d: filesystem writes", confine.Probe().ABI),
		"local_sandbox=off: no kernel confinement",
		"local_sandbox=workspace here: writes, chmod and chown only under the working directory",
		"signals and ptrace only within the environment",
		"no network",
		"configured: local_sandbox=workspace, network=none, unix_sockets=false, fallback=refuse: enforced in full",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("doctor details lack %q:\n%s", want, all)
		}
	}
	if !fp.Usable {
		t.Errorf("doctor: not usable: %+v", fp)
	}
}
