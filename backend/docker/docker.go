// Package docker is the backend that runs commands in one long-lived,
// hardened container per environment key, through the Docker Engine API
// (never the docker CLI).
//
// The container runs `sleep infinity` under the daemon's init process with
// every capability dropped except CHOWN, DAC_OVERRIDE, FOWNER, SETGID and
// SETUID, no-new-privileges, a 256-process limit, tmpfs /tmp, /var/tmp and
// /run, a 1 GiB /dev/shm, and the cpu, memory and disk limits of the
// configuration (a limit the daemon cannot enforce is logged and reported by
// Doctor, never dropped silently). /root and /workspace live in named
// volumes, so with container_persistent a later berth process finds the
// container by its labels, reattaches and keeps the files.
//
// Every process is one exec whose stdin and output stay attached, so the
// session's persistent shell answers a command without a new exec.
// Forwarded secrets (docker_forward_env) are never put in the container's
// configuration or in any command line: SessionEnv hands them to the session,
// which exports them through the shell's stdin.
package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/a55dbaac/berth/backend"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// Name is the backend's registered name.
const Name = "docker"

func init() {
	backend.Register(backend.Registration{
		Name:        Name,
		Description: "one hardened long-lived container per environment, through the Docker Engine API",
		New: func(ctx context.Context, opts backend.Options) (backend.Backend, error) {
			return New(ctx, opts)
		},
		Doctor:      Doctor,
		Envs:        envAdmin{},
		Keys:        configKeys,
		Checkpoints: checkpointAdmin{},
	})
}

// ErrClosed is returned by Start after Close.
var ErrClosed = errors.New("docker: backend closed")

// Backend is one environment: a container (created or reattached by New)
// and the processes started in it. It is safe for concurrent use.
type Backend struct {
	cli        *client.Client
	host       string
	spec       *spec
	sessionEnv map[string]string
	log        *slog.Logger

	diskOK    bool  // the daemon accepts StorageOpt size
	swapLimit bool  // the daemon can pin swap to the memory limit
	copyMin   int64 // WriteFile declines smaller content (copyMinSize; tests lower it)

	mu        sync.Mutex
	id        string // current container id
	closed    bool
	recreated backend.Recreation
	nonce     string // random part of this Backend's claim names
	claim     string // this Backend's claim volume on id, "" when none (see LabelClaim)
}

// Interface checks.
var (
	_ backend.Backend      = (*Backend)(nil)
	_ backend.Recreator    = (*Backend)(nil)
	_ backend.SessionEnver = (*Backend)(nil)
	_ backend.FileWriter   = (*Backend)(nil)
	_ backend.Capable      = (*Backend)(nil)
)

// Capabilities reports IsolationImage for a container with nothing of the host
// mounted (named volumes are Docker's, not the host's), IsolationNone for
// one with a host directory bound in (a docker_volumes host path,
// docker_mount_cwd_to_workspace): a command there reaches the host's files.
// Checkpoint says how its files are checkpointed, or NoCheckpoint why not.
func (b *Backend) Capabilities() backend.Capabilities {
	c := backend.Capabilities{Isolation: b.isolation(), NoCheckpoint: b.spec.noCheckpoint()}
	if c.NoCheckpoint == "" {
		c.Checkpoint = checkpointHow
	}
	return c
}

func (b *Backend) isolation() backend.Isolation {
	for _, bind := range b.spec.Binds {
		if strings.HasPrefix(bind, "/") {
			return backend.IsolationNone
		}
	}
	return backend.IsolationImage
}

// cleaned records the daemons whose leftovers this berth process already
// cleaned up: crash clean-up runs once per daemon per process (like Nomad's
// dangling-container reconciler), not on every environment creation.
var (
	cleanedMu sync.Mutex
	cleaned   = map[string]bool{}
)

// cleanUpOnce removes, the first time this process talks to b's daemon,
// what crashed berths left there: containers of dead owners and throwaway
// containers stopped for longer than twice the idle lifetime.
func (b *Backend) cleanUpOnce(ctx context.Context, lifetimeSeconds int) {
	cleanedMu.Lock()
	defer cleanedMu.Unlock()
	if cleaned[b.host] {
		return
	}
	cleaned[b.host] = true
	rctx, rcancel := context.WithTimeout(ctx, reapTimeout)
	if removed, stopped, err := reapDeadOwners(rctx, b.cli, b.host); err != nil {
		b.log.Warn("docker: cleaning up after a crashed berth failed", "err", err)
	} else if len(removed)+len(stopped) > 0 {
		b.log.Info("docker: cleaned up after a crashed berth", "removed", removed, "stopped_persistent", stopped)
	}
	if swept, err := sweepCheckpoints(rctx, b.cli, b.host); err != nil {
		b.log.Warn("docker: cleaning up checkpoint leftovers of a crashed berth failed", "err", err)
	} else if len(swept) > 0 {
		b.log.Info("docker: cleaned up checkpoint leftovers of a crashed berth", "removed", swept)
	}
	rcancel()
	lifetime := max(60, lifetimeSeconds)
	if removed, err := pruneOrphans(ctx, b.cli, b.host, 2*time.Duration(lifetime)*time.Second); err != nil {
		b.log.Warn("docker: orphan pruning failed", "err", err)
	} else if len(removed) > 0 {
		b.log.Info("docker: removed orphaned containers", "containers", removed)
	}
}

// logger is the options' logger, else slog's default.
// New connects to the daemon (DOCKER_HOST or /var/run/docker.sock), removes
// orphaned containers of earlier crashed runs, makes sure the image exists
// locally (pulling it once if not), and creates — or finds by its labels and
// reattaches, starting it if stopped — the container of opts.Key.
//
// A daemon that does not answer gives a *backend.UnreachableError.
func New(ctx context.Context, opts backend.Options) (*Backend, error) {
	sp, err := buildSpec(opts)
	if err != nil {
		return nil, err
	}
	cli, err := connect(ctx, opts.Getenv)
	if err != nil {
		return nil, err
	}
	b := &Backend{
		cli:        cli,
		host:       daemonHost(opts.Getenv),
		spec:       sp,
		sessionEnv: forwardEnv(opts.Config.DockerForwardEnv, opts.Getenv),
		log:        opts.Log().With("backend", Name, "key", sp.Key),
		diskOK:     true,
		copyMin:    copyMinSize,
		nonce:      newNonce(),
	}
	if info, err := cli.Info(ctx, client.InfoOptions{}); err == nil {
		b.swapLimit = info.Info.SwapLimit
		if sp.MemoryMB > 0 && !info.Info.MemoryLimit {
			b.log.Warn("docker: the daemon cannot enforce the memory limit", "container_memory_mb", sp.MemoryMB)
		}
		if sp.NanoCPUs > 0 && !info.Info.CPUCfsQuota {
			b.log.Warn("docker: the daemon cannot enforce the cpu limit (no CFS quota)", "container_cpu", opts.Config.ContainerCPU)
		}
		if !info.Info.PidsLimit {
			b.log.Warn("docker: the daemon cannot enforce the pids limit", "pids_limit", pidsLimit)
		}
	}

	b.cleanUpOnce(ctx, opts.Config.LifetimeSeconds)

	if err := ensureImage(ctx, cli, b.host, sp.Image, opts); err != nil {
		cli.Close()
		return nil, err
	}
	if opts.From != nil {
		if err := b.restoreFrom(ctx, opts.From, opts); err != nil {
			cli.Close()
			return nil, err
		}
	}
	id, err := b.ensure(ctx)
	if err != nil {
		if b.claim != "" {
			_ = b.dropClaim(context.WithoutCancel(ctx), b.claim)
		}
		cli.Close()
		return nil, err
	}
	b.id = id
	return b, nil
}

// forwardEnv looks up the docker_forward_env names. Unset names are skipped.
func forwardEnv(names []string, getenv func(string) string) map[string]string {
	if getenv == nil {
		getenv = os.Getenv
	}
	env := map[string]string{}
	for _, n := range names {
		if v := getenv(n); v != "" {
			env[n] = v
		}
	}
	return env
}

// Name returns "docker".
func (b *Backend) Name() string { return Name }

// ContainerID returns the id of the environment's current container.
func (b *Backend) ContainerID() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.id
}

// SessionEnv returns the forwarded variables (docker_forward_env) with their
// values. They are secrets: berth never stores them in the container's
// configuration or passes them in a command line.
func (b *Backend) SessionEnv() map[string]string { return maps.Clone(b.sessionEnv) }

// Recreated reports, once, whether the container had to be recreated or
// restarted because it was removed or stopped from outside.
func (b *Backend) Recreated() bool { return b.recreated.Take() }

// Start runs spec.Argv in the container as one exec with stdin and output
// attached. When the container was removed or stopped from outside it is
// recreated or started once, and Recreated reports it.
func (b *Backend) Start(ctx context.Context, ps backend.ProcSpec) (backend.Process, error) {
	if len(ps.Argv) == 0 {
		return nil, fmt.Errorf("docker: start: empty argv")
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, ErrClosed
	}
	id := b.id
	b.mu.Unlock()

	p, err := b.exec(ctx, id, ps)
	if err == nil || !isGone(err) {
		return p, err
	}
	b.log.Warn("docker: container gone or stopped, recovering", "container", id, "err", err)
	if id, err = b.recover(ctx, id); err != nil {
		return nil, err
	}
	return b.exec(ctx, id, ps)
}

// recover recreates or starts the container once it was found gone or
// stopped while its id was id, and returns the id of the running container.
// When another caller recovered it meanwhile, that container is returned.
// Recreated then reports it.
func (b *Backend) recover(ctx context.Context, id string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return "", ErrClosed
	}
	if b.id == id { // nobody recovered it meanwhile
		nid, err := b.ensure(ctx)
		if err != nil {
			return "", fmt.Errorf("docker: recover container %s: %w", b.spec.Name, err)
		}
		b.id = nid
		b.recreated.Set()
	}
	return b.id, nil
}

// ensure finds the environment's container by its labels and starts it if
// needed, or creates it. A container whose config label does not match the
// current settings is replaced (its volumes are kept). A container another
// berth created is claimed (hold) before it is started or used.
func (b *Backend) ensure(ctx context.Context) (string, error) {
	sp := b.spec
	for attempt := 0; ; attempt++ {
		list, err := b.cli.ContainerList(ctx, client.ContainerListOptions{
			All:     true,
			Filters: make(client.Filters).Add("label", LabelBerth+"=1", LabelKey+"="+sp.Key),
		})
		if err != nil {
			return "", wrap(b.host, err, "list containers of %s", sp.Key)
		}
		var found *container.Summary
		for i := range list.Items {
			c := &list.Items[i]
			if c.Labels[LabelConfig] == sp.hash && found == nil {
				found = c
				continue
			}
			b.log.Info("docker: replacing container whose settings changed", "container", c.ID[:12])
			if _, err := b.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
				return "", wrap(b.host, err, "remove outdated container %s", c.ID[:12])
			}
		}
		if found != nil {
			b.hold(ctx, found.ID, found.Labels[LabelOwner])
			switch found.State {
			case container.StateRunning:
				return found.ID, nil
			case container.StatePaused:
				if _, err := b.cli.ContainerUnpause(ctx, found.ID, client.ContainerUnpauseOptions{}); err != nil {
					return "", wrap(b.host, err, "unpause container %s", sp.Name)
				}
				return found.ID, nil
			case container.StateRemoving, container.StateDead:
				// wait for it to go away, then create anew
				time.Sleep(200 * time.Millisecond)
				if attempt < 20 {
					continue
				}
				return "", fmt.Errorf("docker: container %s stuck in state %s", sp.Name, found.State)
			default:
				if _, err := b.cli.ContainerStart(ctx, found.ID, client.ContainerStartOptions{}); err != nil {
					return "", wrap(b.host, err, "start container %s", sp.Name)
				}
				return found.ID, nil
			}
		}
		id, err := b.create(ctx)
		if err != nil && cerrdefs.IsConflict(err) && attempt < 3 {
			continue // created concurrently by another berth: look again
		}
		if err == nil {
			b.hold(ctx, id, currentOwner()) // its own: no claim, an old one dropped
		}
		return id, err
	}
}

// create makes the volumes and the container and starts it.
func (b *Backend) create(ctx context.Context) (string, error) {
	sp := b.spec
	for dir, name := range sp.Volumes {
		_, err := b.cli.VolumeCreate(ctx, client.VolumeCreateOptions{
			Name: name,
			Labels: map[string]string{
				LabelBerth: "1", LabelKey: sp.Key, LabelPersistent: boolLabel(sp.Persistent),
				LabelRole: strings.TrimPrefix(dir, "/"),
			},
		})
		if err != nil {
			return "", wrap(b.host, err, "create volume %s", name)
		}
	}
	withDisk := b.diskOK && sp.DiskMB > 0
	cfg, hc := sp.config(withDisk, b.swapLimit)
	res, err := b.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: sp.Name, Config: cfg, HostConfig: hc})
	if err != nil && withDisk && isStorageOptRefused(err) {
		b.diskOK = false
		b.log.Warn("docker: disk limit not enforced: the daemon refuses a per-container disk quota (StorageOpt size needs overlay2 on xfs with pquota)",
			"container_disk_mb", sp.DiskMB, "daemon_said", err.Error())
		cfg, hc = sp.config(false, b.swapLimit)
		res, err = b.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: sp.Name, Config: cfg, HostConfig: hc})
	}
	if err != nil {
		if cerrdefs.IsConflict(err) {
			return "", err
		}
		return "", wrap(b.host, err, "create container %s", sp.Name)
	}
	for _, w := range res.Warnings {
		b.log.Warn("docker: daemon warning at container creation (a limit may not be enforced)", "container", sp.Name, "warning", w)
	}
	if _, err := b.cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		_, _ = b.cli.ContainerRemove(context.WithoutCancel(ctx), res.ID, client.ContainerRemoveOptions{Force: true})
		return "", wrap(b.host, err, "start container %s", sp.Name)
	}
	b.log.Debug("docker: container created", "container", sp.Name, "id", res.ID[:12], "image", sp.Image)
	return res.ID, nil
}

// isStorageOptRefused reports whether the daemon refused a disk quota.
func isStorageOptRefused(err error) bool {
	m := strings.ToLower(err.Error())
	return strings.Contains(m, "storage-opt") || strings.Contains(m, "storageopt") ||
		strings.Contains(m, "storage opt") || strings.Contains(m, "quota")
}

// Close releases the environment: a persistent container is stopped (its
// volumes and filesystem are kept for the next berth) and this berth's
// claim on it removed, a throwaway one is removed with its volumes (claims
// included). It is idempotent.
func (b *Backend) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	id, claim := b.id, b.claim
	b.mu.Unlock()
	defer b.cli.Close()

	if b.spec.Persistent {
		// Stopped first, released second: the claim keeps other berths'
		// sweeps off the container until it is stopped.
		var errs []error
		timeout := 3
		_, err := b.cli.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &timeout})
		if err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, wrap(b.host, err, "stop container %s", b.spec.Name))
		}
		if claim != "" {
			errs = append(errs, b.dropClaim(ctx, claim))
		}
		return errors.Join(errs...)
	}
	err := removeEnv(ctx, b.cli, b.host, b.spec.Key)
	b.dropRemovedCheckpointImage(ctx)
	return err
}
