package ssh

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/testenv/sshenv"
	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// jumpHost starts an sshd that forwards only to next (PermitOpen) and
// accepts the user key of s as well as its own.
func jumpHost(t *testing.T, s *sshenv.Server, next *sshenv.Server) *sshenv.Server {
	t.Helper()
	j := sshenv.Start(t, sshenv.WithForwarding(next.Addr()))
	if err := j.AuthorizeKey(s.Signer.PublicKey()); err != nil {
		t.Fatal(err)
	}
	return j
}

// pinHosts writes known_hosts in home with the given lines and makes
// ~/.ssh/config refuse unknown hosts, so only pinned keys get through.
func pinHosts(t *testing.T, home string, lines ...string) {
	t.Helper()
	writeFile(t, filepath.Join(home, ".ssh", "known_hosts"), strings.Join(lines, "\n")+"\n")
	writeFile(t, filepath.Join(home, ".ssh", "config"), "Host *\n    StrictHostKeyChecking yes\n")
}

// wrongPin pins a freshly generated key for s: what known_hosts holds when
// the host was re-keyed or someone sits in the middle.
func wrongPin(t *testing.T, s *sshenv.Server) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := gossh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return knownhosts.Line([]string{knownhosts.Normalize(s.Addr())}, k)
}

// accepted counts the logins sshd logged.
func accepted(s *sshenv.Server) int { return strings.Count(s.Log(), "Accepted publickey") }

// wantHopError checks that err is a *HopError naming hop and wrapping a
// *HostKeyChangedError.
func wantHostKeyHopError(t *testing.T, err error, hop *sshenv.Server) {
	t.Helper()
	var he *HopError
	var hc *HostKeyChangedError
	name := hop.Addr()
	if !errors.As(err, &he) || he.Hop != name || !errors.As(err, &hc) ||
		!strings.Contains(err.Error(), "jump host "+name+": HOST KEY FOR "+knownhosts.Normalize(name)+" HAS CHANGED") {
		t.Fatalf("got %v, want a changed host key refused for jump host %s", err, name)
	}
	t.Logf("refused: %v", err)
}

func testProxyJumpOneHop(t *testing.T) {
	s := sshenv.Start(t)
	j := jumpHost(t, s, s)
	pinHosts(t, s.Home, s.KnownHostsLine(), j.KnownHostsLine())
	opts := testOptions(s, nil)
	mustSet(&opts.Config, keyProxyJump, s.User+"@"+j.Addr())
	b := newTestBackend(t, opts)
	if r := run(t, b, sh("echo through the bastion")); r.err != nil || r.out != "through the bastion\n" {
		t.Fatalf("through the jump host: %+v", r)
	}
	if n := accepted(j); n != 1 {
		t.Fatalf("jump host logged %d logins, want 1:\n%s", n, j.Log())
	}
	// The jump host forwards nowhere but to the target: the tunnel to
	// another address is refused, and the error names the jump host.
	other := sshenv.Start(t)
	opts2 := testOptions(other, map[string]string{"HOME": s.Home})
	mustSet(&opts2.Config, keyKey, s.KeyPath)
	mustSet(&opts2.Config, keyProxyJump, j.Addr())
	_, err := newTestBackend(t, opts2).Start(context.Background(), sh("true"))
	var he *HopError
	var ue *backend.UnreachableError
	if !errors.As(err, &he) || he.Hop != j.Addr() || !errors.As(err, &ue) ||
		!strings.Contains(err.Error(), "jump host "+j.Addr()+": cannot reach "+other.Addr()+" through it") {
		t.Fatalf("tunnel the jump host refuses: got %v", err)
	}
	t.Logf("refused: %v", err)

	// A dropped connection is made again through the jump host.
	j.DropConnections(t)
	if r := run(t, b, sh("echo again")); r.err != nil || r.out != "again\n" {
		t.Fatalf("after the jump host dropped the connection: %+v", r)
	}
	if n := accepted(j); n < 3 {
		t.Fatalf("jump host logged %d logins, want the reconnect to log in again", n)
	}

	// A wrong key pinned for the jump host is refused, naming it; the
	// target is never reached.
	pinHosts(t, s.Home, s.KnownHostsLine(), wrongPin(t, j))
	before := accepted(s)
	_, err = newTestBackend(t, opts).Start(context.Background(), sh("true"))
	wantHostKeyHopError(t, err, j)
	if accepted(s) != before {
		t.Fatal("the target was logged in to although the jump host's key was wrong")
	}
}

func testProxyJumpTwoHops(t *testing.T) {
	s := sshenv.Start(t)
	j2 := jumpHost(t, s, s)
	j1 := jumpHost(t, s, j2) // j1 reaches only j2, j2 only the target
	opts := testOptions(s, nil)
	mustSet(&opts.Config, keyProxyJump, j1.Addr()+","+j2.Addr())

	pinHosts(t, s.Home, s.KnownHostsLine(), j1.KnownHostsLine(), j2.KnownHostsLine())
	b := newTestBackend(t, opts)
	if r := run(t, b, sh("echo two hops")); r.err != nil || r.out != "two hops\n" {
		t.Fatalf("through two jump hosts: %+v", r)
	}
	if accepted(j1) != 1 || accepted(j2) != 1 {
		t.Fatalf("logins: first hop %d, second hop %d, want 1 each", accepted(j1), accepted(j2))
	}

	// Each hop's pin is checked under its own name.
	for _, c := range []struct {
		name  string
		lines []string
		bad   *sshenv.Server
	}{
		{"first hop", []string{s.KnownHostsLine(), wrongPin(t, j1), j2.KnownHostsLine()}, j1},
		{"second hop", []string{s.KnownHostsLine(), j1.KnownHostsLine(), wrongPin(t, j2)}, j2},
	} {
		t.Run(c.name, func(t *testing.T) {
			pinHosts(t, s.Home, c.lines...)
			_, err := newTestBackend(t, opts).Start(context.Background(), sh("true"))
			wantHostKeyHopError(t, err, c.bad)
		})
	}
	pinHosts(t, s.Home, wrongPin(t, s), j1.KnownHostsLine(), j2.KnownHostsLine())
	_, err := newTestBackend(t, opts).Start(context.Background(), sh("true"))
	var he *HopError
	var hc *HostKeyChangedError
	if errors.As(err, &he) || !errors.As(err, &hc) || hc.Host != knownhosts.Normalize(s.Addr()) {
		t.Fatalf("wrong target key behind two hops: got %v, want a changed key for the target itself", err)
	}
}

// ProxyJump from ~/.ssh/config: the jump host is an alias with its own
// HostName, Port, IdentityFile and known_hosts file, none of which the
// target shares.
func testProxyJumpFromSSHConfig(t *testing.T) {
	s := sshenv.Start(t)
	j := sshenv.Start(t, sshenv.WithForwarding(s.Addr())) // accepts only its own key
	writeFile(t, filepath.Join(s.Home, ".ssh", "config"), fmt.Sprintf(`Host target
    HostName 127.0.0.1
    Port %d
    User %s
    ProxyJump bastion

Host bastion
    HostName 127.0.0.1
    Port %d
    IdentityFile %s
    UserKnownHostsFile ~/.ssh/bastion_known_hosts
`, s.Port, s.User, j.Port, j.KeyPath))
	opts := testOptions(s, nil)
	mustSet(&opts.Config, keyHost, "target")
	mustSet(&opts.Config, keyUser, "")
	mustSet(&opts.Config, keyPort, 22)
	b := newTestBackend(t, opts)
	if got := routeString(b.t); got != fmt.Sprintf("via jump host bastion:%d", j.Port) {
		t.Fatalf("route %q", got)
	}
	if r := run(t, b, sh("echo configured")); r.err != nil || r.out != "configured\n" {
		t.Fatalf("ProxyJump from ~/.ssh/config: %+v", r)
	}
	if accepted(j) != 1 {
		t.Fatalf("the jump host logged %d logins, want 1", accepted(j))
	}
	// Accept-new recorded each host in its own file under its own name.
	bastionKH, err := os.ReadFile(filepath.Join(s.Home, ".ssh", "bastion_known_hosts"))
	if err != nil || !strings.HasPrefix(string(bastionKH), knownhosts.Normalize(j.Addr())+" ") {
		t.Fatalf("bastion_known_hosts = %q, %v", bastionKH, err)
	}
	if lines := knownHostsLines(t, s.Home); len(lines) != 1 || !strings.HasPrefix(lines[0], knownhosts.Normalize(s.Addr())+" ") {
		t.Fatalf("known_hosts = %q, want only the target", lines)
	}
	fp := Doctor(context.Background(), opts)
	if !fp.Usable || !strings.Contains(strings.Join(fp.Details, "\n"), fmt.Sprintf("route: via jump host bastion:%d", j.Port)) {
		t.Fatalf("doctor: %+v", fp)
	}

	// "none" in the setting turns the configured ProxyJump off.
	mustSet(&opts.Config, keyProxyJump, "none")
	direct := newTestBackend(t, opts)
	if direct.t.via != nil {
		t.Fatalf("ssh_proxy_jump none: route %s", routeString(direct.t))
	}
	if r := run(t, direct, sh("echo direct")); r.err != nil || r.out != "direct\n" || accepted(j) != 2 /* doctor */ {
		t.Fatalf("direct: %+v, jump host logins %d", r, accepted(j))
	}
}

// readPids reads the pids a relay wrote, one a line.
func readPids(t *testing.T, path string) []int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("pid file %q", data)
		}
		pids = append(pids, n)
	}
	return pids
}

// running reports whether pid is a live process. A zombie is not: the
// relay's forked child is reparented to PID 1 when the relay dies, and
// reaping it is PID 1's business. The relay itself is berth's child, and
// reaped reports whether it is gone entirely.
func running(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(data), ')')
	return i < 0 || i+2 >= len(data) || data[i+2] != 'Z'
}

func reaped(pid int) bool { return syscall.Kill(pid, 0) != nil }

func testProxyCommand(t *testing.T) {
	s := sshenv.Start(t)
	nc := sshenv.Netcat(t)
	pidFile := filepath.Join(t.TempDir(), "pids")
	// The relay records its pid and forks a child that would outlive it
	// if only the relay were killed.
	writeFile(t, filepath.Join(s.Home, ".ssh", "config"), fmt.Sprintf(`Host relayed
    HostName 127.0.0.1
    Port %d
    ProxyCommand sh -c 'sleep 3600 & echo $$ $! > %s; exec %s "$0" "$1"' %%h %%p
`, s.Port, pidFile, nc))
	opts := testOptions(s, nil)
	mustSet(&opts.Config, keyHost, "relayed")
	mustSet(&opts.Config, keyPort, 22)
	b := newTestBackend(t, opts)
	if want := fmt.Sprintf(`sh -c 'sleep 3600 & echo $$ $! > %s; exec %s "$0" "$1"' 127.0.0.1 %d`, pidFile, nc, s.Port); b.t.proxyCommand != want {
		t.Fatalf("proxy command %q, want %q", b.t.proxyCommand, want)
	}
	if r := run(t, b, sh("echo relayed")); r.err != nil || r.out != "relayed\n" {
		t.Fatalf("through the proxy command: %+v", r)
	}
	first := readPids(t, pidFile)
	for _, pid := range first {
		if !running(pid) {
			t.Fatalf("relay process %d not running while connected", pid)
		}
	}

	// A dropped connection is made again through a new relay; the old one
	// is reaped with its child.
	s.DropConnections(t)
	if r := run(t, b, sh("echo again")); r.err != nil || r.out != "again\n" {
		t.Fatalf("after the drop: %+v %v", r, r.err)
	}
	second := readPids(t, pidFile)
	if second[0] == first[0] {
		t.Fatal("the reconnect did not start a new proxy command")
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range first {
		for running(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if running(pid) {
			t.Fatalf("old relay process %d still there after the reconnect", pid)
		}
	}

	// Close kills and reaps the relay and what it started, before it
	// returns.
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !reaped(second[0]) {
		t.Fatalf("relay process %d not reaped when Close returned", second[0])
	}
	// The child got SIGKILL before Close returned; it is not ours to
	// wait for, so give the kernel a moment to finish it.
	for deadline := time.Now().Add(5 * time.Second); running(second[1]) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if running(second[1]) {
		t.Fatalf("the relay's child %d still running after Close", second[1])
	}

	// A failing relay's status and stderr are in the error.
	opts = testOptions(s, nil)
	mustSet(&opts.Config, keyProxyCommand, `sh -c 'echo "relay: no route to $0 port $1 for $2" >&2; exit 7' %h %p %r`)
	_, err := newTestBackend(t, opts).Start(context.Background(), sh("true"))
	var pe *ProxyCommandError
	wantMsg := fmt.Sprintf("relay: no route to 127.0.0.1 port %d for %s", s.Port, s.User)
	if !errors.As(err, &pe) || pe.Status != "exit status 7" || !strings.Contains(err.Error(), wantMsg) {
		t.Fatalf("failing proxy command: got %v, want exit status 7 and %q", err, wantMsg)
	}
	t.Logf("refused: %v", err)
}

func TestParseJumpList(t *testing.T) {
	hops, err := parseJumpList("bastion, alice@gw:2222,ssh://bob@[::1]:2200,[fe80::1],ssh://h2/", "test")
	if err != nil {
		t.Fatal(err)
	}
	want := []hopSpec{{"", "bastion", 0}, {"alice", "gw", 2222}, {"bob", "::1", 2200}, {"", "fe80::1", 0}, {"", "h2", 0}}
	if fmt.Sprint(hops) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", hops, want)
	}
	for _, bad := range []string{"", "a,,b", "gw:0", "gw:x", "@gw", "[::1", "[::1]x", "a b"} {
		var ce *ConfigError
		if _, err := parseJumpList(bad, "terminal.ssh_proxy_jump"); !errors.As(err, &ce) || !strings.Contains(err.Error(), fmt.Sprintf("%q", bad)) {
			t.Errorf("%q: got %v, want a ConfigError naming the value", bad, err)
		}
	}
}

// resolveWith resolves ssh_host host with the given ~/.ssh/config and
// settings.
func resolveWith(t *testing.T, sshConfig string, set map[string]any) (*target, error) {
	t.Helper()
	home := t.TempDir()
	if err := os.Mkdir(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(home, ".ssh", "config"), sshConfig)
	cfg := config.Default().Terminal
	mustSet(&cfg, keyUser, "u")
	for k, v := range set {
		mustSet(&cfg, k, v)
	}
	env := map[string]string{"HOME": home, "USER": "local"}
	return resolveTarget(backend.Options{Config: cfg, Getenv: func(k string) string { return env[k] }}, discardLog)
}

func TestResolveRoute(t *testing.T) {
	conf := `Host target
    ProxyCommand nc %h %p
    ProxyJump ignored-because-second
Host t2
    ProxyJump a,b@hb:2
Host a
    HostName 10.0.0.1
    User ua
    ProxyCommand connect-a %h %p %r %%
Host b hb
    ProxyJump never-used
Host loop
    ProxyJump loop
`
	tg, err := resolveWith(t, conf, map[string]any{keyHost: "target"})
	if err != nil || tg.proxyCommand != "nc target 22" || tg.via != nil {
		t.Fatalf("first of ProxyCommand/ProxyJump wins: %+v %v", tg, err)
	}
	tg, err = resolveWith(t, conf, map[string]any{keyHost: "target", keyProxyJump: "j1:2200"})
	if err != nil || tg.proxyCommand != "" || tg.via == nil || tg.via.addr() != "j1:2200" || tg.via.user != "local" {
		t.Fatalf("the setting overrides the config: %+v %v", tg, err)
	}
	tg, err = resolveWith(t, conf, map[string]any{keyHost: "target", keyProxyCommand: "none"})
	if err != nil || tg.proxyCommand != "" || tg.via != nil {
		t.Fatalf("none: %+v %v", tg, err)
	}
	// t2 → b@hb:2 → a, and a is reached through its own ProxyCommand; hb's
	// own ProxyJump is overridden by the list.
	tg, err = resolveWith(t, conf, map[string]any{keyHost: "t2"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := routeString(tg), `via jump host a:22 (itself via proxy command "connect-a 10.0.0.1 22 ua %") → hb:2`; got != want {
		t.Fatalf("route %q, want %q", got, want)
	}
	if tg.via.user != "b" || tg.via.via.user != "ua" || tg.via.via.via != nil {
		t.Fatalf("hop users %q %q", tg.via.user, tg.via.via.user)
	}
	var ce *ConfigError
	if _, err := resolveWith(t, conf, map[string]any{keyHost: "loop"}); !errors.As(err, &ce) || !strings.Contains(err.Error(), "ProxyJump loop") {
		t.Fatalf("loop: %v", err)
	}
	if _, err := resolveWith(t, conf, map[string]any{keyHost: "x", keyProxyJump: "a", keyProxyCommand: "b"}); !errors.As(err, &ce) || !strings.Contains(err.Error(), "TERMINAL_SSH_PROXY_COMMAND") {
		t.Fatalf("both set: %v", err)
	}
	if _, err := resolveWith(t, conf, map[string]any{keyHost: "x", keyProxyCommand: "nc %C"}); !errors.As(err, &ce) {
		t.Fatalf("unknown token: %v", err)
	}
}
