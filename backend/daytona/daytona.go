// Package daytona is the backend that runs commands in a Daytona sandbox:
// a managed workspace that sleeps (stops or archives) when idle and wakes
// on demand, so a small machine can drive real compute.
//
// It uses Daytona's generated Go clients (api-client-go and
// toolbox-api-client-go v0.201.0) rather than the Go SDK: the generated
// clients have no dependencies of their own, while the SDK pulls in the AWS
// SDK, OpenTelemetry, gRPC and a socket.io event client, and its PTY handle
// (a channel of chunks that drops nothing but cannot push back) adds
// nothing berth needs. The PTY websocket is spoken directly with
// gorilla/websocket, the library Daytona's daemon and SDK use for it.
//
// One sandbox per environment key, named berth-<key> and labelled with the
// key and its owner (the berth process that created it, or last reattached
// it), built from daytona_image (the backend's one key of its own), with
// container_cpu cores, container_memory and container_disk rounded up to
// whole GiB (the disk capped at Daytona's 10 GiB, with a warning), auto-stop
// off while berth holds it, and no network when docker_network is false.
// Processes start in the home directory of the sandbox's user (asked of
// the sandbox: Daytona runs the image's user, "daytona" in its own
// snapshots), or in the configured cwd when that is a path inside the
// sandbox.
//
// Owners: a berth that starts sweeps what crashed berths left running
// (their owner process is gone): throwaway sandboxes are deleted,
// persistent ones stopped. A berth that reattaches a sandbox another
// process made relabels it with its own mark before starting or using it,
// so the sweep judges the process that uses it, not its long-gone creator.
//
// Every process — the session's persistent shell, the kill script, a
// background job — runs on its own PTY session of the toolbox, streamed
// both ways over one websocket (see pty.go): a trivial command of the
// persistent shell costs one round trip, not the reference's state check
// plus a blocking one-shot execute. One PTY session is kept ready ahead of
// need (opened by New, replaced after each use), so starting a process —
// the kill script of a timeout, a background job — costs one message.
// Timeouts and interrupts run the kill script inside the sandbox like on
// every backend; the sandbox keeps running.
//
// Sleep and wake: with container_persistent, Close stops the sandbox (its
// filesystem is kept) and the next berth starts it again by name. A
// process that cannot start because the sandbox went to sleep meanwhile (a
// toolbox call fails) wakes it — one state check after the failure, none
// before each command — and the session restores its cwd and exported
// variables in the new shell; environment_recreated is reported only when
// the sandbox was gone and a new one had to be created. A sandbox in state
// error that Daytona marks recoverable is recovered, its files kept, before
// berth would replace it. Without container_persistent, Close deletes the
// sandbox.
//
// Checkpoints (checkpoint.go) are Daytona snapshots of the sandbox, taken
// while it runs; a fork or a restore (Options.From) is a sandbox created
// from one.
//
// Daytona as it is, not as a kind fake is: every call is retried on 429
// (as long as Retry-After-<bucket> says) and on 502/503/504, within a
// budget, and reported when given up (retry.go); output is paced end to
// end so the daemon's 256-message queue never fills and drops berth as a
// slow consumer, the shell does not exit before berth has all of its
// output, and idle websockets are pinged (pty.go); berth env rm looks a
// sandbox up by name too, since the list lags creation (manage.go).
//
// env_passthrough and docker_forward_env never go into the sandbox's
// definition (its env or labels): SessionEnv hands them to the session,
// which exports them over the shell's input. Large files go through the
// toolbox's upload call (WriteFile).
//
// Credentials: DAYTONA_API_KEY, or DAYTONA_JWT_TOKEN with
// DAYTONA_ORGANIZATION_ID; DAYTONA_API_URL (default Daytona's cloud) and
// DAYTONA_TARGET (region) are optional. All are read from berth's
// environment or the .env file beside the config.
package daytona

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	apiclient "github.com/daytona/clients/api-client-go"
	toolbox "github.com/daytona/clients/toolbox-api-client-go"

	"github.com/a55dbaac/berth/backend"
)

// Name is the backend's registered name.
const Name = "daytona"

func init() {
	backend.Register(backend.Registration{
		Name:        Name,
		Description: "a Daytona sandbox per environment that sleeps when idle, through Daytona's API and toolbox",
		New: func(ctx context.Context, opts backend.Options) (backend.Backend, error) {
			return New(ctx, opts)
		},
		Doctor:      Doctor,
		Envs:        envAdmin{},
		ListLags:    true, // a sandbox listing is the service's index, which may trail a create
		Keys:        configKeys,
		Checkpoints: checkpointAdmin{},
	})
}

// ErrClosed is returned by Start after Close.
var ErrClosed = errors.New("daytona: backend closed")

// Backend is one environment: a Daytona sandbox and the processes started
// in it. It is safe for concurrent use.
type Backend struct {
	creds      credentials
	hc         *http.Client
	api        *apiclient.APIClient
	spec       *spec
	sessionEnv map[string]string
	log        *slog.Logger
	begin      func(step, unit string) *backend.Step // set-up progress (backend.Options.Begin)
	home       string                                // berth's home (backend.Options.Home), marked in snapshot names

	// While New makes the sandbox from a checkpoint (Options.From): the
	// snapshot's id and name (see checkpoint.go); "" otherwise.
	fromSnapshot, fromName string

	wake sync.Mutex // serialises waking and recreating the sandbox

	mu        sync.Mutex
	sandbox   sandboxRef
	closed    bool
	recreated backend.Recreation
	procs     map[*ptyProc]struct{} // processes not yet ended
	spare     *ptyProc              // a ready PTY session for the next Start
	spareGen  int                   // the sandbox generation the spare belongs to
	refilling chan struct{}         // closed when the refill in flight ends; nil when none
}

// sandboxRef is the sandbox the backend currently uses.
type sandboxRef struct {
	id      string
	gen     int // bumped whenever the sandbox is woken or replaced
	tb      *toolbox.APIClient
	workdir string // where processes start unless told otherwise ("" = the daemon's choice)
}

// Interface checks.
var (
	_ backend.Backend       = (*Backend)(nil)
	_ backend.Recreator     = (*Backend)(nil)
	_ backend.SessionEnver  = (*Backend)(nil)
	_ backend.FileWriter    = (*Backend)(nil)
	_ backend.OneShotRunner = (*Backend)(nil)
	_ backend.Capable       = (*Backend)(nil)
	_ backend.Checkpointer  = (*Backend)(nil)
)

// Capabilities reports IsolationImage: a Daytona sandbox runs on the provider's machines with
// nothing of this host mounted; and checkpoints as Daytona snapshots (checkpoint.go).
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{Isolation: backend.IsolationImage, Checkpoint: capabilityCheckpoint}
}

// New reads the credentials, then finds the environment's sandbox by name
// and starts it if it sleeps, or creates it. Missing credentials, a
// rejected key (*AuthError) and an unreachable API (*backend.UnreachableError)
// are errors that name the variable to fix.
func New(ctx context.Context, opts backend.Options) (*Backend, error) {
	log := opts.Log()
	creds, err := loadCredentials(opts.Getenv)
	if err != nil {
		return nil, err
	}
	log = log.With("backend", Name, "key", opts.Key)
	sp, err := buildSpec(opts, creds.target, log)
	if err != nil {
		return nil, err
	}
	hc := httpClient(log)
	b := &Backend{
		creds:      creds,
		hc:         hc,
		api:        creds.apiClient(hc),
		spec:       sp,
		sessionEnv: sessionEnv(opts),
		log:        log,
		begin:      opts.Begin,
		home:       opts.Home,
		procs:      map[*ptyProc]struct{}{},
	}
	b.reapOnce(ctx)
	if opts.From != nil {
		if err := b.prepareFrom(ctx, opts.From); err != nil {
			return nil, err
		}
	}
	sb, created, err := b.ensure(ctx)
	if err != nil {
		if b.fromSnapshot != "" {
			b.discardFailedFrom(ctx)
		}
		return nil, err
	}
	if b.fromSnapshot != "" {
		if !created || !b.madeFromSnapshot(sb) {
			return nil, fmt.Errorf("daytona: restore checkpoint %q: another berth made sandbox %s meanwhile, not from the checkpoint; try again", opts.From.Name, sp.Name)
		}
		b.fromSnapshot, b.fromName = "", "" // a sandbox lost later is made afresh
	}
	if err := b.adopt(ctx, sb); err != nil {
		return nil, err
	}
	// The first process (the session's shell) is prepared now: it proves
	// the toolbox works for this sandbox, and the first command finds it
	// ready.
	b.mu.Lock()
	ref := b.sandbox
	b.mu.Unlock()
	spare, err := openPTY(ctx, ref.tb, hc, log)
	if err != nil {
		b.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("daytona: open a terminal in sandbox %s: %w", sp.Name, err)
	}
	b.mu.Lock()
	b.spare, b.spareGen = spare, ref.gen
	b.mu.Unlock()
	if created {
		log.Debug("daytona: sandbox created", "sandbox", sp.Name, "id", sb.Id)
	}
	return b, nil
}

// adopt makes sb the backend's sandbox, turning auto-stop off if someone
// turned it on (berth stops the sandbox itself when it lets go of it), and
// learns its user's home directory, where processes start by default.
func (b *Backend) adopt(ctx context.Context, sb *apiclient.Sandbox) error {
	if sb.GetAutoStopInterval() != 0 {
		if _, resp, err := b.api.SandboxAPI.SetAutostopInterval(ctx, sb.Id, 0).Execute(); err != nil {
			return b.creds.apiErr(err, resp, "turn auto-stop off for sandbox %s", sb.Name)
		}
	}
	tb := b.creds.toolboxClient(b.hc, sb.ToolboxProxyUrl, sb.Id)
	home := ""
	res, resp, err := tb.InfoAPI.GetUserHomeDir(ctx).Execute()
	switch {
	case err != nil:
		b.log.Warn("daytona: the sandbox did not say its user's home directory; processes start in the daemon's directory",
			"sandbox", sb.Name, "err", toolboxErr(err, resp, "get the user's home directory"))
	case !strings.HasPrefix(res.Dir, "/"):
		b.log.Warn("daytona: the sandbox's home directory is not an absolute path; processes start in the daemon's directory",
			"sandbox", sb.Name, "home", res.Dir)
	default:
		home = res.Dir
	}
	b.mu.Lock()
	b.sandbox = sandboxRef{id: sb.Id, gen: b.sandbox.gen + 1, tb: tb, workdir: sandboxDir(b.spec.Cwd, home)}
	b.mu.Unlock()
	return nil
}

// sessionEnv looks up the env_passthrough and docker_forward_env names.
// Unset names are skipped.
func sessionEnv(opts backend.Options) map[string]string {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	env := map[string]string{}
	for _, names := range [][]string{opts.Config.EnvPassthrough, opts.Config.DockerForwardEnv} {
		for _, n := range names {
			if v := getenv(n); v != "" {
				env[n] = v
			}
		}
	}
	return env
}

// Name returns "daytona".
func (b *Backend) Name() string { return Name }

// SandboxID returns the id of the environment's current sandbox.
func (b *Backend) SandboxID() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sandbox.id
}

// SandboxName returns the environment's sandbox name (berth-<key>).
func (b *Backend) SandboxName() string { return b.spec.Name }

// SessionEnv returns the env_passthrough and docker_forward_env variables
// with their values, for the session to export over the shell's input.
// They never appear in the sandbox's definition.
func (b *Backend) SessionEnv() map[string]string { return maps.Clone(b.sessionEnv) }

// Recreated reports, once, whether the sandbox was gone (deleted, or
// failed) and a new one, with an empty filesystem, replaced it. Waking a
// stopped or archived sandbox keeps its filesystem and is not reported.
func (b *Backend) Recreated() bool { return b.recreated.Take() }

// Start runs spec in the sandbox on a PTY session of its own. When the
// sandbox turns out to be asleep (stopped or archived from outside) or gone,
// it is woken or recreated once and the start is tried again.
func (b *Backend) Start(ctx context.Context, spec backend.ProcSpec) (backend.Process, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("daytona: start: empty argv")
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, ErrClosed
	}
	ref := b.sandbox
	b.mu.Unlock()
	if spec.Dir == "" {
		spec.Dir = ref.workdir
	}
	if p := b.takeSpare(ctx, ref.gen); p != nil {
		if err := p.launch(spec); err == nil {
			b.refill()
			return b.track(p), nil
		}
		p.Close() // it died idle (the sandbox slept): start afresh below
	}
	p, err := startPTY(ctx, ref.tb, b.hc, spec, b.log)
	if err == nil {
		b.refill()
		return b.track(p), nil
	}
	if ctx.Err() != nil || !mayBeAsleep(err) {
		return nil, b.startErr(spec, err)
	}
	woke, werr := b.wakeUp(ctx, ref.gen)
	if werr != nil {
		return nil, werr
	}
	if !woke {
		return nil, b.startErr(spec, err)
	}
	b.mu.Lock()
	ref = b.sandbox
	b.mu.Unlock()
	p, err = startPTY(ctx, ref.tb, b.hc, spec, b.log)
	if err != nil {
		return nil, b.startErr(spec, err)
	}
	b.refill()
	return b.track(p), nil
}

// takeSpare returns the ready PTY session when it belongs to generation
// gen and is still alive, or nil. A refill in flight is waited for: it is
// further along than a session opened now would be.
func (b *Backend) takeSpare(ctx context.Context, gen int) *ptyProc {
	b.mu.Lock()
	if b.spare == nil && b.refilling != nil {
		wait := b.refilling
		b.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil
		}
		b.mu.Lock()
	}
	p := b.spare
	ok := p != nil && b.spareGen == gen
	b.spare = nil
	b.mu.Unlock()
	if p == nil {
		return nil
	}
	if !ok || p.exited() {
		p.discard()
		return nil
	}
	return p
}

// refill prepares the next ready PTY session in the background, so the
// next Start (a kill script, a background job, a new shell) costs one
// message instead of a session creation, a websocket handshake and a login
// shell's start: what a timeout or an interrupt waits for.
func (b *Backend) refill() {
	b.mu.Lock()
	if b.closed || b.spare != nil || b.refilling != nil {
		b.mu.Unlock()
		return
	}
	done := make(chan struct{})
	b.refilling = done
	ref := b.sandbox
	b.mu.Unlock()
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
		defer cancel()
		p, err := openPTY(ctx, ref.tb, b.hc, b.log)
		b.mu.Lock()
		b.refilling = nil
		if err != nil || b.closed || b.sandbox.gen != ref.gen || b.spare != nil {
			b.mu.Unlock()
			if err != nil {
				b.log.Debug("daytona: preparing a spare PTY session failed", "err", err)
			} else {
				p.discard()
			}
			return
		}
		b.spare, b.spareGen = p, ref.gen
		b.mu.Unlock()
	}()
}

func (b *Backend) startErr(spec backend.ProcSpec, err error) error {
	if isConnErr(err) {
		return &backend.UnreachableError{Backend: Name, Target: b.creds.shown, Err: err, Hint: "check " + EnvAPIURL + " and the network"}
	}
	return fmt.Errorf("daytona: start %q in sandbox %s: %w", spec.Argv[0], b.spec.Name, err)
}

// mayBeAsleep reports whether a failed start may be a sandbox that went to
// sleep or away: the toolbox refused (400 "is the sandbox started?", 404,
// 409, 410, 5xx) or could not be reached. Rejected credentials and a
// missing stty are not.
func mayBeAsleep(err error) bool {
	var ae *AuthError
	if errors.As(err, &ae) || errors.Is(err, errNoStty) {
		return false
	}
	var api *APIError
	if errors.As(err, &api) {
		return api.Status != http.StatusUnauthorized && api.Status != http.StatusForbidden
	}
	return true
}

// track remembers a live process until it ends.
func (b *Backend) track(p *ptyProc) *ptyProc {
	b.mu.Lock()
	b.procs[p] = struct{}{}
	b.mu.Unlock()
	go func() {
		<-p.exit.Done()
		select {
		case <-p.closed:
		case <-time.After(backend.WaitDelay + time.Second):
		}
		b.mu.Lock()
		delete(b.procs, p)
		b.mu.Unlock()
	}()
	return p
}

// wakeUp brings the sandbox back after a start failed on generation gen:
// it checks the sandbox's state once, starts it when it sleeps, or creates
// a new one when it is gone. woke is false when the sandbox was running
// all along (the failure was something else).
func (b *Backend) wakeUp(ctx context.Context, gen int) (woke bool, err error) {
	b.wake.Lock()
	defer b.wake.Unlock()
	b.mu.Lock()
	cur := b.sandbox
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return false, ErrClosed
	}
	if cur.gen != gen {
		return true, nil // woken by another caller meanwhile
	}
	sb, err := b.get(ctx, cur.id)
	switch {
	case errors.Is(err, errGone):
		b.log.Warn("daytona: the sandbox is gone; creating a new one (its files are lost)", "sandbox", b.spec.Name)
	case err != nil:
		return false, err
	case sb.GetState() == apiclient.SANDBOXSTATE_STARTED:
		return false, nil
	default:
		b.log.Info("daytona: the sandbox is asleep; waking it", "sandbox", b.spec.Name, "state", sb.GetState())
	}
	nsb, created, err := b.ensure(ctx)
	if err != nil {
		return false, err
	}
	if err := b.adopt(ctx, nsb); err != nil {
		return false, err
	}
	if created || nsb.Id != cur.id {
		b.mu.Lock()
		b.recreated.Set()
		b.mu.Unlock()
	}
	return true, nil
}

// Close releases the environment: a persistent sandbox is stopped (its
// filesystem kept for the next berth, which starts it again), a throwaway
// one is deleted. Processes still attached are closed first. It is
// idempotent.
func (b *Backend) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	id := b.sandbox.id
	procs := make([]*ptyProc, 0, len(b.procs))
	for p := range b.procs {
		procs = append(procs, p)
	}
	spare := b.spare
	b.spare = nil
	b.mu.Unlock()
	for _, p := range procs {
		p.Close()
	}
	if spare != nil {
		spare.discard()
	}
	defer b.hc.CloseIdleConnections()
	if b.spec.Persistent {
		if err := b.stop(ctx, id); err != nil {
			return fmt.Errorf("daytona: stop sandbox %s: %w", b.spec.Name, err)
		}
		return nil
	}
	if err := b.delete(ctx, id, false); err != nil {
		return fmt.Errorf("daytona: delete sandbox %s: %w", b.spec.Name, err)
	}
	return nil
}
