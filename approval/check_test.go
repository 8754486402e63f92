package approval

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/approval/internal/scan/cases"
)

// testCtx is a local machine: the user dev in a project directory, on a
// file system without symbolic links (the manager gives a local backend
// NativeResolve; these tests must not depend on this machine's files).
var testCtx = Context{Backend: "local", Cwd: "/home/dev/proj", Home: "/home/dev", BerthHome: "/home/dev/.berth", ConfigPath: "/home/dev/.berth/config.yaml",
	Resolve: func(p string) string { return p }}

const (
	ok    = "ok"    // no rule matched
	ask   = "ask"   // needs approval
	floor = "floor" // blocked by the hardline floor
)

// testCases are the analyser's cases (internal/scan/testdata), which the
// policy must decide the same way.
func testCases(t testing.TB) []cases.Case {
	t.Helper()
	all, err := cases.All(filepath.Join("internal", "scan", "testdata"))
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// TestCasesThroughPolicy: every case of the analyser's files gets its
// verdict from the policy in manual mode, and in mode off only the floor
// holds (what asks in manual mode runs, allowed by the mode).
func TestCasesThroughPolicy(t *testing.T) {
	manual, off := DefaultPolicy(), mustPolicy(t, "off", nil, nil)
	for _, c := range testCases(t) {
		ctx := testCtx
		ctx.Names, ctx.BerthPIDs, ctx.PPID, ctx.Definitions, ctx.IFS = c.Names, c.BerthPIDs, c.PPID, c.Definitions, c.IFS
		for _, p := range []*Policy{manual, off} {
			v := p.Check(c.Cmd, ctx)
			want := c.Want
			if want == ask && p == off {
				want = "allow/mode"
			}
			if got := verdictOf(v); got != want {
				t.Errorf("mode %s: %s: got %s, want %s; findings: %s", p.Mode(), c, got, want, describe(v.Findings))
				continue
			}
			if c.Rule != "" && !hasRule(v.Need, c.Rule) {
				t.Errorf("mode %s: %s: not decided by rule %s; deciding findings: %s", p.Mode(), c, c.Rule, describe(v.Need))
			}
		}
	}
}

// verdictOf names a verdict as the case files do.
func verdictOf(v Verdict) string {
	switch {
	case v.Action == Block && v.By == ByFloor:
		return floor
	case v.Action == Ask:
		return ask
	case v.Action == Allow && len(v.Findings) == 0:
		return ok
	}
	return v.Action.String() + "/" + string(v.By)
}

func hasRule(fs []Finding, id string) bool {
	for _, f := range fs {
		if f.Rule.ID == id {
			return true
		}
	}
	return false
}

func describe(fs []Finding) string {
	if len(fs) == 0 {
		return "none"
	}
	var parts []string
	for _, f := range fs {
		parts = append(parts, f.Rule.ID+" on "+strings.TrimSpace(f.Command)+" ("+f.Detail+")")
	}
	return strings.Join(parts, "; ")
}

// FuzzCheck: any input terminates without panicking, and a command that
// contains a floor command after a separator is still blocked.
func FuzzCheck(f *testing.F) {
	for _, c := range testCases(f) {
		f.Add(c.Cmd)
	}
	for _, cmd := range hostileShapes(2048) { // the reviews' shapes, small
		f.Add(cmd)
	}
	for _, cmd := range reviewInputs {
		f.Add(cmd)
	}
	f.Add(`$'\x` + "\x00")
	f.Add(`kill -s`)
	f.Add(`dd of=`)
	f.Add(`sed -e`)
	f.Add("curl -o")
	f.Add("bash -o")
	f.Fuzz(func(t *testing.T, cmd string) {
		p := DefaultPolicy()
		p.Check(cmd, testCtx)
		p.CheckWrite(cmd, testCtx)
		if strings.ContainsAny(cmd, "`\\'\"$()<>{}#") || strings.Contains(cmd, "<<") {
			return // the suffix could land inside a quote, comment or heredoc
		}
		v := p.Check(cmd+"\nrm -rf /", testCtx)
		if v.Action != Block {
			t.Errorf("%q followed by rm -rf /: %s", cmd, v.Action)
		}
	})
}

func BenchmarkCheck(b *testing.B) {
	p := DefaultPolicy()
	cmds := []string{
		"ls -la",
		"cd /home/dev/proj && npm ci && npm run build 2>&1 | tail -n 50",
		`bash -c "cd $DIR && git push --force origin main"`,
		`for f in *.log; do gzip "$f"; done; find . -name '*.tmp' -delete`,
	}
	for _, c := range cmds {
		b.Run(strings.Fields(c)[0], func(b *testing.B) {
			for b.Loop() {
				p.Check(c, testCtx)
			}
		})
	}
}

// Inputs built to blow up a checker (deep nesting, values that double,
// brace products, long chains) still get a verdict, and the floor still
// holds after them.
func TestHostileInputs(t *testing.T) {
	p := DefaultPolicy()
	n := 250000 // 500 KB: the depth that overflowed the parser's stack (F4)
	for name, cmd := range map[string]string{
		"nested parentheses":   strings.Repeat("((", n/2) + "true" + strings.Repeat("))", n/2),
		"nested substitutions": "echo " + strings.Repeat("$(", n) + strings.Repeat(")", n),
		"nested arithmetic":    "echo $((" + strings.Repeat("(", n) + "1" + strings.Repeat(")", n) + "))",
		"nested bash -c":       "bash -c '" + strings.Repeat("((", n/2) + "1" + strings.Repeat("))", n/2) + "'",
		"nested eval":          "eval '" + strings.Repeat("$(", n) + strings.Repeat(")", n) + "'",
		"heredoc to bash":      "bash <<'EOF'\n" + strings.Repeat("(", n) + "true" + strings.Repeat(")", n) + "\nEOF",
		"doubling functions":   doublingFuncs(40),
		"many functions":       manyFuncs(3000),
		"self-calling alias":   "alias a='a a'\na",
		"doubling variable":    "X=a; " + strings.Repeat("X=$X$X; ", 60) + "true",
		"brace product":        "echo " + strings.Repeat("{a,b,c}", 40),
		"nested shells":        strings.Repeat(`bash -c "`, 1) + strings.Repeat(`eval `, 200) + `ls"`,
		"long chain":           strings.Repeat("echo a && ", 5000) + "ls",
	} {
		start := time.Now()
		v := p.Check(cmd+"\nrm -rf /", testCtx)
		if v.Action != Block || v.By != ByFloor {
			t.Errorf("%s followed by rm -rf /: %s by %q", name, v.Action, v.By)
		}
		t.Logf("%s: %v", name, time.Since(start).Round(time.Millisecond))
	}
}

// doublingFuncs defines n functions, each calling the next twice, and
// calls the first: inlined naively that is 2^n calls.
func doublingFuncs(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "f%d() { f%d; f%d; }\n", i, i+1, i+1)
	}
	b.WriteString("f0")
	return b.String()
}

// manyFuncs defines n functions that call each other in a ring.
func manyFuncs(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "f%d() { f%d & f%d; }\n", i, (i+1)%n, (i+2)%n)
	}
	return b.String()
}

// reviewInputs are reproductions of the security reviews (2026-11,
// 2026-11-25, 2026-11-28) that are no case of the analyser's files (their
// verdicts belong to other checks: the kernel, the file tools, the
// process tool): seeds for FuzzCheck.
var reviewInputs = []string{
	"sleep 241 &\n" + strings.Repeat("(", 64) + "true" + strings.Repeat(")", 64),
	"echo YmVydGggY29uZmlnIHNldCBhcHByb3ZhbHMubW9kZSBvZmYK | base64 -d > fix.sh; bash fix.sh",
	"env -u BERTH_OWNER BERTH_APPROVALS_MODE=off berth exec --no-daemon -- chmod 777 x",
	"cp -l ~/.berth/config.yaml cfg; echo 'approvals: {mode: off}' >> cfg",
	"CDPATH=~ cd .berth; echo >> config.yaml",
	"OLDPWD=~/.berth; cd -; echo x >> config.yaml",
	"patch ~/.berth/config.yaml < p.diff",
	"vim -es -c 'normal Gox' -c wq ~/.berth/config.yaml",
	"ex -sc '$a|mode: off' -cx ~/.berth/config.yaml",
	"stty kill K",
	"echo hiKrm -rf /",
	`bind '"zz": "rm -rf /\n"'`,
	`bind -x '"yy": rm -rf /'`,
	`printf "%s\n" "import os,base64" "p=os.path.join(os.environ[\"HOME\"],\".be\"+\"rth\",\"con\"+\"fig.yaml\")" > tidy.py; python3 tidy.py`,
	`python3 -c 'import socket;a,b=socket.socketpair(socket.AF_UNIX,socket.SOCK_DGRAM);a.sendto(b"hi","/tmp/dgram.sock")'`,
	"ionice -c3 -p 1",
	"echo 'rm -rf ~' >> .git/hooks/pre-commit",
	"berth exec --task other -- 'export KEEP=1'",
	"exec >/dev/null 2>&1",
	"setsid -f sleep 102; (set -m; sleep 103 &); sleep 50",
	"exec 11<&- 19<&- 9<&-",
	"python3 -c 'import os; os.system(\"rm -rf /\")'",
	"perl -e 'system(\"rm -rf /\")'",
}
