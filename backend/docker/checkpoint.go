package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/procmark"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
)

// A checkpoint of a docker environment is two things the daemon keeps:
//
//   - an image: the container's writable layer committed without pausing
//     the container (a paused container would freeze the agent's
//     processes, and an exec started meanwhile, for the whole commit), on
//     top of the image the container runs;
//   - a copy of each of berth's named volumes (/root, /workspace), made by
//     a short-lived helper container running `cp -a --reflink=auto` from
//     the environment's volumes into new ones: copy-on-write where the
//     volumes' filesystem clones files (XFS, btrfs), a plain copy
//     elsewhere (ext4). Checkpoint.Meta["copy"] says which happened.
//
// A new environment made from it (Options.From) runs a container from the
// image, with fresh copies of the checkpoint's volumes, so a checkpoint can
// be restored any number of times; everything else (limits, hardening,
// labels, owner, the settings hash a later berth matches) is what a fresh
// environment of the same configuration gets.
//
// What it keeps is labelled LabelCheckpoint (its id), LabelCheckpointKey and
// LabelCheckpointName: not LabelKey, which would make the checkpoint part of
// the environment, removed with it (removeEnv, a throwaway Close).
// While a checkpoint or a restore is made, a pending marker (an empty
// volume labelled LabelPending and LabelOwner, as claims are) names the
// berth making it; the sweep at the first backend of a process and berth
// env prune remove what a berth that died in the middle left (the marker's
// owner gone).
const (
	LabelCheckpoint     = "berth.checkpoint"      // the checkpoint's id
	LabelCheckpointKey  = "berth.checkpoint.key"  // the key it was taken from
	LabelCheckpointName = "berth.checkpoint.name" // the name it was given
	// LabelPending is on pending markers: "checkpoint" (with
	// LabelCheckpoint) or "restore" (with LabelRestoreKey).
	LabelPending    = "berth.pending"
	LabelRestoreKey = "berth.restore.key"
	// LabelHelper is on the short-lived containers that copy volumes
	// (with LabelOwner, and LabelCheckpoint or LabelRestoreKey). They
	// carry no LabelBerth: they are not environments.
	LabelHelper = "berth.helper"
)

// checkpointRepo is the repository of the checkpoint images' tags.
const checkpointRepo = "berth-checkpoint"

// commitAttempts is how many times Checkpoint commits the running
// container before it reports a failure: a file cut shorter while the
// daemon copies it breaks that commit ("unexpected EOF"), and a commit
// taken again a moment later succeeds.
const commitAttempts = 3

// copyAttempts is how many times the helper copies one volume: a file
// removed while cp walks the tree fails that copy.
const copyAttempts = 3

// checkpointHow is Capabilities.Checkpoint.
const checkpointHow = "docker commit of the writable layer (not paused); /root and /workspace volumes copied (cp --reflink=auto: copy-on-write where their filesystem clones)"

// checkpointStep lets a test stop a checkpoint or a restore where a crash
// would leave the most behind: "checkpoint" or "restore", called once the
// volumes are copied, before the pending marker goes.
var checkpointStep = func(step string) {}

// Interface checks.
var (
	_ backend.Checkpointer    = (*Backend)(nil)
	_ backend.CheckpointAdmin = checkpointAdmin{}
)

// noCheckpoint says why this environment cannot be checkpointed, "" when
// it can: a host directory or a volume of the user's mounted in it holds
// files that are not the environment's to copy. A checkpoint without them
// would be a lie where it matters most: a fork would share them with its
// source (so no independence), and a restore would not bring them back
// (so no rollback), usually of the very repository the agent works on.
func (s *spec) noCheckpoint() string {
	var hosts, named []string
	for _, b := range s.Binds {
		parts := strings.Split(b, ":")
		if len(parts) < 2 || slices.Contains(s.Kept, parts[1]) {
			continue
		}
		if strings.HasPrefix(parts[0], "/") {
			hosts = append(hosts, parts[0]+" at "+parts[1])
		} else {
			named = append(named, parts[0]+" at "+parts[1])
		}
	}
	switch {
	case len(hosts) > 0:
		return "the container binds host directories (" + strings.Join(hosts, ", ") +
			", from docker_volumes or docker_mount_cwd_to_workspace): their files are the host's, not the environment's to copy; " +
			"a fork would share them with its source and a restore would not bring them back. " +
			"Checkpoints need an environment whose files live in the container and berth's own volumes (no host paths in docker_volumes, docker_mount_cwd_to_workspace off)"
	case len(named) > 0:
		return "docker_volumes mounts volumes of yours (" + strings.Join(named, ", ") +
			"): berth copies only its own /root and /workspace volumes, and a fork would share yours with its source; " +
			"drop them from docker_volumes to checkpoint this environment"
	}
	return ""
}

// Checkpoint commits the container's writable layer into an image, without
// pausing the container, and copies its /root and /workspace volumes into
// new ones, both at once. It fails, keeping nothing, when the environment
// mounts files that are not its own (see spec.noCheckpoint), or when a
// step fails. The returned Checkpoint's ID is the checkpoint's id; Meta
// names the image ("image", "tag"), the volumes ("volume.root",
// "volume.workspace"), the image helpers run from ("base") and how the
// volumes were copied ("copy": "reflink" or "plain").
func (b *Backend) Checkpoint(ctx context.Context, name string) (backend.Checkpoint, error) {
	sp := b.spec
	if why := sp.noCheckpoint(); why != "" {
		return backend.Checkpoint{}, fmt.Errorf("docker: checkpoint of %s: %s", sp.Key, why)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return backend.Checkpoint{}, ErrClosed
	}
	cid := b.id
	b.mu.Unlock()

	nonce := newNonce()
	id := "berth-ckpt-" + nonce
	labels := map[string]string{LabelCheckpoint: id, LabelCheckpointKey: sp.Key, LabelCheckpointName: name}
	marker, err := b.pending(ctx, map[string]string{LabelPending: "checkpoint", LabelCheckpoint: id, LabelCheckpointKey: sp.Key, LabelCheckpointName: name})
	if err != nil {
		return backend.Checkpoint{}, err
	}
	cp := backend.Checkpoint{
		Backend: Name, Key: sp.Key, Name: name, ID: id, Created: time.Now().UTC(),
		Meta: map[string]string{"base": sp.Image, "tag": checkpointRepo + ":" + nonce},
	}
	undo := func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if err := removeCheckpoint(cctx, b.cli, b.host, cp); err != nil {
			b.log.Warn("docker: removing what a failed checkpoint made failed; the next sweep removes it", "checkpoint", id, "err", err)
			return
		}
		_ = b.dropVolume(cctx, marker)
	}

	var (
		wg              sync.WaitGroup
		commitErr       error
		imageID         string
		layerBytes      int64
		copied          copyResult
		copyErr         error
		pairs           []copyPair
		volumeLabelsFor = func(role string) map[string]string {
			l := map[string]string{LabelBerth: "1", LabelRole: role, LabelOwner: currentOwner()}
			for k, v := range labels {
				l[k] = v
			}
			return l
		}
	)
	for _, dir := range sp.volumeDirs() {
		role := path.Base(dir)
		pairs = append(pairs, copyPair{role: role, from: sp.Volumes[dir], to: id + "-" + role})
		cp.Meta["volume."+role] = id + "-" + role
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		imageID, layerBytes, commitErr = b.commit(ctx, cid, cp.Meta["tag"], labels,
			"berth checkpoint "+strconv.Quote(name)+" of "+sp.Key)
	}()
	go func() {
		defer wg.Done()
		for _, p := range pairs {
			if _, err := b.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: p.to, Labels: volumeLabelsFor(p.role)}); err != nil {
				copyErr = wrap(b.host, err, "checkpoint %s: create volume %s", id, p.to)
				return
			}
		}
		copied, copyErr = runCopy(ctx, b.cli, b.host, sp.Image, pairs, map[string]string{LabelHelper: "checkpoint", LabelCheckpoint: id})
	}()
	wg.Wait()
	if err := errors.Join(commitErr, copyErr); err != nil {
		undo()
		return backend.Checkpoint{}, err
	}
	checkpointStep("checkpoint")
	cp.Meta["image"] = imageID
	cp.Meta["copy"] = copied.how
	cp.Size = layerBytes + copied.bytes
	if err := b.dropVolume(ctx, marker); err != nil {
		undo()
		return backend.Checkpoint{}, err
	}
	if len(copied.retried) > 0 {
		b.log.Warn("docker: checkpoint: files changed while a volume was copied; it was copied again", "volumes", copied.retried)
	}
	b.log.Info("docker: checkpoint", "checkpoint", id, "name", name, "image", shortID(strings.TrimPrefix(imageID, "sha256:")),
		"copy", copied.how, "bytes", cp.Size)
	return cp, nil
}

// volumeDirs returns the container paths of berth's volumes, sorted.
func (s *spec) volumeDirs() []string {
	dirs := make([]string, 0, len(s.Volumes))
	for d := range s.Volumes {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	return dirs
}

// commit commits container cid, not paused, as tag with labels, retrying a
// commit torn by a file being rewritten (commitAttempts). It returns the
// image id and what the commit added to the container's image, in bytes.
func (b *Backend) commit(ctx context.Context, cid, tag string, labels map[string]string, comment string) (string, int64, error) {
	var (
		cr  client.ContainerCommitResult
		err error
	)
	for attempt := 1; ; attempt++ {
		cr, err = b.cli.ContainerCommit(ctx, cid, client.ContainerCommitOptions{
			Reference: tag,
			Comment:   comment,
			NoPause:   true,
			Config:    &container.Config{Labels: labels},
		})
		if err == nil {
			break
		}
		if attempt == commitAttempts || ctx.Err() != nil || cerrdefs.IsNotFound(err) || isConnErr(err) {
			return "", 0, wrap(b.host, err, "checkpoint: commit container %s", b.spec.Name)
		}
		b.log.Warn("docker: checkpoint: the commit of the running container failed; committing again", "attempt", attempt, "err", err)
	}
	var size int64
	if img, err := b.cli.ImageInspect(ctx, cr.ID); err == nil {
		size = img.Size
		if ins, err := b.cli.ContainerInspect(ctx, cid, client.ContainerInspectOptions{}); err == nil && ins.Container.Image != "" {
			if base, err := b.cli.ImageInspect(ctx, ins.Container.Image); err == nil {
				size = max(0, size-base.Size)
			}
		}
	}
	return cr.ID, size, nil
}

// pending creates a pending marker with labels plus this process's owner
// mark, and returns its name.
func (b *Backend) pending(ctx context.Context, labels map[string]string) (string, error) {
	name := "berth-pending-" + newNonce()
	l := map[string]string{LabelBerth: "1", LabelRole: "pending", LabelOwner: currentOwner()}
	for k, v := range labels {
		l[k] = v
	}
	if _, err := b.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: name, Labels: l}); err != nil {
		return "", wrap(b.host, err, "create pending marker %s", name)
	}
	return name, nil
}

// dropVolume removes volume name; one already gone is no error.
func (b *Backend) dropVolume(ctx context.Context, name string) error {
	if _, err := b.cli.VolumeRemove(ctx, name, client.VolumeRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
		return wrap(b.host, err, "remove volume %s", name)
	}
	return nil
}

// restoreFrom prepares the environment from cp (Options.From): it removes
// whatever the key had, fills the key's volumes with copies of the
// checkpoint's and creates the container from the checkpoint's image. New
// then finds that container as a reattaching berth would.
func (b *Backend) restoreFrom(ctx context.Context, cp *backend.Checkpoint, opts backend.Options) (err error) {
	sp := b.spec
	if cp.Backend != Name {
		return fmt.Errorf("docker: a %s checkpoint (%s) cannot start a docker environment", cp.Backend, cp.ID)
	}
	if why := sp.noCheckpoint(); why != "" {
		return fmt.Errorf("docker: %s cannot start from checkpoint %s: %s", sp.Key, cp.ID, why)
	}
	ref := cp.Meta["image"]
	if ref == "" {
		ref = cp.Meta["tag"]
	}
	gone := func(what string) error {
		return fmt.Errorf("docker: checkpoint %s (%q of %s) can no longer be restored: its %s is gone", cp.ID, cp.Name, cp.Key, what)
	}
	if ref == "" {
		return gone("image")
	}
	img, err := b.cli.ImageInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) || err == nil && img.Config != nil && img.Config.Labels[LabelCheckpoint] != cp.ID {
		return gone("image " + ref)
	}
	if err != nil {
		return wrap(b.host, err, "inspect checkpoint image %s", ref)
	}
	var pairs []copyPair
	for _, dir := range sp.volumeDirs() {
		role := path.Base(dir)
		from := cp.Meta["volume."+role]
		if from == "" {
			return fmt.Errorf("docker: checkpoint %s has no copy of %s; it was taken of an environment without berth's %s volume", cp.ID, dir, dir)
		}
		if _, err := b.cli.VolumeInspect(ctx, from, client.VolumeInspectOptions{}); err != nil {
			if cerrdefs.IsNotFound(err) {
				return gone("volume " + from)
			}
			return wrap(b.host, err, "inspect checkpoint volume %s", from)
		}
		pairs = append(pairs, copyPair{role: role, from: from, to: sp.Volumes[dir]})
	}

	step := opts.Begin("restoring checkpoint "+cp.ID, "")
	defer func() { step.End(err) }()
	// A new environment: what the key had goes, volumes included.
	if err := removeEnv(ctx, b.cli, b.host, sp.Key); err != nil {
		return err
	}
	marker, err := b.pending(ctx, map[string]string{LabelPending: "restore", LabelRestoreKey: sp.Key})
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			_ = removeEnv(cctx, b.cli, b.host, sp.Key)
		}
		if derr := b.dropVolume(context.WithoutCancel(ctx), marker); err == nil {
			err = derr
		}
	}()
	for _, p := range pairs {
		_, err := b.cli.VolumeCreate(ctx, client.VolumeCreateOptions{
			Name: p.to,
			Labels: map[string]string{
				LabelBerth: "1", LabelKey: sp.Key, LabelPersistent: boolLabel(sp.Persistent), LabelRole: p.role,
			},
		})
		if err != nil {
			return wrap(b.host, err, "create volume %s", p.to)
		}
	}
	res, err := runCopy(ctx, b.cli, b.host, sp.Image, pairs, map[string]string{LabelHelper: "restore", LabelRestoreKey: sp.Key})
	if err != nil {
		return err
	}
	checkpointStep("restore")
	sp.fromImage = img.ID
	b.log.Info("docker: environment from checkpoint", "checkpoint", cp.ID, "copy", res.how, "bytes", res.bytes)
	// Created before the marker goes (b is not shared yet: no lock).
	_, err = b.ensure(ctx)
	return err
}

// copyPair is one volume copied by the helper: from and to are volume
// names, role the directory name under /from and /to.
type copyPair struct{ role, from, to string }

// copyResult is what the helper reports: how it copied ("reflink" when
// the volumes' filesystem clones files, else "plain") and the size of the
// copies in bytes (du: with reflinks it counts shared blocks too).
type copyResult struct {
	how     string
	bytes   int64
	retried []string // the roles whose copy was made again
}

// copyScript probes whether cp clones files on the destination's
// filesystem (reflink) or at least knows --reflink=auto, then copies each
// volume, emptying the copy and starting again after a failure (a file
// removed while cp walked the tree), and reports what it did.
const copyScript = `set -u
p="/to/$1/.berth-reflink-probe"
echo probe >"$p" || exit 1
flag=
how=plain
if cp --reflink=always "$p" "$p.2" 2>/dev/null; then
	flag=--reflink=auto
	how=reflink
elif cp --reflink=auto "$p" "$p.2" 2>/dev/null; then
	flag=--reflink=auto
fi
rm -f "$p" "$p.2"
for r in "$@"; do
	n=1
	until cp -a $flag "/from/$r/." "/to/$r/"; do
		if [ "$n" -ge ` + "{{attempts}}" + ` ]; then
			echo "berth: copying the $r volume failed $n times" >&2
			exit 1
		fi
		n=$((n+1))
		rm -rf "/to/$r/"* "/to/$r/".[!.]* "/to/$r/"..?*
	done
	echo "attempts $r $n"
	echo "du $(du -sk "/to/$r")"
done
echo "how $how"
`

// helperCaps are the capabilities of the copying helper: cp -a as root
// reads every file and keeps owners, modes and set-id bits.
var helperCaps = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID"}

// runCopy copies the pairs' volumes in one short-lived helper container
// run from image (the environment's configured image: berth's shell needs
// sh and cp there already), as root, with no network and every other
// capability dropped, the sources mounted read-only. labels (plus
// LabelOwner) mark the helper for the sweep.
func runCopy(ctx context.Context, cli *client.Client, host, image string, pairs []copyPair, labels map[string]string) (copyResult, error) {
	if len(pairs) == 0 {
		return copyResult{how: "plain"}, nil
	}
	l := map[string]string{LabelOwner: currentOwner()}
	for k, v := range labels {
		l[k] = v
	}
	args := []string{"/bin/sh", "-c", strings.ReplaceAll(copyScript, "{{attempts}}", strconv.Itoa(copyAttempts)), "sh"}
	var mounts []mount.Mount
	for _, p := range pairs {
		args = append(args, p.role)
		mounts = append(mounts,
			mount.Mount{Type: mount.TypeVolume, Source: p.from, Target: "/from/" + p.role, ReadOnly: true,
				VolumeOptions: &mount.VolumeOptions{NoCopy: true}},
			mount.Mount{Type: mount.TypeVolume, Source: p.to, Target: "/to/" + p.role,
				VolumeOptions: &mount.VolumeOptions{NoCopy: true}})
	}
	pids := int64(64)
	cfg := &container.Config{
		Image: image, User: "0:0", WorkingDir: "/", Labels: l,
		Entrypoint: args[:1], Cmd: args[1:],
	}
	hc := &container.HostConfig{
		CapDrop:     []string{"ALL"},
		CapAdd:      helperCaps,
		SecurityOpt: []string{"no-new-privileges"},
		NetworkMode: "none",
		LogConfig:   container.LogConfig{Type: "json-file"},
		Mounts:      mounts,
		Resources:   container.Resources{PidsLimit: &pids},
	}
	cr, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hc})
	if err != nil {
		return copyResult{}, wrap(host, err, "create the helper copying volumes")
	}
	defer func() {
		_, _ = cli.ContainerRemove(context.WithoutCancel(ctx), cr.ID, client.ContainerRemoveOptions{Force: true})
	}()
	if _, err := cli.ContainerStart(ctx, cr.ID, client.ContainerStartOptions{}); err != nil {
		return copyResult{}, wrap(host, err, "start the helper copying volumes")
	}
	w := cli.ContainerWait(ctx, cr.ID, client.ContainerWaitOptions{})
	var code int64
	select {
	case r := <-w.Result:
		code = r.StatusCode
		if r.Error != nil && r.Error.Message != "" {
			return copyResult{}, fmt.Errorf("docker: the helper copying volumes: %s", r.Error.Message)
		}
	case err := <-w.Error:
		return copyResult{}, wrap(host, err, "wait for the helper copying volumes")
	}
	logs, err := cli.ContainerLogs(ctx, cr.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return copyResult{}, wrap(host, err, "read the output of the helper copying volumes")
	}
	var stdout, stderr bytes.Buffer
	_, err = stdcopy.StdCopy(&stdout, &stderr, logs)
	logs.Close()
	if err != nil {
		return copyResult{}, wrap(host, err, "read the output of the helper copying volumes")
	}
	if code != 0 {
		return copyResult{}, fmt.Errorf("docker: copying volumes in a helper from %s failed (exit %d): %s", image, code, tail(stderr.String()))
	}
	res := copyResult{how: "plain"}
	for _, line := range strings.Split(stdout.String(), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "how":
			res.how = f[1]
		case len(f) == 3 && f[0] == "attempts" && f[2] != "1":
			res.retried = append(res.retried, f[1])
		case len(f) >= 2 && f[0] == "du":
			if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				res.bytes += kb << 10
			}
		}
	}
	return res, nil
}

// tail is the end of a helper's error output, for an error message.
func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}

// checkpointAdmin removes checkpoints (Registration.Checkpoints) on the
// daemon the options name, with or without the environment.
type checkpointAdmin struct{}

// Remove deletes the checkpoint's image and volumes. An image a container
// still runs from (an environment made from the checkpoint) is untagged;
// the daemon deletes it with that container, or the next sweep does.
func (checkpointAdmin) Remove(ctx context.Context, opts backend.Options, cp backend.Checkpoint) error {
	if cp.Backend != "" && cp.Backend != Name {
		return fmt.Errorf("docker: checkpoint %s was made by %s, not docker", cp.ID, cp.Backend)
	}
	cli, err := connect(ctx, opts.Getenv)
	if err != nil {
		return err
	}
	defer cli.Close()
	return removeCheckpoint(ctx, cli, daemonHost(opts.Getenv), cp)
}

// removeCheckpoint removes what cp keeps, found by its Meta and by its
// LabelCheckpoint; what is already gone is no error.
func removeCheckpoint(ctx context.Context, cli *client.Client, host string, cp backend.Checkpoint) error {
	if cp.ID == "" || !strings.HasPrefix(cp.ID, "berth-ckpt-") {
		return fmt.Errorf("docker: %q is not the id of a docker checkpoint (berth-ckpt-...)", cp.ID)
	}
	var errs []error
	// The helpers first: one copying from the volumes holds them.
	helpers, err := cli.ContainerList(ctx, client.ContainerListOptions{
		All: true, Filters: make(client.Filters).Add("label", LabelHelper, LabelCheckpoint+"="+cp.ID),
	})
	if err != nil {
		return wrap(host, err, "list helpers of checkpoint %s", cp.ID)
	}
	for _, h := range helpers.Items {
		if _, err := cli.ContainerRemove(ctx, h.ID, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, wrap(host, err, "remove helper %s of checkpoint %s", shortID(h.ID), cp.ID))
		}
	}
	refs := []string{}
	if t := cp.Meta["tag"]; t != "" {
		refs = append(refs, t)
	}
	imgs, err := cli.ImageList(ctx, client.ImageListOptions{
		All: true, Filters: make(client.Filters).Add("label", LabelCheckpoint+"="+cp.ID),
	})
	if err != nil {
		return wrap(host, err, "list images of checkpoint %s", cp.ID)
	}
	for _, im := range imgs.Items {
		tags := tagsOf(im.RepoTags)
		refs = append(refs, tags...)
		if len(tags) == 0 {
			refs = append(refs, im.ID)
		}
	}
	for _, ref := range dedupe(refs) {
		errs = append(errs, removeImage(ctx, cli, host, ref))
	}
	vols, err := cli.VolumeList(ctx, client.VolumeListOptions{
		Filters: make(client.Filters).Add("label", LabelCheckpoint+"="+cp.ID),
	})
	if err != nil {
		return wrap(host, err, "list volumes of checkpoint %s", cp.ID)
	}
	var names []string
	for k, v := range cp.Meta {
		if strings.HasPrefix(k, "volume.") && strings.HasPrefix(v, cp.ID+"-") {
			names = append(names, v)
		}
	}
	for _, v := range vols.Items {
		if v.Labels[LabelPending] == "" { // the marker goes last
			names = append(names, v.Name)
		}
	}
	for _, name := range dedupe(names) {
		if _, err := cli.VolumeRemove(ctx, name, client.VolumeRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, wrap(host, err, "remove volume %s of checkpoint %s", name, cp.ID))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, v := range vols.Items {
		if v.Labels[LabelPending] != "" {
			if _, err := cli.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
				errs = append(errs, wrap(host, err, "remove pending marker %s", v.Name))
			}
		}
	}
	return errors.Join(errs...)
}

// removeImage deletes image ref with its untagged parents; when a
// container still runs from it, it is only untagged (forced).
func removeImage(ctx context.Context, cli *client.Client, host, ref string) error {
	_, err := cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{PruneChildren: true})
	if cerrdefs.IsConflict(err) {
		_, err = cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	}
	if err != nil && !cerrdefs.IsNotFound(err) {
		return wrap(host, err, "remove checkpoint image %s", ref)
	}
	return nil
}

// dropRemovedCheckpointImage deletes the image of the checkpoint the
// environment was made from when the checkpoint was removed meanwhile (the
// image untagged, kept only for this container); called once the
// container is gone.
func (b *Backend) dropRemovedCheckpointImage(ctx context.Context) {
	if b.spec.fromImage == "" {
		return
	}
	img, err := b.cli.ImageInspect(ctx, b.spec.fromImage)
	if err != nil || len(tagsOf(img.RepoTags)) > 0 {
		return
	}
	_, err = b.cli.ImageRemove(ctx, img.ID, client.ImageRemoveOptions{PruneChildren: true})
	if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
		b.log.Warn("docker: removing the image of a removed checkpoint failed; the next sweep removes it", "image", img.ID, "err", err)
	}
}

// tagsOf drops the "<none>:<none>" older daemons list for an untagged
// image.
func tagsOf(repoTags []string) []string {
	var out []string
	for _, t := range repoTags {
		if t != "<none>:<none>" && t != "" {
			out = append(out, t)
		}
	}
	return out
}

func dedupe(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

// sweepCheckpoints removes what berths that died while making a checkpoint
// or restoring one left: for a pending marker whose owner is gone, the
// checkpoint's image and volumes, or the restored key's volumes no
// container uses; helpers of dead owners; and untagged checkpoint images no
// container runs from any more (a checkpoint removed while an environment
// made from it ran). It returns what it removed, for the log.
func sweepCheckpoints(ctx context.Context, cli *client.Client, host string) ([]string, error) {
	var removed []string
	var errs []error
	helpers, err := cli.ContainerList(ctx, client.ContainerListOptions{
		All: true, Filters: make(client.Filters).Add("label", LabelHelper),
	})
	if err != nil {
		return nil, wrap(host, err, "list volume-copying helpers")
	}
	for _, h := range helpers.Items {
		if !procmark.Gone(h.Labels[LabelOwner]) {
			continue
		}
		if _, err := cli.ContainerRemove(ctx, h.ID, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, wrap(host, err, "remove helper %s of a dead berth", shortID(h.ID)))
			continue
		}
		removed = append(removed, "helper "+shortID(h.ID))
	}
	markers, err := cli.VolumeList(ctx, client.VolumeListOptions{
		Filters: make(client.Filters).Add("label", LabelBerth+"=1", LabelPending),
	})
	if err != nil {
		return removed, errors.Join(append(errs, wrap(host, err, "list pending markers"))...)
	}
	for _, m := range markers.Items {
		if !procmark.Gone(m.Labels[LabelOwner]) {
			continue
		}
		switch m.Labels[LabelPending] {
		case "checkpoint":
			id := m.Labels[LabelCheckpoint]
			if err := removeCheckpoint(ctx, cli, host, backend.Checkpoint{ID: id}); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, "half-made checkpoint "+id)
		case "restore":
			// Volumes a container uses stay: a later restore or a fresh
			// environment of the key may have succeeded meanwhile.
			key := m.Labels[LabelRestoreKey]
			if err := removeVolumes(ctx, cli, host, key); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, "half-restored "+key)
		}
		if _, err := cli.VolumeRemove(ctx, m.Name, client.VolumeRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, wrap(host, err, "remove pending marker %s of a dead berth", m.Name))
		}
	}
	imgs, err := cli.ImageList(ctx, client.ImageListOptions{
		Filters: make(client.Filters).Add("label", LabelCheckpoint).Add("dangling", "true"),
	})
	if err != nil {
		return removed, errors.Join(append(errs, wrap(host, err, "list untagged checkpoint images"))...)
	}
	for _, im := range imgs.Items {
		_, err := cli.ImageRemove(ctx, im.ID, client.ImageRemoveOptions{PruneChildren: true})
		switch {
		case err == nil:
			removed = append(removed, "untagged checkpoint image "+shortID(strings.TrimPrefix(im.ID, "sha256:")))
		case cerrdefs.IsConflict(err) || cerrdefs.IsNotFound(err):
			// still run by a container, or gone meanwhile
		default:
			errs = append(errs, wrap(host, err, "remove untagged checkpoint image %s", im.ID))
		}
	}
	return removed, errors.Join(errs...)
}
