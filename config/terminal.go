// Package config holds berth's settings: the `terminal:` section of a
// Hermes-compatible YAML file, merged with TERMINAL_* environment variables
// and command-line flags, plus the berth home directory.
package config

// Terminal is the merged `terminal:` configuration with every key of the
// contract. Field names follow the YAML keys.
type Terminal struct {
	Backend                   string            `yaml:"backend"`
	Cwd                       string            `yaml:"cwd"` // "" = backend default ("." local, "~" ssh, "/root" containers)
	Timeout                   int               `yaml:"timeout"`
	LifetimeSeconds           int               `yaml:"lifetime_seconds"`
	DockerImage               string            `yaml:"docker_image"`
	SingularityImage          string            `yaml:"singularity_image"`
	ModalImage                string            `yaml:"modal_image"`
	DaytonaImage              string            `yaml:"daytona_image"`
	ContainerCPU              float64           `yaml:"container_cpu"`
	ContainerMemory           int               `yaml:"container_memory"` // MB
	ContainerDisk             int               `yaml:"container_disk"`   // MB
	ContainerPersistent       bool              `yaml:"container_persistent"`
	DockerVolumes             []string          `yaml:"docker_volumes"`
	DockerMountCwdToWorkspace bool              `yaml:"docker_mount_cwd_to_workspace"`
	DockerForwardEnv          []string          `yaml:"docker_forward_env"`
	DockerEnv                 map[string]string `yaml:"docker_env"`
	DockerNetwork             bool              `yaml:"docker_network"`
	DockerReadOnly            bool              `yaml:"docker_read_only"` // berth: read-only root, /root and /workspace writable
	SSHHost                   string            `yaml:"ssh_host"`
	SSHUser                   string            `yaml:"ssh_user"`
	SSHPort                   int               `yaml:"ssh_port"`
	SSHKey                    string            `yaml:"ssh_key"`
	PersistentShell           bool              `yaml:"persistent_shell"`
	DaemonTermGraceSeconds    float64           `yaml:"daemon_term_grace_seconds"`
	EnvPassthrough            []string          `yaml:"env_passthrough"`
	MaxForegroundTimeout      int               `yaml:"max_foreground_timeout"` // berth: TERMINAL_MAX_FOREGROUND_TIMEOUT, 600
	ShareEnvironment          bool              `yaml:"share_environment"`      // berth: one environment for every MCP session
}

// DefaultImage is the image the reference uses for every container backend.
const DefaultImage = "nikolaik/python-nodejs:python3.11-nodejs20"

// Defaults returns the terminal configuration with every default of the
// contract.
func Defaults() Terminal {
	return Terminal{
		Backend:                "local",
		Timeout:                180,
		LifetimeSeconds:        300,
		DockerImage:            DefaultImage,
		SingularityImage:       "docker://" + DefaultImage,
		ModalImage:             DefaultImage,
		DaytonaImage:           DefaultImage,
		ContainerCPU:           1,
		ContainerMemory:        5120,
		ContainerDisk:          51200,
		ContainerPersistent:    true,
		DockerVolumes:          []string{},
		DockerForwardEnv:       []string{},
		DockerEnv:              map[string]string{},
		DockerNetwork:          true,
		SSHPort:                22,
		PersistentShell:        true,
		DaemonTermGraceSeconds: 2,
		EnvPassthrough:         []string{},
		MaxForegroundTimeout:   600,
	}
}

// Backends lists every backend name the configuration accepts.
var Backends = []string{"local", "docker", "ssh", "singularity", "modal", "daytona"}
