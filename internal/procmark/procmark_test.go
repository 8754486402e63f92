package procmark

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestSelfIsNotGone(t *testing.T) {
	m := Self()
	if m == "" {
		t.Fatal("no mark for this process")
	}
	if !strings.Contains(m, "/"+strconv.Itoa(os.Getpid())+"/") {
		t.Fatalf("mark %q does not name pid %d", m, os.Getpid())
	}
	if Gone(m) {
		t.Fatalf("Gone(%q) for the running test process", m)
	}
}

func TestExitedProcessIsGone(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m := Of(cmd.Process.Pid)
	if m == "" || Gone(m) {
		t.Fatalf("live child: mark %q, gone %v", m, Gone(m))
	}
	cmd.Process.Kill()
	// A zombie (killed, not yet reaped) is already gone.
	for i := 0; i < 2000 && !Gone(m); i++ {
		time.Sleep(time.Millisecond)
	}
	if !Gone(m) {
		t.Fatalf("killed child %q not judged gone", m)
	}
	cmd.Wait()
	if !Gone(m) {
		t.Fatalf("reaped child %q not judged gone", m)
	}
}

func TestReusedPidIsGone(t *testing.T) {
	parts := strings.Split(Self(), "/")
	parts[2] = "1" // this pid, another start time
	if m := strings.Join(parts, "/"); !Gone(m) {
		t.Fatalf("Gone(%q) = false for a pid now held by another process", m)
	}
}

func TestForeignOrBrokenMarksAreNeverGone(t *testing.T) {
	for _, m := range []string{"", "x", "other-boot/1/1", BootID() + "/notapid/1", BootID() + "/0/1", BootID() + "/1"} {
		if Gone(m) {
			t.Errorf("Gone(%q) = true, want false (cannot be judged)", m)
		}
	}
}
