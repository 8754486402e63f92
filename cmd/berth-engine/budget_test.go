//go:build linux

package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"debug/gosym"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The budgets of the built binaries, checked on what TestMain built (go
// build, as users build them), not on one package's imports: a dependency
// that would double the engine's size, its memory or its package
// initialisation fails here instead of going unnoticed. Each budget is
// today's figure with headroom, in bytes or counts, never a time (start
// time is BenchmarkEngineStart in bench/). docs/performance.md records the
// figures they were picked from; raise one only with a line there saying
// what grew and why it is worth it.
const (
	// engineMaxSize: 59.3 MB (56.6 MiB) on 2026-11-29; client-go's typed
	// clientset took it to 91 MB.
	engineMaxSize = 64 << 20
	// frontMaxSize: 4.0 MB (3.8 MiB).
	frontMaxSize = 9 << 19 // 4.5 MiB
	// engineMaxPackages: go list -deps of the engine, 621 (std included).
	engineMaxPackages = 650
	// frontMaxPackages: go list -deps of the front, 87.
	frontMaxPackages = 90
	// engineMaxStartAnon: the anonymous resident memory (heap, stacks,
	// written data pages) of `berth-engine --help` when it exits — every
	// package's init, the command tree, the help printed: 4.2 MiB. Its
	// whole peak RSS (28–46 MiB here) is mostly the binary's own pages,
	// and how many of those a start maps depends on the page cache (a
	// freshly built binary maps more): it is logged, the size budget
	// covers it.
	engineMaxStartAnon = 5 << 20
	// engineMaxInitBytes, engineMaxInitAllocs: what package
	// initialisation allocates (GODEBUG=inittrace=1, summed over every
	// package), 2.31 MiB in 14 466 allocations.
	engineMaxInitBytes  = 3 << 20
	engineMaxInitAllocs = 18_000
)

// forbiddenDeps are import paths (and everything under them) the engine
// must not link: client-go's typed clientset and its fakes register every
// API group at init (the engine went from 44 to 91 MB with it), and the
// server-side apply and OpenAPI machinery come with the generated typed
// clients. backend/kubernetes talks to the API server through its own
// small client over client-go's REST client instead (rest.go).
var forbiddenDeps = []string{
	"k8s.io/client-go/kubernetes",
	"k8s.io/client-go/testing",
	"sigs.k8s.io/structured-merge-diff",
	"k8s.io/kube-openapi",
}

// allowedDeps are the packages under a forbiddenDeps path the engine may
// link all the same: apimachinery's runtime package (under client-go's
// REST client) converts unstructured objects with structured-merge-diff's
// value package; the typed, fieldpath and merge packages of server-side
// apply stay out.
var allowedDeps = []string{"sigs.k8s.io/structured-merge-diff/v4/value"}

// engineBin is the engine TestMain built next to the front.
func engineBin() string { return filepath.Join(filepath.Dir(berthBin), "berth-engine") }

func TestEngineBinaryBudget(t *testing.T) {
	bin := engineBin()
	size := fileSize(t, bin)
	t.Logf("berth-engine: %d bytes (%.1f MiB; budget %d MiB)", size, mib(size), engineMaxSize>>20)
	if size > engineMaxSize {
		t.Errorf("berth-engine is %.1f MiB, over its budget of %d MiB: find what grew (go version -m, go list -deps) "+
			"before raising engineMaxSize", mib(size), engineMaxSize>>20)
	}

	deps := listDeps(t, ".")
	t.Logf("berth-engine: %d packages (budget %d)", len(deps), engineMaxPackages)
	if len(deps) > engineMaxPackages {
		t.Errorf("berth-engine links %d packages (go list -deps), over its budget of %d: find what brought them "+
			"(go mod why -m) before raising engineMaxPackages", len(deps), engineMaxPackages)
	}
	linked := linkedPackages(t, bin)
	t.Logf("berth-engine: %d packages with code in the binary", len(linked))
	for _, set := range []struct {
		where string
		pkgs  []string
	}{{"go list -deps", deps}, {"the binary's symbol table", linked}} {
		if bad := forbidden(set.pkgs); len(bad) > 0 {
			t.Errorf("berth-engine links %d forbidden packages (%s): %s ...; they register every API group at init "+
				"in every engine: talk to the cluster through backend/kubernetes' own client (rest.go)",
				len(bad), set.where, strings.Join(bad[:min(4, len(bad))], ", "))
		}
	}
}

func TestFrontBinaryBudget(t *testing.T) {
	size := fileSize(t, berthBin)
	t.Logf("berth: %d bytes (%.1f MiB; budget %.1f MiB)", size, mib(size), mib(frontMaxSize))
	if size > frontMaxSize {
		t.Errorf("the berth front is %.1f MiB, over its budget of %.1f MiB", mib(size), mib(frontMaxSize))
	}
	deps := listDeps(t, "../berth")
	t.Logf("berth: %d packages (budget %d)", len(deps), frontMaxPackages)
	if len(deps) > frontMaxPackages {
		t.Errorf("the berth front links %d packages (go list -deps), over its budget of %d: it answers a warm exec "+
			"alone and must start in a few page faults", len(deps), frontMaxPackages)
	}
	// Without package net the front starts without the C library's
	// resolver and its init; it talks to the daemon through
	// golang.org/x/sys/unix.
	for _, set := range []struct {
		where string
		pkgs  []string
	}{{"go list -deps", deps}, {"the binary's symbol table", linkedPackages(t, berthBin)}} {
		if slices.Contains(set.pkgs, "net") {
			t.Errorf("the berth front links package net (%s): keep it out (use golang.org/x/sys/unix for the daemon socket)", set.where)
		}
	}
}

// TestEngineStartBudget checks what starting the engine costs in memory:
// the anonymous resident memory of `berth-engine --help` at its exit
// (every package's init, the command tree, the help printed) and the bytes
// and allocations of its package initialisation (GODEBUG=inittrace=1). Both are byte and
// count budgets; how long the start takes is measured by
// BenchmarkEngineStart (bench/), never asserted.
func TestEngineStartBudget(t *testing.T) {
	bin := engineBin()
	var mems []startMem
	var costs []initCost
	for range 3 {
		mem, trace := startMemory(t, bin, "--help")
		mems = append(mems, mem)
		if costs == nil {
			var err error
			if costs, err = parseInitTrace(trace); err != nil {
				t.Fatal(err)
			}
		}
	}
	slices.SortFunc(mems, func(a, b startMem) int { return int(a.anon - b.anon) })
	var initBytes, initAllocs int64
	for _, c := range costs {
		initBytes += c.bytes
		initAllocs += c.allocs
	}
	sort.Slice(costs, func(i, j int) bool { return costs[i].bytes > costs[j].bytes })
	var heavy []string
	for _, c := range costs[:min(5, len(costs))] {
		heavy = append(heavy, fmt.Sprintf("%s %d kB", c.pkg, c.bytes/1000))
	}
	m := mems[0]
	t.Logf("berth-engine --help: %.1f MiB anonymous resident at exit (lowest of %d; budget %d MiB), peak RSS %.1f MiB "+
		"(%.1f MiB of it file pages); init %.2f MiB in %d allocations (budget %d MiB, %d); heaviest: %s",
		mib(m.anon), len(mems), engineMaxStartAnon>>20, mib(m.peak), mib(m.file),
		mib(initBytes), initAllocs, engineMaxInitBytes>>20, engineMaxInitAllocs, strings.Join(heavy, ", "))
	if m.anon > engineMaxStartAnon {
		t.Errorf("berth-engine --help holds %.1f MiB of anonymous memory at its exit, over its budget of %d MiB",
			mib(m.anon), engineMaxStartAnon>>20)
	}
	if initBytes > engineMaxInitBytes || initAllocs > engineMaxInitAllocs {
		t.Errorf("berth-engine's package initialisation allocates %.2f MiB in %d allocations, over its budget "+
			"of %d MiB and %d: the heaviest are %s", mib(initBytes), initAllocs,
			engineMaxInitBytes>>20, engineMaxInitAllocs, strings.Join(heavy, ", "))
	}
}

// startMem is a process's resident memory at its exit, in bytes.
type startMem struct {
	peak int64 // VmHWM: the peak of all its resident memory
	anon int64 // RssAnon: heap, stacks, written data pages
	file int64 // RssFile: pages of the binary (and other files) mapped
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// startMemory runs bin with args (GODEBUG=inittrace=1, output discarded)
// and returns its resident memory at its exit and what it wrote on
// stderr.
//
// The figures are the process's own, read from /proc/PID/status when it
// stops at its exit (PTRACE_O_TRACEEXIT: its memory is still mapped then).
// The child's rusage cannot tell them: os/exec starts a child with vfork,
// and the kernel records the parent's (this test's) peak as the child's at
// its exec, so ru_maxrss is this test's size whenever the child is
// smaller.
func startMemory(t *testing.T, bin string, args ...string) (startMem, []byte) {
	t.Helper()
	stderr, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	env := append(os.Environ(), "BERTH_HOME="+t.TempDir(), "BERTH_CONFIG=", "GODEBUG=inittrace=1")

	// ptrace requests must come from the thread that started the child.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid, err := syscall.ForkExec(bin, append([]string{bin}, args...), &syscall.ProcAttr{
		Env:   env,
		Files: []uintptr{devnull.Fd(), devnull.Fd(), stderr.Fd()},
		Sys:   &syscall.SysProcAttr{Ptrace: true},
	})
	if err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	var mem startMem
	read, execStop := false, true
	for {
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
			t.Fatalf("wait for %s: %v", bin, err)
		}
		if ws.Exited() || ws.Signaled() {
			if ws.ExitStatus() != 0 {
				out, _ := os.ReadFile(stderr.Name())
				t.Fatalf("%s %v: %v\n%s", bin, args, ws, tail(out))
			}
			break
		}
		if !ws.Stopped() {
			continue
		}
		sig := ws.StopSignal()
		switch {
		case execStop && sig == syscall.SIGTRAP: // stopped after its exec
			execStop = false
			sig = 0
			if err := syscall.PtraceSetOptions(pid, unix.PTRACE_O_TRACEEXIT|unix.PTRACE_O_EXITKILL); err != nil {
				syscall.Kill(pid, syscall.SIGKILL)
				t.Fatalf("ptrace %s: %v", bin, err)
			}
		case sig == syscall.SIGTRAP && ws.TrapCause() == unix.PTRACE_EVENT_EXIT:
			sig = 0
			st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
			if err == nil {
				peak, ok1 := statusKB(st, "VmHWM")
				anon, ok2 := statusKB(st, "RssAnon")
				file, ok3 := statusKB(st, "RssFile")
				mem, read = startMem{peak * 1024, anon * 1024, file * 1024}, ok1 && ok2 && ok3
			}
		}
		if err := syscall.PtraceCont(pid, int(sig)); err != nil { // a signal is passed on
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("ptrace %s: %v", bin, err)
		}
	}
	if !read {
		t.Fatalf("%s %v: could not read its memory from /proc at its exit", bin, args)
	}
	out, err := os.ReadFile(stderr.Name())
	if err != nil {
		t.Fatal(err)
	}
	return mem, out
}

// statusKB reads a "Name: N kB" line of a /proc/PID/status.
func statusKB(b []byte, name string) (int64, bool) {
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, name+":"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				n, err := strconv.ParseInt(f[0], 10, 64)
				return n, err == nil
			}
		}
	}
	return 0, false
}

// tail is the end of a process's output, for a failure message.
func tail(b []byte) []byte {
	if len(b) > 2000 {
		return b[len(b)-2000:]
	}
	return b
}

// TestParseInitTrace checks the reading of GODEBUG=inittrace=1 lines the
// start budget depends on.
func TestParseInitTrace(t *testing.T) {
	in := "init runtime @0.022 ms, 0.084 ms clock, 0 bytes, 0 allocs\n" +
		"some other line\n" +
		"init github.com/distribution/reference @2.1 ms, 0.41 ms clock, 414552 bytes, 3600 allocs\n"
	got, err := parseInitTrace([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []initCost{{"runtime", 0, 0}, {"github.com/distribution/reference", 414552, 3600}}
	if !slices.Equal(got, want) {
		t.Fatalf("parseInitTrace = %v, want %v", got, want)
	}
	if _, err := parseInitTrace([]byte("nothing traced\n")); err == nil {
		t.Fatal("parseInitTrace of output without init lines: no error (was GODEBUG=inittrace=1 dropped?)")
	}
	if _, err := parseInitTrace([]byte("init x @1 ms, 1 ms clock, many bytes, 3 allocs\n")); err == nil {
		t.Fatal("parseInitTrace of a malformed line: no error")
	}
}

func TestForbidden(t *testing.T) {
	got := forbidden([]string{"k8s.io/client-go/rest", "k8s.io/client-go/kubernetes", "k8s.io/client-go/kubernetes/scheme",
		"k8s.io/client-go/kubernetesx", "sigs.k8s.io/structured-merge-diff/v4/value",
		"sigs.k8s.io/structured-merge-diff/v4/typed", "k8s.io/kube-openapi/pkg/util"})
	want := []string{"k8s.io/client-go/kubernetes", "k8s.io/client-go/kubernetes/scheme",
		"sigs.k8s.io/structured-merge-diff/v4/typed", "k8s.io/kube-openapi/pkg/util"}
	if !slices.Equal(got, want) {
		t.Fatalf("forbidden = %v, want %v", got, want)
	}
}

// initCost is one package's line of GODEBUG=inittrace=1.
type initCost struct {
	pkg           string
	bytes, allocs int64
}

// parseInitTrace reads the runtime's init trace: "init PKG @T ms, C ms
// clock, B bytes, A allocs" per package.
func parseInitTrace(out []byte) ([]initCost, error) {
	var costs []initCost
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "init ") || !strings.Contains(line, " clock, ") {
			continue // the program's own output
		}
		f := strings.Fields(line)
		if len(f) != 11 || f[8] != "bytes," || f[10] != "allocs" {
			return nil, fmt.Errorf("inittrace: cannot read %q", line)
		}
		b, err1 := strconv.ParseInt(f[7], 10, 64)
		a, err2 := strconv.ParseInt(f[9], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("inittrace: cannot read %q", line)
		}
		costs = append(costs, initCost{f[1], b, a})
	}
	if len(costs) == 0 {
		return nil, fmt.Errorf("inittrace: no init lines in %d bytes of output (GODEBUG=inittrace=1 not honoured?)", len(out))
	}
	return costs, nil
}

// forbidden returns the packages of pkgs that are, or lie under, a
// forbiddenDeps path, and are not allowedDeps.
func forbidden(pkgs []string) []string {
	var bad []string
	for _, p := range pkgs {
		if slices.Contains(allowedDeps, p) {
			continue
		}
		for _, f := range forbiddenDeps {
			if p == f || strings.HasPrefix(p, f+"/") {
				bad = append(bad, p)
				break
			}
		}
	}
	return bad
}

func fileSize(t *testing.T, name string) int64 {
	t.Helper()
	st, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// listDeps is go list -deps of the package in dir, as the binary is built
// (no tests).
func listDeps(t *testing.T, dir string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", dir).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps %s: %v\n%s", dir, err, stderr)
	}
	return strings.Fields(string(out))
}

// linkedPackages lists the packages that have code in the binary (its
// function table): what the linker kept, after dead code was removed.
func linkedPackages(t *testing.T, bin string) []string {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("read %s: %v", bin, err)
	}
	defer f.Close()
	pcln, text := f.Section(".gopclntab"), f.Section(".text")
	if pcln == nil || text == nil {
		t.Fatalf("%s has no Go function table (.gopclntab, .text): built with -s?", bin)
	}
	data, err := pcln.Data()
	if err != nil {
		t.Fatalf("read %s's function table: %v", bin, err)
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr))
	if err != nil {
		t.Fatalf("read %s's function table: %v", bin, err)
	}
	seen := map[string]bool{}
	var pkgs []string
	for _, fn := range tab.Funcs {
		if p := fn.PackageName(); p != "" && !seen[p] {
			seen[p] = true
			pkgs = append(pkgs, p)
		}
	}
	slices.Sort(pkgs)
	return pkgs
}
