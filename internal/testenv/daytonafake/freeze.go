package daytonafake

import (
	"context"
	"sync"
	"time"

	"github.com/moby/moby/client"
)

// execGate keeps process starts out of a container frozen for a
// snapshot's commit (Unkind.SnapshotFreeze). A process started in a
// paused container (runc init in the frozen cgroup) hangs Docker's shim,
// and the daemon inside a frozen Daytona sandbox answers nothing anyway:
// toolbox calls wait (await) and process starts wait (begin) until the
// container thaws, and a freeze waits for the starts already under way to
// have their process running.
type execGate struct {
	mu       sync.Mutex
	frozen   map[string]chan struct{} // closed when the container thaws
	starting map[string]int           // process starts under way
}

// wait returns the channel that closes when container id thaws, or nil
// when it is not frozen. Called with g.mu held.
func (g *execGate) waitLocked(id string) chan struct{} {
	if g.frozen == nil {
		return nil
	}
	return g.frozen[id]
}

// await waits until container id is not frozen, or ctx ends.
func (g *execGate) await(ctx context.Context, id string) error {
	for {
		g.mu.Lock()
		ch := g.waitLocked(id)
		g.mu.Unlock()
		if ch == nil {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// begin waits until container id is not frozen and counts a process start
// in it; end, called once the process runs (or failed to start), uncounts
// it.
func (g *execGate) begin(ctx context.Context, id string) (end func(), err error) {
	for {
		g.mu.Lock()
		ch := g.waitLocked(id)
		if ch == nil {
			if g.starting == nil {
				g.starting = map[string]int{}
			}
			g.starting[id]++
			g.mu.Unlock()
			var once sync.Once
			return func() {
				once.Do(func() {
					g.mu.Lock()
					if g.starting[id]--; g.starting[id] <= 0 {
						delete(g.starting, id)
					}
					g.mu.Unlock()
				})
			}, nil
		}
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// freeze marks container id frozen and waits until no process start is
// under way in it. One freeze at a time per container (the sandbox's ops
// lock serialises them).
func (g *execGate) freeze(ctx context.Context, id string) error {
	g.mu.Lock()
	if g.frozen == nil {
		g.frozen = map[string]chan struct{}{}
	}
	g.frozen[id] = make(chan struct{})
	g.mu.Unlock()
	for {
		g.mu.Lock()
		n := g.starting[id]
		g.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			g.thaw(id)
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// thaw ends the freeze of container id.
func (g *execGate) thaw(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ch := g.frozen[id]; ch != nil {
		close(ch)
		delete(g.frozen, id)
	}
}

// awaitExecRunning waits until Docker reports exec execID's process
// running (it has a pid) or ended: until then its start is under way, and
// a freeze must not fall into it.
func (s *Server) awaitExecRunning(ctx context.Context, execID string) {
	for delay := time.Millisecond; ; delay = min(2*delay, 20*time.Millisecond) {
		r, err := s.docker.ExecInspect(ctx, execID, client.ExecInspectOptions{})
		if err != nil || r.PID != 0 || !r.Running {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}
