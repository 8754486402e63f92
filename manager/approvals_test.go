package manager_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/a55dbaac/berth/approval"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/terminal"
)

// loadIn writes text as the config file of a fresh berth home and loads it
// with the extra variables env.
func loadIn(t *testing.T, text string, env map[string]string) (*config.Config, string, error) {
	t.Helper()
	home := t.TempDir()
	path := filepath.Join(home, "config.yaml")
	if text != "" {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	vars := map[string]string{"HOME": home, "BERTH_HOME": home}
	for k, v := range env {
		vars[k] = v
	}
	cfg, err := config.Load(config.LoadOptions{Getenv: func(k string) string { return vars[k] }})
	return cfg, path, err
}

// A program that links the manager gets the approval engine's checks in
// config.Load and config.Set: a bad mode or pattern is refused with the
// key, the value and what is accepted.
func TestApprovalKeysAreChecked(t *testing.T) {
	tests := []struct {
		name string
		file string
		env  map[string]string
		want []string
	}{
		{name: "smart mode", file: "approvals:\n  mode: smart\n",
			want: []string{`approvals.mode "smart" in PATH:`, "does not support smart approvals", "manual", "off"}},
		{name: "unknown mode from env", env: map[string]string{"BERTH_APPROVALS_MODE": "yolo"},
			want: []string{`BERTH_APPROVALS_MODE="yolo": use manual`}},
		{name: "zero timeout", file: "approvals:\n  timeout: 0\n", want: []string{`approvals.timeout "0" in PATH`, ">= 1"}},
		{name: "bad deny pattern", file: "approvals:\n  deny:\n    - ok*\n    - \"[unclosed\"\n",
			want: []string{"approvals.deny in PATH (line 3)", `approvals.deny[1]: pattern "[unclosed"`}},
		{name: "unknown rule in allowlist", file: "command_allowlist: [\"rule:git-push-force\", \"rule:no-such-rule\"]\n",
			want: []string{"command_allowlist in PATH (line 1)", `command_allowlist[1]: pattern "rule:no-such-rule": no rule "no-such-rule"`}},
		{name: "empty allowlist entry", file: "command_allowlist:\n  - \"  \"\n",
			want: []string{`command_allowlist[0]: pattern "  " is empty`}},
		{name: "allowlist not a list", file: "command_allowlist: {a: b}\n", want: []string{"command_allowlist in PATH (line 1)", "not a list"}},
		{name: "section not a mapping", file: "approvals: manual\n", want: []string{"approvals in PATH (line 1): must be a mapping"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, path, err := loadIn(t, tt.file, tt.env)
			if err == nil {
				t.Fatal("Load succeeded")
			}
			for _, w := range tt.want {
				if w = strings.ReplaceAll(w, "PATH", path); !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	const before = "approvals:\n  mode: manual\n"
	for _, tt := range []struct{ key, value, want string }{
		{"approvals.mode", "smart", "does not support smart approvals"},
		{"command_allowlist", `["[x"]`, `command_allowlist[0]: pattern "[x"`},
		{"command_allowlist", `git push`, "not a JSON array of strings"},
		{"approvals.deny", `["rule:nope"]`, `approvals.deny[0]: pattern "rule:nope"`},
	} {
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, []byte(before), 0o600); err != nil {
			t.Fatal(err)
		}
		err := config.Set(path, tt.key, tt.value)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Set(%s, %s) = %v, want %q", tt.key, tt.value, err, tt.want)
		}
		if got, _ := os.ReadFile(path); string(got) != before {
			t.Errorf("Set(%s, %s) changed the file:\n%s", tt.key, tt.value, got)
		}
	}
}

// The policy built from a loaded configuration applies its deny patterns,
// allowlist and mode.
func TestPolicyFromConfig(t *testing.T) {
	cfg, _, err := loadIn(t, "approvals:\n  deny:\n    - \"git push --force*\"\ncommand_allowlist: [\"rule:git-reset-hard\"]\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := manager.Policy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	local := approval.Context{Backend: "local", Cwd: "/repo"}
	if v := p.Check("git push --force origin main", local); v.Action != approval.Block {
		t.Errorf("denied pattern: %v, want block", v.Action)
	}
	if v := p.Check("git reset --hard HEAD~1", local); v.Action != approval.Allow {
		t.Errorf("allowlisted rule: %v, want run", v.Action)
	}
	cfg, _, err = loadIn(t, "", map[string]string{"BERTH_APPROVALS_MODE": "OFF"})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := manager.Policy(cfg); err != nil || p.Mode() != approval.ModeOff {
		t.Errorf("mode from env: %v %v", p, err)
	}
	// A hand-built configuration with a bad pattern is reported by key,
	// index and pattern.
	c := config.Default()
	c.CommandAllowlist = []string{"fine", "[bad"}
	if _, err := manager.Policy(c); err == nil || !strings.Contains(err.Error(), `command_allowlist[1]: pattern "[bad"`) {
		t.Errorf("hand-built: %v", err)
	}
}

// SetApprovals replaces the gate's policy: an allowlist entry the user
// removed from the file no longer lets its command through.
func TestSetApprovalsRevokes(t *testing.T) {
	m, g, path := setup(t, "command_allowlist: [\"chmod 777 *\"]\n", nil)
	dir := t.TempDir()
	cmd := "chmod 777 " + dir + " && echo CHMODDED"
	if r := m.Run(context.Background(), "k", terminal.Request{Command: cmd}); r.Approval == nil || r.Approval.By != approval.ByAllowlist {
		t.Fatalf("allowlisted: %+v", r.Approval)
	}
	if err := config.Set(path, "command_allowlist", "[]"); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"HOME": filepath.Dir(filepath.Dir(path)), "BERTH_HOME": filepath.Dir(path)}
	cfg, err := config.Load(config.LoadOptions{Getenv: func(k string) string { return vars[k] }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.SetApprovals(cfg); err != nil {
		t.Fatal(err)
	}
	before := strings.Count(g.Sent(), "CHMODDED")
	r := m.Run(context.Background(), "k", terminal.Request{Command: cmd})
	if r.Approval == nil || r.Approval.Allowed() {
		t.Errorf("revoked entry still allows: %+v", r.Approval)
	}
	if strings.Count(g.Sent(), "CHMODDED") != before {
		t.Error("the command reached the environment")
	}
}

// A berth started inside another berth's environment (its environment
// has the owner mark) asks and takes no allowlist, whatever its own
// configuration says (N1: a nested berth with approvals.mode off).
func TestNestedBerthIsAtLeastAsStrict(t *testing.T) {
	file := "approvals:\n  mode: \"off\"\n  deny: [\"echo NOPE*\"]\ncommand_allowlist: [\"chmod 777 *\"]\n"
	cfg, _, err := loadIn(t, file, map[string]string{"BERTH_OWNER": "boot/1/2"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := manager.Policy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p.Mode() != approval.ModeManual || len(p.Allowlist()) != 0 || strings.Join(p.Deny(), ",") != "echo NOPE*" {
		t.Errorf("nested policy: mode %s allow %q deny %q", p.Mode(), p.Allowlist(), p.Deny())
	}
	local := approval.Context{Backend: "local", Cwd: "/repo"}
	if v := p.Check("chmod 777 x", local); v.Action != approval.Ask {
		t.Errorf("chmod 777 under a nested berth: %s", v.Action)
	}
	// Without the mark the same file is taken as written.
	cfg, _, _ = loadIn(t, file, nil)
	if p, _ := manager.Policy(cfg); p.Mode() != approval.ModeOff || len(p.Allowlist()) != 1 {
		t.Errorf("top-level policy: mode %s allow %q", p.Mode(), p.Allowlist())
	}
}

// SetApprovals never lowers the gate below the settings the manager was
// made with (N1): mode off, a new allowlist entry and a removed deny
// pattern are held and named, while raising settings apply at once; the
// floor passes to a manager that replaces this one, and an "always"
// answer the user gives raises it.
func TestSetApprovalsHoldsLowering(t *testing.T) {
	m, _, path := setup(t, "approvals:\n  deny: [\"echo NOPE*\"]\ncommand_allowlist: [\"git push --force*\"]\n", nil)
	vars := map[string]string{"HOME": filepath.Dir(filepath.Dir(path)), "BERTH_HOME": filepath.Dir(path)}
	reload := func(text string) *config.Config {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(config.LoadOptions{Getenv: func(k string) string { return vars[k] }})
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	lowered := reload("approvals:\n  mode: \"off\"\ncommand_allowlist: [\"git push --force*\", \"chmod 777 *\"]\n")
	held, err := m.SetApprovals(lowered)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`approvals.mode off (kept manual)`, `command_allowlist entry "chmod 777 *" (not applied)`, `approvals.deny entry "echo NOPE*" removed (still applied)`}
	if strings.Join(held, "\n") != strings.Join(want, "\n") {
		t.Errorf("held %q, want %q", held, want)
	}
	p := m.Gate().Policy()
	if p.Mode() != approval.ModeManual || strings.Join(p.Allowlist(), ",") != "git push --force*" || strings.Join(p.Deny(), ",") != "echo NOPE*" {
		t.Errorf("policy after the lowering: mode %s, allow %q, deny %q; want the first settings", p.Mode(), p.Allowlist(), p.Deny())
	}
	// Raising applies: the allowlist entry revoked, a deny pattern added.
	held, err = m.SetApprovals(reload("approvals:\n  deny: [\"echo NOPE*\", \"echo NO2*\"]\n"))
	if err != nil || len(held) != 0 {
		t.Fatalf("raising: held %q, %v", held, err)
	}
	if p := m.Gate().Policy(); len(p.Allowlist()) != 0 || len(p.Deny()) != 2 {
		t.Errorf("policy after raising: allow %q, deny %q", p.Allowlist(), p.Deny())
	}
	// The entry the manager started with may come back: it is no lower
	// than the start.
	if held, _ := m.SetApprovals(reload("approvals:\n  deny: [\"echo NOPE*\"]\ncommand_allowlist: [\"git push --force*\"]\n")); len(held) != 0 {
		t.Errorf("the first settings again: held %q", held)
	}

	// A manager that replaces this one keeps its floor.
	next := manager.New(lowered, nil)
	next.KeepApprovalFloor(m)
	if held, _ := next.SetApprovals(lowered); len(held) != 3 || next.Gate().Policy().Mode() != approval.ModeManual {
		t.Errorf("replacing manager: held %q, mode %s; want the three held, manual", held, next.Gate().Policy().Mode())
	}

	// The user's "always" answer is saved and raises the floor: the
	// file's new entry is no lowering.
	a := &asker{answers: []approval.Answer{approval.AnswerAlways}}
	dir := t.TempDir()
	if r := m.Run(context.Background(), "k", terminal.Request{Command: "chmod 777 " + dir}, manager.WithAsker(a)); r.Approval == nil || r.Approval.Outcome != approval.ApprovedAlways {
		t.Fatalf("always answer: %+v", r.Approval)
	}
	cfg, err := config.Load(config.LoadOptions{Getenv: func(k string) string { return vars[k] }})
	if err != nil {
		t.Fatal(err)
	}
	if held, _ := m.SetApprovals(cfg); len(held) != 0 || len(m.Gate().Policy().Allowlist()) != 2 {
		t.Errorf("after the user's always answer: held %q, allowlist %q", held, m.Gate().Policy().Allowlist())
	}
}
