package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/shellword"
)

// errProcClosed is Wait's error when Close came before the exit status.
var errProcClosed = errors.New("kubernetes: process closed before its exit status was known")

// Exec transports, in the order tried: the WebSocket protocol
// v5.channel.k8s.io (it can half-close stdin), then SPDY when the API
// server (or a proxy in front of it) cannot upgrade to WebSocket.
const (
	protoWebSocket = "websocket"
	protoSPDY      = "spdy"
)

// wrapper runs a non-TTY process. A pods/exec stream reports the exit
// status only once every holder of the output has closed it (a descendant
// left running with `cmd &` would hold it for its whole life), and some
// runtimes never report it then; the Process contract wants the status
// anyway. So the process runs under /bin/sh, which reports on the exec's
// stderr — a channel the process itself never gets (its stderr is merged
// into stdout, as the contract merges them) — a line "R" once it runs, "S"
// once the process is about to start and "E<status>" when it ended (128+N
// for signal N). The process runs in a session of its own (setsid, when
// the image has it), as an exec'd process does, and without the status
// descriptor. What the wrapper itself would say (ash's "Terminated" for
// a child killed by a signal) goes nowhere: ash applies a simple command's
// redirections in the waiting shell too and writes that message to the fd
// 2 in force while it waits, so the process's 2>&1 is applied in a
// subshell that execs it, and the wrapper's own fd 2 stays /dev/null.
//
// Before it says anything the wrapper reads one newline from stdin, which
// berth sends first: client-go's WebSocket executor (v0.32) starts reading
// the connection before it has registered the streams and drops what
// arrives for a stream not registered yet (kubernetes#131189); the
// transport reads stdin only once they are, so nothing the process writes
// can arrive too early. (sh reads a pipe byte by byte: the rest of stdin is
// the process's.)
//
// After the status line the wrapper stays 0.2 s (when the image has a
// sleep) before it exits: the line is the last thing the exec writes, and
// when the exec's process ends at once the runtime's copy of its stderr
// to the kubelet was now and then cut short on a loaded machine (containerd
// logs "Failed to pipe stderr ... EOF"), and a process that ran to its end
// read as "the exec stream ended without the exit status". berth has the
// status when the line arrives, so nobody waits for the 0.2 s.
//
// Its first argument says where the process's description comes from:
// "+" (the arguments that follow) or "-" (stdin, as shell words, up to a
// line holding the second argument: a spare exec started before it was
// needed, see spare.go). The description is the working directory ("" =
// the container's), the number of KEY=VALUE words that follow, those
// words, then argv.
const wrapper = `IFS= read -r __berth_go || :
exec 3>&2 2>/dev/null
printf 'R\n' >&3
if [ "$1" = - ]; then
  e=$2 s= l=
  while IFS= read -r l; do [ "$l" = "$e" ] && break; s="$s$l
"; done
  [ "$l" = "$e" ] || exit 0
  eval "set -- $s"
else
  shift
fi
d=$1 n=$2
shift 2
while [ "$n" -gt 0 ]; do export "$1"; shift; n=$((n - 1)); done
if [ -n "$d" ] && ! cd "$d" 2>&1; then printf 'S\nE1\n' >&3; sleep 0.2 2>/dev/null; exit 0; fi
printf 'S\n' >&3
if ! command -v "$1" >/dev/null 2>&1; then
  printf '%s: %s: not found\n' "${0}" "$1"
  printf 'E127\n' >&3; sleep 0.2 2>/dev/null; exit 0
fi
if command -v setsid >/dev/null 2>&1; then set -- setsid "$@"; fi
(exec "$@" 2>&1 3>&-)
printf 'E%d\n' "$?" >&3
sleep 0.2 2>/dev/null
`

// ttyWrapper applies the directory and environment to a TTY process,
// which then replaces it (a terminal merges every stream: no status line).
const ttyWrapper = `d=$1 n=$2
shift 2
while [ "$n" -gt 0 ]; do export "$1"; shift; n=$((n - 1)); done
if [ -n "$d" ]; then cd "$d" || exit 1; fi
exec "$@"
`

// describe is spec's description for the wrapper: directory, count of
// variables, variables, argv.
func describe(spec backend.ProcSpec) []string {
	words := []string{spec.Dir, strconv.Itoa(len(spec.Env))}
	words = append(words, spec.Env...)
	return append(words, spec.Argv...)
}

// execArgv is the command the exec runs for spec; nil spec means a spare,
// whose description comes later on stdin after a line holding end.
func execArgv(spec *backend.ProcSpec, end string) []string {
	if spec == nil {
		return []string{"/bin/sh", "-c", wrapper, "berth-exec", "-", end}
	}
	if spec.TTY {
		return append([]string{"/bin/sh", "-c", ttyWrapper, "berth-exec"}, describe(*spec)...)
	}
	return append([]string{"/bin/sh", "-c", wrapper, "berth-exec", "+"}, describe(*spec)...)
}

// specText is spec's description as shell words on stdin, for a spare
// waiting for the line end.
func specText(spec backend.ProcSpec, end string) string {
	var b strings.Builder
	for i, w := range describe(spec) {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(shellword.Quote(w))
	}
	b.WriteString("\n" + end + "\n")
	return b.String()
}

// shouldFallback says when the SPDY transport is tried after WebSocket:
// only when the upgrade itself failed (the server or a proxy cannot speak
// it) and not because the server answered with an API status (no such
// pod, not allowed), which SPDY would only repeat. Anything later — the
// command's own non-zero exit included — must not run the command again.
func shouldFallback(err error) bool {
	if httpstream.IsHTTPSProxyError(err) {
		return true
	}
	if !httpstream.IsUpgradeFailure(err) {
		return false
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		switch st.Status().Code {
		case 401, 403, 404, 409, 422:
			return false
		}
	}
	return true
}

// process is one pods/exec stream: its stdin, its merged output, and the
// exit status from the wrapper's status line (or from the stream itself
// for a TTY).
type process struct {
	stdin  *stdinPipe
	stdout *io.PipeReader
	outW   *io.PipeWriter
	last   atomic.Int64 // unix nanoseconds of the last output chunk
	cancel context.CancelFunc
	proto  atomic.Value // string: the transport that carried the stream

	ready      chan struct{} // closed once the wrapper runs ("R")
	readyOnce  sync.Once
	started    chan struct{} // closed once the process is known to run
	startOnce  sync.Once
	end        string        // a spare's end-of-description line
	want       string        // the transport asked for (Backend.protocol)
	streamDone chan struct{} // closed when the exec stream ended
	streamErr  error         // set before streamDone is closed

	exit backend.ExitStatus

	closeOnce sync.Once
}

// exec starts spec in the pod's container and returns once the process
// runs (non-TTY: the wrapper said so; TTY: the stream is up). With spec
// nil it starts a spare: the wrapper alone, waiting for a description
// (use), returned once it runs.
func (b *Backend) exec(ctx context.Context, pod string, spec *backend.ProcSpec) (*process, error) {
	tty := spec != nil && spec.TTY
	end := ""
	if spec == nil {
		end = "berth-end-" + newNonce()
	}
	req := b.c.api.execRequest(b.c.namespace, pod, &corev1.PodExecOptions{
		Container: containerName,
		Command:   execArgv(spec, end),
		Stdin:     true,
		Stdout:    true,
		Stderr:    !tty,
		TTY:       tty,
	})
	u := req.URL()
	b.mu.Lock()
	proto := b.protocol
	b.mu.Unlock()
	var ws, spdy remotecommand.Executor
	var err error
	if proto != protoSPDY {
		if ws, err = remotecommand.NewWebSocketExecutor(b.c.cfg, "GET", u.String()); err != nil {
			return nil, fmt.Errorf("kubernetes: websocket transport: %w", err)
		}
	}
	if proto != protoWebSocket {
		if spdy, err = remotecommand.NewSPDYExecutor(b.c.cfg, "POST", u); err != nil {
			return nil, fmt.Errorf("kubernetes: spdy transport: %w", err)
		}
	}

	sctx, cancel := context.WithCancel(context.Background())
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p := &process{
		stdin:      &stdinPipe{w: inW},
		stdout:     outR,
		outW:       outW,
		cancel:     cancel,
		ready:      make(chan struct{}),
		started:    make(chan struct{}),
		end:        end,
		want:       proto,
		streamDone: make(chan struct{}),
	}
	p.last.Store(time.Now().UnixNano())
	opts := remotecommand.StreamOptions{Stdout: stamp{p}, Tty: tty}
	if tty {
		// No status line on a terminal: the stream is up once the
		// transport starts reading stdin.
		opts.Stdin = &firstRead{r: inR, fn: p.markStarted}
	} else {
		opts.Stdin = io.MultiReader(strings.NewReader("\n"), inR)
		opts.Stderr = &statusWriter{p: p}
	}
	go func() {
		var err error
		if ws != nil {
			p.proto.Store(protoWebSocket)
			err = ws.StreamWithContext(sctx, opts)
			if spdy != nil && shouldFallback(err) {
				b.log.Debug("kubernetes: exec over WebSocket refused, falling back to SPDY", "err", err)
				ws = nil
			}
		}
		if ws == nil && spdy != nil {
			p.proto.Store(protoSPDY)
			err = spdy.StreamWithContext(sctx, opts)
		}
		p.streamErr = err
		close(p.streamDone)
		p.streamEnded(err, tty)
		inR.CloseWithError(io.ErrClosedPipe)
	}()

	want := p.started
	if spec == nil {
		want = p.ready
	}
	if err := p.await(ctx, want); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// await waits for ch (ready or started), the end of the stream, or ctx.
func (p *process) await(ctx context.Context, ch chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-p.streamDone:
		select {
		case <-ch:
			return nil
		default:
		}
		if p.streamErr == nil {
			return errors.New("the exec stream ended before the process started")
		}
		return p.streamErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// use gives a spare its process: it writes the description and returns
// once the exec's transport has taken it. On error the spare is closed.
func (p *process) use(ctx context.Context, spec backend.ProcSpec) error {
	werr := make(chan error, 1)
	go func() {
		_, err := io.WriteString(p.stdin.w, specText(spec, p.end))
		werr <- err
	}()
	select {
	case err := <-werr:
		if err != nil {
			p.Close()
			return err
		}
	case <-p.streamDone:
		p.Close()
		return errors.New("the spare exec ended")
	case <-ctx.Done():
		p.Close()
		return ctx.Err()
	}
	// The wrapper runs and the transport took the description: the
	// process starts without another round trip, and what the caller
	// writes next is its stdin. Not waiting for the wrapper's "S" saves
	// a round trip through the API server on every session shell and
	// kill; a process that cannot start (a cd that fails) reports it as
	// its exit status.
	return nil
}

func (p *process) markReady() { p.readyOnce.Do(func() { close(p.ready) }) }

func (p *process) markStarted() { p.startOnce.Do(func() { close(p.started) }) }

// streamEnded settles the status from how the stream ended, unless the
// status line already did.
func (p *process) streamEnded(err error, tty bool) {
	var ce utilexec.CodeExitError
	exit := errors.As(err, &ce)
	started := false
	select {
	case <-p.started:
		started = true
	default:
	}
	switch {
	case tty && err == nil:
		p.finish(0, nil)
	case tty && exit:
		p.finish(ce.Code, nil)
	case exit && ce.Code != 0 && started:
		// The wrapper itself was killed (by the session's kill, say): its
		// status says by what.
		p.finish(ce.Code, nil)
	case exit && ce.Code != 0:
		p.finish(-1, fmt.Errorf("kubernetes: the exec ended with status %d before the process started (does the image have /bin/sh?)", ce.Code))
	case errors.Is(err, context.Canceled):
		p.finish(-1, errProcClosed)
	case err == nil || exit:
		// The wrapper always reports before it exits normally: a stream
		// that ends cleanly without the report lost its connection (an
		// empty error stream reads as success, kubernetes#137404).
		p.finish(-1, errors.New("kubernetes: the exec stream ended without the exit status (the connection to the API server was lost)"))
	default:
		p.finish(-1, fmt.Errorf("kubernetes: exec stream broke before the exit status arrived: %w", err))
	}
	p.outW.CloseWithError(io.EOF)
}

// finish records the exit status once and arms the after-exit bound: a
// descendant that keeps the output open must not keep Stdout open.
func (p *process) finish(code int, err error) {
	if !p.exit.Set(code, err) {
		return
	}
	backend.DrainThenClose(backend.WaitDelay, p.lastOutput, func() {
		p.outW.CloseWithError(io.EOF)
		p.cancel()
	})
}

func (p *process) lastOutput() time.Time { return time.Unix(0, p.last.Load()) }

// Protocol reports the transport that carried the stream.
func (p *process) Protocol() string {
	s, _ := p.proto.Load().(string)
	return s
}

func (p *process) Stdin() io.WriteCloser { return p.stdin }
func (p *process) Stdout() io.Reader     { return p.stdout }

// Wait blocks until the process ended and returns its status (128+N when
// killed by signal N). Its error is non-nil when the stream broke (the API
// server restarted, the pod went away) before the status was known.
func (p *process) Wait() (int, error) { return p.exit.Wait() }

// Close closes the stream; the process in the pod is not stopped (the
// session kills trees itself).
func (p *process) Close() error {
	p.closeOnce.Do(func() {
		p.cancel()
		p.stdin.Close()
		p.stdout.CloseWithError(io.ErrClosedPipe)
	})
	return nil
}

// stamp passes output on to the pipe Stdout reads, noting when it arrived.
type stamp struct{ p *process }

func (s stamp) Write(b []byte) (int, error) {
	s.p.last.Store(time.Now().UnixNano())
	return s.p.outW.Write(b)
}

// statusWriter reads the wrapper's status lines from the exec's stderr.
// Anything else there (nothing, normally) is output.
type statusWriter struct {
	p   *process
	buf []byte
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			if len(w.buf) > 64 { // not a status line
				stamp{w.p}.Write(w.buf)
				w.buf = w.buf[:0]
			}
			return len(b), nil
		}
		line := string(w.buf[:i])
		w.buf = w.buf[i+1:]
		switch {
		case line == "R":
			w.p.markReady()
		case line == "S":
			w.p.markReady()
			w.p.markStarted()
		case len(line) > 1 && line[0] == 'E':
			if code, err := strconv.Atoi(line[1:]); err == nil {
				w.p.markStarted()
				w.p.finish(code, nil)
				continue
			}
			fallthrough
		default:
			stamp{w.p}.Write([]byte(line + "\n"))
		}
	}
}

// firstRead calls fn when the transport first reads stdin: the stream is
// then up.
type firstRead struct {
	r    io.Reader
	fn   func()
	once sync.Once
}

func (f *firstRead) Read(b []byte) (int, error) {
	f.once.Do(f.fn)
	return f.r.Read(b)
}

// stdinPipe is the process's stdin; Close sends EOF.
type stdinPipe struct {
	w *io.PipeWriter
}

func (s *stdinPipe) Write(b []byte) (int, error) { return s.w.Write(b) }
func (s *stdinPipe) Close() error                { return s.w.Close() }
