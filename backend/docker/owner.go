package docker

import (
	"context"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/a55dbaac/berth/internal/procmark"
)

// LabelOwner names the berth process that created a container:
// "<boot id>/<pid>/<process start time in clock ticks>". With the boot id
// and the start time a later berth on the same machine can tell whether
// that process still runs, even after its pid was reused.
const LabelOwner = "berth.owner"

// currentOwner returns this process's owner label ("" when /proc cannot
// tell). Tests replace it to create containers owned by a dead process.
var currentOwner = procmark.Self

// reapDeadOwners handles running containers whose creating berth died
// without cleaning up (a crash, a kill -9): a throwaway container is
// removed with its volumes, a persistent one is stopped as a clean exit
// would have done, so it is reattached later instead of running forever.
func reapDeadOwners(ctx context.Context, cli *client.Client, host string) (removed, stopped []string, err error) {
	items, err := berthContainers(ctx, cli, host)
	if err != nil {
		return nil, nil, err
	}
	for _, c := range items {
		if c.State != container.StateRunning || !procmark.Gone(c.Labels[LabelOwner]) {
			continue
		}
		key := c.Labels[LabelKey]
		if c.Labels[LabelPersistent] == "1" {
			timeout := 3
			if _, err := cli.ContainerStop(ctx, c.ID, client.ContainerStopOptions{Timeout: &timeout}); err != nil && !cerrdefs.IsNotFound(err) {
				return removed, stopped, wrap(host, err, "stop orphaned container %s", c.ID[:12])
			}
			stopped = append(stopped, key)
			continue
		}
		if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return removed, stopped, wrap(host, err, "remove orphaned container %s", c.ID[:12])
		}
		if err := removeVolumes(ctx, cli, host, key); err != nil {
			return removed, stopped, err
		}
		removed = append(removed, key)
	}
	return removed, stopped, nil
}

// reapTimeout bounds the dead-owner sweep at backend construction.
const reapTimeout = 20 * time.Second
