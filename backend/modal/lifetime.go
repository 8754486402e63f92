package modal

import (
	"context"
	"time"

	modal "github.com/modal-labs/libmodal/modal-go"
)

// A Modal sandbox lives modal_sandbox_timeout at most: Modal ends it then,
// however busy, and everything written in it since it was created goes
// with it. berth carries the environment over before that: it snapshots
// the filesystem, terminates the sandbox, and creates the key's next
// sandbox from the snapshot; the session then starts a new shell there
// with its working directory and exported variables restored, and the
// next result says environment_recreated. Processes running in the old
// sandbox (background jobs) end with it.
//
// The carry-over happens between commands once the sandbox is within 3/2
// of the margin of its end (Renew, called by the session), and at the
// margin before its end whatever runs (the lifetime loop), so that an
// idle environment or a long command does not lose its files either. The
// margin is a sixth of the lifetime (at most 10 minutes, at least 2 s),
// but never less than twice the last snapshot's duration plus 2 s (a
// large filesystem takes a while), and never more than half the lifetime.
//
// A persistent environment (container_persistent) is also snapshotted
// every modal_snapshot_interval while it runs, and the snapshot recorded
// as the key's: a crash of berth, or a sandbox terminated from outside,
// loses at most that much.

// lifetime is what the backend knows about its sandbox's lifetime. The
// Backend's mu guards it.
type lifetime struct {
	deadline  time.Time     // when the sandbox's timeout ends
	snapDur   time.Duration // how long the last snapshot took
	notBefore time.Time     // no carry-over before this (after a failed one)
	nextSnap  time.Time     // when the periodic snapshot is due; zero = none
	carry     string        // image of the last carry-over of a non-persistent environment
	carried   int           // carry-overs so far
	seen      int           // carried at the last Renew
}

// reset starts the clock for a new sandbox ending at deadline.
func (l *lifetime) reset(deadline time.Time, snapEvery time.Duration) {
	l.deadline = deadline
	l.notBefore = time.Time{}
	l.nextSnap = time.Time{}
	if snapEvery > 0 {
		l.nextSnap = time.Now().Add(snapEvery)
	}
}

// margin is how long before the end of a lifetime of length life the
// carry-over is done at the latest.
func (l *lifetime) margin(life time.Duration) time.Duration {
	m := max(min(life/6, 10*time.Minute), 2*time.Second, 2*l.snapDur+2*time.Second)
	return min(m, life/2)
}

// late is when the loop carries over whatever runs; early is from when
// Renew carries over between commands.
func (l *lifetime) late(life time.Duration) time.Time {
	return later(l.deadline.Add(-l.margin(life)), l.notBefore)
}

func (l *lifetime) early(life time.Duration) time.Time {
	return later(l.deadline.Add(-l.margin(life)*3/2), l.notBefore)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// deadlineOf is when a reattached sandbox's lifetime ends, from its tags:
// berth.expires, else its creation time plus modal_sandbox_timeout, else
// (tags unreadable) from now.
func (b *Backend) deadlineOf(tags map[string]string) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, tags[TagExpires]); err == nil {
		return t
	}
	if t, err := time.Parse(time.RFC3339, tags[TagCreated]); err == nil {
		return t.Add(b.set.Timeout)
	}
	return time.Now().Add(b.set.Timeout)
}

// Renew implements backend.Renewer: between commands, a sandbox near the
// end of its lifetime is carried over into a new one now. It reports
// whether a carry-over happened since the last call.
func (b *Backend) Renew(ctx context.Context) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	if b.sb != nil && !b.watch.finished() && !time.Now().Before(b.life.early(b.set.Timeout)) {
		b.carryOver(ctx)
	}
	renewed := b.life.carried != b.life.seen
	b.life.seen = b.life.carried
	return renewed
}

// carryOver replaces the sandbox by one started from a snapshot of it. It
// reports whether the old sandbox was ended; when it could not be
// snapshotted or terminated it is left running and the carry-over is tried
// again a little later. b.mu is held.
func (b *Backend) carryOver(ctx context.Context) bool {
	old := b.sb
	left := time.Until(b.life.deadline).Round(time.Second)
	start := time.Now()
	img, err := old.SnapshotFilesystem(ctx, snapshotTimeout)
	b.life.snapDur = time.Since(start)
	if err != nil {
		b.life.notBefore = time.Now().Add(max(b.life.margin(b.set.Timeout)/8, time.Second))
		b.log.Warn("modal: the sandbox nears the end of its lifetime but could not be snapshotted; trying again shortly", "sandbox", old.SandboxID, "left", left, "err", err)
		return false
	}
	if b.set.Persistent {
		if err := b.record(ctx, img.ImageID); err != nil {
			b.log.Warn("modal: record the carried-over snapshot", "err", err)
		}
	} else {
		if prev := b.life.carry; prev != "" && prev != img.ImageID {
			b.dropCarry(ctx, prev)
		}
		b.life.carry = img.ImageID
	}
	// The old sandbox must be gone before its name is free for the next.
	if _, err := old.Terminate(ctx, &modal.SandboxTerminateParams{Wait: true}); err != nil && !isNotFound(err) {
		b.life.notBefore = time.Now().Add(max(b.life.margin(b.set.Timeout)/8, time.Second))
		b.log.Warn("modal: the sandbox nears the end of its lifetime but could not be terminated to carry it over; trying again shortly", "sandbox", old.SandboxID, "left", left, "err", err)
		return false
	}
	b.sb = nil
	b.life.carried++
	b.recreated.Set()
	if err := b.attachOrCreate(ctx); err != nil {
		b.log.Warn("modal: the sandbox was snapshotted and ended before its lifetime ran out, but its successor could not be created; the next command tries again", "snapshot", img.ImageID, "err", err)
		return true
	}
	b.log.Info("modal: carried the environment over into a new sandbox before the end of its lifetime",
		"old", old.SandboxID, "new", b.sb.SandboxID, "snapshot", img.ImageID, "left", left, "snapshot_took", b.life.snapDur.Round(time.Millisecond))
	return true
}

// startLifetime starts the loop that carries the sandbox over at the late
// point and takes the periodic snapshots.
func (b *Backend) startLifetime() {
	ctx, cancel := context.WithCancel(context.Background())
	b.loopCancel = cancel
	b.loopDone = make(chan struct{})
	go b.loop(ctx)
}

// stopLifetime stops the loop and waits for it (an in-flight snapshot is
// cancelled).
func (b *Backend) stopLifetime() {
	if b.loopCancel == nil {
		return
	}
	b.loopCancel()
	<-b.loopDone
}

func (b *Backend) loop(ctx context.Context) {
	defer close(b.loopDone)
	for {
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return
		}
		var wake time.Time
		if b.sb != nil && !b.watch.finished() {
			wake = b.life.late(b.set.Timeout)
			if n := b.life.nextSnap; b.set.Persistent && !n.IsZero() && n.Before(wake) {
				wake = n
			}
		}
		b.mu.Unlock()
		var timer *time.Timer
		var fire <-chan time.Time
		if !wake.IsZero() {
			timer = time.NewTimer(time.Until(wake))
			fire = timer.C
		}
		select {
		case <-ctx.Done():
		case <-b.kick:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
		b.due(ctx)
	}
}

// due does what is due now: the late carry-over, or a periodic snapshot.
func (b *Backend) due(ctx context.Context) {
	b.mu.Lock()
	if b.closed || b.sb == nil || b.watch.finished() {
		b.mu.Unlock()
		return
	}
	now := time.Now()
	if !now.Before(b.life.late(b.set.Timeout)) {
		b.carryOver(ctx)
		b.mu.Unlock()
		return
	}
	if n := b.life.nextSnap; !b.set.Persistent || n.IsZero() || now.Before(n) {
		b.mu.Unlock()
		return
	}
	sb := b.sb
	b.life.nextSnap = now.Add(b.set.SnapshotEvery)
	b.mu.Unlock()
	b.periodicSnapshot(ctx, sb)
}

// periodicSnapshot snapshots sb and records the snapshot as the key's,
// unless the sandbox was carried over or closed meanwhile (a later
// snapshot is then the key's). It does not hold b.mu while the snapshot
// is taken: commands and their kills go on meanwhile.
func (b *Backend) periodicSnapshot(ctx context.Context, sb *modal.Sandbox) {
	start := time.Now()
	img, err := sb.SnapshotFilesystem(ctx, snapshotTimeout)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			b.log.Warn("modal: periodic snapshot failed; the last one stays the key's", "sandbox", sb.SandboxID, "err", err)
		}
		return
	}
	b.life.snapDur = time.Since(start)
	if b.closed || b.sb != sb {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := b.client.Images.Delete(dctx, img.ImageID, nil); err != nil && !isNotFound(err) {
			b.log.Warn("modal: delete a snapshot overtaken by a later one", "image", img.ImageID, "err", err)
		}
		return
	}
	if err := b.record(ctx, img.ImageID); err != nil {
		b.log.Warn("modal: record a periodic snapshot", "err", err)
		return
	}
	b.life.nextSnap = time.Now().Add(b.set.SnapshotEvery)
}
