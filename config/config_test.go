package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// allowTerminal lets cmp compare the declared values inside a Terminal.
var allowTerminal = cmp.AllowUnexported(Terminal{})

// envOf returns a Getenv reading only m.
func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func writeFile(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// homeEnv returns a temporary BERTH_HOME and an environment pointing at it.
func homeEnv(t *testing.T, extra map[string]string) (string, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	home := filepath.Join(dir, "berth")
	env := map[string]string{"HOME": dir, "BERTH_HOME": home}
	for k, v := range extra {
		env[k] = v
	}
	return home, env
}

func mustLoad(t *testing.T, opts LoadOptions) *Config {
	t.Helper()
	c, err := Load(opts)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return c
}

func TestDefaults(t *testing.T) {
	dir := t.TempDir()
	c := mustLoad(t, LoadOptions{Getenv: envOf(map[string]string{"HOME": dir})})
	if c.Path != "" {
		t.Errorf("Path = %q, want empty", c.Path)
	}
	if want := filepath.Join(dir, ".berth"); c.Home != want {
		t.Errorf("Home = %q, want %q", c.Home, want)
	}
	if diff := cmp.Diff(defaultTerminal(), c.Terminal, allowTerminal); diff != "" {
		t.Errorf("Terminal (-want +got):\n%s", diff)
	}
	if c.MaxOutputChars != 50000 {
		t.Errorf("MaxOutputChars = %d", c.MaxOutputChars)
	}
	for _, k := range Keys() {
		if c.Sources[k] != "default" {
			t.Errorf("Sources[%s] = %q", k, c.Sources[k])
		}
	}
	if len(c.Sources) != len(Keys()) || len(c.Warnings) != 0 {
		t.Errorf("Sources %v Warnings %v", c.Sources, c.Warnings)
	}
}

// Default is Load without a file or variables: the same values, home
// resolved, nothing read from TERMINAL_* variables.
func TestDefault(t *testing.T) {
	home := filepath.Join(t.TempDir(), "bh")
	t.Setenv("BERTH_HOME", home)
	t.Setenv("TERMINAL_TIMEOUT", "7")
	t.Setenv("TERMINAL_FAKE_PORT", "2222")
	d := Default()
	loaded := mustLoad(t, LoadOptions{Getenv: envOf(map[string]string{"BERTH_HOME": home})})
	if d.Home != home || d.Path != "" || d.MaxOutputChars != DefaultMaxOutputChars {
		t.Errorf("Default: Home %q Path %q MaxOutputChars %d", d.Home, d.Path, d.MaxOutputChars)
	}
	if diff := cmp.Diff(loaded.Terminal, d.Terminal, allowTerminal); diff != "" {
		t.Errorf("Default().Terminal differs from a Load with nothing set (-load +default):\n%s", diff)
	}
	if d.Terminal.Timeout != 180 || d.Terminal.Int("fake_port") != 22 {
		t.Errorf("Default read TERMINAL_* variables: timeout %d fake_port %d", d.Terminal.Timeout, d.Terminal.Int("fake_port"))
	}
	if diff := cmp.Diff(loaded.Sources, d.Sources); diff != "" {
		t.Errorf("Sources (-load +default):\n%s", diff)
	}
	if got, err := d.Get("fake_image"); err != nil || got != "img:1" {
		t.Errorf("Get(fake_image) = %q, %v", got, err)
	}
	t.Setenv("BERTH_HOME", "")
	t.Setenv("HOME", filepath.Join(home, "u"))
	if got := Default().Home; got != filepath.Join(home, "u", ".berth") {
		t.Errorf("Home without BERTH_HOME = %q", got)
	}
}

func TestFileValues(t *testing.T) {
	home, env := homeEnv(t, nil)
	path := writeFile(t, filepath.Join(home, "config.yaml"), `
terminal:
  backend: fake
  cwd: /work
  timeout: 60
  lifetime_seconds: 900
  container_cpu: 2.5
  container_memory: 2048
  container_disk: 10240
  container_persistent: no
  docker_forward_env: [GITHUB_TOKEN]
  docker_network: off
  fake_image: python:3.12
  fake_port: 2222
  fake_ratio: 1
  fake_flag: no
  fake_mounts:
    - /data:/data:ro
    - "/a b:/c"
  fake_env:
    A: "1"
    B: 2
  persistent_shell: false
  daemon_term_grace_seconds: 0.5
  env_passthrough: [MY_VAR]
  max_foreground_timeout: 1200
  share_environment: True
  on_timeout: background
  daemon: false
tool_output:
  max_bytes: 20000
approvals:
  mode: off
  timeout: 30
  deny: ["git push --force*"]
command_allowlist:
  - rule:git-reset-hard
checkpoints:
  max_per_environment: 3
  max_total_mb: 100
  environment_tool: true
`)
	c := mustLoad(t, LoadOptions{Getenv: envOf(env)})
	want := Terminal{
		Backend: "fake", Cwd: "/work", Timeout: 60, LifetimeSeconds: 900,
		ContainerCPU: 2.5, ContainerMemory: 2048, ContainerDisk: 10240, ContainerPersistent: false,
		DockerForwardEnv: []string{"GITHUB_TOKEN"}, DockerNetwork: false,
		PersistentShell: false, DaemonTermGraceSeconds: 0.5,
		EnvPassthrough: []string{"MY_VAR"}, MaxForegroundTimeout: 1200, ShareEnvironment: true,
		OnTimeout: "background",
	}
	mustSet(t, &want, "fake_image", "python:3.12")
	mustSet(t, &want, "fake_port", 2222)
	mustSet(t, &want, "fake_ratio", 1.0)
	mustSet(t, &want, "fake_flag", false)
	mustSet(t, &want, "fake_mounts", []string{"/data:/data:ro", "/a b:/c"})
	mustSet(t, &want, "fake_env", map[string]string{"A": "1", "B": "2"})
	if diff := cmp.Diff(want, c.Terminal, allowTerminal); diff != "" {
		t.Errorf("Terminal (-want +got):\n%s", diff)
	}
	if c.Path != path || c.MaxOutputChars != 20000 {
		t.Errorf("Path %q MaxOutputChars %d", c.Path, c.MaxOutputChars)
	}
	wantApprovals := Approvals{Mode: "off", Timeout: 30, Deny: []string{"git push --force*"}}
	if diff := cmp.Diff(wantApprovals, c.Approvals); diff != "" {
		t.Errorf("Approvals (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"rule:git-reset-hard"}, c.CommandAllowlist); diff != "" {
		t.Errorf("CommandAllowlist (-want +got):\n%s", diff)
	}
	if want := (Checkpoints{MaxPerEnvironment: 3, MaxTotalMB: 100, EnvironmentTool: true}); c.Checkpoints != want {
		t.Errorf("Checkpoints = %+v, want %+v", c.Checkpoints, want)
	}
	for _, k := range Keys() {
		if c.Sources[k] != "file" {
			t.Errorf("Sources[%s] = %q, want file", k, c.Sources[k])
		}
	}
	if len(c.Warnings) != 0 {
		t.Errorf("Warnings: %v", c.Warnings)
	}
}

func TestEmptyValuesKeepDefaults(t *testing.T) {
	home, env := homeEnv(t, nil)
	writeFile(t, filepath.Join(home, "config.yaml"), "terminal:\n  timeout:\n  fake_mounts: ~\n  env_passthrough: ~\ntool_output:\n")
	c := mustLoad(t, LoadOptions{Getenv: envOf(env)})
	if diff := cmp.Diff(defaultTerminal(), c.Terminal, allowTerminal); diff != "" {
		t.Errorf("Terminal (-want +got):\n%s", diff)
	}
	if c.Sources["terminal.timeout"] != "default" {
		t.Errorf("source %q", c.Sources["terminal.timeout"])
	}
}

func TestPrecedence(t *testing.T) {
	home, env := homeEnv(t, nil)
	writeFile(t, filepath.Join(home, "config.yaml"), "terminal:\n  backend: fake\n  timeout: 30\n  cwd: /file\n  fake_port: 2200\n  fake_mounts: [/f:/f]\n")
	tests := []struct {
		name    string
		env     map[string]string
		flags   map[string]string
		backend string
		timeout int
		cwd     string
		sources map[string]string
	}{
		{"file", nil, nil, "fake", 30, "/file",
			map[string]string{"terminal.backend": "file", "terminal.timeout": "file", "terminal.cwd": "file", "terminal.lifetime_seconds": "default"}},
		{"env over file", map[string]string{"TERMINAL_ENV": "fake2", "TERMINAL_TIMEOUT": "45"}, nil, "fake2", 45, "/file",
			map[string]string{"terminal.backend": "env:TERMINAL_ENV", "terminal.timeout": "env:TERMINAL_TIMEOUT", "terminal.cwd": "file"}},
		{"flag over env", map[string]string{"TERMINAL_ENV": "fake2", "TERMINAL_TIMEOUT": "45", "TERMINAL_CWD": "/env"},
			map[string]string{"backend": "fake", "terminal.timeout": "5"}, "fake", 5, "/env",
			map[string]string{"terminal.backend": "flag", "terminal.timeout": "flag", "terminal.cwd": "env:TERMINAL_CWD"}},
		{"TERMINAL_ENV is case-insensitive", map[string]string{"TERMINAL_ENV": " Fake2 "}, nil, "fake2", 30, "/file", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := map[string]string{}
			for k, v := range env {
				e[k] = v
			}
			for k, v := range tt.env {
				e[k] = v
			}
			c := mustLoad(t, LoadOptions{Getenv: envOf(e), Flags: tt.flags})
			if c.Terminal.Backend != tt.backend || c.Terminal.Timeout != tt.timeout || c.Terminal.Cwd != tt.cwd {
				t.Errorf("backend %q timeout %d cwd %q", c.Terminal.Backend, c.Terminal.Timeout, c.Terminal.Cwd)
			}
			if c.Terminal.Int("fake_port") != 2200 {
				t.Errorf("fake_port %d", c.Terminal.Int("fake_port"))
			}
			for k, want := range tt.sources {
				if c.Sources[k] != want {
					t.Errorf("Sources[%s] = %q, want %q", k, c.Sources[k], want)
				}
			}
		})
	}
}

func TestEnvVariables(t *testing.T) {
	_, env := homeEnv(t, map[string]string{
		"TERMINAL_LIFETIME_SECONDS":          "60",
		"TERMINAL_CONTAINER_CPU":             "0.5",
		"TERMINAL_CONTAINER_MEMORY":          "1024",
		"TERMINAL_CONTAINER_DISK":            "4096",
		"TERMINAL_CONTAINER_PERSISTENT":      "OFF",
		"TERMINAL_DOCKER_NETWORK":            "0",
		"TERMINAL_PERSISTENT_SHELL":          "false",
		"TERMINAL_DAEMON_TERM_GRACE_SECONDS": "0",
		"TERMINAL_MAX_FOREGROUND_TIMEOUT":    "30",
		"TERMINAL_SHARE_ENVIRONMENT":         "1",
		"TERMINAL_DOCKER_FORWARD_ENV":        `["TOKEN"]`,
		"TERMINAL_ENV_PASSTHROUGH":           `[]`,
		"TERMINAL_FAKE_IMAGE":                "img:2",
		"TERMINAL_FAKE_PORT":                 "2022",
		"TERMINAL_FAKE_RATIO":                "0.25",
		"TERMINAL_FAKE_FLAG":                 "off",
		"TERMINAL_FAKE_MOUNTS":               `["/a:/b", "/c:/d:ro"]`,
		"FAKE_ENV_JSON":                      `{"X": "1", "N": 2, "B": true}`,
		"TERMINAL_FAKE_ENV":                  `not read: the key declares FAKE_ENV_JSON`,
	})
	c := mustLoad(t, LoadOptions{Getenv: envOf(env)})
	want := defaultTerminal()
	want.LifetimeSeconds = 60
	want.ContainerCPU = 0.5
	want.ContainerMemory = 1024
	want.ContainerDisk = 4096
	want.ContainerPersistent = false
	want.DockerNetwork = false
	want.PersistentShell = false
	want.DaemonTermGraceSeconds = 0
	want.MaxForegroundTimeout = 30
	want.ShareEnvironment = true
	want.DockerForwardEnv = []string{"TOKEN"}
	mustSet(t, &want, "fake_image", "img:2")
	mustSet(t, &want, "fake_port", 2022)
	mustSet(t, &want, "fake_ratio", 0.25)
	mustSet(t, &want, "fake_flag", false)
	mustSet(t, &want, "fake_mounts", []string{"/a:/b", "/c:/d:ro"})
	mustSet(t, &want, "fake_env", map[string]string{"X": "1", "N": "2", "B": "true"})
	if diff := cmp.Diff(want, c.Terminal, allowTerminal); diff != "" {
		t.Errorf("Terminal (-want +got):\n%s", diff)
	}
	for key, src := range map[string]string{"terminal.fake_mounts": "env:TERMINAL_FAKE_MOUNTS", "terminal.fake_env": "env:FAKE_ENV_JSON", "terminal.timeout": "default"} {
		if c.Sources[key] != src {
			t.Errorf("Sources[%s] = %q, want %q", key, c.Sources[key], src)
		}
	}
}

// Declared keys follow the same precedence as shared ones: flag > variable
// (process, then .env) > file > default, each of every kind.
func TestDeclaredPrecedence(t *testing.T) {
	home, env := homeEnv(t, nil)
	writeFile(t, filepath.Join(home, "config.yaml"), `terminal:
  fake_image: file:1
  fake_port: 1001
  fake_ratio: 0.1
  fake_flag: false
  fake_mounts: [/file:/file]
  fake_env: {F: file}
`)
	writeFile(t, filepath.Join(home, ".env"), "TERMINAL_FAKE_PORT=1002\nTERMINAL_FAKE_RATIO=0.2\n")
	env["TERMINAL_FAKE_RATIO"] = "0.3"
	env["TERMINAL_FAKE_MOUNTS"] = `["/env:/env"]`
	env["FAKE_ENV_JSON"] = `{"E": "env"}`
	c := mustLoad(t, LoadOptions{Getenv: envOf(env), Flags: map[string]string{
		"fake_mounts":        `["/flag:/flag"]`,
		"terminal.fake_flag": "yes",
	}})
	term := c.Terminal
	got := []any{term.String("fake_image"), term.Int("fake_port"), term.Float("fake_ratio"), term.Bool("fake_flag"), term.List("fake_mounts"), term.Map("fake_env")}
	want := []any{"file:1", 1002, 0.3, true, []string{"/flag:/flag"}, map[string]string{"E": "env"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("values (-want +got):\n%s", diff)
	}
	wantSrc := map[string]string{
		"terminal.fake_image": "file", "terminal.fake_port": "env:TERMINAL_FAKE_PORT", "terminal.fake_ratio": "env:TERMINAL_FAKE_RATIO",
		"terminal.fake_flag": "flag", "terminal.fake_mounts": "flag", "terminal.fake_env": "env:FAKE_ENV_JSON",
	}
	for k, w := range wantSrc {
		if c.Sources[k] != w {
			t.Errorf("Sources[%s] = %q, want %q", k, c.Sources[k], w)
		}
	}
	// Nothing set: the declared defaults, from "default".
	c = mustLoad(t, LoadOptions{Getenv: envOf(map[string]string{"HOME": t.TempDir()})})
	if c.Terminal.Int("fake_port") != 22 || c.Sources["terminal.fake_port"] != "default" {
		t.Errorf("default: %d from %q", c.Terminal.Int("fake_port"), c.Sources["terminal.fake_port"])
	}
}

const hermesConfig = `# Hermes Agent configuration
model:
  default: anthropic/claude-opus-4
  provider: openrouter   # or "anthropic"

agent:
  max_turns: 60
  reasoning_effort: medium

terminal:
  # Execution backend: local, docker, ssh, singularity, modal, daytona
  backend: docker
  cwd: "."
  timeout: 180
  docker_image: "nikolaik/python-nodejs:python3.11-nodejs20"
  docker_volumes: []
  dokcer_network: false   # typo: must warn, not fail
  modal_mode: auto

mcp_servers:
  github:
    command: npx
    args: ["-y", "@modelcontextprotocol/server-github"]
    env:
      GITHUB_PERSONAL_ACCESS_TOKEN: "${GITHUB_TOKEN}"

compression:
  enabled: true
  threshold: 0.85
`

func TestHermesFile(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, filepath.Join(dir, ".hermes", "config.yaml"), hermesConfig)
	c := mustLoad(t, LoadOptions{ConfigPath: path, Getenv: envOf(map[string]string{"HOME": dir})})
	if c.Path != path || c.Terminal.Backend != "docker" || c.Terminal.Cwd != "." || c.Terminal.Timeout != 180 {
		t.Errorf("Path %q Terminal %+v", c.Path, c.Terminal)
	}
	if !c.Terminal.DockerNetwork {
		t.Error("misspelled key changed docker_network")
	}
	// This test binary has only the fake backends, so docker and modal are
	// contract backends not in this build: their keys are named as such.
	want := [][]string{
		{"terminal.docker_image", path, "line 15", "a key of backend docker, which is not built into this berth; ignored"},
		{"terminal.docker_volumes", "line 16", "backend docker"},
		{"terminal.dokcer_network", path, "line 17", "unknown key", "did you mean docker_network?"},
		{"terminal.modal_mode", "line 18", "a key of backend modal, which is not built"},
		{`terminal.backend "docker" (from file): backend docker is not built into this berth (built in: fake, fake2;`},
	}
	if len(c.Warnings) != len(want) {
		t.Fatalf("Warnings = %q, want %d", c.Warnings, len(want))
	}
	for i, ws := range want {
		for _, w := range ws {
			if !strings.Contains(c.Warnings[i], w) {
				t.Errorf("warning %q lacks %q", c.Warnings[i], w)
			}
		}
	}
}

func TestValidationErrors(t *testing.T) {
	tests := []struct {
		name  string
		file  string // terminal: section body
		env   map[string]string
		flags map[string]string
		want  []string // substrings; the first is checked as the whole message when exact
		exact bool
	}{
		{name: "timeout env exact", env: map[string]string{"TERMINAL_TIMEOUT": "abc"},
			want: []string{`TERMINAL_TIMEOUT="abc": not an integer (terminal.timeout must be a whole number of seconds >= 1)`}, exact: true},
		{name: "backend file exact", file: "  backend: dokcer\n",
			want: []string{`terminal.backend "dokcer" in PATH: unknown backend, did you mean docker? (built in: fake, fake2; in the contract but not in this build: local, docker, ssh, singularity, modal, daytona)`}, exact: true},
		{name: "backend env", env: map[string]string{"TERMINAL_ENV": "kubernetes"},
			want: []string{`TERMINAL_ENV="kubernetes"`, "unknown backend", "local, docker, ssh"}},
		{name: "backend flag", flags: map[string]string{"backend": "vm"},
			want: []string{`flag terminal.backend "vm"`, "unknown backend"}},
		{name: "negative timeout", env: map[string]string{"TERMINAL_TIMEOUT": "-5"},
			want: []string{`TERMINAL_TIMEOUT="-5"`, "out of range", ">= 1"}},
		{name: "zero timeout file", file: "  timeout: 0\n", want: []string{`terminal.timeout "0"`, ">= 1"}},
		{name: "float timeout file", file: "  timeout: 1.5\n", want: []string{`terminal.timeout "1.5"`, "not an integer"}},
		{name: "timeout flag", flags: map[string]string{"timeout": "5s"}, want: []string{`flag terminal.timeout "5s"`, "not an integer"}},
		{name: "declared port", env: map[string]string{"TERMINAL_FAKE_PORT": "70000"},
			want: []string{`TERMINAL_FAKE_PORT="70000": must be a whole number from 1 to 65535`}, exact: true},
		{name: "declared port zero", file: "  fake_port: 0\n", want: []string{`terminal.fake_port "0" in PATH: must be a whole number from 1 to 65535`}, exact: true},
		{name: "declared port flag", flags: map[string]string{"fake_port": "x"},
			want: []string{`flag terminal.fake_port "x": not an integer (terminal.fake_port must be a whole number: port of the fake host)`}, exact: true},
		{name: "declared float", env: map[string]string{"TERMINAL_FAKE_RATIO": "2"}, want: []string{`TERMINAL_FAKE_RATIO="2": must be from 0 to 1, not 2`}, exact: true},
		{name: "declared float nan", env: map[string]string{"TERMINAL_FAKE_RATIO": "nan"}, want: []string{`TERMINAL_FAKE_RATIO="nan"`, "not a number"}},
		{name: "declared bool", file: "  fake_flag: maybe\n", want: []string{`terminal.fake_flag "maybe" in PATH`, "not a boolean"}},
		{name: "declared string check", file: "  fake_image: ''\n", want: []string{`terminal.fake_image "" in PATH: must name an image, e.g. img:1`}, exact: true},
		{name: "declared list check in file", file: "  fake_mounts:\n    - /a:/b\n    - nocolon\n",
			want: []string{`terminal.fake_mounts in PATH (line 3): mount "nocolon" lacks a colon`}, exact: true},
		{name: "declared list check in env", env: map[string]string{"TERMINAL_FAKE_MOUNTS": `["x"]`}, want: []string{`TERMINAL_FAKE_MOUNTS="[\"x\"]": mount "x" lacks a colon`}},
		{name: "cpu", env: map[string]string{"TERMINAL_CONTAINER_CPU": "0"}, want: []string{`TERMINAL_CONTAINER_CPU="0"`, "> 0"}},
		{name: "cpu nan", env: map[string]string{"TERMINAL_CONTAINER_CPU": "NaN"}, want: []string{`TERMINAL_CONTAINER_CPU="NaN"`, "not a number"}},
		{name: "memory", env: map[string]string{"TERMINAL_CONTAINER_MEMORY": "-1"}, want: []string{`TERMINAL_CONTAINER_MEMORY="-1"`, "MB > 0"}},
		{name: "disk", file: "  container_disk: 0\n", want: []string{`terminal.container_disk "0"`, "MB > 0"}},
		{name: "memory malformed", env: map[string]string{"TERMINAL_CONTAINER_MEMORY": "4g"}, want: []string{`TERMINAL_CONTAINER_MEMORY="4g"`, "not an integer"}},
		{name: "grace", env: map[string]string{"TERMINAL_DAEMON_TERM_GRACE_SECONDS": "-1"}, want: []string{`TERMINAL_DAEMON_TERM_GRACE_SECONDS="-1"`, ">= 0"}},
		{name: "bool", env: map[string]string{"TERMINAL_DOCKER_NETWORK": "maybe"}, want: []string{`TERMINAL_DOCKER_NETWORK="maybe"`, "not a boolean", "yes/no"}},
		{name: "declared list json", env: map[string]string{"TERMINAL_FAKE_MOUNTS": "/a:/b"},
			want: []string{`TERMINAL_FAKE_MOUNTS="/a:/b": not a JSON array of strings (terminal.fake_mounts takes a list of strings; as a variable or with config set, a JSON array such as ["a", "b"]: mounts, each "host:container")`}, exact: true},
		{name: "forward env json", env: map[string]string{"TERMINAL_DOCKER_FORWARD_ENV": `[1]`}, want: []string{`TERMINAL_DOCKER_FORWARD_ENV="[1]"`, "JSON array"}},
		{name: "declared map json", env: map[string]string{"FAKE_ENV_JSON": `["A=1"]`}, want: []string{`FAKE_ENV_JSON=(7 characters, not shown: it may hold secrets)`, "JSON object", "terminal.fake_env"}},
		// N15: a refused value never shows a secret: a map's value not at
		// all, any other one with its secret shapes redacted.
		{name: "map value with a secret", env: map[string]string{"FAKE_ENV_JSON": `{"A":"sk-proj-INVALIDJSONSECRET`}, want: []string{"FAKE_ENV_JSON=(31 characters, not shown", "JSON object"}},
		{name: "secret shape in a scalar", env: map[string]string{"TERMINAL_TIMEOUT": "sk-proj-abcdefghijklmnopqrstuvwxyz012345"}, want: []string{"TERMINAL_TIMEOUT=", "[REDACTED]"}},
		{name: "declared map in file is a list", file: "  fake_env: [a]\n", want: []string{"terminal.fake_env in PATH (line 2)", "not a mapping"}},
		{name: "passthrough json", env: map[string]string{"TERMINAL_ENV_PASSTHROUGH": `{`}, want: []string{`TERMINAL_ENV_PASSTHROUGH="{"`, "JSON array"}},
		{name: "list in file is a mapping", file: "  fake_mounts:\n    a: b\n", want: []string{"terminal.fake_mounts in PATH (line 3)", "not a list"}},
		{name: "scalar key given a list", file: "  timeout: [1]\n", want: []string{"terminal.timeout in PATH (line 2)", "a list or mapping"}},
		{name: "max bytes", file: "", flags: map[string]string{"tool_output.max_bytes": "999"},
			want: []string{`flag tool_output.max_bytes "999"`, ">= 1000", "truncation notice"}},
		{name: "unknown flag", flags: map[string]string{"tiemout": "5"}, want: []string{`unknown key "tiemout"`, "did you mean terminal.timeout?"}},
		{name: "unknown flag of a backend not built", flags: map[string]string{"modal_image": "x"},
			want: []string{`flag: unknown key "modal_image": it belongs to backend modal, which is not built into this berth`}, exact: true},
		{name: "two errors", env: map[string]string{"TERMINAL_TIMEOUT": "x", "TERMINAL_FAKE_PORT": "y"},
			want: []string{"TERMINAL_TIMEOUT", "TERMINAL_FAKE_PORT"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			home, env := homeEnv(t, tt.env)
			path := filepath.Join(home, "config.yaml")
			if tt.file != "" {
				writeFile(t, path, "terminal:\n"+tt.file)
			}
			_, err := Load(LoadOptions{Getenv: envOf(env), Flags: tt.flags})
			if err == nil {
				t.Fatal("Load succeeded")
			}
			msg := err.Error()
			if tt.exact {
				if want := strings.ReplaceAll(tt.want[0], "PATH", path); msg != want {
					t.Errorf("error:\n got %s\nwant %s", msg, want)
				}
				return
			}
			for _, w := range tt.want {
				if w = strings.ReplaceAll(w, "PATH", path); !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
			for _, secret := range []string{"INVALIDJSONSECRET", "abcdefghijklmnopqrstuvwxyz"} {
				if strings.Contains(msg, secret) {
					t.Errorf("error %q shows the secret", msg)
				}
			}
		})
	}
}

func TestMaxBytesFromFile(t *testing.T) {
	home, env := homeEnv(t, nil)
	path := writeFile(t, filepath.Join(home, "config.yaml"), "tool_output:\n  max_bytes: 10\n")
	_, err := Load(LoadOptions{Getenv: envOf(env)})
	want := `tool_output.max_bytes "10" in ` + path + `: out of range (tool_output.max_bytes must be a whole number >= 1000`
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %v, want prefix %s", err, want)
	}
}

func TestYAMLSyntaxError(t *testing.T) {
	home, env := homeEnv(t, nil)
	path := writeFile(t, filepath.Join(home, "config.yaml"), "terminal:\n  backend: docker\n  timeout: [1, 2\nmodel: x\n")
	_, err := Load(LoadOptions{Getenv: envOf(env)})
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "line ") {
		t.Errorf("error %v should name %s and the line", err, path)
	}
}

func TestTopLevelNotMapping(t *testing.T) {
	home, env := homeEnv(t, nil)
	writeFile(t, filepath.Join(home, "config.yaml"), "- a\n- b\n")
	if _, err := Load(LoadOptions{Getenv: envOf(env)}); err == nil || !strings.Contains(err.Error(), "top level") {
		t.Errorf("error %v", err)
	}
	writeFile(t, filepath.Join(home, "config.yaml"), "terminal: docker\n")
	if _, err := Load(LoadOptions{Getenv: envOf(env)}); err == nil || !strings.Contains(err.Error(), "terminal in") {
		t.Errorf("error %v", err)
	}
	writeFile(t, filepath.Join(home, "config.yaml"), "# only comments\n")
	if _, err := Load(LoadOptions{Getenv: envOf(env)}); err != nil {
		t.Errorf("comment-only file: %v", err)
	}
}

func TestMissingExplicitFile(t *testing.T) {
	home, env := homeEnv(t, nil)
	missing := filepath.Join(home, "nope.yaml")
	_, err := Load(LoadOptions{ConfigPath: missing, Getenv: envOf(env)})
	if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "--config") {
		t.Errorf("--config: error %v", err)
	}
	env["BERTH_CONFIG"] = missing
	_, err = Load(LoadOptions{Getenv: envOf(env)})
	if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "BERTH_CONFIG") {
		t.Errorf("BERTH_CONFIG: error %v", err)
	}
}

func TestResolvePath(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name     string
		flag     string
		env      map[string]string
		want     string
		explicit bool
	}{
		{"flag wins", "/x/flag.yaml", map[string]string{"BERTH_CONFIG": "/x/env.yaml", "BERTH_HOME": "/x/home"}, "/x/flag.yaml", true},
		{"BERTH_CONFIG", "", map[string]string{"BERTH_CONFIG": "/x/env.yaml", "BERTH_HOME": "/x/home"}, "/x/env.yaml", true},
		{"BERTH_HOME", "", map[string]string{"BERTH_HOME": "/x/home", "HOME": dir}, "/x/home/config.yaml", false},
		{"default home", "", map[string]string{"HOME": dir}, filepath.Join(dir, ".berth", "config.yaml"), false},
		{"tilde", "~/.hermes/config.yaml", map[string]string{"HOME": dir}, filepath.Join(dir, ".hermes", "config.yaml"), true},
		{"tilde home", "", map[string]string{"HOME": dir, "BERTH_HOME": "~/b"}, filepath.Join(dir, "b", "config.yaml"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, explicit, err := ResolvePath(tt.flag, envOf(tt.env))
			if err != nil || got != tt.want || explicit != tt.explicit {
				t.Errorf("ResolvePath = %q, %v, %v; want %q, %v", got, explicit, err, tt.want, tt.explicit)
			}
		})
	}
	rel, _, err := ResolvePath("rel.yaml", envOf(nil))
	if err != nil || !filepath.IsAbs(rel) {
		t.Errorf("relative flag: %q %v", rel, err)
	}
}

func TestBerthConfigLoads(t *testing.T) {
	home, env := homeEnv(t, nil)
	other := writeFile(t, filepath.Join(t.TempDir(), "other.yaml"), "terminal:\n  timeout: 7\n")
	writeFile(t, filepath.Join(home, "config.yaml"), "terminal:\n  timeout: 9\n")
	env["BERTH_CONFIG"] = other
	c := mustLoad(t, LoadOptions{Getenv: envOf(env)})
	if c.Path != other || c.Terminal.Timeout != 7 {
		t.Errorf("Path %q timeout %d", c.Path, c.Terminal.Timeout)
	}
}

func TestDotEnvPrecedence(t *testing.T) {
	home, env := homeEnv(t, map[string]string{"TERMINAL_TIMEOUT": "11", "SECRET": "process"})
	writeFile(t, filepath.Join(home, "config.yaml"), "terminal:\n  timeout: 5\n  fake_port: 23\n")
	writeFile(t, filepath.Join(home, ".env"), "TERMINAL_TIMEOUT=22\nTERMINAL_FAKE_PORT=2222\nexport SECRET=dotenv\nAPI_KEY='sk-abc'\n")
	c := mustLoad(t, LoadOptions{Getenv: envOf(env)})
	if c.Terminal.Timeout != 11 {
		t.Errorf("timeout %d: the process environment must win over .env", c.Terminal.Timeout)
	}
	if c.Terminal.Int("fake_port") != 2222 || c.Sources["terminal.fake_port"] != "env:TERMINAL_FAKE_PORT" {
		t.Errorf("fake_port %d from %q: .env must win over the file", c.Terminal.Int("fake_port"), c.Sources["terminal.fake_port"])
	}
	if got := c.Getenv("SECRET"); got != "process" {
		t.Errorf("Getenv(SECRET) = %q", got)
	}
	if got := c.Getenv("API_KEY"); got != "sk-abc" {
		t.Errorf("Getenv(API_KEY) = %q", got)
	}
	if got := c.Getenv("NOPE"); got != "" {
		t.Errorf("Getenv(NOPE) = %q", got)
	}
	if c.DotEnv["SECRET"] != "dotenv" {
		t.Errorf("DotEnv %v", c.DotEnv)
	}
	if _, ok := os.LookupEnv("API_KEY"); ok {
		t.Error(".env leaked into the process environment")
	}

	writeFile(t, filepath.Join(home, ".env"), "TERMINAL_FAKE_PORT=http\n")
	_, err := Load(LoadOptions{Getenv: envOf(env)})
	if err == nil || !strings.Contains(err.Error(), `TERMINAL_FAKE_PORT="http" (from `+filepath.Join(home, ".env")+")") {
		t.Errorf("error %v should name the variable, value and .env", err)
	}
}

func TestDotEnvBesideExplicitConfig(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, filepath.Join(dir, ".hermes", "config.yaml"), "model: x\n")
	writeFile(t, filepath.Join(dir, ".hermes", ".env"), "TERMINAL_ENV=fake\n")
	c := mustLoad(t, LoadOptions{ConfigPath: path, Getenv: envOf(map[string]string{"HOME": dir})})
	if c.Terminal.Backend != "fake" {
		t.Errorf("backend %q", c.Terminal.Backend)
	}
}

func TestParseDotEnv(t *testing.T) {
	text := "# comment\n\n" +
		"A=1\n" +
		"export B = two words \n" +
		"C=\"line1\\nline2 \\\"q\\\" \\\\ # not a comment\"  # comment\n" +
		"D='single $HOME \\n'\n" +
		"E=value # trailing comment\n" +
		"F=a#b\n" +
		"G=\n" +
		"H=\"multi\n" +
		"line\"\n" +
		"not a line\n" +
		"I=\"unterminated\n" +
		"A=override\r\n"
	vals, warns := parseDotEnv(text, ".env")
	want := map[string]string{
		"A": "override",
		"B": "two words",
		"C": "line1\nline2 \"q\" \\ # not a comment",
		"D": `single $HOME \n`,
		"E": "value",
		"F": "a#b",
		"G": "",
		"H": "multi\nline",
	}
	if diff := cmp.Diff(want, vals); diff != "" {
		t.Errorf("values (-want +got):\n%s", diff)
	}
	wantWarns := []string{".env:12: not a KEY=value line, ignored", ".env:13: I: unterminated \" quote, ignored"}
	if diff := cmp.Diff(wantWarns, warns); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}

func TestGet(t *testing.T) {
	home, env := homeEnv(t, map[string]string{"FAKE_ENV_JSON": `{"B":"2","A":"<1>"}`})
	writeFile(t, filepath.Join(home, "config.yaml"), "terminal:\n  container_cpu: 1.5\n  fake_mounts: [/a:/b]\n")
	c := mustLoad(t, LoadOptions{Getenv: envOf(env)})
	for key, want := range map[string]string{
		"terminal.backend":        "local",
		"backend":                 "local",
		"Terminal.Timeout":        "180",
		"terminal.container_cpu":  "1.5",
		"terminal.docker_network": "true",
		"terminal.fake_mounts":    `["/a:/b"]`,
		"docker_forward_env":      `[]`,
		"terminal.fake_env":       `{"A":"<1>","B":"2"}`,
		"fake_port":               "22",
		"fake_ratio":              "0.5",
		"fake_image":              "img:1",
		"fake_flag":               "true",
		"tool_output.max_bytes":   "50000",
		"terminal.cwd":            "",
	} {
		got, err := c.Get(key)
		if err != nil || got != want {
			t.Errorf("Get(%q) = %q, %v; want %q", key, got, err, want)
		}
	}
	if src, _ := c.Source("fake_env"); src != "env:FAKE_ENV_JSON" {
		t.Errorf("Source = %q", src)
	}
	for key, want := range map[string]string{
		"terminal.fkae_image":  "did you mean terminal.fake_image?",
		"modal_image":          "it belongs to backend modal, which is not built into this berth",
		"timout":               "did you mean terminal.timeout?",
		"tool_output.max_byte": "did you mean tool_output.max_bytes?",
		"max_bytes":            "did you mean tool_output.max_bytes?",
		"zzz":                  "keys: terminal.backend",
	} {
		_, err := c.Get(key)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), key) {
			t.Errorf("Get(%q) error %v, want it to contain %q", key, err, want)
		}
	}
}

func TestConfigGetenvZero(t *testing.T) {
	c := &Config{DotEnv: map[string]string{"BERTH_TEST_ONLY_IN_DOTENV": "x"}}
	if got := c.Getenv("BERTH_TEST_ONLY_IN_DOTENV"); got != "x" {
		t.Errorf("Getenv = %q", got)
	}
}
