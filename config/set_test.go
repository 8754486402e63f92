package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func readText(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// loadFile loads path as an explicit config file with an empty environment.
func loadFile(t *testing.T, path string) *Config {
	t.Helper()
	return mustLoad(t, LoadOptions{ConfigPath: path, Getenv: envOf(map[string]string{"HOME": t.TempDir()})})
}

func TestSetInPlace(t *testing.T) {
	tests := []struct {
		name       string
		key, value string
		before     string
		after      string
	}{
		{
			name: "scalar keeps comment", key: "terminal.backend", value: "docker",
			before: hermesConfig,
			after:  strings.Replace(hermesConfig, "  backend: docker\n", "  backend: docker\n", 1),
		},
		{
			name: "bare key, comment after value kept", key: "backend", value: "ssh",
			before: "# top\nmodel: x # m\nterminal:\n  backend: local    # which backend\n  timeout: 180\nagent: {a: 1}\n",
			after:  "# top\nmodel: x # m\nterminal:\n  backend: ssh    # which backend\n  timeout: 180\nagent: {a: 1}\n",
		},
		{
			name: "quoted value", key: "terminal.cwd", value: "/new dir",
			before: "terminal:\n  cwd: \"/old # dir\" # the cwd\n  timeout: 1\n",
			after:  "terminal:\n  cwd: /new dir # the cwd\n  timeout: 1\n",
		},
		{
			name: "value needing quotes", key: "terminal.fake_image", value: "yes",
			before: "terminal:\n  fake_image: 'me'\n",
			after:  "terminal:\n  fake_image: \"yes\"\n",
		},
		{
			name: "bool normalized", key: "terminal.docker_network", value: "OFF",
			before: "terminal:\n  docker_network: true\n",
			after:  "terminal:\n  docker_network: false\n",
		},
		{
			name: "missing key added after the last key of the section", key: "terminal.timeout", value: "30",
			before: "model: x\nterminal:\n    backend: docker\n    fake_mounts:\n      - /a:/b\n    # trailing comment\n\nagent:\n  x: 1\n",
			after:  "model: x\nterminal:\n    backend: docker\n    fake_mounts:\n      - /a:/b\n    timeout: 30\n    # trailing comment\n\nagent:\n  x: 1\n",
		},
		{
			name: "block list replaced by a flow list", key: "terminal.fake_mounts", value: `["/c:/d", "/e:/f:ro"]`,
			before: "terminal:\n  fake_mounts: # mounts\n    - /a:/b\n    # old one\n    - /x:/y\n  # about timeout\n  timeout: 5\n",
			after:  "terminal:\n  fake_mounts: [\"/c:/d\", \"/e:/f:ro\"] # mounts\n  # about timeout\n  timeout: 5\n",
		},
		{
			name: "block list at key indent", key: "terminal.docker_forward_env", value: `[]`,
			before: "terminal:\n  docker_forward_env:\n  - A\n  - B\n  timeout: 5\n",
			after:  "terminal:\n  docker_forward_env: []\n  timeout: 5\n",
		},
		{
			name: "map", key: "terminal.fake_env", value: `{"B": "x y", "A": "1"}`,
			before: "terminal:\n  fake_env: {}\n",
			after:  "terminal:\n  fake_env: {\"A\": \"1\", \"B\": \"x y\"}\n",
		},
		{
			name: "empty value", key: "terminal.timeout", value: "9",
			before: "terminal:\n  timeout: # seconds\n  cwd: /\n",
			after:  "terminal:\n  timeout: 9 # seconds\n  cwd: /\n",
		},
		{
			name: "block scalar", key: "terminal.fake_image", value: "/k",
			before: "terminal:\n  fake_image: |\n    line1\n\n    line2\n  cwd: /\n",
			after:  "terminal:\n  fake_image: /k\n  cwd: /\n",
		},
		{
			name: "missing section appended", key: "tool_output.max_bytes", value: "60000",
			before: "model: x\nterminal:\n   backend: docker\n",
			after:  "model: x\nterminal:\n   backend: docker\ntool_output:\n   max_bytes: 60000\n",
		},
		{
			name: "missing section, no final newline", key: "terminal.backend", value: "modal",
			before: "model: x",
			after:  "model: x\nterminal:\n  backend: modal\n",
		},
		{
			name: "empty section", key: "terminal.backend", value: "modal",
			before: "terminal: # settings\n# next\nmodel: x\n",
			after:  "terminal: # settings\n  backend: modal\n# next\nmodel: x\n",
		},
		{
			name: "comment-only file", key: "terminal.backend", value: "docker",
			before: "# nothing yet\n",
			after:  "# nothing yet\nterminal:\n  backend: docker\n",
		},
		{
			name: "CRLF", key: "terminal.timeout", value: "7",
			before: "terminal:\r\n  timeout: 5\r\n  cwd: /\r\n",
			after:  "terminal:\r\n  timeout: 7\r\n  cwd: /\r\n",
		},
		{
			name: "non-ASCII before value", key: "terminal.fake_image", value: "bob",
			before: "terminal:\n  \"fake_image\": älice # ü\n",
			after:  "terminal:\n  \"fake_image\": bob # ü\n",
		},
		{
			name: "last duplicate edited", key: "terminal.timeout", value: "3",
			before: "terminal:\n  timeout: 1\n  timeout: 2\n",
			after:  "terminal:\n  timeout: 1\n  timeout: 3\n",
		},
		{
			name: "flow list on one line", key: "terminal.fake_mounts", value: `["/x:/y"]`,
			before: "terminal:\n  fake_mounts: ['it''s', \"b] # \\\"\"]  # c\n",
			after:  "terminal:\n  fake_mounts: [\"/x:/y\"]  # c\n",
		},
		{
			name: "multi-line flow list", key: "terminal.fake_mounts", value: `[]`,
			before: "terminal:\n  fake_mounts: [a, # first\n    b]\n  cwd: /\n",
			after:  "terminal:\n  fake_mounts: [] # first\n  cwd: /\n",
		},
		{
			name: "float", key: "terminal.container_cpu", value: "0.25",
			before: "terminal:\n  container_cpu: 1\n",
			after:  "terminal:\n  container_cpu: 0.25\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, filepath.Join(t.TempDir(), "config.yaml"), tt.before)
			if err := Set(path, tt.key, tt.value); err != nil {
				t.Fatalf("Set: %v", err)
			}
			if diff := cmp.Diff(tt.after, readText(t, path)); diff != "" {
				t.Errorf("file (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSetHermesFileOnlyChangesOneLine(t *testing.T) {
	path := writeFile(t, filepath.Join(t.TempDir(), "config.yaml"), hermesConfig)
	if err := Set(path, "terminal.timeout", "300"); err != nil {
		t.Fatal(err)
	}
	before := strings.Split(hermesConfig, "\n")
	after := strings.Split(readText(t, path), "\n")
	if len(before) != len(after) {
		t.Fatalf("line count %d -> %d", len(before), len(after))
	}
	for i := range before {
		if before[i] != after[i] && !(before[i] == "  timeout: 180" && after[i] == "  timeout: 300") {
			t.Errorf("line %d changed: %q -> %q", i+1, before[i], after[i])
		}
	}
	c := loadFile(t, path)
	if c.Terminal.Timeout != 300 || c.Sources["terminal.timeout"] != "file" {
		t.Errorf("timeout %d", c.Terminal.Timeout)
	}
}

func TestSetFallbacks(t *testing.T) {
	for _, tt := range []struct{ before, key, value, want string }{
		{"terminal: ~\nmodel: x\n", "terminal.fake_env", `{"A":"1"}`, `{"A":"1"}`},
		{"{model: x, terminal: {fake_mounts: [a]}}\n", "terminal.fake_mounts", `["b:1","c:2"]`, `["b:1","c:2"]`},
		{"{model: x}\n", "terminal.docker_network", "no", "false"},
	} {
		path := writeFile(t, filepath.Join(t.TempDir(), "config.yaml"), tt.before)
		if err := Set(path, tt.key, tt.value); err != nil {
			t.Errorf("Set(%q): %v", tt.before, err)
			continue
		}
		c := loadFile(t, path)
		if got, _ := c.Get(tt.key); got != tt.want {
			t.Errorf("%q: Get(%s) = %q, want %q; file:\n%s", tt.before, tt.key, got, tt.want, readText(t, path))
		}
		if !strings.Contains(readText(t, path), "model: x") && strings.Contains(tt.before, "model: x") {
			t.Errorf("%q: lost model:\n%s", tt.before, readText(t, path))
		}
	}
	// Editing a section shared through an alias would change the anchored
	// section too: refused.
	path := writeFile(t, filepath.Join(t.TempDir(), "config.yaml"), "base: &b\n  timeout: 5\nterminal: *b\n")
	if err := Set(path, "timeout", "6"); err == nil || !strings.Contains(err.Error(), "safely") {
		t.Errorf("alias: %v", err)
	}
	path = writeFile(t, filepath.Join(t.TempDir(), "config.yaml"), "terminal:\n  timeout: 1\n---\nother: doc\n")
	if err := Set(path, "timeout", "2"); err != nil {
		t.Errorf("multi-document in-place edit: %v", err)
	} else if got := readText(t, path); got != "terminal:\n  timeout: 2\n---\nother: doc\n" {
		t.Errorf("file %q", got)
	}
}

func TestSetFlowSectionFallsBack(t *testing.T) {
	path := writeFile(t, filepath.Join(t.TempDir(), "config.yaml"), "# head\nmodel: x\nterminal: {backend: local, timeout: 5}\n")
	if err := Set(path, "terminal.backend", "docker"); err != nil {
		t.Fatal(err)
	}
	c := loadFile(t, path)
	if c.Terminal.Backend != "docker" || c.Terminal.Timeout != 5 {
		t.Errorf("Terminal %+v", c.Terminal)
	}
	text := readText(t, path)
	if !strings.Contains(text, "# head") || !strings.Contains(text, "model: x") {
		t.Errorf("file lost content:\n%s", text)
	}
}

func TestSetMissingFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "home", ".berth")
	path := filepath.Join(dir, "config.yaml")
	if err := Set(path, "backend", "docker"); err != nil {
		t.Fatal(err)
	}
	if got := readText(t, path); got != "terminal:\n  backend: docker\n" {
		t.Errorf("file %q", got)
	}
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v %v", st.Mode(), err)
	}
	if err := Set(path, "tool_output.max_bytes", "2000"); err != nil {
		t.Fatal(err)
	}
	if err := Set(path, "terminal.fake_mounts", `["/a:/b"]`); err != nil {
		t.Fatal(err)
	}
	want := "terminal:\n  backend: docker\n  fake_mounts: [\"/a:/b\"]\ntool_output:\n  max_bytes: 2000\n"
	if got := readText(t, path); got != want {
		t.Errorf("file:\n%s\nwant:\n%s", got, want)
	}
	c := loadFile(t, path)
	if c.MaxOutputChars != 2000 || c.Terminal.Backend != "docker" || len(c.Terminal.List("fake_mounts")) != 1 {
		t.Errorf("loaded %+v", c)
	}
}

func TestSetBadValueWritesNothing(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, filepath.Join(dir, "config.yaml"), hermesConfig)
	for _, tt := range []struct{ key, value, want string }{
		{"terminal.backend", "dokcer", `terminal.backend "dokcer": unknown backend, did you mean docker? (built in: fake, fake2; in the contract but not in this build: local, docker`},
		{"timeout", "-1", `terminal.timeout "-1": out of range`},
		{"terminal.fake_port", "99999", `terminal.fake_port "99999": must be a whole number from 1 to 65535`},
		{"fake_mounts", `["/a:/b", "nocolon"]`, `terminal.fake_mounts "[\"/a:/b\", \"nocolon\"]": mount "nocolon" lacks a colon`},
		{"modal_image", "x", `unknown key "modal_image": it belongs to backend modal, which is not built into this berth`},
		{"terminal.fake_mounts", "/a:/b", `terminal.fake_mounts "/a:/b": not a JSON array`},
		{"terminal.fake_env", "A=1", `terminal.fake_env (3 characters, not shown: it may hold secrets): not a JSON object`},
		{"tool_output.max_bytes", "100", `tool_output.max_bytes "100": out of range`},
		{"terminal.bakend", "docker", `did you mean terminal.backend?`},
	} {
		err := Set(path, tt.key, tt.value)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Set(%s, %s) = %v, want %q", tt.key, tt.value, err, tt.want)
		}
	}
	if got := readText(t, path); got != hermesConfig {
		t.Error("file changed")
	}
	missing := filepath.Join(dir, "sub", "config.yaml")
	if err := Set(missing, "timeout", "x"); err == nil {
		t.Error("Set with bad value succeeded")
	}
	if _, err := os.Stat(filepath.Dir(missing)); !os.IsNotExist(err) {
		t.Errorf("directory created: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("stray files: %v", entries)
	}
}

func TestSetBrokenYAML(t *testing.T) {
	path := writeFile(t, filepath.Join(t.TempDir(), "config.yaml"), "terminal:\n  backend: [docker\n")
	err := Set(path, "backend", "ssh")
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "line") {
		t.Errorf("error %v", err)
	}
	path = writeFile(t, filepath.Join(t.TempDir(), "config.yaml"), "terminal: [a]\n")
	if err := Set(path, "backend", "ssh"); err == nil || !strings.Contains(err.Error(), "not a mapping") {
		t.Errorf("error %v", err)
	}
}

func TestSetKeepsModeAndFollowsSymlink(t *testing.T) {
	dir := t.TempDir()
	real := writeFile(t, filepath.Join(dir, "dotfiles", "config.yaml"), "terminal:\n  timeout: 1\n")
	if err := os.Chmod(real, 0o640); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "config.yaml")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if err := Set(link, "timeout", "2"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("link replaced: %v %v", fi.Mode(), err)
	}
	st, _ := os.Stat(real)
	if st.Mode().Perm() != 0o640 {
		t.Errorf("mode %v", st.Mode())
	}
	if got := readText(t, real); got != "terminal:\n  timeout: 2\n" {
		t.Errorf("file %q", got)
	}
}

// Every key set through Set reads back through Load and Get as given.
func TestSetRoundTrip(t *testing.T) {
	values := map[string]string{
		"terminal.backend":                   "daytona",
		"terminal.cwd":                       "~/work: a # b",
		"terminal.timeout":                   "42",
		"terminal.lifetime_seconds":          "43",
		"terminal.container_cpu":             "1.5",
		"terminal.container_memory":          "100",
		"terminal.container_disk":            "200",
		"terminal.container_persistent":      "false",
		"terminal.docker_forward_env":        `["A","B"]`,
		"terminal.docker_network":            "false",
		"terminal.persistent_shell":          "false",
		"terminal.daemon_term_grace_seconds": "0",
		"terminal.env_passthrough":           `["X"]`,
		"terminal.max_foreground_timeout":    "1",
		"terminal.share_environment":         "true",
		"terminal.on_timeout":                "background",
		"terminal.daemon":                    "false",
		"terminal.fake_image":                "multi\nline:'quoted'",
		"terminal.fake_port":                 "2200",
		"terminal.fake_ratio":                "0",
		"terminal.fake_flag":                 "false",
		"terminal.fake_mounts":               `["/a:/b","x: \"y\""]`,
		"terminal.fake_env":                  `{"K":"line1\nline2","Z":""}`,
		"tool_output.max_bytes":              "1000",
		"approvals.mode":                     "off",
		"approvals.timeout":                  "5",
		"approvals.deny":                     `["rule:sql-destructive", "curl * | sh"]`,
		"command_allowlist":                  `["git push --force origin main", "write_file */.env"]`,
		"checkpoints.max_per_environment":    "2",
		"checkpoints.max_total_mb":           "64",
		"checkpoints.environment_tool":       "true",
	}
	if len(values) != len(Keys()) {
		t.Fatalf("test covers %d keys of %d", len(values), len(Keys()))
	}
	path := writeFile(t, filepath.Join(t.TempDir(), "config.yaml"), hermesConfig)
	for _, key := range Keys() {
		if err := Set(path, key, values[key]); err != nil {
			t.Fatalf("Set(%s): %v", key, err)
		}
	}
	c := loadFile(t, path)
	for _, key := range Keys() {
		got, err := c.Get(key)
		want := values[key]
		if k, _ := lookupKey(key); k.kind == kindList || k.kind == kindMap {
			v, _ := k.parse(want)
			want = formatValue(v)
		}
		if err != nil || got != want {
			t.Errorf("Get(%s) = %q, %v; want %q", key, got, err, want)
		}
		if c.Sources[key] != "file" {
			t.Errorf("Sources[%s] = %q", key, c.Sources[key])
		}
	}
	text := readText(t, path)
	for _, keep := range []string{"# Hermes Agent configuration", "provider: openrouter   # or \"anthropic\"",
		"  # Execution backend: local, docker, ssh, singularity, modal, daytona", "mcp_servers:", "threshold: 0.85"} {
		if !strings.Contains(text, keep) {
			t.Errorf("file lost %q:\n%s", keep, text)
		}
	}
}
