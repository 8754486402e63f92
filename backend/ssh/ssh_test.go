package ssh

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/testenv/sshenv"
	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// testOptions returns options pointing at s with its key and a private HOME.
func testOptions(s *sshenv.Server, env map[string]string) backend.Options {
	if env == nil {
		env = map[string]string{}
	}
	if _, ok := env["HOME"]; !ok {
		env["HOME"] = s.Home
	}
	cfg := config.Default().Terminal
	cfg.Backend = Name
	mustSet(&cfg, keyHost, s.Host)
	mustSet(&cfg, keyUser, s.User)
	mustSet(&cfg, keyPort, s.Port)
	mustSet(&cfg, keyKey, s.KeyPath)
	return backend.Options{Key: "test", Config: cfg, Getenv: func(k string) string { return env[k] }}
}

func newTestBackend(t testing.TB, opts backend.Options) *Backend {
	t.Helper()
	b, err := New(context.Background(), opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	return b
}

type result struct {
	out  string
	code int
	err  error
}

// run starts argv and collects its output and status, failing after 20 s.
func run(t testing.TB, b backend.Backend, spec backend.ProcSpec) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := b.Start(ctx, spec)
	if err != nil {
		return result{err: err}
	}
	defer p.Close()
	p.Stdin().Close()
	done := make(chan result, 1)
	go func() {
		out, rerr := io.ReadAll(p.Stdout())
		code, werr := p.Wait()
		done <- result{string(out), code, errors.Join(rerr, werr)}
	}()
	select {
	case r := <-done:
		return r
	case <-time.After(20 * time.Second):
		t.Fatalf("%q did not finish", spec.Argv)
		return result{}
	}
}

func sh(script string) backend.ProcSpec {
	return backend.ProcSpec{Argv: []string{"/bin/sh", "-c", script}}
}

func testRunCommand(t *testing.T) {
	s := sshenv.Start(t)
	b := newTestBackend(t, testOptions(s, nil))

	r := run(t, b, sh("echo out; echo err >&2; exit 3"))
	if r.err != nil || r.out != "out\nerr\n" || r.code != 3 {
		t.Fatalf("got %+v, want out+err merged and status 3", r)
	}
	r = run(t, b, sh("kill -TERM $$"))
	if r.err != nil || r.code != 128+15 {
		t.Fatalf("killed by TERM: got %+v, want 143", r)
	}
	r = run(t, b, sh("kill -KILL $$"))
	if r.err != nil || r.code != 128+9 {
		t.Fatalf("killed by KILL: got %+v, want 137", r)
	}

	// Quoting: every argv word arrives byte for byte.
	args := []string{"a b", "it's", `"dq"`, "$HOME", "`id`", "x\ny", "*", "~", "tab\there", "é", ""}
	r = run(t, b, backend.ProcSpec{Argv: append([]string{"printf", `[%s]\n`}, args...)})
	var want strings.Builder
	for _, a := range args {
		fmt.Fprintf(&want, "[%s]\n", a)
	}
	if r.err != nil || r.out != want.String() {
		t.Fatalf("quoting: got %q, want %q (%v)", r.out, want.String(), r.err)
	}

	// Working directories: default and "~" are the remote home, "~/x"
	// expands remotely, absolute paths are taken as they are.
	home := run(t, b, sh(`printf %s "$HOME"`)).out
	if home == "" {
		t.Fatal("remote HOME empty")
	}
	sub := "berth-ssh-test-" + strconv.Itoa(os.Getpid())
	run(t, b, sh("mkdir -p ~/"+sub))
	t.Cleanup(func() { run(t, b, sh("rm -rf ~/"+sub)) })
	for _, tc := range []struct{ dir, want string }{
		{"", home}, {"~", home}, {"~/" + sub, home + "/" + sub}, {"/tmp", "/tmp"},
	} {
		r := run(t, b, backend.ProcSpec{Argv: []string{"pwd"}, Dir: tc.dir})
		if strings.TrimSpace(r.out) != tc.want || r.code != 0 {
			t.Errorf("Dir %q: pwd = %q (status %d, %v), want %q", tc.dir, r.out, r.code, r.err, tc.want)
		}
	}
	r = run(t, b, backend.ProcSpec{Argv: []string{"pwd"}, Dir: "/nonexistent-berth"})
	if r.code == 0 {
		t.Errorf("missing Dir: status 0, want failure (%q)", r.out)
	}
	// Env entries are exported for the process.
	r = run(t, b, backend.ProcSpec{Argv: []string{"sh", "-c", `printf %s "$A_B"`}, Env: []string{"A_B=x y'z"}})
	if r.out != "x y'z" {
		t.Errorf("Env: got %q", r.out)
	}
	// Stdin reaches the process and Close sends EOF.
	p, err := b.Start(context.Background(), backend.ProcSpec{Argv: []string{"cat"}})
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(p.Stdin(), "hello stdin")
	p.Stdin().Close()
	out, err := io.ReadAll(p.Stdout())
	if code, werr := p.Wait(); string(out) != "hello stdin" || err != nil || code != 0 || werr != nil {
		t.Fatalf("cat: %q %v status %d %v", out, err, code, werr)
	}
	p.Close()
}

func knownHostsLines(t *testing.T, home string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(home, ".ssh", "known_hosts"))
	if err != nil {
		t.Fatalf("known_hosts: %v", err)
	}
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

func testUnknownHostAcceptedAndRecorded(t *testing.T) {
	s := sshenv.Start(t)
	b := newTestBackend(t, testOptions(s, nil))
	if r := run(t, b, sh("true")); r.err != nil || r.code != 0 {
		t.Fatalf("first connect: %+v", r)
	}
	lines := knownHostsLines(t, s.Home)
	want := fmt.Sprintf("[127.0.0.1]:%d %s", s.Port, strings.TrimSpace(string(gossh.MarshalAuthorizedKey(s.HostKey))))
	if len(lines) != 1 || lines[0] != want {
		t.Fatalf("known_hosts = %q, want %q", lines, want)
	}
	st, _ := os.Stat(filepath.Join(s.Home, ".ssh", "known_hosts"))
	if st.Mode().Perm() != 0o600 {
		t.Errorf("known_hosts mode %v", st.Mode())
	}
	// A second backend finds the host pinned and records nothing new.
	b2 := newTestBackend(t, testOptions(s, nil))
	if r := run(t, b2, sh("true")); r.err != nil {
		t.Fatal(r.err)
	}
	if got := knownHostsLines(t, s.Home); len(got) != 1 {
		t.Fatalf("known_hosts grew: %q", got)
	}
}

func testUnknownHostRecordedHashed(t *testing.T) {
	s := sshenv.Start(t)
	writeFile(t, filepath.Join(s.Home, ".ssh", "config"), "Host *\n  HashKnownHosts yes\n")
	b := newTestBackend(t, testOptions(s, nil))
	if r := run(t, b, sh("true")); r.err != nil {
		t.Fatal(r.err)
	}
	lines := knownHostsLines(t, s.Home)
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "|1|") || strings.Contains(lines[0], "127.0.0.1") {
		t.Fatalf("hashed known_hosts = %q", lines)
	}
	b2 := newTestBackend(t, testOptions(s, nil))
	if r := run(t, b2, sh("true")); r.err != nil {
		t.Fatal(r.err)
	}
	if got := knownHostsLines(t, s.Home); len(got) != 1 {
		t.Fatalf("known_hosts grew: %q", got)
	}
}

func testChangedHostKeyRefused(t *testing.T) {
	s := sshenv.Start(t)
	b := newTestBackend(t, testOptions(s, nil))
	if r := run(t, b, sh("true")); r.err != nil {
		t.Fatal(r.err)
	}
	oldKey := s.HostKey
	s.RestartWithNewHostKey(t)
	b2 := newTestBackend(t, testOptions(s, nil))
	_, err := b2.Start(context.Background(), sh("true"))
	var hc *HostKeyChangedError
	if !errors.As(err, &hc) {
		t.Fatalf("Start after re-key: %v, want HostKeyChangedError", err)
	}
	msg := err.Error()
	host := fmt.Sprintf("[127.0.0.1]:%d", s.Port)
	for _, want := range []string{host, gossh.FingerprintSHA256(oldKey), gossh.FingerprintSHA256(s.HostKey)} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	t.Logf("changed key error: %v", err)
	// The pinned entry is untouched.
	if lines := knownHostsLines(t, s.Home); len(lines) != 1 || !strings.Contains(lines[0], strings.Fields(string(gossh.MarshalAuthorizedKey(oldKey)))[1]) {
		t.Fatalf("known_hosts changed: %q", lines)
	}
	// The first backend's reconnect is refused as well.
	s.DropConnections(t)
	if _, err := b.Start(context.Background(), sh("true")); !errors.As(err, &hc) {
		t.Fatalf("reconnect after re-key: %v", err)
	}
}

// serveAgent serves an in-process ssh-agent holding the key at keyPath on a
// unix socket and returns the socket path.
func serveAgent(t *testing.T, keyPath string) string {
	t.Helper()
	data, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := gossh.ParseRawPrivateKey(data)
	if err != nil {
		t.Fatal(err)
	}
	kr := agent.NewKeyring()
	if err := kr.Add(agent.AddedKey{PrivateKey: raw, Comment: "test-agent-key"}); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "agent")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
		os.RemoveAll(dir)
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = agent.ServeAgent(kr, c)
			}()
		}
	}()
	return sock
}

func testAgentAuthentication(t *testing.T) {
	s := sshenv.Start(t)
	sock := serveAgent(t, s.KeyPath)
	opts := testOptions(s, map[string]string{"SSH_AUTH_SOCK": sock})
	mustSet(&opts.Config, keyKey, "")
	b := newTestBackend(t, opts)
	if r := run(t, b, sh("echo via-agent")); r.err != nil || r.out != "via-agent\n" {
		t.Fatalf("agent auth: %+v", r)
	}

	// Without the agent and without keys, authentication fails clearly.
	opts = testOptions(s, nil)
	mustSet(&opts.Config, keyKey, "")
	b2 := newTestBackend(t, opts)
	_, err := b2.Start(context.Background(), sh("true"))
	var ae *AuthError
	if !errors.As(err, &ae) {
		t.Fatalf("no key: %v, want AuthError", err)
	}
	t.Logf("auth error: %v", err)
}

func testDefaultIdentityFile(t *testing.T) {
	s := sshenv.Start(t)
	data, _ := os.ReadFile(s.KeyPath)
	writeFile(t, filepath.Join(s.Home, ".ssh", "id_ed25519"), string(data))
	opts := testOptions(s, nil)
	mustSet(&opts.Config, keyKey, "")
	b := newTestBackend(t, opts)
	if r := run(t, b, sh("true")); r.err != nil || r.code != 0 {
		t.Fatalf("default identity: %+v", r)
	}
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func testSSHConfigAlias(t *testing.T) {
	s := sshenv.Start(t)
	data, _ := os.ReadFile(s.KeyPath)
	writeFile(t, filepath.Join(s.Home, ".ssh", "alias_key"), string(data))
	writeFile(t, filepath.Join(s.Home, ".ssh", "config"), fmt.Sprintf(`# test config
Host other-host
    User nobody
    Port 1

Host gpu-?ox berth-alias-*  !berth-alias-excluded
    HostName 127.0.0.1
    Port=%d
    User %s
    IdentityFile "~/.ssh/alias_key"
    ForwardAgent yes
    ControlMaster auto

Host *
    User wrong-user
    IdentityFile ~/.ssh/does-not-exist
`, s.Port, s.User))
	opts := testOptions(s, nil)
	mustSet(&opts.Config, keyHost, "berth-alias-one")
	mustSet(&opts.Config, keyUser, "")
	mustSet(&opts.Config, keyPort, 22) // the default yields to the config's Port
	mustSet(&opts.Config, keyKey, "")
	b := newTestBackend(t, opts)
	if got, want := b.Target(), fmt.Sprintf("%s@127.0.0.1:%d", s.User, s.Port); got != want {
		t.Fatalf("target %s, want %s", got, want)
	}
	if r := run(t, b, sh("echo alias")); r.err != nil || r.out != "alias\n" {
		t.Fatalf("alias: %+v", r)
	}
	sort.Strings(b.t.unsupported)
	if strings.Join(b.t.unsupported, ",") != "controlmaster,forwardagent" {
		t.Errorf("unsupported directives = %v", b.t.unsupported)
	}
	if lines := knownHostsLines(t, s.Home); !strings.HasPrefix(lines[0], fmt.Sprintf("[127.0.0.1]:%d ", s.Port)) {
		t.Errorf("known_hosts = %q", lines)
	}
	// ? matches one character; negation excludes.
	mustSet(&opts.Config, keyHost, "gpu-box")
	if b2 := newTestBackend(t, opts); b2.Target() != b.Target() {
		t.Errorf("gpu-box resolved to %s", b2.Target())
	}
	mustSet(&opts.Config, keyHost, "berth-alias-excluded")
	b3 := newTestBackend(t, opts)
	if b3.t.user != "wrong-user" || b3.t.host != "berth-alias-excluded" {
		t.Errorf("negated pattern matched: %s", b3.Target())
	}
}

func TestMissingSettings(t *testing.T) {
	env := map[string]string{"HOME": t.TempDir()}
	opts := backend.Options{Config: config.Default().Terminal, Getenv: func(k string) string { return env[k] }}
	_, err := New(context.Background(), opts)
	var ce *ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "TERMINAL_SSH_HOST") || !strings.Contains(err.Error(), "terminal.ssh_host") {
		t.Fatalf("no host: %v", err)
	}
	mustSet(&opts.Config, keyHost, "example.invalid")
	_, err = New(context.Background(), opts)
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "TERMINAL_SSH_USER") || !strings.Contains(err.Error(), "terminal.ssh_user") {
		t.Fatalf("no user: %v", err)
	}
}

func testUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	env := map[string]string{"HOME": t.TempDir()}
	cfg := config.Default().Terminal
	mustSet(&cfg, keyHost, "127.0.0.1")
	mustSet(&cfg, keyUser, "root")
	mustSet(&cfg, keyPort, port)
	b := newTestBackend(t, backend.Options{Config: cfg, Getenv: func(k string) string { return env[k] }})
	_, err = b.Start(context.Background(), sh("true"))
	var ue *backend.UnreachableError
	if !errors.As(err, &ue) || ue.Target != fmt.Sprintf("127.0.0.1:%d", port) {
		t.Fatalf("got %v, want UnreachableError for 127.0.0.1:%d", err, port)
	}
	fp := Doctor(context.Background(), backend.Options{Config: cfg, Getenv: func(k string) string { return env[k] }})
	if fp.Usable || fp.Fix == "" {
		t.Fatalf("doctor on a closed port: %+v", fp)
	}
}

func testDoctor(t *testing.T) {
	s := sshenv.Start(t)
	fp := Doctor(context.Background(), testOptions(s, nil))
	if !fp.Usable {
		t.Fatalf("doctor: %+v", fp)
	}
	t.Logf("doctor: %s %q", fp.Summary, fp.Details)
	reg, ok := backend.Lookup(Name)
	if !ok || reg.Doctor == nil || reg.New == nil {
		t.Fatal("ssh not registered with a doctor")
	}
}

// shell is a persistent remote shell for the tests.
type shell struct {
	p backend.Process
	r *bufio.Reader
}

func startShell(t testing.TB, b backend.Backend) *shell {
	t.Helper()
	p, err := b.Start(context.Background(), sh("exec 2>&1; exec sh"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return &shell{p, bufio.NewReader(p.Stdout())}
}

// do runs a line and returns the first output line.
func (s *shell) do(line string) (string, error) {
	if _, err := io.WriteString(s.p.Stdin(), line+"\n"); err != nil {
		return "", err
	}
	return s.r.ReadString('\n')
}

func testReconnectAfterDrop(t *testing.T) {
	s := sshenv.Start(t)
	b := newTestBackend(t, testOptions(s, nil))
	for _, how := range []string{"kill connection", "restart sshd"} {
		sh1 := startShell(t, b)
		if got, err := sh1.do("echo one"); got != "one\n" || err != nil {
			t.Fatalf("%s: shell: %q %v", how, got, err)
		}
		if how == "kill connection" {
			s.DropConnections(t)
		} else {
			s.Restart(t)
		}
		start := time.Now()
		readErr := make(chan error, 1)
		go func() {
			_, err := io.Copy(io.Discard, sh1.r)
			readErr <- err
		}()
		// Either the link dies under the channel (read and Wait fail), or
		// the kill reaches the shell first and sshd still reports its
		// death (exit-signal) before going down itself, with or without a
		// clean channel close. Both are honest; a hang or a made-up success
		// is not.
		cleanEOF := false
		select {
		case err := <-readErr:
			if err == nil {
				cleanEOF = true
			} else {
				t.Logf("%s: Stdout error after %v: %v", how, time.Since(start).Round(time.Millisecond), err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: Stdout read hangs after the connection died", how)
		}
		code, werr := sh1.p.Wait()
		switch {
		case werr != nil:
		case code > 128:
			t.Logf("%s: the shell's death was reported before the link went (status %d, clean EOF %v)", how, code, cleanEOF)
		default:
			t.Errorf("%s: Wait returned status %d and no error (clean EOF %v)", how, code, cleanEOF)
		}
		// The next Start redials.
		if r := run(t, b, sh("echo again")); r.err != nil || r.out != "again\n" {
			t.Fatalf("%s: start after drop: %+v", how, r)
		}
	}
}

func testKeepAliveDetectsDeadLink(t *testing.T) {
	s := sshenv.Start(t)
	b := newTestBackend(t, testOptions(s, nil))
	b.t.keepInterval = 100 * time.Millisecond
	sh1 := startShell(t, b)
	if got, err := sh1.do("echo one"); got != "one\n" || err != nil {
		t.Fatalf("shell: %q %v", got, err)
	}
	thaw := s.FreezeConnections(t)
	defer thaw()
	start := time.Now()
	done := make(chan error, 1)
	go func() { _, err := sh1.p.Wait(); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "keep-alive") {
			t.Fatalf("Wait on a dead link: %v", err)
		}
		t.Logf("dead link noticed after %v: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(5 * time.Second):
		t.Fatal("dead link not noticed")
	}
}

// killGroupLater makes sure a remote process group started by a test is gone
// at the end (sshd runs on this machine).
func killGroupLater(t *testing.T, pgid int) {
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
}

func groupAlive(pgid int) bool { return syscall.Kill(-pgid, 0) == nil }

func testKillRemoteProcessGroup(t *testing.T) {
	s := sshenv.Start(t)
	b := newTestBackend(t, testOptions(s, nil))
	p, err := b.Start(context.Background(), sh("echo $$; sleep 1000 & sleep 1000"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	line, err := bufio.NewReader(p.Stdout()).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	killGroupLater(t, pid)
	// sshd calls setsid for the session, so the remote shell leads its own
	// process group.
	r := run(t, b, sh(fmt.Sprintf("ps -o pgid= -p %d; ps -o sid= -p %d", pid, pid)))
	if f := strings.Fields(r.out); len(f) != 2 || f[0] != strconv.Itoa(pid) || f[1] != strconv.Itoa(pid) {
		t.Fatalf("pgid/sid of remote shell %d: %q", pid, r.out)
	}
	r = run(t, b, sh(fmt.Sprintf("kill -TERM -%d", pid)))
	if r.code != 0 {
		t.Fatalf("kill: %+v", r)
	}
	code, err := p.Wait()
	if err != nil || code != 128+15 {
		t.Fatalf("Wait after group kill: %d %v, want 143", code, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for groupAlive(pid) {
		if time.Now().After(deadline) {
			t.Fatal("processes of the group survived the kill")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func testLargeOutputBoundedMemory(t *testing.T) {
	s := sshenv.Start(t)
	b := newTestBackend(t, testOptions(s, nil))
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	p, err := b.Start(context.Background(), backend.ProcSpec{Argv: []string{"head", "-c", "100000000", "/dev/zero"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var peak uint64
	buf := make([]byte, 64*1024)
	total := 0
	start := time.Now()
	for i := 0; ; i++ {
		n, err := p.Stdout().Read(buf)
		total += n
		if i%256 == 0 {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	code, err := p.Wait()
	if total != 100_000_000 || code != 0 || err != nil {
		t.Fatalf("read %d bytes, status %d %v", total, code, err)
	}
	growth := int64(peak) - int64(before.HeapInuse)
	t.Logf("100 MB in %v (%.0f MB/s), HeapInuse growth %.1f MB", elapsed.Round(time.Millisecond), 100/elapsed.Seconds(), float64(growth)/1e6)
	if growth > 32<<20 {
		t.Fatalf("HeapInuse grew by %d bytes", growth)
	}
}

func testManyChannelsBeyondMaxSessions(t *testing.T) {
	s := sshenv.Start(t)
	b := newTestBackend(t, testOptions(s, nil))
	const n = 14 // OpenSSH's MaxSessions defaults to 10
	var procs []backend.Process
	for i := 0; i < n; i++ {
		p, err := b.Start(context.Background(), backend.ProcSpec{Argv: []string{"cat"}})
		if err != nil {
			t.Fatalf("process %d: %v", i, err)
		}
		procs = append(procs, p)
	}
	b.mu.Lock()
	conns := len(b.conns)
	b.mu.Unlock()
	t.Logf("%d concurrent processes on %d connections", n, conns)
	for i, p := range procs {
		fmt.Fprintf(p.Stdin(), "p%d", i)
		p.Stdin().Close()
		out, _ := io.ReadAll(p.Stdout())
		if code, err := p.Wait(); code != 0 || err != nil || string(out) != fmt.Sprintf("p%d", i) {
			t.Fatalf("process %d: %q %d %v", i, out, code, err)
		}
		p.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.mu.Lock()
		conns = len(b.conns)
		b.mu.Unlock()
		if conns == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if conns != 1 {
		t.Errorf("%d connections left, want the overflow ones closed", conns)
	}
}

func testSessionEnv(t *testing.T) {
	env := map[string]string{"HOME": t.TempDir(), "FOO": "1", "SECRET_TOKEN": "s3"}
	cfg := config.Default().Terminal
	mustSet(&cfg, keyHost, "example.invalid")
	mustSet(&cfg, keyUser, "u")
	cfg.EnvPassthrough = []string{"FOO", "SECRET_TOKEN", "UNSET"}
	b := newTestBackend(t, backend.Options{Config: cfg, Getenv: func(k string) string { return env[k] }})
	var se backend.SessionEnver = b
	got := se.SessionEnv()
	if len(got) != 2 || got["FOO"] != "1" || got["SECRET_TOKEN"] != "s3" {
		t.Fatalf("SessionEnv = %v", got)
	}
}
