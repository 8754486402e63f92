package modal

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	modal "github.com/modal-labs/libmodal/modal-go"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/procmark"
)

// A checkpoint of a Modal environment is a filesystem snapshot of its
// running sandbox (Sandbox.SnapshotFilesystem, the call Close already
// makes for container_persistent): an image ("im-...") of the whole
// filesystem that Modal keeps until it is deleted, taken without stopping
// the sandbox, so the environment's processes run on meanwhile. A new
// environment made from it (Options.From) is a new sandbox created from
// that image, with everything else as a fresh environment of the same
// configuration gets (name and tags from its own key, cpu, memory,
// network, timeouts, working directory); the image stays, so the
// checkpoint can be restored any number of times. Should that sandbox
// later die and be recreated, it starts again from the checkpoint (or from
// the key's own snapshot once one is recorded), as a fresh environment
// starts again from modal_image.
//
// Removal (Registration.Checkpoints) deletes the image with Images.Delete:
// Modal's guide (modal.com/docs/guide/sandbox-snapshots, "Snapshot
// Retention") keeps filesystem snapshots "Indefinite (until explicitly
// deleted)" and deletes them programmatically; modal-go v0.7.3 image.go
// documents the deletion as "irreversible and will prevent
// Functions/Sandboxes from using the Image". A sandbox already made from
// it is not stopped.
//
// What berth keeps cannot carry berth's marks on Modal's side: modal-go
// v0.7.3 can neither label nor list images (its image RPCs are
// ImageGetOrCreate, ImageFromId, ImageJoinStreaming and ImageDelete).
// The marks (key, name, berth process) are kept in the berth home instead:
// while a snapshot is taken, a pending entry in PendingCheckpointsFile
// names it, with the image id as soon as Modal answers; the entry goes
// when Checkpoint returns (the caller then holds the checkpoint's record).
// A berth that dies in the middle leaves the entry behind, and the sweep
// at the first backend of a later berth process, and berth env prune,
// delete the image it names. One window cannot be closed: a berth that
// dies while Modal is still answering the snapshot call never learns the
// image's id, and nothing can find that image afterwards.

// checkpointHow is Capabilities.Checkpoint.
const checkpointHow = "Modal filesystem snapshot of the running sandbox (SnapshotFilesystem, not stopped); a fork or restore is a new sandbox from the snapshot's image"

// PendingCheckpointsFile records, in the berth home, the checkpoints being
// taken: {"<nonce>": {"key", "name", "sandbox", "process", "started",
// "image"}}.
const PendingCheckpointsFile = "modal_checkpoints.pending.json"

// The keys of Checkpoint.Meta.
const (
	MetaSandbox     = "sandbox"     // the sandbox the snapshot was taken of
	MetaServer      = "server"      // the Modal server (MODAL_SERVER_URL) that keeps the image
	MetaEnvironment = "environment" // the Modal environment, "" for the workspace's default
	MetaApp         = "app"         // modal_app
	MetaImage       = "modal_image" // the image the environment was configured with
)

// Interface checks.
var (
	_ backend.Checkpointer    = (*Backend)(nil)
	_ backend.CheckpointAdmin = checkpointAdmin{}
)

// checkpointStep lets a test stop a checkpoint where a crash would leave
// the most behind: called once Modal has answered the snapshot, before the
// pending entry goes.
var checkpointStep = func() {}

// Checkpoint takes a filesystem snapshot of the environment's sandbox,
// which keeps running, and returns it: ID is the snapshot's image id, Meta
// names the sandbox, the Modal server and environment, the app and
// modal_image; Size is 0 (Modal tells no image's size). The snapshot is
// given what is left of ctx (at most 5 minutes), less a margin so that
// Modal's own timeout answers first. A sandbox that has finished, or
// finishes before it is snapshotted, or a snapshot that does not finish in
// time, is an error saying so, and nothing is kept. A sandbox carried over
// into a new one meanwhile (the end of its lifetime) is snapshotted again
// in its successor, once.
func (b *Backend) Checkpoint(ctx context.Context, name string) (backend.Checkpoint, error) {
	what := fmt.Sprintf("checkpoint %q of %s", name, b.set.Key)
	if name == "" {
		what = "checkpoint of " + b.set.Key
	}
	for attempt := 1; ; attempt++ {
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return backend.Checkpoint{}, ErrClosed
		}
		sb, w := b.sb, b.watch
		b.mu.Unlock()
		if sb == nil || w.finished() {
			why := "it is gone"
			if w != nil {
				why = w.reason().Error()
			}
			return backend.Checkpoint{}, fmt.Errorf("modal: %s: the environment's sandbox has finished (%s), so its files are gone: nothing was kept; the next command starts a new sandbox (environment_recreated), which can then be checkpointed", what, why)
		}
		cp, err := b.checkpointOf(ctx, what, name, sb)
		if err == nil {
			return cp, nil
		}
		b.mu.Lock()
		moved := !b.closed && b.sb != nil && b.sb != sb
		b.mu.Unlock()
		if !moved || attempt > 1 || ctx.Err() != nil {
			return backend.Checkpoint{}, err
		}
		b.log.Info("modal: the sandbox was carried over into a new one while it was snapshotted; snapshotting the new one", "old", sb.SandboxID, "err", err)
	}
}

// checkpointOf snapshots sb, under a pending entry.
func (b *Backend) checkpointOf(ctx context.Context, what, name string, sb *modal.Sandbox) (backend.Checkpoint, error) {
	timeout, err := snapshotBudget(ctx)
	if err != nil {
		return backend.Checkpoint{}, fmt.Errorf("modal: %s: %w", what, err)
	}
	pend := pendingStore{dir: b.snaps.dir}
	nonce, err := pend.begin(pendingCheckpoint{Key: b.set.Key, Name: name, Sandbox: sb.SandboxID, Process: currentProcess(), Started: time.Now().UTC()})
	if err != nil {
		return backend.Checkpoint{}, fmt.Errorf("modal: %s: %w", what, err)
	}
	defer func() {
		if err := pend.end(nonce); err != nil {
			b.log.Warn("modal: drop the pending checkpoint entry; the next sweep drops it", "err", err)
		}
	}()
	start := time.Now()
	img, err := sb.SnapshotFilesystem(ctx, timeout)
	took := time.Since(start)
	if err != nil {
		return backend.Checkpoint{}, b.snapshotError(ctx, what, sb, err, took, timeout)
	}
	if err := pend.setImage(nonce, img.ImageID); err != nil {
		b.log.Warn("modal: record the checkpoint's image as pending", "image", img.ImageID, "err", err)
	}
	checkpointStep()
	b.log.Info("modal: checkpoint taken", "name", name, "sandbox", sb.SandboxID, "image", img.ImageID, "took", took.Round(time.Millisecond))
	return backend.Checkpoint{
		Backend: Name,
		Key:     b.set.Key,
		Name:    name,
		ID:      img.ImageID,
		Created: start.UTC(),
		Meta: map[string]string{
			MetaSandbox:     sb.SandboxID,
			MetaServer:      b.cred.ServerURL,
			MetaEnvironment: b.cred.Environment,
			MetaApp:         b.set.App,
			MetaImage:       b.set.Image,
		},
	}, nil
}

// snapshotBudget is the timeout a snapshot is given under ctx: what is
// left of it less a fifth (at most 5 s), so that Modal's answer that the
// snapshot timed out comes before ctx ends, at most snapshotTimeout.
func snapshotBudget(ctx context.Context) (time.Duration, error) {
	t := snapshotTimeout
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		t = min(t, left-min(left/5, 5*time.Second))
		if t < time.Second {
			return 0, fmt.Errorf("only %v is left to take a filesystem snapshot; give it more time", left.Round(time.Millisecond))
		}
	}
	return t, nil
}

// snapshotError says why the snapshot of sb failed: it took its whole
// timeout, or the sandbox has finished, or Modal refused it (classified
// as b.wrap does). The first two are decided from what is known after the
// call (the time it took, the sandbox's state), never from which of two
// racing answers came first.
func (b *Backend) snapshotError(ctx context.Context, what string, sb *modal.Sandbox, err error, took, timeout time.Duration) error {
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("modal: %s: %w", what, ctx.Err())
	}
	if took >= timeout || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("modal: %s: the filesystem snapshot of sandbox %s did not finish within %v (Modal takes longer to snapshot a large filesystem): nothing was kept, and the environment runs on; try again with more time: %w",
			what, sb.SandboxID, timeout.Round(time.Second), err)
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	code, perr := sb.Poll(pctx)
	if perr == nil && code != nil || isNotFound(perr) {
		how := "it is gone"
		if code != nil {
			how = exitMeaning(*code)
		}
		return fmt.Errorf("modal: %s: sandbox %s finished (%s) before its filesystem could be snapshotted, and its files are gone with it: nothing was kept; the next command starts a new sandbox (environment_recreated): %w",
			what, sb.SandboxID, how, err)
	}
	return b.wrap(err, "%s: snapshot sandbox %s", what, sb.SandboxID)
}

// exitMeaning describes a sandbox's exit code.
func exitMeaning(code int) string {
	switch code {
	case 124:
		return "its lifetime ran out"
	case 137:
		return "terminated"
	}
	return fmt.Sprintf("exit status %d", code)
}

// checkFrom checks that cp is a checkpoint this backend can start a
// sandbox from, on the server berth talks to.
func checkFrom(cp *backend.Checkpoint, cred credentials) error {
	if cp.Backend != "" && cp.Backend != Name {
		return fmt.Errorf("modal: checkpoint %q of %s was made by the %s backend; the modal backend starts only from its own", cp.Name, cp.Key, cp.Backend)
	}
	if !strings.HasPrefix(cp.ID, "im-") {
		return fmt.Errorf("modal: checkpoint %q of %s has the id %q, which is no Modal image id (im-...): its record is damaged; remove it", cp.Name, cp.Key, cp.ID)
	}
	if s := cp.Meta[MetaServer]; s != "" && s != cred.ServerURL {
		return fmt.Errorf("modal: checkpoint %q of %s is kept by Modal at %s, and berth talks to %s (%s): set MODAL_SERVER_URL to %s to use it", cp.Name, cp.Key, s, cred.ServerURL, cred.Source, s)
	}
	return nil
}

// startFrom makes b start from cp: the first sandbox is created from its
// image, and a recreated one falls back to it.
func (b *Backend) startFrom(cp *backend.Checkpoint) error {
	if cp == nil {
		return nil
	}
	if err := checkFrom(cp, b.cred); err != nil {
		return err
	}
	b.from, b.fromName, b.fromFirst = cp.ID, cp.Name, true
	return nil
}

// refuseReattach refuses, for the first sandbox of an environment made
// from a checkpoint, a sandbox of the key that still runs: it holds other
// files. b.mu is held.
func (b *Backend) refuseReattach(sb *modal.Sandbox) error {
	if !b.fromFirst {
		return nil
	}
	sb.Detach()
	return fmt.Errorf("modal: environment %s still has a running sandbox (%s), so it cannot be made from checkpoint %q: remove it first (berth env rm %s)", b.set.Key, sb.SandboxID, b.fromName, b.set.Key)
}

// fromImage is the checkpoint's image: for the first sandbox (first), an
// error when Modal no longer has it; later (a recreation) nil, with a
// warning, when it is gone, so the caller falls back to modal_image. b.mu
// is held.
func (b *Backend) fromImage(ctx context.Context, first bool) (*modal.Image, error) {
	img, err := b.client.Images.FromID(ctx, b.from)
	switch {
	case err == nil:
		return img, nil
	case !isNotFound(err):
		return nil, b.wrap(err, "look up the image %s of checkpoint %q", b.from, b.fromName)
	case first:
		return nil, fmt.Errorf("modal: checkpoint %q (image %s) can no longer be restored: Modal does not know the image (it was deleted, or its retention ended); remove the checkpoint: %w", b.fromName, b.from, err)
	}
	b.log.Warn("modal: the checkpoint this environment was made from is gone; starting from modal_image", "image", b.from, "checkpoint", b.fromName)
	b.from = ""
	b.recreated.Set()
	return nil, nil
}

// startedFrom is called once the first sandbox from a checkpoint runs: a
// persistent key's earlier snapshot, if any, no longer holds the
// environment's files, and is dropped so that no recreation goes back to
// it. b.mu is held.
func (b *Backend) startedFrom(ctx context.Context) {
	if !b.fromFirst {
		return
	}
	b.fromFirst = false
	if !b.set.Persistent {
		return
	}
	if err := dropSnapshot(ctx, b.client, b.snaps, b.set.Key); err != nil {
		b.log.Warn("modal: drop the snapshot a restore replaced", "err", err)
	}
}

// checkpointAdmin implements backend.CheckpointAdmin.
type checkpointAdmin struct{}

// Remove deletes the checkpoint's image from Modal (Images.Delete); an
// image already gone is not an error. A sandbox made from it runs on.
func (checkpointAdmin) Remove(ctx context.Context, opts backend.Options, cp backend.Checkpoint) error {
	c, cred, err := connect(ctx, opts)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := checkFrom(&cp, cred); err != nil {
		return err
	}
	if err := c.Images.Delete(ctx, cp.ID, nil); err != nil && !isNotFound(err) {
		return fmt.Errorf("modal: delete the image %s of checkpoint %q of %s: %w", cp.ID, cp.Name, cp.Key, err)
	}
	return nil
}

// pendingCheckpoint is an entry of PendingCheckpointsFile.
type pendingCheckpoint struct {
	Key     string    `json:"key"`
	Name    string    `json:"name,omitempty"`
	Sandbox string    `json:"sandbox"`
	Process string    `json:"process"` // the berth process taking it (procmark)
	Started time.Time `json:"started"`
	Image   string    `json:"image,omitempty"` // once Modal has answered
}

// pendingStore is PendingCheckpointsFile in dir, under the snapshot
// records' lock.
type pendingStore struct{ dir string }

func (p pendingStore) update(fn func(map[string]pendingCheckpoint)) error {
	unlock, err := snapshots{dir: p.dir}.lock()
	if err != nil {
		return err
	}
	defer unlock()
	path := filepath.Join(p.dir, PendingCheckpointsFile)
	m, err := readJSON[pendingCheckpoint](path)
	if err != nil {
		return err
	}
	fn(m)
	return writeJSON(path, m)
}

// begin records e and returns its nonce.
func (p pendingStore) begin(e pendingCheckpoint) (string, error) {
	nonce := fmt.Sprintf("%d-%s", time.Now().UnixNano(), e.Sandbox)
	return nonce, p.update(func(m map[string]pendingCheckpoint) { m[nonce] = e })
}

func (p pendingStore) setImage(nonce, image string) error {
	return p.update(func(m map[string]pendingCheckpoint) {
		if e, ok := m[nonce]; ok {
			e.Image = image
			m[nonce] = e
		}
	})
}

func (p pendingStore) end(nonce string) error {
	return p.update(func(m map[string]pendingCheckpoint) { delete(m, nonce) })
}

// sweepPending deletes what checkpoints taken by berth processes that are
// gone left: the image each pending entry names (when Modal had answered)
// and the entry. It returns the keys it cleaned up after.
func sweepPending(ctx context.Context, c *modal.Client, home string) ([]string, error) {
	p := pendingStore{dir: home}
	var dead map[string]pendingCheckpoint
	if err := p.update(func(m map[string]pendingCheckpoint) {
		dead = map[string]pendingCheckpoint{}
		for n, e := range m {
			if procmark.Gone(e.Process) {
				dead[n] = e
			}
		}
	}); err != nil {
		return nil, err
	}
	var keys []string
	var errs []error
	for n, e := range dead {
		if e.Image != "" {
			if err := c.Images.Delete(ctx, e.Image, nil); err != nil && !isNotFound(err) {
				errs = append(errs, fmt.Errorf("modal: delete the image %s of a checkpoint of %s a berth that died was taking: %w", e.Image, e.Key, err))
				continue
			}
		}
		if err := p.end(n); err != nil {
			errs = append(errs, err)
			continue
		}
		keys = append(keys, e.Key)
	}
	return keys, errors.Join(errs...)
}
