package daytonafake

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	toolbox "github.com/daytona/clients/toolbox-api-client-go"
	"github.com/gorilla/websocket"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"

	"github.com/a55dbaac/berth/internal/testenv/fault"
)

// Queue sizes of Daytona's daemon: input waiting for the terminal, and
// output waiting for one websocket client (a client whose queue is full is
// dropped as a slow consumer).
const (
	ptyInputQueue  = 1024
	ptyClientQueue = 256
	ptyWriteWait   = 10 * time.Second
	ptyReadLimit   = 64 << 10
)

// ptyWrapper starts a PTY session's shell: it reports its pid on the first
// line (the fake needs it to kill the tree; it is not passed on) and
// becomes an interactive login shell, bash when the image has it.
const ptyWrapper = `printf '%s\n' "$$"
if command -v bash >/dev/null 2>&1; then exec bash -i -l; fi
exec sh -i -l`

// ptySession is one PTY session: an interactive shell on a terminal in the
// sandbox's container, and the websocket clients attached to it.
type ptySession struct {
	sb        *sandbox
	id        string
	cwd       string
	envs      map[string]string
	lazy      bool
	createdAt time.Time
	in        chan []byte   // input for the terminal
	done      chan struct{} // closed when the session ended

	mu      sync.Mutex
	cols    int
	rows    int
	started bool
	ended   bool
	execID  string
	pid     int
	conn    *client.HijackedResponse
	clients map[*wsClient]bool
	eof     chan struct{} // closed when the terminal's output ended
}

// wsClient is one attached websocket.
type wsClient struct {
	conn *websocket.Conn
	send chan wsMsg
	once sync.Once

	active atomic.Int64    // unix nanoseconds of the last frame either way (Unkind.IdleCut)
	link   fault.Bandwidth // the link to the client (Unkind.LinkBytesPerSec; writer only)
}

// touch records a frame on the client's connection.
func (cl *wsClient) touch() { cl.active.Store(time.Now().UnixNano()) }

// wsMsg is one message for a client; close ends the client after it.
type wsMsg struct {
	typ   int
	data  []byte
	close bool
}

// info renders the session as the toolbox's PtySessionInfo.
func (p *ptySession) info() *toolbox.PtySessionInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	active := p.started && !p.ended
	return toolbox.NewPtySessionInfo(active, int32(p.cols), p.createdAt.UTC().Format(time.RFC3339Nano), p.cwd,
		cloneMap(p.envs), p.id, p.lazy, int32(p.rows))
}

// ptyFor returns the sandbox's session named in the path, or answers 404.
func (s *Server) ptyFor(w http.ResponseWriter, r *http.Request, sb *sandbox) *ptySession {
	id := r.PathValue("sessionId")
	s.mu.Lock()
	p := sb.ptys[id]
	s.mu.Unlock()
	if p == nil {
		toolboxError(w, r, http.StatusNotFound, toolbox.DAEMONERRORCODE_CodeNotFound, "PTY session not found")
	}
	return p
}

func (s *Server) listPTY(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	s.mu.Lock()
	all := make([]*ptySession, 0, len(sb.ptys))
	for _, p := range sb.ptys {
		all = append(all, p)
	}
	s.mu.Unlock()
	list := []toolbox.PtySessionInfo{}
	for _, p := range all {
		list = append(list, *p.info())
	}
	writeJSON(w, http.StatusOK, toolbox.NewPtyListResponse(list))
}

func (s *Server) getPTY(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	if p := s.ptyFor(w, r, sb); p != nil {
		writeJSON(w, http.StatusOK, p.info())
	}
}

// createPTY is POST /process/pty: the session starts at once unless
// lazyStart asks to wait for the first client.
func (s *Server) createPTY(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	var req toolbox.PtyCreateRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		toolboxError(w, r, http.StatusBadRequest, toolbox.DAEMONERRORCODE_CodeInvalidRequestBody, err.Error())
		return
	}
	if req.GetId() == "" {
		toolboxError(w, r, http.StatusBadRequest, toolbox.DAEMONERRORCODE_CodeBadRequest, "session ID is required")
		return
	}
	p := &ptySession{
		sb: sb, id: req.GetId(), cwd: req.GetCwd(), envs: cloneMap(req.GetEnvs()), lazy: req.GetLazyStart(),
		createdAt: time.Now(), cols: 80, rows: 24,
		in: make(chan []byte, ptyInputQueue), done: make(chan struct{}), clients: map[*wsClient]bool{},
	}
	if req.Cols != nil {
		p.cols = int(*req.Cols)
	}
	if req.Rows != nil {
		p.rows = int(*req.Rows)
	}
	if p.cols > 1000 || p.rows > 1000 || p.cols < 1 || p.rows < 1 {
		toolboxError(w, r, http.StatusBadRequest, toolbox.DAEMONERRORCODE_CodeBadRequest, "invalid terminal size: cols and rows must be from 1 to 1000")
		return
	}
	if p.envs["TERM"] == "" {
		p.envs["TERM"] = "xterm-256color"
	}
	s.mu.Lock()
	if _, dup := sb.ptys[p.id]; dup {
		s.mu.Unlock()
		toolboxError(w, r, http.StatusConflict, toolbox.DAEMONERRORCODE_CodeConflict, fmt.Sprintf("PTY session with ID '%s' already exists", p.id))
		return
	}
	sb.ptys[p.id] = p
	s.mu.Unlock()
	if !p.lazy {
		if err := p.start(s.ctx); err != nil {
			p.remove()
			toolboxError(w, r, http.StatusInternalServerError, toolbox.DAEMONERRORCODE_CodeInternalServerError, "failed to start PTY session: "+err.Error())
			return
		}
	}
	writeJSON(w, http.StatusCreated, toolbox.NewPtyCreateResponse(p.id))
}

// start runs the session's shell on a terminal in the container.
func (p *ptySession) start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		if p.ended {
			return errors.New("PTY session has already been used and cannot be restarted")
		}
		return nil
	}
	s := p.sb.s
	id := p.sb.container()
	if id == "" {
		return errors.New("the sandbox has no container")
	}
	env := make([]string, 0, len(p.envs))
	for k, v := range p.envs {
		env = append(env, k+"="+v)
	}
	cwd := p.cwd
	if cwd == "" {
		cwd = p.sb.workDir(ctx) // the daemon's own working directory
	}
	size := client.ConsoleSize{Height: uint(p.rows), Width: uint(p.cols)}
	// Not while the container is frozen for a snapshot; the shell's pid
	// line below says its process runs.
	end, err := s.gate.begin(ctx, id)
	if err != nil {
		return err
	}
	defer end()
	cr, err := s.docker.ExecCreate(ctx, id, client.ExecCreateOptions{
		TTY: true, AttachStdin: true, AttachStdout: true, AttachStderr: true, ConsoleSize: size,
		Cmd: []string{"/bin/sh", "-c", ptyWrapper}, Env: env, WorkingDir: cwd,
	})
	if err != nil {
		return fmt.Errorf("create exec: %w", err)
	}
	att, err := s.docker.ExecAttach(ctx, cr.ID, client.ExecAttachOptions{TTY: true, ConsoleSize: size})
	if err != nil {
		return fmt.Errorf("attach exec: %w", err)
	}
	att.Conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	line, err := att.Reader.ReadString('\n')
	att.Conn.SetReadDeadline(time.Time{})
	pid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		att.Close()
		return fmt.Errorf("the terminal's shell did not start: %q: %v", line, errors.Join(err, perr))
	}
	p.started, p.execID, p.pid, p.conn = true, cr.ID, pid, &att.HijackedResponse
	p.eof = make(chan struct{})
	s.mu.Lock()
	s.execs[cr.ID] = p
	s.mu.Unlock()
	go p.readLoop(att.Reader, p.eof)
	go p.writeLoop(att.HijackedResponse)
	return nil
}

// readLoop passes the terminal's output to every attached client. Output
// read while no client is attached is lost, as on Daytona. A message holds
// at most what one read of a terminal returns (Linux's n_tty hands out at
// most 4 KiB per read), so the 256 messages of a client's queue stand for
// what they stand for on Daytona.
func (p *ptySession) readLoop(r *bufio.Reader, eof chan struct{}) {
	defer close(eof)
	buf := make([]byte, 4<<10)
	var tail []byte // the end of the output so far, for DisruptOnOutput
	for {
		n, err := r.Read(buf)
		if n > 0 {
			b := append([]byte(nil), buf[:n]...)
			seen := append(tail, b...)
			p.sb.s.sawOutput(p.sb, seen)
			tail = append(tail[:0], seen[max(0, len(seen)-128):]...)
			p.broadcast(wsMsg{typ: websocket.BinaryMessage, data: b})
			p.sb.touch()
		}
		if err != nil {
			go p.checkExit()
			return
		}
	}
}

// checkExit learns the exit status once the terminal's output ended (the
// docker event normally comes first).
func (p *ptySession) checkExit() {
	p.mu.Lock()
	execID := p.execID
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(p.sb.s.ctx, 30*time.Second)
	defer cancel()
	code, err := p.sb.s.execExit(ctx, execID)
	if err != nil {
		code = -1
	}
	p.exited(code)
}

// writeLoop writes client input to the terminal.
func (p *ptySession) writeLoop(conn client.HijackedResponse) {
	for {
		select {
		case <-p.done:
			return
		case b := <-p.in:
			if _, err := conn.Conn.Write(b); err != nil {
				return
			}
			p.sb.touch()
		}
	}
}

// broadcast queues a message for every client. Daytona's daemon drops a
// client whose queue is full at once, and so does the fake with
// Unkind.DropSlowConsumer; the kind fake waits up to slowConsumer for room
// first, since its own writer shares the test process (and the race
// detector's cost) with the client. A client that stays behind that long
// is dropped as the daemon drops it.
func (p *ptySession) broadcast(m wsMsg) {
	p.mu.Lock()
	clients := make([]*wsClient, 0, len(p.clients))
	for cl := range p.clients {
		clients = append(clients, cl)
	}
	p.mu.Unlock()
	atOnce := p.sb.s.opts.Unkind.DropSlowConsumer
	for _, cl := range clients {
		select {
		case cl.send <- m:
			continue
		default:
		}
		if !atOnce {
			t := time.NewTimer(slowConsumer)
			select {
			case cl.send <- m:
				t.Stop()
				continue
			case <-t.C:
			}
		}
		p.mu.Lock()
		delete(p.clients, cl)
		p.mu.Unlock()
		p.sb.s.mu.Lock()
		p.sb.s.dropped++
		p.sb.s.mu.Unlock()
		p.sb.s.log.Debug("daytonafake: PTY client dropped as a slow consumer", "sandbox", p.sb.id, "session", p.id)
		go cl.drop(websocket.ClosePolicyViolation, "slow consumer")
	}
}

// slowConsumer is how long a client's full queue may stay full.
const slowConsumer = 2 * time.Second

// exited ends the session after its shell exited with code: what the
// terminal printed before is passed on, then every client gets a close
// message carrying the exit code, as Daytona's daemon sends it.
func (p *ptySession) exited(code int) {
	p.mu.Lock()
	if p.ended {
		p.mu.Unlock()
		return
	}
	p.ended = true
	eof := p.eof
	p.mu.Unlock()
	if p.sb.s.opts.Unkind.CloseFirst {
		p.closeClientsAtOnce(code)
		p.remove()
		return
	}
	// What the terminal printed is passed on before the close message;
	// the bound is for a child that keeps the terminal open after the
	// shell exited.
	select {
	case <-eof:
	case <-time.After(5 * time.Second):
	}
	p.closeClients(code, exitReason(code))
	p.remove()
}

// exitReason is the daemon's exitReason for an exit code.
func exitReason(code int) string {
	switch {
	case code == 0:
		return ""
	case code == 130:
		return "Ctrl+C"
	case code == 137:
		return "SIGKILL"
	case code == 143:
		return "SIGTERM"
	case code > 128:
		return fmt.Sprintf("signal %d", code-128)
	}
	return "non-zero exit"
}

// closePayload is the daemon's close message for an exit code: its
// websocket code and its text.
func closePayload(code int, reason string) (int, string) {
	type closeData struct {
		ExitCode   int     `json:"exitCode"`
		ExitReason *string `json:"exitReason,omitempty"`
	}
	cd := closeData{ExitCode: code}
	wsCode := websocket.CloseNormalClosure
	if code != 0 {
		cd.ExitReason = &reason
		wsCode = websocket.CloseInternalServerErr
	}
	payload, _ := json.Marshal(cd)
	return wsCode, string(payload)
}

// closeClientsAtOnce writes every client's exit close message directly,
// out of band, and closes it: what was still queued for it is lost
// (Unkind.CloseFirst).
func (p *ptySession) closeClientsAtOnce(code int) {
	wsCode, payload := closePayload(code, exitReason(code))
	p.mu.Lock()
	clients := p.clients
	p.clients = map[*wsClient]bool{}
	p.mu.Unlock()
	for cl := range clients {
		cl.drop(wsCode, payload)
	}
}

// closeClients sends every client the exit close message after what is
// already queued for it.
func (p *ptySession) closeClients(code int, reason string) {
	wsCode, payload := closePayload(code, reason)
	msg := wsMsg{typ: websocket.CloseMessage, data: websocket.FormatCloseMessage(wsCode, payload), close: true}
	p.mu.Lock()
	clients := p.clients
	p.clients = map[*wsClient]bool{}
	p.mu.Unlock()
	for cl := range clients {
		select {
		case cl.send <- msg:
		case <-time.After(2 * time.Second):
			cl.drop(wsCode, payload)
		}
	}
}

// kill ends the session at once (DELETE): SIGKILL to the shell's tree.
func (p *ptySession) kill() {
	p.mu.Lock()
	pid, started, ended := p.pid, p.started, p.ended
	p.mu.Unlock()
	if started && !ended {
		ctx, cancel := context.WithTimeout(p.sb.s.ctx, 10*time.Second)
		p.sb.killTree(ctx, pid, "KILL")
		cancel()
	}
	p.mu.Lock()
	if p.ended {
		p.mu.Unlock()
		return
	}
	p.ended = true
	p.mu.Unlock()
	p.closeClients(137, "SIGKILL")
	p.remove()
}

// remove forgets the session and releases its terminal.
func (p *ptySession) remove() {
	s := p.sb.s
	s.mu.Lock()
	if s2 := p.sb.ptys[p.id]; s2 == p {
		delete(p.sb.ptys, p.id)
	}
	p.mu.Lock()
	if p.execID != "" {
		delete(s.execs, p.execID)
	}
	conn := p.conn
	p.conn = nil
	p.ended = true
	p.mu.Unlock()
	s.mu.Unlock()
	select {
	case <-p.done:
	default:
		close(p.done)
	}
	if conn != nil {
		conn.Close()
	}
}

// closePTYs ends every session of the sandbox. abrupt drops the
// connections without a close message (the sandbox's daemon died with
// its container).
func (sb *sandbox) closePTYs(abrupt bool) {
	sb.s.mu.Lock()
	all := make([]*ptySession, 0, len(sb.ptys))
	for _, p := range sb.ptys {
		all = append(all, p)
	}
	sb.s.mu.Unlock()
	for _, p := range all {
		p.mu.Lock()
		p.ended = true
		clients := p.clients
		p.clients = map[*wsClient]bool{}
		p.mu.Unlock()
		for cl := range clients {
			if abrupt {
				cl.conn.NetConn().Close()
			} else {
				cl.drop(websocket.CloseGoingAway, "sandbox stopped")
			}
		}
		p.remove()
	}
}

// drop closes a client with a close message written out of band.
func (cl *wsClient) drop(code int, text string) {
	cl.once.Do(func() {
		cl.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text), time.Now().Add(time.Second))
		cl.conn.Close()
	})
}

// writer sends a client its queued messages in order. When the session
// ends it still sends what was queued before (the exit close message
// among it), then stops.
func (cl *wsClient) writer(done <-chan struct{}) {
	send := func(m wsMsg) bool {
		cl.conn.SetWriteDeadline(time.Now().Add(ptyWriteWait))
		err := cl.conn.WriteMessage(m.typ, m.data)
		if err != nil || m.close {
			cl.once.Do(func() { cl.conn.Close() })
			return false
		}
		cl.touch()
		cl.link.Pace(len(m.data))
		return true
	}
	for {
		select {
		case m := <-cl.send:
			if !send(m) {
				return
			}
		case <-done:
			for {
				select {
				case m := <-cl.send:
					if !send(m) {
						return
					}
				default:
					cl.once.Do(func() { cl.conn.Close() })
					return
				}
			}
		}
	}
}

// watchIdle cuts the client's connection, without a close message, once
// no frame went either way for cut (Unkind.IdleCut), until stop closes.
func (cl *wsClient) watchIdle(s *Server, cut time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(max(cut/8, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			if now.Sub(time.Unix(0, cl.active.Load())) < cut {
				continue
			}
			s.mu.Lock()
			s.idleCut++
			s.mu.Unlock()
			s.log.Debug("daytonafake: idle PTY connection cut", "idle", cut)
			cl.conn.NetConn().Close()
			return
		}
	}
}

var ptyUpgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

// controlMessage is the daemon's text message about the connection.
func controlMessage(status, errText string) []byte {
	m := map[string]string{"type": "control", "status": status}
	if errText != "" {
		m["error"] = errText
	}
	b, _ := json.Marshal(m)
	return b
}

// connectPTY is GET /process/pty/{id}/connect: the websocket carrying the
// terminal. Output arrives as binary messages; text and binary messages
// from the client are typed into the terminal; the connection opens with a
// {"type":"control","status":"connected"} text message and ends, when the
// shell exits, with a close message whose text is
// {"exitCode":N,"exitReason":"..."}.
func (s *Server) connectPTY(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	id := r.PathValue("sessionId")
	ws, err := ptyUpgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered
	}
	fail := func(msg string) {
		ws.WriteMessage(websocket.TextMessage, controlMessage("error", "Failed to connect to PTY session: "+msg))
		ws.Close()
	}
	s.mu.Lock()
	p := sb.ptys[id]
	s.mu.Unlock()
	if p == nil {
		fail("session not found")
		return
	}
	if err := p.start(s.ctx); err != nil {
		fail(err.Error())
		return
	}
	cl := &wsClient{conn: ws, send: make(chan wsMsg, ptyClientQueue)}
	cl.touch()
	ws.SetPingHandler(func(data string) error {
		cl.touch()
		err := ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
		if err == websocket.ErrCloseSent {
			return nil
		}
		return err
	})
	ws.SetPongHandler(func(string) error { cl.touch(); return nil })
	p.mu.Lock()
	if p.ended {
		p.mu.Unlock()
		fail("PTY session has ended")
		return
	}
	p.clients[cl] = true
	cl.send <- wsMsg{typ: websocket.TextMessage, data: controlMessage("connected", "")}
	p.mu.Unlock()
	cl.link.BytesPerSec = s.opts.Unkind.LinkBytesPerSec
	go cl.writer(p.done)
	stop := make(chan struct{})
	defer close(stop)
	if cut := s.opts.Unkind.IdleCut; cut > 0 {
		go cl.watchIdle(s, cut, stop)
	}

	ws.SetReadLimit(ptyReadLimit)
	for {
		_, data, err := ws.ReadMessage()
		if err != nil {
			break
		}
		cl.touch()
		select {
		case p.in <- data:
		case <-p.done:
			cl.drop(websocket.CloseInternalServerErr, "PTY session unavailable")
		}
	}
	p.mu.Lock()
	delete(p.clients, cl)
	p.mu.Unlock()
	cl.once.Do(func() { ws.Close() })
}

// resizePTY is POST /process/pty/{id}/resize.
func (s *Server) resizePTY(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	p := s.ptyFor(w, r, sb)
	if p == nil {
		return
	}
	var req toolbox.PtyResizeRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		toolboxError(w, r, http.StatusBadRequest, toolbox.DAEMONERRORCODE_CodeInvalidRequestBody, err.Error())
		return
	}
	if req.Cols < 1 || req.Cols > 1000 || req.Rows < 1 || req.Rows > 1000 {
		toolboxError(w, r, http.StatusBadRequest, toolbox.DAEMONERRORCODE_CodeBadRequest, "cols and rows must be from 1 to 1000")
		return
	}
	p.mu.Lock()
	active := p.started && !p.ended
	execID := p.execID
	p.mu.Unlock()
	if !active {
		toolboxError(w, r, http.StatusGone, toolbox.DAEMONERRORCODE_CodeGone, "cannot resize inactive PTY session")
		return
	}
	if _, err := s.docker.ExecResize(r.Context(), execID, client.ExecResizeOptions{Height: uint(req.Rows), Width: uint(req.Cols)}); err != nil {
		toolboxError(w, r, http.StatusInternalServerError, toolbox.DAEMONERRORCODE_CodeInternalServerError, err.Error())
		return
	}
	p.mu.Lock()
	p.cols, p.rows = int(req.Cols), int(req.Rows)
	p.mu.Unlock()
	writeJSON(w, http.StatusOK, p.info())
}

// deletePTY is DELETE /process/pty/{id}: it kills the shell's tree.
func (s *Server) deletePTY(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	p := s.ptyFor(w, r, sb)
	if p == nil {
		return
	}
	p.kill()
	writeJSON(w, http.StatusOK, map[string]string{"message": "PTY session deleted"})
}

// watchExecs learns when PTY shells exit, from the daemon's exec_die
// events for the fake's containers, and runs the auto-stop check.
func (s *Server) watchExecs(ctx context.Context) {
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	since := time.Now()
	for ctx.Err() == nil {
		sub, cancel := context.WithCancel(ctx)
		ev := s.docker.Events(sub, client.EventsListOptions{
			Since: strconv.FormatInt(since.Unix(), 10),
			Filters: make(client.Filters).
				Add("type", string(events.ContainerEventType)).
				Add("event", "exec_die").
				Add("label", labelInstance+"="+s.inst),
		})
	loop:
		for {
			select {
			case m, ok := <-ev.Messages:
				if !ok {
					break loop
				}
				since = time.Unix(0, m.TimeNano).Add(-time.Second)
				code, err := strconv.Atoi(m.Actor.Attributes["exitCode"])
				if err != nil {
					code = -1
				}
				s.mu.Lock()
				p := s.execs[m.Actor.Attributes["execID"]]
				s.mu.Unlock()
				if p != nil {
					go p.exited(code)
				}
			case <-ev.Err:
				break loop
			case now := <-tick.C:
				s.autoStop(now)
			case <-ctx.Done():
				cancel()
				return
			}
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}
