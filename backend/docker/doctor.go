package docker

import (
	"context"
	"fmt"
	"strings"

	"github.com/a55dbaac/berth/backend"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// Doctor reports whether the Docker backend can work here: whether the
// daemon answers, its version and API version, its storage driver, and which
// of berth's limits it enforces (cpu, memory, pids, disk quota). The disk
// quota is probed by creating (never starting) a throwaway container with a
// StorageOpt size when the configured image is present.
func Doctor(ctx context.Context, opts backend.Options) backend.Fingerprint {
	host := daemonHost(opts.Getenv)
	cli, err := connect(ctx, opts.Getenv)
	if err != nil {
		return backend.Fingerprint{
			Usable:  false,
			Summary: "no Docker daemon answers on " + socketName(host),
			Details: []string{err.Error()},
			Fix:     startHint,
		}
	}
	defer cli.Close()

	fp := backend.Fingerprint{Usable: true}
	ver, err := cli.ServerVersion(ctx, client.ServerVersionOptions{})
	if err != nil {
		return backend.Fingerprint{Summary: "Docker daemon on " + socketName(host) + " answers ping but not version", Details: []string{err.Error()}, Fix: startHint}
	}
	info, err := cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return backend.Fingerprint{Summary: "Docker daemon on " + socketName(host) + " answers ping but not info", Details: []string{err.Error()}, Fix: startHint}
	}
	in := info.Info
	backing := ""
	for _, kv := range in.DriverStatus {
		if kv[0] == "Backing Filesystem" {
			backing = kv[1]
		}
	}
	fp.Summary = fmt.Sprintf("Docker %s (API %s, client uses %s) on %s, storage %s", ver.Version, ver.APIVersion, cli.ClientVersion(), socketName(host), in.Driver)
	if backing != "" {
		fp.Summary += " on " + backing
	}
	yes := func(b bool, what, why string) string {
		if b {
			return what + ": enforced"
		}
		return what + ": NOT enforced (" + why + ")"
	}
	fp.Details = append(fp.Details,
		yes(in.CPUCfsQuota, "cpu limit (container_cpu)", "kernel lacks CFS quota"),
		yes(in.MemoryLimit, "memory limit (container_memory)", "memory cgroup unavailable"),
		yes(in.SwapLimit, "swap pinned to the memory limit", "no swap accounting: a container may swap past container_memory"),
		yes(in.PidsLimit, fmt.Sprintf("pids limit (%d)", pidsLimit), "pids cgroup unavailable"),
		diskQuota(ctx, cli, in.Driver, backing, opts),
		fmt.Sprintf("cgroup %s (%s driver), security options: %s", in.CgroupVersion, in.CgroupDriver, strings.Join(in.SecurityOptions, ", ")),
	)
	fp.Details = append(fp.Details, keptLines(opts)...)
	if _, err := keptFiles(opts); err != nil {
		fp.Usable = false
		fp.Fix = "bind a narrower host directory, bind it read-only (:ro), or move berth's home (BERTH_HOME) or config out of it"
	}
	image := opts.Config.String(keyImage)
	if image != "" {
		if _, err := cli.ImageInspect(ctx, image); err == nil {
			fp.Details = append(fp.Details, "image "+image+": present")
		} else {
			fp.Details = append(fp.Details, "image "+image+": not present locally (berth tries one pull, then asks you to build or import it)")
		}
	}
	return fp
}

// diskQuota tells whether the daemon accepts a per-container disk quota.
func diskQuota(ctx context.Context, cli *client.Client, driver, backing string, opts backend.Options) string {
	const what = "disk quota (container_disk, StorageOpt size)"
	image := opts.Config.String(keyImage)
	if image != "" {
		if _, err := cli.ImageInspect(ctx, image); err == nil {
			res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
				Config:     &container.Config{Image: image, Entrypoint: []string{"true"}, Labels: map[string]string{LabelBerth: "probe"}},
				HostConfig: &container.HostConfig{StorageOpt: map[string]string{"size": "1g"}},
			})
			if err == nil {
				_, _ = cli.ContainerRemove(context.WithoutCancel(ctx), res.ID, client.ContainerRemoveOptions{Force: true})
				return what + ": enforced"
			}
			if isStorageOptRefused(err) {
				return what + ": NOT enforced (daemon refuses it: " + err.Error() + ")"
			}
		}
	}
	switch {
	case driver == "overlay2" && backing == "xfs":
		return what + ": maybe (overlay2 on xfs: needs the pquota mount option)"
	case driver == "btrfs" || driver == "zfs" || driver == "devicemapper" || driver == "windowsfilter":
		return what + ": probably enforced (" + driver + ")"
	default:
		return what + ": NOT enforced (storage driver " + driver + " on " + backing + "; needs overlay2 on xfs with pquota)"
	}
}

// keptFiles is what keepBerthsFiles would add for opts, making nothing.
func keptFiles(opts backend.Options) ([]keptBind, error) {
	binds, _, err := configuredBinds(opts.Config)
	if err != nil {
		return nil, err
	}
	return keepBerthsFiles(opts, binds, false)
}

// keptLines says where berth's own files lie against the host directories
// bound into the container, and what keeps them.
func keptLines(opts backend.Options) []string {
	kept, err := keptFiles(opts)
	switch {
	case err != nil:
		return []string{"berth's own files: CANNOT start with these binds: " + err.Error()}
	case len(kept) == 0:
		return []string{"berth's home and config: outside every host directory bound writable into the container (docker_volumes, docker_mount_cwd_to_workspace): out of the commands' reach"}
	}
	var lines []string
	for _, k := range kept {
		if k.readOnly {
			lines = append(lines, fmt.Sprintf("%s (berth's own settings) lies in a host directory bound writable into the container: kept read-only there (at %s) by a nested read-only bind", k.host, k.target))
		}
	}
	return lines
}
