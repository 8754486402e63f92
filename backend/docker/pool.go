package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/shellword"
)

// Warm pools (terminal.warm_pool, backend.Pooler).
//
// A pooled container is made as any other of its shape — the same image,
// limits, tmpfs, binds, network, working directory and docker_env — but
// before its key is known: it is named berth-pool-<shape>-<random>,
// labelled LabelPool (the shape) instead of LabelKey, and /root and
// /workspace are anonymous volumes (a named volume's name is its key's).
// It carries the owner mark of the berth that made it like every other
// container, so the crash sweep of the next start removes what a dead
// berth pooled. One exec runs in it from the start, a /bin/sh waiting on
// its stdin for the command it is to become (spareScript): the first exec
// of a container costs tens of milliseconds of runc's work, paid while
// the container waits in the pool instead of when a task asks.
//
// A claim binds it to a key: the container is renamed to the key's name
// (ContainerName) — a rename is atomic in the daemon, so a key that
// already has a container (another berth's) refuses it, and a later berth
// for the key finds it by that name (adoptClaimed) — and a bind record,
// an empty volume labelled LabelKey and LabelBound (the container's id),
// gives berth env ls, berth env rm and Close the key a container's labels
// cannot be changed to hold. The spare exec becomes the session's shell,
// started by the claimant with its working directory and its variables
// (SessionEnv, the claimant's forwarded secrets): nothing of the pool's
// maker reaches the environment, and a claimed container is never pooled
// again. It keeps LabelPool as provenance; the commands inside see a
// container like any other of the shape.
const (
	// LabelPool is on a container a warm pool made, and on its volumes:
	// the shape it was made for.
	LabelPool = "berth.pool"
	// LabelBound is on a bind record: the id of the pooled container a
	// berth claimed for the record's key (LabelKey).
	LabelBound = "berth.bound"
	bindRole   = "bind"
	poolPrefix = "berth-pool-"
)

// pooler is the backend's Registration.Pool.
type pooler struct{}

var _ backend.Pooler = pooler{}

// Shape is the hash of the container's settings without its key (name,
// volume names), and the daemon's address. A persistent environment is
// not pooled: its files are its key's volumes.
func (pooler) Shape(_ context.Context, opts backend.Options) (string, error) {
	if opts.Config.ContainerPersistent {
		return "", fmt.Errorf("docker: a persistent environment (container_persistent) is made from its key's volumes, which no container made before its key can mount (set container_persistent: false for pooled environments): %w", backend.ErrUnsupported)
	}
	sp, err := buildSpec(opts)
	if err != nil {
		return "", err
	}
	return shapeOf(sp, daemonHost(opts.Getenv)), nil
}

// shapeOf hashes what of sp a container is made from, leaving out what
// names it after its key.
func shapeOf(sp *spec, host string) string {
	c := *sp
	c.Name, c.Key, c.Persistent = "", "", false
	c.Volumes = make(map[string]string, len(sp.Volumes))
	for dir := range sp.Volumes {
		c.Volumes[dir] = ""
	}
	b, _ := json.Marshal(struct {
		Spec *spec  `json:"spec"`
		Host string `json:"host"`
	}{&c, host})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

// Room: the Docker daemon has no limit of its own on containers;
// config.MaxWarmPool bounds the pool.
func (pooler) Room(context.Context, backend.Options) (int, error) { return -1, nil }

// Make creates and starts one pooled container with its spare exec.
func (pooler) Make(ctx context.Context, opts backend.Options) (backend.Pooled, error) {
	return makeMember(ctx, opts, currentOwner())
}

// makeMember is Make with the owner mark the container carries (a test
// stands in for a berth that has died with another).
func makeMember(ctx context.Context, opts backend.Options, owner string) (*member, error) {
	sp, err := buildSpec(opts)
	if err != nil {
		return nil, err
	}
	shape := shapeOf(sp, daemonHost(opts.Getenv))
	sp.Name = poolPrefix + shape[:12] + "-" + newNonce()
	sp.Key = ""
	for dir := range sp.Volumes {
		sp.Volumes[dir] = "" // anonymous: made and removed with the container
	}
	b, err := backendFor(ctx, sp, opts)
	if err != nil {
		return nil, err
	}
	b.sessionEnv = nil
	b.log = b.log.With("pool", shape[:12])
	b.cleanUpOnce(ctx, opts.Config.LifetimeSeconds)
	id, err := b.createAndStart(ctx, sp.Name, func(withDisk bool) (*container.Config, *container.HostConfig) {
		cfg, hc := sp.config(withDisk, b.d.swapLimit)
		delete(cfg.Labels, LabelKey)
		cfg.Labels[LabelPool] = shape
		delete(cfg.Labels, LabelOwner)
		if owner != "" {
			cfg.Labels[LabelOwner] = owner
		}
		for i := range hc.Mounts {
			m := &hc.Mounts[i]
			m.Source = ""
			m.VolumeOptions = &mount.VolumeOptions{Labels: map[string]string{
				LabelBerth: "1", LabelPool: shape, LabelPersistent: "0", LabelRole: strings.TrimPrefix(m.Target, "/"),
			}}
		}
		return cfg, hc
	})
	if err != nil {
		return nil, err
	}
	m := &member{b: b, id: id, shape: shape}
	fail := func(err error) (*member, error) {
		_ = m.Discard(context.WithoutCancel(ctx))
		return nil, err
	}
	ins, err := b.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return fail(wrap(b.host, err, "inspect pooled container %s", sp.Name))
	}
	m.image = ins.Container.Image
	for _, mp := range ins.Container.Mounts {
		if _, ok := sp.Volumes[mp.Destination]; ok && mp.Type == mount.TypeVolume {
			sp.Volumes[mp.Destination] = mp.Name
		}
	}
	shlvl := "-"
	if ins.Container.Config != nil {
		shlvl = envValue(ins.Container.Config.Env, "SHLVL")
	}
	spare, err := b.exec(ctx, id, backend.ProcSpec{Argv: spareArgv(b.nonce, shlvl)})
	if err != nil {
		return fail(err)
	}
	spare.spareEnd = spareEnd(b.nonce)
	b.id, b.spare = id, spare
	b.log.Debug("docker: pooled container made", "container", sp.Name, "id", shortID(id))
	return m, nil
}

// member is one pooled container.
type member struct {
	b     *Backend
	id    string
	shape string
	image string // the image id it runs
}

func (m *member) ID() string { return m.id }

// Claim binds the container to opts.Key (see the comment at the top) and
// returns its backend with the claimant's settings. A container whose
// image is no longer the one its tag names, or whose key already has a
// container, is removed instead, and the claim fails.
func (m *member) Claim(ctx context.Context, opts backend.Options) (backend.Backend, error) {
	b := m.b
	fail := func(err error) (backend.Backend, error) {
		_ = m.Discard(context.WithoutCancel(ctx))
		return nil, err
	}
	sp, err := buildSpec(opts)
	if err != nil {
		return fail(err)
	}
	if s := shapeOf(sp, daemonHost(opts.Getenv)); s != m.shape {
		return fail(fmt.Errorf("docker: pooled container %s is of shape %s, the claim's settings of %s", shortID(m.id), m.shape[:12], s[:12]))
	}
	// A fresh container would run what the tag names now.
	img, err := b.cli.ImageInspect(ctx, sp.Image)
	if err != nil {
		return fail(wrap(b.host, err, "inspect image %s", sp.Image))
	}
	if img.ID != m.image {
		return fail(fmt.Errorf("docker: pooled container %s runs image %s, and %s is now %s", shortID(m.id), shortID(m.image), sp.Image, shortID(img.ID)))
	}
	if _, err := b.cli.ContainerRename(ctx, m.id, client.ContainerRenameOptions{NewName: sp.Name}); err != nil {
		return fail(wrap(b.host, err, "rename pooled container %s to %s", shortID(m.id), sp.Name))
	}
	_, err = b.cli.VolumeCreate(ctx, client.VolumeCreateOptions{
		Name: bindName(m.id),
		Labels: map[string]string{
			LabelBerth: "1", LabelKey: sp.Key, LabelRole: bindRole, LabelBound: m.id, LabelPool: m.shape, LabelPersistent: "0",
		},
	})
	if err != nil {
		return fail(wrap(b.host, err, "record the claim of %s for %s", shortID(m.id), sp.Key))
	}
	sp.Volumes = b.spec.Volumes
	b.mu.Lock()
	b.spec = sp
	b.sessionEnv = forwardEnv(opts.Config.DockerForwardEnv, opts.Getenv)
	b.log = opts.Log().With("backend", Name, "key", sp.Key)
	b.progress = opts.Progress
	b.mu.Unlock()
	b.log.Debug("docker: claimed a pooled container", "container", sp.Name, "id", shortID(m.id))
	return b, nil
}

// Discard removes the unclaimed container and its volumes.
func (m *member) Discard(ctx context.Context) error {
	b := m.b
	b.mu.Lock()
	if b.spare != nil {
		b.spare.Close()
		b.spare = nil
	}
	b.closed = true
	b.mu.Unlock()
	_, err := b.cli.ContainerRemove(ctx, m.id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return wrap(b.host, err, "remove pooled container %s", shortID(m.id))
	}
	return nil
}

// bindName names the bind record of container id.
func bindName(id string) string { return "berth-bind-" + shortID(id) }

// spareScript is the spare exec of a pooled container: it reads the argv
// of the process it is to become, as shell words on lines up to a line
// holding its first argument, and execs it (same process, same exec: its
// exit is the exec's). sh reads its stdin a byte at a time, so what
// follows the end line is the new process's input.
//
// The shell it runs in is one more than a fresh exec has: shells that
// count their nesting in SHLVL (bash, busybox ash) have raised it, and the
// new process would inherit the raise. So the spare sets SHLVL back to the
// container's own (its second argument, "-" when the container's
// environment has none) before the exec.
const spareScript = `e=$1 s= l=
while IFS= read -r l; do [ "$l" = "$e" ] && break; s="$s$l
"; done
[ "$l" = "$e" ] || exit 0
eval "set -- $s"
if [ "$2" = - ]; then unset SHLVL; else SHLVL=$2; export SHLVL; fi
exec "$@"`

// spareArgv is the spare's command; nonce makes its end line, shlvl is
// the container's own SHLVL ("-": none).
func spareArgv(nonce, shlvl string) []string {
	return []string{"/bin/sh", "-c", spareScript, "berth-spare", spareEnd(nonce), shlvl}
}

// envValue is the value of name in a container's environment, "-" when
// it has none.
func envValue(env []string, name string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return "-"
}

func spareEnd(nonce string) string { return "__berth_spare_end_" + nonce }

// takeSpare hands the spare to the first process started that it can
// become: one of a plain argv (the session's shell), without a terminal,
// a directory or variables of its own, which an exec would set at its
// creation. Callers hold b.mu.
func (b *Backend) takeSpare(ps backend.ProcSpec) *process {
	if b.spare == nil || ps.TTY || ps.Dir != "" || len(ps.Env) > 0 {
		return nil
	}
	sp := b.spare
	b.spare = nil
	select {
	case <-sp.eof:
		sp.Close() // the spare died (its container was stopped)
		return nil
	default:
	}
	return sp
}

// use makes the spare become ps: the argv goes to it over its stdin.
func (p *process) use(ps backend.ProcSpec) error {
	var s strings.Builder
	for i, w := range ps.Argv {
		if i > 0 {
			s.WriteByte(' ')
		}
		s.WriteString(shellword.Quote(w))
	}
	s.WriteString("\n" + p.spareEnd + "\n")
	_, err := io.WriteString(p.stdin, s.String())
	return err
}

// adoptClaimed finds, when creating the key's container found its name
// taken, a pooled container a berth claimed for the key (renamed to the
// key's name), holds it and makes sure it runs, as ensure does with a
// container it finds by its labels.
func (b *Backend) adoptClaimed(ctx context.Context) (string, bool) {
	ins, err := b.cli.ContainerInspect(ctx, b.spec.Name, client.ContainerInspectOptions{})
	if err != nil || ins.Container.Config == nil || ins.Container.State == nil {
		return "", false
	}
	c := ins.Container
	if c.Config.Labels[LabelPool] == "" || c.Config.Labels[LabelBerth] != "1" {
		return "", false
	}
	b.hold(ctx, c.ID, c.Config.Labels[LabelOwner])
	switch {
	case c.State.Running && c.State.Paused:
		if _, err := b.cli.ContainerUnpause(ctx, c.ID, client.ContainerUnpauseOptions{}); err != nil {
			return "", false
		}
	case c.State.Running:
	case c.State.Dead || c.State.Status == container.StateRemoving:
		return "", false
	default:
		if _, err := b.cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
			return "", false
		}
	}
	for _, mp := range c.Mounts {
		if _, ok := b.spec.Volumes[mp.Destination]; ok && mp.Type == mount.TypeVolume {
			b.spec.Volumes[mp.Destination] = mp.Name
		}
	}
	return c.ID, true
}

// sweepBindRecords removes the bind records whose container is gone
// (live holds the ids of the containers that exist).
func sweepBindRecords(ctx context.Context, cli *client.Client, host string, live map[string]bool) error {
	vols, err := cli.VolumeList(ctx, client.VolumeListOptions{
		Filters: make(client.Filters).Add("label", LabelBerth+"=1", LabelRole+"="+bindRole),
	})
	if err != nil {
		return wrap(host, err, "list bind records")
	}
	var errs []error
	for _, v := range vols.Items {
		if live[v.Labels[LabelBound]] {
			continue
		}
		if _, err := cli.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, wrap(host, err, "remove bind record %s", v.Name))
		}
	}
	return errors.Join(errs...)
}

// bindings maps the ids of claimed pooled containers to their keys.
func bindings(ctx context.Context, cli *client.Client, host string) (map[string]string, error) {
	vols, err := cli.VolumeList(ctx, client.VolumeListOptions{
		Filters: make(client.Filters).Add("label", LabelBerth+"=1", LabelRole+"="+bindRole),
	})
	if err != nil {
		return nil, wrap(host, err, "list bind records")
	}
	out := make(map[string]string, len(vols.Items))
	for _, v := range vols.Items {
		out[v.Labels[LabelBound]] = v.Labels[LabelKey]
	}
	return out, nil
}

// pooledName reports whether a container's name is that of an unclaimed
// pooled one.
func pooledName(names []string) bool {
	for _, n := range names {
		if strings.HasPrefix(strings.TrimPrefix(n, "/"), poolPrefix) {
			return true
		}
	}
	return false
}

// prunePools removes every unclaimed pooled container, whoever made it:
// by name, so that one claimed (renamed) meanwhile is not hit. A live
// pool refills.
func prunePools(ctx context.Context, cli *client.Client, host string, items []container.Summary) ([]string, error) {
	var removed []string
	var errs []error
	for _, c := range items {
		if c.Labels[LabelPool] == "" || !pooledName(c.Names) {
			continue
		}
		name := strings.TrimPrefix(c.Names[0], "/")
		if _, err := cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
			if !cerrdefs.IsNotFound(err) {
				errs = append(errs, wrap(host, err, "remove pooled container %s", name))
			}
			continue
		}
		removed = append(removed, "")
	}
	return removed, errors.Join(errs...)
}
