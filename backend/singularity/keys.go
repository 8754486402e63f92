package singularity

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/a55dbaac/berth/config"
)

// The configuration keys this backend declares. Each is overridden by its
// TERMINAL_<NAME> variable (e.g. TERMINAL_SINGULARITY_BINDS), as every
// key is. The keys it shares with the other container backends
// (container_*, docker_forward_env, docker_network, env_passthrough) are
// fields of config.Terminal.
const (
	keyImage      = "singularity_image"
	keyBinary     = "singularity_binary"
	keyBinds      = "singularity_binds"
	keyForwardEnv = "singularity_forward_env"
	keyOverlay    = "singularity_overlay"
	// keyMountCwd is docker's key, declared here too (same kind and
	// variable) because this backend honours it the same way.
	keyMountCwd = "docker_mount_cwd_to_workspace"
)

// configKeys are declared through the registration.
var configKeys = []config.Key{
	{Name: keyImage, Default: "docker://" + config.DefaultImage, Check: checkImage,
		Help: "a .sif file, a sandbox directory, or a docker://, docker-daemon://, docker-archive://, oras:// or library:// reference (built once into a cached SIF)"},
	{Name: keyBinary, Default: "",
		Help: "the apptainer or singularity executable (name or path); empty: apptainer, else singularity, on PATH"},
	{Name: keyBinds, Default: []string{}, Check: checkBinds,
		Help: `bind mounts, each "host:container" or "host:container:ro", e.g. ["/data:/data:ro"]`},
	{Name: keyForwardEnv, Default: []string{}, Check: checkEnvNames,
		Help: `host variables exported into the shell over its stdin (never a command line), e.g. ["HF_TOKEN"]`},
	{Name: keyOverlay, Default: string(overlayAuto), Check: checkOverlay,
		Help: "the persistent overlay: dir (needs root, or user namespaces with fuse-overlayfs), image (an ext3 file made by `overlay create`) or auto"},
	{Name: keyMountCwd, Default: false,
		Help: "bind-mount the host's working directory at /workspace and start there"},
}

// checkImage refuses an empty image.
func checkImage(v any) error {
	if strings.TrimSpace(v.(string)) == "" {
		return errors.New("empty: set a .sif path, a sandbox directory or a docker://, docker-daemon://, docker-archive://, oras:// or library:// reference")
	}
	return nil
}

// checkBinds validates every entry of singularity_binds.
func checkBinds(v any) error {
	for _, b := range v.([]string) {
		if err := checkBind(b); err != nil {
			return err
		}
	}
	return nil
}

// checkBind validates a host:container[:ro|rw] entry.
func checkBind(b string) error {
	if strings.Contains(b, ",") {
		return fmt.Errorf("bind %q: Apptainer splits --bind values at commas; a path with a comma cannot be bound", b)
	}
	parts := strings.Split(b, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || !strings.HasPrefix(parts[1], "/") ||
		len(parts) == 3 && parts[2] != "ro" && parts[2] != "rw" {
		return fmt.Errorf("bind %q: use host:container or host:container:ro (absolute container path)", b)
	}
	return nil
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// checkEnvNames accepts a list of variable names.
func checkEnvNames(v any) error {
	for _, n := range v.([]string) {
		if !envNameRE.MatchString(n) {
			return fmt.Errorf("%q is not a variable name (letters, digits and _, not starting with a digit)", n)
		}
	}
	return nil
}

// checkOverlay accepts dir, image or auto.
func checkOverlay(v any) error {
	switch overlayMode(v.(string)) {
	case overlayAuto, overlayDir, overlayImage:
		return nil
	}
	return errors.New("use dir, image or auto")
}
