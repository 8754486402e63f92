package docker

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// LabelOwner names the berth process that created a container:
// "<boot id>/<pid>/<process start time in clock ticks>". With the boot id
// and the start time a later berth on the same machine can tell whether
// that process still runs, even after its pid was reused.
const LabelOwner = "berth.owner"

var (
	ownerOnce sync.Once
	ownerSelf string
)

// currentOwner returns this process's owner label ("" when /proc cannot
// tell). Tests replace it to create containers owned by a dead process.
var currentOwner = func() string {
	ownerOnce.Do(func() { ownerSelf = ownerOf(os.Getpid()) })
	return ownerSelf
}

// bootID is this machine's boot id, "" when unknown.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// startTime reads a process's start time (clock ticks since boot) from
// /proc; ok is false when the process does not exist.
func startTime(pid int) (string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", false
	}
	f := strings.Fields(s[i+1:])
	// Fields after the command name start with the state (field 3); the
	// start time is field 22.
	if len(f) < 20 {
		return "", false
	}
	return f[19], true
}

// ownerOf builds the owner label of a live process.
func ownerOf(pid int) string {
	boot := bootID()
	st, ok := startTime(pid)
	if boot == "" || !ok {
		return ""
	}
	return boot + "/" + strconv.Itoa(pid) + "/" + st
}

// ownerGone reports whether label names a process of this boot of this
// machine that no longer runs. Owners elsewhere (another machine using the
// same daemon) or unreadable labels are never judged gone.
func ownerGone(label string) bool {
	parts := strings.Split(label, "/")
	if len(parts) != 3 || parts[0] != bootID() || parts[0] == "" {
		return false
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil || pid <= 0 {
		return false
	}
	st, alive := startTime(pid)
	return !alive || st != parts[2]
}

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
		if c.State != container.StateRunning || !ownerGone(c.Labels[LabelOwner]) {
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
