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

// target is the resolved destination: the berth settings merged with
// ~/.ssh/config for the host.
type target struct {
	alias          string // ssh_host as configured
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

// resolveTarget merges the terminal settings with ~/.ssh/config. Explicit
// berth settings win over the config file (like ssh's -l/-p/-i flags), except
// that ssh_port 22 (the default) yields to a Port from ~/.ssh/config.
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
	sshDir := filepath.Join(home, ".ssh")
	hs, err := readSSHConfig(filepath.Join(sshDir, "config"), sshDir, alias, log)
	if err != nil {
		return nil, fmt.Errorf("ssh backend: %w", err)
	}
	t := &target{
		alias:          alias,
		home:           home,
		connectTimeout: DefaultConnectTimeout,
		keepInterval:   DefaultKeepAliveInterval,
		keepMax:        DefaultKeepAliveMax,
		agentSock:      getenv("SSH_AUTH_SOCK"),
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
	if userName == "" {
		return nil, &ConfigError{Msg: fmt.Sprintf("no user for host %s: set terminal.ssh_user in the config file or the TERMINAL_SSH_USER environment variable (or a User line for the host in ~/.ssh/config)", alias)}
	}
	t.user = userName
	t.port = cfg.Int(keyPort)
	if p := hs.get("port"); p != "" && (t.port == 0 || t.port == 22) {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return nil, &ConfigError{Msg: fmt.Sprintf("~/.ssh/config: bad Port %q for host %s", p, alias)}
		}
		t.port = n
	}
	if t.port == 0 {
		t.port = 22
	}
	if t.port < 0 || t.port > 65535 {
		return nil, &ConfigError{Msg: fmt.Sprintf("bad terminal.ssh_port (TERMINAL_SSH_PORT) %d", t.port)}
	}
	localUser := getenv("USER")
	if localUser == "" {
		if u, err := user.Current(); err == nil {
			localUser = u.Username
		}
	}
	tokens := map[byte]string{'d': home, 'h': t.host, 'n': alias, 'p': strconv.Itoa(t.port), 'r': t.user, 'u': localUser}
	expandPath := func(p string) (string, error) {
		p, err := expandTokens(p, tokens)
		if err != nil {
			return "", err
		}
		p = expandTilde(p, home)
		if !filepath.IsAbs(p) {
			p = filepath.Join(home, p)
		}
		return p, nil
	}
	if sshKey := cfg.String(keyKey); sshKey != "" {
		if t.sshKey, err = expandPath(sshKey); err != nil {
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
		t.knownHosts = []string{filepath.Join(sshDir, "known_hosts")}
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

// dial opens and authenticates one connection and starts its keep-alives.
func dial(ctx context.Context, t *target, log *slog.Logger) (*conn, error) {
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

	start := time.Now()
	d := net.Dialer{Timeout: t.connectTimeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, unreachable(err)
	}
	deadline := start.Add(t.connectTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = nc.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	tc := &transportConn{Conn: nc}
	sc, chans, reqs, err := gossh.NewClientConn(tc, addr, cfg)
	stop()
	if err != nil {
		nc.Close()
		if hk.err != nil {
			return nil, hk.err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("ssh backend: connect to %s: %w", addr, ctx.Err())
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, unreachable(fmt.Errorf("no SSH handshake within %s: %w", t.connectTimeout, err))
		}
		if strings.Contains(err.Error(), "unable to authenticate") {
			return nil, &AuthError{Target: t.String(), Tried: tried, Notes: notes, Err: err}
		}
		if errors.Is(err, io.EOF) || strings.Contains(err.Error(), "connection reset") {
			return nil, unreachable(fmt.Errorf("server closed the connection during the SSH handshake: %w", err))
		}
		return nil, fmt.Errorf("ssh backend: handshake with %s: %w", addr, err)
	}
	_ = nc.SetDeadline(time.Time{})
	c := &conn{
		transport: tc,
		client:    gossh.NewClient(sc, chans, reqs),
		done:      make(chan struct{}),
		version:   string(sc.ServerVersion()),
		hostKey:   hk.key,
		newHost:   hk.recorded,
	}
	go func() {
		c.err = c.client.Wait()
		close(c.done)
	}()
	go c.keepAlive(t.keepInterval, t.keepMax, log)
	log.Debug("ssh: connected", "target", t.String(), "server", c.version, "took", time.Since(start))
	return c, nil
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
