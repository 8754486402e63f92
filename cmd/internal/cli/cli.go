// Package cli holds what berth's two binaries share of the command line:
// the flags of the commands that run things, signal handling, and
// `berth exec` through the daemon (run a command, print its output as it
// comes, exit with its status).
//
// The berth front binary answers a `berth exec` on a warm environment by
// itself, in a few milliseconds, and hands everything else to the full
// berth-engine binary; the engine runs the same code here for the calls
// it gets. The package is light on purpose (the daemon's wire protocol,
// x/sys and the standard library; not even package net): what the front
// links decides what a warm call costs. The flags are one table (Flags,
// flags.go), which package flagset defines on cobra's flag sets and
// ParseExec reads for the front.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/a55dbaac/berth/daemon/wire"
)

// StatusError is the exit status of berth's own failure (bad flags,
// unreachable backend, no engine): terminal.StatusError, which the front
// cannot link; a test holds the two together.
const StatusError = 125

// Harden makes this process non-dumpable (PR_SET_DUMPABLE 0), as
// hostproc.Harden does for the engine: its /proc files (environ, mem)
// then belong to root, so another process of the same user, a command
// berth runs included, cannot read the secrets in its environment. The
// front calls it first thing; an exec (of the engine) makes the process
// dumpable again, and the engine calls hostproc.Harden.
func Harden() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	return nil
}

// NoDaemonEnv set to anything but "", "0", "false", "no" or "off" keeps
// berth exec and berth shell in one process, like --no-daemon.
const NoDaemonEnv = "BERTH_NO_DAEMON"

// DaemonOffInEnv reports whether NoDaemonEnv asks for one process.
func DaemonOffInEnv() bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv(NoDaemonEnv))) {
	case "", "0", "false", "no", "off":
		return false
	}
	return true
}

// Inputs are the caller's configuration inputs, for the daemon. The
// timeout is not among them: it travels with each command. Of the
// environment they carry only what configuration loading reads
// (wire.CallerEnv); the daemon asks for any other variable it reads while
// the call runs.
func (f *Flags) Inputs() (wire.Inputs, error) {
	env, names := wire.CallerEnv(os.Environ())
	in := wire.Inputs{Env: env, Names: names, Flags: map[string]string{}}
	if f.Backend != "" {
		in.Flags["backend"] = f.Backend
	}
	if f.ConfigPath != "" {
		p, err := filepath.Abs(f.ConfigPath)
		if err != nil {
			return in, fmt.Errorf("--config %s: %w", f.ConfigPath, err)
		}
		in.ConfigPath = p
	}
	wd, err := os.Getwd()
	if err != nil {
		return in, fmt.Errorf("working directory: %w", err)
	}
	in.Cwd = wd
	return in, nil
}

// Request is the daemon request of op for these flags. onTimeout is the
// caller's terminal.on_timeout ("" lets the daemon read it); canAsk says
// the caller answers approval questions.
func (f *Flags) Request(op string, in wire.Inputs, onTimeout string, canAsk bool) wire.Request {
	return wire.Request{Op: op, Inputs: in, Key: f.Task, Timeout: f.Timeout, Workdir: f.Workdir, OnTimeout: onTimeout, CanAsk: canAsk}
}

// IsTerminal reports whether f is a terminal. A character device is not
// enough: /dev/null is one, and agents often give it as stdin.
func IsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// PrintNotes prints the daemon's notes for the caller.
func PrintNotes(stderr io.Writer, rep *wire.Reply) {
	for _, n := range rep.Notes {
		fmt.Fprintln(stderr, "berth:", n)
	}
}

// RunStreamed runs req (a run) through cl. With out set the output is
// printed there as it comes, then what the result's output shows after it
// (the timeout or interrupt marker) and a newline if the whole does not
// end with one: what berth exec prints. The notes go to stderr.
func RunStreamed(ctx context.Context, cl *wire.Client, req wire.Request, out io.Writer, ask wire.AskFunc, stderr io.Writer) (*wire.Reply, error) {
	var cw *countWriter
	opts := wire.RunOptions{Ask: ask}
	if out != nil {
		req.Stream = true
		cw = &countWriter{w: out}
		opts.Stdout = cw
	}
	rep, err := cl.Run(ctx, req, opts)
	if err != nil {
		return nil, err
	}
	PrintNotes(stderr, rep)
	if cw != nil && !rep.Fallback {
		io.WriteString(cw, rep.Tail)
		if cw.n > 0 && cw.last != '\n' {
			io.WriteString(out, "\n")
		}
	}
	return rep, nil
}

// ErrFallback says the daemon answered a Quick request with Fallback,
// refused a caller in another sandbox (wire.CodeSandboxed), or went away
// before its hello (wire.ErrNotRunning): nothing ran, and the caller must
// serve the call itself.
var ErrFallback = errors.New("the daemon asks the caller to run this itself")

// Exec is berth exec through the daemon: it runs req, prints the output
// as it comes (or the result as JSON with asJSON) and returns berth
// exec's exit status. A command that did not run, or that berth failed
// to run, has its reason printed on stderr (unless asJSON). An error is
// berth's own failure (status 125), or ErrFallback.
func Exec(ctx context.Context, cl *wire.Client, req wire.Request, asJSON bool, ask wire.AskFunc, stdout, stderr io.Writer) (int, error) {
	var out io.Writer
	if !asJSON {
		out = stdout
	}
	rep, err := RunStreamed(ctx, cl, req, out, ask, stderr)
	if wire.IsCode(err, wire.CodeSandboxed) || errors.Is(err, wire.ErrNotRunning) {
		return 0, fmt.Errorf("%w: %v", ErrFallback, err)
	}
	if err != nil {
		return 0, err
	}
	if rep.Fallback {
		return 0, ErrFallback
	}
	for _, w := range rep.Warnings {
		slog.Warn(w)
	}
	if asJSON {
		if _, err := fmt.Fprintf(stdout, "%s\n", rep.Result); err != nil {
			return 0, err
		}
	} else if rep.ExitMessage != "" {
		fmt.Fprintln(stderr, "berth:", rep.ExitMessage)
	}
	return rep.Exit, nil
}

// countWriter counts the bytes written through it and keeps the last.
type countWriter struct {
	w    io.Writer
	n    int64
	last byte
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if n > 0 {
		c.last = p[n-1]
	}
	return n, err
}

// Signals: SIGINT goes to Interrupts while a command has claimed it
// (InterruptsClaimed: the interactive shell, to interrupt the running
// command); otherwise it cancels the root context as SIGTERM and SIGHUP
// do. ShutdownAt is when the first shutdown signal arrived (Unix
// nanoseconds), 0 before.
var (
	InterruptsClaimed atomic.Bool
	Interrupts        = make(chan os.Signal, 1)
	ShutdownAt        atomic.Int64
)

// HandleSignals turns SIGTERM, SIGHUP and SIGINT (unless claimed) into
// cancel: running commands are interrupted and every environment is
// closed. A second shutdown signal exits at once, with 128 + the signal.
func HandleSignals(cancel context.CancelFunc) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP, os.Interrupt)
	go func() {
		for sig := range sigs {
			if sig == os.Interrupt && InterruptsClaimed.Load() && ShutdownAt.Load() == 0 {
				select {
				case Interrupts <- sig:
				default:
				}
				continue
			}
			if ShutdownAt.Load() != 0 {
				fmt.Fprintf(os.Stderr, "berth: second signal (%v): exiting now, without cleaning up\n", sig)
				code := 128 + 15
				if s, ok := sig.(syscall.Signal); ok {
					code = 128 + int(s)
				}
				os.Exit(code)
			}
			ShutdownAt.Store(time.Now().UnixNano())
			slog.Debug("shutting down", "signal", sig)
			cancel()
		}
	}()
}
