// Command testtimes runs `go test -json ...`, shows what plain `go test`
// would show, and ends with each package's wall time, slowest first, and
// why tests were skipped.
//
//	go run ./internal/testtimes go test -json -race -count=1 ./...
//
// It runs the command it is given (which must print go test's JSON
// events), and exits with that command's exit status. While the command
// runs it prints, as events arrive: the toolchain's build output; each
// test that fails, once its top-level test has ended, with its own output
// and that of its failed subtests (the framing lines of -v left out); the
// output of a package that fails outside any test, such as a timeout's
// panic; and the ok or FAIL line of each package. The output of tests that
// pass or skip is not shown, as in plain go test. At the end it prints
//
//	package wall times, slowest first (go test -json), wall 612.0 s:
//	  401.2 s  ok    github.com/a55dbaac/berth/backend/docker  312 passed
//	   88.0 s  FAIL  github.com/a55dbaac/berth/session  120 passed, 1 failed, 4 skipped
//	...
//	skipped tests, by reason:
//	  41  docker tests skipped: set BERTH_TEST_ENGINES=docker (or all) to run them
//
// A package's time is its test binary's, as go test reports it: the build
// before it is not counted.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 || strings.HasPrefix(os.Args[1], "-") {
		fmt.Fprintln(os.Stderr, "usage: testtimes go test -json [go test flags] [packages]")
		os.Exit(2)
	}
	// An interrupt reaches the whole process group, the tests with it:
	// stay to report what ended, and the command's status.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs argv, reports its events to stdout and returns its exit status.
func run(argv []string, stdout, stderr io.Writer) int {
	start := time.Now()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(stderr, "testtimes: %v\n", err)
		return 2
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "testtimes: start %s: %v\n", strings.Join(argv, " "), err)
		return 2
	}
	r := newReport(stdout)
	r.read(out)
	err = cmd.Wait()
	r.summary(time.Since(start))
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		if ee.ExitCode() < 0 { // killed by a signal
			return 1
		}
		return ee.ExitCode()
	case err != nil:
		fmt.Fprintf(stderr, "testtimes: %s: %v\n", strings.Join(argv, " "), err)
		return 2
	}
	return 0
}

// event is one of go test -json's test events or build events.
type event struct {
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
	ImportPath string // build events
}

type line struct {
	test string // the (sub)test it belongs to
	text string
}

// top is a top-level test's output, held until it ends.
type top struct {
	lines  []line
	failed map[string]bool // its tests that failed, itself included
}

type pkg struct {
	name    string
	tops    map[string]*top
	order   []string // tops in the order they started
	lines   []string // the package's own output, outside any test
	done    bool
	status  string // ok, FAIL
	elapsed float64
	counts  map[string]int // tests and subtests by how they ended: pass, fail, skip
}

type report struct {
	w     io.Writer
	pkgs  map[string]*pkg
	skips map[string]int
}

func newReport(w io.Writer) *report {
	return &report{w: w, pkgs: map[string]*pkg{}, skips: map[string]int{}}
}

// read handles events until r ends. A line that is not an event (the go
// command's own errors) is shown as it is.
func (r *report) read(in io.Reader) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for sc.Scan() {
		b := sc.Bytes()
		var ev event
		if len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &ev) != nil {
			fmt.Fprintln(r.w, string(b))
			continue
		}
		r.handle(ev)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(r.w, "testtimes: reading the events: %v\n", err)
	}
	// Whatever never ended (the command died) is shown.
	for _, p := range r.sorted() {
		if !p.done {
			r.flushPackage(p)
		}
	}
}

func (r *report) pkg(name string) *pkg {
	p := r.pkgs[name]
	if p == nil {
		p = &pkg{name: name, tops: map[string]*top{}, counts: map[string]int{}}
		r.pkgs[name] = p
	}
	return p
}

func topName(test string) string {
	name, _, _ := strings.Cut(test, "/")
	return name
}

func (r *report) handle(ev event) {
	switch ev.Action {
	case "build-output":
		fmt.Fprint(r.w, ev.Output)
		return
	case "build-fail":
		return
	}
	if ev.Package == "" {
		fmt.Fprint(r.w, ev.Output)
		return
	}
	p := r.pkg(ev.Package)
	if ev.Test == "" {
		switch ev.Action {
		case "output":
			p.lines = append(p.lines, ev.Output)
		case "pass", "fail", "skip":
			p.done, p.elapsed = true, ev.Elapsed
			p.status = map[string]string{"pass": "ok", "fail": "FAIL", "skip": "?"}[ev.Action]
			if ev.Action == "fail" {
				r.flushPackage(p)
			} else {
				r.printSummaryLines(p)
			}
		}
		return
	}
	name := topName(ev.Test)
	t := p.tops[name]
	if t == nil {
		t = &top{failed: map[string]bool{}}
		p.tops[name] = t
		p.order = append(p.order, name)
	}
	switch ev.Action {
	case "pass", "fail", "skip":
		p.counts[ev.Action]++
	}
	switch ev.Action {
	case "output":
		t.lines = append(t.lines, line{ev.Test, ev.Output})
	case "fail":
		t.failed[ev.Test] = true
		if ev.Test == name {
			r.printTest(t)
			r.forget(p, name)
		}
	case "skip":
		if reason := skipReason(t.lines, ev.Test); reason != "" {
			r.skips[reason]++
		}
		if ev.Test == name {
			r.forget(p, name)
		}
	case "pass":
		if ev.Test == name {
			r.forget(p, name)
		}
	}
}

func (r *report) forget(p *pkg, name string) {
	delete(p.tops, name)
	for i, n := range p.order {
		if n == name {
			p.order = append(p.order[:i], p.order[i+1:]...)
			break
		}
	}
}

// framing is -v's bookkeeping, which plain go test does not show.
func framing(s string) bool {
	for _, f := range []string{"=== RUN ", "=== PAUSE ", "=== CONT ", "=== NAME "} {
		if strings.HasPrefix(s, f) {
			return true
		}
	}
	return false
}

// printTest shows a failed top-level test: its own lines and those of its
// failed subtests.
func (r *report) printTest(t *top) {
	for _, l := range t.lines {
		if t.failed[l.test] && !framing(l.text) {
			fmt.Fprint(r.w, l.text)
		}
	}
}

// flushPackage shows a failed package: the tests still running (a timeout
// or a panic ended them) whole, then its own lines.
func (r *report) flushPackage(p *pkg) {
	for _, name := range p.order {
		for _, l := range p.tops[name].lines {
			if !framing(l.text) {
				fmt.Fprint(r.w, l.text)
			}
		}
	}
	p.tops, p.order = map[string]*top{}, nil
	for _, l := range p.lines {
		if !framing(l) {
			fmt.Fprint(r.w, l)
		}
	}
	p.lines = nil
}

// printSummaryLines shows a package that passed or has no tests as plain
// go test does: its ok (or ?) line alone.
func (r *report) printSummaryLines(p *pkg) {
	for _, l := range p.lines {
		if strings.HasPrefix(l, "ok ") || strings.HasPrefix(l, "?") || strings.HasPrefix(l, "coverage:") {
			fmt.Fprint(r.w, l)
		}
	}
	p.lines = nil
}

var logPrefix = regexp.MustCompile(`^\s+[^\s:]+\.go:\d+: `)

// skipReason is the first line a skipped test logged (its t.Skip
// message), without the file:line prefix.
func skipReason(lines []line, test string) string {
	for _, l := range lines {
		if l.test != test || framing(l.text) || strings.HasPrefix(l.text, "--- SKIP") {
			continue
		}
		if loc := logPrefix.FindStringIndex(l.text); loc != nil {
			return strings.TrimSpace(l.text[loc[1]:])
		}
	}
	return ""
}

// sorted returns the packages, slowest first.
func (r *report) sorted() []*pkg {
	var ps []*pkg
	for _, p := range r.pkgs {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].elapsed != ps[j].elapsed {
			return ps[i].elapsed > ps[j].elapsed
		}
		return ps[i].name < ps[j].name
	})
	return ps
}

// tally says how many tests and subtests passed, failed and skipped.
func (p *pkg) tally() string {
	s := fmt.Sprintf("%d passed", p.counts["pass"])
	if n := p.counts["fail"]; n > 0 {
		s += fmt.Sprintf(", %d failed", n)
	}
	if n := p.counts["skip"]; n > 0 {
		s += fmt.Sprintf(", %d skipped", n)
	}
	return s
}

// summary prints the packages' wall times and the skip reasons.
func (r *report) summary(wall time.Duration) {
	fmt.Fprintf(r.w, "\npackage wall times, slowest first (go test -json), wall %.1f s:\n", wall.Seconds())
	for _, p := range r.sorted() {
		status := p.status
		switch {
		case status == "?":
			continue // no test files
		case !p.done:
			status = "DIED"
		}
		fmt.Fprintf(r.w, "  %7.1f s  %-4s  %s  %s\n", p.elapsed, status, p.name, p.tally())
	}
	if len(r.skips) == 0 {
		return
	}
	type reason struct {
		text string
		n    int
	}
	var rs []reason
	for t, n := range r.skips {
		rs = append(rs, reason{t, n})
	}
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].n != rs[j].n {
			return rs[i].n > rs[j].n
		}
		return rs[i].text < rs[j].text
	})
	fmt.Fprintln(r.w, "skipped tests, by reason:")
	for _, x := range rs {
		fmt.Fprintf(r.w, "  %4d  %s\n", x.n, x.text)
	}
}
