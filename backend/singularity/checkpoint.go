package singularity

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/procmark"
)

// Checkpoints of a singularity environment (berth env fork, checkpoint,
// restore; docs/fork.md). An instance's files are its image, which never
// changes, and its writable overlay: a checkpoint is a copy of that
// overlay, and an environment made from one starts its instance on a
// fresh copy of it. The copies are made on this machine with
// `cp -a --reflink=auto` (blocks shared where the scratch filesystem can,
// copied elsewhere), while the instance runs:
//
//   - a directory overlay: its upper/ tree, whiteouts (character devices
//     0/0 or .wh. files) and opaque directories (trusted.overlay.opaque)
//     included, so files deleted from the image stay deleted in the fork;
//   - an ext3 image overlay: the file, sparse, after a sync, then checked
//     and its journal replayed with e2fsck (when installed), since the
//     instance still has it mounted.
//
// A throwaway instance (container_persistent: false) runs with
// --writable-tmpfs: its writes live in a tmpfs that only the kernel's
// overlay mount holds, out of the host's reach. The only way to them is
// from inside, through the merged root, which cannot tell what the image
// had from what was written, nor show what was deleted (whiteouts): a copy
// made so would bring deleted files back. Such an environment refuses
// (Capabilities.NoCheckpoint says why and what to set). An environment
// made from a checkpoint keeps an overlay of the checkpoint's kind whatever
// container_persistent says (a throwaway one removes it at Close).
//
// Layout, in the scratch directory beside the overlays:
//
//	<scratch>/checkpoints/<instance>.<name>.<random>/overlay/upper   a directory overlay's
//	<scratch>/checkpoints/<instance>.<name>.<random>/overlay.img     an image overlay's
//	<scratch>/checkpoints/<...>/berth.json                           key, name, kind, time
//
// A copy is made in a .tmp-* directory marked with berth's owner mark
// (procmark) and renamed into place when complete; the next checkpoint and
// berth env prune remove those whose berth is gone, and prune removes the
// checkpoints of forks (never named) older than its age.

// The kinds of overlay a checkpoint holds.
const (
	kindDir   = "dir"
	kindImage = "image"
)

// noCheckpointTmpfs is why a throwaway instance cannot be checkpointed.
const noCheckpointTmpfs = "a throwaway instance (container_persistent: false) keeps its writes in a tmpfs (--writable-tmpfs) that only the kernel's overlay mount holds; " +
	"copying them from inside would bring back every file deleted from the image. Set container_persistent: true: berth then copies the instance's overlay (directory or image) exactly"

func checkpointsDir(scratch string) string { return filepath.Join(scratch, "checkpoints") }

// checkpointName is the shape of a checkpoint's directory name.
var checkpointName = regexp.MustCompile(`^berth_[0-9a-f]{12}\.[A-Za-z0-9_-][A-Za-z0-9._-]*$`)

// safeName keeps a readable part of s for a file name (letters, digits,
// '.', '_', '-'; other runs made '_'), at most 40 bytes, never starting
// with a dot.
func safeName(s string) string {
	var b strings.Builder
	under := false
	for _, r := range s {
		if b.Len() >= 40 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' {
			b.WriteRune(r)
			under = false
		} else if !under {
			b.WriteByte('_')
			under = true
		}
	}
	out := strings.TrimLeft(b.String(), ".")
	if out == "" {
		out = "_"
	}
	return out
}

// checkpointMarker is a checkpoint's berth.json: the marks berth finds it
// by.
type checkpointMarker struct {
	Backend  string    `json:"backend"`
	Key      string    `json:"key"`
	Name     string    `json:"name,omitempty"`
	Instance string    `json:"instance"`
	Kind     string    `json:"kind"`
	Created  time.Time `json:"created"`
}

// checkpointCaps fills in how (or why not) the environment is
// checkpointed.
func (b *Backend) checkpointCaps(c *backend.Capabilities) {
	switch {
	case b.overlayPath == "":
		c.NoCheckpoint = noCheckpointTmpfs
	case strings.HasSuffix(b.overlayPath, ".img"):
		c.Checkpoint = "the instance's ext3 overlay image copied (sparse, with reflinks where the scratch filesystem has them) after a sync, checked with e2fsck"
	default:
		c.Checkpoint = "the instance's directory overlay copied with cp -a --reflink=auto (whiteouts and opaque directories kept)"
	}
}

// Checkpoint implements backend.Checkpointer: it copies the instance's
// overlay into <scratch>/checkpoints while the instance runs.
func (b *Backend) Checkpoint(ctx context.Context, name string) (backend.Checkpoint, error) {
	b.mu.Lock()
	closed, overlay := b.closed, b.overlayPath
	b.mu.Unlock()
	if closed {
		return backend.Checkpoint{}, ErrClosed
	}
	if overlay == "" {
		return backend.Checkpoint{}, errors.New("singularity: cannot checkpoint: " + noCheckpointTmpfs)
	}
	s := b.set
	root := checkpointsDir(s.scratch)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return backend.Checkpoint{}, fmt.Errorf("singularity: %w", err)
	}
	sweepCheckpoints(root, 0, b.log)
	tmp, err := os.MkdirTemp(root, ".tmp-")
	if err != nil {
		return backend.Checkpoint{}, fmt.Errorf("singularity: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.WriteFile(filepath.Join(tmp, "owner"), []byte(currentOwner()+"\n"), 0o600); err != nil {
		return backend.Checkpoint{}, fmt.Errorf("singularity: %w", err)
	}
	kind := kindDir
	if strings.HasSuffix(overlay, ".img") {
		kind = kindImage
	}
	step := backend.Options{Progress: b.progress}.Begin("copying the overlay of instance "+s.name, "")
	how, err := copyOverlay(ctx, kind, overlay, tmp, true)
	step.End(err)
	if err != nil {
		return backend.Checkpoint{}, fmt.Errorf("singularity: checkpoint of instance %s: %w", s.name, err)
	}
	label := name
	if label == "" {
		label = "fork"
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	dst := filepath.Join(root, s.name+"."+safeName(label)+"."+hex.EncodeToString(rnd[:]))
	created := time.Now().UTC()
	m := checkpointMarker{Backend: Name, Key: s.key, Name: name, Instance: s.name, Kind: kind, Created: created}
	data, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(tmp, "berth.json"), data, 0o600); err != nil {
		return backend.Checkpoint{}, fmt.Errorf("singularity: %w", err)
	}
	if name == "" {
		if err := os.WriteFile(filepath.Join(tmp, "transient"), nil, 0o600); err != nil {
			return backend.Checkpoint{}, fmt.Errorf("singularity: %w", err)
		}
	}
	os.Remove(filepath.Join(tmp, "owner"))
	if err := os.Rename(tmp, dst); err != nil {
		return backend.Checkpoint{}, fmt.Errorf("singularity: %w", err)
	}
	ok = true
	return backend.Checkpoint{
		Backend: Name, Key: s.key, Name: name, ID: dst, Size: diskUsage(dst), Created: created,
		Meta: map[string]string{"kind": kind, "instance": s.name, "overlay": overlay, "copy": how},
	}, nil
}

// copyOverlay copies the overlay at src (a directory overlay or an image
// file) into the directory dir: dir/overlay/upper, or dir/overlay.img.
// live says an instance may have it mounted: an image is then synced
// first and its copy checked.
func copyOverlay(ctx context.Context, kind, src, dir string, live bool) (string, error) {
	if kind == kindDir {
		if err := os.MkdirAll(filepath.Join(dir, "overlay"), 0o700); err != nil {
			return "", err
		}
		upper := filepath.Join(src, "upper")
		if _, err := os.Lstat(upper); errors.Is(err, fs.ErrNotExist) {
			// Nothing written yet: an empty upper layer.
			return "nothing written yet", os.Mkdir(filepath.Join(dir, "overlay", "upper"), 0o755)
		}
		return hostCopy(ctx, upper, filepath.Join(dir, "overlay", "upper"), false)
	}
	if live {
		// The image is mounted by the instance: flush what the kernel
		// holds for it (sync(2) reaches every mounted filesystem, in any
		// mount namespace).
		syscall.Sync()
	}
	dst := filepath.Join(dir, "overlay.img")
	how, err := hostCopy(ctx, src, dst, true)
	if err != nil || !live {
		return how, err
	}
	if err := fsckImage(ctx, dst); err != nil {
		return how, err
	}
	return how + ", e2fsck -p", nil
}

// fsckImage replays the journal of a copied ext3 image and checks it
// (e2fsck -p; status 1 means corrected), so the new instance mounts a
// clean filesystem. Without e2fsck the copy is used as it is.
func fsckImage(ctx context.Context, img string) error {
	fsck, err := exec.LookPath("e2fsck")
	if err != nil {
		return nil
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, fsck, "-p", "-f", img)
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	var ee *exec.ExitError
	if err == nil || errors.As(err, &ee) && ee.ExitCode() == 1 {
		return nil
	}
	return fmt.Errorf("the copied overlay image %s does not check clean (e2fsck -p -f): %v: %s", img, err, strings.TrimSpace(out.String()))
}

var (
	reflinkOnce sync.Once
	reflinkOK   bool
)

// hostCopy runs cp -a (--reflink=auto when this machine's cp has it;
// --sparse=always for an image) from src to dst, which does not exist.
func hostCopy(ctx context.Context, src, dst string, sparse bool) (string, error) {
	reflinkOnce.Do(func() {
		d, err := os.MkdirTemp("", "berth-cp-probe-")
		if err != nil {
			return
		}
		defer os.RemoveAll(d)
		a := filepath.Join(d, "a")
		if os.WriteFile(a, nil, 0o600) == nil {
			reflinkOK = exec.Command("cp", "--reflink=auto", "--", a, filepath.Join(d, "b")).Run() == nil
		}
	})
	args := []string{"-a"}
	how := "cp -a"
	if reflinkOK {
		args = append(args, "--reflink=auto")
		how += " --reflink=auto"
		if sparse {
			args = append(args, "--sparse=always")
		}
	} else {
		how += " (this cp has no --reflink: a full copy)"
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "cp", append(args, "--", src, dst)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return how, fmt.Errorf("%s %s %s: %w: %s", how, src, dst, err, strings.TrimSpace(out.String()))
	}
	return how, nil
}

// diskUsage is what the files under dir take on disk, in bytes (shared
// blocks counted whole).
func diskUsage(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

// checkpointDir returns cp's directory in scratch, refusing a checkpoint
// this backend did not make there (a damaged or forged record must never
// name another directory).
func checkpointDir(scratch string, cp *backend.Checkpoint) (string, error) {
	if cp.Backend != "" && cp.Backend != Name {
		return "", fmt.Errorf("singularity: checkpoint %q was made by the %s backend, not singularity", cp.ID, cp.Backend)
	}
	root := checkpointsDir(scratch)
	if filepath.Clean(cp.ID) != cp.ID || filepath.Dir(cp.ID) != root || !checkpointName.MatchString(filepath.Base(cp.ID)) {
		return "", fmt.Errorf("singularity: checkpoint %q is not a checkpoint directory in %s: berth uses only the checkpoints it made (is TERMINAL_SCRATCH_DIR the one it was made with?)", cp.ID, root)
	}
	return cp.ID, nil
}

// fromCheckpoint replaces the key's overlay with a fresh copy of cp's,
// before the instance starts: a running instance of the key is stopped
// first. The instance then starts on it (prepareOverlay keeps it).
func (b *Backend) fromCheckpoint(ctx context.Context, cp *backend.Checkpoint) error {
	s := b.set
	dir, err := checkpointDir(s.scratch, cp)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(dir, "berth.json"))
	if err != nil {
		return fmt.Errorf("singularity: checkpoint %s is gone (removed, or never finished): %w", dir, err)
	}
	var m checkpointMarker
	if err := json.Unmarshal(data, &m); err != nil || m.Kind != kindDir && m.Kind != kindImage {
		return fmt.Errorf("singularity: checkpoint %s: unreadable berth.json (%v)", dir, err)
	}
	if err := os.MkdirAll(filepath.Join(s.scratch, "overlays"), 0o700); err != nil {
		return fmt.Errorf("singularity: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(recordDir(s.scratch), s.name+".lock"))
	if err != nil {
		return fmt.Errorf("singularity: lock instance %s: %w", s.name, err)
	}
	defer unlock()
	if err := b.cli.stop(ctx, s.name); err != nil {
		return err
	}
	// The copy is made beside the overlays and renamed into place, so a
	// failure leaves the key's old overlay as it was.
	sweepCheckpoints(filepath.Join(s.scratch, "overlays"), 0, b.log)
	tmp, err := os.MkdirTemp(filepath.Join(s.scratch, "overlays"), ".tmp-")
	if err != nil {
		return fmt.Errorf("singularity: %w", err)
	}
	defer os.RemoveAll(tmp)
	owner := filepath.Join(tmp, "owner")
	if err := os.WriteFile(owner, []byte(currentOwner()+"\n"), 0o600); err != nil {
		return fmt.Errorf("singularity: %w", err)
	}
	step := backend.Options{Progress: b.progress}.Begin("copying checkpoint "+filepath.Base(dir)+" into the overlay of "+s.name, "")
	src := filepath.Join(dir, "overlay.img")
	if m.Kind == kindDir {
		src = filepath.Join(dir, "overlay")
	}
	var how string
	if m.Kind == kindDir {
		how, err = hostCopy(ctx, filepath.Join(src, "upper"), filepath.Join(tmp, "upper"), false)
		if err == nil {
			err = os.Mkdir(filepath.Join(tmp, "work"), 0o700)
		}
	} else {
		how, err = hostCopy(ctx, src, filepath.Join(tmp, "overlay.img"), true)
	}
	step.End(err)
	if err != nil {
		return fmt.Errorf("singularity: environment from checkpoint %s: %w", dir, err)
	}
	// The key's old overlay (either kind) is what this environment
	// replaces.
	for _, p := range []string{overlayDirPath(s.scratch, s.name), overlayImagePath(s.scratch, s.name)} {
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("singularity: remove %s, the overlay this environment replaces: %w", p, err)
		}
	}
	os.Remove(owner)
	if m.Kind == kindDir {
		err = os.Rename(tmp, overlayDirPath(s.scratch, s.name))
		if err == nil {
			os.Chmod(overlayDirPath(s.scratch, s.name), 0o700)
		}
	} else {
		err = os.Rename(filepath.Join(tmp, "overlay.img"), overlayImagePath(s.scratch, s.name))
	}
	if err != nil {
		return fmt.Errorf("singularity: %w", err)
	}
	b.fromKind = overlayMode(m.Kind)
	b.log.Info("singularity: environment made from a checkpoint", "checkpoint", dir, "instance", s.name, "copy", how)
	return nil
}

// sweepCheckpoints removes, in root (the checkpoints or the overlays
// directory), the temporary copies whose berth is gone and, when maxAge > 0, the checkpoints of forks (never named) older
// than maxAge.
func sweepCheckpoints(root string, maxAge time.Duration, log interface{ Warn(string, ...any) }) {
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		p := filepath.Join(root, e.Name())
		if !e.IsDir() {
			continue
		}
		if strings.HasPrefix(e.Name(), ".tmp-") {
			owner, err := os.ReadFile(filepath.Join(p, "owner"))
			if err == nil && procmark.Gone(strings.TrimSpace(string(owner))) {
				if err := os.RemoveAll(p); err != nil {
					log.Warn("singularity: removing a crashed checkpoint's copy", "dir", p, "err", err)
				}
			}
			continue
		}
		if maxAge <= 0 || !checkpointName.MatchString(e.Name()) {
			continue
		}
		if _, err := os.Stat(filepath.Join(p, "transient")); err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join(p, "berth.json"))
		var m checkpointMarker
		if err != nil || json.Unmarshal(data, &m) != nil || time.Since(m.Created) <= maxAge {
			continue
		}
		os.RemoveAll(p)
	}
}

// checkpointAdmin removes singularity checkpoints (Registration.Checkpoints).
type checkpointAdmin struct{}

// Remove implements backend.CheckpointAdmin: it deletes the checkpoint's
// directory in the scratch directory opts names; one already gone is not
// an error, a directory without berth's marks is left alone.
func (checkpointAdmin) Remove(ctx context.Context, opts backend.Options, cp backend.Checkpoint) error {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	scratch, err := scratchDir(getenv, opts.Home)
	if err != nil {
		return err
	}
	dir, err := checkpointDir(scratch, &cp)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "berth.json")); err != nil {
		return fmt.Errorf("singularity: %s is not a berth checkpoint (no berth.json): left alone", dir)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("singularity: remove checkpoint %s: %w", dir, err)
	}
	return nil
}

var (
	_ backend.Checkpointer    = (*Backend)(nil)
	_ backend.CheckpointAdmin = checkpointAdmin{}
)
