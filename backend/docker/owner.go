package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/a55dbaac/berth/internal/procmark"
)

// LabelOwner names the berth process that created a container:
// "<boot id>/<pid>/<process start time in clock ticks>". With the boot id
// and the start time a later berth on the same machine can tell whether
// that process still runs, even after its pid was reused. On a claim
// volume it names the berth process that holds the claim.
const LabelOwner = "berth.owner"

// LabelClaim is on claim volumes only: the id of the container claimed.
//
// Container labels cannot change, so a persistent container reattached by
// a later berth still names its creator, long dead, as LabelOwner. The
// reattaching berth records that it holds the container in a claim: an
// empty volume labelled with LabelClaim, LabelOwner (its own mark),
// LabelBerth and LabelKey, created before it starts or uses the container
// and removed when it closes. The Docker daemon is then the only state
// berth processes must share to tell a held container from an orphan.
const LabelClaim = "berth.claim.container"

// claimRole is the LabelRole of a claim volume.
const claimRole = "claim"

// currentOwner returns this process's owner label ("" when /proc cannot
// tell). Tests replace it to create containers owned by a dead process.
var currentOwner = procmark.Self

// claimName names the claim of one Backend (nonce) on container id.
func claimName(id, nonce string) string {
	return "berth-claim-" + shortID(id) + "-" + nonce
}

// newNonce returns the random part of a Backend's claim names.
func newNonce() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// hold records that this berth uses container c: when c was created by
// another process, a claim names this process as its holder, so another
// berth's sweep does not take c for an orphan while this one lives. The
// claim is made before c is started or used. A claim this Backend holds on
// another container (one it left in recover) is dropped. Called with b.mu
// held or before b is shared.
func (b *Backend) hold(ctx context.Context, id, creator string) {
	me := currentOwner()
	want := ""
	if me != "" && creator != me {
		want = claimName(id, b.nonce)
	}
	if b.claim != "" && b.claim != want {
		if err := b.dropClaim(ctx, b.claim); err != nil {
			b.log.Warn("docker: dropping the claim on a container left behind failed", "claim", b.claim, "err", err)
		}
		b.claim = ""
	}
	if want == "" {
		return
	}
	_, err := b.cli.VolumeCreate(ctx, client.VolumeCreateOptions{
		Name: want,
		Labels: map[string]string{
			LabelBerth: "1", LabelKey: b.spec.Key, LabelRole: claimRole,
			LabelClaim: id, LabelOwner: me,
		},
	})
	if err != nil {
		// Without the claim the container is used as before claims existed:
		// another berth may stop it, and Start then restarts it.
		b.log.Warn("docker: claiming the reattached container failed; another berth may take it for an orphan",
			"container", shortID(id), "err", wrap(b.host, err, "create claim volume %s", want))
		return
	}
	b.claim = want
}

// dropClaim removes the claim volume name; a claim already gone is no
// error.
func (b *Backend) dropClaim(ctx context.Context, name string) error {
	if _, err := b.cli.VolumeRemove(ctx, name, client.VolumeRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
		return wrap(b.host, err, "remove claim volume %s", name)
	}
	return nil
}

// reapDeadOwners handles running containers whose berth died without
// cleaning up (a crash, a kill -9): a container is orphaned when its
// creator is gone and no claim on it names a live berth. A throwaway
// orphan is removed with its volumes, a persistent one is stopped as a
// clean exit would have done, so it is reattached later instead of running
// forever. Claims of dead berths are removed as it goes.
func reapDeadOwners(ctx context.Context, cli *client.Client, host string) (removed, stopped []string, err error) {
	// Containers first, claims second: a berth claims a stopped container
	// before starting it, so a container seen running here already has
	// the claim that protects it.
	items, err := berthContainers(ctx, cli, host)
	if err != nil {
		return nil, nil, err
	}
	held, claimErr := liveClaims(ctx, cli, host)
	if held == nil {
		return nil, nil, claimErr
	}
	gone := map[string]bool{}
	for _, c := range items {
		if c.State != container.StateRunning || !procmark.Gone(c.Labels[LabelOwner]) || held[c.ID] {
			continue
		}
		key := c.Labels[LabelKey]
		if c.Labels[LabelPersistent] == "1" {
			timeout := 3
			if _, err := cli.ContainerStop(ctx, c.ID, client.ContainerStopOptions{Timeout: &timeout}); err != nil && !cerrdefs.IsNotFound(err) {
				return removed, stopped, wrap(host, err, "stop orphaned container %s", shortID(c.ID))
			}
			stopped = append(stopped, key)
			continue
		}
		if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return removed, stopped, wrap(host, err, "remove orphaned container %s", shortID(c.ID))
		}
		gone[c.ID] = true
		if key != "" { // a pooled container's volumes went with it
			if err := removeVolumes(ctx, cli, host, key); err != nil {
				return removed, stopped, err
			}
		}
		removed = append(removed, key)
	}
	// The bind records of claimed pooled containers that are gone.
	live := map[string]bool{}
	for _, c := range items {
		if !gone[c.ID] {
			live[c.ID] = true
		}
	}
	return removed, stopped, errors.Join(claimErr, sweepBindRecords(ctx, cli, host, live))
}

// liveClaims returns the ids of the containers a live berth claims, and
// removes the claims of dead berths. The map is nil when the claims could
// not be listed; a claim that could not be removed gives an error with the
// map.
func liveClaims(ctx context.Context, cli *client.Client, host string) (map[string]bool, error) {
	vols, err := cli.VolumeList(ctx, client.VolumeListOptions{
		Filters: make(client.Filters).Add("label", LabelBerth+"=1", LabelClaim),
	})
	if err != nil {
		return nil, wrap(host, err, "list claim volumes")
	}
	held := map[string]bool{}
	var errs []error
	for _, v := range vols.Items {
		if !procmark.Gone(v.Labels[LabelOwner]) {
			held[v.Labels[LabelClaim]] = true
			continue
		}
		if _, err := cli.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, wrap(host, err, "remove claim volume %s of a dead berth", v.Name))
		}
	}
	return held, errors.Join(errs...)
}

// reapTimeout bounds the dead-owner sweep at backend construction.
const reapTimeout = 20 * time.Second
