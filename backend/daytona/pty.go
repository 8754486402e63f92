package daytona

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	toolbox "github.com/daytona/clients/toolbox-api-client-go"
	"github.com/gorilla/websocket"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/randhex"
)

// How a process runs over a Daytona PTY session.
//
// The toolbox's only channel that streams both ways is a PTY session: an
// interactive login shell on a terminal, carried over a websocket. Start
// turns it into a plain process in three steps:
//
//  1. It types one short line into the login shell: put the terminal in
//     raw mode without echo (`stty raw -echo`: no echo, no CR/LF
//     translation, no special characters), print a ready marker, and exec
//     /bin/sh reading one more line.
//  2. Once the marker arrives (everything before it — prompt, banner, the
//     echo of the typed line — is dropped), it sends that line: the
//     process's program, encoded with printf %b escapes so it holds no raw
//     newline. The terminal is raw now, so nothing echoes and bytes pass
//     unchanged both ways.
//  3. That program runs the argv. Without TTY: stdin is a pipe fed by a
//     small decoder reading the terminal (so stdin can have an end, which a
//     raw terminal cannot signal), stdout and stderr are one pipe passed to
//     the terminal by a pacer (below), and the argv runs under setsid, in
//     its own session without a controlling terminal, like a `docker exec`
//     process. With TTY: the terminal is set back to sane and the argv runs
//     on it. Either way the exit status follows the output in-band, as a
//     frame "\x1eBERTHX<nonce>:<status>\x00" (the status sh reports:
//     128+N for a signal), so Wait learns it in order with the output and
//     before the session closes.
//
// Daytona's daemon closes a session's websockets the moment its shell
// exits, writing the close message straight onto the connection ahead of
// output still queued for it (pty/session.go, closeClientsWithExitCode),
// so the shell never exits before berth has seen all of the output: it
// waits for berth's acknowledgement line "a", sent when the end of the
// output arrived (without TTY: the pacer's end marker
// "\x1eBERTHE<nonce>\x00"; with TTY: the exit frame; a TTY shell whose
// berth went away gives up after 5 s).
//
// The daemon also drops a client whose queue of 256 messages (one per read
// of the terminal, at most 4 KiB each) is full, at once, as a slow
// consumer: over a network slower than the program's output that is a
// matter of a second. So without TTY the output is paced end to end: the
// pacer passes it on in windows of paceRecords writes of at most
// paceBlock bytes (one dd each), prints a window marker
// "\x1eBERTHW<nonce>\x00" after each, and starts a window only once berth
// has acknowledged all but the last paceWindows-1 of them (a credit line
// "c" per window, which the decoder hands the pacer through a private
// FIFO). So at most paceWindows windows — 24 writes, 384 KiB — are ever
// between the pacer and berth. Linux hands a write of 16 KiB to a
// terminal's reader in at most 10 pieces (tty buffers of 1792 bytes), so
// that is at most 240 of the daemon's messages, and about 100 as they
// usually come (4 KiB a read): the queue cannot fill, however slow the
// link. Throughput is then at most 384 KiB per round trip between berth
// and the sandbox (about 4 MB/s at 100 ms). An image without dd or mkfifo
// gets cat instead (unpaced, as before). A TTY process writes to the
// terminal itself and cannot be paced.
//
// Stdin travels to the decoder as lines "d<bytes as printf %b escapes>\n";
// "e\n" ends it (EOF), "c\n" is a credit, "a\n" the acknowledgement, and
// "x\n" says berth let go before the end of the output (the pacer then
// passes the rest on unpaced: nobody is there to acknowledge it). The
// decoder reads the terminal a byte at a time (the shell's read builtin),
// which is what lets it stop exactly at the end; a command line costs
// microseconds, bulk stdin about a second per few MB.
//
// This file holds the transport: the session, its websocket and the
// process on it. ptyscript.go holds the programs (stage1, stage2, the
// decoder and the pacer), ptyframe.go the framing of the output (the
// markers, the exit frame and the output buffer).

// ptyCols and ptyRows are the terminal size of every PTY session.
const (
	ptyCols = 200
	ptyRows = 50
)

// maxInputMessage keeps every websocket message berth sends under the
// daemon's 64 KiB read limit.
const maxInputMessage = 32 << 10

// XOFF and XON are the terminal's stop and start characters.
const (
	xoff = 0x13
	xon  = 0x11
)

// readyTimeout bounds the wait for the login shell to run the typed line.
const readyTimeout = 60 * time.Second

// errNoStty reports a sandbox image without a working stty.
var errNoStty = errors.New("daytona: the sandbox's stty failed: berth needs stty (coreutils or busybox) in the image to put its terminal in raw mode")

// ptyProc is a process running on a PTY session (see above).
type ptyProc struct {
	ws      *websocket.Conn
	session string
	tty     atomic.Bool // set by launch
	nonce   string
	frame   []byte // "\x1eBERTHX<nonce>:"
	window  []byte // "\x1eBERTHW<nonce>\x00", the pacer's window marker
	end     []byte // "\x1eBERTHE<nonce>\x00", the end of the output
	log     logger

	wmu      sync.Mutex // serialises writes to ws
	inClosed bool       // stdin's end was sent (guarded by wmu)
	acked    bool       // the acknowledgement line was sent (guarded by wmu)
	xoffSent bool       // the terminal's output is stopped (guarded by wmu)

	out  *outBuf
	omu  sync.Mutex // orders writes to out from the reader and its hold timer
	exit backend.ExitStatus

	closeOnce sync.Once
	closed    chan struct{}

	flowc chan struct{} // wakes flowLoop: the wanted flow state changed, or credits are owed
	pause atomic.Bool   // the wanted state: output stopped (XOFF)
	owed  atomic.Int32  // credits for windows received, not sent yet
	ended atomic.Bool   // the pacer's end marker came: all output is here

	readDone chan struct{} // closed when readLoop returns
}

// logger is the part of slog.Logger the process uses.
type logger interface {
	Debug(msg string, args ...any)
}

// startPTY starts spec on a new PTY session of the sandbox behind tb.
func startPTY(ctx context.Context, tb *toolbox.APIClient, hc *http.Client, spec backend.ProcSpec, log logger) (*ptyProc, error) {
	if _, err := stage2(spec, "x"); err != nil {
		return nil, err // a bad spec costs no session
	}
	p, err := openPTY(ctx, tb, hc, log)
	if err != nil {
		return nil, err
	}
	if err := p.launch(spec); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// openPTY creates a PTY session, connects to it and brings it to the
// point where it waits for its program (steps 1 and 2 above): a ready
// process that launch turns into any spec at the cost of one message.
func openPTY(ctx context.Context, tb *toolbox.APIClient, hc *http.Client, log logger) (*ptyProc, error) {
	nonce := randhex.String(8)
	id := "berth-" + randhex.String(8)
	req := toolbox.NewPtyCreateRequest()
	req.SetId(id)
	req.SetCols(ptyCols)
	req.SetRows(ptyRows)
	req.SetLazyStart(true)
	if _, resp, err := tb.ProcessAPI.CreatePtySession(ctx).Request(*req).Execute(); err != nil {
		return nil, toolboxErr(err, resp, "create PTY session")
	}
	cfg := tb.GetConfig()
	base := cfg.Servers[0].URL
	wsURL := "ws" + strings.TrimPrefix(base, "http") + "/process/pty/" + id + "/connect"
	hdr := http.Header{}
	for k, v := range cfg.DefaultHeader {
		hdr.Set(k, v)
	}
	d := websocket.Dialer{HandshakeTimeout: 30 * time.Second, Proxy: http.ProxyFromEnvironment,
		ReadBufferSize: 32 << 10, WriteBufferSize: 32 << 10}
	if tr := transportOf(hc); tr != nil {
		d.NetDialContext = tr.DialContext
		d.TLSClientConfig = tr.TLSClientConfig
	}
	ws, err := dialRetrying(ctx, &d, wsURL, hdr, "connect to PTY session "+id)
	if err != nil {
		return nil, err
	}
	p := &ptyProc{
		ws: ws, session: id, nonce: nonce, frame: []byte("\x1eBERTHX" + nonce + ":"), log: log,
		window: []byte("\x1eBERTHW" + nonce + "\x00"), end: []byte("\x1eBERTHE" + nonce + "\x00"),
		out: newOutBuf(outBufMax), closed: make(chan struct{}),
		flowc: make(chan struct{}, 1), readDone: make(chan struct{}),
	}
	if err := p.handshake(ctx, nonce); err != nil {
		ws.Close()
		return nil, err
	}
	go p.readLoop()
	go p.pingLoop()
	return p, nil
}

// pingLoop pings the websocket every pingInterval while it is open. No
// part of Daytona pings (not the daemon, the proxy or the SDKs), and a
// load balancer in front of the proxy cuts connections idle for about a
// minute: the persistent shell waiting for the next command, or the spare
// session waiting for its program, would be lost with it. The daemon
// answers with a pong, which the read loop takes in.
func (p *ptyProc) pingLoop() {
	t := time.NewTicker(time.Duration(pingInterval.Load()))
	defer t.Stop()
	for {
		select {
		case <-p.closed:
			return
		case <-p.readDone:
			return
		case <-t.C:
			if err := p.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(10*time.Second)); err != nil {
				return
			}
		}
	}
}

// launch sends the program that runs spec (step 3). It fails when the
// session ended meanwhile.
func (p *ptyProc) launch(spec backend.ProcSpec) error {
	prog, err := stage2(spec, p.nonce)
	if err != nil {
		return err
	}
	if p.exited() {
		_, err := p.exit.Wait()
		return fmt.Errorf("daytona: PTY session %s ended before its program was sent: %w", p.session, err)
	}
	p.tty.Store(spec.TTY)
	if !spec.TTY {
		p.out.onFlow(p.requestFlow)
		go p.flowLoop()
	}
	line := escapeTo(make([]byte, 0, len(prog)+16), []byte(prog))
	line = append(line, '\n')
	p.wmu.Lock()
	defer p.wmu.Unlock()
	for len(line) > 0 {
		n := min(len(line), maxInputMessage)
		if err := p.ws.WriteMessage(websocket.BinaryMessage, line[:n]); err != nil {
			return fmt.Errorf("daytona: send the program to PTY session %s: %w", p.session, err)
		}
		line = line[n:]
	}
	return nil
}

// discard ends a ready process that was never launched: the waiting
// shell reads "exit" as its program.
func (p *ptyProc) discard() {
	p.closeOnce.Do(func() {
		close(p.closed)
		p.wmu.Lock()
		p.ws.SetWriteDeadline(time.Now().Add(time.Second))
		p.ws.WriteMessage(websocket.BinaryMessage, []byte("exit\n"))
		p.wmu.Unlock()
		p.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		p.ws.Close()
		p.out.close(io.EOF)
	})
}

// toolboxErr describes a failed toolbox call.
func toolboxErr(err error, resp *http.Response, op string) error {
	status := 0
	if resp != nil {
		status = resp.StatusCode
	}
	return &APIError{Op: op, Status: status, Msg: errorMessage(err), GaveUp: gaveUp(resp)}
}

// handshake waits for the connection, types stage1 and waits for the
// ready marker.
func (p *ptyProc) handshake(ctx context.Context, nonce string) error {
	deadline := time.Now().Add(readyTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	p.ws.SetReadDeadline(deadline)
	defer p.ws.SetReadDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { p.ws.SetReadDeadline(time.Now()) })
	defer stop()

	typed := false
	ready := []byte("BERTHRDY_" + nonce + "_")
	var seen []byte
	for {
		typ, msg, err := p.ws.ReadMessage()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("daytona: PTY session %s ended before its shell was ready (%q): %w", p.session, tail(seen), err)
		}
		if typ == websocket.TextMessage {
			var c struct{ Type, Status, Error string }
			if json.Unmarshal(msg, &c) == nil && c.Type == "control" {
				switch c.Status {
				case "connected":
					if !typed { // (also typed at the first output, below)
						typed = true
						if err := p.ws.WriteMessage(websocket.BinaryMessage, []byte(stage1(nonce))); err != nil {
							return fmt.Errorf("daytona: type into PTY session %s: %w", p.session, err)
						}
					}
				case "error":
					return &APIError{Op: "connect to PTY session " + p.session, Status: http.StatusBadRequest, Msg: c.Error}
				}
				continue
			}
		}
		if !typed {
			typed = true
			if err := p.ws.WriteMessage(websocket.BinaryMessage, []byte(stage1(nonce))); err != nil {
				return fmt.Errorf("daytona: type into PTY session %s: %w", p.session, err)
			}
		}
		seen = append(seen, msg...)
		i := bytes.Index(seen, ready)
		if i < 0 {
			if len(seen) > 1<<16 {
				seen = seen[len(seen)-len(ready):]
			}
			continue
		}
		rest := seen[i+len(ready):]
		nl := bytes.IndexByte(rest, '\n')
		if nl < 0 {
			continue
		}
		if status := strings.TrimSpace(string(rest[:nl])); status != "0" {
			return errNoStty
		}
		if len(rest) > nl+1 {
			// Nothing may follow the marker before stage2 runs.
			p.log.Debug("daytona: output after the ready marker", "session", p.session, "bytes", len(rest)-nl-1)
		}
		return nil
	}
}

func tail(b []byte) string {
	if len(b) > 200 {
		b = b[len(b)-200:]
	}
	return string(b)
}

// readLoop moves the session's output into the output buffer, takes out
// the pacer's markers (owing a credit for each window, acknowledging the
// end of the output), finds the exit frame, and ends the output when the
// connection ends, at the end marker after the exit frame, or
// backend.WaitDelay after the exit when a descendant keeps the output
// open.
func (p *ptyProc) readLoop() {
	defer close(p.readDone)
	ms := &markerStripper{markers: [][]byte{p.window, p.end}}
	fm := &frameMatcher{marker: p.frame}
	var closeCode *int
	var flush *time.Timer
	// deliver passes output with the markers already taken out on to the
	// exit frame matcher and the buffer; false means the buffer closed.
	// omu held.
	deliver := func(b []byte) bool {
		if len(b) == 0 {
			return true
		}
		if p.exited() {
			return p.out.write(b)
		}
		before, code, found, after := fm.feed(b)
		if len(before) > 0 && !p.out.write(before) {
			return false
		}
		if found {
			p.exitedWith(code)
			return len(after) == 0 || p.out.write(after)
		}
		return true
	}
	marker := func(m int) {
		if m == 0 {
			p.owed.Add(1)
			p.wakeFlow()
			return
		}
		p.ended.Store(true)
		go p.sendAck() // never block the reader on a stuck writer
		if p.exited() {
			p.out.close(io.EOF)
		}
	}
	for {
		typ, msg, err := p.ws.ReadMessage()
		if err != nil {
			if flush != nil {
				flush.Stop()
			}
			p.omu.Lock()
			if held := ms.release(); len(held) > 0 {
				deliver(held)
			}
			if held := fm.release(); len(held) > 0 && !p.exited() {
				p.out.write(held)
			}
			p.omu.Unlock()
			p.connEnded(err, closeCode)
			return
		}
		switch typ {
		case websocket.TextMessage:
			var c struct {
				Type, Status, Error string
				ExitCode            *int `json:"exitCode"`
			}
			if json.Unmarshal(msg, &c) == nil && c.Type == "control" {
				if c.Status == "exited" && c.ExitCode != nil {
					closeCode = c.ExitCode
				}
				continue
			}
			fallthrough
		case websocket.BinaryMessage:
			if p.ended.Load() {
				continue // nothing follows the end of the output
			}
			if flush != nil {
				flush.Stop()
			}
			// omu keeps the order of this write and the hold timer's.
			p.omu.Lock()
			ok := ms.feed(msg, deliver, marker)
			p.omu.Unlock()
			if !ok {
				return
			}
			if ms.holding() || fm.holding() {
				// Bytes that may start a marker or the exit frame wait for
				// the next message; if none comes soon they were output
				// after all (printf writes a marker at once).
				flush = time.AfterFunc(frameHold, func() {
					p.omu.Lock()
					defer p.omu.Unlock()
					if held := ms.release(); len(held) > 0 {
						deliver(held)
					}
					if held := fm.release(); len(held) > 0 {
						p.out.write(held)
					}
				})
			}
		}
	}
}

// frameHold is how long bytes that may start the exit frame are held back
// waiting for the rest of it.
const frameHold = 50 * time.Millisecond

// exited reports whether the exit status is known.
func (p *ptyProc) exited() bool { return p.exit.Exited() }

// exitedWith records the in-band exit status and bounds what output may
// still come. A TTY process's shell, waiting for berth's acknowledgement
// of the exit frame, gets it now; without TTY the acknowledgement waits
// for the pacer's end marker.
func (p *ptyProc) exitedWith(code int) {
	p.exit.Set(code, nil)
	if p.tty.Load() {
		go p.sendAck() // never block the reader on a stuck writer
	}
	time.AfterFunc(backend.WaitDelay, func() {
		p.out.close(io.EOF)
		p.Close()
	})
}

// connEnded settles the process when the websocket ended: after the exit
// frame that is the normal end of the output; before it, the close
// message's exit code is the status (the daemon closed the socket as the
// program exited, before the frame was sent), and a connection that broke
// without one means the status cannot be known.
func (p *ptyProc) connEnded(err error, controlCode *int) {
	if p.exited() {
		p.out.close(io.EOF)
		return
	}
	var ce *websocket.CloseError
	if errors.As(err, &ce) && (ce.Code == websocket.CloseNormalClosure || ce.Code == websocket.CloseInternalServerErr) {
		var cd struct {
			ExitCode *int `json:"exitCode"`
		}
		if json.Unmarshal([]byte(ce.Text), &cd) == nil && cd.ExitCode != nil {
			p.exit.Set(*cd.ExitCode, nil)
			p.out.close(io.EOF)
			return
		}
	}
	if controlCode != nil {
		p.exit.Set(*controlCode, nil)
		p.out.close(io.EOF)
		return
	}
	select {
	case <-p.closed:
		p.exit.Set(-1, errProcClosed)
		p.out.close(io.EOF)
	default:
		lost := fmt.Errorf("daytona: the connection to PTY session %s broke before the process's exit status was known: %w", p.session, err)
		p.exit.Set(-1, lost)
		p.out.close(lost)
	}
}

// errProcClosed is Wait's error when Close came before the exit status.
var errProcClosed = errors.New("daytona: process closed before its exit status was known")

// Stdin implements backend.Process.
func (p *ptyProc) Stdin() io.WriteCloser { return ptyStdin{p} }

// Stdout implements backend.Process.
func (p *ptyProc) Stdout() io.Reader { return p.out }

// Wait implements backend.Process: the status comes from the exit frame.
func (p *ptyProc) Wait() (int, error) { return p.exit.Wait() }

// Close implements backend.Process: it ends the process's stdin (a
// process still reading it sees EOF) and drops the websocket. The process
// itself is not killed.
func (p *ptyProc) Close() error {
	p.closeOnce.Do(func() {
		close(p.closed)
		// Another writer may hold the writer lock: the flow loop sending
		// credits for output still on its way (a moment), or a write
		// blocked on a process that does not read its stdin (for ever;
		// closing the socket below unblocks it, and the end line is not
		// needed then). So berth waits for the lock, but not for ever.
		// Giving up at once left a process whose output berth had
		// stopped (XOFF) stopped for good whenever a credit was being
		// sent as berth let go.
		if !p.exited() && p.lockWithin(closeLockWait) {
			if p.tty.Load() {
				p.sendEndLocked()
			} else {
				p.sendAckLocked() // the shell exits as soon as the command does
			}
			p.wmu.Unlock()
		}
		p.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		p.ws.Close()
		p.out.close(io.EOF)
	})
	return nil
}

// sendAck tells the waiting shell that berth has all of the output (or
// that nobody waits for it any more), so it may exit: without TTY the
// decoder ends at the line "a" (closing stdin, if it was not closed), or
// at "x" when berth lets go before the end of the output, which also ends
// the pacing of what still comes; with TTY the shell reads it after the
// exit frame.
func (p *ptyProc) sendAck() error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return p.sendAckLocked()
}

// sendAckLocked is sendAck with wmu held.
func (p *ptyProc) sendAckLocked() error {
	if p.acked {
		return nil
	}
	p.acked = true
	msg := []byte("a\n")
	if !p.tty.Load() {
		p.inClosed = true
		if !p.ended.Load() {
			msg = []byte("x\n")
		}
	}
	if p.xoffSent {
		// berth stopped the output for its reader, which is gone now:
		// what still comes is not held back.
		msg = append([]byte{xon}, msg...)
		p.xoffSent = false
	}
	p.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	defer p.ws.SetWriteDeadline(time.Time{})
	return p.ws.WriteMessage(websocket.BinaryMessage, msg)
}

// sendEnd sends stdin's end: the decoder's end line, or ^D (the
// terminal's end-of-file character) on a TTY.
func (p *ptyProc) sendEnd() error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return p.sendEndLocked()
}

// sendEndLocked is sendEnd with wmu held.
func (p *ptyProc) sendEndLocked() error {
	if p.inClosed {
		return nil
	}
	p.inClosed = true
	end := []byte("e\n")
	if p.tty.Load() {
		end = []byte{4}
	}
	p.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	defer p.ws.SetWriteDeadline(time.Time{})
	return p.ws.WriteMessage(websocket.BinaryMessage, end)
}

// closeLockWait bounds how long Close waits for another writer to let go
// of the socket before it drops the socket without its last line.
const closeLockWait = 2 * time.Second

// lockWithin takes wmu, unless another writer holds it for longer than d
// (a write blocked on a connection that no longer moves). It reports
// whether it took it; the caller then unlocks.
func (p *ptyProc) lockWithin(d time.Duration) bool {
	if p.wmu.TryLock() {
		return true
	}
	got, abandon := make(chan struct{}), make(chan struct{})
	go func() {
		p.wmu.Lock()
		select {
		case got <- struct{}{}: // the caller holds it now
		case <-abandon:
			p.wmu.Unlock()
		}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-got:
		return true
	case <-t.C:
		close(abandon)
		return false
	}
}

// requestFlow records whether output should be stopped and wakes
// flowLoop. It never blocks.
func (p *ptyProc) requestFlow(pause bool) {
	p.pause.Store(pause)
	p.wakeFlow()
}

// wakeFlow wakes flowLoop. It never blocks.
func (p *ptyProc) wakeFlow() {
	select {
	case p.flowc <- struct{}{}:
	default:
	}
}

// flowLoop sends the credits owed for the pacer's windows, and XOFF and
// XON as the output buffer asks for them: the credits bound what is on
// its way to berth, XOFF what berth holds that its reader has not taken.
func (p *ptyProc) flowLoop() {
	stopped := false
	for {
		select {
		case <-p.flowc:
		case <-p.closed:
			return
		}
		var msg []byte
		for n := p.owed.Swap(0); n > 0; n-- {
			msg = append(msg, 'c', '\n')
		}
		if want := p.pause.Load(); want != stopped {
			c := byte(xon)
			if want {
				c = xoff
			}
			msg = append(msg, c)
			stopped = want
		}
		if len(msg) == 0 {
			continue
		}
		p.wmu.Lock()
		var err error
		if !p.acked { // after the acknowledgement nobody reads credits
			err = p.ws.WriteMessage(websocket.BinaryMessage, msg)
			if err == nil {
				p.xoffSent = stopped
			}
		}
		p.wmu.Unlock()
		if err != nil {
			return
		}
	}
}

// ptyStdin is the process's stdin.
type ptyStdin struct{ p *ptyProc }

// Write sends data to the process: raw on a TTY, as decoder lines
// otherwise. It fails once stdin was closed or the process exited.
func (s ptyStdin) Write(data []byte) (int, error) {
	p := s.p
	if p.exited() {
		return 0, fmt.Errorf("daytona: write to PTY session %s: %w", p.session, io.ErrClosedPipe)
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.inClosed {
		return 0, fmt.Errorf("daytona: write to PTY session %s: %w", p.session, io.ErrClosedPipe)
	}
	n := 0
	for n < len(data) {
		var msg []byte
		if p.tty.Load() {
			k := min(len(data)-n, maxInputMessage)
			msg = data[n : n+k]
			n += k
		} else {
			// Up to 6 KiB of input per line: at most 30 KiB escaped.
			k := min(len(data)-n, 6<<10)
			msg = append(escapeTo(append(make([]byte, 0, 5*k+2), 'd'), data[n:n+k]), '\n')
			n += k
		}
		if err := p.ws.WriteMessage(websocket.BinaryMessage, msg); err != nil {
			return 0, fmt.Errorf("daytona: write to PTY session %s: %w", p.session, err)
		}
	}
	return n, nil
}

// Close sends stdin's end.
func (s ptyStdin) Close() error {
	if err := s.p.sendEnd(); err != nil && !s.p.exited() {
		return fmt.Errorf("daytona: close stdin of PTY session %s: %w", s.p.session, err)
	}
	return nil
}

// pingInterval is how often berth pings a PTY websocket, in nanoseconds
// (20 s; tests shorten it). It is atomic: a spare session prepared in the
// background may start pinging while a test puts the value back.
var pingInterval atomic.Int64

func init() { pingInterval.Store(int64(20 * time.Second)) }
