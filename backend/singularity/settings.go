package singularity

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"

	"github.com/a55dbaac/berth/backend"
)

// Key describes one of the backend's own configuration keys, in the shape
// the backend registry's declared keys take (name, environment variable,
// default, help).
type Key struct {
	Name    string // key under terminal:
	Env     string // overriding environment variable
	Default string
	Help    string
}

// Keys are the singularity backend's own settings. Until the configuration
// file learns backend-declared keys they are read from their environment
// variables (also from the .env file beside the config, through
// Options.Getenv); settingsFrom is the one place that reads them.
var Keys = []Key{
	{Name: "singularity_binary", Env: "TERMINAL_SINGULARITY_BINARY",
		Help: "the apptainer or singularity executable (name or path); default: apptainer, else singularity, on PATH"},
	{Name: "singularity_binds", Env: "TERMINAL_SINGULARITY_BINDS", Default: "[]",
		Help: `bind mounts, docker_volumes style: a JSON list such as ["/data:/data:ro"]`},
	{Name: "singularity_forward_env", Env: "TERMINAL_SINGULARITY_FORWARD_ENV", Default: "[]",
		Help: `host variables exported into the shell (over its stdin, never a command line): a JSON list such as ["HF_TOKEN"]`},
	{Name: "singularity_overlay", Env: "TERMINAL_SINGULARITY_OVERLAY", Default: "auto",
		Help: "the persistent overlay: dir (a directory; needs root, or user namespaces with fuse-overlayfs), image (an ext3 file made by `overlay create`), or auto"},
}

// ScratchEnv names the scratch directory (instances' overlays and state,
// build temporary files), as Hermes reads it.
const ScratchEnv = "TERMINAL_SCRATCH_DIR"

// overlayMode is how a persistent environment keeps its writes.
type overlayMode string

const (
	overlayAuto  overlayMode = "auto"
	overlayDir   overlayMode = "dir"
	overlayImage overlayMode = "image"
)

// settings is everything New decides from the options, before talking to
// Apptainer.
type settings struct {
	key        string
	name       string // instance name, berth_<hash>
	image      string // singularity_image as configured
	binary     string // as configured ("" = look up apptainer, then singularity)
	binds      []string
	forward    []string // env_passthrough + singularity_forward_env
	overlay    overlayMode
	persistent bool
	cpus       float64
	memoryMB   int
	diskMB     int
	network    bool
	cwd        string // default working directory inside
	scratch    string
	home       string // berth home
	getenv     func(string) string
}

// InstanceName is the Apptainer instance name of an environment key:
// berth_ and 12 hex digits of the key's SHA-256.
func InstanceName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "berth_" + hex.EncodeToString(sum[:6])
}

func settingsFrom(opts backend.Options) (*settings, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	c := opts.Config
	key := opts.Key
	if key == "" {
		key = "default"
	}
	s := &settings{
		key:        key,
		name:       InstanceName(key),
		image:      strings.TrimSpace(c.SingularityImage),
		binary:     strings.TrimSpace(getenv("TERMINAL_SINGULARITY_BINARY")),
		persistent: c.ContainerPersistent,
		cpus:       c.ContainerCPU,
		memoryMB:   c.ContainerMemory,
		diskMB:     c.ContainerDisk,
		network:    c.DockerNetwork,
		home:       opts.Home,
		getenv:     getenv,
	}
	if s.image == "" {
		return nil, fmt.Errorf("singularity: terminal.singularity_image is empty: set a .sif path, a sandbox directory or a docker://, docker-daemon://, docker-archive://, oras:// or library:// reference")
	}
	var err error
	if s.binds, err = jsonList(getenv, "TERMINAL_SINGULARITY_BINDS"); err != nil {
		return nil, err
	}
	for _, b := range s.binds {
		if err := checkBind(b); err != nil {
			return nil, err
		}
	}
	for _, b := range c.DockerVolumes {
		if err := checkBind(b); err != nil {
			return nil, fmt.Errorf("%w (from docker_volumes)", err)
		}
		s.binds = append(s.binds, b)
	}
	fwd, err := jsonList(getenv, "TERMINAL_SINGULARITY_FORWARD_ENV")
	if err != nil {
		return nil, err
	}
	s.forward = append(append([]string(nil), c.EnvPassthrough...), fwd...)
	switch m := overlayMode(strings.ToLower(strings.TrimSpace(getenv("TERMINAL_SINGULARITY_OVERLAY")))); m {
	case "":
		s.overlay = overlayAuto
	case overlayAuto, overlayDir, overlayImage:
		s.overlay = m
	default:
		return nil, fmt.Errorf("singularity: TERMINAL_SINGULARITY_OVERLAY %q: use dir, image or auto", m)
	}
	s.cwd = c.Cwd
	if c.DockerMountCwdToWorkspace {
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("singularity: docker_mount_cwd_to_workspace: %w", err)
		}
		s.binds = append(s.binds, wd+":/workspace")
		if s.cwd == "" {
			s.cwd = "/workspace"
		}
	}
	if s.cwd == "" || s.cwd == "." || s.cwd == "~" {
		s.cwd = "/root"
	}
	if !strings.HasPrefix(s.cwd, "/") {
		return nil, fmt.Errorf("singularity: terminal.cwd %q must be an absolute path inside the container", c.Cwd)
	}
	s.scratch, err = scratchDir(getenv, opts.Home)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// jsonList reads a JSON list of strings from an environment variable.
func jsonList(getenv func(string) string, name string) ([]string, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return nil, nil
	}
	var out []string
	if err := json.Unmarshal([]byte(v), &out); err != nil {
		return nil, fmt.Errorf("singularity: %s=%q: want a JSON list of strings such as [\"/data:/data:ro\"]: %v", name, v, err)
	}
	return out, nil
}

// checkBind validates a host:container[:ro|rw] entry.
func checkBind(b string) error {
	if strings.Contains(b, ",") {
		return fmt.Errorf("singularity: bind %q: Apptainer splits --bind values at commas; a path with a comma cannot be bound", b)
	}
	parts := strings.Split(b, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || !strings.HasPrefix(parts[1], "/") ||
		len(parts) == 3 && parts[2] != "ro" && parts[2] != "rw" {
		return fmt.Errorf("singularity: bind %q: use host:container or host:container:ro (absolute container path)", b)
	}
	return nil
}

// scratchDir is TERMINAL_SCRATCH_DIR, else /scratch/$USER/berth when
// /scratch/$USER (or /scratch) lets us create it, else <berth home>/singularity.
func scratchDir(getenv func(string) string, home string) (string, error) {
	if d := strings.TrimSpace(getenv(ScratchEnv)); d != "" {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return "", fmt.Errorf("singularity: %s=%s: %w", ScratchEnv, d, err)
		}
		return d, nil
	}
	if u := userName(getenv); u != "" {
		if st, err := os.Stat("/scratch"); err == nil && st.IsDir() {
			d := filepath.Join("/scratch", u, "berth")
			if err := os.MkdirAll(d, 0o700); err == nil && writable(d) {
				return d, nil
			}
		}
	}
	if home == "" {
		return "", fmt.Errorf("singularity: no berth home directory and no %s: cannot place overlays and instance state", ScratchEnv)
	}
	d := filepath.Join(home, "singularity")
	if err := os.MkdirAll(d, 0o700); err != nil {
		return "", fmt.Errorf("singularity: scratch directory %s: %w", d, err)
	}
	return d, nil
}

func userName(getenv func(string) string) string {
	if u := getenv("USER"); u != "" {
		return u
	}
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return ""
}

func writable(dir string) bool {
	f, err := os.CreateTemp(dir, ".berth-probe-")
	if err != nil {
		return false
	}
	f.Close()
	os.Remove(f.Name())
	return true
}

// findBinary returns the executable to drive: singularity_binary when set,
// else apptainer, else singularity on PATH.
func findBinary(configured string) (string, error) {
	if configured != "" {
		p, err := exec.LookPath(configured)
		if err != nil {
			return "", &backend.UnreachableError{Backend: Name, Target: configured,
				Hint: "TERMINAL_SINGULARITY_BINARY names no executable; install Apptainer or fix the setting", Err: err}
		}
		return p, nil
	}
	for _, n := range []string{"apptainer", "singularity"} {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", &backend.UnreachableError{Backend: Name, Target: "apptainer or singularity on PATH",
		Hint: "install Apptainer (or SingularityCE), `module load apptainer` on a cluster, or set TERMINAL_SINGULARITY_BINARY",
		Err:  exec.ErrNotFound}
}
