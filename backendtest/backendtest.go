// Package backendtest is berth's conformance suite: the one call a
// backend's test file makes, like rclone's fstests.Run. Run drives a
// backend through every layer berth puts on top of it and checks the
// behaviour the contract promises, in groups:
//
//   - Process: backend.Process itself (exit and signal statuses, stdin EOF,
//     merged output, the after-exit bound, TTY or ErrNoTTY, concurrent
//     starts, Start after Close, backend.Output).
//   - Terminal: the persistent session through the terminal tool (framing,
//     state, timeouts that kill trees, interrupts, the output pipeline).
//   - Background: the process tool and the environment lifecycle.
//   - Hardening: what a hostile or careless command must not do to the
//     session (issue 9: wedges, escapes, shell state, forged frames).
//   - Fork: fork, checkpoint and restore through a manager (state carried,
//     independence both ways, a restore of a fork, bounds), or, where the
//     backend cannot checkpoint, a clear refusal (fork.go).
//   - Files: read_file, write_file, patch and search_files.
//   - FileWriter, when the backend implements backend.FileWriter:
//     byte-exact writes and clean failures.
//   - Persistence, when Options.Reopen is set: a second backend for the same
//     key reattaches to the same environment, and what was written under
//     the kept directory survives Close.
//   - Internal: the backend's own extras (Options.Internal).
//
// Environments are shared, shells are not (rclone's one remote with a fresh
// directory per case): each group gets one environment from the factory (a
// container, a pod, a sandbox, a connection), closed at the group's end,
// and each case runs over it in its own session (a fresh
// terminal.Environment, a new shell) with its own scratch directory and its
// own tag in the sleeps and needles it starts, looks for and kills; what a
// case closes is a handle, not the group's environment. The few cases that
// must own their environment (they close the backend, or follow an
// environment through its end) are marked freshEnv and build their own.
// Each run logs how many environments it created and fails above
// MaxEnvironments.
//
// A backend declares its configurations in one table (Config): the primary
// one runs the whole suite; secondary ones (another transport, another
// mode, another fake) run the groups they can change, some only in the
// full tier (TierVar).
//
// The suite needs a POSIX sh and busybox-level tools (sleep, cat, head,
// tr, wc, kill, setsid, mkdir, mktemp, stat, sha256sum, ln, chmod) inside
// the environment, a writable /tmp and $HOME, and /proc.
//
// Package session's own tests run the suite on the local backend, so a
// change to the session is tested by `go test ./session`.
package backendtest

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/session"
	"github.com/a55dbaac/berth/terminal"
)

// Options tunes the suite for a backend.
type Options struct {
	// Grace is the TERM-to-KILL grace the suite configures; zero means 1 s.
	Grace time.Duration
	// Cwd is the session's initial directory; "" keeps the backend default.
	Cwd string
	// Scratch is a writable directory inside the environment for the suite's
	// files; "" means /tmp.
	Scratch string
	// Reopen, for backends that keep environments beyond one backend value
	// (containers, instances, sandboxes), builds a backend for the given
	// environment key; two calls with the same key must reach the same
	// environment. It enables the Persistence group.
	Reopen func(t testing.TB, key string) backend.Backend
	// KeptDir is a directory inside the environment whose content a
	// persistent environment keeps across Close (default "$HOME").
	KeptDir string
	// Internal runs the backend's own tests inside the suite (rclone's
	// InternalTester), as the "Internal" group.
	Internal func(t *testing.T)
	// CheckpointDir is a directory inside the environment whose files a
	// checkpoint keeps (the Fork group writes its files there); "" means
	// Scratch.
	CheckpointDir string
}

// shellOnly names the tests about berth's own shell code and approval gate
// rather than the backend beneath them: shell options and hijacked names
// the session's code must survive, and nesting the gate refuses before
// anything runs. The same shell in the same image answers them the same
// over any transport, so a secondary configuration leaves them out unless
// it sets Config.ShellTests. Run checks that the suite has each.
var shellOnly = map[string]bool{
	"Hardening/ShellStateImmunity":   true,
	"Hardening/HijackedBuiltinNames": true,
	"Hardening/DeepNestingRefused":   true,
}

// namedTest is one case of a group. fresh says the case must own its
// environment (it closes the backend, or counts on one that no other case
// has used); every other case runs over its group's shared environment.
type namedTest struct {
	name  string
	fn    func(*Suite, *testing.T)
	fresh bool
}

// The values of namedTest.fresh, so that each case's line says which.
const (
	sharedEnv = false // runs over its group's environment
	freshEnv  = true  // owns its environments
)

// Suite is what one case of the suite sees: its configuration's options,
// the backend it runs on and its own tag.
type Suite struct {
	opts Options
	// newBackend builds a backend for a fresh environment (the
	// configuration's factory, counted).
	newBackend func(testing.TB) backend.Backend
	// newFrom builds one from options (Target.NewFrom, counted; nil when
	// the configuration gives none), admin removes checkpoints
	// (Target.Checkpoints), and name is the backend's name: the Fork
	// group's.
	newFrom func(testing.TB, backend.Options) backend.Backend
	admin   backend.CheckpointAdmin
	name    string
	// forks is the Fork group's fixture, one per run of a group.
	forks *forkFixture
	// shared is the group's environment the case runs over; nil for a case
	// that owns its environments (fresh), which s.f builds anew.
	shared backend.Backend
	// tag makes the sleep durations and needles the case looks for unique
	// to the case: cases share an environment, suites for different
	// backends may run at once on one host (the local and ssh suites both
	// run their commands on this machine), and no case may count or kill
	// another's processes.
	tag string
}

// f returns the backend a case runs on: a handle on the group's shared
// environment (whose Close ends the handle only), or, for a fresh case, a
// backend for a new environment of its own, closed with t.
func (s *Suite) f(t testing.TB) backend.Backend {
	if s.shared == nil {
		return s.newBackend(t)
	}
	return share(s.shared)
}

// run runs the groups whose names ("Group" or "Group/Test") sel accepts.
// Each group of cases gets one environment from the factory, closed at the
// group's end; each case gets its own session over it (a fresh
// terminal.Environment), its own scratch directory and its own tag. A case
// marked fresh builds its own environments instead.
func (s *Suite) run(t *testing.T, sel func(string) bool) {
	group := func(name string, tests []namedTest) {
		var run []namedTest
		for _, c := range tests {
			if sel(name + "/" + c.name) {
				run = append(run, c)
			}
		}
		if len(run) == 0 {
			return
		}
		t.Run(name, func(t *testing.T) {
			// One environment for the group, built before its first case
			// and closed after its last (t's cleanup).
			var shared backend.Backend
			for _, c := range run {
				if !c.fresh {
					shared = s.newBackend(t)
					break
				}
			}
			forks := &forkFixture{gt: t}
			for _, c := range run {
				t.Run(c.name, func(t *testing.T) {
					cs := &Suite{opts: s.opts, newBackend: s.newBackend, newFrom: s.newFrom, admin: s.admin, name: s.name, forks: forks, tag: newTag()}
					if !c.fresh {
						cs.shared = shared
					}
					c.fn(cs, t)
				})
			}
		})
	}
	for _, g := range suiteGroups() {
		group(g.name, g.tests)
	}
	if sel("Files") {
		t.Run("Files", func(t *testing.T) {
			cs := &Suite{opts: s.opts, newBackend: s.newBackend, tag: newTag()}
			RunFiles(t, cs.env(t))
		})
	}
	if sel("FileWriter") {
		t.Run("FileWriter", func(t *testing.T) {
			be := s.newBackend(t)
			fw, ok := be.(backend.FileWriter)
			if !ok {
				t.Skipf("%s does not implement backend.FileWriter", be.Name())
			}
			s.fileWriterTests(t, be, fw)
		})
	}
	if sel("Persistence") {
		t.Run("Persistence", func(t *testing.T) {
			if s.opts.Reopen == nil {
				t.Skip("the backend keeps no environments (Options.Reopen is nil)")
			}
			for _, c := range persistenceTests() {
				if sel("Persistence/" + c.name) {
					t.Run(c.name, func(t *testing.T) {
						c.fn(&Suite{opts: s.opts, newBackend: s.newBackend, tag: newTag()}, t)
					})
				}
			}
		})
	}
	if s.opts.Internal != nil && sel("Internal") {
		t.Run("Internal", s.opts.Internal)
	}
}

// suiteGroups are the groups of cases, in the order they run, ahead of
// Files, FileWriter, Persistence and Internal.
func suiteGroups() []struct {
	name  string
	tests []namedTest
} {
	return []struct {
		name  string
		tests []namedTest
	}{
		{"Process", processTests()},
		{"Terminal", terminalTests()},
		{"Background", backgroundTests()},
		{"Hardening", hardeningTests()},
		{"Fork", forkTests()},
	}
}

// tags holds the tags given out in this process, so that no two cases
// share one.
var tags = struct {
	sync.Mutex
	used map[string]bool
}{used: map[string]bool{}}

// newTag returns a tag no other case of this process has: six random
// digits, so that a sleep of "1001"+tag seconds stays a number every sleep
// reads.
func newTag() string {
	tags.Lock()
	defer tags.Unlock()
	for {
		var b [3]byte
		rand.Read(b[:])
		tag := fmt.Sprintf("%06d", (int(b[0])<<16|int(b[1])<<8|int(b[2]))%1000000)
		if !tags.used[tag] {
			tags.used[tag] = true
			return tag
		}
	}
}

// terminalTests are the persistent session's behaviours through the
// terminal tool.
func terminalTests() []namedTest {
	return []namedTest{
		{"ExitCodeAndMergedOutput", (*Suite).testExitCodeAndMergedOutput, sharedEnv},
		{"CwdReportedAndPersists", (*Suite).testCwd, sharedEnv},
		{"StatePersists", (*Suite).testStatePersists, sharedEnv},
		{"Workdir", (*Suite).testWorkdir, sharedEnv},
		{"DeletedCwdFallsBack", (*Suite).testDeletedCwd, sharedEnv},
		{"NoTrailingNewline", (*Suite).testNoTrailingNewline, sharedEnv},
		{"MarkerLookalikes", (*Suite).testMarkerLookalikes, sharedEnv},
		{"Heredoc", (*Suite).testHeredoc, sharedEnv},
		{"MultiLine", (*Suite).testMultiLine, sharedEnv},
		{"SyntaxErrors", (*Suite).testSyntaxErrors, sharedEnv},
		{"StdinDefaultsToDevNull", (*Suite).testStdinDevNull, sharedEnv},
		{"StdinData", (*Suite).testStdinData, sharedEnv},
		{"Pagers", (*Suite).testPagers, sharedEnv},
		{"ShellEndingCommands", (*Suite).testShellEnding, sharedEnv},
		{"TimeoutKillsTree", (*Suite).testTimeoutKillsTree, sharedEnv},
		{"TimeoutBuiltinLoop", (*Suite).testTimeoutBuiltinLoop, sharedEnv},
		{"Interrupt", (*Suite).testInterrupt, sharedEnv},
		{"DetachedChildrenDoNotHang", (*Suite).testDetached, sharedEnv},
		{"BinaryOutput", (*Suite).testBinaryOutput, sharedEnv},
		{"UTF8Output", (*Suite).testUTF8, sharedEnv},
		{"ANSIStripped", (*Suite).testANSI, sharedEnv},
		{"SecretsRedacted", (*Suite).testRedaction, sharedEnv},
		{"LongSingleLine", (*Suite).testLongLine, sharedEnv},
		{"HugeOutputTruncated", (*Suite).testHugeOutput, sharedEnv},
		{"ExitCodeMeaning", (*Suite).testExitCodeMeaning, sharedEnv},
	}
}

// env builds a terminal environment on a fresh backend.
func (s *Suite) env(t *testing.T) *terminal.Environment {
	t.Helper()
	be := s.f(t)
	e := terminal.New(be, terminal.Options{
		DefaultTimeout: 60 * time.Second,
		MaxOutputChars: 50000,
		SpillDir:       t.TempDir(),
		Session:        session.Options{Grace: s.opts.Grace, Cwd: s.opts.Cwd},
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		e.Close(ctx)
	})
	return e
}

// run executes a command and fails the test if it could not run at all.
func run(t *testing.T, e *terminal.Environment, req terminal.Request) terminal.Result {
	t.Helper()
	r := e.Run(context.Background(), req)
	if r.Error != nil {
		t.Fatalf("command %q: error %s", req.Command, *r.Error)
	}
	return r
}

func cmd(c string) terminal.Request { return terminal.Request{Command: c} }

// bulk is a command that moves tens of megabytes through the backend: a
// cloud sandbox on a busy machine may need minutes for that, and a
// timeout (exit 124) would fail the test for the machine's speed, not
// for what it checks. The time it took is not asserted.
func bulk(c string) terminal.Request { return terminal.Request{Command: c, Timeout: 600} }

// expect runs a command and checks its exact output and exit code.
func expect(t *testing.T, e *terminal.Environment, req terminal.Request, wantOut string, wantCode int) terminal.Result {
	t.Helper()
	r := run(t, e, req)
	if r.Output != wantOut || r.ExitCode != wantCode {
		t.Fatalf("command %q: got output %q exit %d, want %q exit %d", req.Command, r.Output, r.ExitCode, wantOut, wantCode)
	}
	return r
}

func (s *Suite) scratch(t *testing.T, e *terminal.Environment) string {
	t.Helper()
	dir := fmt.Sprintf("%s/berth-ct-%d", s.opts.Scratch, time.Now().UnixNano())
	expect(t, e, cmd("mkdir -p "+dir), "", 0)
	t.Cleanup(func() { e.Run(context.Background(), cmd("rm -rf "+dir)) })
	return dir
}

func (s *Suite) testExitCodeAndMergedOutput(t *testing.T) {
	e := s.env(t)
	expect(t, e, cmd("echo out1; echo err1 >&2; echo out2; echo err2 1>&2; exit_code_test() { return 7; }; exit_code_test"),
		"out1\nerr1\nout2\nerr2", 7)
	expect(t, e, cmd("false"), "", 1)
	expect(t, e, cmd("true"), "", 0)
	r := run(t, e, cmd("nonexistent-command-xyz"))
	if r.ExitCode != 127 || !strings.Contains(r.Output, "nonexistent-command-xyz") {
		t.Fatalf("missing command: got %q exit %d, want a message naming it and exit 127", r.Output, r.ExitCode)
	}
}

func (s *Suite) testCwd(t *testing.T) {
	e := s.env(t)
	dir := s.scratch(t, e)
	r := expect(t, e, cmd("cd "+dir), "", 0)
	if r.Cwd != dir {
		t.Fatalf("cwd after cd: got %q, want %q", r.Cwd, dir)
	}
	r = expect(t, e, cmd("pwd"), dir, 0)
	if r.Cwd != "" {
		t.Fatalf("cwd reported although unchanged: %q", r.Cwd)
	}
	expect(t, e, cmd("mkdir -p sub && cd sub && pwd"), dir+"/sub", 0)
	expect(t, e, cmd("pwd"), dir+"/sub", 0)
}

func (s *Suite) testStatePersists(t *testing.T) {
	e := s.env(t)
	expect(t, e, cmd("export BERTH_T1='a b'; BERTH_PLAIN=p"), "", 0)
	expect(t, e, cmd("greet() { echo \"hi $1\"; }"), "", 0)
	expect(t, e, cmd("alias ll='echo aliased'"), "", 0)
	expect(t, e, cmd("echo \"$BERTH_T1|$BERTH_PLAIN\"; greet you"), "a b|p\nhi you", 0)
	expect(t, e, cmd("ll"), "aliased", 0)
	expect(t, e, cmd("sh -c 'echo $BERTH_T1'"), "a b", 0)
}

func (s *Suite) testWorkdir(t *testing.T) {
	e := s.env(t)
	dir := s.scratch(t, e)
	expect(t, e, cmd("cd "+dir), "", 0)
	r := expect(t, e, terminal.Request{Command: "pwd", Workdir: "/"}, "/", 0)
	if r.Cwd != "" {
		t.Fatalf("workdir moved the session cwd to %q", r.Cwd)
	}
	expect(t, e, cmd("pwd"), dir, 0)
	r = run(t, e, terminal.Request{Command: "pwd", Workdir: dir + "/missing"})
	if r.ExitCode == 0 || !strings.Contains(r.Output, "missing") {
		t.Fatalf("missing workdir: got %q exit %d, want an error naming it", r.Output, r.ExitCode)
	}
	r = e.Run(context.Background(), terminal.Request{Command: "pwd", Workdir: "relative/dir"})
	if r.Error == nil || !strings.Contains(*r.Error, "relative/dir") {
		t.Fatalf("relative workdir: want an error naming it, got %+v", r)
	}
	expect(t, e, cmd("pwd"), dir, 0)
}

func (s *Suite) testDeletedCwd(t *testing.T) {
	e := s.env(t)
	dir := s.scratch(t, e)
	expect(t, e, cmd("mkdir -p "+dir+"/a/b && cd "+dir+"/a/b && rm -rf "+dir+"/a"), "", 0)
	r := expect(t, e, cmd("pwd"), dir, 0)
	if r.Cwd != dir {
		t.Fatalf("cwd after its deletion: got %q, want the nearest parent %q", r.Cwd, dir)
	}
}

func (s *Suite) testNoTrailingNewline(t *testing.T) {
	e := s.env(t)
	expect(t, e, cmd("printf abc"), "abc", 0)
	expect(t, e, cmd("printf 'x\\ny'"), "x\ny", 0)
	expect(t, e, cmd("printf ''"), "", 0)
	expect(t, e, cmd("echo next"), "next", 0)
}

func (s *Suite) testMarkerLookalikes(t *testing.T) {
	e := s.env(t)
	// Frame-like text: the prefix, fake nonces, NULs and status fields.
	// NUL bytes may be dropped or replaced by the output pipeline; what
	// matters is that the text around them arrives and the command ends
	// with its own exit code.
	r := run(t, e, cmd(`printf '\n__BERTH_0123456789abcdef01234567_0\000/\000\000tail'; exit 5`))
	got := strings.NewReplacer("\x00", "", "\uFFFD", "").Replace(r.Output)
	if got != "\n__BERTH_0123456789abcdef01234567_0/tail" || r.ExitCode != 5 {
		t.Fatalf("frame look-alike: got %q exit %d", r.Output, r.ExitCode)
	}
	expect(t, e, cmd(`echo __BERTH_; echo '__BERTH_%s_%s'; printf '\n__BERTH_'`), "__BERTH_\n__BERTH_%s_%s\n\n__BERTH_", 0)
	expect(t, e, cmd("echo after"), "after", 0)
}

func (s *Suite) testHeredoc(t *testing.T) {
	e := s.env(t)
	expect(t, e, cmd("X=val\ncat <<'EOF'\nliteral $X 'q' \"dq\" `bt`\nEOF\ncat <<EOF\nexpanded $X\nEOF"),
		"literal $X 'q' \"dq\" `bt`\nexpanded val", 0)
	dir := s.scratch(t, e)
	expect(t, e, cmd("cat > "+dir+"/f.py <<'PY'\nprint('hi')\nif True:\n    print(\"x\")\nPY\ncat "+dir+"/f.py"),
		"print('hi')\nif True:\n    print(\"x\")", 0)
}

func (s *Suite) testMultiLine(t *testing.T) {
	e := s.env(t)
	expect(t, e, cmd("for i in 1 2 3\ndo\n  echo \"n=$i\"\ndone\nif [ 1 = 1 ]; then\n  echo yes\nfi"), "n=1\nn=2\nn=3\nyes", 0)
	expect(t, e, cmd("echo a \\\n  b \\\n  c"), "a b c", 0)
}

func (s *Suite) testSyntaxErrors(t *testing.T) {
	e := s.env(t)
	expect(t, e, cmd("export KEEP=1"), "", 0)
	for _, bad := range []string{"if then fi", "echo 'unbalanced", "echo \"unbalanced", "echo $(", "( echo", "}", "case x in", "f() {", "echo `x"} {
		r := run(t, e, cmd(bad))
		if r.ExitCode != 2 {
			t.Errorf("syntax error %q: exit %d (output %q), want 2", bad, r.ExitCode, r.Output)
		}
		expect(t, e, cmd("echo ok $KEEP"), "ok 1", 0)
	}
}

func (s *Suite) testStdinDevNull(t *testing.T) {
	e := s.env(t)
	// A stdin that was not /dev/null would hold each of these until its
	// timeout: exit 124 instead of 0.
	expect(t, e, terminal.Request{Command: "cat", Timeout: 10}, "", 0)
	expect(t, e, terminal.Request{Command: "read x; echo \"[$x] $?\"", Timeout: 10}, "[] 1", 0)
	expect(t, e, terminal.Request{Command: "wc -c", Timeout: 10}, "0", 0)
}

func (s *Suite) testStdinData(t *testing.T) {
	e := s.env(t)
	in := "line one\nline 'two' \"q\" $HOME \\n\n"
	expect(t, e, terminal.Request{Command: "cat", StdinData: &in}, strings.TrimRight(in, "\n"), 0)
	bin := string([]byte{0, 1, 2, 255, 254, '\n', 'z', 0})
	expect(t, e, terminal.Request{Command: "wc -c", StdinData: &bin}, "8", 0)
	expect(t, e, terminal.Request{Command: "read a; read b; echo \"$b/$a\"", StdinData: ptr("1\n2\n")}, "2/1", 0)
	expect(t, e, cmd("cat"), "", 0) // stdin is /dev/null again

	// Large input (past the inline limit) with every byte value in it.
	var big strings.Builder
	for i := 0; i < 4096; i++ {
		big.WriteString("line of input\x00\xff\n")
	}
	big.WriteString("END")
	bigs := big.String()
	expect(t, e, terminal.Request{Command: "wc -c", StdinData: &bigs}, fmt.Sprint(len(bigs)), 0)
	expect(t, e, terminal.Request{Command: "tail -n 1; echo; echo $?", StdinData: &bigs}, "END\n0", 0)
	// The large-input files (named by a 24-hex nonce) are removed after
	// use, also when the command is rejected as incomplete.
	if r := run(t, e, terminal.Request{Command: "cat 'unclosed", StdinData: &bigs}); r.ExitCode != 2 {
		t.Fatalf("incomplete command with large stdin: exit %d", r.ExitCode)
	}
	expect(t, e, cmd("cat; ls /tmp/.berth-in-"+strings.Repeat("[0-9a-f]", 24)+" 2>/dev/null | wc -l"), "0", 0)
}

func ptr(s string) *string { return &s }

func (s *Suite) testPagers(t *testing.T) {
	e := s.env(t)
	expect(t, e, cmd("echo $PAGER $GIT_PAGER"), "cat cat", 0)
}

func (s *Suite) testShellEnding(t *testing.T) {
	e := s.env(t)
	dir := s.scratch(t, e)
	expect(t, e, cmd("cd "+dir+" && export SURVIVES=yes"), "", 0)
	for _, c := range []struct {
		cmd  string
		code int
	}{
		{"exit 3", 3},
		{"exec true", 0},
		{"set -e; false; echo not-reached", 1},
		{"kill -9 $$", 137},
		{"echo bye; exit 0", 0},
	} {
		r := run(t, e, cmd(c.cmd))
		if r.ExitCode != c.code {
			t.Errorf("%q: exit %d (output %q), want %d", c.cmd, r.ExitCode, r.Output, c.code)
		}
		expect(t, e, cmd("echo \"$SURVIVES\"; pwd"), "yes\n"+dir, 0)
	}
}

// countProcs returns a command counting live processes whose command line
// contains needle (built so the counting command itself never matches).
// whenRunning calls f once a process with the argument arg runs in e's
// environment, seen through a process of its own (or after two minutes,
// when it never does), so that a test interrupts a command that runs
// rather than one a slow environment is still starting a shell for.
func whenRunning(e *terminal.Environment, arg string, f func()) {
	go func() {
		defer f()
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			out, _, err := backend.Output(ctx, e.Backend(), backend.ProcSpec{Argv: []string{"/bin/sh", "-c", countArg(arg)}}, nil, 4096)
			cancel()
			if n := strings.TrimSpace(string(out)); err == nil && n != "" && n != "0" {
				return
			}
		}
	}()
}

// hangGuard bounds how long a call the suite expects to return promptly
// may take before the suite calls it hung. It is no measure of speed (the
// suite never asserts one): the commands it guards would otherwise run
// for many minutes, and a loaded machine must never trip it.
const hangGuard = 45 * time.Second

// grepArg returns a command listing the /proc/PID/cmdline files of the
// live processes with an argument that contains arg (exact: that is arg).
// It is one grep however many processes the machine runs (a loop forking
// tr per process took over a minute on a loaded host), and the needle
// reaches grep on its stdin, split in two in the command text, so neither
// grep's nor the calling shell's command line counts.
func grepArg(arg string, exact bool) string {
	flags := "-lszF"
	if exact {
		flags = "-lszxF"
	}
	half := len(arg) / 2
	return fmt.Sprintf(`printf '%%s%%s\n' '%s' '%s' | grep %s -f /dev/stdin /proc/[0-9]*/cmdline`, arg[:half], arg[half:], flags)
}

// countProcs returns a command printing how many live processes have an
// argument containing arg (a sleep's duration, a shell's -c script).
func countProcs(arg string) string {
	return grepArg(arg, false) + ` | wc -l | tr -d ' '`
}

// killProcs returns a command killing the processes countProcs counts.
func killProcs(arg string) string {
	return `for f in $(` + grepArg(arg, false) + `); do p=${f#/proc/}; kill -9 ${p%/cmdline}; done 2>/dev/null; true`
}

func (s *Suite) testTimeoutKillsTree(t *testing.T) {
	e := s.env(t)
	expect(t, e, cmd("export KEPT=1; cd /"), "", 0)
	start := time.Now()
	r := run(t, e, terminal.Request{Command: "echo started; sleep 1001" + s.tag + " & sh -c 'sleep 1001" + s.tag + " & sleep 1001" + s.tag + "'; sleep 1001" + s.tag, Timeout: 1})
	elapsed := time.Since(start)
	want := "started\n[Command timed out after 1s]"
	if r.Output != want || r.ExitCode != 124 {
		t.Fatalf("timeout: got %q exit %d, want %q exit 124", r.Output, r.ExitCode, want)
	}
	// A hang guard, not a measure of speed: the tree sleeps for 1001 s, so
	// a timeout that waited for it instead of killing it takes far longer.
	if elapsed > hangGuard {
		t.Errorf("timeout call took %v: the timeout waited for the command instead of killing it", elapsed)
	}
	expect(t, e, cmd(countProcs("1001"+s.tag)), "0", 0)
	expect(t, e, cmd("echo $KEPT; pwd"), "1\n/", 0)

	// A command that ignores TERM is killed after the grace period.
	r = run(t, e, terminal.Request{Command: "trap '' TERM; sh -c \"trap '' TERM; sleep 1002" + s.tag + "\" & sleep 1002" + s.tag, Timeout: 1})
	if r.ExitCode != 124 {
		t.Fatalf("TERM-ignoring command: exit %d, want 124", r.ExitCode)
	}
	expect(t, e, cmd(countProcs("1002"+s.tag)), "0", 0)
}

func (s *Suite) testTimeoutBuiltinLoop(t *testing.T) {
	e := s.env(t)
	r := run(t, e, terminal.Request{Command: "while :; do :; done", Timeout: 1})
	if r.ExitCode != 124 || !strings.HasSuffix(r.Output, "[Command timed out after 1s]") {
		t.Fatalf("builtin loop: got %q exit %d, want the timeout marker and 124", r.Output, r.ExitCode)
	}
	expect(t, e, cmd("echo alive"), "alive", 0)
}

func (s *Suite) testInterrupt(t *testing.T) {
	e := s.env(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancelled := make(chan time.Time, 1)
	whenRunning(e, "1003"+s.tag, func() { cancelled <- time.Now(); cancel() })
	r := e.Run(ctx, terminal.Request{Command: "echo begin; sleep 1003" + s.tag, Timeout: 60})
	if r.Output != "begin\n[Command interrupted]" || r.ExitCode != 130 {
		t.Fatalf("interrupt: got %q exit %d", r.Output, r.ExitCode)
	}
	if d := time.Since(<-cancelled); d > hangGuard {
		t.Errorf("interrupt took %v: it waited for the command instead of killing it", d)
	}
	expect(t, e, cmd(countProcs("1003"+s.tag)), "0", 0)
	expect(t, e, cmd("echo alive"), "alive", 0)
}

func (s *Suite) testDetached(t *testing.T) {
	e := s.env(t)
	t.Cleanup(func() {
		e.Run(context.Background(), cmd(killProcs("1004"+s.tag)))
		e.Run(context.Background(), cmd(killProcs("1005"+s.tag)))
	})
	for _, c := range []string{"setsid sleep 1004" + s.tag + " & disown", "cd / && sleep 1005" + s.tag + " &", "sleep 1004" + s.tag + " &"} {
		start := time.Now()
		r := run(t, e, terminal.Request{Command: c, Timeout: 20})
		// A call the background child held would end at its timeout (exit
		// 124) or later; exit 0 says it returned on its own.
		if r.ExitCode != 0 {
			t.Errorf("%q: exit %d output %q: a background child holding the output must not hang the call", c, r.ExitCode, r.Output)
		}
		if d := time.Since(start); d > hangGuard {
			t.Errorf("%q took %v: a background child held the call", c, d)
		}
	}
	expect(t, e, cmd("echo still fine"), "still fine", 0)
}

func (s *Suite) testBinaryOutput(t *testing.T) {
	e := s.env(t)
	r := run(t, e, cmd("head -c 100000 /dev/urandom"))
	if r.ExitCode != 0 || !utf8.ValidString(r.Output) {
		t.Fatalf("random bytes: exit %d, valid UTF-8 %v", r.ExitCode, utf8.ValidString(r.Output))
	}
	expect(t, e, cmd(`printf 'a\377\376b\n'`), "a\uFFFD\uFFFDb", 0)
	expect(t, e, cmd("echo after"), "after", 0)
}

func (s *Suite) testUTF8(t *testing.T) {
	e := s.env(t)
	// 40 000 three-byte characters cross every read boundary of the stream.
	r := run(t, e, cmd(`i=0; s=""; while [ $i -lt 100 ]; do s="$s€"; i=$((i+1)); done; j=0; while [ $j -lt 400 ]; do printf %s "$s"; j=$((j+1)); done`))
	if r.ExitCode != 0 || r.Output != strings.Repeat("€", 40000) {
		t.Fatalf("multi-byte output damaged: exit %d, %d runes, valid %v", r.ExitCode, utf8.RuneCountInString(r.Output), utf8.ValidString(r.Output))
	}
	expect(t, e, cmd("echo 'héllo wörld ✓'"), "héllo wörld ✓", 0)
}

func (s *Suite) testANSI(t *testing.T) {
	e := s.env(t)
	expect(t, e, cmd(`printf '\033[1;31mred\033[0m \033]0;title\007plain\033[2K\n'`), "red plain", 0)
}

func (s *Suite) testRedaction(t *testing.T) {
	e := s.env(t)
	secret := "sk-ant-api03-" + strings.Repeat("x9Y8", 10)
	r := run(t, e, cmd("echo key="+secret))
	if strings.Contains(r.Output, secret) || !strings.HasPrefix(r.Output, "key=") {
		t.Fatalf("secret not redacted: %q", r.Output)
	}
}

func (s *Suite) testLongLine(t *testing.T) {
	e := s.env(t)
	r := run(t, e, bulk("head -c 10000000 /dev/zero | tr '\\000' a; echo; echo end"))
	if r.ExitCode != 0 {
		t.Fatalf("exit %d", r.ExitCode)
	}
	checkTruncated(t, r, 10000000+1+3)
	if !strings.HasPrefix(r.Output, "aaaa") || !strings.HasSuffix(r.Output, "a\nend") {
		t.Fatalf("head/tail wrong: %q ... %q", r.Output[:20], r.Output[len(r.Output)-20:])
	}
}

// testHugeOutput: output of three times the spill file's cap (8 MiB) comes
// back cut to the character cap with the notice and its whole count, the
// spill file holds what its cap allows, and the session goes on.
func (s *Suite) testHugeOutput(t *testing.T) {
	e := s.env(t)
	r := run(t, e, bulk("head -c 24000000 /dev/zero | tr '\\000' b"))
	if r.ExitCode != 0 {
		t.Fatalf("exit %d", r.ExitCode)
	}
	checkTruncated(t, r, 24000000)
	expect(t, e, cmd("echo after"), "after", 0)
}

func checkTruncated(t *testing.T, r terminal.Result, total int) {
	t.Helper()
	if n := utf8.RuneCountInString(r.Output); n > 50000 {
		t.Fatalf("output is %d chars, over the 50 000 cap", n)
	}
	notice := "... [OUTPUT TRUNCATED - "
	if !strings.Contains(r.Output, notice) {
		t.Fatalf("no truncation notice in output")
	}
	if r.OutputTotalChars != total {
		t.Errorf("output_total_chars %d, want %d", r.OutputTotalChars, total)
	}
	if !strings.Contains(r.Output, "out of "+group(total)+" total]") {
		t.Errorf("notice does not give the total %s", group(total))
	}
	if r.FullOutputPath == "" {
		t.Fatalf("no full_output_path")
	}
	st, err := os.Stat(r.FullOutputPath)
	if err != nil {
		t.Fatalf("spill file: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("spill file mode %v, want 0600", st.Mode().Perm())
	}
	if want := min(total, 5000000); st.Size() < int64(want) {
		t.Errorf("spill file has %d bytes, want at least %d", st.Size(), want)
	}
}

// group formats n with thousands separators.
func group(n int) string {
	s := strconv.Itoa(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func (s *Suite) testExitCodeMeaning(t *testing.T) {
	e := s.env(t)
	r := run(t, e, cmd("echo abc | grep zzz"))
	if r.ExitCode != 1 || r.ExitCodeMeaning == "" {
		t.Fatalf("grep without match: exit %d meaning %q", r.ExitCode, r.ExitCodeMeaning)
	}
	r = run(t, e, cmd("echo fine"))
	if r.ExitCodeMeaning != "" {
		t.Fatalf("meaning on success: %q", r.ExitCodeMeaning)
	}
}
