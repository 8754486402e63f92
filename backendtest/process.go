package backendtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
)

// processTests drive backend.Process directly: the raw contract every
// backend owes the session, below the shell and the tool layer.
func processTests() []namedTest {
	return []namedTest{
		{"ExitStatus", (*Suite).testProcExitStatus, sharedEnv},
		{"SignalStatus", (*Suite).testProcSignalStatus, sharedEnv},
		{"StdinEOF", (*Suite).testProcStdinEOF, sharedEnv},
		{"MergedOutput", (*Suite).testProcMergedOutput, sharedEnv},
		{"WaitWhileDescendantHoldsOutput", (*Suite).testProcDescendantHoldsOutput, sharedEnv},
		{"TTY", (*Suite).testProcTTY, sharedEnv},
		{"ConcurrentStart", (*Suite).testProcConcurrentStart, sharedEnv},
		{"OutputHelper", (*Suite).testProcOutputHelper, sharedEnv},
		{"StartAfterClose", (*Suite).testProcStartAfterClose, freshEnv},
		{"CapabilitiesConsistent", (*Suite).testCapabilitiesConsistent, sharedEnv},
	}
}

// testCapabilitiesConsistent: what an environment reports of itself
// agrees with itself and with its registration. Workspace isolation names
// the trees the kernel lets commands write (the gate reads them to decide
// what the kernel already holds); any other isolation claims no
// confinement; this machine's own filesystem (NativeFS) is claimed only by
// a backend registered as living in it (HostFS), and never together with
// an isolation, since the file tools would then write from berth's own
// unconfined process.
func (s *Suite) testCapabilitiesConsistent(t *testing.T) {
	be := s.f(t)
	c := backend.CapabilitiesOf(be)
	reg, ok := backend.Lookup(be.Name())
	if !ok {
		t.Fatalf("backend %q is not registered", be.Name())
	}
	switch c.Isolation {
	case backend.IsolationWorkspace:
		if len(c.Confinement.Writable) == 0 {
			t.Errorf("workspace isolation without writable trees: %+v", c)
		}
		for _, w := range c.Confinement.Writable {
			if !strings.HasPrefix(w, "/") {
				t.Errorf("writable tree %q is not absolute", w)
			}
		}
	default:
		if len(c.Confinement.Writable) > 0 || c.Confinement.Signals || c.Confinement.Network != "" {
			t.Errorf("isolation %v with a confinement: %+v", c.Isolation, c.Confinement)
		}
	}
	if c.NativeFS && !reg.HostFS {
		t.Errorf("NativeFS, but %s is not registered with HostFS", be.Name())
	}
	if c.NativeFS && c.Isolation != backend.IsolationNone {
		t.Errorf("NativeFS with isolation %v: the file tools would write from berth's own process", c.Isolation)
	}
}

// procLimit bounds every wait in this group: far above what any backend
// needs, far below the sleeps the tests start, so a hang fails the test
// instead of passing by accident.
const procLimit = 30 * time.Second

// startProc starts a process and closes it at the end of the test.
func startProc(t *testing.T, be backend.Backend, spec backend.ProcSpec) backend.Process {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), procLimit)
	defer cancel()
	p, err := be.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start %q: %v", spec.Argv, err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func shSpec(script string) backend.ProcSpec {
	return backend.ProcSpec{Argv: []string{"/bin/sh", "-c", script}}
}

// waitFor waits for p within procLimit.
func waitFor(t *testing.T, p backend.Process) (int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), procLimit)
	defer cancel()
	code, err := backend.WaitContext(ctx, p)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait did not return within %v", procLimit)
	}
	return code, err
}

// readAll reads p's output to the end within procLimit.
func readAll(t *testing.T, p backend.Process) string {
	t.Helper()
	type res struct {
		b   []byte
		err error
	}
	c := make(chan res, 1)
	go func() {
		b, err := io.ReadAll(p.Stdout())
		c <- res{b, err}
	}()
	select {
	case r := <-c:
		return string(r.b)
	case <-time.After(procLimit):
		t.Fatalf("Stdout did not end within %v", procLimit)
		return ""
	}
}

func (s *Suite) testProcExitStatus(t *testing.T) {
	be := s.f(t)
	for _, code := range []int{0, 1, 7, 127, 255} {
		p := startProc(t, be, shSpec(fmt.Sprintf("exit %d", code)))
		p.Stdin().Close()
		readAll(t, p)
		got, err := waitFor(t, p)
		if err != nil || got != code {
			t.Errorf("exit %d: Wait = %d, %v", code, got, err)
		}
	}
}

func (s *Suite) testProcSignalStatus(t *testing.T) {
	be := s.f(t)
	for _, sig := range []struct {
		name string
		num  int
	}{{"TERM", 15}, {"KILL", 9}, {"INT", 2}} {
		p := startProc(t, be, shSpec("kill -s "+sig.name+" $$; sleep 5"))
		p.Stdin().Close()
		readAll(t, p)
		got, err := waitFor(t, p)
		if err != nil || got != 128+sig.num {
			t.Errorf("killed by SIG%s: Wait = %d, %v; want %d", sig.name, got, err, 128+sig.num)
		}
	}
}

func (s *Suite) testProcStdinEOF(t *testing.T) {
	be := s.f(t)
	p := startProc(t, be, backend.ProcSpec{Argv: []string{"cat"}})
	if _, err := io.WriteString(p.Stdin(), "hello\nworld\n"); err != nil {
		t.Fatal(err)
	}
	if err := p.Stdin().Close(); err != nil {
		t.Fatalf("closing stdin: %v", err)
	}
	if out := readAll(t, p); out != "hello\nworld\n" {
		t.Errorf("cat echoed %q", out)
	}
	if code, err := waitFor(t, p); code != 0 || err != nil {
		t.Errorf("cat after EOF: Wait = %d, %v", code, err)
	}
}

func (s *Suite) testProcMergedOutput(t *testing.T) {
	be := s.f(t)
	// The session merges stderr itself; a backend that delivers stderr at
	// all must deliver it on the one stream, in order.
	p := startProc(t, be, shSpec("exec 2>&1; echo one; echo two >&2; echo three"))
	p.Stdin().Close()
	if out := readAll(t, p); out != "one\ntwo\nthree\n" {
		t.Errorf("output %q, want the three lines in order", out)
	}
	waitFor(t, p)
}

// testProcDescendantHoldsOutput checks both halves of the after-exit
// contract: Wait returns when the process exits although a descendant still
// holds the output, and Stdout ends at most backend.WaitDelay later.
func (s *Suite) testProcDescendantHoldsOutput(t *testing.T) {
	be := s.f(t)
	sleep := "sleep " + strconv.Itoa(600+s.tagN())
	p := startProc(t, be, shSpec("setsid "+sleep+" >/dev/null 2>&1 </dev/null & "+sleep+" & echo $!; exit 7"))
	p.Stdin().Close()
	t.Cleanup(func() { s.killSleeps(be, sleep) })
	r := bufio.NewReader(p.Stdout())
	line, err := r.ReadString('\n')
	if _, perr := strconv.Atoi(strings.TrimSpace(line)); err != nil || perr != nil {
		t.Fatalf("first line = %q, %v", line, err)
	}
	code, err := waitFor(t, p)
	if err != nil || code != 7 {
		t.Fatalf("Wait = %d, %v; want 7 while a descendant holds the output", code, err)
	}
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, r)
		ended <- err
	}()
	// The sleep holds the stream for ten minutes; only the after-exit bound
	// can end it within procLimit.
	select {
	case <-ended:
	case <-time.After(procLimit):
		t.Fatalf("Stdout still open %v after Wait returned (the bound is %v)", procLimit, backend.WaitDelay)
	}
}

func (s *Suite) testProcTTY(t *testing.T) {
	be := s.f(t)
	ctx, cancel := context.WithTimeout(context.Background(), procLimit)
	defer cancel()
	p, err := be.Start(ctx, backend.ProcSpec{Argv: []string{"/bin/sh", "-c", "tty; exit 4"}, TTY: true})
	if errors.Is(err, backend.ErrNoTTY) {
		t.Skipf("%s has no terminals (ErrNoTTY): allowed by the contract", be.Name())
	}
	if err != nil {
		t.Fatalf("Start with TTY: %v", err)
	}
	defer p.Close()
	out := readAll(t, p)
	if !strings.Contains(out, "/dev/") || strings.Contains(out, "not a tty") {
		t.Errorf("tty printed %q, want a terminal device", out)
	}
	if code, _ := waitFor(t, p); code != 4 {
		t.Errorf("exit code = %d, want 4", code)
	}
}

func (s *Suite) testProcConcurrentStart(t *testing.T) {
	be := s.f(t)
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), procLimit)
			defer cancel()
			out, code, err := backend.Output(ctx, be, shSpec(fmt.Sprintf("echo proc-%d", i)), nil, 0)
			switch {
			case err != nil:
				errs[i] = err
			case code != 0 || string(out) != fmt.Sprintf("proc-%d\n", i):
				errs[i] = fmt.Errorf("got %q exit %d", out, code)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent start %d: %v", i, err)
		}
	}
}

func (s *Suite) testProcOutputHelper(t *testing.T) {
	be := s.f(t)
	ctx, cancel := context.WithTimeout(context.Background(), procLimit)
	defer cancel()
	out, code, err := backend.Output(ctx, be, shSpec("tr a-z A-Z; exit 3"), strings.NewReader("some input"), 0)
	if err != nil || code != 3 || string(out) != "SOME INPUT" {
		t.Errorf("Output = %q, %d, %v; want \"SOME INPUT\", 3, nil", out, code, err)
	}
	out, _, err = backend.Output(ctx, be, shSpec("head -c 5000 /dev/zero"), nil, 100)
	if !errors.Is(err, backend.ErrOutputTooLong) || len(out) != 100 {
		t.Errorf("over the limit: %d bytes, %v; want 100 bytes and ErrOutputTooLong", len(out), err)
	}
}

func (s *Suite) testProcStartAfterClose(t *testing.T) {
	be := s.f(t)
	ctx, cancel := context.WithTimeout(context.Background(), procLimit)
	defer cancel()
	if _, _, err := backend.Output(ctx, be, shSpec("true"), nil, 0); err != nil {
		t.Fatalf("first start: %v", err)
	}
	if err := be.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := be.Close(ctx); err != nil {
		t.Fatalf("second Close (must be idempotent): %v", err)
	}
	if p, err := be.Start(ctx, shSpec("true")); err == nil {
		p.Close()
		t.Fatal("Start after Close succeeded; a closed backend must refuse")
	}
}

// tagN is the case's tag as a number, so sleeps are unique per case.
func (s *Suite) tagN() int {
	n, _ := strconv.Atoi(s.tag)
	return n
}

// killSleeps removes what a process test left running: every process
// whose command line is exactly the given sleep.
func (s *Suite) killSleeps(be backend.Backend, sleep string) {
	ctx, cancel := context.WithTimeout(context.Background(), procLimit)
	defer cancel()
	// grep narrows the machine's processes to those with the duration as
	// an argument; only their whole command lines are compared.
	dur := strings.TrimPrefix(sleep, "sleep ")
	script := `for f in $(` + grepArg(dur, true) + `); do
  c=$(tr '\0' ' ' <"$f" 2>/dev/null) || continue
  if [ "$c" = "$1 " ]; then p=${f#/proc/}; kill -9 "${p%/cmdline}" 2>/dev/null; fi
done; exit 0`
	backend.Output(ctx, be, backend.ProcSpec{Argv: []string{"/bin/sh", "-c", script, "berth-clean", sleep}}, nil, 0)
}
