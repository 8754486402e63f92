package approval

import (
	"context"
	"strings"
	"testing"
)

// TestSessionCoversThePattern: as in Hermes, "session" approves the
// matched pattern for the rest of the session, not only the command's
// exact text (berth asked about chmod 777 c after chmod 777 b).
func TestSessionCoversThePattern(t *testing.T) {
	ctx := context.Background()
	g := NewGate(nil, GateOptions{})
	a := &scriptedAsker{answers: []Answer{AnswerSession, AnswerDeny}}
	if d := g.Command(ctx, "s", "chmod 777 b", testCtx, a); d.Outcome != ApprovedSession {
		t.Fatalf("chmod 777 b: %+v", d)
	}
	q := a.questions[0]
	if !strings.Contains(q.Session, `"world/other-writable permissions" commands, like `+"`chmod 777 b`") ||
		!strings.Contains(q.Always, `"world/other-writable permissions"`) || !strings.Contains(q.Text(), q.Session) {
		t.Errorf("the question does not say what session and always allow:\n%s", q.Text())
	}
	if d := g.Command(ctx, "s", "chmod o+w c", testCtx, a); d.Outcome != ApprovedSession || a.asked() != 1 {
		t.Fatalf("chmod o+w c after session: %+v, asked %d times", d, a.asked())
	}
	if d := g.Command(ctx, "s", "chmod -R 755 d", testCtx, a); d.Outcome != Denied || a.asked() != 2 {
		t.Fatalf("another pattern (chmod-recursive) was not asked: %+v", d)
	}
	// Hermes' finer keys: find -delete is not find -exec rm.
	b := &scriptedAsker{answers: []Answer{AnswerSession, AnswerDeny}}
	g.Command(ctx, "s", "find . -name '*.o' -delete", testCtx, b)
	if d := g.Command(ctx, "s", "find . -name '*.o' -exec rm {} +", testCtx, b); d.Outcome != Denied {
		t.Fatalf("find -exec rm was covered by a session approval of find -delete: %+v", d)
	}
}

// TestNarrowRulesPerCommand: approving a rule that would reopen the gate,
// or that only says berth cannot see what runs, covers that one command:
// "session" the same command again, and "always" is not offered and
// saves nothing.
func TestNarrowRulesPerCommand(t *testing.T) {
	ctx := context.Background()
	saved := 0
	g := NewGate(nil, GateOptions{Persist: func([]string) error { saved++; return nil }})
	for _, tc := range []struct{ cmd, other string }{
		{`$EDITOR a.txt`, `$EDITOR b.txt`},
		{`berth config set approvals.mode off`, `berth config set command_allowlist '["*"]'`},
		{`berth exec -- make`, `berth exec -- 'git push --force'`},
		{`export BERTH_HOME=/tmp/a`, `export BERTH_APPROVALS_MODE=off`},
	} {
		a := &scriptedAsker{answers: []Answer{AnswerAlways, AnswerDeny}}
		d := g.Command(ctx, "s", tc.cmd, testCtx, a)
		if d.Outcome != ApprovedSession || a.questions[0].Always != "" || !strings.Contains(a.questions[0].Text(), "always is not offered") {
			t.Fatalf("%s answered always: %+v\n%s", tc.cmd, d, a.questions[0].Text())
		}
		if d := g.Command(ctx, "s", tc.cmd, testCtx, a); d.Outcome != ApprovedSession || a.asked() != 1 {
			t.Errorf("%s again in the session: %+v, asked %d", tc.cmd, d, a.asked())
		}
		if d := g.Command(ctx, "s", tc.other, testCtx, a); d.Outcome != Denied {
			t.Errorf("%s after approving %s: %+v, want asked (and denied)", tc.other, tc.cmd, d)
		}
	}
	if saved != 0 {
		t.Errorf("always saved %d times for rules that are never saved", saved)
	}
}

// TestTooDeepNeverSaved is N4: the check stopped after 20 000 commands and
// an "always" answer to the too-deep question saved rule:too-deep, which
// then allowed (:;)x20001 rm -rf /. The rest is now read word by word, so
// the floor holds in every mode, and too-deep is approved one command at a
// time.
func TestTooDeepNeverSaved(t *testing.T) {
	ctx := context.Background()
	var saved [][]string
	g := NewGate(nil, GateOptions{Persist: func(l []string) error { saved = append(saved, l); return nil }})
	long := strings.Repeat(":;", 20000+1) // more commands than the walk follows, fewer words than shparse.MaxElements
	a := &scriptedAsker{answers: []Answer{AnswerAlways}}
	d := g.Command(ctx, "s", long+"make build", testCtx, a)
	if d.Outcome != ApprovedSession || d.Rule != "too-deep" || len(saved) != 0 {
		t.Fatalf("always on too-deep: %+v, saved %q", d, saved)
	}
	for _, mode := range []string{"manual", "off"} {
		p, _ := NewPolicy(mode, nil, nil)
		for _, cmd := range []string{long + "rm -rf /", strings.Repeat("(:);", 20000+1) + "rm -rf /", long + "echo x; kill -9 -1"} {
			if v := p.Check(cmd, testCtx); v.Action != Block || v.By != ByFloor {
				t.Errorf("mode %s, %d bytes ending in a floor command: %s by %q", mode, len(cmd), v.Action, v.By)
			}
		}
	}
	if d := g.Command(ctx, "s", long+"rm -rf /", testCtx, &scriptedAsker{}); d.Outcome != Blocked || d.By != ByFloor {
		t.Errorf("after the answer: %+v", d)
	}
}

// TestHermesAllowlist: a Hermes user's command_allowlist entries (pattern
// keys: descriptions, or older regex-derived keys) allow the berth rules
// they name, and nothing on the floor.
func TestHermesAllowlist(t *testing.T) {
	p, err := NewPolicy("manual", nil, []string{
		"recursive delete", `chmod\s+(-[^\s]*\s+)*(777|666|o\+[rwx]*w|a\+[rwx]*w)`, "SQL DROP",
		"git force push short flag (rewrites remote history)", "kill all processes", "format filesystem",
	})
	if err != nil {
		t.Fatal(err)
	}
	for cmd, want := range map[string]string{
		"rm -rf src":                          "allow",
		"chmod 777 run.sh":                    "allow",
		`psql -c "DROP TABLE users"`:          "allow",
		`psql -c "DELETE FROM users"`:         "ask",
		"git push --force":                    "allow",
		"git reset --hard":                    "ask",
		"kill -9 -1":                          "block",
		"mkfs.ext4 /dev/sda":                  "block",
		"rm -rf /":                            "block",
		"berth config set approvals.mode off": "ask",
	} {
		if got := p.Check(cmd, testCtx).Action.String(); got != want {
			t.Errorf("%s: %s, want %s", cmd, got, want)
		}
	}
}

// TestKeysCoverRules: every dangerous rule has a key berth saves, or is
// approved one command at a time.
func TestKeysCoverRules(t *testing.T) {
	for _, r := range Rules() {
		if r.Level != Dangerous || narrowRules[r.ID] {
			continue
		}
		found := false
		for _, k := range patternKeys {
			if k.rule == r.ID && k.saved {
				found = true
			}
		}
		if !found {
			t.Errorf("rule %s has no key an always answer could save", r.ID)
		}
	}
	for _, k := range patternKeys {
		if r, ok := LookupRule(k.rule); !ok || r.Level != Dangerous {
			t.Errorf("key %q names %q, which is no dangerous rule", k.key, k.rule)
		}
		if p, err := ParsePattern(k.key); err != nil || p.key == nil {
			t.Errorf("key %q does not parse as a key: %v", k.key, err)
		}
	}
}

// TestQuestionShowsWhatRuns is N6: the question showed only the first 300
// characters of the command, raw, and never the matched commands; a
// harmless prefix hid what the user approved.
func TestQuestionShowsWhatRuns(t *testing.T) {
	prefix := "echo '" + strings.Repeat("compiling module ", 20) + "'; rm -rf ./build; "
	cmd := prefix + "rm -rf ~/Documents/important\x1b[2K\u202e"
	v := DefaultPolicy().Check(cmd, testCtx)
	q := Question{Kind: "command", Subject: cmd, Backend: "local", Cwd: "/home/dev/proj", Findings: v.Need}
	var txt string
	q.Session, q.Always, _ = scope(v.Need)
	txt = q.Text()
	for _, want := range []string{"It runs: rm -rf ~/Documents/important\\x1b[2K\\u202e (rm-recursive)", "rm-recursive", "in /home/dev/proj"} {
		if !strings.Contains(txt, want) {
			t.Errorf("question lacks %q:\n%s", want, txt)
		}
	}
	if strings.ContainsAny(txt, "\x1b\u202e") {
		t.Errorf("question carries raw control characters:\n%q", txt)
	}
	long := strings.Repeat("a", 5000) + "; chmod 777 x"
	q = Question{Kind: "command", Subject: long, Findings: DefaultPolicy().Check(long, testCtx).Need}
	txt = q.Text()
	if !strings.Contains(txt, "(command truncated; 3013 more characters)") || !strings.Contains(txt, "chmod 777 x") {
		t.Errorf("long command:\n%s", txt)
	}
	if !strings.Contains(txt, "in the environment's starting directory") {
		t.Errorf("no cwd named:\n%s", txt)
	}
	for in, want := range map[string]string{"a\x00b": `a\x00b`, "\u200bx": `\u200bx`, "\x9b": `\x9b`, "\u0085": `\u0085`, "é\tok\n": "é\tok\n"} {
		if got := Visible(in); got != want {
			t.Errorf("Visible(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestUnparsedIsNoForbiddenAction is item 10: of 1 277 replayed agent
// commands, the ones the parser rejects (a sed -i with broken quoting)
// read as forbidden actions ("do not try to get around this"). The
// message says what did not parse and where, and that a fixed command may
// be sent again.
func TestUnparsedIsNoForbiddenAction(t *testing.T) {
	g := NewGate(nil, GateOptions{})
	for cmd, where := range map[string]string{
		`sed -i 's/foo/bar/ config.txt`:               "1:8:",
		"if true; then\n  make\n":                     "1:1:",
		`bash -c 'echo "unclosed'`:                    "the shell text of",
		"echo ok\ncase $x in a) echo a;;\nesac )\nls": "3:6:",
	} {
		d := g.Command(context.Background(), "s", cmd, testCtx, nil)
		if d.Allowed() || d.Rule != "unparsed" {
			t.Errorf("%q: %+v", cmd, d)
			continue
		}
		for _, want := range []string{"could not parse", where, "send it again", "Nothing was run"} {
			if !strings.Contains(d.Message, want) {
				t.Errorf("%q: message lacks %q: %s", cmd, want, d.Message)
			}
		}
		if strings.Contains(d.Message, "get around") || strings.Contains(d.Message, "do not try") {
			t.Errorf("%q: the message reads as a forbidden action: %s", cmd, d.Message)
		}
	}
	// A floor command in unparsed text is still the floor.
	if d := g.Command(context.Background(), "s", `rm -rf / 'unclosed`, testCtx, nil); d.By != ByFloor {
		t.Errorf("floor in unparsed text: %+v", d)
	}
}

// TestPrelude: what ran before in the same shell (earlier lines sent to a
// background shell) holds for the next line: its functions, aliases,
// variables and cd, without its own findings again (review N5: a function
// defined on one line and called on the next passed unchecked).
func TestPrelude(t *testing.T) {
	c := testCtx
	p := DefaultPolicy()
	for prelude, cases := range map[string][]struct{ cmd, want, rule string }{
		`f() { rm "$@"; }`:        {{`f -rf ~`, floor, "rm-system-dir"}, {`f notes.txt`, ok, ""}},
		"alias x=rm\nchmod 777 a": {{`x -rf /`, floor, "rm-system-dir"}, {`ls`, ok, ""}},
		`cd /; D=usr`:             {{`rm -rf $D`, floor, "rm-system-dir"}},
		`set -- -rf /`:            {{`rm "$@"`, floor, "rm-system-dir"}},
		`exec 3<<<'rm -rf /'`:     {{`bash <&3`, floor, "rm-system-dir"}},
		"(((":/* does not parse */ {{`ls`, ok, ""}},
	} {
		c.Prelude = prelude
		checkAll(t, p, c, cases)
	}
}
