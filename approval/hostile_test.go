package approval

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a55dbaac/berth/internal/shparse"
)

// hostileShapes are the inputs the three security reviews (2026-11,
// 2026-11-25, 2026-11-28) built to crash the check or make it slow or
// large, and their relatives, each about size bytes long.
func hostileShapes(size int) map[string]string {
	r := strings.Repeat
	k := func(unit string) int { return max(size/len(unit), 1) }
	return map[string]string{
		// F4 (2026-11, 2026-11-25): nesting.
		"parens":       r("(", k("()")) + "true" + r(")", k("()")),
		"subst":        "echo " + r("$(", k("$()")) + r(")", k("$()")),
		"arith parens": "echo $((" + r("(", k("()")) + "1" + r(")", k("()")) + "))",
		"braces":       r("{ ", k("{ ; }")) + "true" + r("; }", k("{ ; }")),
		"test parens":  "[[ " + r("( ", k("(  )")) + "a" + r(" )", k("(  )")) + " ]]",
		"heredoc":      "cat <<EOF\n$((" + r("(", k("()")) + "1" + r(")", k("()")) + "))\nEOF",
		"bash -c deep": "bash -c '" + r("((", k("(())")) + "1" + r("))", k("(())")) + "'",
		// N4 (2026-11-25): more commands than the walk follows; R3
		// (2026-11-28): 200 bytes of memory per byte of ":;".
		"colons": r(":;", k(":;")),
		"lines":  r("true\n", k("true\n")),
		// F4 regressed, R3 (2026-11-28).
		"time":    r("time ", k("time ")) + "true",
		"ternary": "echo $((" + r("1?", k("1?:1")) + "1" + r(":1", k("1?:1")) + "))",
		"assign":  "echo $((" + r("a=", k("a=")) + "1))",
		"coproc":  r("coproc ", k("coproc ")) + "true",
		"plus":    "echo $((" + r("1+", k("1+")) + "1))",
		"power":   "echo $((" + r("2**", k("2**")) + "2))",
		"minus":   "echo $((" + r("- ", k("- ")) + "1))",
		"bitneg":  "echo $((" + r("~", k("~")) + "1))",
		// Found while fixing them: more productions the parser recurses
		// on, and text the earlier estimate did not read as code.
		"let":          "let " + r("a=", k("a=")) + "1",
		"func headers": r("f() ", k("f() ")) + "{ :; }",
		"andand lines": r("true &&\n", k("true &&\n")) + "true",
		"test and":     "[[ " + r("a && ", k("a && ")) + "a ]]",
		"fi as word":   r("if :; then echo $x fi; ", k("if :; then echo $x fi; ")),
		"after ${#x}":  "echo ${#x} " + r("(", k("()")) + "1" + r(")", k("()")),
		// Flat but large: words, a quoted string, a quoted heredoc, and
		// the same as the text of bash -c and eval.
		"words":          "echo " + r("a ", k("a ")),
		"quoted":         "echo '" + r("x", size) + "'",
		"quoted heredoc": "cat > f <<'EOF'\n" + r("some text\n", k("some text\n")) + "EOF",
		"bash -c colons": "bash -c '" + r(":;", k(":;")) + "'",
		"bash -c time":   "bash -c '" + r("time ", k("time ")) + "true'",
		"eval words":     "eval " + r("a ", k("a ")),
		// Values that double (X=$X$X), and brace products.
		"doubling":      "X=a; " + r("X=$X$X; ", k("X=$X$X; ")) + "true",
		"brace product": "echo " + r("{a,b,c}", k("{a,b,c}")),
	}
}

// acceptedShapes are the largest inputs of several shapes the bounds let
// through to a full check: nesting well within MaxNesting (each level
// counts about two in the estimate), flat text just under MaxElements.
func acceptedShapes() map[string]string {
	r := strings.Repeat
	n := 450
	e := shparse.MaxElements
	return map[string]string{
		"parens":        r("(", n) + "true" + r(")", n),
		"subst":         "echo " + r("$(", n/2) + r(")", n/2),
		"time":          r("time ", n) + "true",
		"ternary":       "echo $((" + r("1?", n/2) + "1" + r(":1", n/2) + "))",
		"assign":        "echo $((" + r("a=", n) + "1))",
		"if":            r("if :; then ", n) + ":" + r("; fi", n),
		"colons":        r(":;", e/2-16),
		"lines":         r("true\n", e/2-16),
		"words":         "echo " + r("a ", e-16),
		"assigns":       r("a=$b;", e/4-16),
		"pipes":         r("a | b\n", e/4-16),
		"functions":     r("f() { g; }\n", e/8-16) + r("f;", 1000),
		"bash -c lines": "bash -c '" + r("true\n", e/2-16) + "'",
		"heredoc to sh": "bash <<'EOF'\n" + r("echo hello world\n", e/4) + "EOF",
	}
}

// TestHostileShapes: every input of the reviews, at a megabyte, and the
// largest inputs the bounds accept get a verdict with a bounded stack (a
// stack overflow ends the test binary: Go cannot recover from one), and
// the floor still holds after them in every mode.
func TestHostileShapes(t *testing.T) {
	defer debug.SetMaxStack(debug.SetMaxStack(64 << 20))
	all := map[string]string{}
	for name, cmd := range hostileShapes(1 << 20) {
		all["1 MiB "+name] = cmd
	}
	for name, cmd := range acceptedShapes() {
		all["accepted "+name] = cmd
	}
	for _, mode := range []string{"manual", "off"} {
		p := mustPolicy(t, mode, nil, nil)
		for name, cmd := range all {
			p.Check(cmd, testCtx)
			if v := p.Check(cmd+"\nrm -rf /", testCtx); v.Action != Block || v.By != ByFloor {
				t.Errorf("mode %s: %s followed by rm -rf /: %s by %q; %.200s", mode, name, v.Action, v.By, describe(v.Need))
			}
		}
	}
}

// TestTooLargeMessage: a command refused as too large to check says so,
// and what to do, not that it is a forbidden action.
func TestTooLargeMessage(t *testing.T) {
	p := DefaultPolicy()
	for _, cmd := range []string{strings.Repeat(":;", 1<<20), "X=a; " + strings.Repeat("X=$X$X; ", 64) + "true"} {
		d := p.Check(cmd, testCtx).Decision(p)
		if d == nil || d.Allowed() || d.Rule != "too-large" || !strings.Contains(d.Message, "too large") ||
			!strings.Contains(d.Message, "write_file") || strings.Contains(d.Message, "Do not try another way") {
			t.Errorf("%.30q…: %+v", cmd, d)
		}
	}
}

// TestLongScriptsReadWhole: a script longer than any fixed cap on values
// (it was 8 KiB) is read to its end: the text of bash -c, eval and a
// heredoc fed to a shell once hid what followed the cut.
func TestLongScriptsReadWhole(t *testing.T) {
	pad := strings.Repeat("echo hello world\n", 600) // 10 KB
	for _, mode := range []string{"manual", "off"} {
		p := mustPolicy(t, mode, nil, nil)
		for _, cmd := range []string{
			"bash -c '" + pad + "rm -rf /'",
			"bash <<'EOF'\n" + pad + "rm -rf /\nEOF",
			"bash <<EOF\n" + pad + "rm -rf /\nEOF",
			"eval '" + pad + "rm -rf /'",
			"sh -c \"" + pad + "rm -rf /\"",
			"S='" + pad + "rm -rf /'; bash -c \"$S\"",
		} {
			if v := p.Check(cmd, testCtx); v.Action != Block || v.By != ByFloor || !hasRule(v.Need, "rm-system-dir") {
				t.Errorf("mode %s: %.30q… ending in rm -rf /: %s by %q", mode, cmd, v.Action, v.By)
			}
		}
	}
}

// BenchmarkHostile measures every input of the reviews at a megabyte and
// the largest accepted inputs: ns/op and B/op as usual, cpu-ns/op (the
// process's CPU time per check, which the machine's load does not
// inflate as it does wall time), and peak-RSS-MB, the growth of the
// resident memory of a fresh process over one check (its peak, reset
// just before, less what it held then). It asserts nothing: the figures
// are for docs/approvals.md.
func BenchmarkHostile(b *testing.B) {
	sets := map[string]map[string]string{"1MiB": hostileShapes(1 << 20), "accepted": acceptedShapes()}
	for _, set := range []string{"1MiB", "accepted"} {
		names := make([]string, 0, len(sets[set]))
		for name := range sets[set] {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			cmd := sets[set][name]
			b.Run(set+"/"+strings.ReplaceAll(name, " ", "_"), func(b *testing.B) {
				p := DefaultPolicy()
				b.ReportAllocs()
				b.SetBytes(int64(len(cmd)))
				cpu0 := cpuTime()
				for b.Loop() {
					p.Check(cmd, testCtx)
				}
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
				if rss, err := peakRSS(set, name); err == nil {
					b.ReportMetric(rss, "peak-RSS-MB")
				} else {
					b.Logf("peak RSS: %v", err)
				}
			})
		}
	}
}

// cpuTime returns the CPU time the process has used, in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// peakRSS runs TestPeakRSSChild in a fresh process for one input and
// returns the growth of its peak resident memory over the check, in MB.
func peakRSS(set, name string) (float64, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestPeakRSSChild$", "-test.v")
	cmd.Env = append(os.Environ(), "BERTH_PEAK_SET="+set, "BERTH_PEAK_SHAPE="+name)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%v: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "PEAK-KB "); ok {
			kb, err := strconv.Atoi(v)
			return float64(kb) / 1024, err
		}
	}
	return 0, fmt.Errorf("no PEAK-KB line in %s", out)
}

// TestPeakRSSChild is the child of peakRSS: it builds one input, and
// prints how much its peak resident memory grew while checking it.
func TestPeakRSSChild(t *testing.T) {
	set, name := os.Getenv("BERTH_PEAK_SET"), os.Getenv("BERTH_PEAK_SHAPE")
	if set == "" {
		t.Skip("run by BenchmarkHostile")
	}
	cmd := map[string]map[string]string{"1MiB": hostileShapes(1 << 20), "accepted": acceptedShapes()}[set][name]
	if cmd == "" {
		t.Fatalf("no input %s/%s", set, name)
	}
	p := DefaultPolicy()
	p.Check("ls", testCtx) // what every check loads once
	runtime.GC()
	debug.FreeOSMemory() // the other inputs were built too: give their memory back
	time.Sleep(10 * time.Millisecond)
	// 5 resets the peak (VmHWM) to the resident memory now.
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatalf("reset the peak resident memory: %v", err)
	}
	before := procStatusKB(t, "VmRSS")
	p.Check(cmd, testCtx)
	fmt.Printf("PEAK-KB %d\n", procStatusKB(t, "VmHWM")-before)
}

// procStatusKB reads a field of /proc/self/status, in KB.
func procStatusKB(t *testing.T, field string) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}
