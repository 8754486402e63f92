package modal

import (
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/a55dbaac/berth/backend"
)

// Defaults of the modal backend's own settings.
const (
	DefaultApp            = "berth"
	DefaultSandboxTimeout = time.Hour
)

// Setting names: the keys under terminal: in the config file and the
// variables that override them.
//
// The contract has no per-backend keys yet; until backend.Registration can
// declare them, the three modal-only settings are read from these TERMINAL_*
// variables (the process environment, else berth's .env) and modal_image
// from the config. One function, readSettings, reads them all.
const (
	EnvApp            = "TERMINAL_MODAL_APP"             // modal_app: the Modal app sandboxes run in
	EnvSandboxTimeout = "TERMINAL_MODAL_SANDBOX_TIMEOUT" // modal_sandbox_timeout: seconds a sandbox may live
	EnvIdleTimeout    = "TERMINAL_MODAL_IDLE_TIMEOUT"    // modal_idle_timeout: seconds idle before Modal stops it; 0 = never
)

// settings is everything the backend takes from the configuration.
type settings struct {
	Key         string
	App         string
	Image       string // registry name, or an "im-..." image id
	Timeout     time.Duration
	IdleTimeout time.Duration
	CPU         float64 // cores requested; 0 = Modal's default
	MemoryMiB   int     // MiB requested; 0 = Modal's default
	DiskMB      int     // container_disk: the SDK takes no disk size; reported only
	Network     bool
	Persistent  bool
	// Workdir is the sandbox's working directory: the configured cwd when
	// it is a path inside the sandbox, else /root (the contract's default
	// for containers).
	Workdir string
	// SessionEnv is delivered into the persistent shell over its stdin:
	// docker_env, then env_passthrough and docker_forward_env names with
	// their values from berth's environment.
	SessionEnv map[string]string
}

// readSettings reads the backend's settings from opts and checks them.
func readSettings(opts backend.Options) (settings, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	c := opts.Config
	s := settings{
		Key:        opts.Key,
		App:        DefaultApp,
		Image:      strings.TrimSpace(c.ModalImage),
		Timeout:    DefaultSandboxTimeout,
		CPU:        c.ContainerCPU,
		MemoryMiB:  c.ContainerMemory,
		DiskMB:     c.ContainerDisk,
		Network:    c.DockerNetwork,
		Persistent: c.ContainerPersistent,
		SessionEnv: map[string]string{},
		Workdir:    sandboxDir(c.Cwd),
	}
	if s.Key == "" {
		s.Key = "default"
	}
	if v := strings.TrimSpace(getenv(EnvApp)); v != "" {
		s.App = v
	}
	if !validAppName(s.App) {
		return s, fmt.Errorf("modal: %s=%q: an app name is 1 to 64 letters, digits, '.', '-' or '_'", EnvApp, s.App)
	}
	if s.Image == "" {
		return s, fmt.Errorf("modal: modal_image is empty: set it to a registry image (e.g. python:3.12-slim) or an image id (im-...)")
	}
	var err error
	if s.Timeout, err = seconds(getenv, EnvSandboxTimeout, DefaultSandboxTimeout, time.Second); err != nil {
		return s, err
	}
	if s.IdleTimeout, err = seconds(getenv, EnvIdleTimeout, 0, 0); err != nil {
		return s, err
	}
	if s.CPU < 0 {
		return s, fmt.Errorf("modal: container_cpu=%v must not be negative", s.CPU)
	}
	if s.MemoryMiB < 0 {
		return s, fmt.Errorf("modal: container_memory=%d must not be negative", s.MemoryMiB)
	}
	for k, v := range c.DockerEnv {
		s.SessionEnv[k] = v
	}
	for _, list := range [][]string{c.EnvPassthrough, c.DockerForwardEnv} {
		for _, n := range list {
			if v := getenv(n); v != "" {
				s.SessionEnv[n] = v
			}
		}
	}
	return s, nil
}

// seconds reads a whole number of seconds from a variable: at least min,
// at most Modal's 24 hours.
func seconds(getenv func(string) string, name string, def, min time.Duration) (time.Duration, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	d := time.Duration(n) * time.Second
	if err != nil || d < min || d > 24*time.Hour {
		return 0, fmt.Errorf("modal: %s=%q: want whole seconds from %d to 86400 (Modal's limit is 24 hours)", name, v, int(min/time.Second))
	}
	return d, nil
}

func validAppName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// homeDir is the sandbox's home and default working directory.
const homeDir = "/root"

// sandboxDir maps the configured cwd into the sandbox: "", "~", "." and
// relative paths mean /root, "~/x" means /root/x, and paths that name this
// machine's home directories (/home, /Users, ...) rather than the sandbox's
// fall back to /root too.
func sandboxDir(cwd string) string {
	cwd = strings.TrimSpace(cwd)
	switch {
	case cwd == "", cwd == "~", cwd == ".", !strings.HasPrefix(cwd, "/") && !strings.HasPrefix(cwd, "~/"):
		return homeDir
	case strings.HasPrefix(cwd, "~/"):
		return path.Join(homeDir, cwd[2:])
	case cwd == "/home" || strings.HasPrefix(cwd, "/home/"),
		cwd == "/Users" || strings.HasPrefix(cwd, "/Users/"),
		strings.HasPrefix(cwd, "/private/"), strings.HasPrefix(cwd, "/Volumes/"):
		return homeDir
	}
	return path.Clean(cwd)
}
