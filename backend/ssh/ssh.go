// Package ssh is berth's SSH backend: commands run on a remote host over one
// reused SSH connection made with golang.org/x/crypto/ssh (no ssh binary).
//
// Every process is a "session" channel on the same connection, so starting
// one is a channel open plus an exec request (well under a millisecond on
// loopback once connected). The backend behaves like OpenSSH run with
// BatchMode=yes, StrictHostKeyChecking=accept-new, ConnectTimeout=10,
// ServerAliveInterval=15 and ServerAliveCountMax=3:
//
//   - ~/.ssh/config is read for the host (see SupportedConfigDirectives):
//     Host patterns with * ? and !negation, HostName, User, Port,
//     IdentityFile (~ and %d %h %n %p %r %u tokens), IdentitiesOnly,
//     UserKnownHostsFile, HashKnownHosts, StrictHostKeyChecking (yes refuses
//     unknown hosts; anything else means accept-new), ConnectTimeout,
//     ServerAliveInterval, ServerAliveCountMax, ProxyJump, ProxyCommand,
//     Include, and "Match all". Other directives are ignored and listed in
//     a debug log. /etc/ssh/ssh_config is not read.
//   - Bastions: ProxyJump (terminal.ssh_proxy_jump) is a -J style list of
//     [user@]host[:port] jump hosts, each resolved through ~/.ssh/config
//     (the first one following its own ProxyJump/ProxyCommand there, as
//     OpenSSH does). Each jump host gets its own SSH connection with the
//     same host-key and key rules (known_hosts entries under the hop's own
//     host:port name; ssh_key, its IdentityFile entries, the agent, the
//     default keys), and opens a direct-tcpip tunnel to the next one. A
//     ProxyCommand (terminal.ssh_proxy_command) runs under /bin/sh -c with
//     %h %p %r %n %% expanded, in its own process group; its stdin and
//     stdout carry the connection, it is killed and reaped when the
//     connection ends, and its exit status and stderr appear in errors.
//     "none" turns either off. Errors from a jump host are *HopError
//     naming it. A reconnect goes through the route again.
//   - Keys: terminal.ssh_key, then IdentityFile entries, then ssh-agent keys
//     (SSH_AUTH_SOCK), then ~/.ssh/id_ed25519, id_ecdsa, id_rsa when no key
//     file was configured. Nothing ever prompts; passphrase-protected files
//     are used only through the agent.
//   - Host keys are checked against ~/.ssh/known_hosts. An unknown host is
//     recorded ("[host]:port" for ports other than 22, hashed when
//     HashKnownHosts yes); a changed key is refused with HostKeyChangedError.
//
// File content for the file tools travels over SFTP (see Backend.WriteFile):
// an "sftp" subsystem channel on the same connection, opened on first use
// and kept. A server that refuses the subsystem is remembered per
// connection, and the tools then move the bytes through the shell.
//
// The remote login shell must be POSIX-like (sh, bash, dash, ksh, zsh): the
// backend sends "exec 2>&1; [cd DIR &&] exec ARGV..." as the remote command,
// so the started process replaces the login shell, is the leader of its own
// process group (sshd calls setsid for every session), and its stderr is
// merged into stdout in arrival order.
//
// Each Process learns its exit status from the channel's exit-status or
// exit-signal request, so Wait returns as soon as the remote process ends
// even when a descendant keeps its output open. Stdout then ends (io.EOF)
// once the output is drained, or WaitDelay after the exit when a descendant
// keeps it open and writes nothing. When the connection dies, pending reads
// and Waits fail promptly with an error, and the next Start redials once.
package ssh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gossh "golang.org/x/crypto/ssh"
	"mvdan.cc/sh/v3/syntax"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/shellword"
)

// Name is the backend's registered name.
const Name = "ssh"

// WaitDelay is how long, after the remote process exited, a Stdout reader
// that is waiting for data and receives none may block before the channel is
// closed (like os/exec.Cmd.WaitDelay): a daemon that inherited the output and
// stays silent cannot hang the caller.
const WaitDelay = backend.WaitDelay

// maxConns bounds the connections opened when the server refuses more
// session channels on one connection (OpenSSH MaxSessions, 10 by default).
const maxConns = 8

func init() {
	backend.Register(backend.Registration{
		Name:        Name,
		Description: "commands on a remote host over one reused SSH connection (native client, ~/.ssh/config, known_hosts accept-new)",
		New: func(ctx context.Context, opts backend.Options) (backend.Backend, error) {
			return New(ctx, opts)
		},
		Doctor:      Doctor,
		Keys:        configKeys,
		Envs:        envAdmin{},
		Checkpoints: checkpointAdmin{},
	})
}

// Backend runs processes on one remote host. It is safe for concurrent use.
type Backend struct {
	t         *target
	opts      backend.Options
	log       *slog.Logger
	waitDelay time.Duration

	dialMu sync.Mutex // serialises dials
	mu     sync.Mutex
	conns  []*conn // conns[0] is the main connection; others carry overflow
	closed bool

	// defaultCd changes to the default directory in a remote command
	// (cdCommand); fork is what checkpoints need (checkpoint.go).
	defaultCd string
	fork      forkState

	sftpOpens  atomic.Int64 // SFTP clients opened (for tests)
	sftpWrites atomic.Int64 // files written over SFTP (for tests)
}

var (
	_ backend.Backend      = (*Backend)(nil)
	_ backend.SessionEnver = (*Backend)(nil)
	_ backend.FileWriter   = (*Backend)(nil)
)

// New resolves the target from opts (terminal settings and ~/.ssh/config).
// It does not connect (the first Start does) unless terminal.cwd names a
// workspace other than the remote home: it then looks on the host for the
// key's fork workspace, or makes it when opts.From asks for an environment
// made from a checkpoint (checkpoint.go). Missing ssh_host or ssh_user is
// a *ConfigError naming the setting.
func New(ctx context.Context, opts backend.Options) (*Backend, error) {
	log := opts.Log()
	log = log.With("backend", Name)
	t, err := resolveTarget(opts, log)
	if err != nil {
		return nil, err
	}
	b := &Backend{t: t, opts: opts, log: log, waitDelay: WaitDelay}
	if b.defaultCd, err = b.startDir(); err != nil {
		return nil, err
	}
	// An environment made from a checkpoint works in a fresh copy of it
	// on the host, a later one of the same key in that copy
	// (checkpoint.go).
	if opts.From != nil {
		err = b.fromCheckpoint(ctx, opts.From)
	} else if opts.Key != "" {
		err = b.findFork(ctx)
	}
	if err != nil {
		b.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return b, nil
}

// Name returns "ssh".
func (b *Backend) Name() string { return Name }

// Target returns "user@host:port", the resolved destination.
func (b *Backend) Target() string { return b.t.String() }

// SessionEnv returns the variables named in terminal.env_passthrough that
// are set in berth's environment, for the session to export through the
// shell's stdin (servers refuse Setenv unless configured with AcceptEnv).
func (b *Backend) SessionEnv() map[string]string {
	getenv := getenvFunc(b.opts)
	env := map[string]string{}
	for _, name := range b.opts.Config.EnvPassthrough {
		if v := getenv(name); v != "" {
			env[name] = v
		}
	}
	return env
}

// Connect makes sure a connection is up, dialing when there is none. Start
// does this itself; Connect lets callers (doctor, benchmarks) fail early.
func (b *Backend) Connect(ctx context.Context) error {
	_, err := b.pick(ctx)
	return err
}

// Start runs spec on the remote host over a new session channel of the
// shared connection. When the connection turns out to be dead it redials
// once. spec.Env is exported in the remote command string (visible in the
// remote process list for an instant): secrets belong in SessionEnv.
func (b *Backend) Start(ctx context.Context, spec backend.ProcSpec) (backend.Process, error) {
	cmd, err := remoteCommand(spec, b.defaultCd)
	if err != nil {
		return nil, err
	}
	var p backend.Process
	wrap := func(err error) error {
		return fmt.Errorf("ssh backend: start %q on %s: %w", spec.Argv[0], b.t, err)
	}
	_, err = b.onConn(ctx, wrap, func(c *conn) (err error) {
		p, err = b.startOn(ctx, c, cmd, spec.TTY)
		return err
	})
	return p, err
}

// onConn runs open (which opens a channel) on a live connection, with the
// backend's retry policy: when the server refuses another session channel
// (MaxSessions) it marks that connection full and tries another one, up to
// maxConns; when the connection turns out to be dead it redials once. A
// capability the server declines (backend.ErrUnsupported) and a cancelled
// ctx end the attempt at once; a connection that stays dead is an
// *backend.UnreachableError. wrap adds the caller's context to the
// cancellation error and to open's last error.
func (b *Backend) onConn(ctx context.Context, wrap func(error) error, open func(*conn) error) (*conn, error) {
	redialed := false
	for tries := 0; ; tries++ {
		c, err := b.pick(ctx)
		if err != nil {
			return nil, err
		}
		err = open(c)
		if err == nil {
			return c, nil
		}
		if errors.Is(err, backend.ErrUnsupported) {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, wrap(ctx.Err())
		}
		var oce *gossh.OpenChannelError
		if errors.As(err, &oce) && tries < maxConns {
			// MaxSessions reached on this connection: use another one.
			b.log.Debug("ssh: server refused a session channel; using another connection", "reason", oce.Error())
			c.mu.Lock()
			c.full = true
			c.mu.Unlock()
			continue
		}
		select {
		case <-c.done:
		case <-time.After(200 * time.Millisecond):
		}
		if !c.alive() && !redialed {
			redialed = true
			b.log.Info("ssh: connection lost; reconnecting", "target", b.t.String(), "why", c.deathError())
			continue
		}
		if !c.alive() {
			return nil, &backend.UnreachableError{Backend: Name, Target: b.t.addr(), Err: c.deathError()}
		}
		return nil, wrap(err)
	}
}

// pick returns a live connection with room for another channel, dialing
// when there is none.
func (b *Backend) pick(ctx context.Context) (*conn, error) {
	if c, err := b.livePick(); c != nil || err != nil {
		return c, err
	}
	b.dialMu.Lock()
	defer b.dialMu.Unlock()
	if c, err := b.livePick(); c != nil || err != nil {
		return c, err
	}
	b.mu.Lock()
	n := len(b.conns)
	b.mu.Unlock()
	if n >= maxConns {
		return nil, fmt.Errorf("ssh backend: %s refuses more session channels on %d connections (raise MaxSessions in its sshd_config)", b.t, n)
	}
	c, err := dial(ctx, b.t, b.log)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		c.client.Close()
		return nil, errors.New("ssh backend: closed")
	}
	b.conns = append(b.conns, c)
	return c, nil
}

func (b *Backend) livePick() (*conn, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errors.New("ssh backend: closed")
	}
	live := b.conns[:0]
	for _, c := range b.conns {
		if c.alive() {
			live = append(live, c)
		}
	}
	clear(b.conns[len(live):])
	b.conns = live
	for _, c := range b.conns {
		c.mu.Lock()
		full := c.full
		c.mu.Unlock()
		if !full {
			return c, nil
		}
	}
	return nil, nil
}

// release is called when a channel of c has closed. An overflow connection
// with no channels left is closed.
func (b *Backend) release(c *conn) {
	c.mu.Lock()
	c.nchannels--
	c.full = false
	idle := c.nchannels == 0
	c.mu.Unlock()
	if !idle {
		return
	}
	b.mu.Lock()
	extra := len(b.conns) > 0 && b.conns[0] != c
	if extra {
		for i, x := range b.conns {
			if x == c {
				b.conns = append(b.conns[:i], b.conns[i+1:]...)
				break
			}
		}
	}
	b.mu.Unlock()
	if extra {
		c.closeWith(errors.New("overflow connection idle"))
	}
}

// Close closes every connection. Processes still running on the remote host
// lose their channels (sshd closes their pipes). It is idempotent.
func (b *Backend) Close(ctx context.Context) error {
	b.mu.Lock()
	conns := b.conns
	b.conns = nil
	b.closed = true
	b.mu.Unlock()
	for _, c := range conns {
		c.closeWith(errors.New("backend closed"))
	}
	return nil
}

type ptyRequest struct {
	Term     string
	Columns  uint32
	Rows     uint32
	Width    uint32
	Height   uint32
	Modelist string
}

type execRequest struct {
	Command string
}

// startOn opens a session channel on c and execs cmd.
func (b *Backend) startOn(ctx context.Context, c *conn, cmd string, tty bool) (*process, error) {
	type result struct {
		p   *process
		err error
	}
	res := make(chan result, 1)
	go func() {
		ch, reqs, err := c.client.OpenChannel("session", nil)
		if err != nil {
			res <- result{nil, err}
			return
		}
		c.mu.Lock()
		c.nchannels++
		c.mu.Unlock()
		p := newProcess(b, c, ch, reqs)
		if tty {
			ok, err := ch.SendRequest("pty-req", true, gossh.Marshal(ptyRequest{
				Term: "xterm-256color", Columns: 80, Rows: 24, Modelist: "\x00",
			}))
			if err == nil && !ok {
				err = errors.New("server refused a pseudo-terminal")
			}
			if err != nil {
				p.Close()
				res <- result{nil, fmt.Errorf("request pty: %w", err)}
				return
			}
		}
		ok, err := ch.SendRequest("exec", true, gossh.Marshal(execRequest{Command: cmd}))
		if err == nil && !ok {
			err = errors.New("server refused the exec request")
		}
		if err != nil {
			p.Close()
			res <- result{nil, fmt.Errorf("exec: %w", err)}
			return
		}
		res <- result{p, nil}
	}()
	select {
	case r := <-res:
		return r.p, r.err
	case <-ctx.Done():
		go func() {
			if r := <-res; r.p != nil {
				r.p.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// remoteCommand builds the command string sent in the exec request. The
// login shell runs it; every word is quoted for a POSIX shell. defaultCd is
// the backend's own fragment that changes to the default directory when
// spec.Dir is "" (cdCommand; "" stays in the remote home).
func remoteCommand(spec backend.ProcSpec, defaultCd string) (string, error) {
	if len(spec.Argv) == 0 {
		return "", errors.New("ssh backend: empty argv")
	}
	var sb strings.Builder
	sb.WriteString("exec 2>&1; ")
	for _, kv := range spec.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !envName.MatchString(k) {
			return "", fmt.Errorf("ssh backend: bad environment entry %q (want NAME=value)", k)
		}
		q, err := quote(v)
		if err != nil {
			return "", fmt.Errorf("ssh backend: environment variable %s: %w", k, err)
		}
		sb.WriteString("export " + k + "=" + q + "; ")
	}
	if spec.Dir != "" || defaultCd == "" {
		w, err := dirWord(spec.Dir)
		if err != nil {
			return "", fmt.Errorf("ssh backend: dir: %w", err)
		}
		if w != "" {
			sb.WriteString("cd " + w + " && ")
		}
	} else {
		sb.WriteString(defaultCd)
	}
	sb.WriteString("exec")
	for _, a := range spec.Argv {
		q, err := quote(a)
		if err != nil {
			return "", fmt.Errorf("ssh backend: argv: %w", err)
		}
		sb.WriteString(" " + q)
	}
	return sb.String(), nil
}

// dirWord is dir as one shell word for cd: "~/x" expands the remote
// home, an absolute or relative path is quoted as it is. "" (and "." and
// "~") is the remote home, where sshd starts the login shell already.
func dirWord(dir string) (string, error) {
	switch {
	case dir == "" || dir == "." || dir == "~":
		return "", nil
	case strings.HasPrefix(dir, "~/"):
		q, err := quote(dir[2:])
		if err != nil {
			return "", err
		}
		return `"$HOME"/` + q, nil
	default:
		return quote(dir)
	}
}

// quote quotes s as one word for a POSIX shell. Strings POSIX quoting in
// syntax.Quote rejects (newlines, control characters, invalid UTF-8) are
// single-quoted literally, which POSIX shells take byte for byte. NUL
// cannot be passed at all.
func quote(s string) (string, error) {
	q, err := syntax.Quote(s, syntax.LangPOSIX)
	if err == nil {
		return q, nil
	}
	if strings.IndexByte(s, 0) >= 0 {
		return "", fmt.Errorf("cannot pass a NUL byte in %q", s)
	}
	return shellword.Quote(s), nil
}
