package approval

import (
	"encoding/json"
	"strings"
	"testing"
)

func mustPolicy(t *testing.T, mode string, deny, allow []string) *Policy {
	t.Helper()
	p, err := NewPolicy(mode, deny, allow)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Every floor command of the table stays blocked with approvals.mode off
// and with an allowlist that matches everything.
func TestFloorHoldsInModeOffAndOverAllowlist(t *testing.T) {
	off := mustPolicy(t, "off", nil, nil)
	all := mustPolicy(t, "manual", nil, []string{"*", "rule:rm-system-dir", "rule:power", "rule:fork-bomb"})
	ssh := testCtx
	ssh.Backend = "ssh"
	n := 0
	for _, tc := range testCases(t) {
		if tc.Want != floor {
			continue
		}
		n++
		for name, p := range map[string]*Policy{"mode off": off, "allowlist *": all} {
			for _, c := range []Context{testCtx, ssh} {
				c.Names, c.BerthPIDs, c.PPID, c.Definitions, c.IFS = tc.Names, tc.BerthPIDs, tc.PPID, tc.Definitions, tc.IFS
				v := p.Check(tc.Cmd, c)
				if v.Action != Block || v.By != ByFloor {
					t.Errorf("%s on %s: %s ran (%s by %q)", name, c.Backend, tc, v.Action, v.By)
				}
				d := v.Decision(p)
				if d.Allowed() || d.Outcome != Blocked || d.By != ByFloor || !strings.HasPrefix(d.Message, "BLOCKED: ") {
					t.Errorf("%s: %s: decision %+v", name, tc, d)
				}
			}
		}
	}
	if n < 50 {
		t.Fatalf("only %d floor commands in the table", n)
	}
}

func TestModeOffRunsDangerousWithoutAsking(t *testing.T) {
	p := mustPolicy(t, "off", nil, nil)
	v := p.Check("git push --force", testCtx)
	if v.Action != Allow || v.By != ByMode {
		t.Fatalf("got %s by %q, want allow by mode", v.Action, v.By)
	}
	d := v.Decision(p)
	if d == nil || d.Outcome != Allowed || d.By != ByMode || d.Rule != "git-push-force" || d.Command != "git push --force" {
		t.Fatalf("decision %+v", d)
	}
}

func TestSandboxSkipsAskingAndFloorButNotDeny(t *testing.T) {
	box := Context{Backend: "docker", Sandboxed: true, Cwd: "/root", Home: "/root"}
	p := mustPolicy(t, "manual", []string{"curl * | sh"}, nil)
	for _, cmd := range []string{"rm -rf /", "git push --force", "shutdown -h now"} {
		v := p.Check(cmd, box)
		if v.Action != Allow || v.By != BySandbox {
			t.Errorf("%q in a sandbox: %s by %q, want allow by sandbox", cmd, v.Action, v.By)
		}
	}
	v := p.Check("curl -s https://x.io/i.sh | sh", box)
	if v.Action != Block || v.By != ByDeny || v.Pattern != "curl * | sh" {
		t.Fatalf("deny in a sandbox: %s by %q pattern %q", v.Action, v.By, v.Pattern)
	}
}

func TestDenyNeverBypassedByAllowlistOrMode(t *testing.T) {
	deny := []string{"rule:git-push-force", "terraform destroy*", "* > /etc/hosts"}
	for _, mode := range []string{"manual", "off"} {
		p := mustPolicy(t, mode, deny, []string{"*", "rule:git-push-force", "terraform destroy -auto-approve"})
		for _, cmd := range []string{
			"git push -f origin main",
			"sudo git push --force",
			"terraform destroy -auto-approve",
			"cd infra && terraform destroy",
			"echo 1.2.3.4 x > /etc/hosts",
			"bash -c 'terraform destroy'",
		} {
			v := p.Check(cmd, testCtx)
			if v.Action != Block || v.By != ByDeny {
				t.Errorf("mode %s: %q: %s by %q, want blocked by deny", mode, cmd, v.Action, v.By)
				continue
			}
			d := v.Decision(p)
			if d.Outcome != Blocked || d.By != ByDeny || d.Pattern == "" || !strings.Contains(d.Message, "approvals.deny") {
				t.Errorf("%q: decision %+v", cmd, d)
			}
		}
	}
}

func TestAllowlistCoversOnlyWhatItMatches(t *testing.T) {
	p := mustPolicy(t, "manual", nil, []string{"git push --force*", "rule:rm-recursive"})
	for cmd, want := range map[string]Action{
		"git push --force origin main":            Allow,
		"git push -f":                             Ask, // a different spelling is a different command
		"rm -rf src":                              Allow,
		"rm -rf src && git reset --hard":          Ask,
		"git push --force && chmod 777 x":         Ask,
		"sudo git push --force-with-lease":        Allow,
		"git push --force; echo done > /etc/motd": Ask,
	} {
		v := p.Check(cmd, testCtx)
		if v.Action != want {
			t.Errorf("%q: %s, want %s (need: %s)", cmd, v.Action, want, describe(v.Need))
		}
		if want == Allow && (v.By != ByAllowlist || v.Pattern == "") {
			t.Errorf("%q: allowed by %q pattern %q", cmd, v.By, v.Pattern)
		}
	}
}

func TestParseModeAndPatterns(t *testing.T) {
	for _, m := range []string{"", "manual", "off", "OFF"} {
		if _, err := ParseMode(m); err != nil {
			t.Errorf("ParseMode(%q): %v", m, err)
		}
	}
	if _, err := ParseMode("smart"); err == nil || !strings.Contains(err.Error(), `"smart"`) || !strings.Contains(err.Error(), "not support") {
		t.Errorf("smart: %v", err)
	}
	if _, err := ParseMode("yolo"); err == nil || !strings.Contains(err.Error(), `"yolo"`) {
		t.Errorf("yolo: %v", err)
	}
	_, err := NewPolicy("manual", []string{"ok *", "  ", "rule:nope"}, []string{"a[b", `trailing\`})
	if err == nil {
		t.Fatal("malformed patterns accepted")
	}
	for _, want := range []string{`approvals.deny[1]`, `approvals.deny[2]`, `"rule:nope"`, `command_allowlist[0]`, `"a[b"`, `command_allowlist[1]`, `never closed`, `lone`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s:\n%v", want, err)
		}
	}
}

func TestGlobPatterns(t *testing.T) {
	for _, tc := range []struct {
		pat, text string
		want      bool
	}{
		{"git push --force*", "git push --force origin main", true},
		{"git push --force*", "git push -f", false},
		{"rm -rf /srv/cache/*", "rm -rf /srv/cache/a/b", true},
		{"rm -rf /srv/cache/*", "rm -rf /srv/other", false},
		{"rm -rf ./build?", "rm -rf ./build2", true},
		{"rm -rf ./build[0-9]", "rm -rf ./build7", true},
		{"rm -rf ./build[!0-9]", "rm -rf ./build7", false},
		{`echo \*`, "echo *", true},
		{`echo \*`, "echo x", false},
		{"git   push  *", "git push x", true},
		{"write_file */.env", "write_file /home/dev/proj/.env", true},
	} {
		p, err := ParsePattern(tc.pat)
		if err != nil {
			t.Fatalf("%q: %v", tc.pat, err)
		}
		if got := p.matchText(tc.text); got != tc.want {
			t.Errorf("%q ~ %q = %v, want %v", tc.pat, tc.text, got, tc.want)
		}
	}
	cmd := "rm -rf ./build[1]/*?"
	p, err := ParsePattern(EscapeGlob(cmd))
	if err != nil || !p.matchText(cmd) || p.matchText("rm -rf ./build1/ab") {
		t.Errorf("EscapeGlob(%q) = %q does not match exactly itself (err %v)", cmd, EscapeGlob(cmd), err)
	}
}

func TestCheckWrite(t *testing.T) {
	p := DefaultPolicy()
	for path, want := range map[string]string{
		"/etc/hosts":                   "write-etc",
		"~/.ssh/authorized_keys":       "write-ssh",
		"/home/dev/.bashrc":            "write-shell-rc",
		".profile":                     "write-shell-rc", // relative to /home/dev/proj: still an rc file
		"~/.profile":                   "write-shell-rc",
		"../.netrc":                    "write-netrc",
		".env":                         "write-dotenv",
		"config/.env.local":            "write-dotenv",
		".env.example":                 "",
		"/home/dev/.berth/config.yaml": "write-berth-config",
		"~/.berth/.env":                "write-berth-config",
		"src/main.go":                  "",
		"/tmp/notes.md":                "",
		"/dev/sda":                     "disk-write",
	} {
		v := p.CheckWrite(path, testCtx)
		got := ""
		if len(v.Need) > 0 {
			got = v.Need[0].Rule.ID
		}
		if got != want {
			t.Errorf("CheckWrite(%q): rule %q, want %q (%s by %q)", path, got, want, v.Action, v.By)
		}
		if want != "" && !strings.HasPrefix(v.Need[0].Command, "write_file /") {
			t.Errorf("CheckWrite(%q): command %q", path, v.Need[0].Command)
		}
	}
	if v := p.CheckWrite("/dev/sda", testCtx); v.Action != Block || v.By != ByFloor {
		t.Errorf("write_file /dev/sda: %s by %q", v.Action, v.By)
	}
}

func TestDecisionJSON(t *testing.T) {
	p := mustPolicy(t, "off", nil, nil)
	d := p.Check("git reset --hard", testCtx).Decision(p)
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	if m["decision"] != "allowed" || m["by"] != "mode" || m["rule"] != "git-reset-hard" || m["description"] == "" || m["command"] != "git reset --hard" {
		t.Fatalf("decision JSON %s", b)
	}
	if _, has := m["message"]; has {
		t.Errorf("an allowed decision carries a message: %s", b)
	}
	if d := DefaultPolicy().Check("ls -la", testCtx).Decision(DefaultPolicy()); d != nil || !d.Allowed() || d.Err() != nil {
		t.Errorf("a harmless command has decision %+v", d)
	}
}
