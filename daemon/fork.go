package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/daemon/wire"
	"github.com/a55dbaac/berth/manager"
)

// Fork, checkpoint and restore of the environments the daemon holds
// (docs/fork.md). Each key has a manager of its own (slots.go), so a fork
// takes both keys' locks (in order: no two forks wait on each other) and
// makes the target's slot with the source's configuration. While a
// request runs, the progress the backends report (a copy of the files)
// goes to its caller as progress frames.

// progressRelay passes a slot's backend progress to the caller of the
// request running in it, if any: the backends hold the relay (given at
// their creation), the requests come and go.
type progressRelay struct {
	to atomic.Pointer[func(backend.Event)]
}

// send passes ev on to the current caller.
func (r *progressRelay) send(ev backend.Event) {
	if f := r.to.Load(); f != nil {
		(*f)(ev)
	}
}

// attach sends the relay's events to cl until the returned func is
// called.
func (r *progressRelay) attach(cl *call) func() {
	f := cl.progress
	r.to.Store(&f)
	return func() { r.to.CompareAndSwap(&f, nil) }
}

// progress sends ev to the caller as a progress frame.
func (cl *call) progress(ev backend.Event) {
	p := &wire.Progress{Step: ev.Step, Done: ev.Done, Total: ev.Total, Unit: ev.Unit, End: ev.End, Elapsed: ev.Elapsed}
	if ev.Err != nil {
		p.Err = ev.Err.Error()
	}
	_ = cl.c.Send(wire.Frame{T: wire.FrameProgress, Progress: p})
}

// lockKeys takes the locks of keys in sorted order.
func (s *Server) lockKeys(ctx context.Context, keys ...string) (func(), error) {
	keys = slices.Clone(keys)
	slices.Sort(keys)
	keys = slices.Compact(keys)
	var unlocks []func()
	release := func() {
		for i := len(unlocks) - 1; i >= 0; i-- {
			unlocks[i]()
		}
	}
	for _, k := range keys {
		u, err := s.lockKey(ctx, k)
		if err != nil {
			release()
			return nil, err
		}
		unlocks = append(unlocks, u)
	}
	return release, nil
}

// liveSlot returns key's slot when it holds a live environment, else an
// error of kind manager.ErrNoEnvironment naming the key.
func (s *Server) liveSlot(key string) (*slot, error) {
	s.mu.Lock()
	sl := s.slots[key]
	s.mu.Unlock()
	if sl == nil || !slices.Contains(sl.m.Keys(), key) {
		var have []string
		s.mu.Lock()
		for k, o := range s.slots {
			if len(o.m.Keys()) > 0 {
				have = append(have, k)
			}
		}
		s.mu.Unlock()
		slices.Sort(have)
		list := "it holds none"
		if len(have) > 0 {
			list = "it holds " + strings.Join(have, ", ")
		}
		return nil, fmt.Errorf("no environment %q in the berth daemon (%s; an environment exists once a command ran in it, e.g. berth exec --task %s true)", key, list, key)
	}
	return sl, nil
}

// sourceSlot returns the slot of key's environment for a fork or a
// checkpoint: the live one, else, when the configured backend keeps an
// environment of key beyond the daemon (a persistent container, a local
// fork's workspace from an earlier daemon), that one opened in a slot of
// the caller's configuration (its files as they are; its shell starts
// fresh).
func (s *Server) sourceSlot(ctx context.Context, key string, l *loaded) (*slot, error) {
	sl, err := s.liveSlot(key)
	if err == nil || !manager.Kept(ctx, l.cfg, key) {
		return sl, err
	}
	sl, _, err = s.slotWith(ctx, key, l)
	if err != nil {
		return nil, err
	}
	if _, err := sl.m.Env(ctx, key); err != nil {
		return nil, err
	}
	return sl, nil
}

// result is the reply of an operation whose answer is v.
func result(v any, err error) *wire.Reply {
	if err != nil {
		return errorReply(wire.CodeFailed, err)
	}
	b, err := wire.MarshalJSON(v)
	if err != nil {
		return errorReply(wire.CodeFailed, fmt.Errorf("encode result: %w", err))
	}
	return &wire.Reply{Result: b}
}

// fork makes Target from a copy of Key's live environment, in a slot of
// its own with the source's configuration, which must be the caller's.
func (s *Server) fork(cl *call, req wire.Request) *wire.Reply {
	src, dst := keyOf(req), req.Target
	if dst == "" {
		return errorReply(wire.CodeFailed, errors.New("fork: give the new environment's key (berth env fork SRC DST)"))
	}
	if dst == src {
		return errorReply(wire.CodeFailed, fmt.Errorf("fork: source and target are both %q: give the new environment another key", src))
	}
	unlock, err := s.lockKeys(cl.ctx, src, dst)
	if err != nil {
		return errorReply(wire.CodeFailed, err)
	}
	defer unlock()
	l, err := s.loadConfig(req.Inputs, cl.env)
	if err != nil {
		return errorReply(wire.CodeConfig, err)
	}
	from, err := s.sourceSlot(cl.ctx, src, l)
	if err != nil {
		return errorReply(wire.CodeFailed, err)
	}
	if from.fp != l.fp {
		return errorReply(wire.CodeFailed, fmt.Errorf("fork: the configuration of this call differs from the one %q's environment was made with (%s): a fork copies %q as it is; run it with the same configuration",
			src, strings.Join(diffValues(from.values, l.values), ", "), src))
	}
	if _, err := s.liveSlot(dst); err == nil {
		return errorReply(wire.CodeFailed, fmt.Errorf("environment %q exists in the berth daemon: choose another name, or remove it first (berth env rm %s)", dst, dst))
	}
	to, notes, err := s.slotWith(cl.ctx, dst, l)
	if err != nil {
		return errorReply(wire.CodeFailed, err)
	}
	defer from.progress.attach(cl)()
	defer to.progress.attach(cl)()
	res, err := from.m.ForkTo(cl.ctx, src, to.m, dst)
	r := result(res, err)
	if err == nil {
		s.mu.Lock()
		to.cwd = res.Cwd
		s.mu.Unlock()
		r.Cwd, r.Backend, r.Notes = res.Cwd, to.backend, notes
	}
	return r
}

// checkpoint keeps a checkpoint of Key's live environment, within the
// caller's bounds.
func (s *Server) checkpoint(cl *call, req wire.Request) *wire.Reply {
	key := keyOf(req)
	unlock, err := s.lockKey(cl.ctx, key)
	if err != nil {
		return errorReply(wire.CodeFailed, err)
	}
	defer unlock()
	l, err := s.loadConfig(req.Inputs, cl.env)
	if err != nil {
		return errorReply(wire.CodeConfig, err)
	}
	sl, err := s.sourceSlot(cl.ctx, key, l)
	if err != nil {
		return errorReply(wire.CodeFailed, err)
	}
	defer sl.progress.attach(cl)()
	info, err := sl.m.Checkpoint(cl.ctx, key, req.Name, manager.WithCheckpointBounds(l.cfg.Checkpoints))
	r := result(info, err)
	if err == nil {
		r.Backend = sl.backend
	}
	return r
}

// restore replaces Key's environment with one made from its checkpoint
// Name, in the slot of the caller's configuration.
func (s *Server) restore(cl *call, req wire.Request) *wire.Reply {
	return s.withSlot(cl, req, func(sl *slot, notes []string) *wire.Reply {
		defer sl.progress.attach(cl)()
		res, err := sl.m.Restore(cl.ctx, keyOf(req), req.Name)
		r := result(res, err)
		if err == nil {
			s.mu.Lock()
			sl.cwd = res.Cwd
			s.mu.Unlock()
			r.Cwd, r.Backend, r.Notes = res.Cwd, sl.backend, notes
		}
		return r
	})
}

// checkpoints lists the checkpoints of Key ("" every key) of Backend (""
// every backend) kept in the daemon's home.
func (s *Server) checkpoints(cl *call, req wire.Request) *wire.Reply {
	list, err := manager.ListCheckpoints(s.opts.Home, req.Backend, req.Key)
	if list == nil {
		list = []manager.CheckpointInfo{}
	}
	r := result(list, nil)
	if err != nil {
		r.Notes = []string{"some checkpoint records could not be read: " + err.Error()}
	}
	return r
}

// removeCheckpoint removes Key's checkpoint Name of Backend ("" the
// configured one), under the key's lock.
func (s *Server) removeCheckpoint(cl *call, req wire.Request) *wire.Reply {
	key := keyOf(req)
	unlock, err := s.lockKey(cl.ctx, key)
	if err != nil {
		return errorReply(wire.CodeFailed, err)
	}
	defer unlock()
	l, err := s.loadConfig(req.Inputs, cl.env)
	if err != nil {
		return errorReply(wire.CodeConfig, err)
	}
	be := req.Backend
	if be == "" {
		be = l.cfg.Terminal.Backend
	}
	r := result(struct{}{}, manager.RemoveCheckpoint(cl.ctx, l.cfg, be, key, req.Name))
	if r.Error == "" {
		r.Backend = be
	}
	return r
}
