package local_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/hostproc"
	"github.com/a55dbaac/berth/backend/local"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/testenv"
	"github.com/a55dbaac/berth/session"
)

// TestMain lets the test binary play berth in a helper process.
func TestMain(m *testing.M) {
	switch os.Getenv("BERTH_LOCAL_TEST_HELPER") {
	case "environ":
		environHelper()
		return
	case "crash":
		crashHelper()
		return
	case "refuse":
		refuseHelper()
		return
	}
	os.Exit(m.Run())
}

// requireRoot skips unless BERTH_TEST_ENGINES selects root, and fails
// where it is selected and the tests do not run as root (the helper runs
// as another user).
func requireRoot(t *testing.T) {
	t.Helper()
	testenv.Need(t, testenv.Root, testenv.IsRoot)
}

func helperSession() *session.Session {
	be, err := local.New(backend.Options{Config: config.Default().Terminal})
	if err != nil {
		fmt.Println("local:", err)
		os.Exit(1)
	}
	return session.New(be, session.Options{Grace: 500 * time.Millisecond})
}

// environHelper runs, as berth would, a command that tries to read berth's
// own environment and memory through /proc.
func environHelper() {
	s := helperSession()
	defer s.Close()
	var b strings.Builder
	_, err := s.Run(context.Background(), session.Request{Command: `id -u; tr '\000' '\n' </proc/$PPID/environ; head -c 64 /proc/$PPID/mem >/dev/null; ls /proc/$PPID/fd >/dev/null`}, &b)
	fmt.Print(b.String())
	if err != nil {
		fmt.Println("run:", err)
	}
}

// TestBerthEnvironmentUnreadableBySameUser is F9: a command running as
// berth's own (non-root) user cannot read berth's environment, which holds
// the secrets stripped from the command's, nor its memory.
func TestBerthEnvironmentUnreadableBySameUser(t *testing.T) {
	requireRoot(t)
	bin := copyTestBinary(t)
	cmd := exec.Command(bin)
	cmd.Dir = filepath.Dir(bin)
	cmd.Env = append(os.Environ(), "BERTH_LOCAL_TEST_HELPER=environ", "OPENAI_API_KEY=sk-f9-secret", "BERTH_TOKEN=f9-token")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1, Gid: 1}} // daemon
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	s := string(out)
	if !strings.HasPrefix(s, "1\n") {
		t.Fatalf("helper did not run its command as uid 1: %q", s)
	}
	for _, secret := range []string{"sk-f9-secret", "f9-token"} {
		if strings.Contains(s, secret) {
			t.Errorf("a command of the same user read %q from berth's environment:\n%s", secret, s)
		}
	}
	if strings.Count(s, "Permission denied") < 3 {
		t.Errorf("reading berth's environ, mem and fd should each be denied:\n%s", s)
	}
}

// copyTestBinary copies the test binary where another user can run it.
func copyTestBinary(t *testing.T) string {
	dir, err := os.MkdirTemp("", "berth-helper-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bin := filepath.Join(dir, "helper.test")
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	return bin
}

// crashHelper starts a shell job, an escaped process and a background job
// tagged with $BERTH_CRASH_TAG, reports the guardian's pid and waits to be
// killed.
func crashHelper() {
	tag := os.Getenv("BERTH_CRASH_TAG")
	s := helperSession()
	ctx := context.Background()
	var b strings.Builder
	if _, err := s.Run(ctx, session.Request{Command: "sleep 1" + tag + " & (setsid sleep 2" + tag + " &); nohup sleep 3" + tag + " >/dev/null 2>&1 &"}, &b); err != nil {
		fmt.Println("run:", err)
		os.Exit(1)
	}
	if _, err := s.StartDetached(ctx, "sleep 4"+tag+" & sleep 5"+tag, "", false); err != nil {
		fmt.Println("background:", err)
		os.Exit(1)
	}
	go s.Run(ctx, session.Request{Command: "sleep 6" + tag}, io.Discard) // in the foreground
	time.Sleep(300 * time.Millisecond)
	fmt.Printf("READY %d\n", hostproc.GuardianPID())
	select {}
}

// countArgs counts live processes one of whose arguments starts with one
// of the prefixes.
func countArgs(args ...string) int {
	n := 0
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || len(b) == 0 {
			continue
		}
		for _, a := range strings.Split(string(b), "\x00") {
			for _, want := range args {
				if a == want {
					n++
				}
			}
		}
	}
	return n
}

func startCrashHelper(t *testing.T) (*exec.Cmd, int, []string) {
	tag := fmt.Sprintf("%06d", time.Now().UnixNano()%1000000)
	var args []string
	for i := 1; i <= 6; i++ {
		args = append(args, strconv.Itoa(i)+tag)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "BERTH_LOCAL_TEST_HELPER=crash", "BERTH_CRASH_TAG="+tag)
	cmd.Dir = t.TempDir()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		for _, a := range args { // never leave them running, whatever happened
			for _, p := range pidsWithArg(a) {
				syscall.Kill(p, syscall.SIGKILL)
			}
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	var guardian int
	if _, serr := fmt.Sscanf(line, "READY %d", &guardian); serr != nil {
		t.Fatalf("helper: %q %v", line, err)
	}
	// The helper's foreground and background commands start on their
	// own goroutines: on a loaded machine some come up after READY.
	n := countArgs(args...)
	for deadline := time.Now().Add(30 * time.Second); n != 6 && time.Now().Before(deadline); n = countArgs(args...) {
		time.Sleep(20 * time.Millisecond)
	}
	if n != 6 {
		t.Fatalf("helper started %d of its 6 processes", n)
	}
	return cmd, guardian, args
}

func pidsWithArg(arg string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		for _, a := range strings.Split(string(b), "\x00") {
			if a == arg {
				if p, err := strconv.Atoi(e.Name()); err == nil {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// waitNone polls until none of the processes is left.
func waitNone(t *testing.T, args []string, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for countArgs(args...) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d processes still running", what, countArgs(args...))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestNothingOutlivesKilledBerth is L15: after berth is killed with
// SIGKILL, its shell, the shell's jobs, processes that escaped the shell
// and background jobs all go away (the guardian sees berth's end).
func TestNothingOutlivesKilledBerth(t *testing.T) {
	cmd, _, args := startCrashHelper(t)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	waitNone(t, args, "after kill -9 of berth")
}

// TestOrphansReapedAtNextStart is L15's second line: when the guardian was
// killed as well, the next berth kills what the dead one left.
func TestOrphansReapedAtNextStart(t *testing.T) {
	// Every berth that starts a local backend reaps orphans, and other test
	// binaries run beside this one: one of them may reap the helper's
	// orphans before this test does. Then the crash is staged again, so
	// that a pass always means this ReapOrphans call killed them.
	for attempt := 1; ; attempt++ {
		cmd, guardian, args := startCrashHelper(t)
		if guardian <= 0 {
			t.Fatal("helper has no guardian")
		}
		syscall.Kill(guardian, syscall.SIGKILL)
		time.Sleep(200 * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		time.Sleep(500 * time.Millisecond)
		if n := countArgs(args...); n == 0 {
			if attempt < 5 {
				t.Logf("attempt %d: another berth reaped the orphans first; staging the crash again", attempt)
				continue
			}
			t.Fatal("nothing was left to reap five times: the test did not exercise ReapOrphans")
		}
		killed, err := hostproc.ReapOrphans()
		if err != nil {
			t.Fatal(err)
		}
		if len(killed) == 0 {
			t.Fatal("ReapOrphans killed nothing")
		}
		waitNone(t, args, "after ReapOrphans")
		return
	}
}
