package daytona

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	apiclient "github.com/daytona/clients/api-client-go"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/randhex"
)

// Checkpoints: a Daytona snapshot of the sandbox, and new sandboxes made
// from it.
//
// Daytona's API (api-client-go v0.201.0) offers three things with "snapshot"
// or "fork" in their name; berth uses the one that copies a running
// container sandbox's filesystem and outlives it:
//
//   - POST /sandbox/{id}/snapshot {name} (createSandboxSnapshot) commits the
//     sandbox's container, started or stopped, into a new snapshot (an
//     image in Daytona's registry) and answers at once, the sandbox in
//     state snapshotting; the sandbox returns to its state when the capture
//     ends, its processes kept (Daytona's runner pauses a started container
//     for the commit, it does not stop it). The snapshot, GET
//     /snapshots/{id or name}, is snapshotting, then active or error with a
//     reason (an older API makes the record only on success: berth reads
//     the sandbox's return as the end, and a missing record then as a
//     failure). It carries the sandbox's cpu, memory and disk. Daytona
//     documents it as experimental, granted on request. berth names each
//     snapshot uniquely (names are unique per organization).
//   - POST /sandbox with snapshot (an id or name) makes a sandbox from it,
//     any number of times; resources may not be given with a snapshot (the
//     snapshot's are used).
//   - DELETE /snapshots/{id} removes it (by id only); sandboxes made from
//     it keep running.
//
// Not used: POST /snapshots makes a snapshot from an image or a Dockerfile
// (a template, not a copy of a sandbox); POST /sandbox/{id}/fork copies a
// sandbox into another at once but only for VM classes (berth's sandboxes
// are containers; "Forking is not supported for this sandbox", 422), and
// leaves nothing to restore from twice; POST /sandbox/{id}/backup is a
// deprecated no-op; archive moves the filesystem to object storage but
// only for the same sandbox, once stopped.

// LabelFrom is the label of a sandbox made from a checkpoint: the name of
// the snapshot it was made from.
const LabelFrom = "berth.from"

// Keys of Checkpoint.Meta.
const (
	metaSnapshot = "snapshot" // the snapshot's name
	metaSandbox  = "sandbox"  // the name of the sandbox it was taken from
	metaConfig   = "config"   // the settings hash of that sandbox (LabelConfig)
)

// snapshotPrefix starts the name of every snapshot berth makes, for a sweep
// of what a crash left behind.
const snapshotPrefix = "berth-ckpt-"

// errCaptureFailed is wrapped by the error of a capture Daytona reported
// failed (or made no snapshot of): a new capture may succeed.
var errCaptureFailed = errors.New("daytona: the snapshot's capture failed")

// snapshotName is the name of a new snapshot of key's sandbox, checkpoint
// name (the fork's transient checkpoint has none): berth's prefix, the key,
// the checkpoint's name, a mark of berth's home (the installation whose
// records keep it) and a random part, in what Daytona accepts in a
// snapshot's name (letters, digits, '.', '_', '-').
func snapshotName(key, name, home string) string {
	clean := func(s string, n int) string {
		s = nameUnsafe.ReplaceAllString(s, "-")
		if len(s) > n {
			s = s[:n]
		}
		return s
	}
	if name == "" {
		name = "fork"
	}
	sum := sha256.Sum256([]byte(home))
	return snapshotPrefix + clean(key, 40) + "." + clean(name, 40) + "." + hex.EncodeToString(sum[:4]) + "." + randhex.String(4)
}

// Checkpoint implements backend.Checkpointer with a Daytona snapshot of the
// sandbox, taken while it runs. A capture Daytona reports failed is taken
// once more under a new name; whatever a failed attempt left (its
// snapshot's record) is removed.
func (b *Backend) Checkpoint(ctx context.Context, name string) (backend.Checkpoint, error) {
	var errs []error
	for attempt := 1; attempt <= 2; attempt++ {
		cp, err := b.checkpointOnce(ctx, name)
		if err == nil {
			return cp, nil
		}
		errs = append(errs, err)
		if !errors.Is(err, errCaptureFailed) || ctx.Err() != nil {
			break
		}
		b.log.Warn("daytona: the snapshot's capture failed; taking it again", "sandbox", b.spec.Name, "checkpoint", name, "err", err)
	}
	if len(errs) == 1 {
		return backend.Checkpoint{}, errs[0]
	}
	return backend.Checkpoint{}, fmt.Errorf("daytona: checkpoint %q of sandbox %s failed twice: %w", name, b.spec.Name, errors.Join(errs...))
}

// checkpointOnce takes one snapshot of the sandbox and waits for it.
func (b *Backend) checkpointOnce(ctx context.Context, name string) (cp backend.Checkpoint, err error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return cp, ErrClosed
	}
	ref := b.sandbox
	b.mu.Unlock()
	snap := snapshotName(b.spec.Key, name, b.home)
	what := fmt.Sprintf("checkpoint %q of sandbox %s", name, b.spec.Name)
	step := b.begin("taking a Daytona snapshot of "+b.spec.Name, "")
	defer func() { step.End(err) }()

	if err := b.requestSnapshot(ctx, ref, snap); err != nil {
		return cp, fmt.Errorf("daytona: %s: %w", what, err)
	}
	defer func() {
		if err != nil {
			b.discardSnapshot(ctx, snap)
		}
	}()
	dto, err := b.awaitSnapshot(ctx, ref.id, snap)
	// Daytona may settle the snapshot's record before the sandbox leaves
	// state snapshotting: berth hands the sandbox back once it has (a stop
	// before would be refused, 409), whatever became of the capture.
	b.waitState(ctx, ref.id)
	if err != nil {
		return cp, fmt.Errorf("daytona: %s: %w", what, err)
	}
	created := dto.CreatedAt
	if created.IsZero() {
		created = time.Now()
	}
	return backend.Checkpoint{
		Backend: Name,
		Key:     b.spec.Key,
		Name:    name,
		ID:      dto.Id,
		Size:    int64(float64(dto.GetSize()) * (1 << 30)),
		Created: created,
		Meta:    map[string]string{metaSnapshot: dto.Name, metaSandbox: b.spec.Name, metaConfig: b.spec.hash},
	}, nil
}

// requestSnapshot asks Daytona for the snapshot snap of the sandbox. A
// sandbox Daytona cannot snapshot as it is — asleep in a state other than
// stopped (archived), or in the middle of a transition — is brought back
// to a usable state and asked once more.
func (b *Backend) requestSnapshot(ctx context.Context, ref sandboxRef, snap string) error {
	for attempt := 1; ; attempt++ {
		_, resp, err := b.api.SandboxAPI.CreateSandboxSnapshot(ctx, ref.id).
			CreateSandboxSnapshot(*apiclient.NewCreateSandboxSnapshot(snap)).Execute()
		if err == nil {
			return nil
		}
		err = b.creds.apiErr(err, resp, "snapshot sandbox %s", b.spec.Name)
		var api *APIError
		if attempt > 1 && errors.As(err, &api) && api.Status == http.StatusConflict && strings.Contains(api.Msg, "already exists") {
			// The name is this checkpoint's alone (its random part): the
			// request answered 409 before had been done after all.
			return nil
		}
		var ae *AuthError
		if errors.As(err, &ae) && ae.Status == http.StatusForbidden {
			return fmt.Errorf("Daytona refused to snapshot the sandbox (%d: %s); Daytona documents snapshots of sandboxes as experimental, granted to an organization on request (support@daytona.io)", ae.Status, ae.Msg)
		}
		st := statusOf(err)
		if attempt > 1 || (st != http.StatusBadRequest && st != http.StatusConflict) || ctx.Err() != nil {
			return err
		}
		sb, gerr := b.get(ctx, ref.id)
		switch {
		case gerr != nil:
			return errors.Join(err, gerr)
		case settling[sb.GetState()] || fallingAsleep[sb.GetState()]:
			if _, werr := b.waitState(ctx, ref.id); werr != nil {
				return errors.Join(err, werr)
			}
		case asleep[sb.GetState()] && sb.GetState() != apiclient.SANDBOXSTATE_STOPPED:
			if _, werr := b.wakeUp(ctx, ref.gen); werr != nil {
				return errors.Join(err, werr)
			}
			b.mu.Lock()
			ref = b.sandbox
			b.mu.Unlock()
		default:
			return err
		}
	}
}

// awaitSnapshot waits until the capture of snap, of sandbox id, ended and
// returns the active snapshot. It polls the snapshot and the sandbox:
// Daytona updates the snapshot's record before the sandbox leaves state
// snapshotting, so a sandbox back in its state with no active snapshot
// means the capture failed.
func (b *Backend) awaitSnapshot(ctx context.Context, id, snap string) (*apiclient.SnapshotDto, error) {
	delay := 100 * time.Millisecond
	for {
		dto, err := b.getSnapshot(ctx, snap)
		if err != nil {
			return nil, err
		}
		if done, err := snapshotDone(dto); done || err != nil {
			return dto, err
		}
		sb, err := b.get(ctx, id)
		if errors.Is(err, errGone) {
			return nil, fmt.Errorf("the sandbox was deleted while its snapshot was taken")
		}
		if err != nil {
			return nil, err
		}
		if sb.GetState() != apiclient.SANDBOXSTATE_SNAPSHOTTING {
			if dto, err = b.getSnapshot(ctx, snap); err != nil {
				return nil, err
			}
			if done, err := snapshotDone(dto); done || err != nil {
				return dto, err
			}
			if dto == nil {
				return nil, fmt.Errorf("%w: the sandbox is %s again and Daytona made no snapshot %s (an API that records a snapshot only when its capture succeeded gives no reason)",
					errCaptureFailed, sb.GetState(), snap)
			}
			// The record still says snapshotting: it is updated apart from
			// the sandbox; wait for it.
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the snapshot %s was still being taken: %w", snap, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(delay*3/2, 2*time.Second)
	}
}

// snapshotDone judges a snapshot's record: done with an active one, an
// error for one that failed or went away, neither while it is captured (or
// not recorded yet: dto nil).
func snapshotDone(dto *apiclient.SnapshotDto) (bool, error) {
	if dto == nil {
		return false, nil
	}
	switch dto.State {
	case apiclient.SNAPSHOTSTATE_ACTIVE:
		return true, nil
	case apiclient.SNAPSHOTSTATE_ERROR, apiclient.SNAPSHOTSTATE_BUILD_FAILED:
		reason := dto.GetErrorReason()
		if reason == "" {
			reason = "Daytona gave no reason"
		}
		return false, fmt.Errorf("%w: snapshot %s is %s: %s", errCaptureFailed, dto.Name, dto.State, reason)
	case apiclient.SNAPSHOTSTATE_REMOVING, apiclient.SNAPSHOTSTATE_INACTIVE:
		return false, fmt.Errorf("snapshot %s was %s while it was taken (removed from outside?)", dto.Name, dto.State)
	}
	return false, nil
}

// getSnapshot returns the snapshot named or numbered idOrName, nil when
// Daytona has none.
func (b *Backend) getSnapshot(ctx context.Context, idOrName string) (*apiclient.SnapshotDto, error) {
	return getSnapshot(ctx, b.creds, b.api, idOrName)
}

func getSnapshot(ctx context.Context, creds credentials, api *apiclient.APIClient, idOrName string) (*apiclient.SnapshotDto, error) {
	dto, resp, err := api.SnapshotsAPI.GetSnapshot(ctx, idOrName).Execute()
	if resp != nil && resp.StatusCode == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, creds.apiErr(err, resp, "get snapshot %s", idOrName)
	}
	return dto, nil
}

// discardSnapshot removes what a failed checkpoint left: the snapshot's
// record, if Daytona made one (a capture still running is abandoned with
// it: Daytona does not complete a snapshot that is no longer
// snapshotting). It is bounded and runs even when ctx ended, and only logs
// what it could not do; the snapshot's name still marks it as berth's for a
// sweep.
func (b *Backend) discardSnapshot(ctx context.Context, snap string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	dto, err := b.getSnapshot(ctx, snap)
	if err == nil && dto != nil {
		err = removeSnapshot(ctx, b.creds, b.api, dto.Id)
	}
	if err != nil {
		b.log.Warn("daytona: removing the snapshot of a failed checkpoint failed", "snapshot", snap, "err", err)
	}
}

// removeSnapshot deletes the snapshot with this id; one already gone is
// not an error.
func removeSnapshot(ctx context.Context, creds credentials, api *apiclient.APIClient, id string) error {
	resp, err := api.SnapshotsAPI.RemoveSnapshot(ctx, id).Execute()
	if err != nil && (resp == nil || resp.StatusCode != http.StatusNotFound) {
		return creds.apiErr(err, resp, "delete snapshot %s", id)
	}
	return nil
}

// checkpointAdmin implements backend.CheckpointAdmin: it deletes the
// snapshot of a checkpoint, with or without its environment.
type checkpointAdmin struct{}

// Remove deletes cp's snapshot (by id; by the name in its Meta when the id
// is missing). Sandboxes made from it keep running; none can be made from
// it any more.
func (checkpointAdmin) Remove(ctx context.Context, opts backend.Options, cp backend.Checkpoint) error {
	if cp.Backend != "" && cp.Backend != Name {
		return fmt.Errorf("daytona: checkpoint %q was made by backend %s, not %s", cp.Name, cp.Backend, Name)
	}
	a, err := newAdmin(opts)
	if err != nil {
		return err
	}
	id := cp.ID
	if id == "" {
		snap := cp.Meta[metaSnapshot]
		if snap == "" {
			return fmt.Errorf("daytona: checkpoint %q names no snapshot (neither an id nor %s in its meta)", cp.Name, metaSnapshot)
		}
		dto, err := getSnapshot(ctx, a.creds, a.api, snap)
		if err != nil || dto == nil {
			return err
		}
		id = dto.Id
	}
	if err := removeSnapshot(ctx, a.creds, a.api, id); err != nil {
		return fmt.Errorf("daytona: remove checkpoint %q: %w", cp.Name, err)
	}
	return nil
}

// prepareFrom makes New create the sandbox from checkpoint cp: it checks
// that cp is a Daytona snapshot that can still be used, and deletes a
// sandbox the key still has (the environment being restored), so that the
// one ensure creates is made from the snapshot.
func (b *Backend) prepareFrom(ctx context.Context, cp *backend.Checkpoint) error {
	if cp.Backend != Name {
		return fmt.Errorf("daytona: checkpoint %q was made by backend %q; a Daytona sandbox can only be made from a Daytona checkpoint", cp.Name, cp.Backend)
	}
	ref := cp.ID
	if ref == "" {
		ref = cp.Meta[metaSnapshot]
	}
	if ref == "" {
		return fmt.Errorf("daytona: checkpoint %q names no snapshot", cp.Name)
	}
	dto, err := b.getSnapshot(ctx, ref)
	if err != nil {
		return fmt.Errorf("daytona: restore checkpoint %q: %w", cp.Name, err)
	}
	if dto == nil {
		return fmt.Errorf("daytona: checkpoint %q cannot be restored: its snapshot %s is gone from Daytona (remove the checkpoint)", cp.Name, ref)
	}
	if dto.State != apiclient.SNAPSHOTSTATE_ACTIVE {
		return fmt.Errorf("daytona: checkpoint %q cannot be restored: its snapshot %s is %s %s", cp.Name, dto.Name, dto.State, dto.GetErrorReason())
	}
	if h := cp.Meta[metaConfig]; h != "" && h != b.spec.hash {
		b.log.Warn("daytona: the checkpoint was taken with other settings; the new sandbox gets its cpu, memory and disk (Daytona takes them from the snapshot) and its image",
			"checkpoint", cp.Name, "snapshot", dto.Name)
	}
	sb, err := b.get(ctx, b.spec.Name)
	switch {
	case errors.Is(err, errGone):
	case err != nil:
		return err
	case sb.Labels[LabelBerth] != "1" || sb.Labels[LabelKey] != b.spec.Key:
		return fmt.Errorf("daytona: a sandbox named %s exists that berth did not create for key %q; remove it or use another key", b.spec.Name, b.spec.Key)
	case going[sb.GetState()]:
		// Deleted already (the environment a restore replaces, closed):
		// its name is free once it is gone.
		if _, err := b.waitState(ctx, sb.Id, apiclient.SANDBOXSTATE_DESTROYED); err != nil && !errors.Is(err, errGone) {
			return fmt.Errorf("daytona: restore checkpoint %q: %w", cp.Name, err)
		}
	default:
		b.log.Info("daytona: replacing the key's sandbox with one made from the checkpoint", "sandbox", b.spec.Name, "checkpoint", cp.Name, "state", sb.GetState())
		if err := b.delete(ctx, sb.Id, true); err != nil {
			return fmt.Errorf("daytona: restore checkpoint %q: %w", cp.Name, err)
		}
	}
	b.fromSnapshot = dto.Id
	b.fromName = dto.Name
	return nil
}

// createRequest is the CreateSandbox call for the environment: from the
// image (spec.createRequest), or, while New makes the sandbox from a
// checkpoint, from its snapshot, without resources (the snapshot's are
// used; Daytona refuses both).
func (b *Backend) createRequest() apiclient.CreateSandbox {
	req := b.spec.createRequest()
	if b.fromSnapshot == "" {
		return req
	}
	req.BuildInfo = nil
	req.SetSnapshot(b.fromSnapshot)
	req.Cpu, req.Memory, req.Disk = nil, nil, nil
	labels := req.GetLabels()
	labels[LabelFrom] = b.fromName
	req.SetLabels(labels)
	return req
}

// capabilityCheckpoint is Capabilities.Checkpoint.
const capabilityCheckpoint = "a Daytona snapshot of the sandbox (taken while it runs); new sandboxes made from it"

// madeFromSnapshot reports whether sb was made from the snapshot New was
// asked to start from.
func (b *Backend) madeFromSnapshot(sb *apiclient.Sandbox) bool {
	return strings.EqualFold(sb.Labels[LabelFrom], b.fromName)
}

// createdFrom names what a new sandbox is made from, for messages: the
// checkpoint's snapshot or the configured image.
func (b *Backend) createdFrom() string {
	if b.fromName != "" {
		return "snapshot " + b.fromName
	}
	return b.spec.Image
}

// discardFailedFrom deletes the sandbox New failed to make from a
// checkpoint (one in state error, say), so that a failed restore leaves
// nothing behind. Only a sandbox labelled as made from that snapshot is
// deleted.
func (b *Backend) discardFailedFrom(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	sb, err := b.get(ctx, b.spec.Name)
	if err != nil || sb.Labels[LabelKey] != b.spec.Key || !b.madeFromSnapshot(sb) {
		return
	}
	if err := b.delete(ctx, sb.Id, false); err != nil {
		b.log.Warn("daytona: deleting the sandbox of a failed restore failed", "sandbox", b.spec.Name, "err", err)
	}
}
