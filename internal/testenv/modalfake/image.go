package modalfake

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	pb "github.com/modal-labs/libmodal/modal-go/proto/modal_proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// image is a Modal image: a registry image of the Docker daemon or a
// snapshot the fake committed.
type image struct {
	id       string // "im-..."
	ref      string // what Docker knows it by: a tag, or an image id for snapshots
	tag      string // the registry tag it was built from ("" for snapshots)
	snapshot bool
	expires  time.Time // when a snapshot's lifetime ends (Faults.SnapshotTTL); zero: never
}

// pullTimeout bounds a pull of an image the daemon does not have.
const pullTimeout = 2 * time.Minute

// ImageGetOrCreate "builds" an image from a registry tag: the fake supports
// exactly the one-layer images of Images.FromRegistry ("FROM <tag>"), found
// in the Docker daemon or pulled into it. The same tag gives the same id.
// Anything else (more layers, private registry credentials) is a build
// failure that says so.
func (c *control) ImageGetOrCreate(ctx context.Context, req *pb.ImageGetOrCreateRequest) (*pb.ImageGetOrCreateResponse, error) {
	s := c.s
	s.mu.Lock()
	_, appOK := s.appEnv[req.GetAppId()]
	s.mu.Unlock()
	if !appOK {
		return nil, status.Errorf(codes.NotFound, "App '%s' not found", req.GetAppId())
	}
	def := req.GetImage()
	cmds := def.GetDockerfileCommands()
	fail := func(msg string) (*pb.ImageGetOrCreateResponse, error) {
		return pb.ImageGetOrCreateResponse_builder{
			ImageId: modalID("im"),
			Result:  result(pb.GenericResult_GENERIC_STATUS_FAILURE, 0, msg),
		}.Build(), nil
	}
	if len(cmds) != 1 || len(def.GetBaseImages()) > 0 || !strings.HasPrefix(cmds[0], "FROM ") {
		return fail(fmt.Sprintf("modalfake builds only registry images (one FROM line), got %q", cmds))
	}
	if def.GetImageRegistryConfig().GetSecretId() != "" {
		return fail("modalfake cannot use private registry credentials")
	}
	tag := strings.TrimSpace(strings.TrimPrefix(cmds[0], "FROM "))
	if tag == "" || strings.ContainsAny(tag, " \t") {
		return fail(fmt.Sprintf("malformed FROM line %q", cmds[0]))
	}
	s.mu.Lock()
	id, ok := s.imageTags[tag]
	s.mu.Unlock()
	if ok && !req.GetForceBuild() {
		if _, err := s.docker.ImageInspect(ctx, tag); err == nil {
			return pb.ImageGetOrCreateResponse_builder{ImageId: id, Result: result(pb.GenericResult_GENERIC_STATUS_SUCCESS, 0, "")}.Build(), nil
		}
	}
	if err := s.ensureImage(ctx, tag); err != nil {
		return fail(err.Error())
	}
	s.mu.Lock()
	if id, ok = s.imageTags[tag]; !ok {
		id = modalID("im")
		s.imageTags[tag] = id
		s.images[id] = &image{id: id, ref: tag, tag: tag}
	}
	s.mu.Unlock()
	return pb.ImageGetOrCreateResponse_builder{ImageId: id, Result: result(pb.GenericResult_GENERIC_STATUS_SUCCESS, 0, "")}.Build(), nil
}

// ensureImage makes sure the daemon has tag, pulling it if it can.
func (s *Server) ensureImage(ctx context.Context, tag string) error {
	_, err := s.docker.ImageInspect(ctx, tag)
	if err == nil {
		return nil
	}
	if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspect image %s: %v", tag, err)
	}
	pctx, cancel := context.WithTimeout(ctx, pullTimeout)
	defer cancel()
	resp, err := s.docker.ImagePull(pctx, tag, client.ImagePullOptions{})
	if err == nil {
		for _, perr := range drainPull(resp) {
			err = perr
		}
		resp.Close()
	}
	if err != nil {
		return fmt.Errorf("image %s is not in the Docker daemon and could not be pulled: %v", tag, err)
	}
	if _, err := s.docker.ImageInspect(ctx, tag); err != nil {
		return fmt.Errorf("image %s is not in the Docker daemon after a pull: %v", tag, err)
	}
	return nil
}

// drainPull reads a pull's progress stream and returns the errors in it.
func drainPull(r io.Reader) []error {
	b, err := io.ReadAll(r)
	if err != nil {
		return []error{err}
	}
	if i := strings.Index(string(b), `"error"`); i >= 0 {
		return []error{fmt.Errorf("%s", strings.TrimSpace(string(b[i:])))}
	}
	return nil
}

// imageByID finds an image that can still be used; NotFound otherwise.
func (s *Server) imageByID(ctx context.Context, id string) (*image, error) {
	s.expireImages(ctx)
	s.mu.Lock()
	img, ok := s.images[id]
	s.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "Image '%s' not found", id)
	}
	if _, err := s.docker.ImageInspect(ctx, img.ref); err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, status.Errorf(codes.NotFound, "Image '%s' not found (its content is gone)", id)
		}
		return nil, status.Errorf(codes.Internal, "inspect image %s: %v", id, err)
	}
	return img, nil
}

// ImageFromId looks an image up by id.
func (c *control) ImageFromId(ctx context.Context, req *pb.ImageFromIdRequest) (*pb.ImageFromIdResponse, error) {
	img, err := c.s.imageByID(ctx, req.GetImageId())
	if err != nil {
		return nil, err
	}
	return pb.ImageFromIdResponse_builder{ImageId: img.id}.Build(), nil
}

// ImageDelete deletes an image: a snapshot's content is removed from the
// daemon; a registry image is only forgotten (the registry keeps it).
func (c *control) ImageDelete(ctx context.Context, req *pb.ImageDeleteRequest) (*emptypb.Empty, error) {
	s := c.s
	s.expireImages(ctx)
	s.mu.Lock()
	img, ok := s.images[req.GetImageId()]
	if ok {
		delete(s.images, img.id)
		if img.tag != "" && s.imageTags[img.tag] == img.id {
			delete(s.imageTags, img.tag)
		}
	}
	s.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "Image '%s' not found", req.GetImageId())
	}
	if img.snapshot {
		// A sandbox made from it runs on (its content goes with the last
		// one, dropDeletedImage).
		s.removeImageContent(ctx, img.ref)
	}
	return &emptypb.Empty{}, nil
}
