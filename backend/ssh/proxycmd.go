package ssh

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// proxyStderrMax bounds the ProxyCommand stderr kept for error messages.
const proxyStderrMax = 4096

// proxyGrace bounds how long Close waits for a command that closed its end
// of the transport to exit by itself, so that its own exit status and
// stderr are what errors report. A command that exits does so at once; the
// bound is for one that closed its pipes and lingers.
const proxyGrace = 2 * time.Second

// ProxyCommandError reports that the ProxyCommand carrying the connection to
// Host failed: it could not start, or it ended (Status) before or during
// the SSH handshake. Stderr is the start of what it wrote on its stderr.
type ProxyCommandError struct {
	Host    string // host:port the command was to connect to
	Command string // the command, tokens expanded
	Status  string // how it ended ("exit status 1", "signal: killed"), "" if running or never started
	Stderr  string
	Err     error // the start error, or the handshake error it caused

	cause error // what Error shows instead of Err when set: the bare handshake error
}

func (e *ProxyCommandError) Error() string {
	msg := fmt.Sprintf("ssh backend: proxy command for %s (%s)", e.Host, e.Command)
	if e.Status != "" {
		msg += " ended: " + e.Status
	} else {
		msg += " failed"
	}
	if s := strings.TrimSpace(e.Stderr); s != "" {
		msg += "; its stderr: " + s
	}
	if e.cause != nil {
		msg += " (" + e.cause.Error() + ")"
	} else if e.Err != nil {
		msg += " (" + strings.TrimPrefix(e.Err.Error(), "ssh backend: ") + ")"
	}
	return msg
}

func (e *ProxyCommandError) Unwrap() error { return e.Err }

// proxyConn is the transport made of a ProxyCommand's stdin and stdout. The
// command runs in its own process group, which Close kills (SIGKILL) and
// reaps, so a relay that forked leaves nothing behind; it also dies with
// berth (Pdeathsig).
type proxyConn struct {
	host    string
	command string
	r       *os.File // the command's stdout
	w       *os.File // the command's stdin
	errR    *os.File // the command's stderr
	cmd     *exec.Cmd
	stderr  *cappedBuffer

	stderrDone chan struct{} // closed once stderr is at its end (or closed)
	ended      atomic.Bool   // a Read or Write failed: the command closed its end

	exited     chan struct{} // closed once the command has been reaped
	waitErr    error         // set before exited is closed
	killed     bool          // stop sent SIGKILL to the group; set before stop returns
	selfExited bool          // it ended by itself, not by stop's SIGKILL; set before stop returns

	closeOnce sync.Once
	onGrace   func() // tests: called when stop starts waiting for the command
}

var _ net.Conn = (*proxyConn)(nil)

// startProxyCommand runs command with /bin/sh -c, as OpenSSH does (with
// "exec" in front so the shell does not stay around).
func startProxyCommand(host, command string) (*proxyConn, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("ssh backend: proxy command: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("ssh backend: proxy command: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("ssh backend: proxy command: %w", err)
	}
	pc := &proxyConn{host: host, command: command, r: outR, w: inW, errR: errR,
		stderr: &cappedBuffer{max: proxyStderrMax}, exited: make(chan struct{}), stderrDone: make(chan struct{})}
	cmd := exec.Command("/bin/sh", "-c", "exec "+command)
	// Files, not writers: Wait then returns when the command ends, without
	// waiting for copies that a forked child could hold up.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		inW.Close()
		errR.Close()
		return nil, &ProxyCommandError{Host: host, Command: command, Err: err}
	}
	pc.cmd = cmd
	go func() {
		_, _ = io.Copy(pc.stderr, errR)
		close(pc.stderrDone)
	}()
	go func() {
		err := cmd.Wait()
		// The relay is over when the command is: what it forked (and what
		// would keep the pipes open, so that the connection never saw its
		// end) goes with it.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		pc.waitErr = err
		close(pc.exited)
	}()
	return pc, nil
}

func (pc *proxyConn) Read(b []byte) (int, error) {
	n, err := pc.r.Read(b)
	if err != nil {
		pc.ended.Store(true)
	}
	return n, err
}

// Write writes to the command's stdin. A write that fails (EPIPE: the
// command closed its stdin, usually because it is exiting) counts as the
// end of the transport, as a failed Read does: which of the two the SSH
// handshake meets first when the command dies is a matter of scheduling,
// and the command's own status must be reported either way.
func (pc *proxyConn) Write(b []byte) (int, error) {
	n, err := pc.w.Write(b)
	if err != nil {
		pc.ended.Store(true)
	}
	return n, err
}

// Close closes the pipes, kills the command's process group and reaps the
// command. It is idempotent and returns once the command is gone. When the
// command had already closed its end of the transport, it gets up to
// proxyGrace to end by itself first, so that its own exit status is what
// errors report.
func (pc *proxyConn) Close() error {
	grace := time.Duration(0)
	if pc.ended.Load() {
		grace = proxyGrace
	}
	pc.stop(grace)
	return nil
}

// stop closes the pipes, gives the command grace to end by itself (so that
// its own exit status and message are what gets reported), then kills its
// process group and waits for it.
func (pc *proxyConn) stop(grace time.Duration) {
	pc.closeOnce.Do(func() {
		pc.w.Close()
		pc.r.Close()
		if grace > 0 {
			if pc.onGrace != nil {
				pc.onGrace()
			}
			select {
			case <-pc.exited:
			case <-time.After(grace):
			}
		}
		select {
		case <-pc.exited:
		default:
			pc.killed = true
		}
		// The group outlives its leader when the leader forked: kill it
		// whether or not the leader is still there.
		_ = syscall.Kill(-pc.cmd.Process.Pid, syscall.SIGKILL)
		<-pc.exited
		// Decided from the status, not from whether the reaper goroutine
		// had run yet: a command that exited (or was killed by anyone
		// else) before this SIGKILL reached it reports its own status.
		pc.selfExited = !pc.killed || !killedBySIGKILL(pc.cmd.ProcessState)
		// A process outside the group may still hold stderr open.
		select {
		case <-pc.stderrDone:
		case <-time.After(time.Second):
		}
		pc.errR.Close()
	})
}

// killedBySIGKILL reports whether a reaped process died of SIGKILL.
func killedBySIGKILL(st *os.ProcessState) bool {
	if st == nil {
		return false
	}
	ws, ok := st.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// failure describes how the command ended when it ended by itself: a
// *ProxyCommandError wrapping err. It is nil while the command runs and
// when stop killed it. Call it after stop.
func (pc *proxyConn) failure(err error) *ProxyCommandError {
	select {
	case <-pc.exited:
	default:
		return nil
	}
	if !pc.selfExited {
		return nil
	}
	status := "exit status 0"
	if pc.waitErr != nil {
		status = pc.waitErr.Error()
	}
	return &ProxyCommandError{Host: pc.host, Command: pc.command, Status: status, Stderr: pc.stderr.String(), Err: err}
}

func (pc *proxyConn) LocalAddr() net.Addr  { return zeroAddr }
func (pc *proxyConn) RemoteAddr() net.Addr { return zeroAddr }

func (pc *proxyConn) SetDeadline(t time.Time) error {
	return errors.Join(pc.r.SetDeadline(t), pc.w.SetDeadline(t))
}
func (pc *proxyConn) SetReadDeadline(t time.Time) error  { return pc.r.SetReadDeadline(t) }
func (pc *proxyConn) SetWriteDeadline(t time.Time) error { return pc.w.SetWriteDeadline(t) }

// zeroAddr stands for the peer of a transport that is not a TCP socket (as
// x/crypto's own tunnels do); the known_hosts check uses the host name.
var zeroAddr = &net.TCPAddr{IP: net.IPv4zero}

// cappedBuffer keeps the first max bytes written to it.
type cappedBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - len(c.b); room > 0 {
		c.b = append(c.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (c *cappedBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.b)
}
