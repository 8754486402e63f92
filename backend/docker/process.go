package docker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"
)

// errProcClosed is Wait's error when Close came before the exit status.
var errProcClosed = errors.New("docker: process closed before its exit status was known")

// exec creates and attaches one exec in container id.
func (b *Backend) exec(ctx context.Context, id string, ps backend.ProcSpec) (*process, error) {
	// Events are replayed from here on, so the exit of even a very short
	// process is not missed (the margin covers a daemon clock slightly
	// behind ours).
	since := time.Now().Add(-5 * time.Second)
	cr, err := b.cli.ExecCreate(ctx, id, client.ExecCreateOptions{
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		TTY:          ps.TTY,
		Cmd:          ps.Argv,
		Env:          ps.Env,
		WorkingDir:   ps.Dir,
	})
	if err != nil {
		if isGone(err) {
			return nil, err
		}
		return nil, wrap(b.host, err, "create exec %q in %s", ps.Argv[0], b.spec.Name)
	}
	att, err := b.cli.ExecAttach(ctx, cr.ID, client.ExecAttachOptions{TTY: ps.TTY})
	if err != nil {
		return nil, wrap(b.host, err, "start exec %q in %s", ps.Argv[0], b.spec.Name)
	}
	wctx, cancel := context.WithCancel(context.Background())
	p := &process{
		cli:         b.cli,
		execID:      cr.ID,
		containerID: id,
		conn:        att.HijackedResponse,
		eof:         make(chan struct{}),
		cancel:      cancel,
	}
	p.stdin = &stdin{p: p}
	p.stdout = &output{p: p, tty: ps.TTY}
	go p.watch(wctx, since)
	return p, nil
}

// process is one exec with its stdin and output attached.
//
// Its exit status comes from the daemon's exec_die event for this exec
// (subscribed with a replay window, so an early exit is not missed); when
// the output stream ends, one ExecInspect usually settles it sooner. If the
// event stream breaks (daemon restart), it falls back to ExecInspect with a
// backoff from 50 ms to 1 s. No busy polling in the normal case, and Wait
// returns even while a descendant (setsid ... &) keeps the output open.
type process struct {
	cli         *client.Client
	execID      string
	containerID string
	conn        client.HijackedResponse
	stdin       *stdin
	stdout      *output
	last        atomic.Int64  // unix nanoseconds of the last output chunk
	eof         chan struct{} // closed when the output stream ended
	eofOnce     sync.Once
	cancel      context.CancelFunc
	// closed is what Stdout returns once it was closed: io.EOF by the
	// after-exit bound, io.ErrClosedPipe by Close (which wins).
	closed atomic.Pointer[error]

	exit backend.ExitStatus

	closeOnce sync.Once
}

func (p *process) Stdin() io.WriteCloser { return p.stdin }
func (p *process) Stdout() io.Reader     { return p.stdout }

// Wait blocks until the exec has exited and returns its exit code (128+N
// when killed by signal N).
func (p *process) Wait() (int, error) { return p.exit.Wait() }

// Close closes the attached stream and stops watching for the exit status.
// The process itself keeps running in the container.
func (p *process) Close() error {
	p.closeOnce.Do(func() {
		p.cancel()
		err := io.ErrClosedPipe
		p.closed.Store(&err)
		p.conn.Close()
	})
	return nil
}

// finish records the exit status, once.
func (p *process) finish(code int, err error) {
	if !p.exit.Set(code, err) {
		return
	}
	// The after-exit bound of the Process contract: a descendant that
	// keeps the exec's stream open must not keep Stdout open forever.
	backend.DrainThenClose(backend.WaitDelay, p.lastOutput, func() {
		err := io.EOF
		p.closed.CompareAndSwap(nil, &err)
		p.conn.Close()
	})
}

// output is Stdout: the exec's attached stream read in place, its
// multiplexed frames (stdout and stderr, merged in arrival order) taken
// apart as they are read, straight into the caller's buffer. (A goroutine
// of its own copying them into a pipe cost a hand-off per chunk between it
// and the reader, and a 32 KiB buffer per process.)
type output struct {
	p    *process
	tty  bool    // a TTY's stream is not multiplexed
	left int     // bytes left of the current frame's payload
	hdr  [8]byte // a frame's header: stream, 3 zero bytes, big-endian size
	err  error   // what ended the stream
}

func (o *output) Read(b []byte) (int, error) {
	if c := o.p.closed.Load(); c != nil {
		return 0, *c
	}
	if o.err != nil {
		return 0, o.err
	}
	n, err := o.read(b)
	if n > 0 {
		o.p.last.Store(time.Now().UnixNano())
	}
	if err != nil {
		if c := o.p.closed.Load(); c != nil {
			err = *c // the connection was closed under the read
		}
		o.err = err
		o.p.eofOnce.Do(func() { close(o.p.eof) })
	}
	return n, err
}

// read reads payload bytes of the stream into b.
func (o *output) read(b []byte) (int, error) {
	r := o.p.conn.Reader
	if o.tty {
		return r.Read(b)
	}
	for o.left == 0 {
		if _, err := io.ReadFull(r, o.hdr[:]); err != nil {
			if err == io.ErrUnexpectedEOF {
				err = io.EOF // a header cut short by the end: the end, as stdcopy reads it
			}
			return 0, err
		}
		size := int(binary.BigEndian.Uint32(o.hdr[4:]))
		switch o.hdr[0] {
		case 0, 1, 2: // stdin (as the daemon echoes it), stdout, stderr
			o.left = size
		case 3: // the daemon's own error
			msg := make([]byte, min(size, 64<<10))
			k, _ := io.ReadFull(r, msg)
			return 0, fmt.Errorf("docker: error from the daemon in exec %s's stream: %s", o.p.execID[:12], msg[:k])
		default:
			return 0, fmt.Errorf("docker: exec %s's stream: unknown stream %d in a frame header (the daemon's attach format changed?)", o.p.execID[:12], o.hdr[0])
		}
	}
	n, err := r.Read(b[:min(len(b), o.left)])
	o.left -= n
	return n, err
}

// lastOutput reports when output last arrived.
func (p *process) lastOutput() time.Time { return time.Unix(0, p.last.Load()) }

// watch learns the exit status.
func (p *process) watch(ctx context.Context, since time.Time) {
	defer p.cancel()
	ev := p.cli.Events(ctx, client.EventsListOptions{
		Since: fmt.Sprintf("%d.%09d", since.Unix(), since.Nanosecond()),
		Filters: make(client.Filters).
			Add("type", string(events.ContainerEventType)).
			Add("container", p.containerID).
			Add("event", "exec_die", "die", "destroy"),
	})
	eof := p.eof
	var containerGone <-chan time.Time
	for {
		select {
		case m, ok := <-ev.Messages:
			if !ok {
				ev.Messages = nil
				continue
			}
			switch m.Action {
			case "exec_die":
				if m.Actor.Attributes["execID"] != p.execID {
					continue
				}
				code, err := strconv.Atoi(m.Actor.Attributes["exitCode"])
				if err != nil {
					p.inspectUntilDone(ctx)
					return
				}
				p.finish(code, nil)
				return
			case "die", "destroy":
				// The subscription replays the last seconds, which may hold
				// the stop of an earlier run of this container (a persistent
				// container stopped by the previous berth and started again
				// for this one): such an event says nothing about this exec.
				if p.beforeContainerStart(ctx, m) {
					continue
				}
				// The container stopped: this exec died with it. Its own
				// exec_die normally follows; do not wait for it long.
				if containerGone == nil {
					containerGone = time.After(2 * time.Second)
				}
			}
		case <-ev.Err:
			// The event stream ended: Close (ctx cancelled) or the daemon
			// went away or restarted.
			ev.Err = nil
			if ctx.Err() != nil {
				p.finalize()
				return
			}
			p.inspectUntilDone(ctx)
			return
		case <-eof:
			eof = nil
			if code, running, err := p.inspect(ctx); err == nil && !running {
				p.finish(code, nil)
				return
			}
		case <-containerGone:
			if code, running, err := p.inspect(ctx); err == nil && !running {
				p.finish(code, nil)
			} else {
				p.finish(137, nil)
			}
			return
		case <-ctx.Done():
			p.finalize()
			return
		}
	}
}

// beforeContainerStart reports whether a container event happened before
// the container's current run started (both times are the daemon's). When
// the container cannot be inspected the event is taken at its word.
func (p *process) beforeContainerStart(ctx context.Context, m events.Message) bool {
	if m.TimeNano == 0 && m.Time == 0 {
		return false
	}
	at := time.Unix(m.Time, 0)
	if m.TimeNano != 0 {
		at = time.Unix(0, m.TimeNano)
	}
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ins, err := p.cli.ContainerInspect(ictx, p.containerID, client.ContainerInspectOptions{})
	if err != nil || ins.Container.State == nil || !ins.Container.State.Running {
		return false
	}
	started, err := time.Parse(time.RFC3339Nano, ins.Container.State.StartedAt)
	return err == nil && at.Before(started)
}

// finalize settles the status after Close: one last look, then give up.
func (p *process) finalize() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if code, running, err := p.inspect(ctx); err == nil && !running {
		p.finish(code, nil)
		return
	}
	p.finish(-1, errProcClosed)
}

// inspectUntilDone is the fallback when no event stream is available.
func (p *process) inspectUntilDone(ctx context.Context) {
	delay := 50 * time.Millisecond
	failures := 0
	for {
		code, running, err := p.inspect(ctx)
		switch {
		case err == nil && !running:
			p.finish(code, nil)
			return
		case err == nil:
			failures = 0
		case ctx.Err() != nil:
		case isGone(err):
			p.finish(-1, fmt.Errorf("docker: exec %s: %w", p.execID[:12], err))
			return
		default:
			// The daemon is away; give it about half a minute to come back.
			if failures++; failures >= 30 {
				p.finish(-1, fmt.Errorf("docker: exec %s: exit status unknown: %w", p.execID[:12], err))
				return
			}
		}
		select {
		case <-ctx.Done():
			p.finalize()
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

func (p *process) inspect(ctx context.Context) (code int, running bool, err error) {
	r, err := p.cli.ExecInspect(ctx, p.execID, client.ExecInspectOptions{})
	if err != nil {
		return 0, false, err
	}
	return r.ExitCode, r.Running, nil
}

// stdin writes to the attached stream; Close half-closes it (EOF).
type stdin struct {
	p  *process
	mu sync.Mutex
}

func (s *stdin) Write(b []byte) (int, error) {
	return s.p.conn.Conn.Write(b)
}

func (s *stdin) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p.conn.CloseWrite()
}
