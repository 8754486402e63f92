package docker

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/berthhome"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
)

// Labels berth puts on every container and volume it creates.
const (
	LabelBerth      = "berth"            // always "1"
	LabelKey        = "berth.key"        // the environment key
	LabelConfig     = "berth.config"     // hash of the settings that shape the container
	LabelPersistent = "berth.persistent" // "1" when container_persistent was on
	LabelRole       = "berth.role"       // on volumes: "root" or "workspace"
)

// Paths inside the container.
const (
	rootDir      = "/root"
	workspaceDir = "/workspace"
)

// capsKept are the only capabilities a berth container keeps.
var capsKept = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_SETGID", "CAP_SETUID"}

const pidsLimit = 256

// spec is everything that shapes one environment's container, derived once
// from the options. Its hash is stored in the LabelConfig label, so a later
// berth whose settings differ replaces the container (volumes are kept).
type spec struct {
	Name       string            `json:"name"`
	Key        string            `json:"key"`
	Image      string            `json:"image"`
	WorkDir    string            `json:"workdir"`
	Env        []string          `json:"env"`
	Binds      []string          `json:"binds"`
	Kept       []string          `json:"kept"`    // berth's files read-only in the container (container paths)
	Volumes    map[string]string `json:"volumes"` // container path -> volume name
	ReadOnly   bool              `json:"read_only"`
	Network    bool              `json:"network"`
	NanoCPUs   int64             `json:"nano_cpus"`
	MemoryMB   int               `json:"memory_mb"`
	DiskMB     int               `json:"disk_mb"`
	Persistent bool              `json:"persistent"`

	hash string
	// fromImage, when set, is the checkpoint image the container runs
	// instead of Image (Options.From); not part of the hash, so a later
	// berth of the same settings reattaches the container.
	fromImage string
}

// buildSpec validates the configuration and derives the container spec.
func buildSpec(opts backend.Options) (*spec, error) {
	c := opts.Config
	key := opts.Key
	if key == "" {
		key = "default"
	}
	image := strings.TrimSpace(c.String(keyImage))
	if image == "" {
		return nil, fmt.Errorf("docker: terminal.docker_image is empty")
	}
	if c.ContainerCPU < 0 {
		return nil, fmt.Errorf("docker: terminal.container_cpu: bad value %v (want >= 0)", c.ContainerCPU)
	}
	if c.ContainerMemory < 0 {
		return nil, fmt.Errorf("docker: terminal.container_memory: bad value %d (want >= 0 MB)", c.ContainerMemory)
	}
	if c.ContainerDisk < 0 {
		return nil, fmt.Errorf("docker: terminal.container_disk: bad value %d (want >= 0 MB)", c.ContainerDisk)
	}
	s := &spec{
		Name:       ContainerName(key),
		Key:        key,
		Image:      image,
		ReadOnly:   c.Bool(keyReadOnly),
		Network:    c.DockerNetwork,
		NanoCPUs:   int64(c.ContainerCPU * 1e9),
		MemoryMB:   c.ContainerMemory,
		DiskMB:     c.ContainerDisk,
		Persistent: c.ContainerPersistent,
		Volumes:    map[string]string{},
	}

	binds, targets, err := configuredBinds(c)
	if err != nil {
		return nil, err
	}
	s.Binds = binds
	mountCwd := c.Bool(keyMountCwd)
	for _, dir := range []string{rootDir, workspaceDir} {
		if !targets[dir] {
			s.Volumes[dir] = volumeName(s.Name, path.Base(dir))
		}
	}
	kept, err := keepBerthsFiles(opts, s.Binds, true)
	if err != nil {
		return nil, err
	}
	for _, k := range kept {
		s.Binds = append(s.Binds, k.bind)
		if k.readOnly {
			s.Kept = append(s.Kept, k.target)
		}
	}

	dockerEnv := c.Map(keyEnv)
	keys := make([]string, 0, len(dockerEnv))
	for k := range dockerEnv {
		if !validEnvName(k) {
			return nil, fmt.Errorf("docker: docker_env: bad variable name %q", k)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s.Env = append(s.Env, k+"="+dockerEnv[k])
	}

	def := rootDir
	if mountCwd {
		def = workspaceDir
	}
	s.WorkDir = containerDir(c.Cwd, def)

	b, _ := json.Marshal(s)
	sum := sha256.Sum256(b)
	s.hash = hex.EncodeToString(sum[:8])
	return s, nil
}

// configuredBinds returns the binds the settings ask for (docker_volumes,
// docker_mount_cwd_to_workspace) and their container paths.
func configuredBinds(c config.Terminal) ([]string, map[string]bool, error) {
	var binds []string
	targets := map[string]bool{}
	for _, v := range c.List(keyVolumes) {
		bind, target, err := parseVolume(v)
		if err != nil {
			return nil, nil, err
		}
		binds = append(binds, bind)
		targets[target] = true
	}
	if c.Bool(keyMountCwd) {
		if targets[workspaceDir] {
			return nil, nil, fmt.Errorf("docker: docker_mount_cwd_to_workspace and a docker_volumes entry both mount %s", workspaceDir)
		}
		wd, err := os.Getwd()
		if err != nil {
			return nil, nil, fmt.Errorf("docker: docker_mount_cwd_to_workspace: host working directory: %w", err)
		}
		binds = append(binds, wd+":"+workspaceDir)
		targets[workspaceDir] = true
	}
	return binds, targets, nil
}

// labels returns the labels of the container.
func (s *spec) labels() map[string]string {
	l := map[string]string{
		LabelBerth:      "1",
		LabelKey:        s.Key,
		LabelConfig:     s.hash,
		LabelPersistent: boolLabel(s.Persistent),
	}
	if o := currentOwner(); o != "" {
		l[LabelOwner] = o
	}
	return l
}

// config returns the container and host configuration. withDisk adds the
// disk quota (StorageOpt), swapLimit pins swap to the memory limit.
func (s *spec) config(withDisk, swapLimit bool) (*container.Config, *container.HostConfig) {
	image := s.Image
	if s.fromImage != "" {
		image = s.fromImage
	}
	cfg := &container.Config{
		Image:      image,
		Entrypoint: []string{"sleep", "infinity"},
		Cmd:        []string{},
		Env:        s.Env,
		WorkingDir: s.WorkDir,
		Labels:     s.labels(),
	}
	init := true
	pids := int64(pidsLimit)
	hc := &container.HostConfig{
		Init:        &init,
		CapDrop:     []string{"ALL"},
		CapAdd:      append([]string(nil), capsKept...),
		SecurityOpt: []string{"no-new-privileges"},
		Tmpfs: map[string]string{
			"/tmp":     "rw,exec,nosuid,size=512m",
			"/var/tmp": "rw,noexec,nosuid,size=256m",
			"/run":     "rw,noexec,nosuid,size=64m",
		},
		ShmSize:        1 << 30,
		ReadonlyRootfs: s.ReadOnly,
		Binds:          s.Binds,
		Resources: container.Resources{
			PidsLimit: &pids,
			NanoCPUs:  s.NanoCPUs,
		},
	}
	if s.MemoryMB > 0 {
		hc.Memory = int64(s.MemoryMB) << 20
		if swapLimit {
			hc.MemorySwap = hc.Memory
		}
	}
	if !s.Network {
		hc.NetworkMode = "none"
	}
	if withDisk && s.DiskMB > 0 {
		hc.StorageOpt = map[string]string{"size": fmt.Sprintf("%dm", s.DiskMB)}
	}
	dirs := make([]string, 0, len(s.Volumes))
	for d := range s.Volumes {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeVolume, Source: s.Volumes[d], Target: d})
	}
	return cfg, hc
}

// ContainerName returns the name berth gives the container of an
// environment key: "berth-" plus a readable form of the key plus a short hash
// of the key, so distinct keys never collide.
func ContainerName(key string) string {
	sum := sha256.Sum256([]byte(key))
	var b strings.Builder
	for _, r := range key {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 40 {
			break
		}
	}
	readable := b.String()
	if readable != "" {
		readable += "-"
	}
	return "berth-" + readable + hex.EncodeToString(sum[:4])
}

func volumeName(container, role string) string { return container + "-" + role }

var volumeNameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)

var validVolumeOpts = map[string]bool{
	"ro": true, "rw": true, "z": true, "Z": true, "nocopy": true,
	"shared": true, "rshared": true, "slave": true, "rslave": true, "private": true, "rprivate": true,
	"cached": true, "delegated": true, "consistent": true,
}

// parseVolume validates one docker_volumes entry "host:container[:opts]" and
// returns it as a bind string plus its container path.
func parseVolume(v string) (bind, target string, err error) {
	bad := func(why string) (string, string, error) {
		return "", "", fmt.Errorf("docker: docker_volumes entry %q: %s (want host:container[:opts])", v, why)
	}
	parts := strings.Split(v, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return bad("wrong number of ':'-separated fields")
	}
	host, target := parts[0], parts[1]
	switch {
	case host == "":
		return bad("empty host path")
	case strings.HasPrefix(host, "~"):
		home, herr := os.UserHomeDir()
		if herr != nil {
			return bad("cannot expand ~: " + herr.Error())
		}
		host = home + strings.TrimPrefix(host, "~")
	case strings.HasPrefix(host, "/"):
	case volumeNameRE.MatchString(host):
		// a named volume
	default:
		return bad("host path must be absolute (or a volume name)")
	}
	if !strings.HasPrefix(target, "/") {
		return bad("container path must be absolute")
	}
	if path.Clean(target) == "/" {
		return bad("cannot mount over /")
	}
	target = path.Clean(target)
	bind = host + ":" + target
	if len(parts) == 3 {
		for _, o := range strings.Split(parts[2], ",") {
			if !validVolumeOpts[o] {
				return bad(fmt.Sprintf("unknown option %q", o))
			}
		}
		bind += ":" + parts[2]
	}
	return bind, target, nil
}

// containerDir maps terminal.cwd to a directory inside the container (see
// backend.ContainerDir): "~/x" is under /root, the rest falls back to def.
func containerDir(cwd, def string) string { return backend.ContainerDir(cwd, rootDir, def) }

func validEnvName(k string) bool {
	if k == "" || strings.ContainsAny(k, "=\x00") {
		return false
	}
	return true
}

func boolLabel(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// keptBind is a bind keeping one of berth's files read-only in a host
// directory bound writable into the container, or pinning a directory
// between (see berthhome.InBind).
type keptBind struct {
	bind, target, host string
	readOnly           bool
}

// keepBerthsFiles returns, for each host directory bound writable (a
// docker_volumes host path, docker_mount_cwd_to_workspace) that holds
// berth's home, its config file or the .env beside it, the binds that
// keep those read-only inside the container, nested over the writable
// bind (Docker mounts a bind below another after it). Without them a
// command in the container could rewrite berth's settings, approvals
// and sandbox included, for the next call. It refuses what no bind can
// keep (see berthhome.InBind). With make false nothing is made on the host
// (berth doctor).
func keepBerthsFiles(opts backend.Options, binds []string, make bool) ([]keptBind, error) {
	files, err := berthhome.Settings(opts.Home, opts.ConfigFile, opts.Getenv)
	if err != nil {
		return nil, fmt.Errorf("docker: berth's settings, kept out of the container's reach: %w", err)
	}
	var out []keptBind
	for _, b := range binds {
		parts := strings.Split(b, ":")
		if !strings.HasPrefix(parts[0], "/") || len(parts) == 3 && slices.Contains(strings.Split(parts[2], ","), "ro") {
			continue // a named volume, or read-only already
		}
		ms, err := berthhome.InBind(files, parts[0], make)
		if err != nil {
			return nil, fmt.Errorf("docker: the host directory %s bound at %s: %w", parts[0], parts[1], err)
		}
		for _, m := range ms {
			k := keptBind{host: m.Path, target: path.Join(parts[1], m.Rel), readOnly: m.ReadOnly}
			k.bind = k.host + ":" + k.target
			if m.ReadOnly {
				k.bind += ":ro"
			}
			out = append(out, k)
		}
	}
	return out, nil
}
