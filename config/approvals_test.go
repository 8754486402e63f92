package config

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/a55dbaac/berth/approval"
)

func TestApprovalsDefaults(t *testing.T) {
	_, env := homeEnv(t, nil)
	c := mustLoad(t, LoadOptions{Getenv: envOf(env)})
	if diff := cmp.Diff(Approvals{Mode: "manual", Timeout: 60, Deny: []string{}}, c.Approvals); diff != "" {
		t.Errorf("Approvals (-want +got):\n%s", diff)
	}
	if c.CommandAllowlist == nil || len(c.CommandAllowlist) != 0 {
		t.Errorf("CommandAllowlist = %#v, want empty", c.CommandAllowlist)
	}
	p, err := c.ApprovalPolicy()
	if err != nil || p.Mode() != approval.ModeManual {
		t.Fatalf("ApprovalPolicy = %v, %v", p, err)
	}
	for key, want := range map[string]string{"approvals.mode": "manual", "approvals.timeout": "60", "approvals.deny": "[]", "command_allowlist": "[]"} {
		if got, err := c.Get(key); err != nil || got != want {
			t.Errorf("Get(%s) = %q, %v; want %q", key, got, err, want)
		}
	}
	docs := map[string]KeyDoc{}
	for _, d := range Describe() {
		docs[d.Key] = d
	}
	if d := docs["approvals.mode"]; d.Env != "BERTH_APPROVALS_MODE" || d.Default != "manual" || d.Help == "" {
		t.Errorf("Describe approvals.mode = %+v", d)
	}
	if d := docs["command_allowlist"]; d.Env != "" || d.Default != "[]" || d.Help == "" {
		t.Errorf("Describe command_allowlist = %+v", d)
	}
	// The approval keys stay after every terminal key, also after the
	// test backends declared theirs.
	keys := Keys()
	if keys[len(keys)-1] != "command_allowlist" || keys[len(keys)-5] != "tool_output.max_bytes" {
		t.Errorf("Keys order: %v", keys)
	}
}

// The file's approvals: section and top-level command_allowlist are read;
// the variables override the mode and timeout; the policy built from them
// applies them.
func TestApprovalsFileAndEnv(t *testing.T) {
	home, env := homeEnv(t, map[string]string{"BERTH_APPROVALS_TIMEOUT": "7"})
	writeFile(t, filepath.Join(home, "config.yaml"), `model: x
approvals:
  mode: manual
  timeout: 30
  deny:
    - "git push --force*"
  cron_mode: deny
command_allowlist: ["rule:git-reset-hard"]
`)
	c := mustLoad(t, LoadOptions{Getenv: envOf(env)})
	want := Approvals{Mode: "manual", Timeout: 7, Deny: []string{"git push --force*"}}
	if diff := cmp.Diff(want, c.Approvals); diff != "" {
		t.Errorf("Approvals (-want +got):\n%s", diff)
	}
	if c.Sources["approvals.timeout"] != "env:BERTH_APPROVALS_TIMEOUT" || c.Sources["approvals.deny"] != "file" || c.Sources["command_allowlist"] != "file" {
		t.Errorf("Sources = %v", c.Sources)
	}
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "approvals.cron_mode") || !strings.Contains(c.Warnings[0], "unknown key") {
		t.Errorf("Warnings = %q, want one about approvals.cron_mode", c.Warnings)
	}
	p, err := c.ApprovalPolicy()
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

	env["BERTH_APPROVALS_MODE"] = "OFF"
	c = mustLoad(t, LoadOptions{Getenv: envOf(env)})
	if p, err := c.ApprovalPolicy(); err != nil || p.Mode() != approval.ModeOff || c.Sources["approvals.mode"] != "env:BERTH_APPROVALS_MODE" {
		t.Errorf("mode from env: %v %v %v", p, err, c.Sources["approvals.mode"])
	}
}

func TestApprovalsValidation(t *testing.T) {
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
			home, env := homeEnv(t, tt.env)
			path := filepath.Join(home, "config.yaml")
			if tt.file != "" {
				writeFile(t, path, tt.file)
			}
			_, err := Load(LoadOptions{Getenv: envOf(env)})
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
}

// ApprovalPolicy reports a bad pattern in a hand-built Config by key, index
// and pattern.
func TestApprovalPolicyHandBuilt(t *testing.T) {
	c := Default()
	c.CommandAllowlist = []string{"fine", "[bad"}
	_, err := c.ApprovalPolicy()
	if err == nil || !strings.Contains(err.Error(), `command_allowlist[1]: pattern "[bad"`) {
		t.Errorf("err = %v", err)
	}
}

// Set edits the top-level command_allowlist and the approvals: section in
// place, keeping comments and other keys, as an "always" answer does.
func TestSetApprovalKeys(t *testing.T) {
	tests := []struct {
		name, key, value, before, after string
	}{
		{
			name: "top-level list added at the end", key: "command_allowlist", value: `["git push --force origin main"]`,
			before: "# mine\nterminal:\n  backend: local # here\n",
			after:  "# mine\nterminal:\n  backend: local # here\ncommand_allowlist: [\"git push --force origin main\"]\n",
		},
		{
			name: "top-level block list replaced, comment kept", key: "command_allowlist", value: `["a", "b\\*"]`,
			before: "command_allowlist: # allowed\n- a\n# between\nterminal:\n  timeout: 5\n",
			after:  "command_allowlist: [\"a\", \"b\\\\*\"] # allowed\n# between\nterminal:\n  timeout: 5\n",
		},
		{
			name: "top-level in an empty file", key: "command_allowlist", value: `["x"]`,
			before: "",
			after:  "command_allowlist: [\"x\"]\n",
		},
		{
			name: "approvals section appended", key: "approvals.mode", value: "off",
			before: "terminal:\n  backend: local\n",
			after:  "terminal:\n  backend: local\napprovals:\n  mode: \"off\"\n",
		},
		{
			name: "approvals key replaced", key: "approvals.timeout", value: "120",
			before: "approvals:\n  mode: manual   # ask\n  timeout: 60 # seconds\n",
			after:  "approvals:\n  mode: manual   # ask\n  timeout: 120 # seconds\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, filepath.Join(t.TempDir(), "config.yaml"), tt.before)
			if err := Set(path, tt.key, tt.value); err != nil {
				t.Fatal(err)
			}
			if got := readText(t, path); got != tt.after {
				t.Errorf("file:\n%s\nwant:\n%s", got, tt.after)
			}
			c := loadFile(t, path)
			got, _ := c.Get(tt.key)
			k, _ := lookupKey(tt.key)
			v, _ := k.parse(tt.value)
			if want := formatValue(v); got != want {
				t.Errorf("Get(%s) = %s, want %s", tt.key, got, want)
			}
		})
	}
}

func TestSetApprovalKeysRejectsBadValues(t *testing.T) {
	const before = "approvals:\n  mode: manual\n"
	for _, tt := range []struct{ key, value, want string }{
		{"approvals.mode", "smart", "does not support smart approvals"},
		{"command_allowlist", `["[x"]`, `command_allowlist[0]: pattern "[x"`},
		{"command_allowlist", `git push`, "not a JSON array of strings"},
		{"approvals.deny", `["rule:nope"]`, `approvals.deny[0]: pattern "rule:nope"`},
	} {
		path := writeFile(t, filepath.Join(t.TempDir(), "config.yaml"), before)
		err := Set(path, tt.key, tt.value)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Set(%s, %s) = %v, want %q", tt.key, tt.value, err, tt.want)
		}
		if got := readText(t, path); got != before {
			t.Errorf("Set(%s, %s) changed the file:\n%s", tt.key, tt.value, got)
		}
	}
}
