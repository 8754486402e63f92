package procmark

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/internal/testenv"
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

func TestMarkNamesThisNamespace(t *testing.T) {
	parts := strings.Split(Self(), "/")
	if len(parts) != 4 || parts[3] == "" || parts[3] != PIDNamespace() {
		t.Fatalf("mark %q: want 4 fields ending in this PID namespace %q", Self(), PIDNamespace())
	}
	l, _ := os.Readlink("/proc/self/ns/pid")
	if l != "pid:["+PIDNamespace()+"]" {
		t.Fatalf("PIDNamespace() = %q, /proc/self/ns/pid is %q", PIDNamespace(), l)
	}
}

// TestOtherNamespaceIsNeverGone: a mark made in another PID namespace is
// not judged here, whatever its pid names in this one (N11).
func TestOtherNamespaceIsNeverGone(t *testing.T) {
	parts := strings.Split(Self(), "/")
	other := "1" // not a PID namespace inode of this process
	for _, m := range []string{
		strings.Join([]string{parts[0], "999999999", "1", other}, "/"), // no such pid here
		strings.Join([]string{parts[0], parts[1], "1", other}, "/"),    // this pid, another start time
		strings.Join([]string{parts[0], "999999999", "1", ""}, "/"),
	} {
		if Gone(m) {
			t.Errorf("Gone(%q) = true for a mark of another PID namespace", m)
		}
	}
}

// TestOldFormatMarks: marks without the namespace (written by an earlier
// berth) are still judged, in this namespace, as before.
func TestOldFormatMarks(t *testing.T) {
	parts := strings.Split(Self(), "/")
	old := strings.Join(parts[:3], "/")
	if Gone(old) {
		t.Fatalf("Gone(%q) = true for this running process (old format)", old)
	}
	if m := parts[0] + "/999999999/1"; !Gone(m) {
		t.Fatalf("Gone(%q) = false for a pid that does not exist (old format)", m)
	}
	if m := parts[0] + "/" + parts[1] + "/1"; !Gone(m) {
		t.Fatalf("Gone(%q) = false for a reused pid (old format)", m)
	}
}

// helperEnv switches the test binary into a helper run by the tests below
// in other namespaces and as other users.
const helperEnv = "PROCMARK_TEST_HELPER"

// TestMain doubles as a helper that the tests below run in other
// namespaces and as other users: with PROCMARK_TEST_HELPER set it prints
// this process's mark and sleeps ("self"), prints the mark of the pid in
// PROCMARK_TEST_PID ("of"), or prints Gone of the mark in
// PROCMARK_TEST_MARK ("gone"), instead of running the tests.
func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "self":
		os.Stdout.WriteString(Self() + "\n")
		time.Sleep(time.Hour)
	case "of":
		pid, _ := strconv.Atoi(os.Getenv("PROCMARK_TEST_PID"))
		os.Stdout.WriteString(Of(pid) + "\n")
	case "gone":
		os.Stdout.WriteString(strconv.FormatBool(Gone(os.Getenv("PROCMARK_TEST_MARK"))) + "\n")
	}
	os.Exit(0)
}

// needUnshare skips a test unless BERTH_TEST_ENGINES selects root and
// namespaces, and fails it where they are selected and root (for unshare
// --pid and mount -t proc) or util-linux's unshare and setpriv are missing.
func needUnshare(t *testing.T) {
	t.Helper()
	testenv.Need(t, testenv.Root, testenv.IsRoot)
	testenv.Need(t, testenv.Namespaces, testenv.Programs("unshare", "setpriv"))
}

// TestLiveBerthInChildNamespaceIsNotGone is N11's repro: a process in a
// child PID namespace (pid 1 there, another pid here) marks itself; this
// process, in the parent namespace, must not judge it gone while it runs,
// nor after (it cannot tell). Inside the child namespace the judgement
// still works: a dead process of that namespace is gone there.
func TestLiveBerthInChildNamespaceIsNotGone(t *testing.T) {
	needUnshare(t)
	cmd := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "--kill-child", os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=self")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	mark := strings.TrimSpace(line)
	parts := strings.Split(mark, "/")
	if len(parts) != 4 || parts[1] != "1" || parts[3] == PIDNamespace() {
		t.Fatalf("mark from the child namespace %q: want pid 1 and another namespace than %s", mark, PIDNamespace())
	}
	if Gone(mark) {
		t.Fatalf("Gone(%q) = true for a live process of a child PID namespace", mark)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if Gone(mark) {
		t.Fatalf("Gone(%q) = true for a mark of another PID namespace, which cannot be judged here", mark)
	}

	// Within a namespace of its own, a marked process that exited is gone.
	script := `sleep 60 & s=$!
m=$(` + helperEnv + `=of PROCMARK_TEST_PID=$s "$0" -test.run='^$')
alive=$(` + helperEnv + `=gone PROCMARK_TEST_MARK="$m" "$0" -test.run='^$')
{ kill $s; wait $s; } 2>/dev/null
dead=$(` + helperEnv + `=gone PROCMARK_TEST_MARK="$m" "$0" -test.run='^$')
echo "$m $alive $dead"`
	got, err := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", script, os.Args[0]).CombinedOutput()
	if err != nil {
		t.Fatalf("inside a child namespace: %v: %s", err, got)
	}
	f := strings.Fields(lastLine(got))
	if len(f) != 3 || f[1] != "false" || f[2] != "true" {
		t.Fatalf("inside a child namespace, mark / gone while running / gone after: %q, want <mark> false true", got)
	}
}

// TestHiddenPidIsNotGone: on a /proc mounted with hidepid (1: other users'
// /proc/PID unreadable, 2: invisible), a process of another user that runs
// is not judged gone by a berth that cannot see it.
func TestHiddenPidIsNotGone(t *testing.T) {
	needUnshare(t)
	// The test binary must be runnable by nobody.
	dir, err := os.MkdirTemp("", "procmark-hidepid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := dir + "/procmark.test"
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
	for _, hide := range []string{"1", "2"} {
		script := `mount -t proc -o hidepid=` + hide + ` proc /proc || exit 3
sleep 60 & s=$!
m=$(` + helperEnv + `=of PROCMARK_TEST_PID=$s "$0" -test.run='^$')
g=$(setpriv --reuid=65534 --regid=65534 --clear-groups env ` + helperEnv + `=gone PROCMARK_TEST_MARK="$m" "$0" -test.run='^$')
{ kill $s; wait $s; } 2>/dev/null
gd=$(setpriv --reuid=65534 --regid=65534 --clear-groups env ` + helperEnv + `=gone PROCMARK_TEST_MARK="$m" "$0" -test.run='^$')
echo "$m $g $gd"`
		got, err := exec.Command("unshare", "--pid", "--fork", "--mount", "--propagation", "private", "sh", "-c", script, bin).CombinedOutput()
		if err != nil {
			t.Fatalf("hidepid=%s: %v: %s", hide, err, got)
		}
		f := strings.Fields(lastLine(got))
		if len(f) != 3 || f[1] != "false" || f[2] != "true" {
			t.Errorf("hidepid=%s: mark / gone while running (as another user) / gone after: %q, want <mark> false true", hide, got)
		}
	}
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// TestUnderBerth: a process whose own environment holds no owner mark is
// under a berth when an ancestor's does (env -u removes the mark from the
// process itself only); a tree without the mark is not.
func TestUnderBerth(t *testing.T) {
	if m := os.Getenv(OwnerVar); m != "" {
		t.Skipf("the test itself runs under a berth (%s=%s)", OwnerVar, m)
	}
	if m := UnderBerth(os.Getpid()); m != "" {
		t.Skipf("the test itself runs under a berth (an ancestor carries %s=%s)", OwnerVar, m)
	}
	// marked: sh (mark) -> sh -> env -u (no mark) -> sleep; the
	// innermost prints its pid and waits.
	run := func(env []string, script string) int {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Env = env
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(line))
		if err != nil {
			t.Fatalf("pid line %q", line)
		}
		return pid
	}
	const inner = `/bin/sh -c 'env -u ` + OwnerVar + ` /bin/sh -c "echo \$\$; exec sleep 60"'; :`
	base := []string{"PATH=" + os.Getenv("PATH")}
	pid := run(append(base, OwnerVar+"=123.456"), inner)
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ"); err != nil || strings.Contains(string(b), OwnerVar) {
		t.Fatalf("the innermost process still has the mark itself (%v): the test proves nothing", err)
	}
	if m := UnderBerth(pid); m != "123.456" {
		t.Errorf("UnderBerth of a process whose grandparent carries the mark = %q, want 123.456", m)
	}
	if m := UnderBerth(run(base, inner)); m != "" {
		t.Errorf("UnderBerth of a tree without the mark = %q, want none", m)
	}
}
