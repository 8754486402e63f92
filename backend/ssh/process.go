package ssh

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a55dbaac/berth/backend"
	gossh "golang.org/x/crypto/ssh"
)

// process is one session channel running one remote command.
type process struct {
	b  *Backend
	c  *conn
	ch gossh.Channel

	exit     backend.ExitStatus
	chanDone chan struct{} // closed once the channel has closed

	closed atomic.Bool  // Close was called
	lost   atomic.Bool  // the connection died before the channel closed
	eof    atomic.Bool  // Stdout returned its final error
	inRead atomic.Bool  // a Stdout Read is blocked on the channel
	nread  atomic.Int64 // bytes delivered by Stdout

	// wmu serialises writes with the EOF: x/crypto's channel reads its
	// sent-EOF flag in Write without a lock, so CloseWrite must not run
	// while a Write is in flight.
	wmu      sync.Mutex
	stdinEOF bool // CloseWrite was sent (under wmu)
}

var _ backend.Process = (*process)(nil)

func newProcess(b *Backend, c *conn, ch gossh.Channel, reqs <-chan *gossh.Request) *process {
	p := &process{b: b, c: c, ch: ch, chanDone: make(chan struct{})}
	// Nothing is sent on stderr (the command merges it into stdout), but
	// unread extended data would hold back the channel's window: drain it.
	go func() { _, _ = io.Copy(io.Discard, ch.Stderr()) }()
	go p.serveRequests(reqs)
	return p
}

// finish records the outcome once.
func (p *process) finish(status int, err error) {
	if p.exit.Set(status, err) && err == nil && p.b.waitDelay > 0 {
		go p.watchOutput(p.b.waitDelay)
	}
}

type exitStatusMsg struct {
	Status uint32
}

type exitSignalMsg struct {
	Signal     string
	CoreDumped bool
	Error      string
	Lang       string
}

// serveRequests handles the requests the server sends on the channel. sshd
// sends exit-status or exit-signal as soon as the process is reaped, before
// the channel closes (which waits for every holder of the output to close
// it), so Wait can return promptly.
func (p *process) serveRequests(reqs <-chan *gossh.Request) {
	for r := range reqs {
		switch r.Type {
		case "exit-status":
			var m exitStatusMsg
			if err := gossh.Unmarshal(r.Payload, &m); err == nil {
				p.finish(int(m.Status), nil)
			}
		case "exit-signal":
			var m exitSignalMsg
			if err := gossh.Unmarshal(r.Payload, &m); err == nil {
				if n := signalNumber(m.Signal); n > 0 {
					p.finish(128+n, nil)
				} else {
					p.finish(-1, fmt.Errorf("ssh backend: remote process killed by unknown signal %q", m.Signal))
				}
			}
		}
		if r.WantReply {
			_ = r.Reply(false, nil)
		}
	}
	// The channel is closed: by the server, by Close, or because the
	// connection died. The outcome is decided from facts that are settled
	// by now, not from timers: transportConn records a failed read before
	// x/crypto closes the channels of the dropped connection, so a channel
	// that closed while the transport still worked was closed by the
	// server (or by Close).
	var err error
	switch {
	case p.closed.Load():
		err = errors.New("ssh backend: process closed before it reported an exit status")
	case !p.c.alive():
		// The connection broke before berth saw the channel's end: the
		// output may be cut short, even when the exit status came first.
		// (A server that finished cleanly just before the link broke
		// cannot be told apart from one cut off: x/crypto ends the channel
		// the same way. Both count as cut short, never as complete.)
		p.lost.Store(true)
		err = p.lostError()
	default:
		err = errors.New("ssh backend: remote process ended without reporting an exit status")
	}
	p.finish(-1, err) // no-op when the status came first
	close(p.chanDone)
	p.b.release(p.c)
}

// lostError describes the lost connection once the connection has wound
// down (the client's reader stopped, the route was closed and a proxy
// command reaped), so the reason (a keep-alive timeout, the proxy
// command's status) is always in it. That takes at most the proxy
// command's grace after its output closed.
func (p *process) lostError() error {
	<-p.c.done
	return fmt.Errorf("ssh backend: %s: %w", p.b.t, p.c.deathError())
}

// watchOutput implements WaitDelay: after the exit, a reader blocked on a
// channel that delivers nothing for a whole delay means a descendant holds
// the output open; close the channel so Stdout ends.
func (p *process) watchOutput(delay time.Duration) {
	t := time.NewTicker(delay)
	defer t.Stop()
	last := p.nread.Load()
	for range t.C {
		if p.eof.Load() || p.closed.Load() {
			return
		}
		cur := p.nread.Load()
		if cur == last && p.inRead.Load() {
			p.b.log.Debug("ssh: process exited but its output is still held open; closing the channel", "wait_delay", delay)
			_ = p.ch.Close()
			return
		}
		last = cur
	}
}

func (p *process) Stdin() io.WriteCloser { return stdinWriter{p} }

func (p *process) Stdout() io.Reader { return stdoutReader{p} }

// Wait returns the exit status, or 128+N for signal N. It returns once sshd
// reports the status, even while a descendant holds the output open, and
// with an error when the connection died or the channel closed first.
func (p *process) Wait() (int, error) { return p.exit.Wait() }

// Close closes the channel; it does not wait for the remote side.
func (p *process) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	if err := p.ch.Close(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("ssh backend: close channel: %w", err)
	}
	return nil
}

type stdinWriter struct{ p *process }

func (w stdinWriter) Write(b []byte) (int, error) {
	w.p.wmu.Lock()
	defer w.p.wmu.Unlock()
	if w.p.stdinEOF {
		return 0, fmt.Errorf("ssh backend: write to closed stdin: %w", io.ErrClosedPipe)
	}
	return w.p.ch.Write(b)
}

// Close sends EOF to the remote process's stdin. It never waits for a
// Write in flight (one blocked on a full window would hold it for good):
// the EOF then follows that write from another goroutine, and closing the
// channel (Close) is what unblocks the write when the peer stops reading.
func (w stdinWriter) Close() error {
	p := w.p
	if !p.wmu.TryLock() {
		go func() {
			p.wmu.Lock()
			defer p.wmu.Unlock()
			p.sendEOF()
		}()
		return nil
	}
	defer p.wmu.Unlock()
	return p.sendEOF()
}

// sendEOF sends the stdin EOF once; the caller holds wmu.
func (p *process) sendEOF() error {
	if p.stdinEOF {
		return nil
	}
	p.stdinEOF = true
	return p.ch.CloseWrite()
}

type stdoutReader struct{ p *process }

// Read reads the remote output. At the end of the stream it waits for the
// channel to close: io.EOF after a normal end, an error when the connection
// died (the output may be incomplete).
func (r stdoutReader) Read(b []byte) (int, error) {
	p := r.p
	p.inRead.Store(true)
	n, err := p.ch.Read(b)
	p.inRead.Store(false)
	p.nread.Add(int64(n))
	if err == io.EOF {
		<-p.chanDone
		p.eof.Store(true)
		if p.lost.Load() && !p.closed.Load() {
			return n, fmt.Errorf("ssh backend: output cut short: %s: %w", p.b.t, p.c.deathError())
		}
		return n, io.EOF
	}
	return n, err
}

// signalNumber maps an SSH signal name (RFC 4254 §6.10, without "SIG";
// OpenSSH appends "@openssh.com" to non-standard ones) to its Linux number.
func signalNumber(name string) int {
	name, _, _ = strings.Cut(name, "@")
	name = strings.TrimPrefix(strings.ToUpper(name), "SIG")
	switch name {
	case "HUP":
		return 1
	case "INT":
		return 2
	case "QUIT":
		return 3
	case "ILL":
		return 4
	case "TRAP":
		return 5
	case "ABRT", "IOT":
		return 6
	case "BUS":
		return 7
	case "FPE":
		return 8
	case "KILL":
		return 9
	case "USR1":
		return 10
	case "SEGV":
		return 11
	case "USR2":
		return 12
	case "PIPE":
		return 13
	case "ALRM":
		return 14
	case "TERM":
		return 15
	case "STKFLT":
		return 16
	case "CHLD":
		return 17
	case "CONT":
		return 18
	case "STOP":
		return 19
	case "TSTP":
		return 20
	case "TTIN":
		return 21
	case "TTOU":
		return 22
	case "URG":
		return 23
	case "XCPU":
		return 24
	case "XFSZ":
		return 25
	case "VTALRM":
		return 26
	case "PROF":
		return 27
	case "WINCH":
		return 28
	case "IO", "POLL":
		return 29
	case "PWR":
		return 30
	case "SYS":
		return 31
	}
	return 0
}
