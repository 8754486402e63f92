package docker

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/a55dbaac/berth/backend"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// pruneOrphans removes throwaway (non-persistent) berth containers stopped
// for longer than maxAge: leftovers of a berth that crashed. Persistent
// containers are stopped on purpose and kept.
func pruneOrphans(ctx context.Context, cli *client.Client, host string, maxAge time.Duration) ([]string, error) {
	return prune(ctx, cli, host, maxAge, false, nil)
}

// prune removes berth containers stopped for longer than maxAge, limited to
// those match accepts when match is not nil.
func prune(ctx context.Context, cli *client.Client, host string, maxAge time.Duration, persistentToo bool, match func(container.Summary) bool) ([]string, error) {
	items, err := berthContainers(ctx, cli, host)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var removed []string
	for _, c := range items {
		switch c.State {
		case container.StateExited, container.StateDead, container.StateCreated:
		default:
			continue
		}
		if !persistentToo && c.Labels[LabelPersistent] == "1" {
			continue
		}
		if match != nil && !match(c) {
			continue
		}
		stopped := time.Unix(c.Created, 0)
		if ins, err := cli.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{}); err == nil && ins.Container.State != nil {
			if t, err := time.Parse(time.RFC3339Nano, ins.Container.State.FinishedAt); err == nil && t.After(stopped) {
				stopped = t
			}
		}
		if now.Sub(stopped) < maxAge {
			continue
		}
		key := c.Labels[LabelKey]
		if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return removed, wrap(host, err, "remove container %s", c.ID[:12])
		}
		if err := removeVolumes(ctx, cli, host, key); err != nil {
			return removed, err
		}
		removed = append(removed, key)
	}
	return removed, nil
}

// removeEnv removes every container and volume labelled with key.
func removeEnv(ctx context.Context, cli *client.Client, host, key string) error {
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", LabelBerth+"=1", LabelKey+"="+key),
	})
	if err != nil {
		return wrap(host, err, "list containers of %s", key)
	}
	for _, c := range list.Items {
		if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return wrap(host, err, "remove container %s of %s", c.ID[:12], key)
		}
	}
	return removeVolumes(ctx, cli, host, key)
}

// removeVolumes removes the volumes of key (labelled with it, or carrying
// the names berth gives them) that no container uses any more.
func removeVolumes(ctx context.Context, cli *client.Client, host, key string) error {
	vols, err := cli.VolumeList(ctx, client.VolumeListOptions{
		Filters: make(client.Filters).Add("label", LabelBerth+"=1", LabelKey+"="+key),
	})
	if err != nil {
		return wrap(host, err, "list volumes of %s", key)
	}
	names := []string{volumeName(ContainerName(key), "root"), volumeName(ContainerName(key), "workspace")}
	for _, v := range vols.Items {
		if v.Name != names[0] && v.Name != names[1] {
			names = append(names, v.Name)
		}
	}
	for _, name := range names {
		_, err := cli.VolumeRemove(ctx, name, client.VolumeRemoveOptions{})
		if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
			return wrap(host, err, "remove volume %s", name)
		}
	}
	return nil
}

func berthContainers(ctx context.Context, cli *client.Client, host string) ([]container.Summary, error) {
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", LabelBerth+"=1"),
	})
	if err != nil {
		return nil, wrap(host, err, "list berth containers")
	}
	return list.Items, nil
}

// ensureImage makes sure image exists locally, pulling it once when it does
// not; the pull's progress goes to opts.Progress. No registry may be
// reachable: then the error names the image and says to build or import
// it.
func ensureImage(ctx context.Context, cli *client.Client, host, image string, opts backend.Options) error {
	_, err := cli.ImageInspect(ctx, image)
	if err == nil {
		return nil
	}
	if !cerrdefs.IsNotFound(err) {
		return wrap(host, err, "inspect image %s", image)
	}
	step := opts.Begin("pulling image "+image, "bytes")
	pullErr := func() error {
		resp, err := cli.ImagePull(ctx, image, client.ImagePullOptions{})
		if err != nil {
			return err
		}
		defer resp.Close()
		return followPull(ctx, resp, step)
	}()
	step.End(pullErr)
	if pullErr == nil {
		if _, err := cli.ImageInspect(ctx, image); err == nil {
			return nil
		}
	}
	if isConnErr(pullErr) && !strings.Contains(pullErr.Error(), "registry") {
		return unreachable(host, pullErr)
	}
	return fmt.Errorf("docker: image %s is not present locally and pulling it failed (%v); build or import it first "+
		"(docker build -t %s ., docker load -i image.tar, or docker import rootfs.tar %s), or set terminal.docker_image to an image the daemon has",
		image, pullErr, image, image)
}

// followPull reads a pull's messages to its end, reporting the bytes of
// the layers downloaded so far against their total to step.
func followPull(ctx context.Context, resp client.ImagePullResponse, step *backend.Step) error {
	type layer struct{ done, total int64 }
	layers := map[string]layer{}
	for jm, err := range resp.JSONMessages(ctx) {
		if err != nil {
			return err
		}
		if jm.Error != nil {
			return errors.New(jm.Error.Message)
		}
		if jm.ID == "" || jm.Progress == nil || jm.Progress.Total <= 0 {
			continue
		}
		if jm.Status == "Downloading" {
			layers[jm.ID] = layer{jm.Progress.Current, jm.Progress.Total}
			var done, total int64
			for _, l := range layers {
				done, total = done+l.done, total+l.total
			}
			step.Update(done, total)
		}
	}
	return nil
}

// envAdmin lists, removes and prunes berth's containers for `berth env`,
// on the daemon the options name (DOCKER_HOST from the environment or the
// .env file, else /var/run/docker.sock).
type envAdmin struct{}

func (envAdmin) List(ctx context.Context, opts backend.Options) ([]backend.EnvInfo, error) {
	cli, err := connect(ctx, opts.Getenv)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	items, err := berthContainers(ctx, cli, daemonHost(opts.Getenv))
	if err != nil {
		return nil, err
	}
	out := make([]backend.EnvInfo, 0, len(items))
	for _, c := range items {
		out = append(out, backend.EnvInfo{
			Backend: Name, Key: c.Labels[LabelKey], State: string(c.State),
			ID: c.ID, Image: c.Image, Created: time.Unix(c.Created, 0),
			Persistent: c.Labels[LabelPersistent] == "1",
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Remove deletes the environment of key: its container (running or not)
// and its volumes, persistent or not. Removing a key that has nothing is
// not an error.
func (envAdmin) Remove(ctx context.Context, opts backend.Options, key string) error {
	cli, err := connect(ctx, opts.Getenv)
	if err != nil {
		return err
	}
	defer cli.Close()
	return removeEnv(ctx, cli, daemonHost(opts.Getenv), key)
}

// Prune removes berth's containers that have not been running for longer
// than maxAge (exited, dead, or created and never started), with their
// volumes — persistent ones included — and returns the keys it removed.
// It also removes what a berth that died while making or restoring a
// checkpoint left (sweepCheckpoints).
func (envAdmin) Prune(ctx context.Context, opts backend.Options, maxAge time.Duration) ([]string, error) {
	cli, err := connect(ctx, opts.Getenv)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	host := daemonHost(opts.Getenv)
	_, sweepErr := sweepCheckpoints(ctx, cli, host)
	keys, err := prune(ctx, cli, host, maxAge, true, nil)
	return keys, errors.Join(err, sweepErr)
}
