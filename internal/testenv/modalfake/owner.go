package modalfake

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

var osGetpid = os.Getpid

// ownerOf returns "<boot id>/<pid>/<start time in clock ticks>" for a live
// process, "" when /proc cannot tell.
func ownerOf(pid int) string {
	boot := bootID()
	st, ok := startTime(pid)
	if boot == "" || !ok {
		return ""
	}
	return boot + "/" + strconv.Itoa(pid) + "/" + st
}

func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

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
	if len(f) < 20 {
		return "", false
	}
	return f[19], true
}

// ownerGone reports whether label names a process of this boot that no
// longer runs; unreadable labels or other boots are never judged gone.
func ownerGone(label string) bool {
	parts := strings.Split(label, "/")
	if len(parts) != 3 || parts[0] == "" || parts[0] != bootID() {
		return false
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil || pid <= 0 {
		return false
	}
	st, alive := startTime(pid)
	return !alive || st != parts[2]
}

// reapCrashed removes the containers and images of fakes whose process died
// without closing (a test binary killed by its timeout, say).
func (s *Server) reapCrashed(ctx context.Context) {
	list, err := s.docker.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", LabelInstance),
	})
	if err != nil {
		s.log.Warn("modalfake: list leftover containers", "err", err)
		return
	}
	done := map[string]bool{}
	for _, c := range list.Items {
		inst := c.Labels[LabelInstance]
		if done[inst] || !ownerGone(c.Labels[LabelOwner]) {
			continue
		}
		done[inst] = true
		if err := s.removeLeftovers(ctx, inst); err != nil {
			s.log.Warn("modalfake: remove leftovers of a crashed fake", "instance", inst, "err", err)
		}
	}
	imgs, err := s.docker.ImageList(ctx, client.ImageListOptions{Filters: make(client.Filters).Add("label", LabelInstance)})
	if err != nil {
		return
	}
	for _, im := range imgs.Items {
		inst := im.Labels[LabelInstance]
		if done[inst] || !ownerGone(im.Labels[LabelOwner]) {
			continue
		}
		done[inst] = true
		if err := s.removeLeftovers(ctx, inst); err != nil {
			s.log.Warn("modalfake: remove leftovers of a crashed fake", "instance", inst, "err", err)
		}
	}
}

// removeLeftovers force-removes every container and image labelled with
// instance.
func (s *Server) removeLeftovers(ctx context.Context, instance string) error {
	var errs []error
	list, err := s.docker.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", LabelInstance+"="+instance),
	})
	if err != nil {
		return fmt.Errorf("modalfake: list containers of %s: %w", instance, err)
	}
	for _, c := range list.Items {
		if _, err := s.docker.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("modalfake: remove container %s: %w", c.ID[:12], err))
		}
	}
	imgs, err := s.docker.ImageList(ctx, client.ImageListOptions{Filters: make(client.Filters).Add("label", LabelInstance+"="+instance)})
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("modalfake: list images of %s: %w", instance, err))...)
	}
	for _, im := range imgs.Items {
		if _, err := s.docker.ImageRemove(ctx, im.ID, client.ImageRemoveOptions{Force: true, PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("modalfake: remove image %s: %w", im.ID, err))
		}
	}
	return errors.Join(errs...)
}
