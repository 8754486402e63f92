package daytona

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	apiclient "github.com/daytona/clients/api-client-go"
)

// errGone is returned by waitState when the sandbox disappeared.
var errGone = errors.New("daytona: the sandbox no longer exists")

// errFailed is wrapped by waitState's error when the sandbox went to a
// failed state (error, build_failed).
var errFailed = errors.New("daytona: the sandbox failed")

// States grouped by what berth does about them.
var (
	// settling states end in started on their own.
	settling = map[apiclient.SandboxState]bool{
		apiclient.SANDBOXSTATE_CREATING: true, apiclient.SANDBOXSTATE_STARTING: true,
		apiclient.SANDBOXSTATE_RESTORING: true, apiclient.SANDBOXSTATE_PENDING_BUILD: true,
		apiclient.SANDBOXSTATE_BUILDING_SNAPSHOT: true, apiclient.SANDBOXSTATE_PULLING_SNAPSHOT: true,
		apiclient.SANDBOXSTATE_RESIZING: true, apiclient.SANDBOXSTATE_SNAPSHOTTING: true,
		apiclient.SANDBOXSTATE_FORKING: true, apiclient.SANDBOXSTATE_RESUMING: true,
		apiclient.SANDBOXSTATE_UNKNOWN: true,
	}
	// asleep states are woken with start.
	asleep = map[apiclient.SandboxState]bool{
		apiclient.SANDBOXSTATE_STOPPED: true, apiclient.SANDBOXSTATE_ARCHIVED: true,
		apiclient.SANDBOXSTATE_PAUSED: true,
	}
	// fallingAsleep states end in an asleep one.
	fallingAsleep = map[apiclient.SandboxState]bool{
		apiclient.SANDBOXSTATE_STOPPING: true, apiclient.SANDBOXSTATE_ARCHIVING: true,
		apiclient.SANDBOXSTATE_PAUSING: true,
	}
	// failed states need a new sandbox.
	failed = map[apiclient.SandboxState]bool{
		apiclient.SANDBOXSTATE_ERROR: true, apiclient.SANDBOXSTATE_BUILD_FAILED: true,
	}
	// going states end with the sandbox gone.
	going = map[apiclient.SandboxState]bool{
		apiclient.SANDBOXSTATE_DESTROYING: true, apiclient.SANDBOXSTATE_DESTROYED: true,
	}
)

// get fetches a sandbox by id or name; a missing one is errGone.
func (b *Backend) get(ctx context.Context, idOrName string) (*apiclient.Sandbox, error) {
	sb, resp, err := b.api.SandboxAPI.GetSandbox(ctx, idOrName).Execute()
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusNotFound {
			return nil, errGone
		}
		return nil, b.creds.apiErr(err, resp, "get sandbox %s", idOrName)
	}
	return sb, nil
}

// waitState polls the sandbox until its state is one of want (or, with
// want empty, until it is no longer in a transition), backing off from 50
// to 250 ms: a sandbox of a warm pool starts in well under a second. Failed states and a vanished sandbox end
// the wait with an error.
func (b *Backend) waitState(ctx context.Context, id string, want ...apiclient.SandboxState) (*apiclient.Sandbox, error) {
	delay := 50 * time.Millisecond
	for {
		sb, err := b.get(ctx, id)
		if err != nil {
			return nil, err
		}
		st := sb.GetState()
		for _, w := range want {
			if st == w {
				return sb, nil
			}
		}
		if failed[st] {
			return sb, fmt.Errorf("%w: %s is %s: %s", errFailed, sb.Name, st, sb.GetErrorReason())
		}
		if len(want) == 0 && !settling[st] && !fallingAsleep[st] && st != apiclient.SANDBOXSTATE_DESTROYING {
			return sb, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("daytona: sandbox %s still %s: %w", sb.Name, st, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(delay*3/2, 250*time.Millisecond)
	}
}

// ensure finds the environment's sandbox by name and brings it to started:
// a stopped or archived one is started (its filesystem kept), one still
// settling is waited for, one in state error that Daytona marks
// recoverable is recovered (its filesystem kept), any other failed or
// vanished one is replaced by a new sandbox. An existing sandbox is
// claimed (see claim) before it is started or used. created reports that
// the sandbox is new, i.e. any earlier filesystem is lost.
func (b *Backend) ensure(ctx context.Context) (sb *apiclient.Sandbox, created bool, err error) {
	sp := b.spec
	step := b.begin("starting Daytona sandbox "+sp.Name, "")
	defer func() { step.End(err) }()
	replaced, claimed, recovered := false, false, false
	for attempt := 0; attempt < 6; attempt++ {
		sb, err = b.get(ctx, sp.Name)
		switch {
		case errors.Is(err, errGone):
			sb, err = b.create(ctx)
			if statusOf(err) == http.StatusConflict {
				continue // another berth created it meanwhile
			}
			if err != nil {
				return nil, false, err
			}
			created = true
			sb, err = b.waitState(ctx, sb.Id, apiclient.SANDBOXSTATE_STARTED)
			if errors.Is(err, errFailed) && !replaced {
				continue // it failed to start (its image not pulled...): replaced once below
			}
			if err != nil {
				return nil, true, fmt.Errorf("daytona: create sandbox %s from %s: %w", sp.Name, b.createdFrom(), err)
			}
			return sb, true, nil
		case err != nil:
			return nil, false, err
		}
		if sb.Labels[LabelBerth] != "1" || sb.Labels[LabelKey] != sp.Key {
			return nil, false, fmt.Errorf("daytona: a sandbox named %s exists that berth did not create for key %q; remove it or use another key", sp.Name, sp.Key)
		}
		st := sb.GetState()
		if !claimed && !failed[st] && !going[st] {
			b.claim(ctx, sb)
			claimed = true
		}
		switch {
		case st == apiclient.SANDBOXSTATE_STARTED:
			if sb.Labels[LabelConfig] != sp.hash {
				b.log.Warn("daytona: the sandbox was created with other settings (image, cpu, memory, disk, network or docker_env); it keeps them until `berth env rm` removes it",
					"sandbox", sp.Name)
			}
			return sb, created || replaced, nil
		case asleep[st]:
			b.log.Info("daytona: starting the sandbox", "sandbox", sp.Name, "state", st)
			if _, resp, err := b.api.SandboxAPI.StartSandbox(ctx, sb.Id).Execute(); err != nil {
				return nil, false, b.creds.apiErr(err, resp, "start sandbox %s", sp.Name)
			}
			if _, err := b.waitState(ctx, sb.Id, apiclient.SANDBOXSTATE_STARTED); err != nil && !errors.Is(err, errGone) && !errors.Is(err, errFailed) {
				return nil, false, fmt.Errorf("daytona: start sandbox %s: %w", sp.Name, err)
			}
		case settling[st] || fallingAsleep[st]:
			if _, err := b.waitState(ctx, sb.Id); err != nil && !errors.Is(err, errGone) && !errors.Is(err, errFailed) {
				return nil, false, err
			}
		case st == apiclient.SANDBOXSTATE_ERROR && sb.GetRecoverable() && !recovered:
			// A runner fault Daytona can undo: recover keeps the files
			// that deleting would throw away.
			recovered = true
			b.log.Warn("daytona: the sandbox is in state error but recoverable; recovering it (its files are kept)", "sandbox", sp.Name, "reason", sb.GetErrorReason())
			if _, resp, err := b.api.SandboxAPI.RecoverSandbox(ctx, sb.Id).Execute(); err != nil {
				if resp == nil || resp.StatusCode != http.StatusBadRequest {
					return nil, false, b.creds.apiErr(err, resp, "recover sandbox %s", sp.Name)
				}
				b.log.Warn("daytona: Daytona refused to recover the sandbox", "sandbox", sp.Name, "err", b.creds.apiErr(err, resp, "recover"))
				continue
			}
			if _, err := b.waitState(ctx, sb.Id, apiclient.SANDBOXSTATE_STARTED); err != nil && !errors.Is(err, errGone) && !errors.Is(err, errFailed) {
				return nil, false, fmt.Errorf("daytona: recover sandbox %s: %w", sp.Name, err)
			}
		case failed[st] && !replaced:
			b.log.Warn("daytona: replacing a failed sandbox (its files are lost)", "sandbox", sp.Name, "state", st, "reason", sb.GetErrorReason(), "made_from", b.createdFrom())
			if err := b.delete(ctx, sb.Id, true); err != nil {
				return nil, false, err
			}
			replaced = true
		case failed[st]:
			return nil, false, fmt.Errorf("daytona: sandbox %s is %s: %s", sp.Name, st, sb.GetErrorReason())
		case going[st]:
			if _, err := b.waitState(ctx, sb.Id, apiclient.SANDBOXSTATE_DESTROYED); err != nil && !errors.Is(err, errGone) {
				return nil, false, err
			}
		default:
			return nil, false, fmt.Errorf("daytona: sandbox %s is in state %q, which berth does not know how to use", sp.Name, st)
		}
	}
	return nil, false, fmt.Errorf("daytona: sandbox %s did not reach a usable state", sp.Name)
}

// claim marks an existing sandbox as held by this berth process: when its
// LabelOwner names another process (the berth that created it, or the last
// one that reattached it, most likely gone), its labels are replaced by the
// same labels with LabelOwner set to this process's mark. Another berth's
// sweep of dead owners (reapOnce) then judges this process, which uses the
// sandbox, and not one long gone that left it stopped. A failure is logged
// and berth carries on with the sandbox, as it did before sandboxes were
// claimed.
func (b *Backend) claim(ctx context.Context, sb *apiclient.Sandbox) {
	me := currentOwner()
	if sb.Labels[LabelOwner] == me {
		return
	}
	labels := make(map[string]string, len(sb.Labels)+1)
	for k, v := range sb.Labels {
		labels[k] = v
	}
	labels[LabelOwner] = me
	res, resp, err := b.api.SandboxAPI.ReplaceLabels(ctx, sb.Id).SandboxLabels(*apiclient.NewSandboxLabels(labels)).Execute()
	if err != nil {
		b.log.Warn("daytona: marking the reattached sandbox as this berth's failed; another berth starting now may take it for a crashed berth's and stop it",
			"sandbox", sb.Name, "previous_owner", sb.Labels[LabelOwner], "err", b.creds.apiErr(err, resp, "replace the labels of sandbox %s", sb.Name))
		return
	}
	b.log.Debug("daytona: reattached sandbox marked as this berth's", "sandbox", sb.Name, "previous_owner", sb.Labels[LabelOwner])
	sb.Labels = res.Labels
}

// create asks for the environment's sandbox.
func (b *Backend) create(ctx context.Context) (*apiclient.Sandbox, error) {
	sp := b.spec
	b.log.Info("daytona: creating sandbox", "sandbox", sp.Name, "image", sp.Image, "cpu", sp.CPU, "memory_gib", sp.MemoryGiB, "disk_gib", sp.DiskGiB, "network", !sp.NoNetwork, "from_snapshot", b.fromName)
	sb, resp, err := b.api.SandboxAPI.CreateSandbox(ctx).CreateSandbox(b.createRequest()).Execute()
	if err != nil {
		return nil, b.creds.apiErr(err, resp, "create sandbox %s", sp.Name)
	}
	return sb, nil
}

// stop stops a started sandbox and waits until it is stopped.
func (b *Backend) stop(ctx context.Context, id string) error {
	sb, err := b.get(ctx, id)
	if errors.Is(err, errGone) {
		return nil
	}
	if err != nil {
		return err
	}
	if settling[sb.GetState()] {
		if sb, err = b.waitState(ctx, id); err != nil {
			return err
		}
	}
	if sb.GetState() != apiclient.SANDBOXSTATE_STARTED {
		return nil // already asleep, or failed: nothing runs
	}
	if _, resp, err := b.api.SandboxAPI.StopSandbox(ctx, id).Execute(); err != nil {
		if resp != nil && resp.StatusCode == http.StatusNotFound {
			return nil
		}
		return b.creds.apiErr(err, resp, "stop sandbox %s", sb.Name)
	}
	_, err = b.waitState(ctx, id, apiclient.SANDBOXSTATE_STOPPED, apiclient.SANDBOXSTATE_ARCHIVED)
	if errors.Is(err, errGone) {
		return nil
	}
	return err
}

// delete deletes a sandbox; wait waits until it is gone.
func (b *Backend) delete(ctx context.Context, id string, wait bool) error {
	_, resp, err := b.api.SandboxAPI.DeleteSandbox(ctx, id).Execute()
	if err != nil && resp != nil && resp.StatusCode == http.StatusConflict {
		// A state change in progress (a snapshot being taken): once more
		// when it is over.
		if _, werr := b.waitState(ctx, id); werr == nil {
			_, resp, err = b.api.SandboxAPI.DeleteSandbox(ctx, id).Execute()
		}
	}
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusNotFound {
			return nil
		}
		return b.creds.apiErr(err, resp, "delete sandbox %s", id)
	}
	if !wait {
		return nil
	}
	_, err = b.waitState(ctx, id, apiclient.SANDBOXSTATE_DESTROYED)
	if errors.Is(err, errGone) {
		return nil
	}
	return err
}
