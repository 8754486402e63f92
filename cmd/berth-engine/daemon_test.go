package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/a55dbaac/berth/backend/docker"
	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
	"github.com/a55dbaac/berth/internal/testenv/sshenv"
)

// daemonEnv is a berth home whose berth exec and berth shell go through
// the daemon; the daemon is stopped (and, failing that, killed) when the
// test ends.
type daemonEnv struct {
	home string
	env  []string
}

func newDaemonEnv(t *testing.T, extra ...string) *daemonEnv {
	t.Helper()
	// A short path: the socket's must fit in 107 bytes.
	home, err := os.MkdirTemp("", "bd")
	if err != nil {
		t.Fatal(err)
	}
	d := &daemonEnv{home: home}
	d.env = append(os.Environ(), "BERTH_HOME="+home, "BERTH_CONFIG=", "TERMINAL_ENV=", "BERTH_NO_DAEMON=", "TERMINAL_DAEMON=")
	d.env = append(d.env, extra...)
	t.Cleanup(func() {
		pid := d.pid()
		d.run(t, "", "daemon", "stop")
		if pid > 0 && alive(pid) {
			t.Errorf("daemon %d still running after berth daemon stop; killing it", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(home, "daemon", "berth.log")); err == nil {
				t.Logf("daemon log:\n%s", b)
			}
		}
		os.RemoveAll(home)
	})
	return d
}

// run runs berth to completion.
func (d *daemonEnv) run(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(berthBin, args...)
	cmd.Env = d.env
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

// mustRun runs berth and fails the test unless it exits with want.
func (d *daemonEnv) mustRun(t *testing.T, want int, args ...string) string {
	t.Helper()
	out, errs, code := d.run(t, "", args...)
	if code != want {
		t.Fatalf("berth %q: exit %d, want %d\nstdout: %s\nstderr: %s", args, code, want, out, errs)
	}
	return out
}

// pid returns the pid in the pid file of the daemon (of the one build the
// tests run), 0 if none.
func (d *daemonEnv) pid() int {
	files, _ := filepath.Glob(filepath.Join(d.home, "daemon", "berth-*.pid"))
	if len(files) != 1 {
		return 0
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// sockets returns the daemon sockets in the home.
func (d *daemonEnv) sockets() []string {
	socks, _ := filepath.Glob(filepath.Join(d.home, "daemon", "*.sock"))
	return socks
}

// status returns the daemon's status as JSON, nil when none runs.
func (d *daemonEnv) status(t *testing.T) map[string]any {
	t.Helper()
	out, errs, code := d.run(t, "", "daemon", "status", "--json")
	if code == 3 {
		return nil
	}
	if code != 0 {
		t.Fatalf("daemon status: exit %d: %s", code, errs)
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("daemon status: %v: %q", err, out)
	}
	return st
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// A zombie is gone for our purposes, once it is only a zombie: a
	// killed process whose leader thread is a zombie may still have
	// threads exiting, and holds its files (the daemon's socket) until
	// the last one is gone.
	_, rest, _ := strings.Cut(string(b), ") ")
	if !strings.HasPrefix(rest, "Z") {
		return true
	}
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	return len(tasks) > 1
}

// waitGone waits until pid has exited.
func waitGone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still running after %v", pid, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The example, on every backend: cd and export in one berth exec
// are there in the next, which goes to the same daemon.
func TestDaemonStateCarriesAcrossExec(t *testing.T) {
	check := func(t *testing.T, d *daemonEnv, key string) {
		d.mustRun(t, 0, "exec", "--task", key, "--", "cd /tmp; export A=1")
		pid := d.pid()
		if pid == 0 || !alive(pid) {
			t.Fatalf("no daemon running after the first call (pid %d)", pid)
		}
		if out := d.mustRun(t, 0, "exec", "--task", key, "--", "echo $A; pwd"); out != "1\n/tmp\n" {
			t.Fatalf("second call printed %q, want \"1\\n/tmp\\n\"", out)
		}
		if p := d.pid(); p != pid {
			t.Fatalf("second call ran in daemon %d, the first in %d", p, pid)
		}
		st := d.status(t)
		envs, _ := st["environments"].([]any)
		if len(envs) != 1 || envs[0].(map[string]any)["key"] != key || envs[0].(map[string]any)["cwd"] != "/tmp" {
			t.Fatalf("status environments %v, want one for %s in /tmp", st["environments"], key)
		}
		// --no-daemon is today's one-process berth: a fresh shell.
		if out := d.mustRun(t, 0, "exec", "--no-daemon", "--task", key, "--", "echo ${A:-unset}"); out != "unset\n" {
			t.Fatalf("--no-daemon printed %q, want a fresh shell", out)
		}
	}
	t.Run("local", func(t *testing.T) {
		check(t, newDaemonEnv(t), "t")
	})
	t.Run("docker", func(t *testing.T) {
		cli := dockerenv.Require(t)
		key := fmt.Sprintf("dmn-%d", time.Now().UnixNano()%1e9)
		d := newDaemonEnv(t, "TERMINAL_ENV=docker", "TERMINAL_DOCKER_IMAGE="+dockerenv.Image(t), "TERMINAL_CONTAINER_PERSISTENT=false")
		check(t, d, key)
		// berth daemon stop closes the environment as berth does at exit:
		// the non-persistent container is removed.
		d.mustRun(t, 0, "daemon", "stop")
		if n := containers(t, cli, key); n != 0 {
			t.Fatalf("%d containers of %s left after berth daemon stop", n, key)
		}
	})
	t.Run("ssh", func(t *testing.T) {
		s := sshenv.Start(t)
		d := newDaemonEnv(t, "TERMINAL_ENV=ssh", "TERMINAL_SSH_HOST="+s.Host, "TERMINAL_SSH_USER="+s.User,
			"TERMINAL_SSH_PORT="+strconv.Itoa(s.Port), "TERMINAL_SSH_KEY="+s.KeyPath, "HOME="+s.Home)
		check(t, d, "t")
	})
}

// containers counts the containers berth made for key.
func containers(t *testing.T, cli *client.Client, key string) int {
	t.Helper()
	list, err := cli.ContainerList(context.Background(), client.ContainerListOptions{
		All: true, Filters: make(client.Filters).Add("label", docker.LabelKey+"="+key),
	})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

// A request whose configuration differs from the environment's does not
// run in the old environment: it is recreated, and the caller is told.
func TestDaemonConfigChangeRecreates(t *testing.T) {
	d := newDaemonEnv(t)
	d.mustRun(t, 0, "exec", "--task", "t", "--", "export A=1")
	d.env = append(d.env, "TERMINAL_DAEMON_TERM_GRACE_SECONDS=1")
	out, errs, code := d.run(t, "", "exec", "--task", "t", "--", "echo ${A:-unset}")
	if code != 0 || out != "unset\n" || !strings.Contains(errs, "terminal.daemon_term_grace_seconds") {
		t.Fatalf("after a configuration change: exit %d, stdout %q, stderr %q; want a new shell and a note naming the key", code, out, errs)
	}
	// A per-command setting (the timeout) changes nothing.
	d.mustRun(t, 0, "exec", "--task", "t", "--", "export B=2")
	if out := d.mustRun(t, 0, "exec", "--timeout", "7", "--task", "t", "--", "echo $B"); out != "2\n" {
		t.Fatalf("--timeout recreated the environment: %q", out)
	}
}

// The socket answers only its own user: a client running as another uid
// is refused by the SO_PEERCRED check even where the file modes let it
// connect; and berth, as that other user, does not even connect to a
// daemon in a home that is not its own.
func TestDaemonRefusesOtherUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a client as another user")
	}
	d := newDaemonEnv(t)
	d.mustRun(t, 0, "exec", "--", "true")
	// Open the way for uid 65534: the home, the daemon directory and the
	// socket, and a copy of berth (and of this test, the raw client) it
	// can execute.
	bin := nobodyBin(t)
	for _, p := range []string{d.home, filepath.Join(d.home, "daemon")} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	socks := d.sockets()
	if len(socks) != 1 {
		t.Fatalf("sockets %v, want one", socks)
	}
	if err := os.Chmod(socks[0], 0o666); err != nil {
		t.Fatal(err)
	}
	asNobody := func(name string, args ...string) (string, error) {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.Env = append(d.env, "HOME=/")
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// The daemon's check: a raw connection as uid 65534 gets the refusal,
	// naming its uid, as its only frame.
	out, err := asNobody("rawclient", socks[0])
	if err != nil || !strings.Contains(out, `"code":"other_user"`) || !strings.Contains(out, "peer uid 65534") {
		t.Fatalf("raw client as uid 65534: %v, %q; want the daemon's refusal naming its uid", err, out)
	}
	// berth's own check: the engine's status and the front's warm exec
	// path refuse the home of another user before connecting, saying
	// whose it is and what to do.
	for _, args := range [][]string{{"daemon", "status"}, {"exec", "--", "echo ran"}} {
		out, err := asNobody("berth", args...)
		if err == nil || !strings.Contains(out, "belongs to uid 0") || !strings.Contains(out, "not to you (uid 65534") || strings.Contains(out, "ran\n") {
			t.Fatalf("uid 65534 %v: %v, output %q; want a refusal naming the home's owner", args, err, out)
		}
	}
	// The daemon's own user still gets in.
	if st := d.status(t); st == nil {
		t.Fatal("daemon gone after refusing a connection")
	}
}

// nobodyBin returns a directory uid 65534 may read holding copies of berth,
// berth-engine and rawclient (this test binary, which BERTH_TEST_RAWCLIENT
// makes a raw client of the socket).
func nobodyBin(t *testing.T) string {
	t.Helper()
	bin, err := os.MkdirTemp("", "bdbin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	// Copied in a stream: a whole binary in this process's memory would
	// show in the peak RSS other tests measure (a child's includes the
	// moments between fork and exec).
	for name, from := range map[string]string{
		"berth":        filepath.Join(filepath.Dir(berthBin), "berth"),
		"berth-engine": filepath.Join(filepath.Dir(berthBin), "berth-engine"),
		"rawclient":    rawClientBin(t),
	} {
		if err := copyFile(from, filepath.Join(bin, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

func copyFile(from, to string, mode os.FileMode) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// With a short lifetime the daemon exits once idle, after the background
// process running in its environment has finished, and leaves nothing.
func TestDaemonExitsWhenIdle(t *testing.T) {
	d := newDaemonEnv(t, "TERMINAL_LIFETIME_SECONDS=1")
	arg := uniqueArg(3)
	out, errs, code := d.run(t, ":bg sleep "+arg+"\n", "shell", "--task", "t")
	if code != 0 || !strings.Contains(out, "session_id") {
		t.Fatalf("shell :bg: exit %d, %q, %q", code, out, errs)
	}
	waitProcs(t, "sleep\x00"+arg, 1)
	pid := d.pid()
	if pid == 0 {
		t.Fatal("no daemon")
	}
	waitGone(t, pid, 30*time.Second)
	if n := countHostProcs("sleep\x00" + arg); n != 0 {
		t.Fatalf("%d 'sleep %s' left after the daemon exited", n, arg)
	}
	if socks := d.sockets(); len(socks) != 0 {
		t.Fatalf("socket left behind: %v", socks)
	}
	b, _ := os.ReadFile(filepath.Join(d.home, "daemon", "berth.log"))
	if !strings.Contains(string(b), "why=idle") {
		t.Fatalf("daemon log does not say it exited idle:\n%s", b)
	}
}

// A daemon killed with SIGKILL is replaced by the next call, and what the
// old one ran is reaped (hostproc's guardian).
func TestDaemonKilledIsReplaced(t *testing.T) {
	d := newDaemonEnv(t)
	arg := uniqueArg(1234)
	d.mustRun(t, 0, "exec", "--task", "t", "--", "export A=1; sleep "+arg+" >/dev/null 2>&1 &")
	old := d.pid()
	if old == 0 {
		t.Fatal("no daemon")
	}
	// exec returns once the job is forked; the fork may not have become
	// sleep yet.
	waitProcs(t, "sleep\x00"+arg, 1)
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, old, 10*time.Second)
	out := d.mustRun(t, 0, "exec", "--task", "t", "--", "echo ${A:-unset}")
	if out != "unset\n" {
		t.Fatalf("after the kill: %q, want a new shell", out)
	}
	if p := d.pid(); p == old || p == 0 || !alive(p) {
		t.Fatalf("no new daemon (pid %d, old %d)", p, old)
	}
	waitProcs(t, "sleep\x00"+arg, 0)
}

// On docker the next daemon finds the container the killed one left
// (reattached or replaced, never a second one) and removes it at stop.
func TestDaemonKilledIsReplacedDocker(t *testing.T) {
	cli := dockerenv.Require(t)
	key := fmt.Sprintf("dmk-%d", time.Now().UnixNano()%1e9)
	d := newDaemonEnv(t, "TERMINAL_ENV=docker", "TERMINAL_DOCKER_IMAGE="+dockerenv.Image(t), "TERMINAL_CONTAINER_PERSISTENT=false")
	d.mustRun(t, 0, "exec", "--task", key, "--", "echo x > /root/mark")
	old := d.pid()
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, old, 10*time.Second)
	d.mustRun(t, 0, "exec", "--task", key, "--", "true")
	if n := containers(t, cli, key); n != 1 {
		t.Fatalf("%d containers of %s after the new daemon's first call, want 1", n, key)
	}
	d.mustRun(t, 0, "daemon", "stop")
	if n := containers(t, cli, key); n != 0 {
		t.Fatalf("%d containers of %s left after berth daemon stop", n, key)
	}
}

// Two calls on one key run one after the other; on two keys at once. The
// first calls race to start the daemon: one wins, both are served by it.
func TestDaemonConcurrentCalls(t *testing.T) {
	d := newDaemonEnv(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, codes[i] = d.run(t, "", "exec", "--task", "one", "--",
				fmt.Sprintf("echo start%d >> %s; sleep 1; echo end%d >> %s", i, log, i, log))
		}()
	}
	wg.Wait()
	if codes[0] != 0 || codes[1] != 0 {
		t.Fatalf("exit statuses %v", codes)
	}
	b, _ := os.ReadFile(log)
	lines := strings.Fields(string(b))
	if len(lines) != 4 || lines[0][len(lines[0])-1] != lines[1][len(lines[1])-1] || !strings.HasPrefix(lines[0], "start") || !strings.HasPrefix(lines[1], "end") {
		t.Fatalf("one key: log %q, want one command's start and end, then the other's", lines)
	}
	first := d.pid()

	// Two keys: each waits for the other's marker, which only works when
	// both run at once (a serialised pair would time out).
	outs := make([]string, 2)
	for i, key := range []string{"a", "b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine, other := filepath.Join(dir, key), filepath.Join(dir, map[string]string{"a": "b", "b": "a"}[key])
			outs[i], _, codes[i] = d.run(t, "", "exec", "--timeout", "30", "--task", key, "--",
				fmt.Sprintf("touch %s; while [ ! -e %s ]; do sleep 0.05; done; echo met", mine, other))
		}()
	}
	wg.Wait()
	if codes[0] != 0 || codes[1] != 0 || outs[0] != "met\n" || outs[1] != "met\n" {
		t.Fatalf("two keys: exit %v, output %q: they did not run at the same time", codes, outs)
	}
	if p := d.pid(); p != first {
		t.Fatalf("daemon changed from %d to %d", first, p)
	}
}

// Ctrl-C on the caller interrupts the command (exit 130) and nothing else:
// the shell keeps its state. The output streams while the command runs
// (a line is passed on once the next one begins: the session holds a
// final newline that may start its end marker, the redactor a partial
// line).
func TestDaemonInterrupt(t *testing.T) {
	d := newDaemonEnv(t)
	d.mustRun(t, 0, "exec", "--task", "t", "--", "export A=1")
	arg := uniqueArg(4321)
	cmd := exec.Command(berthBin, "exec", "--task", "t", "--", "echo begun; echo more; sleep "+arg)
	cmd.Env = d.env
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	line, err := r.ReadString('\n')
	if err != nil || line != "begun\n" {
		t.Fatalf("first streamed line %q (%v)", line, err)
	}
	// The output came before the command ended: it is still running.
	waitProcs(t, "sleep\x00"+arg, 1)
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(r)
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 || !strings.Contains(string(rest), "[Command interrupted]") {
		t.Fatalf("exit %d, rest of output %q; want 130 and the interrupt marker", code, rest)
	}
	waitProcs(t, "sleep\x00"+arg, 0)
	if out := d.mustRun(t, 0, "exec", "--task", "t", "--", "echo $A"); out != "1\n" {
		t.Fatalf("after the interrupt: %q, want the shell's state kept", out)
	}
}

// berth shell through the daemon: the lines of one session share a shell,
// a later session finds it, and the process tool works.
func TestDaemonShell(t *testing.T) {
	d := newDaemonEnv(t)
	out, errs, code := d.run(t, "cd /tmp\nexport A=1\n:bg echo bg-done\n", "shell", "--task", "s")
	if code != 0 || !strings.Contains(out, `"session_id"`) {
		t.Fatalf("shell: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	out, errs, code = d.run(t, "echo $A; pwd\n", "shell", "--json", "--task", "s")
	var r map[string]any
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 || r["output"] != "1\n/tmp" {
		t.Fatalf("second shell: exit %d, %q (%v), stderr %q", code, out, err, errs)
	}
}
