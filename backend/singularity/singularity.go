// Package singularity is the backend that runs commands in an Apptainer (or
// SingularityCE) instance per environment key: what HPC clusters offer
// where Docker is not allowed. It drives the `apptainer` executable (else
// `singularity`; terminal.singularity_binary forces one) and needs no root.
//
// # Image
//
// terminal.singularity_image is a .sif file, a sandbox directory, or a
// docker://, docker-daemon://, docker-archive://, oras:// or library://
// reference. A reference is built once with `apptainer build` into
// <berth home>/singularity/sif/ (under a lock, so concurrent berths build it
// once), with APPTAINER_CACHEDIR and APPTAINER_TMPDIR in the scratch
// directory; the build's progress goes to the log. A build that fails
// falls back to running the reference directly, with a warning.
//
// # Instance
//
// Each environment key gets the instance berth_<12 hex digits of the key's
// SHA-256>, started with `instance start --containall --cleanenv --no-home`
// (the apptainer processes get only the variables Apptainer reads, see
// hostEnv) and:
//   - with container_persistent, --overlay <scratch>/overlays/<instance>: a
//     directory when running as root or with user namespaces and
//     fuse-overlayfs, else an ext3 image made once by `overlay create
//     --sparse --size <container_disk>` (terminal.singularity_overlay forces
//     dir or image); it is kept across Close and berth restarts;
//   - otherwise --writable-tmpfs (writes are lost when the instance stops);
//   - --bind for every singularity_binds entry (host:container[:ro]), and
//     the working directory on /workspace with
//     docker_mount_cwd_to_workspace;
//   - --cpus and --memory from container_cpu and container_memory when
//     Apptainer can apply them: a start refused for cgroups is retried
//     without them once per process, and every limit that is not enforced
//     (disk too: an overlay directory or tmpfs has no size) is logged at
//     creation, returned by NotEnforced and reported by berth doctor — never
//     dropped silently;
//   - --net --network none when docker_network is false (a start that
//     Apptainer refuses for the network fails with that reason instead of
//     running with a network).
//
// Beside the overlay, <scratch>/instances/<instance>.json records the key,
// the settings' hash and the owner (boot id, pid, start time and PID
// namespace of the berth process). `instance list --json` finds a running
// instance again: a
// later berth reattaches to it (and takes over the owner mark) when its
// settings match, and replaces it otherwise. The first environment a berth
// process creates in a scratch directory stops the instances of berths that
// died without closing them: persistent ones keep their overlay, throwaway
// ones lose their files.
//
// The scratch directory is TERMINAL_SCRATCH_DIR, else /scratch/$USER/berth
// when that can be created, else <berth home>/singularity.
//
// # Processes
//
// Every process — the session's persistent shell, the kill script,
// background processes, file helpers — is one `apptainer exec --cleanenv
// --pwd DIR instance://NAME ARGV...` run through hostproc. Apptainer joins
// the instance's PID namespace for every exec, so the kill script run by one
// exec sees and kills the tree of a command started by another. --cleanenv
// and hostEnv keep berth's environment (API keys included) out of the
// container and out of the host-side apptainer processes;
// env_passthrough, docker_forward_env and singularity_forward_env variables
// are returned by SessionEnv and exported by the session over the shell's
// stdin, never in a command line. ProcSpec.Env entries reach the process through
// APPTAINERENV_ variables of the apptainer process, not its argv. When the
// instance has vanished (stopped or killed from outside), the next Start
// starts it again (the overlay keeps the files) and Recreated reports it.
//
// Close stops the instance; a throwaway environment's record (and any
// overlay) is removed, a persistent one's overlay is kept.
//
// # Settings
//
// Besides the shared keys (container_*, docker_network, docker_forward_env,
// env_passthrough, cwd), the backend declares singularity_image,
// singularity_binary, singularity_binds, singularity_forward_env,
// singularity_overlay and, like docker, docker_mount_cwd_to_workspace (see
// keys.go). Like every key they are set in the terminal: section of the
// config file, by TERMINAL_<NAME> variables (TERMINAL_SINGULARITY_IMAGE,
// ...) or by flags. docker_volumes is not read: its entries follow Docker's
// grammar (named volumes, :z, ...), so the binds are singularity_binds.
// TERMINAL_SCRATCH_DIR is a plain environment variable (ScratchEnv).
package singularity

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/hostproc"
	"github.com/a55dbaac/berth/internal/procmark"
)

// Name is the backend's registered name.
const Name = "singularity"

var lookPath = exec.LookPath

func init() {
	backend.Register(backend.Registration{
		Name:        Name,
		Description: "an Apptainer/SingularityCE instance per environment, one persistent shell per instance, no root needed",
		New: func(ctx context.Context, opts backend.Options) (backend.Backend, error) {
			return New(ctx, opts)
		},
		Doctor:      Doctor,
		Envs:        envAdmin{},
		Keys:        configKeys,
		Checkpoints: checkpointAdmin{},
	})
}

// ErrClosed is returned by Start after Close.
var ErrClosed = errors.New("singularity: backend closed")

// Capabilities reports IsolationImage for an instance started --containall with
// no host directory bound in, IsolationNone when singularity_binds or
// singularity_mount_cwd_to_workspace bind one: a command there reaches the
// host's files as the user berth runs as. It says how the overlay is
// checkpointed, or why not (checkpoint.go).
func (b *Backend) Capabilities() backend.Capabilities {
	c := backend.Capabilities{Isolation: b.isolation()}
	b.checkpointCaps(&c)
	return c
}

func (b *Backend) isolation() backend.Isolation {
	if len(b.set.binds) > 0 {
		return backend.IsolationNone
	}
	return backend.IsolationImage
}

// Backend is one environment: an instance (started or reattached by New)
// and the processes started in it. It is safe for concurrent use.
type Backend struct {
	set         *settings
	cli         *cli
	image       string      // what instance start runs (a path or, after a failed build, the reference)
	overlayPath string      // "" with --writable-tmpfs
	setsid      atomic.Bool // the image has setsid: processes lead their own group inside
	sessionEnv  map[string]string
	log         *slog.Logger
	progress    func(backend.Event)
	fromKind    overlayMode // the overlay kind of the checkpoint it was made from, "" if none

	mu        sync.Mutex
	pid       int    // host PID of the instance's init
	pidStart  string // its start time, to tell a reused PID
	closed    bool
	recreated backend.Recreation

	limMu       sync.Mutex // guards notEnforced (set while mu may be held)
	notEnforced []string
}

// Interface checks.
var (
	_ backend.Backend      = (*Backend)(nil)
	_ backend.Recreator    = (*Backend)(nil)
	_ backend.SessionEnver = (*Backend)(nil)
	_ backend.Capable      = (*Backend)(nil)
)

// New finds the Apptainer executable, resolves the image (building a
// reference once into the SIF cache), cleans up after crashed berths once
// per process, and reattaches to or starts the instance of opts.Key.
//
// A missing apptainer/singularity executable gives a
// *backend.UnreachableError.
func New(ctx context.Context, opts backend.Options) (*Backend, error) {
	s, err := settingsFrom(opts)
	if err != nil {
		return nil, err
	}
	bin, err := findBinary(s.binary)
	if err != nil {
		return nil, err
	}
	b := &Backend{
		set:        s,
		cli:        &cli{bin: bin},
		sessionEnv: forwardEnv(s.forward, s.getenv),
		log:        opts.Log().With("backend", Name, "key", s.key),
		progress:   opts.Progress,
	}
	if _, err := b.cli.version(ctx); err != nil {
		return nil, &backend.UnreachableError{Backend: Name, Target: bin, Hint: "the executable does not run `version`", Err: err}
	}
	cleanUpOnce(ctx, b.cli, s.scratch, s.name, b.log)
	if b.image, err = resolveImage(ctx, b.cli, s, b.log, opts.Begin); err != nil {
		return nil, err
	}
	if opts.From != nil {
		// An environment made from a checkpoint starts on a fresh copy of
		// its overlay (checkpoint.go).
		if err := b.fromCheckpoint(ctx, opts.From); err != nil {
			return nil, err
		}
	}
	if err := b.start(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// start ensures the instance runs and remembers its PID, and makes the
// default working directory exist.
func (b *Backend) start(ctx context.Context) error {
	pid, err := b.ensure(ctx)
	if err != nil {
		return err
	}
	st, _ := procmark.StartTime(pid)
	b.pid, b.pidStart = pid, st
	return b.mkdirCwd(ctx)
}

// mkdirCwd makes the default working directory exist in the instance (the
// image may lack it, and a --writable-tmpfs root starts afresh) and learns
// whether the image has setsid.
func (b *Backend) mkdirCwd(ctx context.Context) error {
	out, code, err := backend.Output(ctx, rawExec{b}, backend.ProcSpec{Argv: []string{"/bin/sh", "-c",
		`mkdir -p -- "$1" || exit; command -v setsid >/dev/null && echo setsid; exit 0`, "berth-mkdir", b.set.cwd}, Dir: "/"}, nil, 4096)
	if err != nil || code != 0 {
		return fmt.Errorf("singularity: make the working directory %s in instance %s: exit %d: %s %v", b.set.cwd, b.set.name, code, strings.TrimSpace(string(out)), err)
	}
	b.setsid.Store(strings.TrimSpace(string(out)) == "setsid")
	if !b.setsid.Load() {
		b.log.Warn("singularity: the image has no setsid: processes will not lead their own process group inside the instance, so children a command orphans escape timeouts and interrupts", "image", b.image)
	}
	return nil
}

// rawExec starts processes without Start's liveness check and lock, for
// the backend's own helpers while it (re)starts the instance.
type rawExec struct{ b *Backend }

func (r rawExec) Name() string                    { return Name }
func (r rawExec) Close(ctx context.Context) error { return nil }
func (r rawExec) Start(ctx context.Context, ps backend.ProcSpec) (backend.Process, error) {
	return r.b.exec(ps)
}

// forwardEnv looks up the forwarded names; unset ones are skipped.
func forwardEnv(names []string, getenv func(string) string) map[string]string {
	env := map[string]string{}
	for _, n := range names {
		if v := getenv(n); v != "" {
			env[n] = v
		}
	}
	return env
}

// Name returns "singularity".
func (b *Backend) Name() string { return Name }

// Instance is the Apptainer instance name of the environment.
func (b *Backend) Instance() string { return b.set.name }

// Image is what the instance runs: the cached SIF of a reference, a path,
// or the reference itself when its build failed.
func (b *Backend) Image() string { return b.image }

// Overlay is the persistent overlay (directory or ext3 image), "" when the
// environment uses --writable-tmpfs.
func (b *Backend) Overlay() string { return b.overlayPath }

// NotEnforced lists the configured limits Apptainer does not enforce for
// this environment, with the reason; berth doctor reports the same.
func (b *Backend) NotEnforced() []string {
	b.limMu.Lock()
	defer b.limMu.Unlock()
	return append([]string(nil), b.notEnforced...)
}

// SessionEnv returns the env_passthrough, docker_forward_env and
// singularity_forward_env variables with their values, for the session to export over the shell's
// stdin.
func (b *Backend) SessionEnv() map[string]string { return maps.Clone(b.sessionEnv) }

// Recreated reports, once, whether the instance had to be started again
// because it vanished from outside.
func (b *Backend) Recreated() bool { return b.recreated.Take() }

// alive reports whether the instance's init still runs (a cheap check on
// /proc, no Apptainer call).
func (b *Backend) alive() bool {
	st, ok := procmark.StartTime(b.pid)
	return ok && st == b.pidStart
}

// Start runs ps.Argv in the instance as one `apptainer exec`.
func (b *Backend) Start(ctx context.Context, ps backend.ProcSpec) (backend.Process, error) {
	if len(ps.Argv) == 0 {
		return nil, errors.New("singularity: start: empty argv")
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, ErrClosed
	}
	if !b.alive() {
		b.log.Warn("singularity: instance gone, starting it again", "instance", b.set.name, "pid", b.pid)
		if err := b.restartLocked(ctx); err != nil {
			b.mu.Unlock()
			return nil, err
		}
	}
	b.mu.Unlock()
	return b.exec(ps)
}

// restartLocked starts the vanished instance again; b.mu is held.
func (b *Backend) restartLocked(ctx context.Context) error {
	pid, err := b.ensure(ctx)
	if err != nil {
		return fmt.Errorf("singularity: restart instance %s: %w", b.set.name, err)
	}
	st, _ := procmark.StartTime(pid)
	b.pid, b.pidStart = pid, st
	b.recreated.Set()
	return b.mkdirCwd(ctx)
}

// exec builds the apptainer exec command and starts it through hostproc.
func (b *Backend) exec(ps backend.ProcSpec) (backend.Process, error) {
	dir := ps.Dir
	if dir == "" {
		dir = b.set.cwd
	}
	args := []string{"exec", "--cleanenv", "--pwd", dir, "instance://" + b.set.name}
	if b.setsid.Load() {
		// A process exec'd into an instance belongs to the host's process
		// group (PGID 0 inside); setsid makes it lead its own group and
		// session there, as every process does on the other backends, so
		// the kill script finds what it orphans by its process group.
		args = append(args, "setsid")
	}
	args = append(args, ps.Argv...)
	cmd := exec.Command(b.cli.bin, args...)
	env := hostEnv(os.Environ(), false)
	for _, kv := range ps.Env {
		env = append(env, "APPTAINERENV_"+kv, "SINGULARITYENV_"+kv)
	}
	cmd.Env = env
	p, err := hostproc.Start(cmd, ps.TTY)
	if err != nil {
		return nil, fmt.Errorf("singularity: exec in instance %s: %w", b.set.name, err)
	}
	return p, nil
}

// Close stops the instance. A persistent environment keeps its overlay and
// record (marked stopped); a throwaway one's files are removed. It is
// idempotent.
func (b *Backend) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	s := b.set
	if err := b.cli.stop(ctx, s.name); err != nil {
		return err
	}
	if !s.persistent {
		return removeEnvFiles(s.scratch, s.name)
	}
	if rec, err := readRecord(s.scratch, s.name); err == nil {
		rec.Stopped = time.Now().UTC()
		return writeRecord(s.scratch, rec)
	}
	return nil
}

// kill sends sig to the instance's init from the host (tests simulate an
// instance killed from outside with it).
func (b *Backend) kill(sig syscall.Signal) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return syscall.Kill(b.pid, sig)
}
