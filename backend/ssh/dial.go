package ssh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a55dbaac/berth/backend"
	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// Defaults that match the contract (and OpenSSH options berth sets).
const (
	DefaultConnectTimeout    = 10 * time.Second // ConnectTimeout=10
	DefaultKeepAliveInterval = 15 * time.Second // ServerAliveInterval=15
	DefaultKeepAliveMax      = 3                // ServerAliveCountMax=3
)

// ConfigError reports a missing or malformed ssh setting.
type ConfigError struct {
	Msg string
}

func (e *ConfigError) Error() string { return "ssh backend: " + e.Msg }

// AuthError reports that the server refused every key berth offered.
type AuthError struct {
	Target string   // user@host:port
	Tried  []string // the keys offered, with where they came from
	Notes  []string // keys that could not be used (passphrase, unreadable)
	Err    error
}

func (e *AuthError) Error() string {
	msg := fmt.Sprintf("ssh backend: %s refused authentication", e.Target)
	if len(e.Tried) == 0 {
		msg += ": no usable key (no ssh_key, no ssh-agent keys, no default identity file)"
	} else {
		msg += "; keys offered: " + strings.Join(e.Tried, ", ")
	}
	if len(e.Notes) > 0 {
		msg += "; skipped: " + strings.Join(e.Notes, "; ")
	}
	msg += ". Set terminal.ssh_key (TERMINAL_SSH_KEY) to a private key whose public half is in the server's authorized_keys, or load one into ssh-agent (SSH_AUTH_SOCK); berth never prompts for passwords or passphrases"
	if e.Err != nil {
		msg += " (" + e.Err.Error() + ")"
	}
	return msg
}

func (e *AuthError) Unwrap() error { return e.Err }

// target is one resolved host of a route: the berth settings (for the
// destination) or a ProxyJump entry (for a jump host) merged with
// ~/.ssh/config for the host.
type target struct {
	alias          string // ssh_host or the ProxyJump entry's host, as written
	host           string // host name dialled (HostName)
	port           int
	user           string
	home           string // local home directory holding .ssh
	sshKey         string // terminal.ssh_key, expanded
	identityFiles  []string
	identitiesOnly bool
	knownHosts     []string
	hashKnownHosts bool
	refuseUnknown  bool
	connectTimeout time.Duration
	keepInterval   time.Duration
	keepMax        int
	agentSock      string
	unsupported    []string

	// How the host is reached: through the jump host via (itself a
	// target with its own route), through the transport of proxyCommand
	// (expanded, run with /bin/sh -c), or, when both are empty, directly.
	via          *target
	proxyCommand string
}

func (t *target) addr() string { return net.JoinHostPort(t.host, strconv.Itoa(t.port)) }

func (t *target) String() string { return t.user + "@" + t.addr() }

func getenvFunc(opts backend.Options) func(string) string {
	if opts.Getenv != nil {
		return opts.Getenv
	}
	return os.Getenv
}

// localHome is the directory holding .ssh: $HOME from opts.Getenv, else the
// user's home directory.
func localHome(getenv func(string) string) (string, error) {
	if h := getenv("HOME"); h != "" {
		return h, nil
	}
	h, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("ssh backend: locate home directory for ~/.ssh: %w", err)
	}
	return h, nil
}

// resolver holds what every host of a route shares: the local home and
// user, the ssh_key setting and the agent.
type resolver struct {
	home      string
	sshDir    string
	localUser string
	sshKey    string // terminal.ssh_key as set (tokens expanded per host)
	agentSock string
	log       *slog.Logger
}

// resolveTarget merges the terminal settings with ~/.ssh/config. Explicit
// berth settings win over the config file (like ssh's -l/-p/-i/-J flags),
// except that ssh_port 22 (the default) yields to a Port from
// ~/.ssh/config. The jump hosts of the route are resolved too, each through
// ~/.ssh/config.
func resolveTarget(opts backend.Options, log *slog.Logger) (*target, error) {
	getenv := getenvFunc(opts)
	cfg := opts.Config
	alias := strings.TrimSpace(cfg.String(keyHost))
	if alias == "" {
		return nil, &ConfigError{Msg: "no host configured: set terminal.ssh_host in the config file or the TERMINAL_SSH_HOST environment variable"}
	}
	userName := strings.TrimSpace(cfg.String(keyUser))
	if i := strings.LastIndexByte(alias, '@'); i >= 0 {
		if userName == "" {
			userName = alias[:i]
		}
		alias = alias[i+1:]
	}
	home, err := localHome(getenv)
	if err != nil {
		return nil, err
	}
	r := &resolver{
		home:      home,
		sshDir:    filepath.Join(home, ".ssh"),
		localUser: getenv("USER"),
		sshKey:    cfg.String(keyKey),
		agentSock: getenv("SSH_AUTH_SOCK"),
		log:       log,
	}
	if r.localUser == "" {
		if u, err := user.Current(); err == nil {
			r.localUser = u.Username
		}
	}
	hs, err := r.config(alias)
	if err != nil {
		return nil, err
	}
	if userName == "" {
		userName = hs.get("user")
	}
	if userName == "" {
		return nil, &ConfigError{Msg: fmt.Sprintf("no user for host %s: set terminal.ssh_user in the config file or the TERMINAL_SSH_USER environment variable (or a User line for the host in ~/.ssh/config)", alias)}
	}
	port := cfg.Int(keyPort)
	if port < 0 || port > 65535 {
		return nil, &ConfigError{Msg: fmt.Sprintf("bad terminal.ssh_port (TERMINAL_SSH_PORT) %d", port)}
	}
	if port == 22 {
		port = 0 // the default yields to a Port in ~/.ssh/config
	}
	t, err := r.host(alias, userName, port, hs)
	if err != nil {
		return nil, err
	}
	jump, command, err := routeOf(cfg.String(keyProxyJump), cfg.String(keyProxyCommand), hs)
	if err != nil {
		return nil, err
	}
	source := "terminal.ssh_proxy_jump (TERMINAL_SSH_PROXY_JUMP)"
	if strings.TrimSpace(cfg.String(keyProxyJump)) == "" && strings.TrimSpace(cfg.String(keyProxyCommand)) == "" {
		source = "~/.ssh/config ProxyJump for " + alias
	}
	if err := r.route(t, jump, command, source, 0); err != nil {
		return nil, err
	}
	return t, nil
}

// config reads ~/.ssh/config for host.
func (r *resolver) config(host string) (*hostSettings, error) {
	hs, err := readSSHConfig(filepath.Join(r.sshDir, "config"), r.sshDir, host, r.log)
	if err != nil {
		return nil, fmt.Errorf("ssh backend: %w", err)
	}
	return hs, nil
}

// route sets how t is reached: a ProxyCommand (its tokens expanded for t)
// or the jump hosts of a ProxyJump list. Like OpenSSH, the last entry of the
// list is the host that opens the tunnel to t, each entry is reached
// through the one before it, and only the first entry follows its own
// ProxyJump/ProxyCommand from ~/.ssh/config. depth counts the hops already
// on the route; source names where jump came from, for errors.
func (r *resolver) route(t *target, jump, command, source string, depth int) error {
	if command != "" {
		cmd, err := expandTokens(command, map[byte]string{
			'h': t.host, 'p': strconv.Itoa(t.port), 'r': t.user, 'n': t.alias, 'd': r.home, 'u': r.localUser,
		})
		if err != nil {
			return &ConfigError{Msg: fmt.Sprintf("ProxyCommand for %s: %v", t.alias, err)}
		}
		t.proxyCommand = cmd
		return nil
	}
	if jump == "" {
		return nil
	}
	hops, err := parseJumpList(jump, source)
	if err != nil {
		return err
	}
	if depth+len(hops) > maxJumpHops {
		return &ConfigError{Msg: fmt.Sprintf("the route to %s has more than %d jump hosts (%s %q); is there a ProxyJump loop in ~/.ssh/config? (a \"Host *\" ProxyJump applies to the jump host too; exclude it with \"Host * !bastion\")", t.alias, maxJumpHops, source, jump)}
	}
	var prev *target
	for i, h := range hops {
		hs, err := r.config(h.host)
		if err != nil {
			return err
		}
		u := h.user
		if u == "" {
			u = hs.get("user")
		}
		if u == "" {
			u = r.localUser
		}
		if u == "" {
			return &ConfigError{Msg: fmt.Sprintf("no user for jump host %s: write it as user@%s in %s or add a User line for it in ~/.ssh/config", h.host, h.host, source)}
		}
		ht, err := r.host(h.host, u, h.port, hs)
		if err != nil {
			return err
		}
		if i == 0 {
			j, c, _ := routeOf("", "", hs)
			if err := r.route(ht, j, c, "~/.ssh/config ProxyJump for jump host "+h.host, depth+len(hops)); err != nil {
				return err
			}
		} else {
			ht.via = prev
		}
		prev = ht
	}
	t.via = prev
	return nil
}

// host resolves one host from ~/.ssh/config (hs) and what the caller fixed:
// userName ("" takes the config's User) and port (0 takes the config's
// Port, else 22).
func (r *resolver) host(alias, userName string, port int, hs *hostSettings) (*target, error) {
	var err error
	t := &target{
		alias:          alias,
		home:           r.home,
		connectTimeout: DefaultConnectTimeout,
		keepInterval:   DefaultKeepAliveInterval,
		keepMax:        DefaultKeepAliveMax,
		agentSock:      r.agentSock,
		unsupported:    hs.unsupported,
	}
	t.host = alias
	if hn := hs.get("hostname"); hn != "" {
		if t.host, err = expandTokens(hn, map[byte]string{'h': alias}); err != nil {
			return nil, err
		}
	}
	if userName == "" {
		userName = hs.get("user")
	}
	t.user = userName
	t.port = port
	if p := hs.get("port"); p != "" && t.port == 0 {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return nil, &ConfigError{Msg: fmt.Sprintf("~/.ssh/config: bad Port %q for host %s", p, alias)}
		}
		t.port = n
	}
	if t.port == 0 {
		t.port = 22
	}
	tokens := map[byte]string{'d': r.home, 'h': t.host, 'n': alias, 'p': strconv.Itoa(t.port), 'r': t.user, 'u': r.localUser}
	expandPath := func(p string) (string, error) {
		p, err := expandTokens(p, tokens)
		if err != nil {
			return "", err
		}
		p = expandTilde(p, r.home)
		if !filepath.IsAbs(p) {
			p = filepath.Join(r.home, p)
		}
		return p, nil
	}
	if r.sshKey != "" {
		if t.sshKey, err = expandPath(r.sshKey); err != nil {
			return nil, err
		}
	}
	for _, f := range hs.identityFiles {
		p, err := expandPath(f)
		if err != nil {
			return nil, err
		}
		t.identityFiles = append(t.identityFiles, p)
	}
	t.identitiesOnly = strings.EqualFold(hs.get("identitiesonly"), "yes")
	for _, f := range hs.knownHosts {
		if strings.EqualFold(f, "none") {
			continue
		}
		p, err := expandPath(f)
		if err != nil {
			return nil, err
		}
		t.knownHosts = append(t.knownHosts, p)
	}
	if len(t.knownHosts) == 0 {
		t.knownHosts = []string{filepath.Join(r.sshDir, "known_hosts")}
	}
	t.hashKnownHosts = strings.EqualFold(hs.get("hashknownhosts"), "yes")
	t.refuseUnknown = strings.EqualFold(hs.get("stricthostkeychecking"), "yes")
	if v := hs.get("connecttimeout"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return nil, &ConfigError{Msg: fmt.Sprintf("~/.ssh/config: bad ConnectTimeout %q", v)}
		}
		t.connectTimeout = time.Duration(n) * time.Second
	}
	if v := hs.get("serveraliveinterval"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, &ConfigError{Msg: fmt.Sprintf("~/.ssh/config: bad ServerAliveInterval %q", v)}
		}
		if n > 0 { // 0 would disable keep-alives; berth always keeps them
			t.keepInterval = time.Duration(n) * time.Second
		}
	}
	if v := hs.get("serveralivecountmax"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return nil, &ConfigError{Msg: fmt.Sprintf("~/.ssh/config: bad ServerAliveCountMax %q", v)}
		}
		t.keepMax = n
	}
	return t, nil
}

// transportConn records that reading the transport failed. The SSH mux stops
// on that error and closes every channel before the client reports its end,
// so a channel closing on a broken transport is known to be cut short
// without waiting for the client to wind down.
type transportConn struct {
	net.Conn
	broken atomic.Bool
}

func (c *transportConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil {
		c.broken.Store(true)
	}
	return n, err
}

// conn is one SSH connection and its keep-alive loop.
type conn struct {
	transport *transportConn
	under     io.Closer // the jump host connection carrying transport, or nil
	client    *gossh.Client
	done      chan struct{} // closed when the connection has ended
	err       error         // why it ended; set before done is closed
	version   string        // server version string
	hostKey   gossh.PublicKey
	newHost   bool // the host key was recorded by this dial

	mu        sync.Mutex
	closeWhy  error // set by the keep-alive loop or Close before closing
	full      bool  // the server refused a session channel (MaxSessions)
	nchannels int   // open channels, the sftp channel included

	sftpMu      sync.Mutex // serialises opening the sftp channel
	sftp        *sftpChan  // the SFTP client on this connection, once opened
	sftpRefused error      // set when the server refused the sftp subsystem
	sftpUsers   int        // WriteFile calls using an sftp client of c
}

func (c *conn) alive() bool {
	if c.transport.broken.Load() {
		return false
	}
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// closeWith closes the connection recording why.
func (c *conn) closeWith(why error) {
	c.mu.Lock()
	if c.closeWhy == nil {
		c.closeWhy = why
	}
	c.mu.Unlock()
	c.client.Close()
	c.closeUnder()
}

// closeUnder closes the jump host connections under c.
func (c *conn) closeUnder() {
	if c.under != nil {
		c.under.Close()
	}
}

// deathError describes why the connection ended.
func (c *conn) deathError() error {
	c.mu.Lock()
	why := c.closeWhy
	c.mu.Unlock()
	if why != nil {
		return why
	}
	select {
	case <-c.done: // c.err is set
		if pc, ok := c.transport.Conn.(*proxyConn); ok {
			if pe := pc.failure(c.err); pe != nil {
				return fmt.Errorf("connection lost: %w", pe)
			}
		}
		if c.err != nil && !errors.Is(c.err, net.ErrClosed) {
			return fmt.Errorf("connection lost: %w", c.err)
		}
	default:
	}
	return errors.New("connection lost")
}

// keyCandidate is one key berth may offer.
type keyCandidate struct {
	signer gossh.Signer
	desc   string
}

// collectSigners gathers the keys to offer, in order: ssh_key, IdentityFile
// entries, ssh-agent keys, then the default identity files (only when
// neither ssh_key nor IdentityFile is set). Passphrase-protected files are
// used through the agent when it holds them and skipped otherwise.
func collectSigners(t *target, log *slog.Logger) (keys []keyCandidate, notes []string, closeAgent func(), err error) {
	closeAgent = func() {}
	var agentSigners []gossh.Signer
	if t.agentSock != "" {
		ac, derr := net.DialTimeout("unix", t.agentSock, 2*time.Second)
		if derr != nil {
			log.Debug("ssh: ssh-agent not reachable", "socket", t.agentSock, "err", derr)
			notes = append(notes, fmt.Sprintf("ssh-agent at %s: %v", t.agentSock, derr))
		} else {
			closeAgent = func() { ac.Close() }
			agentSigners, derr = agent.NewClient(ac).Signers()
			if derr != nil {
				log.Debug("ssh: list ssh-agent keys", "err", derr)
				notes = append(notes, fmt.Sprintf("ssh-agent: %v", derr))
			}
		}
	}
	seen := map[string]bool{}
	add := func(s gossh.Signer, desc string) {
		k := string(s.PublicKey().Marshal())
		if seen[k] {
			return
		}
		seen[k] = true
		keys = append(keys, keyCandidate{s, fmt.Sprintf("%s (%s %s)", desc, s.PublicKey().Type(), gossh.FingerprintSHA256(s.PublicKey()))})
	}
	fromAgent := func(pub gossh.PublicKey) gossh.Signer {
		if pub == nil {
			return nil
		}
		for _, s := range agentSigners {
			if string(s.PublicKey().Marshal()) == string(pub.Marshal()) {
				return s
			}
		}
		return nil
	}
	useFile := func(path, desc string, required bool) error {
		s, pub, err := loadKeyFile(path)
		switch {
		case err == nil:
			add(s, desc)
		case errors.Is(err, errKeyEncrypted):
			if as := fromAgent(pub); as != nil {
				add(as, desc+" via ssh-agent")
				return nil
			}
			notes = append(notes, fmt.Sprintf("%s is protected by a passphrase and ssh-agent does not hold it (run ssh-add %s)", path, path))
		case required:
			return fmt.Errorf("ssh backend: terminal.ssh_key (TERMINAL_SSH_KEY): %w", err)
		case os.IsNotExist(err):
			log.Debug("ssh: identity file missing", "path", path)
		default:
			notes = append(notes, fmt.Sprintf("%s: %v", path, err))
		}
		return nil
	}
	explicit := false
	if t.sshKey != "" {
		explicit = true
		if err := useFile(t.sshKey, "ssh_key "+t.sshKey, true); err != nil {
			closeAgent()
			return nil, nil, func() {}, err
		}
	}
	for _, f := range t.identityFiles {
		explicit = true
		_ = useFile(f, "IdentityFile "+f, false)
	}
	if !t.identitiesOnly {
		for _, s := range agentSigners {
			desc := "ssh-agent key"
			if k, ok := s.PublicKey().(*agent.Key); ok && k.Comment != "" {
				desc += " " + k.Comment
			}
			add(s, desc)
		}
		if !explicit {
			for _, name := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
				p := filepath.Join(t.home, ".ssh", name)
				_ = useFile(p, p, false)
			}
		}
	}
	return keys, notes, closeAgent, nil
}

var errKeyEncrypted = errors.New("private key is protected by a passphrase")

// loadKeyFile parses a private key file. For a passphrase-protected key it
// returns errKeyEncrypted and, when known, the public key (so the agent can
// be asked for it).
func loadKeyFile(path string) (gossh.Signer, gossh.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	s, err := gossh.ParsePrivateKey(data)
	if err == nil {
		return s, s.PublicKey(), nil
	}
	var pm *gossh.PassphraseMissingError
	if errors.As(err, &pm) {
		pub := pm.PublicKey
		if pub == nil {
			if pd, rerr := os.ReadFile(path + ".pub"); rerr == nil {
				pub, _, _, _, _ = gossh.ParseAuthorizedKey(pd)
			}
		}
		return nil, pub, errKeyEncrypted
	}
	return nil, nil, fmt.Errorf("parse private key %s: %w", path, err)
}

// dial opens and authenticates one connection to t over its route (jump
// hosts, a proxy command or TCP) and starts its keep-alives.
func dial(ctx context.Context, t *target, log *slog.Logger) (*conn, error) {
	start := time.Now()
	h, err := handshake(ctx, t, log)
	if err != nil {
		return nil, err
	}
	c := &conn{
		transport: h.tc,
		under:     h.under,
		client:    gossh.NewClient(h.sc, h.chans, h.reqs),
		done:      make(chan struct{}),
		version:   string(h.sc.ServerVersion()),
		hostKey:   h.hk.key,
		newHost:   h.hk.recorded,
	}
	go func() {
		c.err = c.client.Wait()
		// The route goes with the connection: the jump hosts' connections
		// are closed and a proxy command is killed and reaped.
		c.transport.Close()
		c.closeUnder()
		close(c.done)
	}()
	go c.keepAlive(t.keepInterval, t.keepMax, log)
	log.Debug("ssh: connected", "target", t.String(), "route", routeString(t), "server", c.version, "took", time.Since(start))
	return c, nil
}

// handshaken is an authenticated SSH connection not yet wrapped in a client.
type handshaken struct {
	tc    *transportConn
	sc    gossh.Conn
	chans <-chan gossh.NewChannel
	reqs  <-chan *gossh.Request
	hk    *hostKeyChecker
	under io.Closer // the jump host connection carrying tc; nil when none
}

// jumpLink is a jump host's connection, and what carries it in turn.
type jumpLink struct {
	client *gossh.Client
	under  io.Closer
	once   sync.Once
}

func (j *jumpLink) Close() error {
	j.once.Do(func() {
		j.client.Close()
		if j.under != nil {
			j.under.Close()
		}
	})
	return nil
}

// openTransport opens the byte stream to t: a tunnel (direct-tcpip) through
// the jump host t.via, the stdin/stdout of t.proxyCommand, or a TCP
// connection. under is what carries a tunnel, for the caller to close.
func openTransport(ctx context.Context, t *target, log *slog.Logger) (nc net.Conn, under io.Closer, err error) {
	addr := t.addr()
	switch {
	case t.proxyCommand != "":
		pc, err := startProxyCommand(addr, t.proxyCommand)
		if err != nil {
			return nil, nil, err
		}
		log.Debug("ssh: proxy command started", "host", addr, "command", t.proxyCommand, "pid", pc.cmd.Process.Pid)
		return pc, nil, nil
	case t.via != nil:
		hop := hopName(t.via)
		h, err := handshake(ctx, t.via, log)
		if err != nil {
			var he *HopError
			if errors.As(err, &he) { // a hop before this one failed
				return nil, nil, err
			}
			return nil, nil, &HopError{Hop: hop, Err: err}
		}
		jl := &jumpLink{client: gossh.NewClient(h.sc, h.chans, h.reqs), under: h.under}
		nc, err := jl.client.DialContext(ctx, "tcp", addr)
		if err != nil {
			jl.Close()
			if ctx.Err() != nil {
				return nil, nil, &HopError{Hop: hop, Err: fmt.Errorf("open a tunnel to %s: %w", addr, ctx.Err())}
			}
			return nil, nil, &HopError{Hop: hop, Err: &backend.UnreachableError{
				Backend: "ssh",
				Target:  addr + " through it",
				Hint:    "check that the jump host can reach that host and port and that its sshd allows forwarding there (AllowTcpForwarding, PermitOpen)",
				Err:     err,
			}}
		}
		log.Debug("ssh: tunnel open", "jump", hop, "to", addr)
		return nc, jl, nil
	default:
		d := net.Dialer{Timeout: t.connectTimeout}
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, nil, &backend.UnreachableError{
				Backend: "ssh",
				Target:  addr,
				Hint:    "check that sshd runs there and that terminal.ssh_host/ssh_port (TERMINAL_SSH_HOST/TERMINAL_SSH_PORT) or ~/.ssh/config HostName/Port are right",
				Err:     err,
			}
		}
		return nc, nil, nil
	}
}

// handshake opens t's transport and runs the SSH handshake and
// authentication with the host-key and key rules, within t.connectTimeout.
func handshake(ctx context.Context, t *target, log *slog.Logger) (*handshaken, error) {
	addr := t.addr()
	unreachable := func(err error) error {
		return &backend.UnreachableError{
			Backend: "ssh",
			Target:  addr,
			Hint:    "check that sshd runs there and that terminal.ssh_host/ssh_port (TERMINAL_SSH_HOST/TERMINAL_SSH_PORT) or ~/.ssh/config HostName/Port are right",
			Err:     err,
		}
	}
	hk, err := newHostKeyChecker(t.knownHosts, t.hashKnownHosts, t.refuseUnknown, log)
	if err != nil {
		return nil, err
	}
	keys, notes, closeAgent, err := collectSigners(t, log)
	if err != nil {
		return nil, err
	}
	defer closeAgent()
	signers := make([]gossh.Signer, len(keys))
	tried := make([]string, len(keys))
	for i, k := range keys {
		signers[i], tried[i] = k.signer, k.desc
	}
	cfg := &gossh.ClientConfig{
		User:              t.user,
		HostKeyCallback:   hk.check,
		HostKeyAlgorithms: hk.knownKeyAlgorithms(addr),
		ClientVersion:     "SSH-2.0-berth",
		Timeout:           t.connectTimeout,
		BannerCallback: func(msg string) error {
			log.Debug("ssh: server banner", "banner", strings.TrimSpace(msg))
			return nil
		},
	}
	if len(signers) > 0 {
		cfg.Auth = []gossh.AuthMethod{gossh.PublicKeys(signers...)}
	}

	deadline := time.Now().Add(t.connectTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	nc, under, err := openTransport(ctx, t, log)
	if err != nil {
		return nil, err
	}
	closeAll := func() {
		nc.Close()
		if under != nil {
			under.Close()
		}
	}
	// A tunnel has no deadlines: the handshake is bounded by closing the
	// transport, which works for every kind.
	var cut atomic.Int32 // 1: the deadline passed, 2: ctx was cancelled
	timer := time.AfterFunc(time.Until(deadline), func() {
		cut.CompareAndSwap(0, 1)
		nc.Close()
	})
	stop := context.AfterFunc(ctx, func() {
		cut.CompareAndSwap(0, 2)
		nc.Close()
	})
	tc := &transportConn{Conn: nc}
	sc, chans, reqs, err := gossh.NewClientConn(tc, addr, cfg)
	timerStopped, ctxStopped := timer.Stop(), stop()
	if err == nil && (!timerStopped || !ctxStopped) {
		sc.Close() // cut just as the handshake finished
		err = net.ErrClosed
	}
	if err == nil {
		return &handshaken{tc: tc, sc: sc, chans: chans, reqs: reqs, hk: hk, under: under}, nil
	}
	closeAll() // a proxy command is reaped, and says why it ended
	var pcErr *ProxyCommandError
	if pc, ok := nc.(*proxyConn); ok && cut.Load() == 0 {
		pcErr = pc.failure(nil)
	}
	var out error
	var ne net.Error
	switch {
	case hk.err != nil:
		return nil, hk.err
	case cut.Load() == 2 || ctx.Err() != nil:
		out = fmt.Errorf("ssh backend: connect to %s: %w", addr, ctx.Err())
	case cut.Load() == 1 || errors.As(err, &ne) && ne.Timeout():
		out = unreachable(fmt.Errorf("no SSH handshake within %s: %w", t.connectTimeout, err))
	case strings.Contains(err.Error(), "unable to authenticate"):
		return nil, &AuthError{Target: t.String(), Tried: tried, Notes: notes, Err: err}
	case errors.Is(err, io.EOF) || strings.Contains(err.Error(), "connection reset"):
		out = unreachable(fmt.Errorf("server closed the connection during the SSH handshake: %w", err))
	default:
		out = fmt.Errorf("ssh backend: handshake with %s: %w", addr, err)
	}
	if pcErr != nil {
		pcErr.Err, pcErr.cause = out, err
		return nil, pcErr
	}
	return nil, out
}

// keepAlive sends keepalive@openssh.com every interval and closes the
// connection after max consecutive intervals without a reply, so that a dead
// link fails pending reads and Waits instead of hanging them.
func (c *conn) keepAlive(interval time.Duration, max int, log *slog.Logger) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var pending chan struct{}
	misses := 0
	for {
		select {
		case <-c.done:
			return
		case <-tick.C:
		}
		if pending != nil {
			select {
			case <-pending:
				pending, misses = nil, 0
			default:
				misses++
				if misses >= max {
					why := fmt.Errorf("connection lost: no reply to %d keep-alives sent %s apart", max, interval)
					log.Warn("ssh: "+why.Error(), "server", c.version)
					c.closeWith(why)
					return
				}
				continue
			}
		}
		p := make(chan struct{})
		pending = p
		go func() {
			// Any reply, even "request failed", proves the link is alive.
			_, _, _ = c.client.SendRequest("keepalive@openssh.com", true, nil)
			close(p)
		}()
	}
}
