package singularity

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
)

func TestInstanceName(t *testing.T) {
	a, b := InstanceName("task-1"), InstanceName("task-2")
	if !strings.HasPrefix(a, "berth_") || len(a) != len("berth_")+12 || a == b || a != InstanceName("task-1") {
		t.Errorf("InstanceName: %q %q", a, b)
	}
}

// load reads the configuration as berth does, from env (variables and
// BERTH_HOME) and the config file text yaml ("" for none).
func load(t *testing.T, env map[string]string, yaml string) (*config.Config, error) {
	t.Helper()
	home := t.TempDir()
	get := func(k string) string {
		if k == "BERTH_HOME" {
			return home
		}
		return env[k]
	}
	if yaml != "" {
		if err := os.WriteFile(filepath.Join(home, "config.yaml"), []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return config.Load(config.LoadOptions{Getenv: get})
}

func TestSettingsRejectBadValues(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string // TERMINAL_* variables read by config.Load
		set  map[string]any    // keys set with Terminal.Set
		cfg  func(*config.Terminal)
		want string
	}{
		{env: map[string]string{"TERMINAL_SINGULARITY_BINDS": `/a:/b`}, want: `TERMINAL_SINGULARITY_BINDS="/a:/b": not a JSON array of strings`},
		{env: map[string]string{"TERMINAL_SINGULARITY_BINDS": `["/a"]`}, want: `TERMINAL_SINGULARITY_BINDS="[\"/a\"]": bind "/a": use host:container`},
		{set: map[string]any{keyBinds: []string{"/a"}}, want: `terminal.singularity_binds "[\"/a\"]": bind "/a": use host:container`},
		{set: map[string]any{keyBinds: []string{"/a:/b", "/a:/b:rx"}}, want: `bind "/a:/b:rx"`},
		{set: map[string]any{keyBinds: []string{"/a,b:/b"}}, want: "splits --bind values at commas"},
		{env: map[string]string{"TERMINAL_SINGULARITY_OVERLAY": "tmp"}, want: `TERMINAL_SINGULARITY_OVERLAY="tmp": use dir, image or auto`},
		{set: map[string]any{keyOverlay: "tmp"}, want: `terminal.singularity_overlay "tmp": use dir, image or auto`},
		{set: map[string]any{keyForwardEnv: []string{"OK", "NOT-A-NAME"}}, want: `"NOT-A-NAME" is not a variable name`},
		{set: map[string]any{keyImage: " "}, want: `terminal.singularity_image " ": empty: set a .sif path`},
		{cfg: func(c *config.Terminal) { c.Cwd = "work" }, want: `terminal.cwd "work" must be an absolute path`},
	} {
		err := func() error {
			cfg := config.Default()
			if c.env != nil {
				var err error
				if cfg, err = load(t, c.env, ""); err != nil {
					return err
				}
			}
			for k, v := range c.set {
				if err := cfg.Terminal.Set(k, v); err != nil {
					return err
				}
			}
			if c.cfg != nil {
				c.cfg(&cfg.Terminal)
			}
			env := map[string]string{ScratchEnv: t.TempDir()}
			_, err := settingsFrom(backend.Options{Key: "k", Config: cfg.Terminal, Getenv: func(k string) string { return env[k] }})
			return err
		}()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %v: error %v, want it to mention %q", c.env, c.set, err, c.want)
		}
	}
}

func TestSettingsDefaults(t *testing.T) {
	scratch := t.TempDir()
	cfg := config.Default().Terminal
	s, err := settingsFrom(backend.Options{Key: "k", Config: cfg, Getenv: func(k string) string {
		if k == ScratchEnv {
			return scratch
		}
		return ""
	}})
	if err != nil {
		t.Fatal(err)
	}
	if s.image != "docker://"+config.DefaultImage || s.binary != "" || s.cwd != "/root" || s.scratch != scratch ||
		s.overlay != overlayAuto || !s.persistent || len(s.forward) != 0 || len(s.binds) != 0 {
		t.Errorf("settings: %+v", s)
	}
}

// The declared keys come from the file, their TERMINAL_SINGULARITY_*
// variables (which win over the file) and the shared keys.
func TestSettingsFromConfig(t *testing.T) {
	scratch := t.TempDir()
	env := map[string]string{
		ScratchEnv:                         scratch,
		"TERMINAL_SINGULARITY_FORWARD_ENV": `["B"]`,
		"TERMINAL_SINGULARITY_BINDS":       `["/x:/y"]`,
		"TERMINAL_SINGULARITY_OVERLAY":     "image",
		"TERMINAL_DOCKER_FORWARD_ENV":      `["C", "A"]`,
	}
	cfg, err := load(t, env, "terminal:\n  singularity_image: /images/py.sif\n  singularity_binary: /opt/apptainer/bin/apptainer\n"+
		"  singularity_overlay: dir\n  singularity_binds: [\"/from-file:/f\"]\n  env_passthrough: [A]\n")
	if err != nil {
		t.Fatal(err)
	}
	s, err := settingsFrom(backend.Options{Key: "k", Config: cfg.Terminal, Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatal(err)
	}
	if s.image != "/images/py.sif" || s.binary != "/opt/apptainer/bin/apptainer" || s.overlay != overlayImage ||
		strings.Join(s.binds, ",") != "/x:/y" || strings.Join(s.forward, ",") != "A,C,B" || s.scratch != scratch {
		t.Errorf("settings: %+v", s)
	}
}

// docker_mount_cwd_to_workspace, declared by docker and by this backend,
// binds the working directory on /workspace and starts there.
func TestMountCwdToWorkspace(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{ScratchEnv: t.TempDir(), "TERMINAL_DOCKER_MOUNT_CWD_TO_WORKSPACE": "true"}
	cfg, err := load(t, env, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Terminal.Set(keyBinds, []string{"/x:/y"}); err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string { return env[k] }
	s, err := settingsFrom(backend.Options{Key: "k", Config: cfg.Terminal, Getenv: getenv})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(s.binds, ",") != "/x:/y,"+wd+":/workspace" || s.cwd != "/workspace" {
		t.Errorf("binds %q, cwd %q", s.binds, s.cwd)
	}
	cfg.Terminal.Cwd = "/root/project"
	if s, err = settingsFrom(backend.Options{Key: "k", Config: cfg.Terminal, Getenv: getenv}); err != nil || s.cwd != "/root/project" {
		t.Errorf("a configured cwd gave way to /workspace: %q %v", s.cwd, err)
	}
}

func TestScratchFallsBackToBerthHome(t *testing.T) {
	home := t.TempDir()
	d, err := scratchDir(func(k string) string {
		if k == "USER" {
			return "berth-test-user-without-scratch"
		}
		return ""
	}, home)
	if err != nil || (d != home+"/singularity" && !strings.HasPrefix(d, "/scratch/")) {
		t.Errorf("scratch = %q, %v", d, err)
	}
}

func TestFatalLines(t *testing.T) {
	ce := &cliError{stderr: "INFO:    Instance stats will not be available - cannot use systemd cgroups manager\n" +
		"\x1b[91mERROR  : Requesting capability set 0x1 while permitted capability set is 0x0\n\x1b[0m" +
		"FATAL:   while executing starter: failed to start instance: while running /x/starter: exit status 1\n"}
	if got := ce.fatal(); got != "Requesting capability set 0x1 while permitted capability set is 0x0" {
		t.Errorf("fatal() = %q", got)
	}
	if isCgroupRefusal(ce) {
		t.Error("an INFO line about cgroups was taken for a refused limit")
	}
}

// An instance with a host directory bound in reaches the host's files, so
// it reports no isolation; one with no bind runs in its image alone.
func TestIsolationFollowsBinds(t *testing.T) {
	for _, tc := range []struct {
		binds []string
		want  backend.Isolation
	}{
		{nil, backend.IsolationImage},
		{[]string{"/home/dev:/home/dev"}, backend.IsolationNone},
	} {
		b := &Backend{set: &settings{binds: tc.binds}}
		if got := b.Capabilities().Isolation; got != tc.want {
			t.Errorf("binds %q: isolation %s, want %s", tc.binds, got, tc.want)
		}
	}
}

// TestBerthsHomeBoundWritableRefused: binding berth's home itself
// writable into the instance is refused, naming it and the fix; bound
// read-only it is left alone.
func TestBerthsHomeBoundWritableRefused(t *testing.T) {
	home := t.TempDir()
	getenv := func(k string) string {
		if k == ScratchEnv {
			return t.TempDir()
		}
		return ""
	}
	cfg := config.Default().Terminal
	if err := cfg.Set(keyBinds, []string{home + ":/berth"}); err != nil {
		t.Fatal(err)
	}
	if _, err := settingsFrom(backend.Options{Key: "k", Config: cfg, Home: home, Getenv: getenv}); err == nil || !strings.Contains(err.Error(), "bind it read-only (:ro)") {
		t.Fatalf("berth's home bound writable: %v", err)
	}
	if err := cfg.Set(keyBinds, []string{home + ":/berth:ro"}); err != nil {
		t.Fatal(err)
	}
	if s, err := settingsFrom(backend.Options{Key: "k", Config: cfg, Home: home, Getenv: getenv}); err != nil || len(s.kept) != 0 {
		t.Fatalf("berth's home bound read-only: %v", err)
	}
}
