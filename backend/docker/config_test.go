package docker

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
)

// mustSet sets a configuration key in a test; a refused value is a bug in
// the test itself.
func mustSet(c *config.Terminal, name string, v any) {
	if err := c.Set(name, v); err != nil {
		panic(err)
	}
}

// The docker keys, declared by this package's registration, travel from the
// file, the variables and the flags into the container spec under their
// Hermes names.
func TestConfigKeysReachSpec(t *testing.T) {
	home := t.TempDir()
	path := filepath.Join(home, "config.yaml")
	if err := config.Set(path, "terminal.docker_image", "python:3.12"); err != nil {
		t.Fatal(err)
	}
	if err := config.Set(path, "docker_volumes", `["/srv/data:/data:ro"]`); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"BERTH_HOME":                home,
		"TERMINAL_DOCKER_ENV":       `{"DEBUG": "1", "MODE": "test"}`,
		"TERMINAL_DOCKER_VOLUMES":   `["/srv/env:/env"]`,
		"TERMINAL_DOCKER_READ_ONLY": "yes",
	}
	cfg, err := config.Load(config.LoadOptions{
		Getenv: func(k string) string { return env[k] },
		Flags:  map[string]string{"backend": Name, "docker_mount_cwd_to_workspace": "true"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Warnings) != 0 {
		t.Errorf("warnings: %q", cfg.Warnings)
	}
	for key, src := range map[string]string{
		"terminal.docker_image": "file", "terminal.docker_volumes": "env:TERMINAL_DOCKER_VOLUMES",
		"terminal.docker_env": "env:TERMINAL_DOCKER_ENV", "terminal.docker_read_only": "env:TERMINAL_DOCKER_READ_ONLY",
		"terminal.docker_mount_cwd_to_workspace": "flag",
	} {
		if got, _ := cfg.Source(key); got != src {
			t.Errorf("Source(%s) = %q, want %q", key, got, src)
		}
	}
	s, err := buildSpec(backend.Options{Key: "k", Config: cfg.Terminal})
	if err != nil {
		t.Fatal(err)
	}
	if s.Image != "python:3.12" || !s.ReadOnly || s.WorkDir != workspaceDir {
		t.Errorf("spec image %q read-only %v workdir %q", s.Image, s.ReadOnly, s.WorkDir)
	}
	if !slices.Contains(s.Binds, "/srv/env:/env") || slices.Contains(s.Binds, "/srv/data:/data:ro") {
		t.Errorf("binds %q: the variable must win over the file", s.Binds)
	}
	if !slices.Equal(s.Env, []string{"DEBUG=1", "MODE=test"}) {
		t.Errorf("env %q", s.Env)
	}

	// Defaults, and a bad value named with its key.
	d := config.Default().Terminal
	if d.String(keyImage) != config.DefaultImage || d.List(keyVolumes) == nil || d.Bool(keyReadOnly) {
		t.Errorf("defaults: image %q volumes %v read-only %v", d.String(keyImage), d.List(keyVolumes), d.Bool(keyReadOnly))
	}
	env["TERMINAL_DOCKER_READ_ONLY"] = "sometimes"
	_, err = config.Load(config.LoadOptions{Getenv: func(k string) string { return env[k] }})
	if err == nil || !strings.Contains(err.Error(), `TERMINAL_DOCKER_READ_ONLY="sometimes": not a boolean`) {
		t.Errorf("bad value: %v", err)
	}
}

// A container with a host directory bound in reaches the host's files, so
// it reports no isolation; named volumes are Docker's own and keep it.
func TestIsolationFollowsHostBinds(t *testing.T) {
	for _, tc := range []struct {
		volumes []string
		want    backend.Isolation
	}{
		{nil, backend.IsolationImage},
		{[]string{"cache:/cache"}, backend.IsolationImage},
		{[]string{"/srv/data:/data:ro"}, backend.IsolationNone},
	} {
		cfg := config.Default()
		if err := cfg.Terminal.Set(keyVolumes, tc.volumes); err != nil {
			t.Fatal(err)
		}
		s, err := buildSpec(backend.Options{Key: "k", Config: cfg.Terminal})
		if err != nil {
			t.Fatal(err)
		}
		if got := (&Backend{spec: s}).Capabilities().Isolation; got != tc.want {
			t.Errorf("volumes %q: isolation %s, want %s", tc.volumes, got, tc.want)
		}
	}
}
