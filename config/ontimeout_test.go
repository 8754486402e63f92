package config

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestOnTimeoutKey(t *testing.T) {
	_, env := homeEnv(t, nil)
	if c := mustLoad(t, LoadOptions{Getenv: envOf(env)}); c.Terminal.OnTimeout != "kill" {
		t.Fatalf("default on_timeout %q, want kill", c.Terminal.OnTimeout)
	}
	_, env = homeEnv(t, map[string]string{"TERMINAL_ON_TIMEOUT": "background"})
	if c := mustLoad(t, LoadOptions{Getenv: envOf(env)}); c.Terminal.OnTimeout != "background" {
		t.Fatalf("TERMINAL_ON_TIMEOUT=background read as %q", c.Terminal.OnTimeout)
	}
	home, env := homeEnv(t, nil)
	writeFile(t, filepath.Join(home, "config.yaml"), "terminal:\n  on_timeout: background\n")
	if c := mustLoad(t, LoadOptions{Getenv: envOf(env)}); c.Terminal.OnTimeout != "background" {
		t.Fatalf("on_timeout: background in the file read as %q", c.Terminal.OnTimeout)
	}

	for _, bad := range []map[string]string{{"TERMINAL_ON_TIMEOUT": "detach"}} {
		_, env := homeEnv(t, bad)
		_, err := Load(LoadOptions{Getenv: envOf(env)})
		if err == nil {
			t.Fatalf("TERMINAL_ON_TIMEOUT=detach accepted")
		}
		for _, want := range []string{"TERMINAL_ON_TIMEOUT", `"detach"`, "kill", "background"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not mention %s", err, want)
			}
		}
	}
	home, env = homeEnv(t, nil)
	writeFile(t, filepath.Join(home, "config.yaml"), "terminal:\n  on_timeout: nohup\n")
	if _, err := Load(LoadOptions{Getenv: envOf(env)}); err == nil || !strings.Contains(err.Error(), "terminal.on_timeout") || !strings.Contains(err.Error(), "nohup") {
		t.Fatalf("on_timeout: nohup in the file: %v", err)
	}
	if err := Set(filepath.Join(t.TempDir(), "c.yaml"), "terminal.on_timeout", "sometimes"); err == nil || !strings.Contains(err.Error(), "sometimes") || !strings.Contains(err.Error(), "is kill") {
		t.Fatalf("config set on_timeout sometimes: %v", err)
	}
}
