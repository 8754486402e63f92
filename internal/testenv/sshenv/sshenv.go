// Package sshenv starts a private OpenSSH sshd on 127.0.0.1 for tests: a free
// port, a throwaway host key, a throwaway user key authorized for the current
// user, and a temporary HOME (with an empty ~/.ssh) for the client side, so
// tests never touch the real ~/.ssh or the system sshd.
//
// Start skips the test unless BERTH_TEST_ENGINES selects ssh, and fails it
// when ssh is selected and /usr/sbin/sshd is missing (run
// scripts/ensure-sshd.sh to install it); see package testenv.
package sshenv

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/a55dbaac/berth/internal/testenv"
)

// SSHDPath is the sshd binary the package runs.
const SSHDPath = "/usr/sbin/sshd"

// Server is a running private sshd.
type Server struct {
	Host    string          // "127.0.0.1"
	Port    int             // the port sshd listens on
	User    string          // the current user, authorized with the user key
	KeyPath string          // the user's private key (OpenSSH format, no passphrase), outside Home
	Signer  gossh.Signer    // the user key
	HostKey gossh.PublicKey // the server's current host key
	Home    string          // a temporary HOME for the client, with an empty .ssh (0700)
	Dir     string          // the server's private directory (config, keys, pid file)

	hostKeyPath string
	configPath  string
	noSFTP      bool
	setEnv      []string // more SetEnv NAME=value entries
	forwarding  []string // PermitOpen targets; nil: no TCP forwarding

	mu  sync.Mutex
	cmd *exec.Cmd
	log *syncBuffer
	// exited is closed when the current sshd process has been reaped.
	exited chan struct{}
}

// Available reports why sshd cannot be used here, or nil.
func Available() error {
	if _, err := os.Stat(SSHDPath); err != nil {
		return fmt.Errorf("%s not found (run scripts/ensure-sshd.sh): %w", SSHDPath, err)
	}
	return nil
}

// Option configures the sshd that Start runs.
type Option func(*Server)

// WithoutSFTP runs sshd without a "Subsystem sftp" line, like a server that
// offers no SFTP: it refuses every request for the sftp subsystem.
func WithoutSFTP() Option {
	return func(s *Server) { s.noSFTP = true }
}

// WithSetEnv adds NAME=value entries to the server's SetEnv line: every
// session starts with them, PATH included (sshd applies SetEnv after its
// default PATH), as on a host whose tools differ from this one's.
func WithSetEnv(kv ...string) Option {
	return func(s *Server) { s.setEnv = append(s.setEnv, kv...) }
}

// WithForwarding makes the server a jump host: it accepts direct-tcpip
// channels (AllowTcpForwarding local) to the given "host:port" targets only
// (PermitOpen), or to any target when none is given. Without it the server
// refuses every forwarding.
func WithForwarding(permitOpen ...string) Option {
	return func(s *Server) {
		s.forwarding = append([]string{}, permitOpen...)
		if len(s.forwarding) == 0 {
			s.forwarding = []string{"any"}
		}
	}
}

// Start starts sshd and stops it (and every process it started that is still
// in its process tree) in t.Cleanup. By default sshd offers SFTP through
// internal-sftp.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	testenv.Need(t, testenv.SSH, Available)
	u, err := user.Current()
	if err != nil {
		t.Fatalf("sshenv: current user: %v", err)
	}
	dir := t.TempDir()
	s := &Server{
		Host:        "127.0.0.1",
		User:        u.Username,
		Dir:         dir,
		Home:        filepath.Join(dir, "home"),
		KeyPath:     filepath.Join(dir, "user_ed25519"),
		hostKeyPath: filepath.Join(dir, "host_ed25519"),
		configPath:  filepath.Join(dir, "sshd_config"),
		log:         &syncBuffer{},
	}
	for _, o := range opts {
		o(s)
	}
	if err := os.MkdirAll(filepath.Join(s.Home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	signer, err := writeKey(s.KeyPath)
	if err != nil {
		t.Fatalf("sshenv: user key: %v", err)
	}
	s.Signer = signer
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), gossh.MarshalAuthorizedKey(signer.PublicKey()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.newHostKey(); err != nil {
		t.Fatalf("sshenv: host key: %v", err)
	}
	// sshd refuses to start without its privilege separation directory.
	_ = os.MkdirAll("/run/sshd", 0o755)

	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("sshenv: free port: %v", err)
		}
		s.Port = port
		if lastErr = s.start(); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		t.Fatalf("sshenv: start sshd: %v\n%s", lastErr, s.log.String())
	}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("sshd log:\n%s", s.Log())
		}
	})
	return s
}

// Addr returns "127.0.0.1:port".
func (s *Server) Addr() string { return net.JoinHostPort(s.Host, strconv.Itoa(s.Port)) }

// Log returns what sshd has logged so far (-e, LogLevel VERBOSE).
func (s *Server) Log() string { return s.log.String() }

// AuthorizeKey adds a public key to the server's authorized_keys.
func (s *Server) AuthorizeKey(pub gossh.PublicKey) error {
	f, err := os.OpenFile(filepath.Join(s.Dir, "authorized_keys"), os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Write(gossh.MarshalAuthorizedKey(pub))
	return err
}

// Restart stops sshd (dropping every connection) and starts it again on the
// same port with the same host key.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	if err := s.start(); err != nil {
		t.Fatalf("sshenv: restart sshd: %v\n%s", err, s.Log())
	}
}

// RestartWithNewHostKey restarts sshd on the same port with a freshly
// generated host key (of the same type), as after a re-key or a MITM.
func (s *Server) RestartWithNewHostKey(t testing.TB) {
	t.Helper()
	s.Stop()
	if err := s.newHostKey(); err != nil {
		t.Fatalf("sshenv: new host key: %v", err)
	}
	if err := s.start(); err != nil {
		t.Fatalf("sshenv: restart sshd: %v\n%s", err, s.Log())
	}
}

// DropConnections cuts every connection as a network failure would: the
// server side sends nothing more, not even what the death of a session's
// processes would make it report. Clients see their connections end
// without an exit status for what ran, while the server keeps accepting
// new ones.
//
// It stops (SIGSTOP) every process below the listening sshd, listing them
// again until no new one appears, and only then kills them (SIGKILL), the
// per-connection sshd processes first. Killing them in one pass, children
// first, let an sshd that was still running see its shell die and send
// exit-signal KILL (and, its output closed, the channel's end) before its
// own SIGKILL landed: under load a client then got "exit 137" instead of a
// lost connection, depending on scheduling.
func (s *Server) DropConnections(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		t.Fatal("sshenv: DropConnections: sshd is not running")
	}
	stopped := map[int]bool{}
	var order []int // parents before children
	for round := 0; round < 50; round++ {
		var fresh []int
		for _, pid := range ancestorsFirst(cmd.Process.Pid) {
			if !stopped[pid] {
				fresh = append(fresh, pid)
			}
		}
		if len(fresh) == 0 {
			break
		}
		for _, pid := range fresh {
			_ = syscall.Kill(pid, syscall.SIGSTOP)
			stopped[pid] = true
		}
		order = append(order, fresh...)
	}
	for _, pid := range order {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// ancestorsFirst returns every process below pid, parents before their
// children.
func ancestorsFirst(pid int) []int {
	d := descendants(pid) // deepest first
	slices.Reverse(d)
	return d
}

// FreezeConnections stops (SIGSTOP) every process below the listening sshd,
// so established connections go silent as on a dead link; thaw resumes them.
func (s *Server) FreezeConnections(t testing.TB) (thaw func()) {
	t.Helper()
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		t.Fatal("sshenv: FreezeConnections: sshd is not running")
	}
	pids := descendants(cmd.Process.Pid)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	return func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
}

// Stop kills sshd and every process still in its tree. It is idempotent.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	// Freeze the listener first so it forks nothing new, then kill the tree.
	_ = cmd.Process.Signal(syscall.SIGSTOP)
	for _, pid := range descendants(cmd.Process.Pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = cmd.Process.Kill()
	<-exited
}

func (s *Server) newHostKey() error {
	signer, err := writeKey(s.hostKeyPath)
	if err != nil {
		return err
	}
	s.HostKey = signer.PublicKey()
	return nil
}

func (s *Server) writeConfig() error {
	sftp := "Subsystem sftp internal-sftp"
	if s.noSFTP {
		sftp = "# no Subsystem sftp"
	}
	forward := []string{"AllowTcpForwarding no"}
	if s.forwarding != nil {
		forward = []string{"AllowTcpForwarding local", "PermitOpen " + strings.Join(s.forwarding, " ")}
	}
	cfg := strings.Join(append([]string{
		"ListenAddress " + s.Addr(),
		"HostKey " + s.hostKeyPath,
		"AuthorizedKeysFile " + filepath.Join(s.Dir, "authorized_keys"),
		"PidFile " + filepath.Join(s.Dir, "sshd.pid"),
		"StrictModes no",
		"PubkeyAuthentication yes",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"PermitRootLogin prohibit-password",
		"UsePAM no",
		"PrintMotd no",
		"PrintLastLog no",
		"MaxStartups 100",
		"LogLevel VERBOSE",
		sftp,
		// Bash sources ~/.bashrc for commands run by sshd when it is a
		// top-level shell (SHLVL < 2 after its increment). The test user's
		// real dotfiles (here root's) must neither slow sessions down nor
		// print into their output, so sessions start one level deeper.
		"SetEnv " + strings.Join(append([]string{"SHLVL=1"}, s.setEnv...), " "),
	}, append(forward, "")...), "\n")
	return os.WriteFile(s.configPath, []byte(cfg), 0o600)
}

// start runs sshd on s.Port and waits until it answers with an SSH banner.
func (s *Server) start() error {
	if err := s.writeConfig(); err != nil {
		return err
	}
	cmd := exec.Command(SSHDPath, "-D", "-e", "-f", s.configPath)
	cmd.Stdout = s.log
	cmd.Stderr = s.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-exited:
			return fmt.Errorf("sshd exited during start: %s", cmd.ProcessState)
		default:
		}
		if bannerOK(s.Addr()) {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("sshd did not accept connections on %s within 10s", s.Addr())
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	return nil
}

// bannerOK reports whether something at addr speaks SSH.
func bannerOK(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "SSH-")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// writeKey generates an ed25519 key and writes it in OpenSSH format (0600).
func writeKey(path string) (gossh.Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	block, err := gossh.MarshalPrivateKey(priv, "berth test key")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, err
	}
	return gossh.NewSignerFromKey(priv)
}

// descendants returns every process below pid, deepest first, from /proc.
func descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The command name (field 2) is in parentheses and may hold spaces.
		i := bytes.LastIndexByte(data, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(data[i+1:]))
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		children[ppid] = append(children[ppid], p)
	}
	var out []int
	var walk func(int)
	walk = func(p int) {
		for _, c := range children[p] {
			walk(c)
			out = append(out, c)
		}
	}
	walk(pid)
	return out
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// KnownHostsLine returns the known_hosts line that pins the server's
// current host key under its "[127.0.0.1]:port" name.
func (s *Server) KnownHostsLine() string {
	return knownhosts.Line([]string{knownhosts.Normalize(s.Addr())}, s.HostKey)
}

// Netcat returns a command that relays its stdin and stdout to a TCP
// address given as two more words (host port), for ProxyCommand tests:
// busybox's nc applet (scripts/ensure-docker.sh installs busybox-static).
// It skips the test unless BERTH_TEST_ENGINES selects busybox, and fails it
// when busybox is selected and has no nc.
func Netcat(t testing.TB) string {
	t.Helper()
	var nc string
	testenv.Need(t, testenv.BusyBox, func() error {
		var reasons []string
		for _, bb := range []string{"/bin/busybox", "/usr/bin/busybox"} {
			if _, err := os.Stat(bb); err != nil {
				reasons = append(reasons, err.Error())
				continue
			}
			out, err := exec.Command(bb, "--list").Output()
			if err != nil {
				reasons = append(reasons, fmt.Sprintf("%s --list: %v", bb, err))
				continue
			}
			for _, applet := range strings.Fields(string(out)) {
				if applet == "nc" {
					nc = bb + " nc"
					return nil
				}
			}
			reasons = append(reasons, bb+" has no nc applet")
		}
		return fmt.Errorf("no busybox nc for the ProxyCommand relay: %s", strings.Join(reasons, "; "))
	})
	return nc
}
