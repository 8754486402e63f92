package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/a55dbaac/berth/backend/hostproc"
	"github.com/a55dbaac/berth/daemon/wire"
	"github.com/a55dbaac/berth/internal/procmark"
	"github.com/a55dbaac/berth/manager"
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
	opts     ServeOptions
	paths    wire.Paths
	log      *slog.Logger
	started  time.Time
	ln       *net.UnixListener
	confined confinement // the daemon's own namespaces and seccomp state

	ctx    context.Context // cancelled at shutdown: running commands stop
	cancel context.CancelFunc

	// pools are the warm pools (terminal.warm_pool) every key's manager
	// claims from; the daemon owns them and empties them at shutdown.
	pools *manager.Pools

	mu         sync.Mutex
	slots      map[string]*slot
	keyLocks   map[string]chan struct{}
	conns      int
	lastActive time.Time
	stopping   bool
	stopped    chan struct{} // closed once cleanup finished
	// stopReplies counts the answers to berth daemon stop not yet sent:
	// Serve returns (and the process exits) only once they are, or after
	// stopReplyBound.
	stopReplies sync.WaitGroup
}

// Serve runs a daemon for opts.Home until ctx ends, it is stopped, or it
// has been idle for opts.Lifetime. It returns ErrRunning when another
// daemon of this build holds the home.
//
// It makes the process non-dumpable first (hostproc.Harden): the daemon
// holds what its callers send, and another process of the same user must
// not read it from /proc, whichever backends it serves.
func Serve(ctx context.Context, opts ServeOptions) error {
	if err := hostproc.Harden(); err != nil {
		return err
	}
	confined, err := readConfinement("self")
	if err != nil {
		return fmt.Errorf("daemon: read this process's namespaces: %w", err)
	}
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
		opts: opts, paths: paths, log: opts.Logger, started: time.Now(), ln: ln, confined: confined,
		ctx: sctx, cancel: cancel, pools: manager.NewPools(opts.Logger),
		slots: map[string]*slot{}, keyLocks: map[string]chan struct{}{},
		lastActive: time.Now(), stopped: make(chan struct{}),
	}
	s.log.Info("daemon: serving", "home", opts.Home, "socket", paths.Socket, "pid", os.Getpid(), "identity", paths.Identity, "lifetime", opts.Lifetime)
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
	sent := make(chan struct{})
	go func() { s.stopReplies.Wait(); close(sent) }()
	select {
	case <-sent:
	case <-time.After(stopReplyBound):
		s.log.Warn("daemon: the answer to berth daemon stop was not sent in time", "bound", stopReplyBound)
	}
	return nil
}

// stopReplyBound bounds how long a stopped daemon waits to send the answer
// to the berth daemon stop that stopped it.
const stopReplyBound = 5 * time.Second

// beforeStopReply, when set (tests), runs before the answer to berth
// daemon stop is sent.
var beforeStopReply func()

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
	// The pools are emptied beside the environments: what they hold is
	// nobody's.
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := s.pools.Close(ctx); err != nil {
			s.log.Warn("daemon: empty the warm pools", "err", err)
		}
	}()
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

// serveConn answers the requests of one connection, one at a time, once
// its peer passed checkPeer (the refusal is the connection's only frame
// otherwise), after the hello.
func (s *Server) serveConn(nc *net.UnixConn) {
	c := wire.NewConn(nc)
	code, msg, peer := s.checkPeer(nc)
	if code != "" {
		s.log.Warn("daemon: refused a connection", "code", code, "why", msg)
		_ = c.Send(wire.Frame{T: wire.FrameResult, Reply: &wire.Reply{Error: msg, Code: code}})
		nc.Close()
		s.mu.Lock()
		s.conns--
		s.mu.Unlock()
		return
	}
	if err := c.Send(wire.Frame{T: wire.FrameHello, Hello: &wire.Hello{Protocol: wire.ProtocolVersion, Identity: s.paths.Identity, PID: os.Getpid()}}); err != nil {
		nc.Close()
		s.mu.Lock()
		s.conns--
		s.mu.Unlock()
		return
	}
	// Read once, when the caller connects: a process only ever leaves a
	// tree (its parent dies), and then it was under a berth all the same.
	owner := procmark.UnderBerth(peer)
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
			_ = c.Send(wire.Frame{T: wire.FrameResult, Reply: &wire.Reply{Code: wire.CodeVersion, Error: fmt.Sprintf("this berth daemon speaks protocol %d, the caller %d: run `berth daemon stop` and try again", wire.ProtocolVersion, req.Version)}})
			continue
		}
		cl := s.begin(c, frames, req, owner)
		var reply *wire.Reply
		stopReply := false
		var tap *tapWriter
		switch req.Op {
		case wire.OpRun:
			reply, tap = s.run(cl, req)
		case wire.OpMeta:
			reply = s.meta(cl, req)
		case wire.OpEnv:
			reply = s.env(cl, req)
		case wire.OpFork:
			reply = s.fork(cl, req)
		case wire.OpCheckpoint:
			reply = s.checkpoint(cl, req)
		case wire.OpRestore:
			reply = s.restore(cl, req)
		case wire.OpCheckpoints:
			reply = s.checkpoints(cl, req)
		case wire.OpRemoveCheckpoint:
			reply = s.removeCheckpoint(cl, req)
		case wire.OpStatus:
			st := s.Status()
			reply = &wire.Reply{Status: &st}
		case wire.OpStop:
			// The caller gets its answer before Serve returns: the
			// process exits then, and a connection closed before the
			// answer reads as a daemon that died.
			s.stopReplies.Add(1)
			stopReply = true
			s.shutdown("berth daemon stop")
			reply = &wire.Reply{}
		default:
			reply = &wire.Reply{Code: wire.CodeFailed, Error: fmt.Sprintf("unknown operation %q", req.Op)}
		}
		cl.end()
		s.touch()
		if tap != nil {
			// The task is free again; only this connection waits for its
			// reader to take the rest of the output.
			tap.flush()
		}
		if stopReply && beforeStopReply != nil {
			beforeStopReply()
		}
		err := c.Send(wire.Frame{T: wire.FrameResult, Reply: reply})
		if stopReply {
			s.stopReplies.Done()
		}
		if err != nil {
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
		PID: os.Getpid(), Identity: s.paths.Identity, Socket: s.paths.Socket, Home: s.opts.Home,
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
	for _, p := range s.pools.Status() {
		st.Pools = append(st.Pools, wire.PoolStatus{Backend: p.Backend, Shape: p.Shape, Size: p.Size, Ready: p.Ready,
			Making: p.Making, Members: p.Members, Claimed: p.Claimed, Failed: p.Failed, LastError: p.LastError})
	}
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
