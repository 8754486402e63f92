package modalfake

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	pb "github.com/modal-labs/libmodal/modal-go/proto/modal_proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/a55dbaac/berth/internal/testenv/fault"
)

// Filesystem snapshots as Modal documents them (modal.com/docs/guide/
// sandbox-snapshots): an image of the running sandbox's filesystem, taken
// without stopping it, that any number of new sandboxes can be created
// from until it is deleted (Images.Delete: "irreversible and will prevent
// Functions/Sandboxes from using the Image", modal-go v0.7.3 image.go) or
// its lifetime ends (Faults.SnapshotTTL). A sandbox already made from a
// deleted image runs on. The unkind parts are Faults' switches:
// SnapshotDelay (slow, past the request's timeout: TIMEOUT),
// SnapshotInterrupted (the sandbox ends as the snapshot is asked for) and
// SnapshotTTL (the image id becomes unknown).

// snapshotHold holds the snapshots in progress for a test (HoldSnapshots).
type snapshotHold struct {
	held     chan string // the sandbox id of each snapshot held
	released chan struct{}
	once     sync.Once
}

// HoldSnapshots makes every SandboxSnapshotFs from now on wait, once it is
// accepted and before anything is committed, until release is called (or
// its sandbox finishes, its timeout passes or its caller gives up): a test
// of what goes on while a snapshot is in progress then checks it inside
// the snapshot by construction, not by timing. Each held snapshot sends
// its sandbox id on held (64 unread at most; later ones are not sent). release lets
// them all go on and ends the hold; it is idempotent.
func (s *Server) HoldSnapshots() (held <-chan string, release func()) {
	h := &snapshotHold{held: make(chan string, 64), released: make(chan struct{})}
	s.mu.Lock()
	s.hold = h
	s.mu.Unlock()
	return h.held, func() {
		h.once.Do(func() {
			s.mu.Lock()
			if s.hold == h {
				s.hold = nil
			}
			s.mu.Unlock()
			close(h.released)
		})
	}
}

// beforeSnapshot is what happens to an accepted snapshot before anything is
// committed: a test's hold, then Faults.SnapshotInterrupted. It returns the
// answer to give instead of a snapshot, or nil to go on. ctx carries the
// request's timeout.
func (s *Server) beforeSnapshot(ctx context.Context, sb *sandbox) (*pb.SandboxSnapshotFsResponse, error) {
	s.mu.Lock()
	h := s.hold
	s.mu.Unlock()
	if h != nil {
		select {
		case h.held <- sb.id:
		default:
		}
		select {
		case <-h.released:
		case <-sb.done:
		case <-s.ctx.Done():
			return nil, status.Error(codes.Unavailable, "modalfake: shutting down")
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return pb.SandboxSnapshotFsResponse_builder{Result: result(pb.GenericResult_GENERIC_STATUS_TIMEOUT, 0, "snapshot timed out")}.Build(), nil
			}
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if t := fault.Chance(s.current().SnapshotInterrupted); t.On() && s.faults.src.Stream("snapshot interrupted "+sb.ident()).Hit(t) {
		s.log.Info("modalfake: the sandbox ends as its snapshot is asked for (SnapshotInterrupted)", "sandbox", sb.id)
		s.finish(sb, result(pb.GenericResult_GENERIC_STATUS_TERMINATED, 0, "Sandbox terminated while its filesystem snapshot was being taken"))
	}
	if sb.finished() != nil {
		return pb.SandboxSnapshotFsResponse_builder{
			Result: result(pb.GenericResult_GENERIC_STATUS_FAILURE, 0, "Sandbox has already finished; it cannot be snapshotted"),
		}.Build(), nil
	}
	return nil, nil
}

// snapshotExpiry is when a snapshot of sb taken now ends (Faults.SnapshotTTL);
// zero for never.
func (s *Server) snapshotExpiry(sb *sandbox) time.Time {
	j := s.current().SnapshotTTL
	if !j.On() {
		return time.Time{}
	}
	return time.Now().Add(s.draw("snapshot ttl "+sb.ident(), j))
}

// expireImages forgets the snapshots whose lifetime has ended and removes
// their content (what a running sandbox still uses stays until it ends).
func (s *Server) expireImages(ctx context.Context) {
	now := time.Now()
	var gone []*image
	s.mu.Lock()
	for id, img := range s.images {
		if !img.expires.IsZero() && !now.Before(img.expires) {
			delete(s.images, id)
			gone = append(gone, img)
		}
	}
	s.mu.Unlock()
	for _, img := range gone {
		s.log.Info("modalfake: a snapshot's lifetime ended (SnapshotTTL)", "image", img.id)
		s.removeImageContent(ctx, img.ref)
	}
}

// removeImageContent removes a snapshot's image from the daemon unless a
// container still uses it (a sandbox made from it runs on; dropDeletedImage
// removes it when the last one ends) or a later snapshot is built on it
// (removed with the fake).
func (s *Server) removeImageContent(ctx context.Context, ref string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := s.docker.ImageRemove(ctx, ref, client.ImageRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
		s.log.Debug("modalfake: a snapshot's content stays while something uses it", "image", ref, "err", err)
	}
}

// dropDeletedImage removes the content of the snapshot sb was made from
// when that snapshot was deleted (or expired) while sb ran: sb's container
// is gone, and with the last such container the image goes.
func (s *Server) dropDeletedImage(sb *sandbox) {
	if !sb.image.snapshot {
		return
	}
	s.mu.Lock()
	_, known := s.images[sb.image.id]
	s.mu.Unlock()
	if !known {
		s.removeImageContent(context.Background(), sb.image.ref)
	}
}

// SnapshotImages returns the ids of the filesystem snapshots that can be
// used now (not deleted, not past their lifetime), sorted.
func (s *Server) SnapshotImages() []string {
	s.expireImages(context.Background())
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id, img := range s.images {
		if img.snapshot {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}
