package hostproc

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a55dbaac/berth/internal/procmark"
	"golang.org/x/sys/unix"
)

func output(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	p, err := Start(cmd, false)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Stdin().Close()
	b, _ := io.ReadAll(p.Stdout())
	p.Wait()
	return string(b)
}

// TestStdinCloseAfterWait: Wait closes the stdin pipe (os/exec does), and
// the caller's Close after it is no error: backend.Output closes stdin
// while Wait runs, and reported "file already closed" for a `true` that
// exited first.
func TestStdinCloseAfterWait(t *testing.T) {
	p, err := Start(exec.Command("true"), false)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if code, err := p.Wait(); err != nil || code != 0 {
		t.Fatalf("wait: %d, %v", code, err)
	}
	if err := p.Stdin().Close(); err != nil {
		t.Fatalf("stdin Close after Wait: %v", err)
	}
	if _, err := p.Stdin().Write([]byte("x")); err == nil {
		t.Fatal("a write after Wait closed stdin succeeded")
	}
}

// TestChildGetsOnlyItsStdio is L19: a descriptor berth holds without
// close-on-exec (as one inherited from its parent would be) does not reach
// the processes it starts.
//
// The child's descriptors are read from outside, once it waits on its
// stdin. (The test used to have the child list /proc/$$/fd itself through
// `ls | tr`: the shell holds its pipeline's pipes while it sets the pipeline
// up, so that listing saw "0 1 2 3 4" now and then, under load more often,
// whatever berth did.)
func TestChildGetsOnlyItsStdio(t *testing.T) {
	f, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	leak, err := syscall.Dup(int(f.Fd())) // dup(2): no close-on-exec
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(leak)
	if got := childDescriptors(t); got != "0 1 2" {
		t.Fatalf("child's descriptors: %q, want only 0 1 2 (descriptor %d held without close-on-exec leaked?)", got, leak)
	}
}

// TestChildGetsOnlyItsStdioWhenInherited runs TestChildGetsOnlyItsStdio in
// a test process that inherits two more descriptors from its parent
// without close-on-exec (fds 3 and 4), as it does under a CI runner, a
// terminal multiplexer or an IDE.
func TestChildGetsOnlyItsStdioWhenInherited(t *testing.T) {
	var extra []*os.File
	for range 2 {
		f, err := os.Open("/dev/null")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		extra = append(extra, f)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildGetsOnlyItsStdio$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"=inherited")
	cmd.ExtraFiles = extra // fds 3 and 4 in the child, without close-on-exec
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestChildGetsOnlyItsStdio") {
		t.Fatalf("with inherited descriptors: %v\n%s", err, out)
	}
}

// childDescriptors starts a shell through Start that says it is ready and
// then blocks reading its stdin, and lists its open descriptors from
// /proc/<pid>/fd.
func childDescriptors(t *testing.T) string {
	t.Helper()
	p, err := Start(exec.Command("/bin/sh", "-c", "echo ready; read x"), false)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		p.Stdin().Close()
		p.Wait()
		p.Close()
	}()
	buf := make([]byte, 6)
	if _, err := io.ReadFull(p.Stdout(), buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("child did not get ready: %q %v", buf, err)
	}
	pid := p.(*proc).cmd.Process.Pid
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	var fds []int
	for _, e := range ents {
		n, _ := strconv.Atoi(e.Name())
		fds = append(fds, n)
	}
	slices.Sort(fds)
	var names []string
	for _, n := range fds {
		names = append(names, strconv.Itoa(n))
	}
	return strings.Join(names, " ")
}

// helperEnv switches the test binary into the helper roles of the tests
// that run it in another process.
const helperEnv = "HOSTPROC_TEST_HELPER"

// TestMain checks, in the role "inherited", that the process did inherit
// descriptors 3 and 4 without close-on-exec before any test runs.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "inherited" {
		for _, fd := range []int{3, 4} {
			flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
			if err != nil || flags&unix.FD_CLOEXEC != 0 {
				fmt.Printf("descriptor %d was not inherited open without close-on-exec (flags %d, %v)\n", fd, flags, err)
				os.Exit(3)
			}
		}
	}
	os.Exit(m.Run())
}

// TestGuardianCarriesNoSecrets is F9: a secret in berth's environment is
// in no /proc/<pid>/environ that a command berth runs can read, the
// guardian's included. berth runs as a non-root user here (root reads
// every environ), with the secret in its environment; the command, with
// an environment of its own, scans /proc. A process started with the
// secret on purpose shows that the scan would see one.
func TestGuardianCarriesNoSecrets(t *testing.T) {
	// Unique per run: a concurrent run of this test (another checkout)
	// has its own control process.
	const secretVar = "HOSTPROC_TEST_API_KEY"
	secret := secretVar + "=" + os.Getenv(secretVar)
	if os.Getenv(helperEnv) == "secrets" {
		control := exec.Command("sleep", "60")
		control.Env = []string{"PATH=/usr/bin:/bin", secret}
		if err := control.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { control.Process.Kill(); control.Wait() }()
		cmd := exec.Command("/bin/sh", "-c", `for f in $(grep -l -s -z -x -F -e "$1" /proc/[0-9]*/environ); do
  f=${f#/proc/}; printf '%s ' "${f%/environ}"
done`, "scan", secret)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		out := output(t, cmd)
		g := GuardianPID()
		if g == 0 {
			t.Fatal("no guardian runs")
		}
		if want := strconv.Itoa(control.Process.Pid) + " "; out != want {
			t.Fatalf("the secret is readable in the environ of pids %q; want only the control process %s (the guardian is %d, berth %d)", out, want, g, os.Getpid())
		}
		return
	}
	// The test binary must be runnable by the other user.
	dir, err := os.MkdirTemp("", "hostproc-f9-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := dir + "/hostproc.test"
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestGuardianCarriesNoSecrets$", "-test.count=1", "-test.v")
	cmd.Dir = dir
	secret = fmt.Sprintf("%s=sk-proj-hostproc-F9-%d-%d", secretVar, os.Getpid(), time.Now().UnixNano())
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir, helperEnv + "=secrets", secret}
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("berth as uid %d: %v\n%s", 65534, err, out)
	}
}

// TestChildCarriesOwnerMark: every process gets berth's owner mark.
func TestChildCarriesOwnerMark(t *testing.T) {
	got := output(t, exec.Command("/bin/sh", "-c", `echo "$`+procmark.OwnerVar+`"`))
	if strings.TrimSpace(got) != Owner() || !strings.HasPrefix(Owner(), strconv.Itoa(os.Getpid())+".") {
		t.Fatalf("child's mark %q, want %q", got, Owner())
	}
}

// TestNonDumpable is F9's mechanism: after the first start berth is not
// dumpable.
func TestNonDumpable(t *testing.T) {
	output(t, exec.Command("true"))
	v, err := prctlGetDumpable()
	if err != nil || v != 0 {
		t.Fatalf("dumpable = %d (%v), want 0", v, err)
	}
}

// TestReapOrphansSparesLiveOwners: processes marked by a berth that still
// runs (this one, or another live process) are left alone; those marked by
// a gone one are killed.
func TestReapOrphansSparesLiveOwners(t *testing.T) {
	start := func(mark string) *exec.Cmd {
		c := exec.Command("sleep", "300")
		c.Env = append(os.Environ(), procmark.OwnerVar+"="+mark)
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill() }) // waited for by exited
		return c
	}
	// A live "owner": a process of ours, with its real start time.
	owner := exec.Command("sleep", "300")
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { owner.Process.Kill(); owner.Wait() })
	st, _ := procmark.StartTime(owner.Process.Pid)
	liveMark := strconv.Itoa(owner.Process.Pid) + "." + st
	// A gone owner: a process that ran and was reaped.
	gone := exec.Command("true")
	gone.Run()
	goneMark := strconv.Itoa(gone.Process.Pid) + ".12345"

	mine, live, dead := start(Owner()), start(liveMark), start(goneMark)
	exited := func(c *exec.Cmd) chan struct{} {
		ch := make(chan struct{})
		go func() { c.Wait(); close(ch) }()
		return ch
	}
	mineDone, liveDone, deadDone := exited(mine), exited(live), exited(dead)
	killed, err := ReapOrphans()
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-deadDone:
	case <-time.After(10 * time.Second):
		t.Fatalf("the orphan of a gone berth survived (killed %v)", killed)
	}
	select {
	case <-mineDone:
		t.Fatal("a process of this berth was killed")
	case <-liveDone:
		t.Fatal("a process of a live berth was killed")
	case <-time.After(300 * time.Millisecond):
	}
}
