package ssh

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	gossh "golang.org/x/crypto/ssh"
)

// The tests in this file force the order of the events that decide how a
// process or a proxied connection ended, instead of hoping a real sshd or
// relay produces each order some of the time: berth's answer must follow
// from the facts, whichever of its goroutines learns them first.

// fakeSSHD is an SSH server in the test process whose session channels the
// test drives by hand: what it sends on a channel (output, exit-status,
// EOF, close) and when the connection drops are the test's to choose.
type fakeSSHD struct {
	ln       net.Listener
	home     string // HOME for the client, with .ssh and the client key
	keyPath  string
	sessions chan *fakeSession
}

// fakeSession is one exec'd session channel.
type fakeSession struct {
	ch   gossh.Channel
	conn net.Conn // the TCP connection carrying it
}

// drop cuts the TCP connection under the session, as a network failure
// or a killed sshd does: nothing more arrives.
func (s *fakeSession) drop() { s.conn.Close() }

func (s *fakeSession) exitStatus(t *testing.T, code uint32) {
	t.Helper()
	if _, err := s.ch.SendRequest("exit-status", false, gossh.Marshal(exitStatusMsg{Status: code})); err != nil {
		t.Fatal(err)
	}
}

func (s *fakeSession) exitSignal(t *testing.T, sig string) {
	t.Helper()
	if _, err := s.ch.SendRequest("exit-signal", false, gossh.Marshal(exitSignalMsg{Signal: sig})); err != nil {
		t.Fatal(err)
	}
}

func startFakeSSHD(t *testing.T) *fakeSSHD {
	t.Helper()
	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	hostSigner, err := gossh.NewSignerFromKey(hostPriv)
	if err != nil {
		t.Fatal(err)
	}
	_, userPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	userSigner, err := gossh.NewSignerFromKey(userPriv)
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	block, err := gossh.MarshalPrivateKey(userPriv, "")
	if err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(home, "user_key")
	writeFile(t, keyPath, string(pem.EncodeToMemory(block)))
	cfg := &gossh.ServerConfig{
		PublicKeyCallback: func(_ gossh.ConnMetadata, k gossh.PublicKey) (*gossh.Permissions, error) {
			if string(k.Marshal()) == string(userSigner.PublicKey().Marshal()) {
				return nil, nil
			}
			return nil, errors.New("unknown key")
		},
	}
	cfg.AddHostKey(hostSigner)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeSSHD{ln: ln, home: home, keyPath: keyPath, sessions: make(chan *fakeSession, 16)}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, chans, reqs, err := gossh.NewServerConn(nc, cfg)
				if err != nil {
					nc.Close()
					return
				}
				go gossh.DiscardRequests(reqs)
				for nch := range chans {
					if nch.ChannelType() != "session" {
						nch.Reject(gossh.UnknownChannelType, "only sessions")
						continue
					}
					ch, creqs, err := nch.Accept()
					if err != nil {
						continue
					}
					go func() {
						for r := range creqs {
							ok := r.Type == "exec" || r.Type == "env"
							if r.WantReply {
								r.Reply(ok, nil)
							}
							if r.Type == "exec" {
								f.sessions <- &fakeSession{ch: ch, conn: nc}
							}
						}
					}()
				}
			}()
		}
	}()
	return f
}

// backend connects a fresh backend to the fake server.
func (f *fakeSSHD) backend(t *testing.T) *Backend {
	t.Helper()
	cfg := config.Default().Terminal
	cfg.Backend = Name
	addr := f.ln.Addr().(*net.TCPAddr)
	mustSet(&cfg, keyHost, "127.0.0.1")
	mustSet(&cfg, keyUser, "tester")
	mustSet(&cfg, keyPort, addr.Port)
	mustSet(&cfg, keyKey, f.keyPath)
	env := map[string]string{"HOME": f.home}
	return newTestBackend(t, backend.Options{Key: "test", Config: cfg, Getenv: func(k string) string { return env[k] }})
}

// start starts a process and returns it with its server side.
func (f *fakeSSHD) start(t *testing.T, b *Backend) (backend.Process, *fakeSession) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := b.Start(ctx, sh("true"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	select {
	case s := <-f.sessions:
		return p, s
	case <-time.After(10 * time.Second):
		t.Fatal("the fake sshd got no exec request")
		return nil, nil
	}
}

type waitResult struct {
	code int
	err  error
}

type readResult struct {
	out string
	err error
}

func waitAsync(p backend.Process) chan waitResult {
	c := make(chan waitResult, 1)
	go func() {
		code, err := p.Wait()
		c <- waitResult{code, err}
	}()
	return c
}

func readAsync(p backend.Process) chan readResult {
	c := make(chan readResult, 1)
	go func() {
		out, err := io.ReadAll(p.Stdout())
		c <- readResult{string(out), err}
	}()
	return c
}

func await[T any](t *testing.T, c chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return", what)
		var zero T
		return zero
	}
}

// The connection drops while the command runs and before any exit status:
// Wait and Stdout both fail, naming the lost connection; the output that
// arrived before is delivered.
func TestOrderDropBeforeStatus(t *testing.T) {
	f := startFakeSSHD(t)
	p, s := f.start(t, f.backend(t))
	out := readAsync(p)
	if _, err := s.ch.Write([]byte("partial\n")); err != nil {
		t.Fatal(err)
	}
	s.drop()
	w := await(t, waitAsync(p), "Wait")
	if w.err == nil || !strings.Contains(w.err.Error(), "connection lost") {
		t.Fatalf("Wait after the drop: %d, %v; want a lost connection error", w.code, w.err)
	}
	r := await(t, out, "Stdout")
	if r.out != "partial\n" || r.err == nil || !strings.Contains(r.err.Error(), "cut short") {
		t.Fatalf("Stdout after the drop: %q, %v; want the partial output and a cut-short error", r.out, r.err)
	}
}

// The remote shell's death is reported (exit-signal KILL) and only then
// does the connection drop, before the channel's end: Wait has the status,
// and Stdout fails (the output may be incomplete), so a session counts the
// shell as lost, not as a command that exited 137.
func TestOrderStatusThenDrop(t *testing.T) {
	f := startFakeSSHD(t)
	p, s := f.start(t, f.backend(t))
	out := readAsync(p)
	if _, err := s.ch.Write([]byte("partial\n")); err != nil {
		t.Fatal(err)
	}
	s.exitSignal(t, "KILL")
	w := await(t, waitAsync(p), "Wait") // the status is in before the drop
	if w.code != 137 || w.err != nil {
		t.Fatalf("Wait after exit-signal KILL: %d, %v; want 137", w.code, w.err)
	}
	s.drop()
	r := await(t, out, "Stdout")
	if r.out != "partial\n" || r.err == nil || !strings.Contains(r.err.Error(), "cut short") {
		t.Fatalf("Stdout after status then drop: %q, %v; want the partial output and a cut-short error", r.out, r.err)
	}
}

// The server finishes cleanly (status, EOF, close) and the connection
// drops only after berth saw the channel end: the command's outcome stands.
func TestOrderCleanEndThenDrop(t *testing.T) {
	f := startFakeSSHD(t)
	p, s := f.start(t, f.backend(t))
	out := readAsync(p)
	if _, err := s.ch.Write([]byte("all of it\n")); err != nil {
		t.Fatal(err)
	}
	s.exitStatus(t, 3)
	s.ch.CloseWrite()
	s.ch.Close()
	r := await(t, out, "Stdout")
	w := await(t, waitAsync(p), "Wait")
	s.drop()
	if r.out != "all of it\n" || r.err != nil || w.code != 3 || w.err != nil {
		t.Fatalf("clean end: output %q %v, status %d %v; want the output, EOF and 3", r.out, r.err, w.code, w.err)
	}
	if code, err := p.Wait(); code != 3 || err != nil {
		t.Fatalf("Wait again after the later drop: %d, %v", code, err)
	}
}

// The server closes the channel without an exit status while the
// connection stays up: Wait says so at once, whatever happens to the
// connection later (it used to wait 200 ms for the connection to die and
// then call it lost: the answer depended on timing).
func TestOrderCloseWithoutStatus(t *testing.T) {
	f := startFakeSSHD(t)
	p, s := f.start(t, f.backend(t))
	out := readAsync(p)
	s.ch.Close()
	w := await(t, waitAsync(p), "Wait")
	if w.err == nil || !strings.Contains(w.err.Error(), "without reporting an exit status") {
		t.Fatalf("Wait after a close without status: %d, %v", w.code, w.err)
	}
	if r := await(t, out, "Stdout"); r.err != nil {
		t.Fatalf("Stdout after a clean close: %q, %v; want io.EOF", r.out, r.err)
	}
	s.drop()
	if _, err := p.Wait(); err == nil || strings.Contains(err.Error(), "connection lost") {
		t.Fatalf("Wait changed its answer after the connection dropped: %v", err)
	}
}

// relay starts a relay that closes the given end of the transport (stdin
// or stdout), says why on stderr, then blocks until the test releases it
// and exits 7: the transport is broken while the command is still alive,
// the state berth sees when it notices the end before the command is
// reaped. The test holds the FIFO open for reading and writing, so
// neither the relay's open nor the release ever blocks.
func relay(t *testing.T, closes string) (*proxyConn, func()) {
	t.Helper()
	fifo := filepath.Join(t.TempDir(), "go")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	hold, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hold.Close() })
	cmd := fmt.Sprintf(`sh -c 'exec %s; echo "relay: no route" >&2; read x <%s; exit 7'`, closes, fifo)
	pc, err := startProxyCommand("127.0.0.1:22", cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc, func() { hold.Write([]byte("go\n")) }
}

// closeAndRelease closes pc while the relay still runs, and lets the relay
// exit once Close waits for it; it returns the failure Close leaves.
func closeAndRelease(t *testing.T, pc *proxyConn, release func()) *ProxyCommandError {
	t.Helper()
	pc.onGrace = release
	closed := make(chan struct{})
	go func() { pc.Close(); close(closed) }()
	await(t, closed, "Close")
	return pc.failure(errors.New("handshake failed"))
}

func checkRelayFailure(t *testing.T, pe *ProxyCommandError) {
	t.Helper()
	if pe == nil {
		t.Fatal("no ProxyCommandError: the relay's own end was taken for berth's kill")
	}
	if pe.Status != "exit status 7" || !strings.Contains(pe.Stderr, "relay: no route") {
		t.Fatalf("relay failure: status %q, stderr %q; want exit status 7 and its message", pe.Status, pe.Stderr)
	}
}

// A write to the relay fails (EPIPE) before it has exited, the order the
// SSH handshake meets when it writes its version first: the relay's own
// status and stderr are reported, not "write |1: broken pipe".
func TestProxyOrderWriteFailsFirst(t *testing.T) {
	pc, release := relay(t, "0<&-")
	for {
		if _, err := pc.Write([]byte("SSH-2.0-berth\r\n")); err != nil {
			break // EPIPE once the relay has closed its stdin
		}
		time.Sleep(time.Millisecond)
	}
	checkRelayFailure(t, closeAndRelease(t, pc, release))
}

// A read from the relay ends (EOF) before it has exited.
func TestProxyOrderReadEndsFirst(t *testing.T) {
	pc, release := relay(t, ">&-")
	if _, err := io.ReadAll(pc); err != nil {
		t.Fatal(err)
	}
	checkRelayFailure(t, closeAndRelease(t, pc, release))
}

// The relay has exited and been reaped before berth touches the
// transport.
func TestProxyOrderReapedFirst(t *testing.T) {
	pc, err := startProxyCommand("127.0.0.1:22", `sh -c 'echo "relay: no route" >&2; exit 7'`)
	if err != nil {
		t.Fatal(err)
	}
	await(t, pc.exited, "the relay's exit")
	pc.Write([]byte("SSH-2.0-berth\r\n"))
	pc.Close()
	checkRelayFailure(t, pc.failure(errors.New("handshake failed")))
}

// A relay that berth has to kill (it still runs when the connection ends)
// is no failure of its own.
func TestProxyKilledIsNoFailure(t *testing.T) {
	pc, err := startProxyCommand("127.0.0.1:22", `sleep 60`)
	if err != nil {
		t.Fatal(err)
	}
	pc.Close()
	if pe := pc.failure(nil); pe != nil {
		t.Fatalf("a relay killed by Close reported as failed: %v", pe)
	}
}
