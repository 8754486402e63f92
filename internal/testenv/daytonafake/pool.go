package daytonafake

import (
	"context"
	"strconv"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// The warm pool: Daytona keeps sandboxes of its common shapes created and
// started ahead of need, so a create that matches one is served at once
// instead of after a container start. The fake does the same when
// Options.WarmPool is set: after it created a sandbox of a shape (image,
// cpu, memory, network), it keeps that many started containers of that
// shape ready, and the next create of the shape takes one. Only sandboxes
// without env are served from the pool (a container's env is fixed when it
// is created).

// poolKey is the shape of a pooled container.
type poolKey struct {
	image       string
	cpu, memory int
	noNetwork   bool
}

// poolKeyLocked is sb's shape; ok is false when sb cannot come from the pool:
// it has env, or it is made from a snapshot of a sandbox (Daytona's warm
// pools hold sandboxes of the snapshots they are configured for).
// Called with s.mu held.
func (sb *sandbox) poolKeyLocked(image string) (poolKey, bool) {
	return poolKey{image: image, cpu: sb.cpu, memory: sb.memory, noNetwork: sb.networkBlockAll}, len(sb.env) == 0 && sb.fromSnapshot == ""
}

// takeWarm hands out a ready container of shape k, if the pool has one,
// and starts refilling the pool.
func (s *Server) takeWarm(k poolKey) (string, bool) {
	if s.opts.WarmPool <= 0 {
		return "", false
	}
	s.mu.Lock()
	ids := s.pool[k]
	var id string
	if len(ids) > 0 {
		id = ids[0]
		s.pool[k] = ids[1:]
	}
	s.mu.Unlock()
	s.refillWarm(k)
	return id, id != ""
}

// refillWarm starts containers of shape k in the background until the
// pool holds Options.WarmPool of them.
func (s *Server) refillWarm(k poolKey) {
	if s.opts.WarmPool <= 0 {
		return
	}
	s.mu.Lock()
	if s.closed || s.poolFilling[k] || len(s.pool[k]) >= s.opts.WarmPool {
		s.mu.Unlock()
		return
	}
	s.poolFilling[k] = true
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		for {
			ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
			id, err := s.runPoolContainer(ctx, k)
			cancel()
			s.mu.Lock()
			if err != nil || s.closed {
				s.poolFilling[k] = false
				s.mu.Unlock()
				if err == nil {
					s.docker.ContainerRemove(context.Background(), id, client.ContainerRemoveOptions{Force: true})
				} else if s.ctx.Err() == nil {
					s.log.Warn("daytonafake: warm pool", "image", k.image, "err", err)
				}
				return
			}
			s.pool[k] = append(s.pool[k], id)
			full := len(s.pool[k]) >= s.opts.WarmPool
			if full {
				s.poolFilling[k] = false
			}
			s.mu.Unlock()
			if full {
				return
			}
		}
	}()
}

// runPoolContainer creates and starts a container of shape k, as
// runContainer would for a sandbox of that shape.
func (s *Server) runPoolContainer(ctx context.Context, k poolKey) (string, error) {
	cfg := &container.Config{
		Image:      k.image,
		Entrypoint: []string{"sleep", "infinity"},
		Cmd:        []string{},
		Hostname:   randomHex(4),
		Labels: map[string]string{
			labelFake: "1", labelInstance: s.inst, labelOwnerPID: strconv.Itoa(processID), labelSandbox: "warm-pool",
		},
	}
	if s.opts.Unkind.NonRootUser {
		cfg.User = nonRootUID
	}
	init := true
	hc := &container.HostConfig{Init: &init}
	hc.NanoCPUs = int64(k.cpu) * 1e9
	hc.Memory = int64(k.memory) << 30
	if k.noNetwork {
		hc.NetworkMode = "none"
	}
	res, err := s.docker.ContainerCreate(ctx, client.ContainerCreateOptions{Name: "daytonafake-pool-" + randomHex(8), Config: cfg, HostConfig: hc})
	if err != nil {
		return "", err
	}
	if _, err := s.docker.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		s.docker.ContainerRemove(context.WithoutCancel(ctx), res.ID, client.ContainerRemoveOptions{Force: true})
		return "", err
	}
	if err := s.addUser(ctx, res.ID); err != nil {
		s.docker.ContainerRemove(context.WithoutCancel(ctx), res.ID, client.ContainerRemoveOptions{Force: true})
		return "", err
	}
	return res.ID, nil
}

// drainPool removes the pool's containers (Close).
func (s *Server) drainPool(ctx context.Context) {
	s.mu.Lock()
	var ids []string
	for k, l := range s.pool {
		ids = append(ids, l...)
		delete(s.pool, k)
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.docker.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true})
	}
}
