package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a55dbaac/berth/daemon/wire"
	"github.com/a55dbaac/berth/internal/testenv"
)

// waitFor polls cond until it holds; the bound is for a hang, not a
// timing claim.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30 s", what)
		}
	}
}

// environOwner returns the owner of /proc/pid/environ: root for a process
// that is not dumpable, its own user otherwise.
func environOwner(t *testing.T, pid int) uint32 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/proc/%d/environ", pid), &st); err != nil {
		t.Fatalf("stat environ of %d: %v", pid, err)
	}
	return st.Uid
}

// TestProcessesAreNotDumpable (F9): the front, the engine and a daemon
// that never ran a local command (one that serves only remote backends)
// are all non-dumpable from their start: their /proc/<pid>/environ, which
// holds the caller's secrets, is root's, and another process of their own
// user cannot read it. As root the processes run as uid 65534, so that
// "another process of the same user" is not root.
func TestProcessesAreNotDumpable(t *testing.T) {
	user := &syscall.Credential{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid())}
	bin := filepath.Dir(berthBin)
	if os.Getuid() == 0 {
		user = &syscall.Credential{Uid: 65534, Gid: 65534}
		bin = nobodyBin(t)
	}
	home, err := os.MkdirTemp("", "bdf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	if err := os.Chown(home, int(user.Uid), int(user.Gid)); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + home, "BERTH_HOME=" + home, "OPENAI_API_KEY=sk-proj-F9SECRET0123456789012345678901234"}
	start := func(stdin io.Reader, name string, args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.Env, cmd.Dir, cmd.Stdin = env, home, stdin
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: user}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	readAsUser := func(pid int) error {
		cmd := exec.Command("cat", fmt.Sprintf("/proc/%d/environ", pid))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: user}
		out, err := cmd.CombinedOutput()
		if err == nil || bytes.Contains(out, []byte("F9SECRET")) {
			return fmt.Errorf("read it: %v, %q", err, out)
		}
		return nil
	}

	// A daemon that has run nothing.
	serve := start(nil, "berth-engine", "daemon", "serve")
	waitFor(t, "the daemon's socket", func() bool {
		socks, _ := filepath.Glob(filepath.Join(home, "daemon", "*.sock"))
		return len(socks) == 1
	})
	if o := environOwner(t, serve.Process.Pid); o != 0 {
		t.Errorf("daemon serve: /proc/<pid>/environ belongs to uid %d; want root's (not dumpable)", o)
	}
	if err := readAsUser(serve.Process.Pid); err != nil {
		t.Errorf("another process of the daemon's user could %v", err)
	}

	// The engine, once it answers, having run no command (berth mcp).
	mcp := exec.Command(filepath.Join(bin, "berth"), "mcp")
	mcp.Env, mcp.Dir = env, home
	mcp.SysProcAttr = &syscall.SysProcAttr{Credential: user}
	mcpIn, err := mcp.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	mcpOut, err := mcp.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := mcp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mcp.Process.Kill(); mcp.Wait() })
	go io.WriteString(mcpIn, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`+"\n")
	if line, err := bufio.NewReader(mcpOut).ReadString('\n'); err != nil || !strings.Contains(line, `"id":1`) {
		t.Fatalf("berth mcp: %q, %v", line, err)
	}
	if o := environOwner(t, mcp.Process.Pid); o != 0 {
		t.Errorf("berth mcp (the engine): environ belongs to uid %d; want root's", o)
	}

	// The front, answering a warm exec itself while its command runs.
	arg := uniqueArg(77)
	front := start(nil, "berth", "exec", "--", "sleep "+arg)
	waitProcs(t, "sleep\x00"+arg, 1)
	if os.Getuid() == 0 {
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", front.Process.Pid)); !strings.HasSuffix(exe, "/berth") {
			t.Fatalf("the warm exec is served by %s, not the front", exe)
		}
	}
	if o := environOwner(t, front.Process.Pid); o != 0 {
		t.Errorf("the front: environ belongs to uid %d; want root's", o)
	}
	if err := readAsUser(front.Process.Pid); err != nil {
		t.Errorf("another process of the front's user could %v", err)
	}
}

// TestSandboxedExecRunsInItsSandbox (N9, the review's repro): with a warm
// daemon started outside, berth exec in a bwrap sandbox with a read-only
// root and no network runs its command inside the sandbox: it cannot
// write the host, and sees the sandbox's network namespace. Outside, the
// daemon still serves, its environment intact.
func TestSandboxedExecRunsInItsSandbox(t *testing.T) {
	testenv.Need(t, testenv.Namespaces, testenv.Programs("bwrap"))
	d := newDaemonEnv(t)
	d.mustRun(t, 0, "exec", "--", "export A=1; echo daemon started outside")
	marker := filepath.Join(t.TempDir(), "escaped-marker")
	hostNet, _ := os.Readlink("/proc/self/ns/net")
	for _, flags := range [][]string{nil, {"--json"}} {
		args := append([]string{"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--unshare-net", "--die-with-parent",
			berthBin, "exec"}, flags...)
		args = append(args, "--", "touch "+marker+"; echo net:$(readlink /proc/self/ns/net)")
		cmd := exec.Command("bwrap", args...)
		cmd.Env = d.env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		_ = cmd.Run()
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("berth exec %v in the sandbox wrote the host: stdout %q, stderr %q", flags, out.String(), errb.String())
		}
		if !strings.Contains(out.String(), "Read-only file system") || !strings.Contains(out.String(), "net:net:[") || strings.Contains(out.String(), hostNet) {
			t.Fatalf("berth exec %v in the sandbox: stdout %q, stderr %q; want the touch refused and the sandbox's network namespace", flags, out.String(), errb.String())
		}
	}
	if out := d.mustRun(t, 0, "exec", "--", "echo $A"); out != "1\n" {
		t.Fatalf("outside after the sandboxed calls: %q; want the daemon's environment", out)
	}
}

// TestStuckReaderExec (N12, the review's repro): a berth exec whose
// output nobody reads does not keep its command past its timeout, and the
// next call on the same task is answered.
func TestStuckReaderExec(t *testing.T) {
	d := newDaemonEnv(t)
	d.mustRun(t, 0, "exec", "--", "echo warm")
	arg := uniqueArg(12)
	stuck := exec.Command(berthBin, "exec", "--timeout", "2", "--", "yes "+arg)
	stuck.Env = d.env
	if _, err := stuck.StdoutPipe(); err != nil { // never read
		t.Fatal(err)
	}
	if err := stuck.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stuck.Process.Kill(); stuck.Wait() })
	waitProcs(t, "yes\x00"+arg, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang, the defect
	defer cancel()
	second := exec.CommandContext(ctx, berthBin, "exec", "--timeout", "5", "--", "echo second")
	second.Env = d.env
	out, err := second.Output()
	if err != nil || string(out) != "second\n" {
		t.Fatalf("the next call on the task: %q, %v; want it answered", out, err)
	}
	waitProcs(t, "yes\x00"+arg, 0)
}

// rebuiltEngine writes, next to a copy of the front, a copy of the engine
// whose Go build ID differs: what a rebuild of the engine gives.
func rebuiltEngine(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	engine := filepath.Join(filepath.Dir(berthBin), "berth-engine")
	id := wire.GoBuildID(engine)
	if id == "" {
		t.Fatal("the engine has no build ID")
	}
	src, err := os.Open(engine)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	head := make([]byte, 64<<10)
	if _, err := io.ReadFull(src, head); err != nil {
		t.Fatal(err)
	}
	head = bytes.Replace(head, []byte(id), []byte(strings.Repeat("r", len(id))), 1)
	dst, err := os.OpenFile(filepath.Join(dir, "berth-engine"), os.O_WRONLY|os.O_CREATE, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dst.Write(head); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	if err := copyFile(berthBin, filepath.Join(dir, "berth"), 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "berth")
}

// TestRebuiltBerthStartsItsOwnDaemon (design item 4): a rebuilt berth
// never talks to the daemon of the old build: it starts its own, beside
// it. berth daemon status shows both, and berth daemon stop stops both.
func TestRebuiltBerthStartsItsOwnDaemon(t *testing.T) {
	d := newDaemonEnv(t)
	d.mustRun(t, 0, "exec", "--task", "t", "--", "export A=old-build")
	rebuilt := rebuiltEngine(t)
	for _, args := range [][]string{
		{"exec", "--task", "t", "--", "echo ${A:-unset}"}, // through the engine: it starts its daemon
		{"exec", "--task", "t", "--", "echo ${A:-unset}"}, // through the front, warm
	} {
		cmd := exec.Command(rebuilt, args...)
		cmd.Env = d.env
		out, err := cmd.CombinedOutput()
		if err != nil || string(out) != "unset\n" {
			t.Fatalf("rebuilt berth %q: %q, %v; want a daemon of its own (a new shell)", args, out, err)
		}
	}
	if socks := d.sockets(); len(socks) != 2 {
		t.Fatalf("sockets %v; want one per build", socks)
	}
	var st struct {
		Running     bool          `json:"running"`
		PID         int           `json:"pid"`
		Identity    string        `json:"identity"`
		OtherBuilds []wire.Status `json:"other_builds"`
	}
	out := d.mustRun(t, 0, "daemon", "status", "--json")
	if err := json.Unmarshal([]byte(out), &st); err != nil || !st.Running || len(st.OtherBuilds) != 1 || st.OtherBuilds[0].Identity == st.Identity || st.OtherBuilds[0].PID == st.PID {
		t.Fatalf("daemon status: %s (%v); want this build's daemon and the rebuilt one's", out, err)
	}
	if out := d.mustRun(t, 0, "daemon", "status"); !strings.Contains(out, "another build ("+st.OtherBuilds[0].Identity+")") {
		t.Fatalf("daemon status does not point out the other build's daemon:\n%s", out)
	}
	d.mustRun(t, 0, "daemon", "stop")
	for _, pid := range []int{st.PID, st.OtherBuilds[0].PID} {
		waitGone(t, pid, 10*time.Second)
	}
	if socks := d.sockets(); len(socks) != 0 {
		t.Fatalf("after stop: sockets %v", socks)
	}
}

// TestEngineRefusesAnotherBuildsFront: an engine run by a front of
// another build refuses, with the line that fixes it, before doing
// anything; the variable does not reach what the engine starts.
func TestEngineRefusesAnotherBuildsFront(t *testing.T) {
	d := newDaemonEnv(t)
	engine := filepath.Join(filepath.Dir(berthBin), "berth-engine")
	marker := filepath.Join(t.TempDir(), "ran")
	cmd := exec.Command(engine, "exec", "--no-daemon", "--", "touch "+marker)
	cmd.Env = append(d.env, wire.FrontBuildEnv+"=0123456789ab")
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != errorStatus || !strings.Contains(string(out), "not of the build of the berth that ran it (build 0123456789ab)") || !strings.Contains(string(out), "go install github.com/a55dbaac/berth/cmd/...@latest") {
		t.Fatalf("engine under another build's front: exit %d, %q", code, out)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran")
	}
	if out := d.mustRun(t, 0, "exec", "--no-daemon", "--", "echo ${"+wire.FrontBuildEnv+":-unset}"); out != "unset\n" {
		t.Fatalf("the engine passed %s on: %q", wire.FrontBuildEnv, out)
	}
}

// TestBlockedExitsWith126: a command the approval gate blocks exits 126
// from berth exec, through the daemon (the front) and in one process,
// and both print the same result with --json.
func TestBlockedExitsWith126(t *testing.T) {
	d := newDaemonEnv(t)
	d.mustRun(t, 0, "exec", "--", "true")
	var jsons []string
	for _, extra := range [][]string{nil, {"--no-daemon"}} {
		for _, asJSON := range []bool{false, true} {
			args := append([]string{"exec"}, extra...)
			if asJSON {
				args = append(args, "--json")
			}
			args = append(args, "--", "rm -rf /")
			out, errs, code := d.run(t, "", args...)
			if code != 126 {
				t.Fatalf("berth %q: exit %d, stdout %q, stderr %q; want 126", args, code, out, errs)
			}
			if asJSON {
				jsons = append(jsons, out)
			} else if !strings.Contains(errs, "BLOCKED: ") {
				t.Fatalf("berth %q: stderr %q; want the BLOCKED message", args, errs)
			}
		}
	}
	if jsons[0] != jsons[1] || !strings.Contains(jsons[0], `"decision":"blocked"`) {
		t.Fatalf("--json through the daemon %q, in one process %q; want the same blocked result", jsons[0], jsons[1])
	}
}
