package singularity

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/berthhome"
)

// ScratchEnv names the scratch directory (instances' overlays and state,
// build temporary files), as Hermes reads it: a plain environment variable
// (also from the .env file beside the config, through Options.Getenv), not
// a configuration key.
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
	kept       []keptBind // binds keeping berth's own files read-only (in binds too)
	forward    []string   // env_passthrough + singularity_forward_env
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

// settingsFrom reads the options: the shared keys from their fields, the
// declared keys with the accessors. Their values were checked when they
// were set (file, variable, flag or Terminal.Set), so only what depends on
// several keys or on the host is checked here.
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
		image:      strings.TrimSpace(c.String(keyImage)),
		binary:     strings.TrimSpace(c.String(keyBinary)),
		binds:      c.List(keyBinds),
		overlay:    overlayMode(c.String(keyOverlay)),
		persistent: c.ContainerPersistent,
		cpus:       c.ContainerCPU,
		memoryMB:   c.ContainerMemory,
		diskMB:     c.ContainerDisk,
		network:    c.DockerNetwork,
		home:       opts.Home,
		getenv:     getenv,
	}
	// Every container backend forwards docker_forward_env; env_passthrough
	// and singularity_forward_env add to it.
	for _, l := range [][]string{c.EnvPassthrough, c.DockerForwardEnv, c.List(keyForwardEnv)} {
		for _, n := range l {
			if !slices.Contains(s.forward, n) {
				s.forward = append(s.forward, n)
			}
		}
	}
	s.cwd = c.Cwd
	if c.Bool(keyMountCwd) {
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("singularity: %s: %w", keyMountCwd, err)
		}
		if err := checkBind(wd + ":/workspace"); err != nil {
			return nil, fmt.Errorf("singularity: %s: the working directory cannot be bound: %w", keyMountCwd, err)
		}
		s.binds = append(s.binds, wd+":/workspace")
		if s.cwd == "" {
			s.cwd = "/workspace"
		}
	}
	kept, err := keepBerthsFiles(opts, s.binds)
	if err != nil {
		return nil, err
	}
	for _, k := range kept {
		s.binds = append(s.binds, k.bind)
	}
	s.kept = kept
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
				Hint: "terminal.singularity_binary (TERMINAL_SINGULARITY_BINARY) names no executable; install Apptainer or fix the setting", Err: err}
		}
		return p, nil
	}
	for _, n := range []string{"apptainer", "singularity"} {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", &backend.UnreachableError{Backend: Name, Target: "apptainer or singularity on PATH",
		Hint: "install Apptainer (or SingularityCE), `module load apptainer` on a cluster, or set terminal.singularity_binary (TERMINAL_SINGULARITY_BINARY)",
		Err:  exec.ErrNotFound}
}

// keptBind is a bind keeping one of berth's files read-only in a host
// directory bound writable into the instance, or pinning a directory
// between (see berthhome.InBind).
type keptBind struct {
	bind, target, host string
	readOnly           bool
}

// keepBerthsFiles returns, for each host directory bound writable
// (singularity_binds, docker_mount_cwd_to_workspace) that holds
// berth's home, its config file or the .env beside it, the binds that keep
// those read-only inside the instance, nested over the writable bind.
// Apptainer mounts user binds parents first (by destination since 1.2, in
// the order given before), and they follow the bind they nest in. Without
// them a command could rewrite berth's settings, approvals and sandbox
// included, for the next call. It refuses what no bind can keep (see
// berthhome.InBind).
func keepBerthsFiles(opts backend.Options, binds []string) ([]keptBind, error) {
	files, err := berthhome.Settings(opts.Home, opts.ConfigFile, opts.Getenv)
	if err != nil {
		return nil, fmt.Errorf("singularity: berth's settings, kept out of the instance's reach: %w", err)
	}
	var out []keptBind
	for _, b := range binds {
		parts := strings.Split(b, ":")
		if len(parts) < 2 || len(parts) == 3 && parts[2] == "ro" {
			continue
		}
		ms, err := berthhome.InBind(files, parts[0], true)
		if err != nil {
			return nil, fmt.Errorf("singularity: the host directory %s bound at %s: %w", parts[0], parts[1], err)
		}
		for _, m := range ms {
			k := keptBind{host: m.Path, target: path.Join(parts[1], m.Rel), readOnly: m.ReadOnly}
			k.bind = k.host + ":" + k.target
			if m.ReadOnly {
				k.bind += ":ro"
			}
			if err := checkBind(k.bind); err != nil {
				return nil, fmt.Errorf("singularity: berth's own %s lies in the host directory %s bound at %s, and cannot be kept read-only there: %w", k.host, parts[0], parts[1], err)
			}
			out = append(out, k)
		}
	}
	return out, nil
}
