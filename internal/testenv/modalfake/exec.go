package modalfake

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"
	pb "github.com/modal-labs/libmodal/modal-go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// execProc is one exec: a Docker exec in the sandbox's container.
type execProc struct {
	ord      int    // 1 for the first exec started in its sandbox, 2 for the next...
	id       string // the client's exec id
	dockerID string
	sb       *sandbox
	tty      bool
	conn     client.HijackedResponse
	stdout   *outStream
	stderr   *outStream

	stdinMu  sync.Mutex
	stdinOff uint64
	stdinEOF bool
	// hungUp is set when the exec's output has ended and the fake closed
	// its connection to the daemon, which ends the exec's stdin too.
	hungUp atomic.Bool

	once sync.Once
	done chan struct{}
	// waited is closed once TaskExecWait has answered the exit status.
	waited     chan struct{}
	waitedOnce sync.Once
	code       *int32
	signal     *int32
	// killed is set when the exec was still running as its sandbox
	// finished: its end is the sandbox's, which a silent router never
	// reports (Faults.SilentRouter).
	killed atomic.Bool
}

// ident names the exec in the identity of its fault streams, by its
// number in its sandbox.
func (e *execProc) ident() string { return "exec " + strconv.Itoa(e.ord) }

// silenced blocks the caller, as a silent router does, when the exec died
// with its sandbox and the router is silent; see Server.silence.
func (e *execProc) silenced(ctx context.Context) error {
	if !e.killed.Load() {
		return nil
	}
	return e.sb.s.silence(ctx, e.sb)
}

// exited records the exit status (the first report wins): code for a normal
// exit, signal when it was killed with its container.
func (e *execProc) exited(code, signal *int32) {
	e.once.Do(func() {
		e.code, e.signal = code, signal
		close(e.done)
		sb := e.sb
		sb.mu.Lock()
		sb.running--
		sb.mu.Unlock()
		sb.touch()
		e.sb.s.mu.Lock()
		delete(e.sb.s.byDocker, e.dockerID)
		e.sb.s.mu.Unlock()
	})
}

func (e *execProc) status() (code, signal *int32, done bool) {
	select {
	case <-e.done:
		return e.code, e.signal, true
	default:
		return nil, nil, false
	}
}

// execFor finds the exec a router call addresses, after checking the
// caller's token is for that task.
func (s *Server) execFor(ctx context.Context, taskID, execID string) (*sandbox, *execProc, error) {
	if err := checkRouterTask(ctx, taskID); err != nil {
		return nil, nil, err
	}
	sb, err := s.sandboxByTask(taskID)
	if err != nil {
		return nil, nil, err
	}
	sb.mu.Lock()
	e, ok := sb.execs[execID]
	sb.mu.Unlock()
	if !ok {
		return nil, nil, status.Errorf(codes.NotFound, "exec '%s' not found in task '%s'", execID, taskID)
	}
	return sb, e, nil
}

// TaskExecStart starts a command in the task's container. Starting an exec
// id again is a no-op (the RPC is idempotent); a finished task refuses.
func (r *router) TaskExecStart(ctx context.Context, req *pb.TaskExecStartRequest) (*pb.TaskExecStartResponse, error) {
	s := r.s
	if err := checkRouterTask(ctx, req.GetTaskId()); err != nil {
		return nil, err
	}
	sb, err := s.sandboxByTask(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	if err := s.silence(ctx, sb); err != nil {
		return nil, err
	}
	if req.GetExecId() == "" {
		return nil, status.Error(codes.InvalidArgument, "missing exec id")
	}
	if len(req.GetCommandArgs()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "missing command")
	}
	if req.HasWorkdir() && req.GetWorkdir() != "" && req.GetWorkdir()[0] != '/' {
		return nil, status.Errorf(codes.InvalidArgument, "workdir %q must be an absolute path", req.GetWorkdir())
	}
	secretMap, secretEnv, err := s.resolveSecrets(req.GetSecretIds())
	if err != nil {
		return nil, err
	}
	pty := req.GetPtyInfo()
	tty := pty.GetEnabled()
	env := secretEnv
	if tty {
		if pty.GetEnvTerm() != "" {
			env = append(env, "TERM="+pty.GetEnvTerm())
		}
		if pty.GetEnvColorterm() != "" {
			env = append(env, "COLORTERM="+pty.GetEnvColorterm())
		}
	}

	sb.mu.Lock()
	if res := sb.res; res != nil {
		sb.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "task %s has already finished (%s); it cannot run commands", sb.taskID, res.GetStatus())
	}
	if _, dup := sb.execs[req.GetExecId()]; dup {
		sb.mu.Unlock()
		return pb.TaskExecStartResponse_builder{}.Build(), nil
	}
	sb.nExecs++
	e := &execProc{ord: sb.nExecs, id: req.GetExecId(), sb: sb, tty: tty, stdout: newOutStream(), stderr: newOutStream(), done: make(chan struct{}), waited: make(chan struct{})}
	sb.execs[e.id] = e
	sb.running++
	cid := sb.containerID
	sb.mu.Unlock()
	sb.touch()
	s.mu.Lock()
	s.execRecs = append(s.execRecs, ExecRecord{SandboxID: sb.id, ExecID: e.id, Argv: append([]string(nil), req.GetCommandArgs()...), Workdir: req.GetWorkdir(), SecretEnv: secretMap})
	s.mu.Unlock()

	fail := func(err error) (*pb.TaskExecStartResponse, error) {
		e.stdout.close()
		e.stderr.close()
		e.exited(ptr32(126), nil)
		return nil, err
	}
	opts := client.ExecCreateOptions{
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		TTY:          tty,
		Env:          env,
		WorkingDir:   req.GetWorkdir(),
		Cmd:          req.GetCommandArgs(),
	}
	if tty && pty.GetWinszRows() > 0 && pty.GetWinszCols() > 0 {
		opts.ConsoleSize = client.ConsoleSize{Height: uint(pty.GetWinszRows()), Width: uint(pty.GetWinszCols())}
	}
	cr, err := s.docker.ExecCreate(ctx, cid, opts)
	if err != nil {
		return fail(status.Errorf(codes.FailedPrecondition, "start exec in task %s: %v", sb.taskID, err))
	}
	e.dockerID = cr.ID
	s.mu.Lock()
	s.byDocker[cr.ID] = e
	s.mu.Unlock()
	att, err := s.docker.ExecAttach(ctx, cr.ID, client.ExecAttachOptions{TTY: tty, ConsoleSize: opts.ConsoleSize})
	if err != nil {
		return fail(status.Errorf(codes.FailedPrecondition, "start exec in task %s: %v", sb.taskID, err))
	}
	sb.mu.Lock()
	e.conn = att.HijackedResponse
	sb.mu.Unlock()
	s.wg.Add(1)
	go s.pump(e, req.GetStdoutConfig(), req.GetStderrConfig())
	if req.HasTimeoutSecs() && req.GetTimeoutSecs() > 0 {
		s.wg.Add(1)
		go s.execDeadline(e, time.Duration(req.GetTimeoutSecs())*time.Second)
	}
	return pb.TaskExecStartResponse_builder{}.Build(), nil
}

// pump copies the exec's output into its streams as configured.
func (s *Server) pump(e *execProc, outCfg pb.TaskExecStdoutConfig, errCfg pb.TaskExecStderrConfig) {
	defer s.wg.Done()
	var out, errw io.Writer = e.stdout, e.stderr
	if outCfg == pb.TaskExecStdoutConfig_TASK_EXEC_STDOUT_CONFIG_DEVNULL {
		out = io.Discard
	}
	switch errCfg {
	case pb.TaskExecStderrConfig_TASK_EXEC_STDERR_CONFIG_DEVNULL:
		errw = io.Discard
	case pb.TaskExecStderrConfig_TASK_EXEC_STDERR_CONFIG_STDOUT:
		errw = out
	}
	var cerr error
	if e.tty {
		_, cerr = io.Copy(out, e.conn.Reader)
	} else {
		_, cerr = stdcopy.StdCopy(out, errw, e.conn.Reader)
	}
	s.checkOutputEnd(e, cerr)
	// The connection goes first, so that a client that saw the output end
	// finds the exec's stdin ended too.
	e.hungUp.Store(true)
	e.conn.Close()
	e.stdout.close()
	e.stderr.close()
	// The exit status normally arrives as an event. An exec that never
	// started (no such binary) has none, and the event stream may have
	// broken: ask the daemon until the exec is settled.
	delay := 20 * time.Millisecond
	for {
		select {
		case <-e.done:
			return
		case <-s.ctx.Done():
			return
		case <-time.After(delay):
		}
		s.inspectExec(e, true)
		delay = min(2*delay, time.Second)
	}
}

// inspectExec settles an exec's status from the daemon if it has exited.
// Before its output ended, an exec without a pid may simply not have started
// yet (the client reports its missing exit code as 0), so only a pid that
// stopped running counts; after the output ended it has started or failed
// to.
func (s *Server) inspectExec(e *execProc, outputEnded bool) {
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	r, err := s.docker.ExecInspect(ctx, e.dockerID, client.ExecInspectOptions{})
	if err != nil || r.Running || r.PID == 0 && !outputEnded {
		return
	}
	e.exited(ptr32(int32(r.ExitCode)), nil)
}

// execDeadline kills the exec's process when its timeout passes.
func (s *Server) execDeadline(e *execProc, d time.Duration) {
	defer s.wg.Done()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-e.done:
		return
	case <-s.ctx.Done():
		return
	case <-t.C:
	}
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	r, err := s.docker.ExecInspect(ctx, e.dockerID, client.ExecInspectOptions{})
	if err != nil || !r.Running || r.PID <= 0 {
		return
	}
	// The fake runs beside the daemon: the exec's pid is a host pid.
	if err := syscall.Kill(r.PID, syscall.SIGKILL); err != nil {
		s.log.Warn("modalfake: kill exec after its timeout", "exec", e.id, "pid", r.PID, "err", err)
	}
}

// watchEvents follows the daemon's exec_die events for the fake's
// containers, which carry each exec's exit code the moment it exits (even
// while a descendant keeps its output open).
func (s *Server) watchEvents() error {
	since := time.Now().Add(-2 * time.Second)
	subscribe := func() client.EventsResult {
		return s.docker.Events(s.ctx, client.EventsListOptions{
			Since: fmt.Sprintf("%d.%09d", since.Unix(), since.Nanosecond()),
			Filters: make(client.Filters).
				Add("type", string(events.ContainerEventType)).
				Add("label", LabelInstance+"="+s.instance).
				Add("event", "exec_die"),
		})
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ev := subscribe()
		for {
			select {
			case m := <-ev.Messages:
				if m.TimeNano > 0 {
					since = time.Unix(0, m.TimeNano)
				}
				s.mu.Lock()
				e := s.byDocker[m.Actor.Attributes["execID"]]
				s.mu.Unlock()
				if e == nil {
					continue
				}
				code, err := strconv.Atoi(m.Actor.Attributes["exitCode"])
				if err != nil {
					s.inspectExec(e, false)
					continue
				}
				e.exited(ptr32(int32(code)), nil)
			case err := <-ev.Err:
				if s.ctx.Err() != nil {
					return
				}
				s.log.Warn("modalfake: docker event stream broke; resubscribing", "err", err)
				select {
				case <-s.ctx.Done():
					return
				case <-time.After(500 * time.Millisecond):
				}
				ev = subscribe()
				s.mu.Lock()
				pending := make([]*execProc, 0, len(s.byDocker))
				for _, e := range s.byDocker {
					pending = append(pending, e)
				}
				s.mu.Unlock()
				for _, e := range pending {
					s.inspectExec(e, false)
				}
			case <-s.ctx.Done():
				return
			}
		}
	}()
	return nil
}

// TaskExecStdinWrite writes to an exec's stdin at an offset: bytes already
// written (a retry) are skipped, a gap is refused; Eof closes it. Once the
// exec's output has ended (it exited) its stdin is gone, as a pipe whose
// reader exited: data is refused, while the end of input succeeds (there
// is nothing left to end), whether it comes before or after the exec's
// exit is seen.
func (r *router) TaskExecStdinWrite(ctx context.Context, req *pb.TaskExecStdinWriteRequest) (*pb.TaskExecStdinWriteResponse, error) {
	sb, e, err := r.s.execFor(ctx, req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	if err := r.s.silence(ctx, sb); err != nil {
		return nil, err
	}
	if res := sb.finished(); res != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "task %s has already finished", sb.taskID)
	}
	resp, err := r.s.writeStdin(sb, e, req)
	if err == nil && req.GetEof() {
		r.s.mu.Lock()
		late := r.s.lateEOF
		r.s.mu.Unlock()
		if late {
			select {
			case <-e.waited:
			case <-ctx.Done():
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			select {
			case <-time.After(200 * time.Millisecond):
			case <-ctx.Done():
				return nil, status.FromContextError(ctx.Err()).Err()
			}
		}
	}
	return resp, err
}

// writeStdin applies one TaskExecStdinWrite.
func (s *Server) writeStdin(sb *sandbox, e *execProc, req *pb.TaskExecStdinWriteRequest) (*pb.TaskExecStdinWriteResponse, error) {
	e.stdinMu.Lock()
	defer e.stdinMu.Unlock()
	data, off := req.GetData(), req.GetOffset()
	switch {
	case off > e.stdinOff:
		return nil, status.Errorf(codes.InvalidArgument, "stdin offset %d is past the %d bytes written", off, e.stdinOff)
	case off+uint64(len(data)) <= e.stdinOff:
		data = nil // already written
	default:
		data = data[e.stdinOff-off:]
	}
	if len(data) > 0 {
		if e.stdinEOF {
			return nil, status.Error(codes.FailedPrecondition, "stdin is closed")
		}
		if e.hungUp.Load() {
			return nil, status.Errorf(codes.FailedPrecondition, "write stdin: exec %s has exited", e.id)
		}
		sb.touch()
		n, err := e.conn.Conn.Write(data)
		e.stdinOff += uint64(n)
		if err != nil {
			if e.hungUp.Load() {
				return nil, status.Errorf(codes.FailedPrecondition, "write stdin: exec %s has exited", e.id)
			}
			return nil, status.Errorf(codes.FailedPrecondition, "write stdin: %v", err)
		}
	}
	if req.GetEof() && !e.stdinEOF {
		e.stdinEOF = true
		if e.hungUp.Load() {
			return pb.TaskExecStdinWriteResponse_builder{}.Build(), nil
		}
		if err := e.conn.CloseWrite(); err != nil && !e.hungUp.Load() {
			return nil, status.Errorf(codes.FailedPrecondition, "close stdin: %v", err)
		}
	}
	return pb.TaskExecStdinWriteResponse_builder{}.Build(), nil
}

// TaskExecStdioRead streams an exec's stdout or stderr from an offset until
// the stream ends.
func (r *router) TaskExecStdioRead(req *pb.TaskExecStdioReadRequest, stream grpc.ServerStreamingServer[pb.TaskExecStdioReadResponse]) error {
	_, e, err := r.s.execFor(stream.Context(), req.GetTaskId(), req.GetExecId())
	if err != nil {
		return err
	}
	var o *outStream
	fd := fdName(req.GetFileDescriptor())
	switch req.GetFileDescriptor() {
	case pb.TaskExecStdioFileDescriptor_TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDOUT:
		o = e.stdout
	case pb.TaskExecStdioFileDescriptor_TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR:
		o = e.stderr
	default:
		return status.Errorf(codes.InvalidArgument, "unknown file descriptor %v", req.GetFileDescriptor())
	}
	if err := e.silenced(stream.Context()); err != nil {
		return err
	}
	err = o.readFrom(stream.Context(), req.GetOffset(), func(b []byte) error {
		if err := r.s.transientStreamBreak(e, fd); err != nil {
			return err
		}
		return stream.Send(pb.TaskExecStdioReadResponse_builder{Data: b}.Build())
	})
	if err == nil {
		// The end of the output of an exec its sandbox took down is the
		// sandbox's end, which a silent router never delivers.
		if serr := e.silenced(stream.Context()); serr != nil {
			return serr
		}
	}
	return err
}

// TaskExecWait blocks until the exec exits.
func (r *router) TaskExecWait(ctx context.Context, req *pb.TaskExecWaitRequest) (*pb.TaskExecWaitResponse, error) {
	_, e, err := r.s.execFor(ctx, req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	stalled := func() bool {
		r.s.mu.Lock()
		defer r.s.mu.Unlock()
		return r.s.stallWait
	}
	if !stalled() {
		select {
		case <-e.done:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if err := e.silenced(ctx); err != nil {
		return nil, err
	}
	// Checked again after the exit: a wait already in flight when the
	// stall was switched on must not answer either.
	if stalled() {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	code, sig, _ := e.status()
	e.waitedOnce.Do(func() { close(e.waited) })
	return pb.TaskExecWaitResponse_builder{Code: code, Signal: sig}.Build(), nil
}

// TaskExecPoll reports the exit status if the exec has exited.
func (r *router) TaskExecPoll(ctx context.Context, req *pb.TaskExecPollRequest) (*pb.TaskExecPollResponse, error) {
	_, e, err := r.s.execFor(ctx, req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	if err := e.silenced(ctx); err != nil {
		return nil, err
	}
	code, sig, _ := e.status()
	return pb.TaskExecPollResponse_builder{Code: code, Signal: sig}.Build(), nil
}

// checkOutputEnd logs an exec's output that ended with an error (the
// daemon's attach stream broke rather than ended): the fake then hangs up,
// which ends the exec's stdin too, so a test that sees an exec end early
// finds the cause in the log. A sandbox that finished closed the stream
// itself (finish records the result first), which is no break.
func (s *Server) checkOutputEnd(e *execProc, cerr error) {
	if cerr == nil || e.sb.finished() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	r, err := s.docker.ExecInspect(ctx, e.dockerID, client.ExecInspectOptions{})
	s.log.Warn("modalfake: an exec's output stream broke", "exec", e.id, "sandbox", e.sb.id, "err", cerr, "running", err == nil && r.Running, "inspect_err", err)
}
