// Package modal is the backend that runs berth's environments in Modal
// sandboxes (https://modal.com), through Modal's own Go SDK
// (github.com/modal-labs/libmodal/modal-go v0.7.3).
//
// Each environment key has one sandbox in the app modal_app (default
// "berth"), named from the key and its owner (user, host and berth home) and
// tagged with them, so a second berth for the same key reattaches to the
// running sandbox and berth env ls/rm/prune find it. The sandbox runs
// modal_image (a registry name, or an "im-..." image id) with the
// container_cpu and container_memory requests, no network when
// docker_network is false, and modal_sandbox_timeout and
// modal_idle_timeout (the keys are declared in keys.go); container_disk has no counterpart in the SDK and is not
// applied.
//
// Every process berth starts is one Sandbox.Exec with stdin, stdout and
// stderr streamed through Modal's command router. The session keeps one
// long-lived exec of the shell, so a command costs one stdin write and the
// output streams back as it is produced; timeouts and interrupts run the
// session's kill script as another exec, killing the command's tree and
// nothing else — the sandbox and the shell's state live on. Variables to
// forward (docker_env, env_passthrough, docker_forward_env) are handed to
// the session (SessionEnv), which exports them over the shell's stdin: they
// are never in the sandbox's definition.
//
// With container_persistent the filesystem is snapshotted on Close
// (SnapshotFilesystem), and every modal_snapshot_interval while the
// sandbox runs, and the image id recorded in
// $BERTH_HOME/modal_snapshots.json as {"direct:<key>": "<image id>"}; the
// next sandbox for the key starts from it. A snapshot that can no longer be
// restored is dropped with a warning, the base image is used, and the next
// result says environment_recreated.
//
// Checkpoints (fork, checkpoint, restore) are filesystem snapshots of the
// running sandbox too, and an environment made from one (Options.From) is
// a new sandbox from the snapshot's image (checkpoint.go).
//
// A sandbox lives modal_sandbox_timeout at most. Before it ends, berth
// carries the environment over into a new sandbox started from a snapshot
// of it (lifetime.go); the session restarts its shell there with the cwd
// and exported variables restored (backend.Renewer) and the next result
// says environment_recreated. A sandbox that dies under berth anyway
// (terminated from the dashboard) is noticed at once through Modal's long
// poll (watch.go), even when its command router no longer answers: the
// commands running in it fail, and the next Start recreates it from the
// latest snapshot (environment_recreated again).
//
// Calls Modal rate-limits (RESOURCE_EXHAUSTED, after the delay its
// RPCRetryPolicy asks for) or fails transiently are retried with backoff
// for modal_retry_timeout, then given up with a *GaveUpError saying so
// (retry.go). New sandboxes that are still being scheduled are waited for
// by the SDK itself (it polls for their task id).
//
// Credentials are Modal's own: MODAL_TOKEN_ID and MODAL_TOKEN_SECRET
// (environment or berth's .env), else the profile of ~/.modal.toml
// (MODAL_CONFIG_PATH, MODAL_PROFILE, or the active one); MODAL_ENVIRONMENT and
// MODAL_SERVER_URL as the Modal CLI reads them. Missing or rejected
// credentials are a *CredentialsError naming the source; an unreachable
// server a *backend.UnreachableError. Neither ever falls back to another
// backend.
package modal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/a55dbaac/berth/backend"
	modal "github.com/modal-labs/libmodal/modal-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Name is the backend's registered name.
const Name = "modal"

func init() {
	backend.Register(backend.Registration{
		Name:        Name,
		Description: "one Modal sandbox per environment, one streamed shell exec in it",
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
var ErrClosed = errors.New("modal: backend closed")

// snapshotTimeout bounds a filesystem snapshot on Close.
const snapshotTimeout = 5 * time.Minute

// Backend is one environment: a Modal sandbox and the execs in it. It is
// safe for concurrent use.
type Backend struct {
	set    settings
	cred   credentials
	begin  func(step, unit string) *backend.Step // set-up progress (backend.Options.Begin)
	owner  string
	client *modal.Client
	app    *modal.App
	snaps  snapshots
	log    *slog.Logger

	// from is the image of the checkpoint the environment was made from
	// (Options.From), "" if none; fromFirst holds until its first sandbox
	// runs (checkpoint.go).
	from, fromName string
	fromFirst      bool

	// The lifetime loop (lifetime.go): carries the sandbox over before its
	// timeout, snapshots a persistent one periodically.
	loopCancel context.CancelFunc
	loopDone   chan struct{}
	kick       chan struct{} // wakes the loop when the sandbox changes

	// mu guards the fields below and is held across the SDK's Sandbox
	// methods that are not safe for concurrent use (Exec, Open, Terminate
	// share its cached task id).
	mu        sync.Mutex
	sb        *modal.Sandbox
	watch     *watcher   // follows sb
	watchers  []*watcher // every watcher still running, stopped on Close
	closed    bool
	recreated backend.Recreation
	life      lifetime
}

// Interface checks.
var (
	_ backend.Backend      = (*Backend)(nil)
	_ backend.Recreator    = (*Backend)(nil)
	_ backend.SessionEnver = (*Backend)(nil)
	_ backend.FileWriter   = (*Backend)(nil)
	_ backend.Capable      = (*Backend)(nil)
	_ backend.Renewer      = (*Backend)(nil)
)

// Capabilities reports IsolationImage: a Modal sandbox runs on the provider's machines with
// nothing of this host mounted.
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{Isolation: backend.IsolationImage, Checkpoint: checkpointHow}
}

// logger is the options' logger, else slog's default.
// getenv is the options' lookup, else the process environment.
func getenv(opts backend.Options) func(string) string {
	if opts.Getenv != nil {
		return opts.Getenv
	}
	return os.Getenv
}

// New resolves the credentials, connects to Modal (which checks them),
// looks up or creates the app, and reattaches to the key's running sandbox
// or creates it (from the key's snapshot when persistent).
func New(ctx context.Context, opts backend.Options) (*Backend, error) {
	set, err := readSettings(opts)
	if err != nil {
		return nil, err
	}
	cred, err := resolveCredentials(getenv(opts))
	if err != nil {
		return nil, err
	}
	log := opts.Log().With("backend", Name, "key", set.Key)
	client, err := newClient(ctx, cred, log, set.Retry)
	if err != nil {
		return nil, err
	}
	b := &Backend{
		set:    set,
		cred:   cred,
		begin:  opts.Begin,
		owner:  ownerOf(opts.Home),
		client: client,
		snaps:  snapshots{dir: opts.Home},
		log:    log,
		kick:   make(chan struct{}, 1),
	}
	if err := b.startFrom(opts.From); err != nil {
		client.Close()
		return nil, err
	}
	b.app, err = client.Apps.FromName(ctx, set.App, &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		client.Close()
		return nil, b.wrap(err, "look up app %s", set.App)
	}
	b.cleanUpOnce(ctx)
	b.mu.Lock()
	err = b.attachOrCreate(ctx)
	if err == nil {
		b.startedFrom(ctx)
	}
	b.mu.Unlock()
	if err != nil {
		b.stopWatchers()
		client.Close()
		return nil, err
	}
	b.startLifetime()
	return b, nil
}

// wrap adds context to an SDK error, classifying rejected credentials and
// an unreachable server.
func (b *Backend) wrap(err error, format string, args ...any) error {
	if g, ok := gaveUp(err); ok {
		if g.Throttled() {
			return fmt.Errorf("modal: "+format+": %w (Modal rate-limits this workspace: wait and try again, run fewer environments at once, or raise %s)", append(args, err, keyRetryTimeout)...)
		}
		return &backend.UnreachableError{Backend: Name, Target: b.cred.ServerURL, Hint: "Modal kept failing; check status.modal.com and the network, or raise " + keyRetryTimeout, Err: fmt.Errorf(format+": %w", append(args, err)...)}
	}
	switch status.Code(unwrapAll(err)) {
	case codes.Unauthenticated, codes.PermissionDenied:
		return &CredentialsError{Source: b.cred.Source, Reason: "Modal at " + b.cred.ServerURL + " rejected the token " + b.cred.TokenID, Err: err}
	case codes.Unavailable:
		return &backend.UnreachableError{Backend: Name, Target: b.cred.ServerURL, Hint: "check the network, or MODAL_SERVER_URL", Err: err}
	}
	return fmt.Errorf("modal: "+format+": %w", append(args, err)...)
}

// Name returns "modal".
func (b *Backend) Name() string { return Name }

// SandboxID returns the id of the environment's current sandbox.
func (b *Backend) SandboxID() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sb == nil {
		return ""
	}
	return b.sb.SandboxID
}

// SessionEnv returns the variables to export into the session (docker_env,
// env_passthrough, docker_forward_env). They may be secrets: berth sends
// them over the shell's stdin and never puts them in the sandbox's
// definition or in an exec's arguments.
func (b *Backend) SessionEnv() map[string]string { return maps.Clone(b.set.SessionEnv) }

// Recreated reports, once, whether the sandbox was rebuilt since the last
// call: it died under berth, or its snapshot could not be restored.
func (b *Backend) Recreated() bool { return b.recreated.Take() }

// attachOrCreate makes b.sb the key's running sandbox. b.mu is held.
func (b *Backend) attachOrCreate(ctx context.Context) error {
	name := sandboxName(b.owner, b.set.Key)
	sb, err := b.client.Sandboxes.FromName(ctx, b.set.App, name, nil)
	if err == nil {
		if err := b.refuseReattach(sb); err != nil {
			return err
		}
		b.log.Info("modal: reattached to the running sandbox", "sandbox", sb.SandboxID)
		b.setSandbox(sb, b.deadlineOf(b.retag(ctx, sb)))
		return nil
	}
	if !isNotFound(err) {
		return b.wrap(err, "look up sandbox %s in app %s", name, b.set.App)
	}
	img, err := b.image(ctx)
	if err != nil {
		return err
	}
	// The lifetime counts on Modal's side from when it accepts the
	// request: from here on this side.
	asked := time.Now()
	params := &modal.SandboxCreateParams{
		CPU:          b.set.CPU,
		MemoryMiB:    b.set.MemoryMiB,
		Timeout:      b.set.Timeout,
		IdleTimeout:  b.set.IdleTimeout,
		BlockNetwork: !b.set.Network,
		Workdir:      b.set.Workdir,
		Name:         name,
	}
	step := b.begin("creating Modal sandbox "+name, "")
	sb, err = b.client.Sandboxes.Create(ctx, b.app, img, params)
	step.End(err)
	if errors.As(err, new(modal.AlreadyExistsError)) {
		// Another berth created it a moment ago: use that one.
		if sb, err = b.client.Sandboxes.FromName(ctx, b.set.App, name, nil); err == nil {
			if err := b.refuseReattach(sb); err != nil {
				return err
			}
			b.setSandbox(sb, b.deadlineOf(b.retag(ctx, sb)))
			return nil
		}
	}
	if err != nil {
		return b.wrap(err, "create sandbox %s (image %s) in app %s", name, b.set.Image, b.set.App)
	}
	persistent := "0"
	if b.set.Persistent {
		persistent = "1"
	}
	deadline := asked.Add(b.set.Timeout)
	tags := map[string]string{
		TagKey:        b.set.Key,
		TagOwner:      b.owner,
		TagProcess:    currentProcess(),
		TagCreated:    asked.UTC().Format(time.RFC3339),
		TagPersistent: persistent,
		TagExpires:    deadline.UTC().Format(time.RFC3339Nano),
	}
	if err := sb.SetTags(ctx, tags); err != nil {
		sb.Terminate(context.WithoutCancel(ctx), nil)
		return b.wrap(err, "tag sandbox %s", sb.SandboxID)
	}
	b.setSandbox(sb, deadline)
	b.log.Info("modal: created sandbox", "sandbox", sb.SandboxID, "name", name, "image", img.ImageID, "expires", deadline.Format(time.RFC3339))
	return nil
}

// retag marks a reattached sandbox as held by this process, keeping its
// other tags, and returns them (nil when they cannot be read).
func (b *Backend) retag(ctx context.Context, sb *modal.Sandbox) map[string]string {
	tags, err := sb.GetTags(ctx)
	if err != nil {
		b.log.Warn("modal: read the tags of a reattached sandbox", "sandbox", sb.SandboxID, "err", err)
		return nil
	}
	if tags[TagProcess] == currentProcess() {
		return tags
	}
	tags[TagProcess] = currentProcess()
	if err := sb.SetTags(ctx, tags); err != nil {
		b.log.Warn("modal: tag a reattached sandbox", "sandbox", sb.SandboxID, "err", err)
	}
	return tags
}

// setSandbox makes sb the environment's sandbox, ending at deadline, and
// starts following it. b.mu is held.
func (b *Backend) setSandbox(sb *modal.Sandbox, deadline time.Time) {
	b.sb = sb
	b.watch = watchSandbox(sb, b.log)
	live := b.watchers[:0]
	for _, w := range b.watchers {
		select {
		case <-w.exited:
		default:
			live = append(live, w)
		}
	}
	b.watchers = append(live, b.watch)
	b.life.reset(deadline, b.set.SnapshotEvery)
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// stopWatchers stops following every sandbox.
func (b *Backend) stopWatchers() {
	b.mu.Lock()
	ws := b.watchers
	b.watchers = nil
	b.mu.Unlock()
	for _, w := range ws {
		w.stop()
	}
}

// image returns what a new sandbox starts from: the key's snapshot when
// persistent and restorable, else modal_image. A snapshot that can no
// longer be restored is dropped (the result will say
// environment_recreated). b.mu is held.
func (b *Backend) image(ctx context.Context) (*modal.Image, error) {
	if b.fromFirst {
		return b.fromImage(ctx, true)
	}
	if id := b.life.carry; id != "" {
		// A non-persistent environment carried over, or about to be: its
		// files are in this snapshot.
		img, err := b.client.Images.FromID(ctx, id)
		if err == nil {
			return img, nil
		}
		if !isNotFound(err) {
			return nil, b.wrap(err, "look up the carried-over snapshot %s of %s", id, b.set.Key)
		}
		b.log.Warn("modal: the carried-over snapshot is gone; starting from modal_image", "image", id)
		b.life.carry = ""
		b.recreated.Set()
	}
	if b.set.Persistent {
		id, err := b.snaps.get(b.set.Key)
		if err != nil {
			return nil, err
		}
		if id != "" {
			img, err := b.client.Images.FromID(ctx, id)
			if err == nil {
				b.log.Info("modal: restoring the environment's snapshot", "image", id)
				return img, nil
			}
			if !isNotFound(err) {
				return nil, b.wrap(err, "look up snapshot %s of %s", id, b.set.Key)
			}
			b.log.Warn("modal: the environment's snapshot can no longer be restored; starting from modal_image",
				"image", id, "modal_image", b.set.Image, "err", err)
			if err := b.snaps.drop(b.set.Key, id); err != nil {
				b.log.Warn("modal: drop the snapshot record", "err", err)
			}
			b.recreated.Set()
		}
	}
	if b.from != "" {
		if img, err := b.fromImage(ctx, false); err != nil || img != nil {
			return img, err
		}
	}
	if strings.HasPrefix(b.set.Image, "im-") {
		img, err := b.client.Images.FromID(ctx, b.set.Image)
		if err != nil {
			if isNotFound(err) {
				return nil, fmt.Errorf("modal: modal_image %s: no such image in this Modal workspace: %w", b.set.Image, err)
			}
			return nil, b.wrap(err, "look up modal_image %s", b.set.Image)
		}
		return img, nil
	}
	return b.client.Images.FromRegistry(b.set.Image, nil), nil
}

func isNotFound(err error) bool {
	return errors.As(err, new(modal.NotFoundError)) || status.Code(unwrapAll(err)) == codes.NotFound
}

// Start runs spec as one Sandbox.Exec. If the sandbox died under berth, it
// is recreated once (the next Recreated call reports it) and the exec
// retried.
func (b *Backend) Start(ctx context.Context, spec backend.ProcSpec) (backend.Process, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("modal: Start needs a command")
	}
	params := &modal.SandboxExecParams{Workdir: spec.Dir, PTY: spec.TTY}
	if len(spec.Env) > 0 {
		params.Env = make(map[string]string, len(spec.Env))
		for _, kv := range spec.Env {
			k, v, _ := strings.Cut(kv, "=")
			params.Env[k] = v
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	switch {
	case b.sb == nil:
		if err := b.recreate(ctx, errors.New("no sandbox")); err != nil {
			return nil, err
		}
	case b.watch.finished():
		if err := b.recreate(ctx, b.watch.reason()); err != nil {
			return nil, err
		}
	}
	cp, err := b.sb.Exec(ctx, spec.Argv, params)
	if err != nil {
		if !b.dead(ctx) {
			return nil, b.wrap(err, "exec %s in sandbox %s", spec.Argv[0], b.sb.SandboxID)
		}
		if err := b.recreate(ctx, err); err != nil {
			return nil, err
		}
		if cp, err = b.sb.Exec(ctx, spec.Argv, params); err != nil {
			return nil, b.wrap(err, "exec %s in the recreated sandbox %s", spec.Argv[0], b.sb.SandboxID)
		}
	}
	return newProcess(cp, b.sb, b.watch), nil
}

// dead reports whether the current sandbox has finished (or is unknown).
// b.mu is held.
func (b *Backend) dead(ctx context.Context) bool {
	if b.watch.finished() {
		return true
	}
	code, err := b.sb.Poll(ctx)
	switch {
	case err == nil:
		return code != nil
	case isNotFound(err), errors.As(err, new(modal.ClientClosedError)):
		return true
	}
	return false
}

// recreate replaces a dead sandbox. b.mu is held.
func (b *Backend) recreate(ctx context.Context, why error) error {
	old := ""
	if b.sb != nil {
		old = b.sb.SandboxID
		b.sb.Detach()
		b.sb = nil
	}
	b.log.Warn("modal: the sandbox is gone; recreating it", "sandbox", old, "cause", why)
	if err := b.attachOrCreate(ctx); err != nil {
		return fmt.Errorf("modal: recreate the sandbox of %s (it died: %v): %w", b.set.Key, why, err)
	}
	b.recreated.Set()
	return nil
}

// Close ends the environment. A persistent one is snapshotted first and the
// image id recorded for the next sandbox of the key; if that snapshot
// fails, the sandbox is left running (it stops at its timeout) so nothing
// is lost, and the error says so. Then the sandbox is terminated and the
// client closed. Close is idempotent.
func (b *Backend) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	sb := b.sb
	b.sb = nil
	carry := b.life.carry
	b.mu.Unlock()
	// Nothing snapshots or carries over from here on: the snapshot of
	// Close is the last word.
	b.stopLifetime()
	defer b.client.Close()
	defer b.stopWatchers()
	if sb == nil {
		b.dropCarry(ctx, carry)
		return nil
	}
	if b.set.Persistent {
		if code, err := sb.Poll(ctx); err == nil && code == nil {
			if err := b.snapshot(ctx, sb); err != nil {
				sb.Detach()
				return fmt.Errorf("%w; the sandbox %s is left running so nothing is lost (it stops after its timeout; `berth env rm %s` removes it)", err, sb.SandboxID, b.set.Key)
			}
		}
	}
	if _, err := sb.Terminate(ctx, nil); err != nil && !isNotFound(err) {
		return b.wrap(err, "terminate sandbox %s", sb.SandboxID)
	}
	b.log.Info("modal: terminated sandbox", "sandbox", sb.SandboxID)
	b.dropCarry(ctx, carry)
	return nil
}

// dropCarry deletes the carried-over snapshot of a non-persistent
// environment, once nothing can start from it.
func (b *Backend) dropCarry(ctx context.Context, id string) {
	if id == "" {
		return
	}
	if err := b.client.Images.Delete(ctx, id, nil); err != nil && !isNotFound(err) {
		b.log.Warn("modal: delete the carried-over snapshot", "image", id, "err", err)
	}
}

// snapshot records a filesystem snapshot of sb as the key's, deleting the
// one it replaces.
func (b *Backend) snapshot(ctx context.Context, sb *modal.Sandbox) error {
	img, err := sb.SnapshotFilesystem(ctx, snapshotTimeout)
	if err != nil {
		return b.wrap(err, "snapshot sandbox %s", sb.SandboxID)
	}
	return b.record(ctx, img.ImageID)
}

// record makes image the key's snapshot, deleting the one it replaces.
func (b *Backend) record(ctx context.Context, image string) error {
	file := filepath.Join(b.snaps.dir, SnapshotsFile)
	old, err := b.snaps.set(b.set.Key, image)
	if err != nil {
		return fmt.Errorf("modal: record snapshot %s in %s: %w", image, file, err)
	}
	b.log.Info("modal: snapshot recorded", "image", image, "file", file)
	if old != "" && old != image {
		if err := b.client.Images.Delete(ctx, old, nil); err != nil && !isNotFound(err) {
			b.log.Warn("modal: delete the replaced snapshot", "image", old, "err", err)
		}
	}
	return nil
}
