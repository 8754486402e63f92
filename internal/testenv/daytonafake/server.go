// Package daytonafake is a stand-in for Daytona's control-plane API and its
// toolbox API, for testing clients (berth's daytona backend, through
// Daytona's own generated Go clients) where no Daytona service can be
// reached.
//
// It follows the OpenAPI definitions the clients are generated from
// (github.com/daytona/clients/api-client-go and toolbox-api-client-go at
// v0.201.0, api/openapi.yaml in each module), and only for the endpoints a
// client of berth's kind uses, plus those the check with Daytona's own
// TypeScript SDK drives (sdkcheck): file bulk upload and download, the
// home and working directories, recover. Every other control-plane or
// toolbox path answers 501 with a message saying the fake does not
// implement it: the sessions API (/process/session...), PTY
// create-connect, file listing, search, move and details, git, LSP,
// computer use, snapshots made from images (POST /snapshots), volumes,
// regions, forks and the SDK's socket.io event stream (the SDK falls back
// to polling GET /sandbox/{id}). Snapshots of sandboxes are implemented
// (snapshot.go): POST /sandbox/{id}/snapshot, GET /snapshots and
// /snapshots/{id}, DELETE /snapshots/{id}, and sandboxes created from them. Every response is built from the generated
// models, so the clients can decode it (they reject a body that lacks a
// required field). What the fake does, it does for real:
//
//   - A sandbox is a Docker container (via the Engine API; the image comes
//     from a one-line "FROM <image>" build or a snapshot name, and must exist
//     locally, since nothing can be pulled). cpu and memory become container
//     limits, networkBlockAll gives it no network; disk is recorded but not
//     enforced (Docker cannot without xfs project quotas).
//   - States and transitions are Daytona's: creating (pending_build first
//     when built from an image) → started → stopping → stopped → archiving →
//     archived, and start from stopped (starting) or archived (restoring).
//     Transitions run in the background after the call returns, as they do
//     on Daytona; clients poll GET /sandbox/{id}. Stop stops the container
//     (every process in it dies); archive commits the stopped container's
//     filesystem to a local image and removes the container; start from
//     archived creates the container again from that image (the filesystem
//     survives, processes do not); delete removes container and image.
//   - The toolbox (base URL {toolboxProxyUrl}/{sandboxId}) runs its
//     commands in the container: /process/execute runs the command line split
//     the way Daytona's daemon splits it (quotes only, no shell), PTY sessions
//     run an interactive login shell (bash -i -l, else sh -i -l) on a real
//     terminal inside the container and stream it over a websocket
//     (/process/pty/{id}/connect, gorilla/websocket, the daemon's control and
//     close messages), and the file calls read and write the container's
//     files. A toolbox call to a sandbox that is not started fails as the
//     Daytona proxy does: 400 "Is the Sandbox started?" when stopped, 404
//     when archived or unknown.
//   - PTY sessions keep the daemon's limits: 64 KiB per client message, a
//     queue of 256 output messages (of at most 4 KiB, one terminal read)
//     per client, output read while no client is attached is lost.
//   - Where the real service is hard on clients, the fake is too when
//     Options.Unkind says so (see Unkind, each switch with its source;
//     Realistic turns them all on): a client whose queue is full dropped
//     at once (the kind fake waits 2 s for room), the exit close message
//     ahead of queued output, a list that lags creation, 429 with
//     Retry-After-<bucket>, transient 502/503, execute through the user's
//     shell, a non-root user, idle websockets cut, random delays, all
//     drawn from a seed that BERTH_FAKE_SEED gives back (package fault).
//     Tests disrupt a sandbox from outside with Server.Disrupt and
//     Server.DisruptOnOutput (stopped, archived, deleted, or in state
//     error, recoverable or not), and POST /sandbox/{id}/recover brings a
//     recoverable one back.
//   - PUT /sandbox/{idOrName}/labels replaces a sandbox's labels with the
//     set given (nothing of the old set is kept) in any state, and answers
//     the new set; listing by label sees the change at once.
//   - Every call needs "Authorization: Bearer <key>" with the server's API
//     key, or its JWT token plus the X-Daytona-Organization-ID header; a
//     wrong key gets 401. Unknown ids and names get 404.
//
// The fake records the body of every control-plane request (Requests), so
// tests can check what a client stored in a sandbox's definition (its env
// and labels) — and what it did not.
//
// The fake's containers carry the label "daytonafake=1" and are removed by
// Close; a later fake removes those left behind by a process that died.
package daytonafake

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	toolbox "github.com/daytona/clients/toolbox-api-client-go"
	"github.com/moby/moby/client"

	"github.com/a55dbaac/berth/internal/testenv/fault"
)

// Options configures a fake.
type Options struct {
	// Docker is the Engine API client the sandboxes are created with. It is
	// required and stays owned by the caller.
	Docker *client.Client
	// APIKey is the key clients must present ("Authorization: Bearer
	// <key>"). Empty means a random one (see Server.APIKey).
	APIKey string
	// JWTToken and OrganizationID, when both set, are a second accepted
	// credential: the token as the bearer plus the organization in the
	// X-Daytona-Organization-ID header.
	JWTToken       string
	OrganizationID string
	// DefaultImage is the image of sandboxes created with neither a build
	// nor a snapshot (Daytona's default snapshot).
	DefaultImage string
	// Addr is the listen address; empty means 127.0.0.1:0.
	Addr string
	// Logger receives the fake's diagnostics; nil discards them.
	Logger *slog.Logger
	// WarmPool is how many started containers of each sandbox shape
	// already asked for the fake keeps ready, like Daytona's warm pool
	// (see pool.go); 0 means none.
	WarmPool int
	// Unkind switches on the ways the real service is hard on clients
	// (see Unkind; Realistic turns them all on).
	Unkind Unkind
	// Seed is the seed the unkind switches draw from (see package fault);
	// 0 means the one BERTH_FAKE_SEED gives, or a random one when it is
	// unset.
	Seed uint64
}

// Request is one control-plane request as the fake received it.
type Request struct {
	Method string
	Path   string // with the query string
	Body   []byte
}

// Server is a running fake. Its methods are safe for concurrent use.
type Server struct {
	opts   Options
	docker *client.Client
	log    *slog.Logger
	ln     net.Listener
	srv    *http.Server
	base   string // http://127.0.0.1:PORT
	inst   string // instance id, in the containers' labels
	ctx    context.Context
	stop   context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	sandboxes map[string]*sandbox    // by id
	execs     map[string]*ptySession // PTY shells by docker exec id
	requests  []Request
	toolboxN  int // toolbox calls received
	closed    bool

	faults                                *fault.Source     // the unkind switches' decisions
	nSandboxes                            int               // sandboxes created: their numbers (sandbox.ord)
	limited, transients, dropped, idleCut int               // what the switches did (Unkindness)
	disruptions                           []armedDisruption // see DisruptOnOutput

	pool        map[poolKey][]string // ready container ids by shape
	poolFilling map[poolKey]bool

	snaps snapshotStore // snapshots of sandboxes (snapshot.go); guarded by mu
	gate  execGate      // process starts kept out of frozen containers (freeze.go)
}

// Labels the fake puts on its containers and images.
const (
	labelFake     = "daytonafake"
	labelInstance = "daytonafake.instance"
	labelOwnerPID = "daytonafake.pid"
	labelSandbox  = "daytonafake.sandbox"
)

// New starts a fake listening on 127.0.0.1 (or opts.Addr). Containers that
// earlier fakes left behind when their process died are removed first.
func New(opts Options) (*Server, error) {
	if opts.Docker == nil {
		return nil, errors.New("daytonafake: Options.Docker is required")
	}
	if opts.APIKey == "" {
		opts.APIKey = "dtn_" + randomHex(16)
	}
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	src := fault.NewSource(opts.Seed)
	if opts.Seed == 0 {
		var err error
		if src, err = fault.SourceFromEnv(); err != nil {
			return nil, fmt.Errorf("daytonafake: %w", err)
		}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("daytonafake: listen on %s: %w", opts.Addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		opts:      opts,
		docker:    opts.Docker,
		log:       log,
		ln:        ln,
		base:      "http://" + ln.Addr().String(),
		inst:      randomHex(6),
		ctx:       ctx,
		stop:      cancel,
		sandboxes: map[string]*sandbox{},
		execs:     map[string]*ptySession{},
		faults:    src,

		pool:        map[poolKey][]string{},
		poolFilling: map[poolKey]bool{},
	}
	s.reapDead(ctx)
	mux := http.NewServeMux()
	s.routes(mux)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("daytonafake: serve", "err", err)
		}
	}()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.watchExecs(ctx)
	}()
	log.Info("daytonafake: listening", "url", s.base, "instance", s.inst, "unkind", opts.Unkind.String(), "seed", src.String())
	return s, nil
}

// Seed is the seed the unkind switches draw from.
func (s *Server) Seed() uint64 { return s.faults.Seed() }

// Decisions returns the decisions the unkind switches made so far, by
// stream (see fault.Source.Decisions): two servers of one seed that met
// the same requests return the same.
func (s *Server) Decisions() []fault.Decision { return s.faults.Decisions() }

// APIURL is the control-plane base URL, what DAYTONA_API_URL names
// (http://127.0.0.1:PORT/api).
func (s *Server) APIURL() string { return s.base + "/api" }

// ToolboxProxyURL is the toolboxProxyUrl of every sandbox; a sandbox's
// toolbox lives at ToolboxProxyURL()/<sandbox id>.
func (s *Server) ToolboxProxyURL() string { return s.base + "/toolbox" }

// APIKey is the accepted API key.
func (s *Server) APIKey() string { return s.opts.APIKey }

// Requests returns every control-plane request received so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// ToolboxCalls returns how many toolbox calls (HTTP requests and websocket
// connects) the fake received so far.
func (s *Server) ToolboxCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.toolboxN
}

// Close stops serving and removes every container and archive image of the
// fake's sandboxes.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	all := make([]*sandbox, 0, len(s.sandboxes))
	for _, sb := range s.sandboxes {
		all = append(all, sb)
	}
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	shutdown, scancel := context.WithTimeout(ctx, 2*time.Second)
	s.srv.Shutdown(shutdown)
	scancel()
	s.srv.Close() // hijacked websocket connections are closed by the sessions below
	var errs []error
	for _, sb := range all {
		sb.ops.Lock() // wait for a transition in flight
		sb.closePTYs(true)
		if err := sb.removeAll(ctx); err != nil {
			errs = append(errs, err)
		}
		sb.ops.Unlock()
	}
	s.stop()
	s.wg.Wait()
	s.drainPool(ctx)
	if err := s.removeSnapshotImages(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// reapDead removes containers and images of fakes whose process is gone
// (a test binary that crashed before its cleanup ran).
func (s *Server) reapDead(ctx context.Context) {
	list, err := s.docker.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", labelFake+"=1"),
	})
	if err != nil {
		s.log.Warn("daytonafake: list leftovers", "err", err)
		return
	}
	for _, c := range list.Items {
		pid, _ := strconv.Atoi(c.Labels[labelOwnerPID])
		if pid <= 0 || processAlive(pid) {
			continue
		}
		s.docker.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true})
	}
	imgs, err := s.docker.ImageList(ctx, client.ImageListOptions{Filters: make(client.Filters).Add("label", labelFake+"=1")})
	if err != nil {
		return
	}
	for _, im := range imgs.Items {
		pid, _ := strconv.Atoi(im.Labels[labelOwnerPID])
		if pid <= 0 || processAlive(pid) {
			continue
		}
		s.docker.ImageRemove(ctx, im.ID, client.ImageRemoveOptions{Force: true})
	}
}

// processID is this process's pid, in the labels of what the fake creates.
var processID = os.Getpid()

// processAlive reports whether a process with this pid exists here.
func processAlive(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

// routes registers the control-plane and toolbox endpoints.
func (s *Server) routes(mux *http.ServeMux) {
	api := func(pattern string, h func(http.ResponseWriter, *http.Request)) {
		mux.HandleFunc(pattern, s.apiAuth(h))
	}
	api("GET /api/sandbox", s.listSandboxes)
	api("POST /api/sandbox", s.createSandbox)
	api("GET /api/sandbox/{idOrName}", s.getSandbox)
	api("DELETE /api/sandbox/{idOrName}", s.deleteSandbox)
	api("POST /api/sandbox/{idOrName}/start", s.startSandbox)
	api("POST /api/sandbox/{idOrName}/stop", s.stopSandbox)
	api("POST /api/sandbox/{idOrName}/archive", s.archiveSandbox)
	api("PUT /api/sandbox/{idOrName}/labels", s.replaceLabels)
	api("POST /api/sandbox/{idOrName}/autostop/{interval}", s.setAutostop)
	api("GET /api/sandbox/{idOrName}/toolbox-proxy-url", s.toolboxProxyURL)
	api("POST /api/sandbox/{idOrName}/recover", s.recoverSandbox)
	api("POST /api/sandbox/{idOrName}/snapshot", s.createSandboxSnapshot)
	api("GET /api/snapshots", s.listSnapshots)
	api("GET /api/snapshots/{id}", s.getSnapshot)
	api("DELETE /api/snapshots/{id}", s.removeSnapshot)
	mux.HandleFunc("GET /api/health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("/api/", s.apiAuth(func(w http.ResponseWriter, r *http.Request) {
		apiError(w, http.StatusNotImplemented, fmt.Sprintf("daytonafake: %s %s is not implemented: the fake serves only the endpoints berth's daytona backend and the SDK check use (see the package doc)", r.Method, r.URL.Path))
	}))

	tb := func(pattern string, h func(http.ResponseWriter, *http.Request, *sandbox)) {
		mux.HandleFunc(pattern, s.toolboxAuth(h))
	}
	tb("POST /toolbox/{sandboxId}/process/execute", s.execute)
	tb("GET /toolbox/{sandboxId}/process/pty", s.listPTY)
	tb("POST /toolbox/{sandboxId}/process/pty", s.createPTY)
	tb("GET /toolbox/{sandboxId}/process/pty/{sessionId}", s.getPTY)
	tb("DELETE /toolbox/{sandboxId}/process/pty/{sessionId}", s.deletePTY)
	tb("GET /toolbox/{sandboxId}/process/pty/{sessionId}/connect", s.connectPTY)
	tb("POST /toolbox/{sandboxId}/process/pty/{sessionId}/resize", s.resizePTY)
	tb("GET /toolbox/{sandboxId}/files/download", s.downloadFile)
	tb("POST /toolbox/{sandboxId}/files/upload-v2", s.uploadFile)
	tb("POST /toolbox/{sandboxId}/files/permissions", s.setPermissions)
	tb("GET /toolbox/{sandboxId}/version", s.version)
	tb("GET /toolbox/{sandboxId}/user-home-dir", s.userHomeDir)
	tb("GET /toolbox/{sandboxId}/work-dir", s.workDir)
	tb("POST /toolbox/{sandboxId}/files/bulk-upload", s.bulkUpload)
	tb("POST /toolbox/{sandboxId}/files/bulk-download", s.bulkDownload)
	tb("/toolbox/{sandboxId}/", func(w http.ResponseWriter, r *http.Request, _ *sandbox) {
		toolboxError(w, r, http.StatusNotImplemented, toolbox.DAEMONERRORCODE_CodeInternalServerError,
			fmt.Sprintf("daytonafake: %s %s is not implemented: the fake serves only the toolbox calls berth's daytona backend and the SDK check use (see the package doc)", r.Method, r.URL.Path))
	})
}

// authorized checks the bearer credential of a request.
func (s *Server) authorized(r *http.Request) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return false
	}
	if tok == s.opts.APIKey {
		return true
	}
	return s.opts.JWTToken != "" && tok == s.opts.JWTToken &&
		r.Header.Get("X-Daytona-Organization-ID") == s.opts.OrganizationID
}

// org is the organization id the fake reports.
func (s *Server) org() string {
	if s.opts.OrganizationID != "" {
		return s.opts.OrganizationID
	}
	return "daytonafake-org"
}

// apiAuth checks the credential of a control-plane call and records it.
func (s *Server) apiAuth(h func(http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		if err != nil {
			apiError(w, http.StatusBadRequest, "cannot read the request body: "+err.Error())
			return
		}
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		s.mu.Lock()
		s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.RequestURI(), Body: body})
		s.mu.Unlock()
		if !s.authorized(r) {
			apiError(w, http.StatusUnauthorized, "Invalid credentials")
			return
		}
		subject := s.subject(r)
		s.delay(r.Context(), where("api", subject))
		if s.transient(w, "api", subject) || s.rateLimited(w, r, subject) {
			return
		}
		h(w, r)
	}
}

// apiError writes a control-plane error in the API's envelope.
func apiError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]any{
		"statusCode": code,
		"message":    msg,
		"error":      http.StatusText(code),
	})
}

// writeJSON writes v as a JSON response.
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(b)
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
