package modal

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/a55dbaac/berth/backend"
)

// settings is everything the backend takes from the configuration.
type settings struct {
	Key         string
	App         string
	Image       string // registry name, or an "im-..." image id
	Timeout     time.Duration
	IdleTimeout time.Duration
	// SnapshotEvery is how often a persistent sandbox is snapshotted
	// while it runs; 0 = only on Close.
	SnapshotEvery time.Duration
	// Retry bounds the retries of calls Modal throttles or fails.
	Retry      retryPolicy
	CPU        float64 // cores requested; 0 = Modal's default
	MemoryMiB  int     // MiB requested; 0 = Modal's default
	DiskMB     int     // container_disk: the SDK takes no disk size; reported only
	Network    bool
	Persistent bool
	// Workdir is the sandbox's working directory: the configured cwd when
	// it is a path inside the sandbox, else /root (the contract's default
	// for containers).
	Workdir string
	// SessionEnv is delivered into the persistent shell over its stdin:
	// docker_env, then env_passthrough and docker_forward_env names with
	// their values from berth's environment.
	SessionEnv map[string]string
}

// readSettings reads the backend's settings from opts and checks what the
// configuration's own checks cannot: an empty image, negative resources.
// The modal keys' ranges are checked where they are set (file, variable,
// flag, Terminal.Set).
func readSettings(opts backend.Options) (settings, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	c := opts.Config
	s := settings{
		Key:           opts.Key,
		App:           c.String(keyApp),
		Image:         strings.TrimSpace(c.String(keyImage)),
		Timeout:       time.Duration(c.Int(keySandboxTimeout)) * time.Second,
		IdleTimeout:   time.Duration(c.Int(keyIdleTimeout)) * time.Second,
		SnapshotEvery: time.Duration(c.Int(keySnapshotInterval)) * time.Second,
		Retry:         retryPolicyOf(c.Int(keyRetryTimeout)),
		CPU:           c.ContainerCPU,
		MemoryMiB:     c.ContainerMemory,
		DiskMB:        c.ContainerDisk,
		Network:       c.DockerNetwork,
		Persistent:    c.ContainerPersistent,
		SessionEnv:    c.Map(keyDockerEnv),
		Workdir:       sandboxDir(c.Cwd),
	}
	if s.Key == "" {
		s.Key = "default"
	}
	if s.SessionEnv == nil {
		s.SessionEnv = map[string]string{}
	}
	if s.Image == "" {
		return s, fmt.Errorf("modal: %s is empty: set it to a registry image (e.g. python:3.12-slim) or an image id (im-...)", keyImage)
	}
	if s.CPU < 0 {
		return s, fmt.Errorf("modal: container_cpu=%v must not be negative", s.CPU)
	}
	if s.MemoryMiB < 0 {
		return s, fmt.Errorf("modal: container_memory=%d must not be negative", s.MemoryMiB)
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

// homeDir is the sandbox's home and default working directory.
const homeDir = "/root"

// sandboxDir maps the configured cwd into the sandbox (see
// backend.ContainerDir); everything that does not name a sandbox path means
// the home directory.
func sandboxDir(cwd string) string { return backend.ContainerDir(cwd, homeDir, homeDir) }
