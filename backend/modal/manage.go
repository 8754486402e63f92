package modal

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	modal "github.com/modal-labs/libmodal/modal-go"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/procmark"
)

// envAdmin implements backend.EnvAdmin for berth env ls/rm/prune: the
// running sandboxes tagged with this installation's owner, and the snapshot
// records of persistent environments.
type envAdmin struct{}

// connect resolves the credentials and builds a client for the admin
// commands.
func connect(ctx context.Context, opts backend.Options) (*modal.Client, credentials, error) {
	cred, err := resolveCredentials(getenv(opts))
	if err != nil {
		return nil, cred, err
	}
	c, err := newClient(ctx, cred, opts.Log().With("backend", Name), retryPolicyOf(opts.Config.Int(keyRetryTimeout)))
	return c, cred, err
}

// ownedSandbox is a running sandbox of this owner with its tags.
type ownedSandbox struct {
	sb   *modal.Sandbox
	tags map[string]string
}

// owned lists the running sandboxes tagged with owner (and key, if not "").
func owned(ctx context.Context, c *modal.Client, owner, key string) ([]ownedSandbox, error) {
	filter := map[string]string{TagOwner: owner}
	if key != "" {
		filter[TagKey] = key
	}
	it, err := c.Sandboxes.List(ctx, &modal.SandboxListParams{Tags: filter})
	if err != nil {
		return nil, fmt.Errorf("modal: list sandboxes: %w", err)
	}
	var out []ownedSandbox
	for sb, err := range it {
		if err != nil {
			return out, fmt.Errorf("modal: list sandboxes: %w", err)
		}
		tags, err := sb.GetTags(ctx)
		if err != nil {
			if isNotFound(err) {
				continue
			}
			return out, fmt.Errorf("modal: tags of sandbox %s: %w", sb.SandboxID, err)
		}
		out = append(out, ownedSandbox{sb, tags})
	}
	return out, nil
}

// notConfigured reports an error that only says Modal is not set up here:
// then no sandbox of berth's can be running, and env ls and prune have
// nothing to do on Modal rather than an error to print.
func notConfigured(err error) bool {
	var ce *CredentialsError
	return errors.As(err, &ce) && ce.Missing
}

// List returns the running sandboxes of this berth installation and the
// snapshots kept for keys that have none running, sorted by key. Without
// any Modal credentials it lists the snapshot records only.
func (envAdmin) List(ctx context.Context, opts backend.Options) ([]backend.EnvInfo, error) {
	var sbs []ownedSandbox
	c, _, err := connect(ctx, opts)
	switch {
	case notConfigured(err):
	case err != nil:
		return nil, err
	default:
		defer c.Close()
		if sbs, err = owned(ctx, c, ownerOf(opts.Home), ""); err != nil {
			return nil, err
		}
	}
	snaps := snapshots{dir: opts.Home}
	ids, times, err := snaps.all()
	if err != nil {
		return nil, err
	}
	running := map[string]bool{}
	var out []backend.EnvInfo
	for _, o := range sbs {
		key := o.tags[TagKey]
		running[key] = true
		created, _ := time.Parse(time.RFC3339, o.tags[TagCreated])
		out = append(out, backend.EnvInfo{
			Backend:    Name,
			Key:        key,
			State:      "running",
			ID:         o.sb.SandboxID,
			Image:      ids[recordKey(key)],
			Created:    created,
			Persistent: o.tags[TagPersistent] == "1",
		})
	}
	for rk, id := range ids {
		key := strings.TrimPrefix(rk, "direct:")
		if running[key] {
			continue
		}
		out = append(out, backend.EnvInfo{
			Backend: Name, Key: key, State: "snapshot", ID: id, Image: id, Created: times[rk], Persistent: true,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Remove terminates key's sandbox and deletes its snapshot (image and
// record). A key with nothing is not an error.
func (envAdmin) Remove(ctx context.Context, opts backend.Options, key string) error {
	c, _, err := connect(ctx, opts)
	if err != nil {
		return err
	}
	defer c.Close()
	sbs, err := owned(ctx, c, ownerOf(opts.Home), key)
	if err != nil {
		return err
	}
	for _, o := range sbs {
		if _, err := o.sb.Terminate(ctx, nil); err != nil && !isNotFound(err) {
			return fmt.Errorf("modal: terminate sandbox %s of %s: %w", o.sb.SandboxID, key, err)
		}
	}
	return dropSnapshot(ctx, c, snapshots{dir: opts.Home}, key)
}

// dropSnapshot deletes key's snapshot image and record.
func dropSnapshot(ctx context.Context, c *modal.Client, snaps snapshots, key string) error {
	id, err := snaps.get(key)
	if err != nil || id == "" {
		return err
	}
	if err := c.Images.Delete(ctx, id, nil); err != nil && !isNotFound(err) {
		return fmt.Errorf("modal: delete snapshot %s of %s: %w", id, key, err)
	}
	return snaps.drop(key, id)
}

// Prune removes what has not been in use for longer than maxAge: snapshots
// of keys with no running sandbox taken before that (a snapshot of unknown
// age is kept), and running sandboxes older than that whose berth process
// is gone from this machine (left by a crash). It returns their keys.
func (envAdmin) Prune(ctx context.Context, opts backend.Options, maxAge time.Duration) ([]string, error) {
	c, _, err := connect(ctx, opts)
	if notConfigured(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer c.Close()
	sbs, err := owned(ctx, c, ownerOf(opts.Home), "")
	if err != nil {
		return nil, err
	}
	now := time.Now()
	removed, err := sweepPending(ctx, c, opts.Home)
	if err != nil {
		return removed, err
	}
	running := map[string]bool{}
	for _, o := range sbs {
		key := o.tags[TagKey]
		created, terr := time.Parse(time.RFC3339, o.tags[TagCreated])
		if !procmark.Gone(o.tags[TagProcess]) || terr != nil || now.Sub(created) < maxAge {
			running[key] = true
			continue
		}
		if _, err := o.sb.Terminate(ctx, nil); err != nil && !isNotFound(err) {
			return removed, fmt.Errorf("modal: terminate orphaned sandbox %s of %s: %w", o.sb.SandboxID, key, err)
		}
		removed = append(removed, key)
	}
	snaps := snapshots{dir: opts.Home}
	ids, times, err := snaps.all()
	if err != nil {
		return removed, err
	}
	for rk := range ids {
		key := strings.TrimPrefix(rk, "direct:")
		t, ok := times[rk]
		if running[key] || !ok || now.Sub(t) < maxAge {
			continue
		}
		if err := dropSnapshot(ctx, c, snaps, key); err != nil {
			return removed, err
		}
		removed = append(removed, key)
	}
	return removed, nil
}

// cleaned records the (server, owner) pairs whose crash leftovers this
// process already handled: once per process, like the docker backend.
var (
	cleanedMu sync.Mutex
	cleaned   = map[string]bool{}
)

// cleanUpOnce handles, the first time this process talks to a Modal
// server, the sandboxes of this owner whose berth process died without
// closing them (a crash, kill -9): a persistent one is snapshotted as a
// clean Close would have done, then each is terminated.
func (b *Backend) cleanUpOnce(ctx context.Context) {
	cleanedMu.Lock()
	defer cleanedMu.Unlock()
	id := b.cred.ServerURL + "\x00" + b.cred.Environment + "\x00" + b.owner
	if cleaned[id] {
		return
	}
	cleaned[id] = true
	if keys, err := sweepPending(ctx, b.client, b.snaps.dir); err != nil {
		b.log.Warn("modal: cleaning up after checkpoints a crashed berth was taking failed", "err", err)
	} else if len(keys) > 0 {
		b.log.Info("modal: cleaned up after checkpoints a crashed berth was taking", "keys", keys)
	}
	sbs, err := owned(ctx, b.client, b.owner, "")
	if err != nil {
		b.log.Warn("modal: looking for sandboxes left by a crashed berth failed", "err", err)
		return
	}
	for _, o := range sbs {
		if !procmark.Gone(o.tags[TagProcess]) {
			continue
		}
		key := o.tags[TagKey]
		if o.tags[TagPersistent] == "1" {
			img, err := o.sb.SnapshotFilesystem(ctx, snapshotTimeout)
			if err != nil {
				b.log.Warn("modal: snapshot of a crashed berth's sandbox failed; leaving it running", "sandbox", o.sb.SandboxID, "key", key, "err", err)
				continue
			}
			if _, err := b.snaps.set(key, img.ImageID); err != nil {
				b.log.Warn("modal: record the snapshot of a crashed berth's sandbox", "key", key, "err", err)
				continue
			}
		}
		if _, err := o.sb.Terminate(ctx, nil); err != nil && !isNotFound(err) {
			b.log.Warn("modal: terminate a crashed berth's sandbox", "sandbox", o.sb.SandboxID, "err", err)
			continue
		}
		b.log.Info("modal: cleaned up after a crashed berth", "sandbox", o.sb.SandboxID, "key", key)
	}
}

// Doctor checks the credentials with one cheap authenticated call (the
// auth token exchange every client starts with) and says where they came
// from.
func Doctor(ctx context.Context, opts backend.Options) backend.Fingerprint {
	set, err := readSettings(opts)
	if err != nil {
		return backend.Fingerprint{Summary: err.Error(), Fix: "fix the modal settings named above"}
	}
	cred, err := resolveCredentials(getenv(opts))
	if err != nil {
		return backend.Fingerprint{Summary: err.Error(), Fix: fixHint}
	}
	c, err := newClient(ctx, cred, opts.Log().With("backend", Name), set.Retry)
	if err != nil {
		fix := fixHint
		if _, ok := err.(*backend.UnreachableError); ok {
			fix = "check the network and MODAL_SERVER_URL (" + cred.ServerURL + ")"
		}
		return backend.Fingerprint{Summary: err.Error(), Fix: fix}
	}
	defer c.Close()
	env := cred.Environment
	if env == "" {
		env = "the workspace default"
	}
	persist := "nothing persists: each sandbox starts from modal_image"
	if set.Persistent {
		every := "only on close"
		if set.SnapshotEvery > 0 {
			every = "every " + set.SnapshotEvery.String() + " while it runs (" + keySnapshotInterval + ") and on close"
		}
		persist = "container_persistent: the filesystem is snapshotted " + every + " (" + filepath.Join(opts.Home, SnapshotsFile) + ") and restored next time"
	}
	var life lifetime
	details := []string{
		"credentials: " + cred.Source,
		"environment: " + env + "; app: " + set.App,
		"image: " + set.Image,
		fmt.Sprintf("sandbox timeout %v, idle timeout %v; cpu %v cores, memory %d MiB requested; network %v", set.Timeout, durationOrNone(set.IdleTimeout), set.CPU, set.MemoryMiB, set.Network),
		fmt.Sprintf("lifetime: Modal ends a sandbox after %v (%s); berth carries the environment over into a new sandbox (snapshot, restore, shell state kept) about %v before that", set.Timeout, keySandboxTimeout, life.margin(set.Timeout)),
		persist,
		fmt.Sprintf("rate limits and transient failures: calls are retried with backoff for up to %v (%s)", set.Retry.Budget, keyRetryTimeout),
	}
	if set.DiskMB > 0 {
		details = append(details, fmt.Sprintf("container_disk (%d MB) is not applied: Modal's SDK takes no disk size", set.DiskMB))
	}
	return backend.Fingerprint{
		Usable:  true,
		Summary: fmt.Sprintf("Modal at %s accepts token %s", cred.ServerURL, cred.TokenID),
		Details: details,
	}
}

func durationOrNone(d time.Duration) string {
	if d == 0 {
		return "none"
	}
	return d.String()
}
