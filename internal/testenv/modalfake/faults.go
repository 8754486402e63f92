package modalfake

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	pb "github.com/modal-labs/libmodal/modal-go/proto/modal_proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/a55dbaac/berth/internal/testenv/fault"
)

// Faults are the ways the real Modal is less kind than a fake that answers
// every call at once. Each is off in the zero value; Realistic turns all of
// them on with small random delays. Every field names the source that says
// the real service behaves so.
//
// Faults is the Modal plan on the vocabulary of package fault, as
// daytonafake.Unkind is Daytona's: the switches differ because the
// services do, the way a fault is drawn does not. Every random decision
// comes from the server's fault seed (Options.Seed), in a stream per
// fault and per sandbox (numbered in the order of their creation), exec
// and output stream, so that a seed replays what one sandbox meets
// whatever the others did meanwhile (see package fault for what it cannot
// replay).
type Faults struct {
	// SchedulingDelay: for this long after SandboxCreate the sandbox is
	// still being scheduled (its image pulled) and SandboxGetTaskId
	// answers with an empty task id and no result.
	//
	// Source: libmodal commit 3bb22b7 "Add polling to getTaskId in Go and
	// JS" and the modal-go 0.7.2 changelog ("wait for newly created
	// sandboxes to be ready and not error immediately"); modal-go v0.7.3
	// sandbox.go ensureTaskID polls SandboxGetTaskId every 500 ms for
	// exactly this answer.
	SchedulingDelay Jitter

	// ExpiryEarly: a sandbox dies at its timeout however busy it is (the
	// fake always enforces that, counting from when it accepted
	// SandboxCreate, as the service does); this makes it die up to that
	// much earlier still, as a service whose clock runs ahead of the
	// client's does. A client that waits until the last moment of the
	// lifetime it asked for loses the sandbox.
	//
	// Source: Modal's Sandbox docs (timeout is the maximum lifetime,
	// default 5 minutes, at most 24 hours; TIMEOUT ends it, exit 124 in
	// modal-go sandbox.go getReturnCode); the skew itself is not
	// documented (clocks of two machines).
	ExpiryEarly Jitter

	// RateLimit meters sandbox creations and ephemeral secret creations
	// with a token bucket; a call that finds it empty fails with
	// RESOURCE_EXHAUSTED carrying an RPCRetryPolicy detail whose
	// retry_after_secs says when the next token comes (gRPC's
	// Retry-After).
	//
	// Source: Modal's ResourceExhaustedError
	// (modal.com/docs/reference/modal.exception) and Modal's Harbor guide
	// ("Modal limits Sandbox resource requests ... using the token bucket
	// algorithm ... refilled at a constant rate of 5 tokens/sec ... a burst
	// credit of 150"); modal-client go/client.go getServerRetryPolicy reads
	// RPCRetryPolicy from the error details (Go SDK 0.7.5: "respond more
	// gracefully to server throttling ... by backing off"); Go SDK 0.9.0
	// mentions "the secret creation limits".
	RateLimit RateLimit

	// Transient is the probability (fault.Chance) that a call fails with
	// UNAVAILABLE before it reaches its handler (control plane and command
	// router), and that a stdout/stderr stream breaks with UNAVAILABLE
	// before a chunk, so the client must resume from its offset.
	//
	// Source: modal-go client.go retryableGrpcStatusCodes and
	// task_command_router_client.go commandRouterRetryableCodes (the SDK
	// retries UNAVAILABLE, INTERNAL, UNKNOWN, DEADLINE_EXCEEDED and
	// CANCELLED 3 times on the control plane, 10 times on the router);
	// modal-client modal/_utils/grpc_utils.py RETRYABLE_GRPC_STATUS_CODES.
	Transient float64

	// SilentRouter: once a sandbox has finished (terminated from outside,
	// timed out), the command router of its worker stops answering
	// instead of ending its streams with EOF and reporting the execs'
	// deaths: every router call and open stream for its task hangs until
	// the caller gives up.
	//
	// Source: the router is a per-worker host reached at the URL of
	// TaskGetCommandRouterAccess (modal-go task_command_router_client.go
	// initTaskCommandRouterClient); a worker that is gone cannot answer,
	// and the SDK retries stdio reads about 10 times and TaskExecWait
	// forever (fakes-fidelity study 2026-11-25, Modal item 5).
	SilentRouter bool

	// SnapshotDelay: every SandboxSnapshotFs takes this much longer; past
	// the request's timeout it answers with a TIMEOUT result, as a
	// snapshot of a large filesystem does.
	//
	// Source: modal-client Go SDK 0.7.5 changelog ("improved the
	// reliability of the Sandbox.SnapshotFilesystem operation, especially
	// for large snapshots, and we now support setting a Timeout longer
	// than 55s"); the request carries a timeout (SandboxSnapshotFsRequest
	// .timeout) and the result a status.
	SnapshotDelay Jitter

	// SnapshotInterrupted is the probability (fault.Chance) that a
	// sandbox ends (TERMINATED, as from the dashboard, by its lifetime or
	// an OOM) just as its filesystem snapshot is asked for: the snapshot
	// then fails as a snapshot of a finished sandbox does, nothing is
	// kept, and the sandbox's files are gone. Off in Realistic: no client
	// keeps files its sandbox lost, so a suite cannot pass under it; it
	// is for tests of the error a client gives.
	//
	// Source: Modal's guide "Sandbox Exit Snapshots"
	// (modal.com/docs/guide/sandbox-exit-snapshots): exit snapshots exist
	// for a sandbox that is gone, because snapshot_filesystem needs a
	// running one, and to avoid "races between your own teardown and an
	// in-flight manual snapshot"; modal-go v0.7.3 sandbox.go
	// SnapshotFilesystem turns a result that is not a success into
	// ExecutionError "Sandbox snapshot failed: ...".
	SnapshotInterrupted float64

	// SnapshotTTL: a filesystem snapshot's image is gone this long
	// (drawn per snapshot) after it was taken, as a hard cutoff: its id
	// is then unknown (ImageFromId, SandboxCreate and ImageDelete answer
	// NotFound, "Image '...' not found") and its content removed. Off
	// in Realistic: Modal's guide gives filesystem snapshots taken
	// without a TTL (modal-go v0.7.3 sends none) indefinite retention.
	//
	// Source: libmodal modal-js/src/sandbox.ts
	// SandboxSnapshotFilesystemParams.ttlMs ("Lifetime of the resulting
	// image ..., as a hard cutoff measured from creation. Defaults to 30
	// days") and the later modal-go Sandbox.SnapshotFilesystem docs ("If
	// params is nil, the resulting image is retained for 30 days"); the
	// guide's retention table (modal.com/docs/guide/sandbox-snapshots:
	// "Filesystem Snapshot | Indefinite (until explicitly deleted)");
	// modal-go v0.7.3 test/image_test.go TestImageDelete ("Image .+ not
	// found" for a deleted and for an unknown id).
	SnapshotTTL Jitter
}

// Realistic returns every fault a client can live through on, with small
// random delays: what a test of "berth on the real Modal" runs against.
// Delays stay under a second so that a suite run against it stays fast
// and bounded. SnapshotInterrupted and SnapshotTTL stay off (see them).
func Realistic() Faults {
	return Faults{
		SchedulingDelay: Jitter{Min: 100 * time.Millisecond, Max: 700 * time.Millisecond},
		ExpiryEarly:     Jitter{Max: 500 * time.Millisecond},
		RateLimit:       RateLimit{Rate: 2, Burst: 3},
		Transient:       0.03,
		SilentRouter:    true,
		SnapshotDelay:   Jitter{Min: 100 * time.Millisecond, Max: 800 * time.Millisecond},
	}
}

// Jitter is a delay drawn from Min to Max (fault.Jitter).
type Jitter = fault.Jitter

// RateLimit is a token bucket: Burst tokens at most, Rate tokens a second
// (fault.TokenBucket). A zero Rate means no limit.
type RateLimit = fault.TokenBucket

// limited are the control-plane methods the rate limit meters: creations
// of sandboxes and of (ephemeral) secrets.
var limited = map[string]bool{
	pb.ModalClient_SandboxCreate_FullMethodName:     true,
	pb.ModalClient_SecretGetOrCreate_FullMethodName: true,
}

// injected is a deterministic fault queued by Inject: the next calls of a
// method fail.
type injected struct {
	n          int
	code       codes.Code
	retryAfter time.Duration
}

// faults is a server's fault state.
type faults struct {
	src    *fault.Source // set by New
	bucket fault.Bucket  // RateLimit's state

	mu     sync.Mutex
	f      Faults
	queued map[string]*injected // full method name -> what its next calls get
}

// SetFaults replaces the faults the server shows from now on. The seed
// stays: the streams the new faults draw from go on where they were.
func (s *Server) SetFaults(f Faults) {
	s.faults.mu.Lock()
	s.faults.f = f
	s.faults.mu.Unlock()
	s.faults.bucket.Reset()
}

// Seed is the seed the server's faults are drawn from.
func (s *Server) Seed() uint64 { return s.faults.src.Seed() }

// Decisions returns the fault decisions the server made so far, by stream
// (see fault.Source.Decisions): two servers of one seed that met the same
// calls return the same.
func (s *Server) Decisions() []fault.Decision { return s.faults.src.Decisions() }

// draw draws the delay of the next event of the stream identity from j;
// no delay, and no draw, when j is off.
func (s *Server) draw(identity string, j Jitter) time.Duration {
	if !j.On() {
		return 0
	}
	return s.faults.src.Stream(identity).Delay(j)
}

// Faults returns the faults the server shows.
func (s *Server) Faults() Faults {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	return s.faults.f
}

// Inject makes the next n calls of method (its full gRPC name, e.g.
// pb.ModalClient_SandboxCreate_FullMethodName, or a suffix such as
// "/SandboxCreate") fail with code before they reach the handler, whatever
// the Faults say: the deterministic form of RateLimit (code
// RESOURCE_EXHAUSTED, retryAfter > 0 adds the RPCRetryPolicy detail) and
// Transient (UNAVAILABLE). n < 0 fails every call until Inject is called
// again with 0.
func (s *Server) Inject(method string, n int, code codes.Code, retryAfter time.Duration) {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	if s.faults.queued == nil {
		s.faults.queued = map[string]*injected{}
	}
	if n == 0 {
		delete(s.faults.queued, method)
		return
	}
	s.faults.queued[method] = &injected{n: n, code: code, retryAfter: retryAfter}
}

// Injected reports how many failures queued by Inject for method are left
// (-1: unlimited).
func (s *Server) Injected(method string) int {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	if q := s.faults.queued[method]; q != nil {
		return q.n
	}
	return 0
}

// current returns the faults in force.
func (s *Server) current() Faults {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	return s.faults.f
}

// admit decides, before a call reaches its handler, whether it fails:
// a queued injection first, then the rate limit, then a transient failure,
// drawn from the stream of the method and the call's subject (see
// Server.subject).
func (s *Server) admit(method, subject string) error {
	s.faults.mu.Lock()
	f := s.faults.f
	for name, q := range s.faults.queued {
		if name != method && !strings.HasSuffix(method, name) {
			continue
		}
		if q.n > 0 {
			q.n--
			if q.n == 0 {
				delete(s.faults.queued, name)
			}
		}
		s.faults.mu.Unlock()
		return faultError(q.code, q.retryAfter, method)
	}
	s.faults.mu.Unlock()
	if f.RateLimit.On() && limited[method] {
		if wait, ok := s.faults.bucket.Take(f.RateLimit, time.Now()); !ok {
			return faultError(codes.ResourceExhausted, wait, method)
		}
	}
	if t := fault.Chance(f.Transient); t.On() {
		id := "transient " + shortMethod(method)
		if subject != "" {
			id += " " + subject
		}
		if s.faults.src.Stream(id).Hit(t) {
			return faultError(codes.Unavailable, 0, method)
		}
	}
	return nil
}

// shortMethod is a full gRPC method name without its service.
func shortMethod(method string) string { return method[strings.LastIndexByte(method, '/')+1:] }

// subject names what a call acts on, for its fault stream: the sandbox (by
// its number), the exec in it and the output stream read, or "" for a call
// that names no sandbox the server knows.
func (s *Server) subject(req any) string {
	var sb *sandbox
	if r, ok := req.(interface{ GetTaskId() string }); ok && r.GetTaskId() != "" {
		sb, _ = s.sandboxByTask(r.GetTaskId())
	} else if r, ok := req.(interface{ GetSandboxId() string }); ok && r.GetSandboxId() != "" {
		sb, _ = s.sandboxByID(r.GetSandboxId())
	}
	if sb == nil {
		return ""
	}
	id := sb.ident()
	if r, ok := req.(interface{ GetExecId() string }); ok && r.GetExecId() != "" {
		sb.mu.Lock()
		e := sb.execs[r.GetExecId()]
		sb.mu.Unlock()
		if e != nil {
			id += " " + e.ident()
		}
	}
	if r, ok := req.(*pb.TaskExecStdioReadRequest); ok {
		id += " " + fdName(r.GetFileDescriptor())
	}
	return id
}

// fdName names an output stream in a fault stream's identity.
func fdName(fd pb.TaskExecStdioFileDescriptor) string {
	if fd == pb.TaskExecStdioFileDescriptor_TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR {
		return "stderr"
	}
	return "stdout"
}

// faultError is the error an injected fault answers with. A
// RESOURCE_EXHAUSTED with a delay carries Modal's RPCRetryPolicy detail.
func faultError(code codes.Code, retryAfter time.Duration, method string) error {
	name := shortMethod(method)
	var st *status.Status
	switch code {
	case codes.ResourceExhausted:
		st = status.Newf(code, "modalfake: rate limit exceeded for %s; retry after %v", name, retryAfter.Round(time.Millisecond))
	case codes.Unavailable:
		st = status.Newf(code, "modalfake: %s: upstream connect error or disconnect/reset before headers (transient)", name)
	default:
		st = status.Newf(code, "modalfake: injected %v for %s", code, name)
	}
	if code == codes.ResourceExhausted && retryAfter > 0 {
		d, err := st.WithDetails(pb.RPCRetryPolicy_builder{RetryAfterSecs: float32(retryAfter.Seconds())}.Build())
		if err == nil {
			st = d
		}
	}
	return st.Err()
}

// transientStreamBreak reports, before an output stream of e sends a
// chunk, whether it breaks there (Faults.Transient), drawn from the stream
// of that exec's output: how output is cut into chunks depends on when it
// is read, so which byte a break falls before is not replayed exactly.
func (s *Server) transientStreamBreak(e *execProc, fd string) error {
	t := fault.Chance(s.current().Transient)
	if !t.On() {
		return nil
	}
	if s.faults.src.Stream("stream break " + e.sb.ident() + " " + e.ident() + " " + fd).Hit(t) {
		return status.Error(codes.Unavailable, "modalfake: stream reset by peer (transient)")
	}
	return nil
}

// silence blocks a router call for a finished sandbox when the router is
// silent, until the caller gives up or the fake shuts down, and returns
// the error the caller then sees. It returns nil at once when the router
// answers.
func (s *Server) silence(ctx context.Context, sb *sandbox) error {
	if sb.finished() == nil || !s.current().SilentRouter {
		return nil
	}
	select {
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-s.ctx.Done():
		return status.Error(codes.Unavailable, "modalfake: shutting down")
	}
}

// String describes the faults in force, for logs.
func (f Faults) String() string {
	var on []string
	if f.SchedulingDelay.On() {
		on = append(on, "scheduling delay "+f.SchedulingDelay.String())
	}
	if f.ExpiryEarly.On() {
		on = append(on, "early expiry "+f.ExpiryEarly.String())
	}
	if f.RateLimit.On() {
		on = append(on, "rate limit "+f.RateLimit.String())
	}
	if f.Transient > 0 {
		on = append(on, fmt.Sprintf("transient failures %.0f%%", f.Transient*100))
	}
	if f.SilentRouter {
		on = append(on, "silent router")
	}
	if f.SnapshotDelay.On() {
		on = append(on, "snapshot delay "+f.SnapshotDelay.String())
	}
	if f.SnapshotInterrupted > 0 {
		on = append(on, fmt.Sprintf("snapshots interrupted %.0f%%", f.SnapshotInterrupted*100))
	}
	if f.SnapshotTTL.On() {
		on = append(on, "snapshot lifetime "+f.SnapshotTTL.String())
	}
	if len(on) == 0 {
		return "none"
	}
	return strings.Join(on, ", ")
}
