package singularity

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/a55dbaac/berth/internal/procmark"
)

// record is what berth keeps about an instance beside its overlay, in
// <scratch>/instances/<name>.json: Apptainer has no labels, so this is the
// owner mark and the settings the instance was started with.
type record struct {
	Key        string    `json:"key"`
	Instance   string    `json:"instance"`
	Owner      string    `json:"owner"`
	Persistent bool      `json:"persistent"`
	Image      string    `json:"image"`  // what instance start ran
	Config     string    `json:"config"` // hash of the start flags and image
	Overlay    string    `json:"overlay,omitempty"`
	Created    time.Time `json:"created"`
	Stopped    time.Time `json:"stopped,omitzero"`
}

func recordDir(scratch string) string { return filepath.Join(scratch, "instances") }

func recordPath(scratch, name string) string {
	return filepath.Join(recordDir(scratch), name+".json")
}

func readRecord(scratch, name string) (*record, error) {
	data, err := os.ReadFile(recordPath(scratch, name))
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("singularity: instance record %s: %w", recordPath(scratch, name), err)
	}
	return &r, nil
}

func writeRecord(scratch string, r *record) error {
	if err := os.MkdirAll(recordDir(scratch), 0o700); err != nil {
		return fmt.Errorf("singularity: %w", err)
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	p := recordPath(scratch, r.Instance)
	tmp := p + ".tmp" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("singularity: write %s: %w", p, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("singularity: write %s: %w", p, err)
	}
	return nil
}

// allRecords reads every record in scratch.
func allRecords(scratch string) []*record {
	files, _ := filepath.Glob(filepath.Join(recordDir(scratch), "berth_*.json"))
	var out []*record
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		if r, err := readRecord(scratch, name); err == nil {
			out = append(out, r)
		}
	}
	return out
}

// removeEnvFiles removes an environment's overlay (directory or image) and
// record.
func removeEnvFiles(scratch, name string) error {
	var errs []error
	for _, p := range []string{overlayDirPath(scratch, name), overlayImagePath(scratch, name), recordPath(scratch, name)} {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("singularity: remove files of %s: %w", name, err)
	}
	return nil
}

func overlayDirPath(scratch, name string) string {
	return filepath.Join(scratch, "overlays", name)
}

func overlayImagePath(scratch, name string) string {
	return filepath.Join(scratch, "overlays", name+".img")
}

// limitState is what this process learnt about enforcing --cpus/--memory
// with one Apptainer executable.
type limitState struct {
	known    bool
	enforced bool
	reason   string // why not, in Apptainer's words
}

var (
	limitsMu    sync.Mutex
	limitsProbe = map[string]limitState{} // by executable
)

func limitsFor(bin string) limitState {
	limitsMu.Lock()
	defer limitsMu.Unlock()
	return limitsProbe[bin]
}

func setLimits(bin string, st limitState) {
	limitsMu.Lock()
	defer limitsMu.Unlock()
	limitsProbe[bin] = st
}

// isCgroupRefusal reports whether a failed start refused the limits,
// judged on its FATAL/ERROR lines only (Apptainer prints an INFO line about
// the systemd cgroup manager at every start on hosts without systemd).
func isCgroupRefusal(ce *cliError) bool {
	s := strings.ToLower(ce.fatal())
	return strings.Contains(s, "cgroup") || strings.Contains(s, "--cpus") || strings.Contains(s, "--memory")
}

// overlayChoice decides the persistent overlay kind: a directory when
// running as root, or when user namespaces and fuse-overlayfs are
// available; else an ext3 image from `overlay create`.
func overlayChoice(mode overlayMode) (overlayMode, string) {
	switch mode {
	case overlayDir:
		return overlayDir, "singularity_overlay=dir"
	case overlayImage:
		return overlayImage, "singularity_overlay=image"
	}
	if os.Geteuid() == 0 {
		return overlayDir, "running as root: a directory overlay is a kernel overlay mount"
	}
	if usernsAllowed() {
		if _, err := lookPath("fuse-overlayfs"); err == nil {
			return overlayDir, "user namespaces and fuse-overlayfs are available"
		}
		return overlayImage, "fuse-overlayfs is not installed: a directory overlay needs it without root"
	}
	return overlayImage, "unprivileged user namespaces are disabled: a directory overlay needs them without root"
}

func usernsAllowed() bool {
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(b)) == "0" {
		return false
	}
	if b, err := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); err == nil && strings.TrimSpace(string(b)) == "0" {
		return false
	}
	return true
}

// startFlags are the instance start flags for b's settings. limits says
// whether to pass --cpus/--memory.
func (b *Backend) startFlags(limits bool) []string {
	s := b.set
	// --containall implies --cleanenv in Apptainer; it is spelled out so
	// that the instance's processes start with a clean environment on
	// every version and flavour, whatever the host's (N10).
	f := []string{"instance", "start", "--containall", "--cleanenv", "--no-home"}
	if b.overlayPath != "" {
		f = append(f, "--overlay", b.overlayPath)
	} else {
		f = append(f, "--writable-tmpfs")
	}
	for _, bind := range s.binds {
		f = append(f, "--bind", bind)
	}
	if limits {
		if s.cpus > 0 {
			f = append(f, "--cpus", strconv.FormatFloat(s.cpus, 'f', -1, 64))
		}
		if s.memoryMB > 0 {
			f = append(f, "--memory", strconv.Itoa(s.memoryMB)+"M")
		}
	}
	if !s.network {
		f = append(f, "--net", "--network", "none")
	}
	return f
}

// configHash identifies the settings an instance was started with; a
// running instance with another hash is replaced.
func (b *Backend) configHash() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%q\x00", b.image, b.startFlags(true))
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// ensure reattaches to the key's running instance (when it was started with
// the same settings) or starts it, and returns its host PID. It holds a
// per-instance lock so concurrent berths start it once.
func (b *Backend) ensure(ctx context.Context) (int, error) {
	if err := os.MkdirAll(recordDir(b.set.scratch), 0o700); err != nil {
		return 0, fmt.Errorf("singularity: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(recordDir(b.set.scratch), b.set.name+".lock"))
	if err != nil {
		return 0, fmt.Errorf("singularity: lock instance %s: %w", b.set.name, err)
	}
	defer unlock()
	s := b.set
	info, err := b.cli.find(ctx, s.name)
	if err != nil {
		return 0, err
	}
	hash := b.configHash()
	if info != nil {
		rec, _ := readRecord(s.scratch, s.name)
		if rec != nil && rec.Config == hash {
			rec.Owner = currentOwner()
			rec.Stopped = time.Time{}
			if err := writeRecord(s.scratch, rec); err != nil {
				return 0, err
			}
			b.log.Info("singularity: reattached to running instance", "instance", s.name, "pid", info.PID)
			return info.PID, nil
		}
		b.log.Info("singularity: replacing instance whose settings changed", "instance", s.name)
		if err := b.cli.stop(ctx, s.name); err != nil {
			return 0, err
		}
	}
	if err := b.prepareOverlay(ctx); err != nil {
		return 0, err
	}
	withLimits := s.cpus > 0 || s.memoryMB > 0
	st := limitsFor(b.cli.bin)
	if withLimits && st.known && !st.enforced {
		withLimits = false
	}
	args := append(b.startFlags(withLimits), b.image, s.name)
	_, err = b.cli.run(ctx, nil, args...)
	var ce *cliError
	if err != nil && withLimits && errors.As(err, &ce) && isCgroupRefusal(ce) {
		setLimits(b.cli.bin, limitState{known: true, enforced: false, reason: ce.fatal()})
		b.log.Debug("singularity: Apptainer cannot enforce cpu/memory limits here; starting without them",
			"container_cpu", s.cpus, "container_memory_mb", s.memoryMB, "apptainer_said", ce.fatal())
		withLimits = false
		args = append(b.startFlags(false), b.image, s.name)
		_, err = b.cli.run(ctx, nil, args...)
	} else if err == nil && withLimits {
		setLimits(b.cli.bin, limitState{known: true, enforced: true})
	}
	if err != nil {
		if errors.As(err, &ce) && !s.network && strings.Contains(strings.ToLower(ce.stderr), "network") {
			return 0, fmt.Errorf("singularity: start instance %s without network (docker_network: false): %s; ask the administrator to allow `--network none`, or set docker_network: true", s.name, ce.fatal())
		}
		if errors.As(err, &ce) {
			return 0, fmt.Errorf("singularity: start instance %s of %s: %s", s.name, b.image, ce.fatal())
		}
		return 0, fmt.Errorf("singularity: start instance %s: %w", s.name, err)
	}
	b.reportLimits(withLimits)
	rec := &record{Key: s.key, Instance: s.name, Owner: currentOwner(), Persistent: s.persistent,
		Image: b.image, Config: hash, Overlay: b.overlayPath, Created: time.Now().UTC()}
	if err := writeRecord(s.scratch, rec); err != nil {
		b.cli.stop(context.WithoutCancel(ctx), s.name)
		return 0, err
	}
	info, err = b.cli.find(ctx, s.name)
	if err != nil {
		return 0, err
	}
	if info == nil {
		return 0, fmt.Errorf("singularity: instance %s started but is not listed by `instance list` (see its logs under ~/.apptainer/instances/logs)", s.name)
	}
	b.log.Debug("singularity: instance started", "instance", s.name, "pid", info.PID, "image", b.image, "overlay", b.overlayPath)
	return info.PID, nil
}

// reportLimits records and logs the limits that are not enforced.
func (b *Backend) reportLimits(limitsApplied bool) {
	s := b.set
	var missing []string
	if !limitsApplied {
		reason := limitsFor(b.cli.bin).reason
		if s.cpus > 0 {
			missing = append(missing, fmt.Sprintf("container_cpu=%g not enforced: %s", s.cpus, reason))
		}
		if s.memoryMB > 0 {
			missing = append(missing, fmt.Sprintf("container_memory=%dMB not enforced: %s", s.memoryMB, reason))
		}
	}
	if s.diskMB > 0 {
		switch {
		case b.overlayPath != "" && strings.HasSuffix(b.overlayPath, ".img"):
			// the overlay image has that size
		case b.overlayPath != "":
			missing = append(missing, fmt.Sprintf("container_disk=%dMB not enforced: a directory overlay has no size limit (singularity_overlay: image makes a sized ext3 overlay)", s.diskMB))
		default:
			missing = append(missing, fmt.Sprintf("container_disk=%dMB not enforced: --writable-tmpfs writes go to memory-backed tmpfs without a berth limit", s.diskMB))
		}
	}
	b.limMu.Lock()
	b.notEnforced = missing
	b.limMu.Unlock()
	if len(missing) > 0 {
		b.log.Warn("singularity: limits not enforced (berth doctor shows them too)", "limits", strings.Join(missing, "; "))
	}
}

// prepareOverlay makes the persistent overlay when the environment is
// persistent: a directory, or an ext3 image created once with
// `overlay create --sparse --size <container_disk>`. An environment made
// from a checkpoint uses the overlay of the checkpoint's kind that
// fromCheckpoint put in place, persistent or not.
func (b *Backend) prepareOverlay(ctx context.Context) error {
	s := b.set
	b.overlayPath = ""
	if !s.persistent && b.fromKind == "" {
		return nil
	}
	mode, why := overlayChoice(s.overlay)
	if b.fromKind != "" {
		mode, why = b.fromKind, "made from a checkpoint of this kind"
	}
	if err := os.MkdirAll(filepath.Join(s.scratch, "overlays"), 0o700); err != nil {
		return fmt.Errorf("singularity: %w", err)
	}
	if mode == overlayDir {
		p := overlayDirPath(s.scratch, s.name)
		if err := os.MkdirAll(p, 0o700); err != nil {
			return fmt.Errorf("singularity: overlay directory %s: %w", p, err)
		}
		b.overlayPath = p
		b.log.Debug("singularity: directory overlay", "overlay", p, "why", why)
		return nil
	}
	p := overlayImagePath(s.scratch, s.name)
	if _, err := os.Stat(p); err != nil {
		size := max(64, s.diskMB)
		if _, err := b.cli.run(ctx, nil, "overlay", "create", "--sparse", "--size", strconv.Itoa(size), p); err != nil {
			return fmt.Errorf("singularity: create overlay image %s: %w", p, err)
		}
	}
	b.overlayPath = p
	b.log.Debug("singularity: image overlay", "overlay", p, "why", why)
	return nil
}

// cleaned records the scratch directories this process already cleaned
// after crashed berths (once per directory per process).
var (
	cleanedMu sync.Mutex
	cleaned   = map[string]bool{}
)

// cleanUpOnce handles, the first time this process uses a scratch
// directory, instances whose berth died without closing them: a throwaway
// one is stopped and its files removed, a persistent one is stopped (its
// overlay kept) so it is reattached cleanly later. The instance of skipKey
// is left alone: New reattaches it.
func cleanUpOnce(ctx context.Context, c *cli, scratch, skipName string, log *slog.Logger) {
	cleanedMu.Lock()
	defer cleanedMu.Unlock()
	if cleaned[scratch] {
		return
	}
	cleaned[scratch] = true
	stopped, removed, err := cleanOrphans(ctx, c, scratch, skipName)
	if err != nil {
		log.Warn("singularity: cleaning up after a crashed berth failed", "err", err)
	}
	if len(stopped)+len(removed) > 0 {
		log.Info("singularity: cleaned up after a crashed berth", "stopped_persistent", stopped, "removed", removed)
	}
}

// cleanOrphans stops the instances whose owner is gone and removes the
// files of throwaway ones (also of those no longer running).
func cleanOrphans(ctx context.Context, c *cli, scratch, skipName string) (stopped, removed []string, err error) {
	running, err := c.list(ctx, "berth_*")
	if err != nil {
		return nil, nil, err
	}
	live := map[string]bool{}
	for _, i := range running {
		live[i.Instance] = true
	}
	var errs []error
	for _, r := range allRecords(scratch) {
		if r.Instance == skipName || !procmark.Gone(r.Owner) {
			continue
		}
		if live[r.Instance] {
			if err := c.stop(ctx, r.Instance); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if r.Persistent {
			if live[r.Instance] {
				r.Stopped = time.Now().UTC()
				writeRecord(scratch, r)
				stopped = append(stopped, r.Key)
			}
			continue
		}
		if err := removeEnvFiles(scratch, r.Instance); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, r.Key)
	}
	return stopped, removed, errors.Join(errs...)
}
