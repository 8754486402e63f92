package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/a55dbaac/berth/approval"
	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/daemon/wire"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/output"
	"github.com/a55dbaac/berth/process"
	"github.com/a55dbaac/berth/terminal"
)

// ErrRunning says another daemon already serves the home.
var ErrRunning = errors.New("daemon: another berth daemon serves this home")

// ServeOptions configure Serve.
type ServeOptions struct {
	// Home is the berth home served; every request must name it.
	Home string
	// Lifetime is how long the daemon stays with no environment and no
	// connection before it exits; 0 means never (until stopped).
	Lifetime time.Duration
	// Logger receives the daemon's log; nil means slog.Default().
	Logger *slog.Logger
	// Socket overrides the socket path (tests); "" means the home's.
	Socket string
	// CloseBudget bounds the cleanup at exit; 0 means 15 s.
	CloseBudget time.Duration
	// Ready, if set, is called once the socket accepts connections.
	Ready func()
}

// Server is a running daemon.
type Server struct {
	opts    ServeOptions
	paths   wire.Paths
	log     *slog.Logger
	started time.Time
	ln      *net.UnixListener

	ctx    context.Context // cancelled at shutdown: running commands stop
	cancel context.CancelFunc

	mu         sync.Mutex
	slots      map[string]*slot
	keyLocks   map[string]chan struct{}
	conns      int
	lastActive time.Time
	stopping   bool
	stopped    chan struct{} // closed once cleanup finished
}

// slot is one environment key: its manager (which holds at most this
// key's environment) and the configuration it was made with.
type slot struct {
	key     string
	fp      string   // fingerprint of the configuration
	values  []string // key=value of the configuration, for telling what changed
	m       *manager.Manager
	backend string
	created time.Time
	cwd     string // the shell's cwd after the last request; under Server.mu
}

// Serve runs a daemon for opts.Home until ctx ends, it is stopped, or it
// has been idle for opts.Lifetime. It returns ErrRunning when another
// daemon holds the home.
func Serve(ctx context.Context, opts ServeOptions) error {
	paths, err := wire.PathsFor(opts.Home)
	if opts.Socket != "" {
		paths.Socket, err = opts.Socket, nil
	}
	if err != nil {
		return err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.CloseBudget <= 0 {
		opts.CloseBudget = 15 * time.Second
	}
	if err := wire.PrivateDir(paths.Dir); err != nil {
		return err
	}
	pidf, err := lockPID(paths.PID)
	if err != nil {
		return err
	}
	defer func() {
		os.Remove(paths.PID)
		pidf.Close()
	}()
	// Whatever socket is there belongs to a daemon that is gone: the pid
	// lock is free.
	if err := os.Remove(paths.Socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("daemon: remove stale socket %s: %w", paths.Socket, err)
	}
	old := syscall.Umask(0o177)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: paths.Socket, Net: "unix"})
	syscall.Umask(old)
	if err != nil {
		return fmt.Errorf("daemon: listen on %s: %w", paths.Socket, err)
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(paths.Socket, 0o600); err != nil {
		ln.Close()
		return fmt.Errorf("daemon: chmod socket: %w", err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		opts: opts, paths: paths, log: opts.Logger, started: time.Now(), ln: ln,
		ctx: sctx, cancel: cancel,
		slots: map[string]*slot{}, keyLocks: map[string]chan struct{}{},
		lastActive: time.Now(), stopped: make(chan struct{}),
	}
	s.log.Info("daemon: serving", "home", opts.Home, "socket", paths.Socket, "pid", os.Getpid(), "lifetime", opts.Lifetime)
	if opts.Ready != nil {
		opts.Ready()
	}
	go s.acceptLoop()
	go s.idleLoop()
	select {
	case <-ctx.Done():
		s.shutdown("signal")
	case <-s.stopped:
	}
	<-s.stopped
	return nil
}

// lockPID takes the daemon's lifetime lock and writes the pid into it.
func lockPID(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("daemon: open %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, ErrRunning
		}
		return nil, fmt.Errorf("daemon: lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// PeerUID returns the uid of the process at the other end of a unix
// socket connection (SO_PEERCRED).
func PeerUID(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, err
	}
	if cerr != nil {
		return -1, fmt.Errorf("daemon: SO_PEERCRED: %w", cerr)
	}
	return int(cred.Uid), nil
}

func (s *Server) acceptLoop() {
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			s.mu.Lock()
			stopping := s.stopping
			s.mu.Unlock()
			if !stopping {
				s.log.Error("daemon: accept", "err", err)
				go s.shutdown("accept failed")
			}
			return
		}
		uid, err := PeerUID(c)
		if err != nil || uid != os.Getuid() {
			s.log.Warn("daemon: refused a connection from another user", "peer_uid", uid, "err", err)
			fc := wire.NewConn(c)
			_ = fc.Send(wire.Frame{T: wire.FrameResult, Reply: &wire.Reply{Error: fmt.Sprintf("refused: this berth daemon serves uid %d only (peer uid %d)", os.Getuid(), uid)}})
			c.Close()
			continue
		}
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			c.Close()
			continue
		}
		s.conns++
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// idleLoop exits the daemon once it has held no environment and no
// connection for the lifetime; the managers' sweepers clean environments
// idle for their own lifetime_seconds.
func (s *Server) idleLoop() {
	if s.opts.Lifetime <= 0 {
		return
	}
	interval := min(max(s.opts.Lifetime/4, 100*time.Millisecond), 30*time.Second)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.stopped:
			return
		}
		s.mu.Lock()
		idle := s.conns == 0 && !s.stopping && time.Since(s.lastActive) > s.opts.Lifetime
		for _, sl := range s.slots {
			if len(sl.m.Keys()) > 0 || sl.m.Processes().Running(sl.key) > 0 {
				idle = false
			}
		}
		s.mu.Unlock()
		if idle {
			s.shutdown("idle")
			return
		}
	}
}

// shutdown stops accepting, interrupts running commands, closes every
// environment and removes the socket. It returns once done; concurrent
// calls wait for the first.
func (s *Server) shutdown(why string) {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		<-s.stopped
		return
	}
	s.stopping = true
	slots := make([]*slot, 0, len(s.slots))
	for _, sl := range s.slots {
		slots = append(slots, sl)
	}
	s.mu.Unlock()
	s.log.Info("daemon: shutting down", "why", why, "environments", len(slots))
	s.ln.Close()
	os.Remove(s.paths.Socket)
	s.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.CloseBudget)
	defer cancel()
	var wg sync.WaitGroup
	for _, sl := range slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sl.m.CloseAll(ctx); err != nil {
				s.log.Warn("daemon: close environment", "key", sl.key, "err", err)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.log.Warn("daemon: environments not closed in time; leaving them", "budget", s.opts.CloseBudget)
	}
	s.log.Info("daemon: stopped")
	close(s.stopped)
}

func (s *Server) touch() {
	s.mu.Lock()
	s.lastActive = time.Now()
	s.mu.Unlock()
}

// serveConn answers the requests of one connection, one at a time.
func (s *Server) serveConn(nc net.Conn) {
	c := wire.NewConn(nc)
	frames := make(chan wire.Frame, 16)
	readErr := make(chan error, 1)
	go func() {
		defer close(frames)
		for {
			f, err := c.Recv()
			if err != nil {
				readErr <- err
				return
			}
			frames <- f
		}
	}()
	defer func() {
		nc.Close()
		s.mu.Lock()
		s.conns--
		s.lastActive = time.Now()
		s.mu.Unlock()
	}()
	for {
		var f wire.Frame
		var ok bool
		select {
		case f, ok = <-frames:
		case <-s.stopped:
			return
		}
		if !ok {
			return
		}
		if f.T != wire.FrameRequest || f.Req == nil {
			continue // a late interrupt or answer
		}
		s.touch()
		req := *f.Req
		// Status and stop are answered whatever the caller's version, so
		// that `berth daemon stop` of another build can stop this one.
		if req.Version != wire.ProtocolVersion && req.Op != wire.OpStatus && req.Op != wire.OpStop {
			_ = c.Send(wire.Frame{T: wire.FrameResult, Reply: &wire.Reply{Error: fmt.Sprintf("this berth daemon speaks protocol %d, the caller %d: run `berth daemon stop` and try again", wire.ProtocolVersion, req.Version)}})
			continue
		}
		var reply *wire.Reply
		switch req.Op {
		case wire.OpRun:
			reply = s.run(c, frames, req)
		case wire.OpMeta:
			reply = s.meta(req)
		case wire.OpEnv:
			reply = s.env(req)
		case wire.OpStatus:
			st := s.Status()
			reply = &wire.Reply{Status: &st}
		case wire.OpStop:
			s.shutdown("berth daemon stop")
			reply = &wire.Reply{}
		default:
			reply = &wire.Reply{Error: fmt.Sprintf("unknown operation %q", req.Op)}
		}
		s.touch()
		if err := c.Send(wire.Frame{T: wire.FrameResult, Reply: reply}); err != nil {
			s.log.Debug("daemon: reply", "err", err)
			return
		}
	}
}

// Status describes the daemon now.
func (s *Server) Status() wire.Status {
	s.mu.Lock()
	slots := make([]*slot, 0, len(s.slots))
	for _, sl := range s.slots {
		slots = append(slots, sl)
	}
	st := wire.Status{
		PID: os.Getpid(), Socket: s.paths.Socket, Home: s.opts.Home,
		Started: s.started, Uptime: time.Since(s.started), Lifetime: s.opts.Lifetime,
		Connections: s.conns, Environments: []wire.EnvStatus{},
	}
	s.mu.Unlock()
	for _, sl := range slots {
		if len(sl.m.Keys()) == 0 {
			continue
		}
		es := wire.EnvStatus{Key: sl.key, Backend: sl.backend, Created: sl.created, Processes: sl.m.Processes().Running(sl.key)}
		// Never the session's own Cwd: it waits for a running command.
		s.mu.Lock()
		es.Cwd = sl.cwd
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if env, err := sl.m.Env(ctx, sl.key); err == nil {
			es.LastUsed, es.Busy = env.LastUsed(), env.Busy()
		}
		cancel()
		st.Environments = append(st.Environments, es)
	}
	sort.Slice(st.Environments, func(i, j int) bool { return st.Environments[i].Key < st.Environments[j].Key })
	return st
}

// lockKey serialises the requests of one environment key.
func (s *Server) lockKey(ctx context.Context, key string) (func(), error) {
	s.mu.Lock()
	ch, ok := s.keyLocks[key]
	if !ok {
		ch = make(chan struct{}, 1)
		s.keyLocks[key] = ch
	}
	s.mu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// notFingerprinted are the keys that do not make an environment: they are
// per request (timeout), read only at daemon level, or only loosen the
// approval check and are updated in place by the gate ("always" answers).
var notFingerprinted = map[string]bool{
	"terminal.timeout":                true,
	"terminal.lifetime_seconds":       true,
	"terminal.max_foreground_timeout": true,
	"terminal.on_timeout":             true,
	"terminal.daemon":                 true,
	"command_allowlist":               true,
}

// loadConfig loads the caller's configuration and its fingerprint.
func (s *Server) loadConfig(in wire.Inputs) (*config.Config, string, []string, error) {
	env := make(map[string]string, len(in.Env))
	for _, kv := range in.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	cfg, err := config.Load(config.LoadOptions{ConfigPath: in.ConfigPath, Flags: in.Flags, Getenv: func(k string) string { return env[k] }})
	if err != nil {
		return nil, "", nil, err
	}
	if filepath.Clean(cfg.Home) != filepath.Clean(s.opts.Home) {
		return nil, "", nil, fmt.Errorf("this berth daemon serves home %s, the caller's is %s", s.opts.Home, cfg.Home)
	}
	values := []string{"path=" + cfg.Path}
	for _, k := range config.Keys() {
		if notFingerprinted[k] {
			continue
		}
		v, err := cfg.Get(k)
		if err != nil {
			return nil, "", nil, err
		}
		values = append(values, k+"="+v)
	}
	h := sha256.New()
	for _, v := range values {
		h.Write([]byte(v))
		h.Write([]byte{0})
	}
	// A local environment starts where the call that creates it runs,
	// as a one-process berth does; later calls find it where its shell is.
	if reg, ok := backend.Lookup(cfg.Terminal.Backend); ok && reg.HostFS && in.Cwd != "" && !filepath.IsAbs(cfg.Terminal.Cwd) && !strings.HasPrefix(cfg.Terminal.Cwd, "~") {
		cfg.Terminal.Cwd = filepath.Join(in.Cwd, cfg.Terminal.Cwd)
	}
	return cfg, hex.EncodeToString(h.Sum(nil)), values, nil
}

// slotFor returns key's slot for the caller's configuration, replacing
// one made with another configuration (its environment is closed: a
// request never silently runs in an environment configured otherwise).
// The caller holds key's lock.
func (s *Server) slotFor(ctx context.Context, in wire.Inputs, key string) (*slot, []string, error) {
	cfg, fp, values, err := s.loadConfig(in)
	if err != nil {
		return nil, nil, err
	}
	return s.slotWith(ctx, key, cfg, fp, values)
}

// slotWith is slotFor with the configuration already loaded.
func (s *Server) slotWith(ctx context.Context, key string, cfg *config.Config, fp string, values []string) (*slot, []string, error) {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return nil, nil, errors.New("the berth daemon is shutting down; try again")
	}
	old := s.slots[key]
	if old != nil && old.fp == fp {
		s.mu.Unlock()
		return old, nil, nil
	}
	var notes []string
	if old != nil {
		delete(s.slots, key)
		s.mu.Unlock()
		changed := diffValues(old.values, values)
		s.log.Info("daemon: configuration changed; recreating the environment", "key", key, "changed", changed)
		if len(old.m.Keys()) > 0 {
			notes = append(notes, fmt.Sprintf("the configuration of task %q changed (%s) since its environment was created: it was closed and a new one made (shell state and background processes of the old one are gone)", key, strings.Join(changed, ", ")))
		}
		if err := old.m.CloseAll(ctx); err != nil {
			s.log.Warn("daemon: close environment", "key", key, "err", err)
		}
		s.mu.Lock()
	}
	log := s.log.With("key", key)
	sl := &slot{key: key, fp: fp, values: values, m: manager.New(cfg, log), backend: cfg.Terminal.Backend, created: time.Now()}
	sl.m.StartSweeper(s.ctx)
	s.slots[key] = sl
	s.mu.Unlock()
	return sl, notes, nil
}

// diffValues names the keys whose values differ.
func diffValues(a, b []string) []string {
	am := map[string]string{}
	for _, kv := range a {
		k, v, _ := strings.Cut(kv, "=")
		am[k] = v
	}
	var out []string
	seen := map[string]bool{}
	for _, kv := range b {
		k, v, _ := strings.Cut(kv, "=")
		seen[k] = true
		if am[k] != v {
			out = append(out, k)
		}
	}
	for k := range am {
		if !seen[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func keyOf(req wire.Request) string {
	if req.Key == "" {
		return manager.DefaultKey
	}
	return req.Key
}

// run runs a foreground command, streaming its output, answering
// interrupts and relaying approval questions.
func (s *Server) run(c *wire.Conn, frames <-chan wire.Frame, req wire.Request) *wire.Reply {
	key := keyOf(req)
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	answers := make(chan wire.Frame, 1)
	// Interrupts and answers arrive while the command runs; the end of
	// the connection interrupts the command, as a hangup would.
	done := make(chan struct{})
	relayed := make(chan struct{})
	go func() {
		defer close(relayed)
		for {
			select {
			case f, ok := <-frames:
				if !ok {
					cancel()
					return
				}
				switch f.T {
				case wire.FrameInterrupt:
					cancel()
				case wire.FrameAnswer:
					select {
					case answers <- f:
					default:
					}
				}
			case <-done:
				return
			}
		}
	}()
	defer func() { close(done); <-relayed }()

	cfg, fp, values, err := s.loadConfig(req.Inputs)
	var warnings []string
	if req.Quick {
		// The caller has not read its configuration: what it would have
		// refused or run itself goes back to it before anything runs.
		if err != nil || !cfg.Terminal.Daemon || req.Timeout < 0 || req.Timeout > terminal.MaxTimeout {
			return &wire.Reply{Fallback: true}
		}
		warnings = cfg.Warnings
	}
	if err != nil {
		return &wire.Reply{Error: err.Error()}
	}
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
		return r
	}
	defer unlock()
	sl, notes, err := s.slotWith(ctx, key, cfg, fp, values)
	if err != nil {
		return &wire.Reply{Error: err.Error(), Warnings: warnings}
	}
	if req.CanAsk {
		ctx = approval.WithAsker(ctx, &remoteAsker{c: c, answers: answers})
	}
	var tap *tapWriter
	if req.Stream {
		tap = &tapWriter{c: c}
		ctx = output.WithTap(ctx, tap)
	}
	res := sl.m.Run(ctx, key, terminal.Request{Command: req.Command, Timeout: req.Timeout, Workdir: req.Workdir, OnTimeout: req.OnTimeout})
	tail := ""
	if tap != nil {
		tail = tap.finish(res.Output)
	}
	if len(notes) > 0 {
		res.EnvironmentRecreated = true
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
	return r
}

func ptr[T any](v T) *T { return &v }

// MarshalJSON encodes v as berth prints results: without escaping <, >
// and & (commands are full of them), with no trailing newline.
func MarshalJSON(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func resultReply(res terminal.Result, tail string, notes []string) *wire.Reply {
	b, err := MarshalJSON(res)
	if err != nil {
		return &wire.Reply{Error: fmt.Sprintf("encode result: %v", err)}
	}
	r := &wire.Reply{Result: b, Tail: tail, Notes: notes}
	r.Exit, r.ExitMessage = ExecStatus(res)
	return r
}

// The exit statuses of berth exec besides the command's own.
const (
	// StatusBlocked: the approval check refused to run the command (the
	// shell's "cannot execute").
	StatusBlocked = 126
	// StatusMoved: the command was still running at its timeout and was
	// moved to the background: the timeout's status, though it goes on.
	StatusMoved = 124
	// StatusError: berth itself failed (bad flags, unreachable backend),
	// distinct from any status a command returns; docker run uses it too.
	StatusError = 125
)

// ExecStatus is berth exec's exit status for res, and what it prints on
// stderr (after "berth: ", unless it prints res as JSON) when the command
// did not run or berth failed.
func ExecStatus(res terminal.Result) (int, string) {
	switch {
	case !res.Approval.Allowed():
		return StatusBlocked, res.Approval.Message
	case res.MovedToBackground:
		return StatusMoved, ""
	case res.Error != nil:
		return StatusError, *res.Error
	case res.ExitCode < 0 || res.ExitCode > 255:
		return StatusError, ""
	}
	return res.ExitCode, ""
}

// meta answers a ":verb ..." line of berth shell.
func (s *Server) meta(req wire.Request) *wire.Reply {
	key := keyOf(req)
	unlock, err := s.lockKey(s.ctx, key)
	if err != nil {
		return &wire.Reply{Error: err.Error()}
	}
	defer unlock()
	sl, notes, err := s.slotFor(s.ctx, req.Inputs, key)
	if err != nil {
		return &wire.Reply{Error: err.Error()}
	}
	v, ok := Meta(s.ctx, sl.m, key, req.Workdir, req.Line)
	if !ok {
		return &wire.Reply{Error: fmt.Sprintf("%q is not a process-tool line", req.Line)}
	}
	b, err := MarshalJSON(v)
	if err != nil {
		return &wire.Reply{Error: fmt.Sprintf("encode result: %v", err)}
	}
	return &wire.Reply{Result: b, Notes: notes, Backend: sl.backend}
}

// env creates key's environment if needed and reports where its shell is.
func (s *Server) env(req wire.Request) *wire.Reply {
	key := keyOf(req)
	unlock, err := s.lockKey(s.ctx, key)
	if err != nil {
		return &wire.Reply{Error: err.Error()}
	}
	defer unlock()
	sl, notes, err := s.slotFor(s.ctx, req.Inputs, key)
	if err != nil {
		return &wire.Reply{Error: err.Error()}
	}
	env, err := sl.m.Env(s.ctx, key)
	if err != nil {
		return &wire.Reply{Error: err.Error()}
	}
	cwd := env.Session().Cwd()
	s.mu.Lock()
	sl.cwd = cwd
	s.mu.Unlock()
	return &wire.Reply{Cwd: cwd, Backend: sl.backend, Notes: notes}
}

// Meta runs a ":verb ..." line of berth shell against the process tool
// in key's environment of m. It reports false for lines that are ordinary
// shell commands.
func Meta(ctx context.Context, m *manager.Manager, key, workdir, line string) (any, bool) {
	if !strings.HasPrefix(line, ":") {
		return nil, false
	}
	verb, rest, _ := strings.Cut(strings.TrimSpace(line[1:]), " ")
	rest = strings.TrimSpace(rest)
	switch verb {
	case "bg", "bgpty":
		return m.Background(ctx, key, terminal.Request{Command: rest, Workdir: workdir, PTY: verb == "bgpty"}), true
	case "ps":
		return m.Process(ctx, key, process.Request{Action: "list"}), true
	case "poll", "log", "kill", "close":
		return m.Process(ctx, key, process.Request{Action: verb, SessionID: rest}), true
	case "wait":
		id, secs, _ := strings.Cut(rest, " ")
		n, _ := strconv.Atoi(strings.TrimSpace(secs))
		return m.Process(ctx, key, process.Request{Action: "wait", SessionID: id, Timeout: n}), true
	case "write", "submit":
		id, data, _ := strings.Cut(rest, " ")
		return m.Process(ctx, key, process.Request{Action: verb, SessionID: id, Data: data}), true
	}
	return nil, false
}

// remoteAsker asks the caller's terminal.
type remoteAsker struct {
	c       *wire.Conn
	answers <-chan wire.Frame
}

// Ask sends the question to the caller and waits for its answer.
func (a *remoteAsker) Ask(ctx context.Context, q approval.Question) (approval.Answer, error) {
	b, err := json.Marshal(q)
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

// tapWriter streams a command's processed output as out frames and keeps
// what it sent (up to a bound) to work out the tail the caller prints.
type tapWriter struct {
	c *wire.Conn

	mu       sync.Mutex
	sent     strings.Builder
	last     byte   // the last byte sent
	held     []byte // trailing whitespace not sent yet
	overflow bool
	dead     bool
	closed   bool
}

// keepSent bounds the copy of the streamed text kept for the tail.
const keepSent = 4 << 20

// maxHeld bounds the trailing whitespace held back; more is sent.
const maxHeld = 64 << 10

// trailingSpace is what the result's output loses at its end.
const trailingSpace = " \t\r\n\v\f"

// Write streams p, holding back its trailing whitespace until more text
// follows: the result's output ends trimmed, and so does the stream (a
// command's trailing blank lines are not printed, with or without the
// daemon).
func (t *tapWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.dead || len(p) == 0 {
		return len(p), nil
	}
	body := len(bytes.TrimRight(p, trailingSpace))
	if body == 0 && len(t.held)+len(p) <= maxHeld {
		t.held = append(t.held, p...)
		return len(p), nil
	}
	data := make([]byte, 0, len(t.held)+body)
	data = append(append(data, t.held...), p[:body]...)
	t.held = append(t.held[:0], p[body:]...)
	if body == 0 {
		data, t.held = append(data, t.held...), t.held[:0]
	}
	t.send(data)
	return len(p), nil
}

// send sends data as an out frame and keeps what was sent.
func (t *tapWriter) send(data []byte) {
	if !t.overflow {
		if t.sent.Len()+len(data) > keepSent {
			t.overflow = true
			t.sent.Reset()
		} else {
			t.sent.Write(data)
		}
	}
	t.last = data[len(data)-1]
	if err := t.c.Send(wire.Frame{T: wire.FrameOut, Data: data}); err != nil {
		t.dead = true
	}
}

// markerRE finds the marker the terminal layer appends to Output.
var markerRE = regexp.MustCompile(`\n\[Command (?:timed out after \d+s|interrupted)\]$`)

// finish stops the stream and returns what the caller prints after the
// streamed text so that it shows what out (the result's output) shows:
// the rest of out when out starts with what was streamed (trailing
// whitespace aside), else out's marker. The caller ends the whole with a
// newline if it does not end with one.
func (t *tapWriter) finish(out string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	rest := markerRE.FindString(out)
	if trimmed := strings.TrimRight(t.sent.String(), trailingSpace); !t.overflow && strings.HasPrefix(out, trimmed) {
		rest = out[len(trimmed):]
	}
	if t.last == '\n' || t.last == 0 {
		rest = strings.TrimPrefix(rest, "\n")
	}
	return rest
}

var _ io.Writer = (*tapWriter)(nil)
