package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNotRunning says no daemon serves the home (DialOptions.NoStart).
var ErrNotRunning = errors.New("no berth daemon is running for this home")

// DialOptions configure Dial.
type DialOptions struct {
	// Home is the berth home whose daemon to reach.
	Home string
	// Identity is the daemon's build (Identity); "" means this
	// executable's (SelfIdentity). The front gives that of the engine it
	// would exec (EngineIdentity).
	Identity string
	// NoStart reports ErrNotRunning instead of starting a daemon.
	NoStart bool
	// Exe and Args start a daemon (the berth binary and its hidden
	// `daemon serve` subcommand). Exe "" means this executable.
	Exe  string
	Args []string
	// Env is the new daemon's environment; nil means this process's.
	Env []string
	// StartTimeout bounds the wait for a new daemon; 0 means 30 s.
	StartTimeout time.Duration
}

// Client is one connection to a daemon. It is not safe for concurrent
// use: requests go one at a time.
type Client struct {
	nc *os.File
	c  *Conn
	// Started reports that this Dial started the daemon.
	Started bool
	// hello is the daemon's hello, once read (Hello, or the first frames
	// of Run); refused is its refusal instead.
	hello   *Hello
	refused *ReplyError
}

// Dial connects to the daemon of the home, starting one if none runs: a
// socket nobody answers (a daemon that crashed or was killed) is replaced.
// Concurrent callers end up with one daemon: the start happens under a
// lock file, and whoever gets the lock second finds the first one's daemon.
//
// Before connecting or starting anything it checks that the home and its
// daemon directory are the caller's own (CheckHome); after connecting,
// that the daemon runs as the caller's uid (SO_PEERCRED). Either failing is
// an error wrapping ErrUntrusted, and nothing was sent.
func Dial(ctx context.Context, opts DialOptions) (*Client, error) {
	id := opts.Identity
	if id == "" {
		id = SelfIdentity()
	}
	paths, err := PathsOf(opts.Home, id)
	if err != nil {
		return nil, err
	}
	if _, err := os.Lstat(opts.Home); errors.Is(err, os.ErrNotExist) {
		if opts.NoStart {
			return nil, ErrNotRunning
		}
		if err := os.MkdirAll(opts.Home, 0o700); err != nil {
			return nil, fmt.Errorf("daemon: create BERTH_HOME %s: %w", opts.Home, err)
		}
	}
	if err := CheckHome(opts.Home); err != nil {
		return nil, err
	}
	if c, err := connect(paths.Socket); err == nil || !isNotListening(err) {
		return c, err
	}
	if opts.NoStart {
		return nil, ErrNotRunning
	}
	if err := PrivateDir(paths.Dir); err != nil {
		return nil, err
	}
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	unlock, err := flockWait(ctx, paths.Lock)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if c, err := connect(paths.Socket); err == nil || !isNotListening(err) {
		return c, err
	}
	return start(ctx, paths, opts)
}

// Connect connects to the daemon of paths (one of Daemons) in the home,
// without starting one: ErrNotRunning when nobody answers. The home is
// checked as Dial checks it.
func Connect(home string, paths Paths) (*Client, error) {
	if err := CheckHome(home); err != nil {
		return nil, err
	}
	c, err := connect(paths.Socket)
	if err != nil && isNotListening(err) {
		return nil, ErrNotRunning
	}
	return c, err
}

// connect dials the socket and checks that its daemon runs as this user.
// It uses the socket calls themselves rather than package net, which
// would make the front binary load the C library at every start (about
// 3 ms here).
func connect(path string) (*Client, error) {
	// Non-blocking, so that the runtime's poller serves it and read
	// deadlines work; a unix connect does not wait for the daemon to
	// accept, it fails with EAGAIN when its backlog is full.
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("daemon: socket: %w", err)
	}
	for {
		err = unix.Connect(fd, &unix.SockaddrUnix{Name: path})
		if err != unix.EINTR {
			break
		}
	}
	if err == unix.EAGAIN {
		// The daemon's backlog is full: it does not answer.
		err = unix.ECONNREFUSED
	}
	if err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "connect", Path: path, Err: err}
	}
	if err := serverUID(fd, path); err != nil {
		unix.Close(fd)
		return nil, err
	}
	nc := os.NewFile(uintptr(fd), path)
	return &Client{nc: nc, c: NewConn(nc)}, nil
}

// isNotListening reports a socket that is missing or that nobody accepts
// on: no daemon.
func isNotListening(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}

// flockWait takes the exclusive lock on path, waiting until ctx ends.
func flockWait(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("daemon: open %s: %w", path, err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("daemon: lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("daemon: another berth is starting the daemon and has not finished (lock %s): %w", path, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// start launches a detached daemon (a new session, stdio on the log file,
// no other descriptor, working directory /) and waits until it accepts.
func start(ctx context.Context, paths Paths, opts DialOptions) (*Client, error) {
	exe := opts.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("daemon: find the berth executable: %w", err)
		}
	}
	if fi, err := os.Stat(paths.Log); err == nil && fi.Size() > 1<<20 {
		_ = os.Rename(paths.Log, paths.Log+".old")
	}
	logf, err := os.OpenFile(paths.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("daemon: open log %s: %w", paths.Log, err)
	}
	off, _ := logf.Seek(0, io.SeekEnd)
	cmd := exec.Command(exe, opts.Args...)
	cmd.Dir = "/"
	cmd.Env = opts.Env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("daemon: start %s: %w", exe, err)
	}
	logf.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for {
		c, err := connect(paths.Socket)
		if err == nil {
			c.Started = true
			return c, nil
		}
		if !isNotListening(err) {
			return nil, err
		}
		select {
		case werr := <-exited:
			// Another daemon may have won a race we could not see (one
			// started by hand): it holds the pid lock and answers.
			if c, err := connect(paths.Socket); err == nil {
				return c, nil
			}
			return nil, fmt.Errorf("daemon: berth daemon exited at start (%v): %s", werr, logTail(paths.Log, off))
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			return nil, fmt.Errorf("daemon: no answer on %s from the new daemon: %w; its log: %s", paths.Socket, ctx.Err(), logTail(paths.Log, off))
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// logTail returns the log written since off, shortened.
func logTail(path string, off int64) string {
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < off {
		return "(no log)"
	}
	b = bytes.TrimSpace(b[off:])
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	if len(b) == 0 {
		return "(empty)"
	}
	return string(b)
}

// Close ends the connection.
func (c *Client) Close() error { return c.nc.Close() }

// helloTimeout bounds the wait for a daemon's hello.
const helloTimeout = 10 * time.Second

// Hello waits for the daemon's hello: a *ReplyError (with Code
// CodeSandboxed or CodeOtherUser) when the daemon refuses this caller.
// Run reads the hello by itself; a caller calls Hello first to know,
// before it sends anything, whether the daemon serves it.
func (c *Client) Hello() (*Hello, error) {
	if c.hello == nil && c.refused == nil {
		_ = c.nc.SetReadDeadline(time.Now().Add(helloTimeout))
		f, err := c.c.Recv()
		_ = c.nc.SetReadDeadline(time.Time{})
		if err != nil {
			return nil, fmt.Errorf("daemon: no hello from %s: %w", c.nc.Name(), err)
		}
		if !c.first(f) {
			return nil, fmt.Errorf("daemon: %s opened with a %q frame, not a hello (a daemon from before protocol %d?)", c.nc.Name(), f.T, ProtocolVersion)
		}
	}
	if c.refused != nil {
		return nil, c.refused
	}
	return c.hello, nil
}

// beforeHello is the error of a connection that failed before the
// daemon's hello: the daemon never took the request (it was exiting, its
// socket still queued connections), so nothing ran, and the error wraps
// ErrNotRunning.
func (c *Client) beforeHello(err error) error {
	return fmt.Errorf("daemon: the connection to %s ended before the daemon's hello (%v); nothing ran: %w", c.nc.Name(), err, ErrNotRunning)
}

// first takes f as the connection's first frame if it is a hello or a
// refusal, and reports whether it was.
func (c *Client) first(f Frame) bool {
	switch {
	case f.T == FrameHello && f.Hello != nil:
		c.hello = f.Hello
	case f.T == FrameResult && f.Reply != nil && f.Reply.Error != "" && c.hello == nil:
		c.refused = &ReplyError{Msg: f.Reply.Error, Code: f.Reply.Code}
	default:
		return false
	}
	return true
}

// Do sends a request that needs no streaming (status, stop, meta, env)
// and returns its reply. A reply with Error set is returned as an error.
func (c *Client) Do(req Request) (*Reply, error) {
	return c.Run(context.Background(), req, RunOptions{})
}

// AskFunc answers an approval question of the daemon (an
// approval.Question as JSON) with an approval.Answer. An error wrapping
// ErrCannotAsk says nobody can be asked.
type AskFunc func(ctx context.Context, question json.RawMessage) (answer string, err error)

// ErrCannotAsk is the answer of a caller that cannot ask anybody; the
// daemon takes it as approval.ErrCannotAsk (its text is the same).
var ErrCannotAsk = errors.New("cannot ask the user")

// RunOptions are the caller's side of a run.
type RunOptions struct {
	// Stdout receives the output as it comes (when the request streams).
	Stdout io.Writer
	// Ask answers approval questions; nil answers that nobody can be
	// asked.
	Ask AskFunc
	// Getenv answers the daemon's getenv frames with KEY=VALUE of the
	// names the caller has; nil means this process's environment.
	Getenv func(names []string) []string
	// Progress hears the progress frames of a long step (a fork's copy);
	// nil ignores them.
	Progress func(Progress)
}

// Run sends req and relays its frames until the result: output to
// opts.Stdout, approval questions to opts.Asker, the values of variables
// the call reads from opts.Getenv. The end of ctx interrupts the command
// (the daemon answers with exit status 130).
func (c *Client) Run(ctx context.Context, req Request, opts RunOptions) (*Reply, error) {
	req.Version = ProtocolVersion
	if c.refused != nil {
		return nil, c.refused
	}
	if err := c.c.Send(Frame{T: FrameRequest, Req: &req}); err != nil {
		// A daemon that refuses the connection says why before closing.
		_ = c.nc.SetReadDeadline(time.Now().Add(time.Second))
		if f, rerr := c.c.Recv(); rerr == nil && f.T == FrameResult && f.Reply != nil && f.Reply.Error != "" {
			return f.Reply, &ReplyError{Msg: f.Reply.Error, Code: f.Reply.Code}
		}
		return nil, c.beforeHello(err)
	}
	getenv := opts.Getenv
	if getenv == nil {
		getenv = lookupEnv
	}
	frames := make(chan Frame, 16)
	readErr := make(chan error, 1)
	go func() {
		defer close(frames)
		for {
			f, err := c.c.Recv()
			if err != nil {
				readErr <- err
				return
			}
			frames <- f
			if f.T == FrameResult {
				return
			}
		}
	}()
	done := ctx.Done()
	for {
		select {
		case f, ok := <-frames:
			if !ok {
				err := <-readErr
				if c.hello == nil && c.refused == nil {
					return nil, c.beforeHello(err)
				}
				if errors.Is(err, io.EOF) {
					err = errors.New("the berth daemon closed the connection before answering (see " + "berth daemon status" + " and its log)")
				}
				return nil, fmt.Errorf("daemon: %w", err)
			}
			if c.hello == nil && c.refused == nil && c.first(f) {
				if c.refused != nil {
					return nil, c.refused
				}
				continue
			}
			switch f.T {
			case FrameGetenv:
				if err := c.c.Send(Frame{T: FrameEnv, Env: getenv(f.Names)}); err != nil {
					return nil, err
				}
			case FrameOut:
				if opts.Stdout != nil {
					_, _ = opts.Stdout.Write(f.Data)
				}
			case FrameAsk:
				go c.answer(ctx, f, opts.Ask)
			case FrameProgress:
				if opts.Progress != nil && f.Progress != nil {
					opts.Progress(*f.Progress)
				}
			case FrameResult:
				if f.Reply == nil {
					return nil, errors.New("daemon: empty result")
				}
				if f.Reply.Error != "" {
					return f.Reply, &ReplyError{Msg: f.Reply.Error, Code: f.Reply.Code}
				}
				return f.Reply, nil
			}
		case <-done:
			done = nil
			_ = c.c.Send(Frame{T: FrameInterrupt})
		}
	}
}

// answer asks the human and sends the answer back.
func (c *Client) answer(ctx context.Context, f Frame, ask AskFunc) {
	if ask == nil || len(f.Question) == 0 {
		_ = c.c.Send(Frame{T: FrameAnswer, Err: ErrCannotAsk.Error()})
		return
	}
	a, err := ask(ctx, f.Question)
	switch {
	case errors.Is(err, ErrCannotAsk):
		_ = c.c.Send(Frame{T: FrameAnswer, Err: ErrCannotAsk.Error()})
	case err != nil:
		_ = c.c.Send(Frame{T: FrameAnswer, Err: err.Error()})
	default:
		_ = c.c.Send(Frame{T: FrameAnswer, Answer: a})
	}
}

// ReplyError is a request the daemon could not serve (bad configuration,
// another user, shutting down); Code says which kind (the Code*
// constants).
type ReplyError struct{ Msg, Code string }

func (e *ReplyError) Error() string {
	return "berth daemon: " + strings.TrimPrefix(e.Msg, "berth daemon: ")
}

// IsCode reports whether err is a ReplyError with the code.
func IsCode(err error, code string) bool {
	var re *ReplyError
	return errors.As(err, &re) && re.Code == code
}
