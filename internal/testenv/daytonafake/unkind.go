package daytonafake

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/a55dbaac/berth/internal/testenv/fault"
)

// Unkind holds the switches that make the fake as hard on its clients as
// Daytona is. The zero value is the kind fake: every call answered at once,
// lists consistent, PTY clients waited for. Each switch names the source
// that says the real service behaves so; the sources are Daytona's own
// code (github.com/daytonaio/daytona, paths below are in that
// repository) and documentation, as read for berth's study of its fakes'
// fidelity (2026-11-25).
//
// Unkind is the Daytona plan on the vocabulary of package fault, as
// modalfake.Faults is Modal's: the switches differ because the services
// do, the way a fault is drawn does not. The random ones (the nth call a
// rate limit or a transient failure hits, delays, 502 or 503) are drawn
// from the server's fault seed (Options.Seed), in a stream per switch and
// per sandbox (numbered in the order of their creation), so that a seed
// replays what one sandbox meets whatever the others did meanwhile (see
// package fault for what it cannot replay).
//
// Realistic returns every switch on, with small random delays. What a
// test must arm itself — a sandbox stopped, archived, errored or deleted
// from outside in the middle of a command — is not a switch but a call
// (Server.Disrupt, Server.DisruptOnOutput): done at random it would make
// every test's outcome a matter of luck.
type Unkind struct {
	// DropSlowConsumer drops a PTY websocket client the moment its queue
	// of 256 output messages is full: close 1008 "slow consumer", queued
	// output lost, no back-pressure into the terminal. The kind fake waits
	// 2 s for room first. Source: apps/daemon/pkg/toolbox/process/pty/
	// websocket.go, attachWebSocket ("make(chan []byte, 256) // if full,
	// drop slow client") and broadcast ("client's outbound queue is full
	// -> drop the client").
	DropSlowConsumer bool

	// LinkBytesPerSec caps what each PTY websocket client's writer sends
	// per second: a network between the daemon and the client slower than
	// the program's output, which is what fills the daemon's queue on a
	// real WAN link. 0 means no cap (loopback).
	LinkBytesPerSec int

	// CloseFirst makes a PTY session whose shell exited write its close
	// message (the exit code) at once, out of band, ahead of output still
	// queued for the client, which is lost. The kind fake sends the close
	// message after what is queued. Source: pty/session.go (the process
	// reaper calls closeClientsWithExitCode as soon as cmd.Wait returns,
	// while ptyReadLoop may still hold output) and pty/websocket.go,
	// closeClientsWithExitCode (cl.conn.WriteMessage(CloseMessage, ...)
	// then cl.close(), beside the clientWriter goroutine still draining
	// cl.send).
	CloseFirst bool

	// ListLag hides a sandbox from GET /sandbox for this long after its
	// creation (get by id or name sees it at once). Source: the API's
	// list endpoint is served from a search index and documented as
	// eventually consistent (api-client-go v0.201.0 api/openapi.yaml,
	// GET /sandbox; apps/api sandbox search adapter over OpenSearch).
	ListLag time.Duration

	// RateLimitEvery refuses one in every N control-plane calls
	// (fault.Every) of each of Daytona's throttler buckets
	// (authenticated, sandbox-create, sandbox-lifecycle), counted per
	// sandbox the call names, with 429 and the header
	// Retry-After-<bucket>: RetryAfter, without doing it. Sources: apps/api/src/app.module.ts
	// (ThrottlerModule with named throttlers "authenticated",
	// "sandbox-create", "sandbox-lifecycle"); @nestjs/throttler's guard
	// sets `Retry-After${name === 'default' ? '' : '-' + name}` in seconds
	// on a 429; https://www.daytona.io/docs/en/rate-limits (per-minute
	// budgets per bucket, 429 when exceeded). 0 means never.
	RateLimitEvery int
	// RetryAfter is the seconds a 429 asks the client to wait; 0 means 1.
	RetryAfter int

	// TransientEvery answers one in every N requests (fault.Every) —
	// control plane, toolbox and websocket upgrade alike, counted apart
	// and per sandbox the request names — with 502 or 503, without doing
	// it, as a proxy or load balancer does while an upstream restarts.
	// Sources: apps/proxy/pkg/proxy/retry.go (the toolbox proxy
	// itself retries its upstream 3 times, 150 ms to 1 s apart, and fails
	// the request when those fail); libs/common-go/pkg/proxy
	// (ApplyServerTimeouts: "Must sit above any upstream LB/client idle
	// timeout", a load balancer in front of the API and proxy). 0 means
	// never.
	TransientEvery int

	// ExecShell makes POST /process/execute pipe the command into the
	// user's shell (zsh, else bash, else $SHELL, else sh) and kill the
	// process group with SIGKILL at its timeout, as the current daemon
	// does; the kind fake splits the command on quotes and runs it without
	// a shell, as the daemon did before March 2026. Source: apps/daemon/
	// pkg/toolbox/process/execute.go (exec.Command(common.GetShell()),
	// cmd.Stdin = strings.NewReader(request.Command), Setpgid, SIGKILL to
	// -pid on timeout).
	ExecShell bool

	// NonRootUser gives sandboxes a non-root user, as Daytona's default
	// snapshots have: the DTO's user defaults to "daytona" (the kind fake
	// reports "root"), and the container runs as uid 1000 "daytona" with
	// home /home/daytona, where the kind fake runs the image's user (root
	// in berth's test image). Sources: apps/api/src/sandbox/services/
	// sandbox.service.ts (sandbox.osUser = createSandboxDto.user ||
	// 'daytona'); apps/runner/pkg/docker/container_configs.go (the runner
	// sets no User: the image's USER stands, and Daytona's default
	// snapshot images run as daytona).
	NonRootUser bool

	// IdleCut closes a PTY websocket that carried no frame either way
	// (pings and pongs count) for this long, abruptly, as a load balancer
	// in front of the proxy does with an idle connection. Neither the
	// daemon, the proxy nor Daytona's SDKs send websocket pings (pty/
	// websocket.go has no ping loop). Source: libs/common-go/pkg/proxy
	// (the proxy's idle timeout of 70 s "must sit above any upstream
	// LB/client idle timeout"). 0 means never.
	IdleCut time.Duration

	// Jitter adds a random delay drawn from it to every control-plane
	// answer, toolbox call and sandbox state transition: real calls cross
	// a network and real transitions take time.
	Jitter fault.Jitter

	// SnapshotFreeze pauses a started sandbox's container (the cgroup
	// freezer: every process stops where it is) for the commit of a
	// snapshot, and holds every toolbox call to the sandbox until it is
	// unpaused, as the daemon inside is frozen too; the kind fake commits
	// a running container without pausing it. Source: apps/runner/pkg/
	// docker/snapshot_sandbox.go (CreateSnapshotFromSandbox: "Running
	// containers are briefly paused during commit to produce a consistent
	// on-disk snapshot": ContainerPause, commitContainer, ContainerUnpause,
	// then the push).
	SnapshotFreeze bool

	// SnapshotDelay is drawn for each snapshot's capture, after its
	// commit: Daytona pushes the committed image to its registry before the
	// snapshot turns active, and the sandbox stays snapshotting
	// meanwhile. Sources: snapshot_sandbox.go (PushImage after the
	// commit); apps/api/src/sandbox/services/sandbox.service.ts
	// (runV0SnapshotFromSandbox: the runner's "commit+push endpoint, which
	// can take several minutes").
	SnapshotDelay fault.Jitter

	// SnapshotFailEvery fails one in every N captures of a sandbox
	// (fault.Every, counted per sandbox), after the commit: the snapshot
	// ends in state error with the runner's reason (the capture timed out,
	// the push failed), and the sandbox returns to the state it had.
	// Sources: snapshot_sandbox.go and the runner's capture
	// ("snapshot capture timed out after %dm"); apps/api/src/sandbox/utils/
	// persist-snapshot-from-sandbox.util.ts (failSnapshotFromSandbox:
	// snapshotting → error with errorReason); sandbox.service.ts (the
	// sandbox's previous state is restored whether the capture succeeded
	// or not). 0 means never.
	SnapshotFailEvery int

	// SnapshotLateRecord answers as Daytona's API did before a snapshot's
	// record was made with its capture: GET /snapshots/{name} is 404 until
	// the capture succeeded, and a failed capture leaves no record at all;
	// only the sandbox leaving state snapshotting says the capture ended.
	// Source: persist-snapshot-from-sandbox.util.ts in its earlier
	// versions (persistSnapshotFromSandbox inserts the row, active, on
	// success only) and sandbox.service.ts (runV0SnapshotFromSandbox:
	// "Errors are intentionally swallowed - sandbox state is the source of
	// truth").
	SnapshotLateRecord bool

	// SnapshotPullFailEvery makes one in every N sandboxes created from a
	// snapshot of a sandbox (fault.Every, counted per snapshot) end in
	// state error, "Failed to pull snapshot image": the runner it lands on
	// must pull the snapshot's image from Daytona's registry first. Source:
	// api-client-go v0.201.0 api/openapi.yaml (Sandbox.errorReason's
	// example, "Failed to pull snapshot image"; state pulling_snapshot);
	// apps/runner/pkg/docker/snapshot_pull.go (PullSnapshot: the image
	// pulled from the registry). 0 means never.
	SnapshotPullFailEvery int
}

// Realistic is every switch on, with small random delays: what berth's
// suite runs against besides the kind fake. The values are chosen to be
// felt by the tests (a rate limit every few calls, a slow link) while
// keeping each delay small and bounded.
func Realistic() Unkind {
	return Unkind{
		DropSlowConsumer: true,
		LinkBytesPerSec:  16 << 20,
		CloseFirst:       true,
		ListLag:          time.Second,
		RateLimitEvery:   13,
		RetryAfter:       1,
		TransientEvery:   17,
		ExecShell:        true,
		NonRootUser:      true,
		IdleCut:          60 * time.Second,
		Jitter:           fault.Jitter{Max: 20 * time.Millisecond},

		SnapshotFreeze:        true,
		SnapshotDelay:         fault.Jitter{Min: 50 * time.Millisecond, Max: 300 * time.Millisecond},
		SnapshotFailEvery:     5,
		SnapshotLateRecord:    true,
		SnapshotPullFailEvery: 7,
	}
}

// On reports whether any switch is on.
func (u Unkind) On() bool { return u != Unkind{} }

// String describes the switches that are on, for logs.
func (u Unkind) String() string {
	var on []string
	add := func(ok bool, format string, args ...any) {
		if ok {
			on = append(on, fmt.Sprintf(format, args...))
		}
	}
	add(u.DropSlowConsumer, "slow consumers dropped")
	add(u.LinkBytesPerSec > 0, "link %d B/s", u.LinkBytesPerSec)
	add(u.CloseFirst, "close before output")
	add(u.ListLag > 0, "list lag %v", u.ListLag)
	add(u.RateLimitEvery > 0, "429 on %v calls (retry after %ds)", fault.Every(u.RateLimitEvery), max(u.RetryAfter, 1))
	add(u.TransientEvery > 0, "502/503 on %v requests", fault.Every(u.TransientEvery))
	add(u.ExecShell, "execute through the shell")
	add(u.NonRootUser, "non-root user")
	add(u.IdleCut > 0, "idle cut %v", u.IdleCut)
	add(u.Jitter.On(), "delays %v", u.Jitter)
	add(u.SnapshotFreeze, "snapshot commits frozen")
	add(u.SnapshotDelay.On(), "snapshot pushes %v", u.SnapshotDelay)
	add(u.SnapshotFailEvery > 0, "snapshot captures failed on %v", fault.Every(u.SnapshotFailEvery))
	add(u.SnapshotLateRecord, "snapshot records only on success")
	add(u.SnapshotPullFailEvery > 0, "snapshot pulls failed on %v", fault.Every(u.SnapshotPullFailEvery))
	if len(on) == 0 {
		return "none"
	}
	return strings.Join(on, ", ")
}

// delay sleeps the jitter drawn for the next event of the stream "jitter
// <where>", or until ctx ends.
func (s *Server) delay(ctx context.Context, where string) {
	if j := s.opts.Unkind.Jitter; j.On() {
		fault.Sleep(ctx, s.faults.Stream("jitter "+where).Delay(j))
	}
}

// subject names the sandbox a request's path names, by its number, for
// the identity of a fault stream; "" when it names none the fake holds.
func (s *Server) subject(r *http.Request) string {
	key := r.PathValue("idOrName")
	if key == "" {
		key = r.PathValue("sandboxId")
	}
	if key == "" {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.findLocked(key); sb != nil {
		return sb.ident()
	}
	return ""
}

// where joins the parts of a fault stream's identity, leaving out empty
// ones.
func where(parts ...string) string {
	out := parts[0]
	for _, p := range parts[1:] {
		if p != "" {
			out += " " + p
		}
	}
	return out
}

// bucket is the Daytona throttler a control-plane call counts against.
func bucket(r *http.Request) string {
	p := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case r.Method == http.MethodPost && p == "/api/sandbox":
		return "sandbox-create"
	case r.Method == http.MethodDelete && strings.HasPrefix(p, "/api/sandbox/") && strings.Count(p, "/") == 3:
		return "sandbox-lifecycle"
	case r.Method == http.MethodPost && strings.HasPrefix(p, "/api/sandbox/"):
		for _, op := range []string{"/start", "/stop", "/archive", "/recover"} {
			if strings.HasSuffix(p, op) {
				return "sandbox-lifecycle"
			}
		}
	}
	return "authenticated"
}

// rateLimited answers 429 when RateLimitEvery hits the call in the stream
// of its bucket and the sandbox it names.
func (s *Server) rateLimited(w http.ResponseWriter, r *http.Request, subject string) bool {
	t := fault.Every(s.opts.Unkind.RateLimitEvery)
	if !t.On() {
		return false
	}
	b := bucket(r)
	if !s.faults.Stream(where("rate limit", b, subject)).Hit(t) {
		return false
	}
	after := s.opts.Unkind.RetryAfter
	if after <= 0 {
		after = 1
	}
	w.Header().Set("Retry-After-"+b, strconv.Itoa(after))
	s.mu.Lock()
	s.limited++
	s.mu.Unlock()
	writeJSON(w, http.StatusTooManyRequests, map[string]any{
		"statusCode": http.StatusTooManyRequests,
		"message":    "ThrottlerException: Too Many Requests",
		"error":      "Too Many Requests",
	})
	return true
}

// transient answers 502 or 503 when TransientEvery hits the request in
// the stream of its plane ("api" or "toolbox") and the sandbox it names.
func (s *Server) transient(w http.ResponseWriter, plane, subject string) bool {
	t := fault.Every(s.opts.Unkind.TransientEvery)
	if !t.On() || !s.faults.Stream(where("transient", plane, subject)).Hit(t) {
		return false
	}
	code := []int{http.StatusBadGateway, http.StatusServiceUnavailable}[s.faults.Stream(where("transient answer", plane, subject)).Choose(2)]
	s.mu.Lock()
	s.transients++
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/html")
	w.WriteHeader(code)
	w.Write([]byte("<html><body><h1>" + strconv.Itoa(code) + " " + http.StatusText(code) + "</h1></body></html>\n"))
	return true
}

// Unkindness counts what the switches did so far: 429 answers and
// transient 5xx answers given, and PTY clients dropped as slow consumers
// or cut as idle.
type Unkindness struct {
	RateLimited, Transient, SlowConsumersDropped, IdleCut int
	// SnapshotsFailed counts captures SnapshotFailEvery failed,
	// SnapshotPullsFailed sandboxes SnapshotPullFailEvery failed.
	SnapshotsFailed, SnapshotPullsFailed int
}

// Unkindness returns the counts so far.
func (s *Server) Unkindness() Unkindness {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Unkindness{RateLimited: s.limited, Transient: s.transients, SlowConsumersDropped: s.dropped, IdleCut: s.idleCut,
		SnapshotsFailed: s.snaps.failed, SnapshotPullsFailed: s.snaps.pullsFailed}
}
