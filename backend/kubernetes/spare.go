package kubernetes

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/a55dbaac/berth/backend"
)

// A pods/exec costs a round trip through the API server, the kubelet and
// the runtime before the process runs: tens of milliseconds on an idle
// cluster, most of a second on a loaded one. The session starts a process
// for its shell, and one for each kill on a timeout or an interrupt, where
// that delay is felt. So the backend keeps one exec started ahead of need:
// a spare, the wrapper alone, running and waiting on stdin for the
// description of its process (see wrapper). Start hands the next
// non-terminal process to the spare when there is one, and starts the next
// spare in the background.

// spareTimeout bounds the start of a spare.
const spareTimeout = 2 * time.Minute

// takeSpare returns the spare for the pod uid, waiting for one being
// started, or nil when there is none (or it died).
func (b *Backend) takeSpare(ctx context.Context, uid types.UID) *process {
	for range 2 {
		b.mu.Lock()
		sp, pending, spUID, proto := b.spare, b.sparePending, b.spareUID, b.protocol
		if sp != nil {
			b.spare = nil
		}
		b.mu.Unlock()
		switch {
		case sp != nil:
			if sp.alive() && spUID == uid && sp.want == proto {
				return sp
			}
			sp.Close()
			return nil
		case pending != nil:
			select {
			case <-pending:
			case <-ctx.Done():
				return nil
			}
		default:
			return nil
		}
	}
	return nil
}

// refill starts a spare in the background unless one exists, is being
// started, or the backend is closed.
func (b *Backend) refill() {
	b.mu.Lock()
	if b.closed || b.spare != nil || b.sparePending != nil {
		b.mu.Unlock()
		return
	}
	done := make(chan struct{})
	b.sparePending = done
	uid := b.uid
	b.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), spareTimeout)
		defer cancel()
		sp, err := b.exec(ctx, b.PodName(), nil)
		b.mu.Lock()
		b.sparePending = nil
		switch {
		case err != nil:
			b.log.Debug("kubernetes: starting a spare exec failed", "err", err)
		case b.closed || b.uid != uid || sp.want != b.protocol:
			// sp is closed below.
		default:
			b.spare, b.spareUID = sp, uid
			sp = nil
		}
		b.mu.Unlock()
		if sp != nil {
			sp.Close()
		}
		close(done)
	}()
}

// awaitSpare waits until the spare being started is ready (or failed:
// Start then execs on its own), or ctx ends.
func (b *Backend) awaitSpare(ctx context.Context) {
	b.mu.Lock()
	pending := b.sparePending
	b.mu.Unlock()
	if pending == nil {
		return
	}
	select {
	case <-pending:
	case <-ctx.Done():
	}
}

// dropSpare closes the spare (the pod is being replaced, or closed).
// Called with b.mu held.
func (b *Backend) dropSpare() {
	if b.spare != nil {
		b.spare.Close()
		b.spare = nil
	}
}

// setProtocol forces one exec transport (protoWebSocket, protoSPDY, or ""
// for the default) and returns once a spare on it is ready, as New does;
// the spare started on another is dropped. For tests.
func (b *Backend) setProtocol(p string) {
	b.mu.Lock()
	b.protocol = p
	b.dropSpare()
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), spareTimeout)
	defer cancel()
	b.awaitSpare(ctx) // one being started on the old transport is dropped
	b.refill()
	b.awaitSpare(ctx)
}

// alive reports whether a spare's stream still runs.
func (p *process) alive() bool {
	select {
	case <-p.streamDone:
		return false
	default:
		return true
	}
}

// startProcess runs spec in the pod: through the spare when it can, else
// with an exec of its own; either way a new spare is on its way after.
func (b *Backend) startProcess(ctx context.Context, name string, uid types.UID, spec backend.ProcSpec) (*process, error) {
	defer b.refill()
	if !spec.TTY {
		if sp := b.takeSpare(ctx, uid); sp != nil {
			if err := sp.use(ctx, spec); err == nil {
				return sp, nil
			} else if ctx.Err() != nil {
				return nil, err
			}
		}
	}
	return b.exec(ctx, name, &spec)
}
