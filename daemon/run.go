package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/a55dbaac/berth/approval"
	"github.com/a55dbaac/berth/daemon/wire"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/output"
	"github.com/a55dbaac/berth/process"
	"github.com/a55dbaac/berth/terminal"
)

// call is one request being served: its context (cancelled by an
// interrupt frame or the end of the connection), the caller's environment,
// and the frames the caller sends while it runs.
type call struct {
	ctx     context.Context
	cancel  context.CancelFunc
	c       *wire.Conn
	env     *callerEnv
	answers chan wire.Frame // approval answers
	envs    chan wire.Frame // answers to getenv frames
	done    chan struct{}
	relayed chan struct{}
}

// getenvTimeout bounds the wait for the caller's answer to a getenv
// frame; a caller answers at once, from its own environment.
const getenvTimeout = 10 * time.Second

// begin starts serving req: frames the caller sends meanwhile (read by
// serveConn's reader into frames) are relayed to the call until end.
// owner is the owner mark of the caller's process tree (callerEnv).
func (s *Server) begin(c *wire.Conn, frames <-chan wire.Frame, req wire.Request, owner string) *call {
	ctx, cancel := context.WithCancel(s.ctx)
	cl := &call{
		ctx: ctx, cancel: cancel, c: c, env: newCallerEnv(req.Inputs),
		answers: make(chan wire.Frame, 1), envs: make(chan wire.Frame, 1),
		done: make(chan struct{}), relayed: make(chan struct{}),
	}
	cl.env.owner = owner
	cl.env.log = s.log.Debug
	cl.env.ask = cl.getenv
	go func() {
		defer close(cl.relayed)
		for {
			select {
			case f, ok := <-frames:
				if !ok {
					// The end of the connection interrupts the command,
					// as a hangup would.
					cancel()
					return
				}
				switch f.T {
				case wire.FrameInterrupt:
					cancel()
				case wire.FrameAnswer:
					offer(cl.answers, f)
				case wire.FrameEnv:
					offer(cl.envs, f)
				}
			case <-cl.done:
				return
			}
		}
	}()
	return cl
}

// offer hands f over unless nobody waits for it.
func offer(ch chan wire.Frame, f wire.Frame) {
	select {
	case ch <- f:
	default:
	}
}

// end stops relaying and asking the caller.
func (cl *call) end() {
	cl.env.endCall()
	close(cl.done)
	<-cl.relayed
	cl.cancel()
}

// getenv asks the caller for the values of names (a getenv frame).
func (cl *call) getenv(names []string) ([]string, error) {
	select { // a late answer to an earlier question
	case <-cl.envs:
	default:
	}
	if err := cl.c.Send(wire.Frame{T: wire.FrameGetenv, Names: names}); err != nil {
		return nil, err
	}
	t := time.NewTimer(getenvTimeout)
	defer t.Stop()
	select {
	case f := <-cl.envs:
		return f.Env, nil
	case <-cl.ctx.Done():
		return nil, cl.ctx.Err()
	case <-t.C:
		return nil, fmt.Errorf("no answer from the caller in %v", getenvTimeout)
	}
}

// errorReply is the reply of a request that could not be served.
func errorReply(code string, err error) *wire.Reply {
	if errors.Is(err, errShuttingDown) {
		code = wire.CodeShuttingDown
	}
	return &wire.Reply{Error: err.Error(), Code: code}
}

// run runs a foreground command, streaming its output, answering
// interrupts and relaying approval questions. With streaming, the tap it
// returns holds the out frames the caller has not read yet: the caller of
// run sends the reply after them (tap.flush), once the key is free again.
func (s *Server) run(cl *call, req wire.Request) (*wire.Reply, *tapWriter) {
	key := keyOf(req)
	ctx := cl.ctx
	l, err := s.loadConfig(req.Inputs, cl.env)
	var warnings []string
	if req.Quick {
		// The caller has not read its configuration: what it would have
		// refused or run itself goes back to it before anything runs.
		if err != nil || !l.cfg.Terminal.Daemon || req.Timeout < 0 || req.Timeout > terminal.MaxTimeout {
			return &wire.Reply{Fallback: true}, nil
		}
		warnings = l.cfg.Warnings
	}
	if err != nil {
		return errorReply(wire.CodeConfig, err), nil
	}
	cfg := l.cfg
	// Per call, from the caller's configuration (the environment's may be
	// older: these keys do not make an environment).
	if req.Timeout == 0 {
		req.Timeout = cfg.Terminal.Timeout
	}
	if req.OnTimeout == "" {
		req.OnTimeout = cfg.Terminal.OnTimeout
	}
	unlock, err := s.lockKey(ctx, key)
	if err != nil {
		r := resultReply(terminal.Result{ExitCode: 130, Error: ptr(fmt.Sprintf("interrupted while waiting for task %q's environment", key))}, "", nil)
		r.Warnings = warnings
		return r, nil
	}
	defer unlock()
	sl, notes, err := s.slotWith(ctx, key, l)
	if err != nil {
		r := errorReply(wire.CodeFailed, err)
		r.Warnings = warnings
		return r, nil
	}
	var tap *tapWriter
	if req.Stream {
		tap = newTap(cl.c)
		ctx = output.WithTap(ctx, tap)
	}
	res := sl.m.Run(ctx, key, terminal.Request{Command: req.Command, Timeout: req.Timeout, Workdir: req.Workdir, OnTimeout: req.OnTimeout}, cl.callOptions(req)...)
	if len(notes) > 0 {
		res.EnvironmentRecreated = true
	}
	tail := ""
	if tap != nil {
		var dropped int64
		tail, dropped = tap.finish(res.Output)
		if dropped > 0 {
			notes = append(notes, fmt.Sprintf("%d bytes of the output were not shown as they came: this caller stopped reading, and the command went on (its timeout runs whatever the reader does); the result (--json) holds the output", dropped))
		}
	}
	r := resultReply(res, tail, notes)
	r.Warnings = warnings
	r.Backend = sl.backend
	r.Cwd = res.Cwd
	if res.Error == nil {
		if env, err := sl.m.Env(ctx, key); err == nil {
			r.Cwd = env.Session().Cwd()
			s.mu.Lock()
			sl.cwd = r.Cwd
			s.mu.Unlock()
		}
	}
	return r, tap
}

func ptr[T any](v T) *T { return &v }

func resultReply(res terminal.Result, tail string, notes []string) *wire.Reply {
	b, err := wire.MarshalJSON(res)
	if err != nil {
		return errorReply(wire.CodeFailed, fmt.Errorf("encode result: %w", err))
	}
	r := &wire.Reply{Result: b, Tail: tail, Notes: notes}
	r.Exit, r.ExitMessage = res.ExitStatus()
	return r
}

// withSlot serves an operation on key's environment: under key's lock,
// in the slot for the caller's configuration.
func (s *Server) withSlot(cl *call, req wire.Request, fn func(sl *slot, notes []string) *wire.Reply) *wire.Reply {
	key := keyOf(req)
	unlock, err := s.lockKey(cl.ctx, key)
	if err != nil {
		return errorReply(wire.CodeFailed, err)
	}
	defer unlock()
	l, err := s.loadConfig(req.Inputs, cl.env)
	if err != nil {
		return errorReply(wire.CodeConfig, err)
	}
	sl, notes, err := s.slotWith(cl.ctx, key, l)
	if err != nil {
		return errorReply(wire.CodeFailed, err)
	}
	return fn(sl, notes)
}

// meta answers a ":verb ..." line of berth shell (process.ParseLine).
func (s *Server) meta(cl *call, req wire.Request) *wire.Reply {
	line, ok := process.ParseLine(req.Line)
	if !ok {
		return &wire.Reply{Error: fmt.Sprintf("%q is not a process-tool line", req.Line), Code: wire.CodeNotMeta}
	}
	return s.withSlot(cl, req, func(sl *slot, notes []string) *wire.Reply {
		b, err := wire.MarshalJSON(line.Do(cl.ctx, sl.m.Doer(cl.callOptions(req)...), keyOf(req), req.Workdir))
		if err != nil {
			return errorReply(wire.CodeFailed, fmt.Errorf("encode result: %w", err))
		}
		return &wire.Reply{Result: b, Notes: notes, Backend: sl.backend}
	})
}

// env creates key's environment if needed and reports where its shell is.
func (s *Server) env(cl *call, req wire.Request) *wire.Reply {
	return s.withSlot(cl, req, func(sl *slot, notes []string) *wire.Reply {
		env, err := sl.m.Env(cl.ctx, keyOf(req))
		if err != nil {
			return errorReply(wire.CodeFailed, err)
		}
		cwd := env.Session().Cwd()
		s.mu.Lock()
		sl.cwd = cwd
		s.mu.Unlock()
		return &wire.Reply{Cwd: cwd, Backend: sl.backend, Notes: notes}
	})
}

// callOptions are the manager's call options of req: the caller's
// terminal answers approval questions when it can ask.
func (cl *call) callOptions(req wire.Request) []manager.CallOption {
	if !req.CanAsk {
		return nil
	}
	return []manager.CallOption{manager.WithAsker(&remoteAsker{c: cl.c, answers: cl.answers})}
}

// remoteAsker asks the caller's terminal.
type remoteAsker struct {
	c       *wire.Conn
	answers <-chan wire.Frame
}

// Ask sends the question to the caller and waits for its answer.
func (a *remoteAsker) Ask(ctx context.Context, q approval.Question) (approval.Answer, error) {
	b, err := wire.MarshalJSON(q)
	if err != nil {
		return "", fmt.Errorf("%w: encode the question: %v", approval.ErrCannotAsk, err)
	}
	if err := a.c.Send(wire.Frame{T: wire.FrameAsk, Question: b}); err != nil {
		return "", fmt.Errorf("%w: %v", approval.ErrCannotAsk, err)
	}
	select {
	case f := <-a.answers:
		if f.Err != "" {
			if f.Err == wire.ErrCannotAsk.Error() {
				return "", approval.ErrCannotAsk
			}
			return "", errors.New(f.Err)
		}
		return approval.Answer(f.Answer), nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// AskWith answers the daemon's approval questions with a: the caller's
// side of remoteAsker (the question's timeout applies).
func AskWith(a approval.Asker) wire.AskFunc {
	if a == nil {
		return nil
	}
	return func(ctx context.Context, raw json.RawMessage) (string, error) {
		var q approval.Question
		if err := json.Unmarshal(raw, &q); err != nil {
			return "", fmt.Errorf("%w: bad question: %v", wire.ErrCannotAsk, err)
		}
		if q.Timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, q.Timeout)
			defer cancel()
		}
		ans, err := a.Ask(ctx, q)
		if errors.Is(err, approval.ErrCannotAsk) {
			return "", wire.ErrCannotAsk
		}
		return string(ans), err
	}
}
