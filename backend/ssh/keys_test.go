package ssh

import (
	"os"
	"path/filepath"
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

// The ssh keys, declared by this package's registration, travel from the
// file and the variables into the connection target, and ssh_port keeps its
// range check.
func TestConfigKeysReachTarget(t *testing.T) {
	home := t.TempDir()
	path := filepath.Join(home, "config.yaml")
	if err := os.WriteFile(path, []byte("terminal:\n  backend: ssh\n  ssh_host: build@gpu-box\n  ssh_port: 2200\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"HOME": home, "BERTH_HOME": home, "TERMINAL_SSH_KEY": "~/.ssh/id_test"}
	getenv := func(k string) string { return env[k] }
	cfg, err := config.Load(config.LoadOptions{Getenv: getenv})
	if err != nil {
		t.Fatal(err)
	}
	tg, err := resolveTarget(backend.Options{Config: cfg.Terminal, Getenv: getenv}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tg.host != "gpu-box" || tg.user != "build" || tg.port != 2200 || tg.sshKey != filepath.Join(home, ".ssh", "id_test") {
		t.Errorf("target %s@%s:%d key %q", tg.user, tg.host, tg.port, tg.sshKey)
	}
	if d := config.Default().Terminal; d.Int(keyPort) != 22 || d.String(keyHost) != "" {
		t.Errorf("defaults: port %d host %q", d.Int(keyPort), d.String(keyHost))
	}

	for _, bad := range []struct{ env, file, want string }{
		{env: "70000", want: `TERMINAL_SSH_PORT="70000": must be a whole number from 1 to 65535`},
		{file: "0", want: `terminal.ssh_port "0" in ` + path + `: must be a whole number from 1 to 65535`},
		{env: "ssh", want: `TERMINAL_SSH_PORT="ssh": not an integer (terminal.ssh_port must be a whole number`},
	} {
		env["TERMINAL_SSH_PORT"] = bad.env
		text := "terminal:\n  ssh_port: 22\n"
		if bad.file != "" {
			text = "terminal:\n  ssh_port: " + bad.file + "\n"
		}
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := config.Load(config.LoadOptions{Getenv: getenv})
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ssh_port %q/%q: error %v, want %q", bad.env, bad.file, err, bad.want)
		}
	}
	var term config.Terminal
	if err := term.Set(keyPort, 0); err == nil || !strings.Contains(err.Error(), "terminal.ssh_port") {
		t.Errorf("Set(ssh_port, 0) = %v", err)
	}
}
