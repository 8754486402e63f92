package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
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
	// test backends declared theirs, and before the checkpoint keys.
	keys := Keys()
	if keys[len(keys)-4] != "command_allowlist" || keys[len(keys)-8] != "tool_output.max_bytes" || keys[len(keys)-1] != "checkpoints.environment_tool" {
		t.Errorf("Keys order: %v", keys)
	}
}

// The file's approvals: section and top-level command_allowlist are read;
// the variables override the mode and timeout.
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
	if diff := cmp.Diff([]string{"rule:git-reset-hard"}, c.CommandAllowlist); diff != "" {
		t.Errorf("CommandAllowlist (-want +got):\n%s", diff)
	}

	env["BERTH_APPROVALS_MODE"] = "OFF"
	c = mustLoad(t, LoadOptions{Getenv: envOf(env)})
	if c.Approvals.Mode != "OFF" || c.Sources["approvals.mode"] != "env:BERTH_APPROVALS_MODE" {
		t.Errorf("mode from env: %q from %v", c.Approvals.Mode, c.Sources["approvals.mode"])
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

// AddCheck gives one of config's own keys a check that Load and Set then
// apply, and refuses keys it cannot serve.
func TestAddCheck(t *testing.T) {
	if err := AddCheck("no.such_key", func(any) error { return nil }); err == nil {
		t.Error("AddCheck of an unknown key succeeded")
	}
	if err := AddCheck("approvals.timeout", func(v any) error {
		if v.(int) == 13 {
			return errors.New("thirteen is unlucky")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	home, env := homeEnv(t, map[string]string{"BERTH_APPROVALS_TIMEOUT": "13"})
	_, err := Load(LoadOptions{Getenv: envOf(env)})
	if err == nil || !strings.Contains(err.Error(), `BERTH_APPROVALS_TIMEOUT="13"`) || !strings.Contains(err.Error(), "thirteen is unlucky") {
		t.Errorf("Load with the checked value: %v", err)
	}
	path := writeFile(t, filepath.Join(home, "config.yaml"), "")
	if err := Set(path, "approvals.timeout", "13"); err == nil || !strings.Contains(err.Error(), "thirteen is unlucky") {
		t.Errorf("Set with the checked value: %v", err)
	}
	if err := Set(path, "approvals.timeout", "14"); err != nil {
		t.Errorf("Set with a good value: %v", err)
	}
}
