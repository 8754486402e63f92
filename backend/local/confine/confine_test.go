package confine

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/a55dbaac/berth/internal/testenv"
)

// mainThreadDomain is a Domain made by TestMain with its goroutine
// launched on the main thread, or the error making it.
var (
	mainThreadDomain *Domain
	mainThreadErr    error
)

// TestMain makes one Domain from the main thread before the tests run:
// the main thread's id is the process's, and must never be confined
// (TestNeverTheMainThread).
func TestMain(m *testing.M) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() && requirementsMet() {
		dir, err := os.MkdirTemp("", "confine-main-")
		if err == nil {
			mainThreadDomain, mainThreadErr = newDomain(Policy{Writable: []string{dir}}, Probe(), func(f func()) { f() })
			defer os.RemoveAll(dir)
		}
	}
	runtime.UnlockOSThread()
	code := m.Run()
	if mainThreadDomain != nil {
		mainThreadDomain.Close()
	}
	os.Exit(code)
}

func requirementsMet() bool {
	return len(Probe().Missing(Policy{Network: NetworkLoopback})) == 0
}

// requireKernel skips unless BERTH_TEST_ENGINES selects landlock, and
// fails where it is selected and this kernel cannot enforce the whole
// confinement.
func requireKernel(t *testing.T) {
	t.Helper()
	testenv.Need(t, testenv.Landlock, func() error {
		if m := Probe().Missing(Policy{Network: NetworkLoopback}); len(m) > 0 {
			return fmt.Errorf("this kernel cannot confine: %s", strings.Join(m, "; "))
		}
		return nil
	})
}

var (
	pythonOnce sync.Once
	pythonExe  string
)

// python returns the python3 interpreter itself (not a version manager's
// shim, which costs seconds per start on a loaded machine).
func python(t *testing.T) string {
	t.Helper()
	testenv.Need(t, testenv.Landlock, testenv.Programs("python3")) // the attacks are written in it
	pythonOnce.Do(func() {
		out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
		pythonExe = strings.TrimSpace(string(out))
		if err != nil || pythonExe == "" {
			pythonExe = "python3"
		}
	})
	return pythonExe
}

func newTestDomain(t *testing.T, p Policy) *Domain {
	t.Helper()
	requireKernel(t)
	d, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// sh runs script with bash on d and returns its output and exit status.
func sh(t *testing.T, d *Domain, script string) (string, int) {
	t.Helper()
	var out []byte
	var err error
	cmd := exec.Command("bash", "-c", script)
	if derr := d.Do(func() { out, err = cmd.CombinedOutput() }); derr != nil {
		t.Fatal(derr)
	}
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s: %v", script, err)
	}
	return strings.TrimSpace(string(out)), code
}

// victim makes a directory outside every writable tree, with files in it.
func victim(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "victim")
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

// intact fails unless dir still holds what victim put there, unchanged.
func intact(t *testing.T, dir string) {
	t.Helper()
	for _, f := range []string{"keep", "sub/deep"} {
		p := filepath.Join(dir, f)
		b, err := os.ReadFile(p)
		if err != nil || string(b) != "precious\n" {
			t.Fatalf("%s was changed: %q, %v", p, b, err)
		}
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm() != 0o644 {
			t.Fatalf("%s: mode changed: %v %v", p, st.Mode(), err)
		}
	}
}

func TestWritesOnlyUnderTheTrees(t *testing.T) {
	ws, out := t.TempDir(), victim(t)
	d := newTestDomain(t, Policy{Writable: []string{ws}})
	if err := os.Symlink(out, filepath.Join(ws, "escape")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{
		"rm -rf " + out,
		"find " + out + " -delete",
		"echo gone > " + out + "/keep",
		"truncate -s 0 " + out + "/keep",
		"mv " + out + "/keep " + ws + "/stolen",
		"ln " + out + "/keep " + ws + "/hard && echo gone >" + ws + "/hard",
		"mkdir " + out + "/new",
		"ln -s /etc/passwd " + out + "/link",
		"echo gone > " + ws + "/escape/keep",
		"rm -rf " + ws + "/escape/",
		"cp /etc/hostname " + ws + "/escape/sub/deep",
	} {
		msg, code := sh(t, d, c)
		// Landlock refuses a link or rename across trees with EXDEV,
		// so that tools fall back to copying.
		if code == 0 || !strings.Contains(msg, "Permission denied") && !strings.Contains(msg, "Invalid cross-device link") {
			t.Errorf("%s: exit %d, %q; want a permission error", c, code, msg)
		}
		intact(t, out)
	}
	if _, err := os.Stat(filepath.Join(out, "new")); err == nil {
		t.Error("a directory was made outside")
	}
	// Inside, the same commands work.
	in := filepath.Join(ws, "own")
	msg, code := sh(t, d, fmt.Sprintf(`mkdir -p %[1]s/sub && echo x > %[1]s/keep && truncate -s 0 %[1]s/keep && mv %[1]s/keep %[1]s/moved && ln %[1]s/moved %[1]s/hard && ln -s moved %[1]s/soft && mkfifo %[1]s/fifo && find %[1]s -delete && ! test -e %[1]s`, in))
	if code != 0 {
		t.Fatalf("inside: exit %d: %s", code, msg)
	}
	// Device nodes are made nowhere.
	if msg, code := sh(t, d, "mknod "+ws+"/null c 1 3"); code == 0 {
		t.Fatalf("mknod in the workspace worked: %s", msg)
	}
	// The harmless devices stay writable.
	if msg, code := sh(t, d, "echo x >/dev/null && : >/dev/null && head -c1 /dev/zero >/dev/null"); code != 0 {
		t.Fatalf("/dev/null: %s", msg)
	}
}

func TestMetadataOnlyUnderTheTrees(t *testing.T) {
	pyExe := python(t)
	ws, out := t.TempDir(), victim(t)
	d := newTestDomain(t, Policy{Writable: []string{ws}})
	if err := os.Symlink(out, filepath.Join(ws, "escape")); err != nil {
		t.Fatal(err)
	}
	py := func(code string) string {
		return pyExe + " -c '" + code + "'"
	}
	k := out + "/keep"
	for _, c := range []string{
		"chmod 777 " + k,
		"chmod -R 000 " + out,
		"chmod 600 " + ws + "/escape/keep",
		"chown 1:1 " + k,
		"chgrp 1 " + k,
		"touch -d 2001-01-01 " + k,
		py(`import os; os.setxattr("` + k + `", "user.x", b"1")`),
		py(`import os; fd = os.open("` + k + `", os.O_RDONLY); os.fchmod(fd, 0o777)`),
		py(`import os; fd = os.open("` + out + `", os.O_RDONLY); os.chmod("keep", 0o777, dir_fd=fd)`),
		py(`import os; os.chdir("` + out + `"); os.chmod("keep", 0o777)`),
		py(`import os; fd = os.open("` + k + `", os.O_RDONLY); os.utime(fd, (0, 0))`),
	} {
		msg, code := sh(t, d, c)
		if code == 0 || !strings.Contains(msg, "ermission denied") {
			t.Errorf("%s: exit %d, %q; want a permission error", c, code, msg)
		}
		intact(t, out)
	}
	st, _ := os.Stat(k)
	if st.ModTime().Year() < 2020 {
		t.Error("a timestamp was changed outside")
	}
	// Inside they work, but no set-user-ID file and no privileged
	// attribute.
	f := ws + "/f"
	if msg, code := sh(t, d, fmt.Sprintf(`touch %[1]s && chmod 700 %[1]s && chown 1:1 %[1]s && touch -d 2001-01-01 %[1]s && mkdir %[2]s/d && chmod g+s %[2]s/d && `+
		py(`import os; os.setxattr("%[1]s", "user.x", b"1"); assert os.getxattr("%[1]s", "user.x") == b"1"; os.removexattr("%[1]s", "user.x")`), f, ws)); code != 0 {
		t.Fatalf("inside: exit %d: %s", code, msg)
	}
	st, err := os.Stat(f)
	if err != nil || st.Mode().Perm() != 0o700 || st.ModTime().Year() != 2001 || st.Sys().(*syscall.Stat_t).Uid != 1 {
		t.Fatalf("inside: %v %v", st, err)
	}
	for _, c := range []string{"chmod u+s " + f, "chmod g+s " + f, "install -m 4755 /dev/null " + ws + "/suid",
		py(`import os; os.open("` + ws + `/suid2", os.O_CREAT|os.O_WRONLY, 0o4755)`),
		py(`import os; os.setxattr("` + f + `", "trusted.x", b"1")`)} {
		if msg, code := sh(t, d, c); code == 0 {
			t.Errorf("%s worked: %s", c, msg)
		}
	}
	for _, p := range []string{f, ws + "/suid", ws + "/suid2"} {
		if st, err := os.Stat(p); err == nil && st.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("%s is %v", p, st.Mode())
		}
	}
}

// startOutside starts a process outside every domain and returns it; the
// test ends it.
func startOutside(t *testing.T) *exec.Cmd {
	t.Helper()
	c := exec.Command("sleep", "300")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	return c
}

func alive(pid int) bool { return unix.Kill(pid, 0) == nil }

func TestSignalsStayInside(t *testing.T) {
	py := python(t)
	d := newTestDomain(t, Policy{Writable: []string{t.TempDir()}})
	outside := startOutside(t)
	pid := strconv.Itoa(outside.Process.Pid)
	if msg, code := sh(t, d, "kill -9 "+pid); code == 0 || !strings.Contains(msg, "not permitted") {
		t.Fatalf("kill of an outside process: exit %d %q", code, msg)
	}
	// Every thread of this process (berth), the Domain's own included,
	// by every way of naming it.
	msg, code := sh(t, d, py+` -c '
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
berth = os.getppid()
tids = [int(t) for t in os.listdir("/proc/%d/task" % berth)]
tkill, tgkill = {"x86_64": (200, 234), "aarch64": (130, 131)}[os.uname().machine]
def call(*args):
    if libc.syscall(*args) != 0:
        raise OSError(ctypes.get_errno(), "refused")
def reached(how, f):
    try:
        f()
        print(how, "reached")
    except OSError:
        pass
for t in tids:
    reached("kill %d" % t, lambda: os.kill(t, 0))
    reached("tkill %d" % t, lambda: call(tkill, t, 0))
    reached("tgkill %d" % t, lambda: call(tgkill, berth, t, 0))
    reached("pidfd_open %d" % t, lambda: os.pidfd_open(t))
    reached("/proc/%d as pidfd" % t, lambda: signal.pidfd_send_signal(os.open("/proc/%d" % t, os.O_RDONLY), 0))
print("done %d threads" % len(tids))'`)
	if code != 0 || !strings.HasPrefix(msg, "done ") || strings.Contains(msg, "reached") {
		t.Fatalf("a thread of berth was reachable (exit %d):\n%s", code, msg)
	}
	// kill -9 -1 ends what it may signal: its own processes only.
	inner := make(chan int, 1)
	go func() {
		var c *exec.Cmd
		d.Do(func() {
			c = exec.Command("sleep", "300")
			c.Start()
		})
		inner <- c.Process.Pid
		c.Wait()
	}()
	innerPid := <-inner
	// kill -9 -1 unconfined ends every process the user may signal on
	// this machine (as root: all of them). Never without the guard.
	if !d.Enforced().Signals {
		t.Fatal("the domain does not confine signals: refusing to run kill -9 -1")
	}
	sh(t, d, "kill -9 -1")
	if !alive(outside.Process.Pid) {
		t.Fatal("kill -9 -1 inside reached a process outside")
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive(innerPid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if alive(innerPid) {
		t.Fatal("kill -9 -1 did not reach a process of the same domain, started by another Do (the kill helper's case)")
	}
	// One Do's process may signal another's.
	go func() {
		var c *exec.Cmd
		d.Do(func() {
			c = exec.Command("sleep", "300")
			c.Start()
		})
		inner <- c.Process.Pid
		c.Wait()
	}()
	innerPid = <-inner
	if msg, code := sh(t, d, "kill "+strconv.Itoa(innerPid)); code != 0 {
		t.Fatalf("kill of a sibling in the domain: %s", msg)
	}
}

// listen starts a TCP listener on 127.0.0.1 that accepts and closes.
func listen(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
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
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

func TestNetworkNone(t *testing.T) {
	port := listen(t)
	d := newTestDomain(t, Policy{Writable: []string{t.TempDir()}, Network: NetworkNone})
	msg, code := sh(t, d, "exec 3<>/dev/tcp/127.0.0.1/"+port+" && head -1 <&3")
	if code == 0 || !strings.Contains(msg, "Permission denied") {
		t.Fatalf("connect to 127.0.0.1:%s: exit %d %q; want a permission error", port, code, msg)
	}
	if e := d.Enforced(); e.Network != NetworkNone {
		t.Fatalf("Enforced().Network = %q", e.Network)
	}
}

func TestNetworkLoopback(t *testing.T) {
	py := python(t)
	port := listen(t)
	d := newTestDomain(t, Policy{Writable: []string{t.TempDir()}, Network: NetworkLoopback})
	if msg, code := sh(t, d, "exec 3<>/dev/tcp/127.0.0.1/"+port+" && head -1 <&3"); code != 0 || msg != "hello" {
		t.Fatalf("connect to 127.0.0.1:%s: exit %d %q", port, code, msg)
	}
	// Refused before any packet leaves: TEST-NET-1 is never reached.
	msg, code := sh(t, d, "exec 3<>/dev/tcp/192.0.2.1/80")
	if code == 0 || !strings.Contains(msg, "Permission denied") {
		t.Fatalf("connect to 192.0.2.1: exit %d %q", code, msg)
	}
	// A server asking for every interface gets loopback; listen(2)
	// without bind(2) too; UDP and unix sockets are refused.
	for _, c := range []struct{ code, want string }{
		{`import socket; s = socket.socket(); s.bind(("0.0.0.0", 0)); print(s.getsockname()[0])`, "127.0.0.1"},
		{`import socket; s = socket.socket(); s.listen(); print(s.getsockname()[0])`, "127.0.0.1"},
		{`import socket; s = socket.socket(socket.AF_INET6); s.bind(("::", 0)); print(s.getsockname()[0])`, "::1"},
		{`import socket
try: socket.socket(type=socket.SOCK_DGRAM)
except PermissionError: print("refused")`, "refused"},
		{`import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); c = socket.create_connection(s.getsockname()); print(c.getpeername()[0])`, "127.0.0.1"},
	} {
		if msg, code := sh(t, d, py+" -c '"+c.code+"'"); code != 0 || msg != c.want {
			t.Errorf("%s: exit %d %q, want %q", c.code, code, msg, c.want)
		}
	}
}

func TestUnixSockets(t *testing.T) {
	py := python(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "daemon.sock")
	ln, err := net.Listen("unix", sock)
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
			c.Write([]byte("at your service\n"))
			c.Close()
		}
	}()
	connect := py + ` -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect("` + sock + `"); print(s.recv(64).decode().strip())'`
	d := newTestDomain(t, Policy{Writable: []string{t.TempDir()}})
	if msg, code := sh(t, d, connect); code == 0 || !strings.Contains(msg, "Permission denied") {
		t.Fatalf("connect to a daemon's unix socket: exit %d %q", code, msg)
	}
	if msg, code := sh(t, d, py+` -c 'import socket; a, b = socket.socketpair(); a.send(b"x"); print(b.recv(1).decode())'`); code != 0 || msg != "x" {
		t.Fatalf("socketpair: exit %d %q", code, msg)
	}
	open := newTestDomain(t, Policy{Writable: []string{t.TempDir()}, UnixSockets: true})
	if msg, code := sh(t, open, connect); code != 0 || msg != "at your service" {
		t.Fatalf("with UnixSockets: exit %d %q", code, msg)
	}
}

func TestNoTypingIntoTheTerminal(t *testing.T) {
	py := python(t)
	d := newTestDomain(t, Policy{Writable: []string{t.TempDir()}})
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	defer tty.Close()
	var out []byte
	cmd := exec.Command(py, "-c", `import fcntl, termios, sys
try: fcntl.ioctl(0, termios.TIOCSTI, b"x"); print("typed")
except PermissionError: print("refused")`)
	cmd.Stdin = tty
	d.Do(func() { out, err = cmd.Output() })
	if strings.TrimSpace(string(out)) != "refused" {
		t.Fatalf("TIOCSTI: %q %v", out, err)
	}
}

func TestRefusedCalls(t *testing.T) {
	py := python(t)
	d := newTestDomain(t, Policy{Writable: []string{t.TempDir()}})
	// io_uring would make network and metadata calls the filter cannot
	// see; openat2 hides its mode.
	msg, code := sh(t, d, py+` -c 'import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(120)
for name, nr, args in (("io_uring_setup", 425, (1, buf)), ("openat2", 437, (-100, b"/", buf, 24))):
    r = libc.syscall(nr, *args)
    print(name, r, os.strerror(ctypes.get_errno()))'`)
	if code != 0 || !strings.Contains(msg, "io_uring_setup -1 Function not implemented") || !strings.Contains(msg, "openat2 -1 Function not implemented") {
		t.Fatalf("exit %d:\n%s", code, msg)
	}
}

func TestCapabilitiesDropped(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("berth is not root: it has no capabilities to drop")
	}
	d := newTestDomain(t, Policy{Writable: []string{t.TempDir()}})
	msg, _ := sh(t, d, "grep -E '^Cap(Eff|Prm|Bnd|Inh|Amb)' /proc/self/status")
	sc := bufio.NewScanner(strings.NewReader(msg))
	for sc.Scan() {
		name, hex, _ := strings.Cut(sc.Text(), ":")
		v, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		if err != nil {
			t.Fatal(sc.Text())
		}
		if extra := v &^ keptMask(); extra != 0 {
			t.Errorf("%s has capabilities beyond the kept set: %#x", name, extra)
		}
		if v&(1<<unix.CAP_SYS_ADMIN) != 0 {
			t.Errorf("%s still has CAP_SYS_ADMIN", name)
		}
	}
}

// threadsFiltered lists the threads of this process under a seccomp
// filter.
func threadsFiltered(t *testing.T) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		b, err := os.ReadFile("/proc/self/task/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		if strings.Contains(string(b), "\nSeccomp:\t2\n") {
			tid, _ := strconv.Atoi(e.Name())
			out = append(out, tid)
		}
	}
	return out
}

func TestOnlyTheDomainThreadIsConfined(t *testing.T) {
	d := newTestDomain(t, Policy{Writable: []string{t.TempDir()}})
	var tid int
	d.Do(func() { tid = unix.Gettid() })
	if tid == unix.Getpid() {
		t.Fatal("the domain runs on the main thread")
	}
	got := threadsFiltered(t)
	if !slices.Contains(got, tid) {
		t.Fatalf("the domain's thread %d is not under the filter (filtered: %v)", tid, got)
	}
	if slices.Contains(got, unix.Getpid()) {
		t.Fatal("the main thread is under the filter")
	}
	// This process itself still writes where it likes.
	p := filepath.Join(t.TempDir(), "berth-writes")
	if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.Close()
	// The runtime ends the thread once its goroutine has returned.
	deadline := time.Now().Add(10 * time.Second)
	for slices.Contains(threadsFiltered(t), tid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if slices.Contains(threadsFiltered(t), tid) {
		t.Fatalf("after Close the domain's thread %d still runs: it must end", tid)
	}
	if err := d.Do(func() {}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Do after Close: %v", err)
	}
}

func TestNeverTheMainThread(t *testing.T) {
	requireKernel(t)
	if mainThreadErr != nil {
		t.Fatal(mainThreadErr)
	}
	if mainThreadDomain == nil {
		t.Fatal("TestMain did not run on the main thread")
	}
	var tid int
	mainThreadDomain.Do(func() { tid = unix.Gettid() })
	if tid == unix.Getpid() {
		t.Fatal("a domain launched from the main thread confined it")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/status", unix.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "\nSeccomp:\t0\n") || !strings.Contains(string(b), "\nNoNewPrivs:\t0\n") {
		t.Fatal("the main thread was restricted")
	}
}

func TestCloseEndsChildren(t *testing.T) {
	d := newTestDomain(t, Policy{Writable: []string{t.TempDir()}})
	c := exec.Command("sleep", "300")
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	d.Do(func() { c.Start() })
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	d.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		c.Process.Kill()
		t.Fatal("a process with a death signal outlived its domain's thread")
	}
}

func TestPartialOnAnOlderKernel(t *testing.T) {
	requireKernel(t)
	// This kernel as one without signal scoping (Landlock ABI 5).
	old := Probe()
	old.ABI = 5
	p := Policy{Writable: []string{t.TempDir()}}
	if _, err := newDomain(p, old, func(f func()) { go f() }); err == nil {
		t.Fatal("an unenforceable policy was accepted")
	} else if u := (*UnsupportedError)(nil); !errors.As(err, &u) || !strings.Contains(err.Error(), "signals needs Landlock ABI 6") {
		t.Fatalf("error %v does not name what is missing", err)
	}
	p.Partial = true
	d, err := newDomain(p, old, func(f func()) { go f() })
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	e := d.Enforced()
	if e.Signals || len(e.Missing) != 1 || e.Writable == nil {
		t.Fatalf("Enforced %+v: want writes confined, signals reported missing", e)
	}
	// And it is what the kernel does: signals are not scoped.
	outside := startOutside(t)
	if msg, code := sh(t, d, "kill -0 "+strconv.Itoa(outside.Process.Pid)); code != 0 {
		t.Fatalf("partial domain: kill -0 outside: %s (Enforced says signals are not confined)", msg)
	}
}

func TestPlan(t *testing.T) {
	full := Support{ABI: 7, Seccomp: true, Notify: true}
	for _, c := range []struct {
		name    string
		s       Support
		p       Policy
		missing []string // substrings, in order
	}{
		{"full", full, Policy{Network: NetworkLoopback}, nil},
		{"no landlock", Support{NoLandlock: "none here", Seccomp: true, Notify: true}, Policy{}, []string{"writes and signals needs Landlock: none here"}},
		{"ABI 2", Support{ABI: 2, Seccomp: true, Notify: true}, Policy{}, []string{"truncate(2) needs Landlock ABI 3", "signals needs Landlock ABI 6"}},
		{"no seccomp", Support{ABI: 7, NoSeccomp: "x", NoNotify: "y"}, Policy{Network: NetworkNone}, []string{"chmod", "unix sockets", "TIOCSTI", "network needs seccomp"}},
		{"no notify", Support{ABI: 7, Seccomp: true, NoNotify: "pidfd_getfd needs Linux 5.6"}, Policy{Network: NetworkLoopback}, []string{"chmod", "loopback-only networking needs pidfd_getfd"}},
		{"unix allowed", full, Policy{UnixSockets: true}, nil},
	} {
		got := c.s.Missing(c.p)
		if len(got) != len(c.missing) {
			t.Errorf("%s: missing %q, want %d entries like %q", c.name, got, len(c.missing), c.missing)
			continue
		}
		for i, m := range c.missing {
			if !strings.Contains(got[i], m) {
				t.Errorf("%s: missing[%d] = %q, want it to contain %q", c.name, i, got[i], m)
			}
		}
	}
	// ABI 9 confines unix sockets in Landlock itself.
	pl := Support{ABI: 9, Seccomp: true, Notify: true}.plan(Policy{Network: NetworkAll})
	if pl.filter.unix != unixAllow || !pl.unixConfined {
		t.Errorf("ABI 9: unix sockets should be left to Landlock: %+v", pl)
	}
}

func TestBadPolicies(t *testing.T) {
	for _, p := range []Policy{
		{Writable: []string{"relative"}},
		{Writable: []string{"/nonexistent-" + strconv.Itoa(os.Getpid())}},
		{Writable: []string{"/etc/hostname"}},
		{Network: "some"},
		{UnixSockets: true, Network: NetworkLoopback},
	} {
		if _, err := New(p); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}

// TestUnixDatagramsStayInside is R5 of the 2026-11-28 review: a datagram
// socket of a socketpair reached a pathname socket outside (journald's,
// a user daemon's) with sendto(2), and with connect(2) under network all.
// No unix datagram socket can be made in the domain now.
func TestUnixDatagramsStayInside(t *testing.T) {
	py := python(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "dgram.sock")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	script := py + ` -c '
import socket
for kind in ("SOCK_DGRAM", "SOCK_RAW"):
    try:
        a, b = socket.socketpair(socket.AF_UNIX, getattr(socket, kind))
    except PermissionError:
        print(kind, "refused")
        continue
    try:
        a.sendto(b"sendto", "` + path + `")
        print(kind, "sendto reached")
    except OSError as e:
        print(kind, "sendto", e)
    try:
        a.connect("` + path + `")
        a.send(b"connect")
        print(kind, "connect reached")
    except OSError as e:
        print(kind, "connect", e)
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
a.send(b"s"); print("seqpacket", b.recv(1).decode())
'`
	for _, network := range []Network{NetworkAll, NetworkLoopback} {
		d := newTestDomain(t, Policy{Writable: []string{t.TempDir()}, Network: network})
		msg, code := sh(t, d, script)
		if code != 0 || msg != "SOCK_DGRAM refused\nSOCK_RAW refused\nseqpacket s" {
			t.Errorf("network %s: exit %d:\n%s", network, code, msg)
		}
		// A datagram is queued at the receiver before sendto returns.
		ln.SetReadDeadline(time.Now())
		buf := make([]byte, 64)
		if n, _, err := ln.ReadFrom(buf); err == nil {
			t.Errorf("network %s: the socket outside received %q", network, buf[:n])
		}
	}
}

// otherUID is the user the tests that must run as someone other than root
// use: a uid no account has, so that renicing "every process of the user"
// on a broken build reaches only the test's own processes.
const otherUID = 61234

// helperVar names the helper test a test binary run by asUser executes.
const helperVar = "CONFINE_TEST_HELPER"

// asUser runs the test named helper in a copy of this test binary as
// otherUID, with env, and returns its output. It needs root; the copy and
// dir (made writable by otherUID) are removed afterwards.
func asUser(t *testing.T, helper string, env ...string) (string, error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a helper as another user")
	}
	if ps, _ := filepath.Glob("/proc/[0-9]*"); ps != nil {
		for _, p := range ps {
			var st unix.Stat_t
			if unix.Stat(p, &st) == nil && st.Uid == otherUID {
				t.Skipf("a process of uid %d runs on this machine: not touching it", otherUID)
			}
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.MkdirTemp("", "confine-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	copyExe := filepath.Join(bin, "confine.test")
	if b, err := os.ReadFile(exe); err != nil || os.WriteFile(copyExe, b, 0o755) != nil {
		t.Fatalf("copy the test binary: %v", err)
	}
	cmd := exec.Command(copyExe, "-test.run=^"+helper+"$", "-test.v", "-test.count=1")
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), append(env, helperVar+"="+helper, "HOME=/")...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: otherUID, Gid: otherUID}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// isHelper says whether this process is asUser's helper for the test
// running; a helper test returns at once otherwise.
func isHelper(t *testing.T) bool {
	return os.Getenv(helperVar) == t.Name()
}

// TestSchedulingStaysInside is R6 of the 2026-11-28 review: as a user
// without privileges, a command in the domain made berth SCHED_IDLE on
// every thread, pinned it to one CPU, reniced it and every process of the
// user (PRIO_USER), and gave it the idle I/O class. It runs as otherUID,
// berth being the helper process.
func TestSchedulingStaysInside(t *testing.T) {
	requireKernel(t)
	testenv.Need(t, testenv.Landlock, testenv.Programs("/usr/bin/python3")) // one otherUID can execute
	out, err := asUser(t, "TestSchedulingHelper")
	if err != nil || !strings.Contains(out, "--- PASS: TestSchedulingHelper") {
		t.Fatalf("as uid %d: %v\n%s", otherUID, err, out)
	}
}

func TestSchedulingHelper(t *testing.T) {
	if !isHelper(t) {
		t.Skip("run by TestSchedulingStaysInside")
	}
	outside := startOutside(t)
	d := newTestDomain(t, Policy{Writable: []string{t.TempDir()}})
	before := schedState(t, os.Getpid(), outside.Process.Pid)
	msg, code := sh(t, d, `/usr/bin/python3 -c '
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
berth, outside, uid = os.getppid(), `+strconv.Itoa(outside.Process.Pid)+`, os.getuid()
tids = [int(t) for t in os.listdir("/proc/%d/task" % berth)]
ioprio_set, sched_setattr = {"x86_64": (251, 314), "aarch64": (30, 274)}[os.uname().machine]
idle = (3 << 13)
attr = (ctypes.c_uint32 * 14)(56, os.SCHED_IDLE)
def call(*args):
    if libc.syscall(*args) != 0:
        raise OSError(ctypes.get_errno(), "refused")
def reached(how, f):
    try:
        f()
        print(how, "reached")
    except OSError:
        pass
for p in tids + [outside]:
    reached("sched_setscheduler %d" % p, lambda: os.sched_setscheduler(p, os.SCHED_IDLE, os.sched_param(0)))
    reached("sched_setattr %d" % p, lambda: call(sched_setattr, p, attr, 0))
    reached("sched_setaffinity %d" % p, lambda: os.sched_setaffinity(p, {0}))
    reached("sched_setparam %d" % p, lambda: os.sched_setparam(p, os.sched_param(0)))
    reached("setpriority %d" % p, lambda: os.setpriority(os.PRIO_PROCESS, p, 19))
    reached("ioprio_set %d" % p, lambda: call(ioprio_set, 1, p, idle))
reached("setpriority PRIO_USER", lambda: os.setpriority(os.PRIO_USER, uid, 19))
reached("setpriority PRIO_PGRP", lambda: os.setpriority(os.PRIO_PGRP, os.getpgid(outside), 19))
reached("ioprio_set IOPRIO_WHO_USER", lambda: call(ioprio_set, 3, uid, idle))
# Its own scheduling is its own.
os.setpriority(os.PRIO_PROCESS, 0, 5)
os.sched_setaffinity(0, os.sched_getaffinity(0))
call(ioprio_set, 1, 0, idle)
os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
print("done", len(tids), os.getpriority(os.PRIO_PROCESS, 0))'`)
	t.Logf("in the domain: exit %d: %s", code, msg)
	if code != 0 || strings.Contains(msg, "reached") || !strings.HasPrefix(msg, "done ") || !strings.HasSuffix(msg, " 5") {
		t.Errorf("exit %d:\n%s", code, msg)
	}
	// Threads the runtime made meanwhile start with defaults; those that
	// were there must be as they were.
	after := schedState(t, os.Getpid(), outside.Process.Pid)
	for tid, was := range before {
		if now, ok := after[tid]; ok && now != was {
			t.Errorf("scheduling of thread %d outside the domain changed: %s, was %s", tid, now, was)
		}
	}
}

// schedState describes the scheduling of every thread of the processes:
// nice value, policy, CPU affinity and I/O priority, by thread id.
func schedState(t *testing.T, pids ...int) map[int]string {
	t.Helper()
	out := map[int]string{}
	for _, pid := range pids {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range tasks {
			tid, _ := strconv.Atoi(e.Name())
			nice, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
			if err != nil {
				continue // the thread ended
			}
			policy, _, _ := unix.Syscall(unix.SYS_SCHED_GETSCHEDULER, uintptr(tid), 0, 0)
			var set unix.CPUSet
			unix.SchedGetaffinity(tid, &set)
			io, _, _ := unix.Syscall(unix.SYS_IOPRIO_GET, ioprioWhoProcess, uintptr(tid), 0)
			out[tid] = fmt.Sprintf("nice=%d,policy=%d,cpus=%d,io=%#x", nice, policy, set.Count(), io)
		}
	}
	return out
}

// requireMountNS skips where a Domain cannot have a mount namespace (berth
// not root), and fails in CI, which runs as root.
func requireMountNS(t *testing.T) {
	t.Helper()
	requireKernel(t)
	testenv.Need(t, testenv.Root, func() error {
		if s := Probe(); !s.MountNS {
			return fmt.Errorf("no mount namespace for a domain: %s", s.NoMountNS)
		}
		return nil
	})
}

// snapshot describes every file under dir: name, mode, owner, times and
// content, so that any change shows.
func snapshot(t *testing.T, dir string) string {
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
		if x, err := unix.Lgetxattr(p, "user.x", make([]byte, 16)); err == nil {
			fmt.Fprintf(&b, " xattr %d", x)
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// refused fails unless the command failed with one of the kernel's
// refusals and printed no ESCAPED.
func refused(t *testing.T, cmd, msg string, code int) {
	t.Helper()
	if code == 0 || strings.Contains(msg, "ESCAPED") {
		t.Errorf("%s: exit %d, %q: it got through", cmd, code, msg)
		return
	}
	// "must be superuser" is how mount(8) and umount(8) say EPERM;
	// umount(2) of a mount locked into a user namespace is EINVAL.
	for _, e := range []string{"Read-only file system", "Device or resource busy", "Invalid cross-device link", "ermission denied", "Operation not permitted", "must be superuser", "Invalid argument"} {
		if strings.Contains(msg, e) {
			return
		}
	}
	t.Errorf("%s: exit %d, %q: no refusal by the kernel", cmd, code, msg)
}

// TestReadOnlyInsideTheTrees attacks Policy.ReadOnly and Pinned: a
// directory and a file inside the writable tree stay read-only, and
// neither they nor a directory above them can be moved aside and
// replaced, however a command goes about it; the rest of the tree stays
// writable.
func TestReadOnlyInsideTheTrees(t *testing.T) {
	py := python(t)
	requireMountNS(t)
	ws := t.TempDir()
	ro, file, pin := filepath.Join(ws, "a", "b", "ro"), filepath.Join(ws, "f"), filepath.Join(ws, "pin")
	for _, d := range []string{ro, pin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(ro, "config"), file, filepath.Join(pin, "kept")} {
		if err := os.WriteFile(f, []byte("precious\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	outside := startOutside(t)
	d := newTestDomain(t, Policy{Writable: []string{ws}, ReadOnly: []string{ro, file}, Pinned: []string{pin}})
	if got, want := d.Enforced().ReadOnly, []string{ro, file}; !slices.Equal(got, want) && !slices.Equal(got, []string{file, ro}) {
		t.Fatalf("Enforced().ReadOnly = %q, want %q", got, want)
	}
	before := snapshot(t, ws)
	var pinSt unix.Stat_t
	if err := unix.Lstat(pin, &pinSt); err != nil {
		t.Fatal(err)
	}
	pinIno := pinSt.Ino
	cfg := ro + "/config"
	for _, c := range []string{
		"echo x >> " + cfg + " && echo ESCAPED",
		"echo x > " + ro + "/new && echo ESCAPED",
		"echo x >> " + file + " && echo ESCAPED",
		"rm -rf " + ro + " && echo ESCAPED",
		"rm -f " + file + " && echo ESCAPED",
		"mv " + ro + " " + ws + "/moved && echo ESCAPED",
		"mv " + ws + "/a " + ws + "/moved && echo ESCAPED",
		"mv " + ws + "/a/b " + ws + "/a/c && echo ESCAPED",
		"mv " + pin + " " + ws + "/moved && echo ESCAPED",
		"rmdir " + pin + " 2>&1; rm -rf " + pin + " && echo ESCAPED",
		"echo x > " + ws + "/new && mv -f " + ws + "/new " + cfg + " && echo ESCAPED",
		"echo x > " + ws + "/new && mv -f " + ws + "/new " + file + " && echo ESCAPED",
		py + ` -c 'import os; open("` + ws + `/n2", "w").write("x"); os.rename("` + ws + `/n2", "` + cfg + `")' && echo ESCAPED`,
		"cp -l " + cfg + " " + ws + "/hard && echo x >> " + ws + "/hard && echo ESCAPED",
		"ln -s " + ro + " " + ws + "/link && echo x >> " + ws + "/link/config && echo ESCAPED",
		"cd " + ws + " && CDPATH=" + ws + "/a/b cd ro && echo x >> config && echo ESCAPED",
		"OLDPWD=" + ro + "; cd - && echo x >> config && echo ESCAPED",
		py + ` -c 'open("` + cfg + `", "a").write("x")' && echo ESCAPED`,
		"chmod 777 " + cfg + " && echo ESCAPED",
		"chmod 777 " + file + " && echo ESCAPED",
		"chown 1:1 " + cfg + " && echo ESCAPED",
		"touch -d 2001-01-01 " + cfg + " && echo ESCAPED",
		py + ` -c 'import os; os.setxattr("` + cfg + `", "user.x", b"1")' && echo ESCAPED`,
		"cd " + ro + " && chmod 777 config && echo ESCAPED",
		"truncate -s 0 " + cfg + " && echo ESCAPED",
		// The mount topology: no capability, and Landlock refuses
		// mount(2) and umount(2) even in a user namespace of one's own.
		"umount -l " + ro + " && echo ESCAPED",
		"mount -o remount,rw,bind " + ro + " && echo ESCAPED",
		"unshare -Um --propagation unchanged sh -c 'umount -l " + ro + " && echo x >> " + cfg + "' && echo ESCAPED",
		"unshare -Um --propagation unchanged sh -c 'mount -o remount,rw,bind " + ro + " && echo x >> " + cfg + "' && echo ESCAPED",
		"unshare -Um --propagation unchanged sh -c 'mount --bind " + ws + "/a " + ro + "' && echo ESCAPED",
		"unshare -Urm sh -c 'umount -l " + ro + "' && echo ESCAPED",
		py + ` -c '
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def check(r):
    if r != 0: raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
check(libc.unshare(0x10000000 | 0x20000))
check(libc.umount2(b"` + ro + `", 2))
open("` + cfg + `", "a").write("x")' && echo ESCAPED`,
		// Another process's view: berth's threads and processes
		// outside are out of reach (Landlock's ptrace rule).
		"echo x >> /proc/" + strconv.Itoa(outside.Process.Pid) + "/root" + cfg + " && echo ESCAPED",
		"echo x >> /proc/" + strconv.Itoa(os.Getpid()) + "/root" + cfg + " && echo ESCAPED",
		"echo x >> /proc/1/root" + cfg + " && echo ESCAPED",
		"echo x >> /proc/self/root" + cfg + " && echo ESCAPED",
		// A process left running in the background.
		"(sleep 0.2; echo x >> " + cfg + " && echo ESCAPED) & wait $!",
	} {
		msg, code := sh(t, d, c)
		refused(t, c, msg, code)
		after := snapshot(t, ws)
		// What a refused mv or cp -l leaves in the tree's free part is
		// its own business; the protected paths must be unchanged, and
		// the pinned directory (whose content is writable) where it was.
		for _, p := range []string{ro, file} {
			if !strings.Contains(after, snapshotOf(before, p)) {
				t.Fatalf("after %s:\n%s\nchanged:\n%s\nwas:\n%s", c, p, snapshotOf(after, p), snapshotOf(before, p))
			}
		}
		var st unix.Stat_t
		if err := unix.Lstat(pin, &st); err != nil || st.Ino != pinIno {
			t.Fatalf("after %s: the pinned directory %s was replaced (%v)", c, pin, err)
		}
	}
	// The rest of the tree is the commands' own, inside the pinned
	// directory too.
	if msg, code := sh(t, d, fmt.Sprintf("cd %[1]s && echo y > a/own && mv a/own a/b/own && echo y > %[2]s/new && mv %[2]s/new %[2]s/renamed && mkdir %[2]s/sub && rm -r %[2]s/sub a/b/own", ws, pin)); code != 0 {
		t.Fatalf("inside the tree: exit %d: %s", code, msg)
	}
}

// snapshotOf returns the lines of a snapshot about p and below.
func snapshotOf(snap, p string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(snap, "\n") {
		if strings.HasPrefix(l, p+" ") || strings.HasPrefix(l, p+"/") {
			b.WriteString(l)
		}
	}
	return b.String()
}

// TestReadOnlyNeedsAMountNamespace is the same policy made by a user
// without privileges: no mount namespace can be had (a thread of a
// multi-threaded process cannot make a user namespace), and New says so.
func TestReadOnlyNeedsAMountNamespace(t *testing.T) {
	requireKernel(t)
	out, err := asUser(t, "TestReadOnlyHelper")
	if err != nil || !strings.Contains(out, "--- PASS: TestReadOnlyHelper") {
		t.Fatalf("as uid %d: %v\n%s", otherUID, err, out)
	}
}

func TestReadOnlyHelper(t *testing.T) {
	if !isHelper(t) {
		t.Skip("run by TestReadOnlyNeedsAMountNamespace")
	}
	s := Probe()
	if s.MountNS || !strings.Contains(s.NoMountNS, "CAP_SYS_ADMIN") {
		t.Fatalf("Probe: MountNS %v, %q", s.MountNS, s.NoMountNS)
	}
	ws := t.TempDir()
	ro := filepath.Join(ws, "ro")
	if err := os.Mkdir(ro, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := New(Policy{Writable: []string{ws}, ReadOnly: []string{ro}})
	var u *UnsupportedError
	if !errors.As(err, &u) || !strings.Contains(err.Error(), "mount namespace") {
		t.Fatalf("New: %v; want an UnsupportedError naming the mount namespace", err)
	}
	// Partial enforces the rest, and says what it does not.
	d, err := New(Policy{Writable: []string{ws}, ReadOnly: []string{ro}, Partial: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if e := d.Enforced(); len(e.ReadOnly) != 0 || len(e.Missing) != 1 {
		t.Fatalf("partial: %+v", e)
	}
}

// TestLandlockForbidsMountChanges checks, on this kernel, the claim
// Policy.ReadOnly rests on beside the dropped capabilities: a thread under
// a Landlock ruleset cannot mount, unmount or remount, even holding
// CAP_SYS_ADMIN. It runs on a thread thrown away afterwards.
func TestLandlockForbidsMountChanges(t *testing.T) {
	requireMountNS(t)
	ws := t.TempDir()
	for _, d := range []string{"ro", "other"} {
		if err := os.Mkdir(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pl := Probe().plan(Policy{})
	var errs []string
	onThrowawayThread(func() {
		ro := filepath.Join(ws, "ro")
		if err := enterMountNamespace([]mountTarget{{path: ro, readOnly: true}}); err != nil {
			errs = append(errs, "set up: "+err.Error())
			return
		}
		fd, flags, err := pl.ruleset([]string{ws})
		if err != nil {
			errs = append(errs, "ruleset: "+err.Error())
			return
		}
		defer unix.Close(fd)
		// Capabilities are kept: only Landlock stands in the way.
		if err := ll.LandlockRestrictSelf(fd, flags); err != nil {
			errs = append(errs, "landlock_restrict_self: "+err.Error())
			return
		}
		try := func(what string, err error) {
			if !errors.Is(err, unix.EPERM) {
				errs = append(errs, fmt.Sprintf("%s: %v, want EPERM", what, err))
			}
		}
		try("umount", unix.Unmount(ro, unix.MNT_DETACH))
		try("remount rw", unix.Mount("", ro, "", unix.MS_REMOUNT|unix.MS_BIND, ""))
		try("bind over", unix.Mount(filepath.Join(ws, "other"), ro, "", unix.MS_BIND, ""))
		try("tmpfs over", unix.Mount("none", ro, "tmpfs", 0, ""))
		try("make private", unix.Mount("", ro, "", unix.MS_PRIVATE, ""))
	})
	for _, e := range errs {
		t.Error(e)
	}
}
