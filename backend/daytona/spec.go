package daytona

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"strings"

	apiclient "github.com/daytona/clients/api-client-go"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/procmark"
)

// KeyImage is the configuration key naming the sandbox's image.
const KeyImage = "daytona_image"

// configKeys are the keys only this backend reads (TERMINAL_DAYTONA_IMAGE
// overrides the file). The shared container_* keys, docker_network and
// env_passthrough are fields of config.Terminal.
var configKeys = []config.Key{
	{Name: KeyImage, Default: config.DefaultImage, Help: "image of the Daytona sandbox (built by Daytona from a one-line Dockerfile FROM it)",
		Check: func(v any) error {
			if strings.TrimSpace(v.(string)) == "" {
				return errors.New("must name an image")
			}
			return nil
		}},
}

// Labels berth puts on its sandboxes. berth env ls/rm/prune find them by
// these.
const (
	LabelBerth      = "berth"            // always "1"
	LabelKey        = "berth.key"        // the environment key
	LabelOwner      = "berth.owner"      // "<boot id>/<pid>/<start time>" of the berth that created it or last reattached it
	LabelPersistent = "berth.persistent" // "1" when container_persistent was on
	LabelConfig     = "berth.config"     // hash of the settings that shape the sandbox
	LabelImage      = "berth.image"      // daytona_image, for berth env ls
)

// MaxDiskGiB is the largest disk Daytona gives a sandbox; berth caps
// container_disk there (with a warning) rather than have the create refused.
const MaxDiskGiB = 10

// spec is what the sandbox of one environment key looks like.
type spec struct {
	Key        string
	Name       string // berth-<key>
	Image      string
	CPU        int // cores
	MemoryGiB  int
	DiskGiB    int
	NoNetwork  bool
	Persistent bool
	Target     string
	Cwd        string // terminal.cwd as configured (see sandboxDir)
	hash       string
}

// sandboxDir maps the configured cwd into a sandbox whose user's home is
// home (see backend.ContainerDir): everything that does not name a sandbox
// path means the home directory, where processes start by default, as on
// the other container backends. Daytona's sandboxes run as the image's
// user, "daytona" in Daytona's own snapshots, so the home is asked of the
// sandbox (see Backend.adopt), never assumed. With home unknown ("")
// processes start in the daemon's working directory, and a cwd under the
// home ("~/src") is not used.
func sandboxDir(cwd, home string) string {
	if home == "" {
		if strings.HasPrefix(strings.TrimSpace(cwd), "~") {
			return ""
		}
		return backend.ContainerDir(cwd, "", "")
	}
	return backend.ContainerDir(cwd, home, home)
}

var nameUnsafe = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// sandboxName is "berth-<key>", with characters a sandbox name cannot hold
// replaced and a short hash of the key added when any were.
func sandboxName(key string) string {
	clean := nameUnsafe.ReplaceAllString(key, "-")
	if clean == key && clean != "" {
		return "berth-" + key
	}
	sum := sha256.Sum256([]byte(key))
	return "berth-" + clean + "-" + hex.EncodeToString(sum[:4])
}

// ceilGiB converts megabytes to whole gibibytes, rounding up.
func ceilGiB(mb int) int {
	return int(math.Ceil(float64(mb) / 1024))
}

// buildSpec derives the sandbox settings from the configuration. A disk over
// Daytona's limit is capped with a warning on log.
func buildSpec(opts backend.Options, target string, log *slog.Logger) (*spec, error) {
	c := opts.Config
	if opts.Key == "" {
		return nil, fmt.Errorf("daytona: empty environment key")
	}
	sp := &spec{
		Key:        opts.Key,
		Name:       sandboxName(opts.Key),
		Image:      strings.TrimSpace(c.String(KeyImage)),
		NoNetwork:  !c.DockerNetwork,
		Persistent: c.ContainerPersistent,
		Target:     target,
		Cwd:        c.Cwd,
	}
	if sp.Image == "" {
		return nil, fmt.Errorf("daytona: %s is empty: name the image the sandbox runs (default %s)", KeyImage, config.DefaultImage)
	}
	if c.ContainerCPU < 0 || math.IsNaN(c.ContainerCPU) {
		return nil, fmt.Errorf("daytona: container_cpu %v: must be a number of cores > 0", c.ContainerCPU)
	}
	sp.CPU = max(1, int(math.Ceil(c.ContainerCPU)))
	if c.ContainerMemory < 0 {
		return nil, fmt.Errorf("daytona: container_memory %d: must be megabytes > 0", c.ContainerMemory)
	}
	sp.MemoryGiB = max(1, ceilGiB(c.ContainerMemory))
	if c.ContainerDisk < 0 {
		return nil, fmt.Errorf("daytona: container_disk %d: must be megabytes > 0", c.ContainerDisk)
	}
	sp.DiskGiB = max(1, ceilGiB(c.ContainerDisk))
	if sp.DiskGiB > MaxDiskGiB {
		log.Warn("daytona: container_disk is over Daytona's per-sandbox limit; the sandbox gets the limit",
			"container_disk_mb", c.ContainerDisk, "requested_gib", sp.DiskGiB, "disk_gib", MaxDiskGiB)
		sp.DiskGiB = MaxDiskGiB
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00%d\x00%d\x00%v\x00%s\x00", sp.Image, sp.CPU, sp.MemoryGiB, sp.DiskGiB, sp.NoNetwork, sp.Target)
	sp.hash = hex.EncodeToString(h.Sum(nil))[:16]
	return sp, nil
}

// labels are the sandbox's labels: berth's marks, the key and the owner.
// No secret ever goes here.
func (sp *spec) labels() map[string]string {
	return map[string]string{
		LabelBerth:      "1",
		LabelKey:        sp.Key,
		LabelOwner:      currentOwner(),
		LabelPersistent: boolLabel(sp.Persistent),
		LabelConfig:     sp.hash,
		LabelImage:      sp.Image,
	}
}

func boolLabel(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// createRequest is the CreateSandbox call for the spec: the image as a
// one-line build (how Daytona's SDKs create a sandbox from an image),
// resources in whole cores and GiB, auto-stop off (berth stops the sandbox
// itself when it lets go of it), no network when docker_network is false.
func (sp *spec) createRequest() apiclient.CreateSandbox {
	req := apiclient.NewCreateSandbox()
	req.SetName(sp.Name)
	req.SetLabels(sp.labels())
	req.SetEnv(map[string]string{}) // nothing: secrets travel over the session's input
	req.SetBuildInfo(apiclient.CreateBuildInfo{DockerfileContent: "FROM " + sp.Image})
	req.SetCpu(int32(sp.CPU))
	req.SetMemory(int32(sp.MemoryGiB))
	req.SetDisk(int32(sp.DiskGiB))
	req.SetAutoStopInterval(0)
	req.SetNetworkBlockAll(sp.NoNetwork)
	req.SetPublic(false)
	if sp.Target != "" {
		req.SetTarget(sp.Target)
	}
	return *req
}

// currentOwner is this process's owner label (see internal/procmark), so
// a later berth on the same machine can tell whether the process that
// created a throwaway sandbox still runs. Tests replace it.
var currentOwner = procmark.Self
