package session_test

import (
	"context"
	"errors"
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
	"github.com/a55dbaac/berth/backend/local"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/testenv"
	"github.com/a55dbaac/berth/session"
)

// TestMain lets the test binary serve as a helper process for tests that
// need one in another PID namespace.
func TestMain(m *testing.M) {
	if os.Getenv("BERTH_SESSION_TEST_HELPER") == "stalepid" {
		stalePIDHelper()
		return
	}
	os.Exit(m.Run())
}

// requireRoot skips a test unless BERTH_TEST_ENGINES selects root, and
// fails it where root is selected and the tests do not run as root or
// one of tools is missing.
func requireRoot(t *testing.T, tools ...string) {
	t.Helper()
	testenv.Need(t, testenv.Root, testenv.All(testenv.IsRoot, testenv.Programs(tools...)))
}

func newLocal(t testing.TB, cwd string) backend.Backend {
	cfg := config.Default().Terminal
	cfg.Cwd = cwd
	be, err := local.New(backend.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	return be
}

func runOut(t *testing.T, s *session.Session, req session.Request) (string, session.Result) {
	t.Helper()
	var b strings.Builder
	r, err := s.Run(context.Background(), req, &b)
	if err != nil {
		t.Fatalf("%q: %v", req.Command, err)
	}
	return b.String(), r
}

// TestStalePIDNotKilled is F6 as the review reproduced it: the shell dies
// between commands, an unrelated process gets its pid, and closing the
// session must leave that process alone. It runs in a private PID
// namespace so the pid can be steered with ns_last_pid.
func TestStalePIDNotKilled(t *testing.T) {
	requireRoot(t, "unshare")
	cmd := exec.Command("unshare", "--pid", "--fork", "--mount-proc", os.Args[0])
	cmd.Env = append(os.Environ(), "BERTH_SESSION_TEST_HELPER=stalepid")
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "unrelated process: alive") {
		t.Fatalf("helper said:\n%s", out)
	}
}

func stalePIDHelper() {
	fail := func(f string, a ...any) { fmt.Printf(f+"\n", a...); os.Exit(1) }
	be, err := local.New(backend.Options{Config: config.Default().Terminal})
	if err != nil {
		fail("local: %v", err)
	}
	s := session.New(be, session.Options{Grace: 500 * time.Millisecond})
	var b strings.Builder
	if _, err := s.Run(context.Background(), session.Request{Command: "echo $$"}, &b); err != nil {
		fail("run: %v", err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(b.String()))
	syscall.Kill(pid, syscall.SIGKILL)
	time.Sleep(500 * time.Millisecond)
	if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
		fail("ns_last_pid: %v", err)
	}
	v := exec.Command("sleep", "300")
	v.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := v.Start(); err != nil {
		fail("start: %v", err)
	}
	if v.Process.Pid != pid {
		fail("could not reuse pid %d (got %d)", pid, v.Process.Pid)
	}
	done := make(chan error, 1)
	go func() { done <- v.Wait() }()
	s.Close()
	select {
	case err := <-done:
		fmt.Printf("unrelated process: killed (%v)\n", err)
	case <-time.After(time.Second):
		fmt.Println("unrelated process: alive")
		v.Process.Kill()
	}
}

// TestKillChecksStartTime is F6 for the kill script itself: a pid whose
// start time is not the one berth recorded is not signalled, neither it
// nor its process group.
func TestKillChecksStartTime(t *testing.T) {
	be := newLocal(t, t.TempDir())
	s := session.New(be, session.Options{Grace: 200 * time.Millisecond})
	defer s.Close()
	v := exec.Command("sleep", "300")
	v.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := v.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- v.Wait() }()
	t.Cleanup(func() { v.Process.Kill() })
	start := startTime(t, v.Process.Pid)
	if err := session.KillForTest(s, context.Background(), v.Process.Pid, start+"1"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		t.Fatal("a process with another start time was killed")
	case <-time.After(300 * time.Millisecond):
	}
	if err := session.KillForTest(s, context.Background(), v.Process.Pid, start); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the process with the recorded start time survived")
	}
}

func startTime(t *testing.T, pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[19]
}

// asUser runs every process of a local backend as another user through
// setpriv, the way a shared host's other account would run berth.
type asUser struct {
	backend.Backend
	user string
}

func (a asUser) Start(ctx context.Context, spec backend.ProcSpec) (backend.Process, error) {
	spec.Argv = append([]string{"setpriv", "--reuid=" + a.user, "--regid=" + a.user, "--clear-groups", "--"}, spec.Argv...)
	return a.Backend.Start(ctx, spec)
}

// TestStdinNotPlantableByAnotherUser is F2: the victim (daemon) sends
// inline stdin through the session while another user (nobody) plants
// files in the shared, sticky temporary directory under the names the
// victim's shell could use. The command must read the victim's data, and
// nothing the victim wrote may be readable by the other user.
func TestStdinNotPlantableByAnotherUser(t *testing.T) {
	requireRoot(t, "setpriv")
	shared := t.TempDir()
	os.Chmod(filepath.Dir(shared), 0o755)
	if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(shared, "work")
	os.Mkdir(work, 0o777)
	os.Chmod(work, 0o777)
	t.Setenv("TMPDIR", shared)
	s := session.New(asUser{newLocal(t, work), "daemon"}, session.Options{Grace: 500 * time.Millisecond})
	defer s.Close()
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	pid := s.ShellPID()
	attacker := func(script string) string {
		out, _ := exec.Command("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--", "sh", "-c", script, "x", shared, pid).CombinedOutput()
		return string(out)
	}
	// The pid-named file earlier versions used, and a world-writable one.
	attacker(`printf 'ATTACKER\n' >"$1/.berth-in-$2"; chmod 666 "$1/.berth-in-$2"`)
	for i, data := range []string{"victim data one\n", "victim two\n"} {
		out, r := runOut(t, s, session.Request{Command: "cat", Stdin: []byte(data)})
		if out != data || r.ExitCode != 0 {
			t.Fatalf("write %d: command read %q (exit %d), want %q", i, out, r.ExitCode, data)
		}
	}
	if leak := attacker(`grep -rls victim "$1" 2>/dev/null; true`); strings.TrimSpace(leak) != "" {
		t.Fatalf("the other user can read the victim's stdin in %s", leak)
	}
	out, _ := runOut(t, s, session.Request{Command: `ls -ld "$(dirname "$(readlink /proc/$$/fd/0)")" | cut -c1-10; stat -c %U "$(readlink /proc/$$/fd/0)"`, Stdin: []byte("x")})
	if out != "drwx------\ndaemon\n" {
		t.Fatalf("stdin file: %q, want a 0700 directory and a file of daemon", out)
	}
}

// lossy reports its output stream as broken (a dropped connection) instead
// of ending it cleanly.
type lossy struct{ backend.Backend }

type lossyProc struct{ backend.Process }

type lossyReader struct{ r io.Reader }

func (l lossyReader) Read(b []byte) (int, error) {
	n, err := l.r.Read(b)
	if errors.Is(err, io.EOF) {
		err = errors.New("connection reset by peer")
	}
	return n, err
}

func (p lossyProc) Stdout() io.Reader { return lossyReader{p.Process.Stdout()} }

func (l lossy) Start(ctx context.Context, spec backend.ProcSpec) (backend.Process, error) {
	p, err := l.Backend.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	return lossyProc{p}, nil
}

// TestErrShellLost: losing the shell while a command runs gives an error
// that errors.Is recognises, and the next command runs on a new shell.
func TestErrShellLost(t *testing.T) {
	s := session.New(lossy{newLocal(t, t.TempDir())}, session.Options{Grace: 200 * time.Millisecond})
	defer s.Close()
	runOut(t, s, session.Request{Command: "export KEEP=1"})
	_, err := s.Run(context.Background(), session.Request{Command: "echo going; kill -9 $$"}, io.Discard)
	if !errors.Is(err, session.ErrShellLost) {
		t.Fatalf("lost shell: error %v, want one wrapping ErrShellLost", err)
	}
	if out, _ := runOut(t, s, session.Request{Command: "echo $KEEP"}); out != "1\n" {
		t.Fatalf("next command: %q", out)
	}
}
