package modalfake

import (
	"context"
	"errors"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/a55dbaac/berth/internal/procmark"
)

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
		if done[inst] || !procmark.Gone(c.Labels[LabelOwner]) {
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
		if done[inst] || !procmark.Gone(im.Labels[LabelOwner]) {
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
	// A snapshot of a sandbox made from a snapshot is its child: the
	// daemon removes a parent only after its children, in whatever order
	// the list came, so each pass removes what it can until one makes no
	// progress.
	left := make([]string, 0, len(imgs.Items))
	for _, im := range imgs.Items {
		left = append(left, im.ID)
	}
	for len(left) > 0 {
		var again []string
		var failed []error
		for _, id := range left {
			if _, err := s.docker.ImageRemove(ctx, id, client.ImageRemoveOptions{Force: true, PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
				again = append(again, id)
				failed = append(failed, fmt.Errorf("modalfake: remove image %s: %w", id, err))
			}
		}
		if len(again) == len(left) {
			errs = append(errs, failed...)
			break
		}
		left = again
	}
	return errors.Join(errs...)
}
