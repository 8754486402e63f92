// Package backend defines the small interface every execution target of berth
// implements (local, docker, ssh, ...) and the registry that maps backend names
// to constructors.
//
// A backend only knows how to start a process inside its environment with
// stdio attached, and how to tear the environment down. Everything else — the
// persistent shell, framing, timeouts, the output pipeline — is written once in
// the session and tool layers on top of it.
package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	// after Close.
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

// SessionEnver is implemented by backends that have variables to deliver
// into the persistent shell (forwarded secrets, env_passthrough). The session
// exports them through the shell's stdin at start, so they never appear in a
// command line or in the environment's stored configuration.
type SessionEnver interface {
	SessionEnv() map[string]string
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
