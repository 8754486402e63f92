// Package modalfake is a stand-in for Modal's control plane and task command
// router that the real Modal Go SDK (github.com/modal-labs/libmodal/modal-go)
// talks to over gRPC, through MODAL_SERVER_URL=http://127.0.0.1:PORT. No
// Modal service is reachable where berth is tested; this fake does the work
// for real instead:
//
//   - a sandbox is a real Docker container (label modalfake.instance) running
//     the definition's entrypoint (default: sleep until the timeout) under
//     the daemon's init, with the definition's working directory, cpu and
//     memory limits, and no network when the definition blocks it;
//   - an exec is a real process in it (a Docker exec), with its stdin,
//     stdout and stderr streamed through the command router's offset-based
//     RPCs and its real exit status (128+N after signal N, which is what the
//     SDK's Wait reports for a signal too);
//   - SnapshotFilesystem is a real commit whose image id ("im-...") new
//     sandboxes can be created from until it is deleted, taken without
//     pausing the container: a Modal snapshot does not stop the sandbox;
//   - files opened with Sandbox.Open are real file descriptors inside the
//     container's root (opened from the host through /proc/PID/root with
//     RESOLVE_IN_ROOT, so links cannot escape it);
//   - the sandbox timeout and idle timeout really terminate the container.
//     A sandbox is idle, as Modal documents, while no exec runs and no stdin
//     is written.
//
// It enforces what Modal documents: token id and secret on every call, a
// JWT from AuthTokenGet on unary calls and a per-task JWT on the command
// router (else codes.Unauthenticated); NotFound for unknown ids; no exec in
// a finished sandbox; SandboxTerminate returns a finished sandbox's result
// and otherwise terminates it (status TERMINATED); SandboxWait waits up to
// its timeout and returns no result while the sandbox runs.
//
// It implements exactly the RPCs the SDK uses for apps, registry images
// (only "FROM <image>" — the image must be in the Docker daemon or
// pullable), image lookup and deletion, ephemeral secrets, sandbox create,
// wait, terminate, task id, tags, list, lookup by name, filesystem
// snapshots, file open/read/write/flush/close, and exec start, stdin,
// stdout/stderr, wait and poll. Everything else answers Unimplemented.
//
// State lives in memory: Close terminates every sandbox, removes its
// containers and snapshot images. A later New removes what a crashed fake
// left behind (by label, when the process that created it is gone).
//
// Every sandbox definition received is recorded (Records) so tests can
// assert what a client sent, e.g. that no secret was in it.
//
// By default the fake is kinder than Modal: it answers every call at once.
// Faults switches on, one by one, the ways the real service is not (each
// with the source that says it does so): a scheduling delay during which a
// new sandbox has no task id, lifetimes that end early, rate limits with a
// retry delay, transient UNAVAILABLE failures and broken output streams, a
// command router that stops answering once its sandbox is gone, slow
// snapshots, sandboxes that end as they are snapshotted, and snapshot
// images whose lifetime ends (snapshots.go). Realistic turns those a client
// can live through on with small random delays, drawn
// from a seed that the start line logs and BERTH_FAKE_SEED gives back
// (package fault); Inject fails the next calls of one method
// deterministically, for tests.
package modalfake

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/moby/moby/client"
	pb "github.com/modal-labs/libmodal/modal-go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/a55dbaac/berth/internal/procmark"
	"github.com/a55dbaac/berth/internal/testenv/fault"
)

// Labels the fake puts on every container and image it creates.
const (
	LabelInstance = "modalfake.instance" // the Server's instance id
	LabelOwner    = "modalfake.owner"    // "<boot id>/<pid>/<start time>" of the process that ran it
	LabelSandbox  = "modalfake.sandbox"  // the sandbox id (containers)
)

// DefaultEnvironment is the environment used when a request names none.
const DefaultEnvironment = "main"

// Options configure a Server.
type Options struct {
	// Docker is the daemon the sandboxes run on. Required.
	Docker *client.Client
	// Addr is the TCP address to listen on; "" means 127.0.0.1:0.
	Addr string
	// TokenID and TokenSecret are the one credential the fake accepts; ""
	// generates a random "ak-..." id and "as-..." secret.
	TokenID, TokenSecret string
	// Environments are the Modal environments that exist; the first is
	// the default. Nil means {"main"}.
	Environments []string
	// Logger receives the fake's diagnostics; nil discards them.
	Logger *slog.Logger
	// Faults are the real service's unkind behaviours to show from the
	// start (see Faults; Realistic turns them all on). SetFaults changes
	// them later.
	Faults Faults
	// Seed is the seed the faults are drawn from (see package fault); 0
	// means the one BERTH_FAKE_SEED gives, or a random one when it is
	// unset. The start line logs it.
	Seed uint64
}

// Record is one SandboxCreate request as the fake received it.
type Record struct {
	SandboxID   string // "" when the request was rejected
	AppID       string
	Environment string
	Definition  *pb.Sandbox // a copy of the definition sent
	// SecretEnv holds the variables of the secrets the definition
	// references (secret_ids), resolved by the fake: what the sandbox's
	// environment received through the definition.
	SecretEnv map[string]string
	Err       error // why it was rejected, if it was
}

// ExecRecord is one TaskExecStart request as the fake received it.
type ExecRecord struct {
	SandboxID string
	ExecID    string
	Argv      []string
	Workdir   string
	// SecretEnv holds the variables of the secrets the exec references.
	SecretEnv map[string]string
}

// Server is a running fake. Its methods are safe for concurrent use.
type Server struct {
	docker      *client.Client
	tokenID     string
	tokenSecret string
	jwtKey      []byte
	instance    string
	owner       string
	envs        []string
	log         *slog.Logger
	addr        string
	lis         net.Listener
	grpc        *grpc.Server
	ctx         context.Context // cancelled by Close
	cancel      context.CancelFunc
	wg          sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	apps      map[string]string // environment + "/" + name -> app id
	appEnv    map[string]string // app id -> environment
	images    map[string]*image // image id -> image
	imageTags map[string]string // registry tag -> image id
	secrets   map[string]map[string]string
	sandboxes map[string]*sandbox // sandbox id -> sandbox
	tasks     map[string]*sandbox // task id -> sandbox
	byDocker  map[string]*execProc
	fsResults map[string]*fsResult
	records   []Record
	execRecs  []ExecRecord
	stallWait bool
	lateEOF   bool
	calls     map[string]int
	// nSandboxes counts the sandboxes created: their numbers, which name
	// them in their fault streams.
	nSandboxes int
	// hold, when set, holds snapshots in progress (HoldSnapshots).
	hold *snapshotHold

	faults faults
}

// New starts a fake on opts.Addr. Close it when done.
func New(ctx context.Context, opts Options) (*Server, error) {
	if opts.Docker == nil {
		return nil, errors.New("modalfake: Options.Docker is required")
	}
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	if opts.TokenID == "" {
		opts.TokenID = "ak-" + randomID(12)
	}
	if opts.TokenSecret == "" {
		opts.TokenSecret = "as-" + randomID(16)
	}
	if len(opts.Environments) == 0 {
		opts.Environments = []string{DefaultEnvironment}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	src := fault.NewSource(opts.Seed)
	if opts.Seed == 0 {
		var err error
		if src, err = fault.SourceFromEnv(); err != nil {
			return nil, fmt.Errorf("modalfake: %w", err)
		}
	}
	key := make([]byte, 32)
	rand.Read(key)
	s := &Server{
		docker:      opts.Docker,
		tokenID:     opts.TokenID,
		tokenSecret: opts.TokenSecret,
		jwtKey:      key,
		instance:    randomID(8),
		owner:       procmark.Self(),
		envs:        append([]string(nil), opts.Environments...),
		log:         log,
		apps:        map[string]string{},
		appEnv:      map[string]string{},
		images:      map[string]*image{},
		imageTags:   map[string]string{},
		secrets:     map[string]map[string]string{},
		sandboxes:   map[string]*sandbox{},
		tasks:       map[string]*sandbox{},
		byDocker:    map[string]*execProc{},
		fsResults:   map[string]*fsResult{},
		calls:       map[string]int{},
	}
	s.faults.f = opts.Faults
	s.faults.src = src
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.reapCrashed(ctx)

	lis, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		s.cancel()
		return nil, fmt.Errorf("modalfake: listen on %s: %w", opts.Addr, err)
	}
	s.lis = lis
	s.addr = lis.Addr().String()
	s.grpc = grpc.NewServer(
		grpc.ChainUnaryInterceptor(s.unaryAuth),
		grpc.ChainStreamInterceptor(s.streamAuth),
		// The SDK pings every 30 s, even without a stream open.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.MaxRecvMsgSize(100<<20),
		grpc.MaxSendMsgSize(100<<20),
	)
	pb.RegisterModalClientServer(s.grpc, &control{s: s})
	pb.RegisterTaskCommandRouterServer(s.grpc, &router{s: s})

	if err := s.watchEvents(); err != nil {
		lis.Close()
		s.cancel()
		return nil, err
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.grpc.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.log.Error("modalfake: serve", "err", err)
		}
	}()
	s.log.Info("modalfake: listening", "addr", s.addr, "instance", s.instance, "faults", opts.Faults.String(), "seed", src.String())
	return s, nil
}

// URL is the control plane's address, for MODAL_SERVER_URL.
func (s *Server) URL() string { return "http://" + s.addr }

// TokenID is the token id the fake accepts.
func (s *Server) TokenID() string { return s.tokenID }

// TokenSecret is the token secret the fake accepts.
func (s *Server) TokenSecret() string { return s.tokenSecret }

// Instance is the value of the LabelInstance label on what this fake created.
func (s *Server) Instance() string { return s.instance }

// Env returns the variables that point a Modal client at the fake with its
// credential: MODAL_SERVER_URL, MODAL_TOKEN_ID and MODAL_TOKEN_SECRET.
func (s *Server) Env() map[string]string {
	return map[string]string{
		"MODAL_SERVER_URL":   s.URL(),
		"MODAL_TOKEN_ID":     s.tokenID,
		"MODAL_TOKEN_SECRET": s.tokenSecret,
	}
}

// Records returns every SandboxCreate request received so far, in order.
func (s *Server) Records() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Record, len(s.records))
	for i, r := range s.records {
		r.Definition = proto.Clone(r.Definition).(*pb.Sandbox)
		env := make(map[string]string, len(r.SecretEnv))
		for k, v := range r.SecretEnv {
			env[k] = v
		}
		r.SecretEnv = env
		out[i] = r
	}
	return out
}

// StallExecWait is fault injection: while on, TaskExecWait never answers
// (until the caller gives up), as a command router that lost its task
// might. Clients must not depend on it to notice a dead sandbox.
func (s *Server) StallExecWait(on bool) {
	s.mu.Lock()
	s.stallWait = on
	s.mu.Unlock()
}

// AnswerEOFAfterExit is fault injection: while on, TaskExecStdinWrite
// applies an end of input at once but answers it only after the exec has
// exited and TaskExecWait has answered its exit status (and a moment
// more), as a router whose answer is slower than the exit it causes may:
// the client hears that the process exited before it hears that its end
// of input was delivered.
func (s *Server) AnswerEOFAfterExit(on bool) {
	s.mu.Lock()
	s.lateEOF = on
	s.mu.Unlock()
}

// Execs returns every exec started so far, in order.
func (s *Server) Execs() []ExecRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ExecRecord, len(s.execRecs))
	for i, r := range s.execRecs {
		r.Argv = append([]string(nil), r.Argv...)
		env := make(map[string]string, len(r.SecretEnv))
		for k, v := range r.SecretEnv {
			env[k] = v
		}
		r.SecretEnv = env
		out[i] = r
	}
	return out
}

// Calls returns how many calls of each method (full gRPC name, e.g.
// "/modal.client.ModalClient/SandboxCreate") passed authentication,
// including those a fault then failed.
func (s *Server) Calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.calls))
	for k, v := range s.calls {
		out[k] = v
	}
	return out
}

func (s *Server) countCall(method string) {
	s.mu.Lock()
	s.calls[method]++
	s.mu.Unlock()
}

// SandboxInfo describes a sandbox the fake knows (running or finished).
type SandboxInfo struct {
	ID          string
	TaskID      string
	ContainerID string
	Name        string
	AppID       string
	Tags        map[string]string
	Running     bool
	Result      *pb.GenericResult // nil while running
}

// Sandboxes lists every sandbox the fake created, oldest first.
func (s *Server) Sandboxes() []SandboxInfo {
	s.mu.Lock()
	list := make([]*sandbox, 0, len(s.sandboxes))
	for _, sb := range s.sandboxes {
		list = append(list, sb)
	}
	s.mu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].created.Before(list[j].created) })
	out := make([]SandboxInfo, 0, len(list))
	for _, sb := range list {
		out = append(out, sb.info())
	}
	return out
}

// Close stops serving, terminates every sandbox (removing its container)
// and removes the snapshot images the fake created. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	sbs := make([]*sandbox, 0, len(s.sandboxes))
	for _, sb := range s.sandboxes {
		sbs = append(sbs, sb)
	}
	s.mu.Unlock()

	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		s.grpc.Stop()
		<-stopped
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, sb := range sbs {
		s.finish(sb, result(pb.GenericResult_GENERIC_STATUS_TERMINATED, 0, "fake shut down"))
	}
	for _, sb := range sbs {
		sb.awaitRemoved(ctx)
		// Output nobody will read again must not hold a pump waiting for
		// room in its buffer.
		sb.mu.Lock()
		for _, e := range sb.execs {
			e.stdout.abort()
			e.stderr.abort()
		}
		sb.mu.Unlock()
	}
	s.cancel()
	errs = append(errs, s.removeLeftovers(ctx, s.instance))
	s.wg.Wait()
	return errors.Join(errs...)
}

// control implements the control-plane service.
type control struct {
	pb.UnimplementedModalClientServer
	s *Server
}

// router implements the task command router service.
type router struct {
	pb.UnimplementedTaskCommandRouterServer
	s *Server
}

func randomID(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// modalID makes an id in Modal's style: a prefix and 22 base62 characters.
func modalID(prefix string) string {
	const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	b := make([]byte, 22)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return prefix + "-" + string(b)
}

// environment resolves a request's environment name.
func (s *Server) environment(name string) (string, error) {
	if name == "" {
		return s.envs[0], nil
	}
	for _, e := range s.envs {
		if e == name {
			return e, nil
		}
	}
	return "", status.Errorf(codes.NotFound, "Environment '%s' not found", name)
}

// result builds a GenericResult.
func result(st pb.GenericResult_GenericStatus, code int32, exception string) *pb.GenericResult {
	return pb.GenericResult_builder{Status: st, Exitcode: code, Exception: exception}.Build()
}
