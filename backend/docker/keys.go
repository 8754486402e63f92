package docker

import "github.com/a55dbaac/berth/config"

// The configuration keys only this backend reads (Hermes names). The keys
// it shares with the other container backends (container_*,
// docker_forward_env, docker_network) are fields of config.Terminal.
const (
	keyImage    = "docker_image"
	keyVolumes  = "docker_volumes"
	keyMountCwd = "docker_mount_cwd_to_workspace"
	keyEnv      = "docker_env"
	keyReadOnly = "docker_read_only"
)

// configKeys are declared through the registration.
var configKeys = []config.Key{
	{Name: keyImage, Default: config.DefaultImage, Help: "image of the container (pulled once if missing)"},
	{Name: keyVolumes, Default: []string{}, Help: `bind mounts, each "host:container[:opts]", e.g. ["/data:/data:ro"]`},
	{Name: keyMountCwd, Default: false, Help: "bind-mount the host's working directory at /workspace and start there"},
	{Name: keyEnv, Default: map[string]string{}, Help: `variables set in the container, e.g. {"DEBUG": "1"}`},
	{Name: keyReadOnly, Default: false, Help: "berth: read-only root filesystem; /root, /workspace, volumes and tmpfs stay writable"},
}
