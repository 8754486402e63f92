package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"
)

var berthBin string

func TestMain(m *testing.M) {
	// A copy of this binary named rawclient is a raw client of the daemon
	// socket given as its argument: it prints the first frame it gets,
	// before it sends anything (berth's own client checks the socket's
	// owner and would not connect at all).
	if filepath.Base(os.Args[0]) == "rawclient" {
		os.Exit(rawClient(os.Args[1]))
	}
	dir, err := os.MkdirTemp("", "berth-bin-")
	if err != nil {
		panic(err)
	}
	// Both binaries, side by side as installed: the tests run berth as
	// users do, through the front (which answers warm execs and hands the
	// rest to the engine next to it).
	berthBin = filepath.Join(dir, "berth")
	build := exec.Command("go", "build", "-o", dir+"/", ".", "../berth")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		panic("build berth and berth-engine: " + err.Error())
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// berth runs the built binary with a private BERTH_HOME and no config.
func berth(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int, st *os.ProcessState) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(berthBin, args...)
	cmd.Env = append(os.Environ(), "BERTH_HOME="+home, "BERTH_CONFIG=", "TERMINAL_ENV=", "BERTH_NO_DAEMON=1")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run berth %v: %v", args, err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode(), cmd.ProcessState
}

func TestShellJSONExample(t *testing.T) {
	out, errs, code, _ := berth(t, "cd /tmp\nexport A=1\necho $A; pwd\n", "shell", "--json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 JSON lines, got %d: %q", len(lines), out)
	}
	var last map[string]any
	if err := json.Unmarshal([]byte(lines[2]), &last); err != nil {
		t.Fatal(err)
	}
	if last["output"] != "1\n/tmp" || last["exit_code"] != 0.0 || last["error"] != nil {
		t.Fatalf("last result %v, want output \"1\\n/tmp\", exit 0, error null", last)
	}
	if !strings.Contains(lines[2], `"output":"1\n/tmp"`) {
		t.Fatalf("raw JSON line %s does not carry the output as \"1\\n/tmp\"", lines[2])
	}
}

func TestExecExitCodeAndOutput(t *testing.T) {
	out, _, code, _ := berth(t, "", "exec", "--", "echo hello; exit 7")
	if out != "hello\n" || code != 7 {
		t.Fatalf("got %q exit %d, want \"hello\\n\" exit 7", out, code)
	}
	out, _, code, _ = berth(t, "", "exec", "--json", "--", "echo", "a", "b")
	var r map[string]any
	if err := json.Unmarshal([]byte(out), &r); err != nil || r["output"] != "a b" || code != 0 {
		t.Fatalf("--json: %q exit %d (%v)", out, code, err)
	}
}

func TestExecTimeoutLeavesNothing(t *testing.T) {
	start := time.Now()
	// A sleep argument of its own: other packages' tests run sleeps too, and
	// a container's processes show in this host's /proc.
	arg := uniqueArg(1234)
	out, _, code, _ := berth(t, "", "exec", "--timeout", "2", "--", "sleep "+arg+" & sleep "+arg)
	// A hang guard, not a speed check: the sleeps run for 20 minutes.
	if d := time.Since(start); d > 45*time.Second {
		t.Errorf("took %v: the timeout waited for the command", d)
	}
	if code != 124 || !strings.Contains(out, "[Command timed out after 2s]") {
		t.Fatalf("got %q exit %d, want the timeout marker and 124", out, code)
	}
	if n := countHostProcs("sleep\x00" + arg); n != 0 {
		t.Fatalf("%d 'sleep %s' processes left running", n, arg)
	}
}

// countHostProcs counts live processes whose raw cmdline contains needle.
func countHostProcs(needle string) int {
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	n := 0
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(needle)) {
			n++
		}
	}
	return n
}

// TestExecHugeOutputBoundedMemory streams 200 MB through berth exec and
// checks the engine's anonymous memory (heap, stacks, buffers) stays bounded
// the whole time. Peak RSS (rusage) is the wrong measure: it also counts the
// pages of the ~90 MB binary the kernel maps, which depend on the page
// cache (after a fresh build it maps whole 2 MB folios), not on berth.
func TestExecHugeOutputBoundedMemory(t *testing.T) {
	cmd := exec.Command(berthBin, "exec", "--json", "--", `head -c 200000000 /dev/zero | tr "\0" a`)
	cmd.Env = berthEnv(t)
	var outb, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &outb, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The front execs the engine in place, so the pid is the engine's.
	done := make(chan struct{})
	peak := make(chan int)
	go func() {
		max := 0
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			if kb, ok := anonKiB(cmd.Process.Pid); ok && kb > max {
				max = kb
			}
			select {
			case <-done:
				peak <- max
				return
			case <-tick.C:
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	maxAnon := <-peak
	if err != nil {
		t.Fatalf("%v: %s", err, errb.String())
	}
	var r struct {
		Output         string `json:"output"`
		Total          int    `json:"output_total_chars"`
		FullOutputPath string `json:"full_output_path"`
	}
	if err := json.Unmarshal(outb.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if n := utf8.RuneCountInString(r.Output); n > 50000 || n < 49000 {
		t.Errorf("output is %d chars, want just under 50 000", n)
	}
	if !strings.Contains(r.Output, "... [OUTPUT TRUNCATED - 199,950,") || !strings.Contains(r.Output, "out of 200,000,000 total] ...") {
		t.Errorf("notice missing or wrong")
	}
	if r.Total != 200000000 {
		t.Errorf("output_total_chars %d", r.Total)
	}
	if fi, err := os.Stat(r.FullOutputPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("spill file %q: %v", r.FullOutputPath, err)
	}
	if maxAnon == 0 {
		t.Fatal("never read the engine's memory from /proc")
	}
	if maxAnon > 64*1024 {
		t.Errorf("engine anonymous memory peaked at %d KiB while 200 MB streamed, want under 64 MiB", maxAnon)
	}
	t.Logf("engine anonymous memory peak %d KiB", maxAnon)
}

// anonKiB reads RssAnon of a live process, in KiB.
func anonKiB(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			var kb int
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err == nil {
				return kb, true
			}
		}
	}
	return 0, false
}

func TestUnknownBackendIsAnErrorNotAFallback(t *testing.T) {
	out, errs, code, _ := berth(t, "", "exec", "--backend", "dokcer", "--", "echo ran")
	if code != 125 || strings.Contains(out, "ran") || !strings.Contains(errs, "dokcer") {
		t.Fatalf("got out %q err %q exit %d, want exit 125 naming the bad backend and nothing run", out, errs, code)
	}
}

func TestConfigSetGetPath(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	os.WriteFile(cfg, []byte("# mine\nmodel: x\nterminal:\n  backend: local # keep\n  timeout: 60\n"), 0o644)
	_, errs, code, _ := berth(t, "", "config", "--config", cfg, "set", "terminal.timeout", "30")
	if code != 0 {
		t.Fatalf("set: exit %d %s", code, errs)
	}
	b, _ := os.ReadFile(cfg)
	if string(b) != "# mine\nmodel: x\nterminal:\n  backend: local # keep\n  timeout: 30\n" {
		t.Fatalf("file after set:\n%s", b)
	}
	out, _, _, _ := berth(t, "", "config", "--config", cfg, "get", "timeout")
	if out != "30\n" {
		t.Fatalf("get: %q", out)
	}
	out, _, _, _ = berth(t, "", "config", "--config", cfg, "path")
	if out != cfg+"\n" {
		t.Fatalf("path: %q", out)
	}
	_, errs, code, _ = berth(t, "", "config", "--config", cfg, "set", "timeout", "soon")
	if code == 0 || !strings.Contains(errs, "soon") {
		t.Fatalf("bad value accepted: exit %d %q", code, errs)
	}
}

func TestHelpHasExamples(t *testing.T) {
	for _, c := range [][]string{{"--help"}, {"exec", "--help"}, {"shell", "--help"}, {"doctor", "--help"}, {"config", "--help"}, {"bench", "--help"}, {"config", "set", "--help"}} {
		out, _, code, _ := berth(t, "", c...)
		if code != 0 || !strings.Contains(out, "Examples:") {
			t.Errorf("berth %v: exit %d, no Examples section", c, code)
		}
	}
}

func TestDoctorLocal(t *testing.T) {
	out, _, code, _ := berth(t, "", "doctor", "--backend", "local")
	if code != 0 || !strings.Contains(out, "✓ local") {
		t.Fatalf("doctor: exit %d\n%s", code, out)
	}
}

func TestShellBackgroundMetaAndNoOrphansOnExit(t *testing.T) {
	arg := uniqueArg(1236)
	out, errs, code, _ := berth(t, ":bg sleep "+arg+"\n:bg echo hi\n:ps\n", "shell", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], `"session_id":"proc_`) || !strings.Contains(lines[2], `"command":"sleep `+arg+`"`) {
		t.Fatalf("meta commands: %q", out)
	}
	if n := countHostProcs("sleep\x00" + arg); n != 0 {
		t.Fatalf("%d background 'sleep %s' left running after berth shell ended", n, arg)
	}
}

func TestShellSIGTERMCleansUp(t *testing.T) {
	cmd := exec.Command(berthBin, "shell", "--json")
	cmd.Env = berthEnv(t)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	arg := uniqueArg(1237)
	stdin.Write([]byte(":bg sleep " + arg + "\n"))
	buf := make([]byte, 4096)
	if n, err := stdout.Read(buf); err != nil || !strings.Contains(string(buf[:n]), "proc_") {
		t.Fatalf("background start: %q %v", buf[:n], err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("berth shell did not exit within 20 s of SIGTERM")
	}
	if n := countHostProcs("sleep\x00" + arg); n != 0 {
		t.Fatalf("%d 'sleep %s' left running after SIGTERM", n, arg)
	}
}

// rawClient connects to socket and prints the first line it reads.
func rawClient(socket string) int {
	c, err := net.Dial("unix", socket)
	if err != nil {
		fmt.Println("dial:", err)
		return 1
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	fmt.Print(line)
	if err != nil {
		fmt.Println("read:", err)
		return 1
	}
	return 0
}

// rawClientBin returns this test binary, which runs as rawClient when
// called rawclient.
func rawClientBin(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}
