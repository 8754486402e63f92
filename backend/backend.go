// Package backend is the whole contract between berth and an execution
// target (local, docker, ssh, singularity, modal, daytona, ...), kept in one
// place the way database/sql/driver keeps a driver's: the small required
// interfaces, every optional capability, the typed errors, the helpers every
// backend shares, and the registry that maps names to constructors.
//
// # Required
//
// A backend implements [Backend] (Name, Start, Close) and returns a
// [Process] (Stdin, Stdout, Wait, Close) from Start. Everything else — the
// persistent shell, framing, timeouts, killing trees, the output pipeline,
// the file tools — is written once above this package and works on any
// backend. A backend registers itself from an init function with
// [Register]; package backend/all imports every built-in one.
//
// # Optional capabilities
//
// Callers ask for these by type assertion, never by backend name:
//
//   - [SessionEnver]: variables to export into the persistent shell over its
//     stdin (forwarded secrets, env_passthrough). berth never puts them in
//     an argv or in the environment's stored definition.
//   - [Recreator]: the environment can vanish from outside (a container
//     removed by hand, a sandbox that timed out) and was rebuilt; berth sets
//     environment_recreated on the next result.
//   - [Renewer]: the environment lives a bounded time and is carried over
//     into a new one before it ends; the session asks between commands,
//     and restarts its shell (cwd and exported variables restored) after a
//     carry-over.
//   - [Checkpointer]: the environment's files can be copied into a
//     [Checkpoint] that outlives it, and a new environment made from one
//     (Options.From): fork, checkpoint and restore. [Relocator] maps paths
//     when the copy lives elsewhere; Registration.Checkpoints removes them.
//   - [FileWriter]: a native file API (Docker's archive endpoint, SFTP, a
//     provider's upload call). write_file sends the bytes through it; a path
//     it cannot serve is declined with [ErrUnsupported] and the shell takes
//     over.
//   - [Capable]: the environment's facts in one [Capabilities] value: how
//     far it keeps commands from the machine they could damage
//     ([Isolation]), what the kernel confines ([Confinement]), whether it
//     is this machine's own filesystem (the file tools then use the os
//     package directly). The approval gate reads it, never a backend's
//     name; a backend that does not report gets the zero value
//     ([IsolationNone]).
//   - [OneShotRunner]: how the reference system runs one command on this
//     backend when that is not one Start per command (a provider's one-shot
//     exec API after a state check); berth bench times it as the baseline.
//   - Registration.Doctor: is the backend usable here, and if not, what to do
//     (berth doctor).
//   - Registration.Envs ([EnvAdmin]): environments kept beyond one berth
//     process (containers, instances, sandboxes), for berth env ls/rm/prune.
//   - Registration.Keys: the backend's own configuration keys.
//
// [ErrUnsupported] is the run-time decline of any optional capability,
// like database/sql/driver.ErrSkip: "act as if I did not implement this".
// [UnreachableError] says the target could not be reached; berth never falls
// back to another backend when it sees one.
//
// # What the session assumes of a target
//
// The persistent shell and its helpers need, inside the environment: /bin/sh
// (POSIX; bash is used when present), the usual utilities of busybox level
// (cat, kill, sleep, mkdir, mv, rm, mktemp), /proc (the kill script finds a
// command's tree there), and a writable temporary directory (/tmp, or
// $TMPDIR) for large stdin and background preambles. Processes started by
// Start must be able to see and signal each other's processes (one PID
// namespace per environment), because timeouts are enforced by a second
// process that kills the command's tree from inside.
package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

// ProcSpec describes a process to start inside an environment.
type ProcSpec struct {
	// Argv is the program and its arguments. Argv[0] is looked up on the
	// target's PATH.
	Argv []string
	// Dir is the working directory inside the target; empty means the
	// backend's default.
	Dir string
	// Env holds extra KEY=VALUE pairs for the process. Backends that cannot
	// pass an environment without exposing it (for example in a command line)
	// may ignore it; secrets are delivered by the session instead.
	Env []string
	// TTY asks for a pseudo-terminal. Backends that cannot provide one return
	// ErrNoTTY.
	TTY bool
}

// Process is a running process inside an environment.
//
// Stdout carries the process's standard output and standard error merged in
// arrival order where the backend can merge them; the session layer redirects
// its shell's stderr into stdout itself, so backends that deliver stderr
// separately may simply discard it.
type Process interface {
	// Stdin is the process's standard input. Closing it sends EOF.
	Stdin() io.WriteCloser
	// Stdout is the process's output stream. It returns io.EOF (or another
	// error) once the process has exited and its output was drained, or
	// after Close. Once Wait has returned it ends as soon as no output has
	// arrived for WaitDelay (MaxDrain at the latest), even when a
	// descendant of the process still holds the stream open (the after-exit
	// bound of os/exec's Cmd.WaitDelay, made tolerant of output that lags
	// behind the exit status over a network), so callers never need a timer
	// of their own; WithWaitDelay adds the bound to a process that cannot
	// enforce it natively.
	Stdout() io.Reader
	// Wait blocks until the process exits and returns its exit status:
	// the exit code, or 128+N when it was killed by signal N. It must return
	// even when a descendant of the process still holds the output stream
	// open. The error is non-nil only when the status could not be learnt.
	Wait() (int, error)
	// Close releases the client side of the process (pipes, channels,
	// connections) without waiting. It does not necessarily stop the process
	// inside the target; the session kills trees itself.
	Close() error
}

// Backend is an execution target: one environment (a host, a container, a
// remote machine) in which processes can be started.
//
// Implementations must be safe for concurrent use.
type Backend interface {
	// Name is the backend's registered name ("local", "docker", ...).
	Name() string
	// Start starts a process in the environment. The context bounds the
	// start only, not the life of the process.
	Start(ctx context.Context, spec ProcSpec) (Process, error)
	// Close releases the environment according to the backend's persistence
	// policy (a persistent container is stopped or kept, a throwaway one is
	// removed). It is idempotent.
	Close(ctx context.Context) error
}

// Recreator is implemented by backends whose environment can disappear from
// outside (a container removed by hand). Recreated reports, once, whether the
// environment had to be rebuilt since the last call.
type Recreator interface {
	Recreated() bool
}

// Renewer is implemented by backends whose environment lives a bounded
// time (a provider's hard sandbox lifetime) and is carried over into a new
// one before it ends, its filesystem kept. The session calls Renew between
// commands, when nothing of its own runs in the environment, so a backend
// can carry it over then rather than under a running command. Renew
// reports whether the environment was carried over since the last call
// (during the call or in the background): the session's shell was in the
// old one, so the session starts a new shell with its working directory
// and exported variables restored. A backend also reports the carry-over
// as a recreation (Recreator), which the next result says.
type Renewer interface {
	Renew(ctx context.Context) bool
}

// SessionEnver is implemented by backends that have variables to deliver
// into the persistent shell (forwarded secrets, env_passthrough). The session
// exports them through the shell's stdin at start, so they never appear in a
// command line or in the environment's stored configuration.
type SessionEnver interface {
	SessionEnv() map[string]string
}

// Isolation says how far an environment keeps its commands from a machine
// they could damage, as Nomad's drivers declare Capabilities.FSIsolation.
// The approval gate decides from it which rules protect anything: the
// hardline floor, for one, guards a real machine and has nothing to guard
// in a throwaway image.
type Isolation int

const (
	// IsolationNone: commands act on a real machine's files and processes
	// (this host, an ssh host, a container with host directories mounted).
	// It is the zero value, so a backend that does not report is treated
	// as the least isolated.
	IsolationNone Isolation = iota
	// IsolationWorkspace: commands run on this machine, but the kernel lets
	// them write only under the environment's workspace and signal only
	// its own processes; what they read is the host's.
	IsolationWorkspace
	// IsolationImage: commands run in a filesystem and process space of
	// their own, with nothing of the host mounted (a container or sandbox
	// without host mounts).
	IsolationImage
)

// String returns "none", "workspace" or "image".
func (i Isolation) String() string {
	switch i {
	case IsolationWorkspace:
		return "workspace"
	case IsolationImage:
		return "image"
	}
	return "none"
}

// Confinement is what the kernel enforces on an environment that reports
// IsolationWorkspace: where its commands may write, whom they may signal,
// what network they may reach. The approval gate reads it to know which
// rules the kernel already enforces.
type Confinement struct {
	// Writable are the absolute directory trees the commands may write
	// (the workspace, the environment's temporary directory, paths the
	// user listed); everything else is read-only to them.
	Writable []string
	// Protected are paths inside the Writable trees that the kernel keeps
	// read-only all the same (berth's own home and configuration, a
	// repository's .git/hooks and .git/config), however a command spells
	// or assembles the path. A path of that kind that is not listed here is
	// not protected by the kernel, and the approval gate keeps asking about
	// writes to it.
	Protected []string
	// Signals is true when the commands cannot signal processes outside
	// the environment.
	Signals bool
	// Network is "" (unrestricted), "loopback" (only 127.0.0.1/::1) or
	// "none".
	Network string
}

// Capabilities is everything an environment reports about itself in one
// value, as Nomad's drivers report drivers.Capabilities and rclone's
// backends their Features: facts berth above the seam reads, never a
// backend's name. Behaviours a backend may add (FileWriter, Renewer,
// SessionEnver, Recreator, OneShotRunner) stay interfaces, as in
// database/sql/driver. The zero value is the least a backend can claim:
// no isolation, no confinement, not this machine's filesystem.
type Capabilities struct {
	// Isolation is how far the environment keeps commands from a machine
	// they could damage. A docker container with host binds reports
	// IsolationNone, one without IsolationImage.
	Isolation Isolation
	// Confinement is what the kernel enforces when Isolation is
	// IsolationWorkspace; the zero value otherwise.
	Confinement Confinement
	// NativeFS is true when the environment is this machine's own
	// filesystem, seen as the user berth runs as: the file tools then read
	// and write with the os package instead of going through the shell.
	// It implies the backend's Registration.HostFS.
	NativeFS bool
	// Checkpoint says, in a few words, how the environment's files are
	// checkpointed (and so forked and restored) when the backend
	// implements Checkpointer and can do it for this environment: "docker
	// commit of the writable layer, volumes copied", "workspace copied with
	// reflinks". "" when it cannot, with NoCheckpoint saying why, for the
	// error berth gives and for berth doctor.
	Checkpoint   string
	NoCheckpoint string
}

// Capable is implemented by backends that report their Capabilities. The
// report comes from the instance, from its own settings.
type Capable interface {
	Capabilities() Capabilities
}

// CapabilitiesOf returns what b reports, or the zero Capabilities when it
// reports nothing.
func CapabilitiesOf(b Backend) Capabilities {
	if c, ok := b.(Capable); ok {
		return c.Capabilities()
	}
	return Capabilities{}
}

// FileWriter is implemented by backends with a file API for moving file
// content without the shell (Docker's archive endpoint, SFTP, a provider's
// upload call). write_file uses it for the bytes, while the shell still
// creates parent directories, copies the old file's mode and renames the
// temporary file into place.
type FileWriter interface {
	// WriteFile creates the file at the absolute path name inside the
	// environment (its parent exists, the file does not) with permission
	// bits perm before the umask, and fills it with size bytes read from r.
	// It fails (leaving no file) unless exactly size bytes were written, so
	// callers need not count them again. A path the API cannot serve is
	// declined with an error wrapping ErrUnsupported.
	WriteFile(ctx context.Context, name string, r io.Reader, size int64, perm os.FileMode) error
}

// OneShotRunner is implemented by backends whose reference implementation
// runs each command as a one-shot call other than Start (Daytona's toolbox
// execute after a sandbox state check). berth bench times RunOneShot as the
// spawn-per-call baseline; without it the baseline is one Start per
// command.
type OneShotRunner interface {
	RunOneShot(ctx context.Context, command string) (exitCode int, err error)
}

// ErrUnsupported is returned (wrapped) by an optional capability that
// cannot serve this particular request — a file API asked to write into a
// tmpfs mount it cannot see, a server without SFTP — so the caller falls
// back to the shell.
var ErrUnsupported = errors.New("backend: not supported here")

// ErrNoTTY is returned by Start when the backend cannot allocate a terminal.
var ErrNoTTY = errors.New("backend: pseudo-terminal not supported")

// UnreachableError reports that a backend's target (daemon, host, service)
// could not be reached. It is never papered over by falling back to another
// backend.
type UnreachableError struct {
	Backend string // backend name
	Target  string // what was being reached: a socket, host:port, URL
	Hint    string // what the user can do about it
	Err     error
}

func (e *UnreachableError) Error() string {
	msg := fmt.Sprintf("%s backend: cannot reach %s: %v", e.Backend, e.Target, e.Err)
	if e.Hint != "" {
		msg += " (" + e.Hint + ")"
	}
	return msg
}

func (e *UnreachableError) Unwrap() error { return e.Err }
