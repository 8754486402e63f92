package hostproc

import (
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a55dbaac/berth/internal/procmark"
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
	got := output(t, exec.Command("/bin/sh", "-c", `ls /proc/$$/fd | tr '\n' ' '`))
	if got != "0 1 2 " {
		t.Fatalf("child's descriptors: %q, want only 0 1 2 (descriptor %d leaked?)", got, leak)
	}
}

// TestChildCarriesOwnerMark: every process gets berth's owner mark.
func TestChildCarriesOwnerMark(t *testing.T) {
	got := output(t, exec.Command("/bin/sh", "-c", `echo "$`+OwnerVar+`"`))
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
		c.Env = append(os.Environ(), OwnerVar+"="+mark)
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
