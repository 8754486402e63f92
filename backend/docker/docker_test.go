package docker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// testKey returns a fresh environment key whose container and volumes are
// removed at the end of the test.
func testKey(t testing.TB) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	key := "test-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")) + "-" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := (envAdmin{}).Remove(ctx, backend.Options{}, key); err != nil {
			t.Errorf("cleanup: remove %s: %v", key, err)
		}
	})
	return key
}

// testOptions returns options for a throwaway environment on the test image.
func testOptions(t testing.TB, mutate func(*config.Terminal)) backend.Options {
	t.Helper()
	cfg := config.Default().Terminal
	cfg.Backend = Name
	mustSet(&cfg, keyImage, dockerenv.Image(t))
	cfg.ContainerPersistent = false
	cfg.ContainerMemory = 512
	if mutate != nil {
		mutate(&cfg)
	}
	return backend.Options{Key: testKey(t), Config: cfg, Getenv: func(string) string { return "" }}
}

func newBackend(t testing.TB, opts backend.Options) *Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := New(ctx, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := b.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// run runs script with sh -c, stdin closed, and returns its merged output
// and exit status.
func run(t testing.TB, b backend.Backend, script string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := b.Start(ctx, backend.ProcSpec{Argv: []string{"/bin/sh", "-c", script}})
	if err != nil {
		t.Fatalf("Start %q: %v", script, err)
	}
	defer p.Close()
	_ = p.Stdin().Close()
	outc := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(p.Stdout()); outc <- b }()
	code, err := waitTimeout(t, p, 60*time.Second)
	if err != nil {
		t.Fatalf("Wait %q: %v", script, err)
	}
	select {
	case out := <-outc:
		return string(out), code
	case <-time.After(10 * time.Second):
		t.Fatalf("output of %q did not end", script)
	}
	return "", 0
}

func waitTimeout(t testing.TB, p backend.Process, d time.Duration) (int, error) {
	t.Helper()
	type res struct {
		code int
		err  error
	}
	c := make(chan res, 1)
	go func() { code, err := p.Wait(); c <- res{code, err} }()
	select {
	case r := <-c:
		return r.code, r.err
	case <-time.After(d):
		t.Fatalf("Wait did not return within %v", d)
	}
	return 0, nil
}

func testRunExitCodeAndMergedOutput(t *testing.T, b *Backend) {
	out, code := run(t, b, "echo out; echo err >&2; exit 3")
	if code != 3 {
		t.Errorf("exit code = %d, want 3", code)
	}
	if !strings.Contains(out, "out\n") || !strings.Contains(out, "err\n") {
		t.Errorf("output = %q, want stdout and stderr merged", out)
	}
	if _, code := run(t, b, "kill -9 $$"); code != 137 {
		t.Errorf("killed by SIGKILL: exit code = %d, want 137", code)
	}
	if _, code := run(t, b, "kill -TERM $$"); code != 143 {
		t.Errorf("killed by SIGTERM: exit code = %d, want 143", code)
	}
	if out, _ := run(t, b, "pwd"); strings.TrimSpace(out) != "/root" {
		t.Errorf("default working dir = %q, want /root", out)
	}
	if _, err := b.Start(context.Background(), backend.ProcSpec{}); err == nil {
		t.Error("Start with empty argv succeeded")
	}
}

func testProcSpecDirAndEnv(t *testing.T) {
	b := newBackend(t, testOptions(t, func(c *config.Terminal) {
		c.Cwd = "/srv/app"
		mustSet(c, keyEnv, map[string]string{"BERTH_PLAIN": "visible"})
	}))
	out, _ := run(t, b, `pwd; echo "$BERTH_PLAIN"`)
	if out != "/srv/app\nvisible\n" {
		t.Errorf("output = %q", out)
	}
	p, err := b.Start(context.Background(), backend.ProcSpec{Argv: []string{"sh", "-c", `pwd; echo "$X"`}, Dir: "/tmp", Env: []string{"X=y"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	got, _ := io.ReadAll(p.Stdout())
	if string(got) != "/tmp\ny\n" {
		t.Errorf("output = %q, want /tmp and y", got)
	}
	if code, err := p.Wait(); code != 0 || err != nil {
		t.Errorf("Wait = %d, %v", code, err)
	}
}

func TestHostLookingCwdFallsBack(t *testing.T) {
	for in, want := range map[string]string{
		"": "/root", "~": "/root", ".": "/root", "rel/dir": "/root",
		"/home/alice/proj": "/root", "/Users/bob": "/root", "/srv/x/": "/srv/x", "~/src": "/root/src",
	} {
		if got := containerDir(in, "/root"); got != want {
			t.Errorf("containerDir(%q) = %q, want %q", in, got, want)
		}
	}
}

// testExecIsProcessGroupLeader documents what the session's kill logic
// relies on: a process started by a (non-TTY) exec leads its own process
// group and session inside the container.
func testExecIsProcessGroupLeader(t *testing.T, b *Backend) {
	out, _ := run(t, b, `set -- $(cat /proc/$$/stat); echo "$1 $5 $6"`)
	f := strings.Fields(out)
	if len(f) != 3 {
		t.Fatalf("stat fields = %q", out)
	}
	if f[0] != f[1] || f[0] != f[2] {
		t.Errorf("pid %s, pgid %s, sid %s: the exec'd process is not its own group and session leader", f[0], f[1], f[2])
	}
}

func testPersistentShellRoundTrip(t *testing.T, b *Backend) {
	p, err := b.Start(context.Background(), backend.ProcSpec{Argv: []string{"/bin/sh"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	r := bufio.NewReader(p.Stdout())
	const n = 200
	durs := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		fmt.Fprintf(p.Stdin(), "echo m%d\n", i)
		line, err := r.ReadString('\n')
		if err != nil || line != fmt.Sprintf("m%d\n", i) {
			t.Fatalf("round trip %d: %q, %v", i, line, err)
		}
		durs = append(durs, time.Since(start))
	}
	t.Logf("persistent shell round trip p50 = %v", percentile(durs, 50))
	fmt.Fprintln(p.Stdin(), "exit 5")
	if code, err := waitTimeout(t, p, 10*time.Second); code != 5 || err != nil {
		t.Errorf("Wait = %d, %v", code, err)
	}
}

func percentile(d []time.Duration, q int) time.Duration {
	s := append([]time.Duration(nil), d...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)*q/100]
}

func testHardeningFromInside(t *testing.T, b *Backend) {
	out, _ := run(t, b, `grep -E '^(CapEff|CapBnd|NoNewPrivs):' /proc/self/status; cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max; mount | grep -E ' /(tmp|var/tmp|run|dev/shm) '`)
	// CHOWN(0) DAC_OVERRIDE(1) FOWNER(3) SETGID(6) SETUID(7)
	const mask = "00000000000000cb"
	for _, want := range []string{"CapEff:\t" + mask, "CapBnd:\t" + mask, "NoNewPrivs:\t1", "\n256\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	for _, m := range []struct{ dir, opts string }{
		{"/tmp", "nosuid"}, {"/var/tmp", "noexec"}, {"/run", "noexec"}, {"/tmp", "size=524288k"},
		{"/var/tmp", "size=262144k"}, {"/run", "size=65536k"}, {"/dev/shm", "size=1048576k"},
	} {
		found := false
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, " "+m.dir+" ") && strings.Contains(l, m.opts) {
				found = true
			}
		}
		if !found {
			t.Errorf("mount %s lacks %s in\n%s", m.dir, m.opts, out)
		}
	}
	ctx := context.Background()
	ins, err := b.cli.ContainerInspect(ctx, b.ContainerID(), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc := ins.Container.HostConfig
	if hc.Init == nil || !*hc.Init || hc.NanoCPUs != 1e9 || hc.Memory != 512<<20 || hc.ShmSize != 1<<30 {
		t.Errorf("host config: init %v cpus %d memory %d shm %d", hc.Init, hc.NanoCPUs, hc.Memory, hc.ShmSize)
	}
	if got := strings.Join(ins.Container.Config.Entrypoint, " "); got != "sleep infinity" {
		t.Errorf("entrypoint = %q", got)
	}
	if _, code := run(t, b, "chown nobody /root && chown root /root"); code != 0 {
		t.Errorf("chown with CAP_CHOWN failed")
	}
	if out, code := run(t, b, "mknod /tmp/x c 1 3"); code == 0 {
		t.Errorf("mknod (CAP_MKNOD dropped) succeeded: %s", out)
	}
}

func testPidsLimitStopsForkBomb(t *testing.T) {
	b := newBackend(t, testOptions(t, nil))
	// Children that live long enough for the loop to reach the limit even
	// on a loaded machine, and short enough for the container to recover.
	out, code := run(t, b, `i=0; while [ $i -lt 400 ]; do sleep 15 & i=$((i+1)); echo $i > /tmp/n; done; echo all-started`)
	if code == 0 || strings.Contains(out, "all-started") {
		t.Fatalf("400 processes started despite the pids limit (exit %d): %s", code, out)
	}
	t.Logf("fork loop stopped with exit %d: %s", code, strings.TrimSpace(out))
	time.Sleep(16 * time.Second)
	n, _ := run(t, b, "cat /tmp/n")
	if v, err := strconv.Atoi(strings.TrimSpace(n)); err != nil || v >= 256 {
		t.Errorf("started %q background processes, want < 256", n)
	}
}

func testReadOnlyRoot(t *testing.T) {
	b := newBackend(t, testOptions(t, func(c *config.Terminal) { mustSet(c, keyReadOnly, true) }))
	if out, code := run(t, b, "touch /etc/berth-test"); code == 0 {
		t.Errorf("writing /etc succeeded on a read-only root: %s", out)
	}
	if out, code := run(t, b, "touch /root/a /workspace/b /tmp/c && echo ok"); code != 0 {
		t.Errorf("writing /root, /workspace, /tmp failed: %s", out)
	}
}

func testMemoryLimitOOMKill(t *testing.T) {
	b := newBackend(t, testOptions(t, func(c *config.Terminal) { c.ContainerMemory = 64 }))
	out, code := run(t, b, `exec bash -c 'x=$(head -c 300000000 /dev/zero | tr "\0" a); echo survived ${#x}'`)
	if code != 137 {
		t.Errorf("memory hog: exit %d, want 137 (OOM-killed); output %q", code, out)
	}
	if out, code := run(t, b, "echo alive"); code != 0 || out != "alive\n" {
		t.Errorf("container unusable after the OOM kill: %d %q", code, out)
	}
}

func testForwardedSecretsStayOutOfConfigAndCmdlines(t *testing.T) {
	var rb [8]byte
	_, _ = rand.Read(rb[:])
	secret := "berth-secret-" + hex.EncodeToString(rb[:])
	opts := testOptions(t, func(c *config.Terminal) {
		c.DockerForwardEnv = []string{"BERTH_TEST_SECRET", "BERTH_TEST_UNSET"}
	})
	opts.Getenv = func(k string) string {
		if k == "BERTH_TEST_SECRET" {
			return secret
		}
		return ""
	}
	b := newBackend(t, opts)
	env := b.SessionEnv()
	if env["BERTH_TEST_SECRET"] != secret || len(env) != 1 {
		t.Fatalf("SessionEnv = %v", env)
	}
	ins, err := b.cli.ContainerInspect(context.Background(), b.ContainerID(), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(ins.Raw), secret) {
		t.Fatalf("secret found in the container's inspect output")
	}

	// Deliver it the way the session does: through the shell's stdin.
	p, err := b.Start(context.Background(), backend.ProcSpec{Argv: []string{"/bin/sh"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	r := bufio.NewReader(p.Stdout())
	fmt.Fprintf(p.Stdin(), "export BERTH_TEST_SECRET='%s'\nsleep 30 &\nbash -c 'sleep 31' &\n", secret)
	fmt.Fprintf(p.Stdin(), "echo \"len=${#BERTH_TEST_SECRET}\"\n")
	if line, _ := r.ReadString('\n'); line != fmt.Sprintf("len=%d\n", len(secret)) {
		t.Fatalf("secret not exported in the shell: %q", line)
	}
	// The pattern goes through a file: in grep's argv it would match itself.
	io.WriteString(p.Stdin(), `printf '%s\n' "$BERTH_TEST_SECRET" > /tmp/pat; for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $f; echo; done | grep -c . ; for f in /proc/[0-9]*/cmdline; do cat $f; echo; done | grep -c -F -f /tmp/pat; echo end`+"\n")
	var lines []string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "end\n" {
			break
		}
		lines = append(lines, strings.TrimSpace(line))
	}
	if len(lines) != 2 || lines[1] != "0" {
		t.Errorf("secret found in a container command line: %v", lines)
	}
	// And on the host.
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		data, err := os.ReadFile(f)
		if err == nil && bytes.Contains(data, []byte(secret)) {
			t.Errorf("secret found in host %s: %q", f, data)
		}
	}
	fmt.Fprintln(p.Stdin(), "kill %1 %2 2>/dev/null; exit 0")
	_, _ = waitTimeout(t, p, 10*time.Second)
}

func testPersistenceAcrossBackends(t *testing.T) {
	opts := testOptions(t, func(c *config.Terminal) { c.ContainerPersistent = true })
	ctx := context.Background()
	b1, err := New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, code := run(t, b1, "echo kept > /root/f && echo ws > /workspace/g && touch /etc/installed"); code != 0 {
		t.Fatal("write failed")
	}
	id1 := b1.ContainerID()
	if err := b1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ins, err := b1.cliForTest(t).ContainerInspect(ctx, id1, client.ContainerInspectOptions{})
	if err != nil || ins.Container.State.Running {
		t.Errorf("persistent container after Close: running=%v err=%v; want stopped", ins.Container.State != nil && ins.Container.State.Running, err)
	}

	b2 := newBackend(t, opts)
	if b2.ContainerID() != id1 {
		t.Errorf("second backend created %s instead of reattaching %s", b2.ContainerID(), id1)
	}
	out, code := run(t, b2, "cat /root/f /workspace/g && ls /etc/installed")
	if code != 0 || out != "kept\nws\n/etc/installed\n" {
		t.Errorf("after reattach: %d %q", code, out)
	}
	if b2.Recreated() {
		t.Error("reattach reported as recreation")
	}
	envs, err := (envAdmin{}).List(ctx, backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range envs {
		if e.Key == opts.Key {
			found = e.ID == id1 && e.Persistent && e.State == "running" && e.Image == opts.Config.String(keyImage)
		}
	}
	if !found {
		t.Errorf("List does not show %s running: %+v", opts.Key, envs)
	}
}

// cliForTest returns a fresh client (the backend's own is closed by Close).
func (b *Backend) cliForTest(t testing.TB) *client.Client {
	return dockerenv.Require(t)
}

func testSettingsChangeReplacesContainerKeepsVolumes(t *testing.T) {
	opts := testOptions(t, func(c *config.Terminal) { c.ContainerPersistent = true })
	ctx := context.Background()
	b1, err := New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	run(t, b1, "echo kept > /root/f")
	id1 := b1.ContainerID()
	_ = b1.Close(ctx)
	mustSet(&opts.Config, keyEnv, map[string]string{"CHANGED": "1"})
	b2 := newBackend(t, opts)
	if b2.ContainerID() == id1 {
		t.Error("container not replaced after a settings change")
	}
	if out, _ := run(t, b2, "cat /root/f; echo $CHANGED"); out != "kept\n1\n" {
		t.Errorf("after replacement: %q", out)
	}
}

func testNonPersistentCloseRemovesEverything(t *testing.T) {
	opts := testOptions(t, nil)
	ctx := context.Background()
	b, err := New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	id := b.ContainerID()
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := b.Start(ctx, backend.ProcSpec{Argv: []string{"true"}}); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Close: %v", err)
	}
	cli := dockerenv.Require(t)
	if _, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); err == nil {
		t.Error("container still exists after Close")
	}
	vols, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: make(client.Filters).Add("label", LabelKey+"="+opts.Key)})
	if err != nil || len(vols.Items) != 0 {
		t.Errorf("volumes left after Close: %v %v", vols.Items, err)
	}
}

func testRecreateAfterOutsideRemovalAndStop(t *testing.T) {
	b := newBackend(t, testOptions(t, nil))
	cli := dockerenv.Require(t)
	ctx := context.Background()
	if _, err := cli.ContainerRemove(ctx, b.ContainerID(), client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, b, "echo back"); code != 0 || out != "back\n" {
		t.Fatalf("after docker rm -f: %d %q", code, out)
	}
	if !b.Recreated() {
		t.Error("Recreated() = false after the container was removed")
	}
	if b.Recreated() {
		t.Error("Recreated() reported twice")
	}
	timeout := 0
	if _, err := cli.ContainerStop(ctx, b.ContainerID(), client.ContainerStopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, b, "echo again"); code != 0 || out != "again\n" {
		t.Fatalf("after docker stop: %d %q", code, out)
	}
	if !b.Recreated() {
		t.Error("Recreated() = false after the container was stopped")
	}
}

func testWaitWhenContainerStops(t *testing.T) {
	b := newBackend(t, testOptions(t, nil))
	p, err := b.Start(context.Background(), backend.ProcSpec{Argv: []string{"sh", "-c", "echo ready; exec sleep 1000"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if line, err := bufio.NewReader(p.Stdout()).ReadString('\n'); line != "ready\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	timeout := 0
	if _, err := b.cli.ContainerStop(context.Background(), b.ContainerID(), client.ContainerStopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	code, err := waitTimeout(t, p, 15*time.Second)
	if err != nil || code != 137 {
		t.Errorf("Wait after the container stopped = %d, %v; want 137", code, err)
	}
}

func testOrphanPruning(t *testing.T) {
	image := dockerenv.Image(t)
	cli := dockerenv.Require(t)
	ctx := context.Background()
	mk := func(persistent bool) string {
		key := testKey(t)
		res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
			Name: ContainerName(key),
			Config: &container.Config{Image: image, Entrypoint: []string{"true"}, Labels: map[string]string{
				LabelBerth: "1", LabelKey: key, LabelPersistent: boolLabel(persistent), LabelConfig: "x",
			}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
			t.Fatal(err)
		}
		w := cli.ContainerWait(ctx, res.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
		select {
		case <-w.Result:
		case err := <-w.Error:
			t.Fatal(err)
		}
		return key
	}
	throwaway, persistent := mk(false), mk(true)
	mine := func(c container.Summary) bool {
		k := c.Labels[LabelKey]
		return k == throwaway || k == persistent
	}
	// Too young for the threshold: kept.
	if removed, err := prune(ctx, cli, daemonHost(nil), time.Hour, false, mine); err != nil || len(removed) != 0 {
		t.Fatalf("prune(1h) removed %v, %v", removed, err)
	}
	time.Sleep(1100 * time.Millisecond)
	removed, err := prune(ctx, cli, daemonHost(nil), time.Second, false, mine)
	if err != nil || len(removed) != 1 || removed[0] != throwaway {
		t.Fatalf("orphan pruning removed %v, %v; want only %s", removed, err, throwaway)
	}
	removed, err = prune(ctx, cli, daemonHost(nil), time.Second, true, mine)
	if err != nil || len(removed) != 1 || removed[0] != persistent {
		t.Fatalf("Prune removed %v, %v; want %s", removed, err, persistent)
	}
}

func testNoNetwork(t *testing.T, b2 *Backend) {
	b := newBackend(t, testOptions(t, func(c *config.Terminal) { c.DockerNetwork = false }))
	out, _ := run(t, b, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
	if strings.TrimSpace(out) != "lo" {
		t.Errorf("interfaces with docker_network=false: %q, want only lo", out)
	}
	// b2 is a container with the default settings (docker_network=true).
	out, _ = run(t, b2, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
	if !strings.Contains(out, "eth0") {
		t.Logf("note: with docker_network=true the container has only %q (daemon without bridge?)", out)
	}
}

func testVolumesAndCwdMount(t *testing.T) {
	host := t.TempDir()
	if err := os.WriteFile(filepath.Join(host, "hello.txt"), []byte("from host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := newBackend(t, testOptions(t, func(c *config.Terminal) {
		mustSet(c, keyVolumes, []string{host + ":/data:ro"})
	}))
	if out, _ := run(t, b, "cat /data/hello.txt"); out != "from host\n" {
		t.Errorf("bind mount: %q", out)
	}
	if _, code := run(t, b, "touch /data/x"); code == 0 {
		t.Error("wrote to a :ro volume")
	}

	wd, _ := os.Getwd()
	b2 := newBackend(t, testOptions(t, func(c *config.Terminal) { mustSet(c, keyMountCwd, true) }))
	if out, _ := run(t, b2, "pwd; ls /workspace/docker_test.go"); out != "/workspace\n/workspace/docker_test.go\n" {
		t.Errorf("cwd %s mounted at /workspace: %q", wd, out)
	}
}

func TestBadVolumeEntriesNamed(t *testing.T) {
	for _, v := range []string{"nocolon", "rel/path:/x", "/h:relative", "/h:/x:bogus", "/h:/", ":/x", "/a:/b:ro:extra"} {
		cfg := config.Default().Terminal
		mustSet(&cfg, keyVolumes, []string{v})
		_, err := buildSpec(backend.Options{Key: "k", Config: cfg})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", v)) {
			t.Errorf("entry %q: error %v does not name it", v, err)
		}
	}
	for _, v := range []string{"/h:/x", "/h:/x:ro", "myvol:/data:rw,nocopy"} {
		cfg := config.Default().Terminal
		mustSet(&cfg, keyVolumes, []string{v})
		if _, err := buildSpec(backend.Options{Key: "k", Config: cfg}); err != nil {
			t.Errorf("entry %q rejected: %v", v, err)
		}
	}
}

func TestUnreachableDaemon(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	opts := backend.Options{Key: "k", Config: config.Default().Terminal, Getenv: func(k string) string {
		if k == "DOCKER_HOST" {
			return "unix://" + sock
		}
		return ""
	}}
	_, err := New(context.Background(), opts)
	var ue *backend.UnreachableError
	if !errors.As(err, &ue) || ue.Target != sock || !strings.Contains(err.Error(), "dockerd") {
		t.Fatalf("New with no daemon: %v", err)
	}
	fp := Doctor(context.Background(), opts)
	if fp.Usable || fp.Fix == "" || !strings.Contains(fp.Summary, sock) {
		t.Errorf("Doctor with no daemon: %+v", fp)
	}
}

func testMissingImage(t *testing.T) {
	dockerenv.Require(t)
	opts := testOptions(t, func(c *config.Terminal) { mustSet(c, keyImage, "berth-test/does-not-exist:0") })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := New(ctx, opts)
	if err == nil || !strings.Contains(err.Error(), "berth-test/does-not-exist:0") || !strings.Contains(err.Error(), "build or import") {
		t.Fatalf("New with a missing image: %v", err)
	}
}

func testDoctor(t *testing.T) {
	opts := testOptions(t, nil)
	fp := Doctor(context.Background(), opts)
	if !fp.Usable {
		t.Fatalf("Doctor: %+v", fp)
	}
	all := fp.Summary + "\n" + strings.Join(fp.Details, "\n")
	for _, want := range []string{"API", "cpu limit", "memory limit", "pids limit", "disk quota", "image " + opts.Config.String(keyImage) + ": present"} {
		if !strings.Contains(all, want) {
			t.Errorf("Doctor output lacks %q:\n%s", want, all)
		}
	}
	t.Logf("doctor:\n%s", all)
}

func TestRegistered(t *testing.T) {
	r, ok := backend.Lookup(Name)
	if !ok || r.Doctor == nil {
		t.Fatal("docker backend not registered with a Doctor")
	}
}

func testCreateToFirstCommandAndExecLatency(t *testing.T) {
	opts := testOptions(t, nil)
	start := time.Now()
	b := newBackend(t, opts)
	if _, code := run(t, b, "true"); code != 0 {
		t.Fatal("true failed")
	}
	t.Logf("create to first command: %v", time.Since(start))
	var durs []time.Duration
	for i := 0; i < 20; i++ {
		s := time.Now()
		p, err := b.Start(context.Background(), backend.ProcSpec{Argv: []string{"true"}})
		if err != nil {
			t.Fatal(err)
		}
		durs = append(durs, time.Since(s))
		_, _ = p.Wait()
		p.Close()
	}
	t.Logf("exec start (create+attach) p50: %v", percentile(durs, 50))
}

// berthsFilesIn makes a host directory holding berth's home (a config
// file and the daemon's directory) below .config, as when $HOME is bound
// into the container, and returns it and the home.
func berthsFilesIn(t *testing.T) (host, home string) {
	t.Helper()
	host = t.TempDir()
	home = filepath.Join(host, ".config", "berth")
	if err := os.MkdirAll(filepath.Join(home, "daemon"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "config.yaml"), []byte("approvals:\n  mode: manual\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return host, home
}

// testBerthsHomeReadOnlyInBind is the 2026-11-28 review's R1 on the
// docker backend: a host directory bound writable into the container
// (here $HOME-like, through docker_volumes) that holds berth's home gave
// the commands berth's settings. Inside the container the home is
// read-only, and neither it nor a directory above it can be moved aside
// and replaced; the rest of the bound directory stays writable.
func testBerthsHomeReadOnlyInBind(t *testing.T) {
	host, home := berthsFilesIn(t)
	opts := testOptions(t, func(c *config.Terminal) {
		mustSet(c, keyVolumes, []string{host + ":/data"})
	})
	opts.Home = home
	b := newBackend(t, opts)
	if !slices.Contains(b.spec.Kept, "/data/.config/berth") {
		t.Fatalf("spec.Kept = %q", b.spec.Kept)
	}
	before, _ := os.ReadFile(filepath.Join(home, "config.yaml"))
	for _, c := range []string{
		"echo 'approvals: {mode: off}' >> /data/.config/berth/config.yaml && echo ESCAPED",
		"echo TERMINAL_ENV=local > /data/.config/berth/.env && echo ESCAPED",
		"p=/data/.con; echo x >> ${p}fig/berth/config.yaml && echo ESCAPED",
		"mv /data/.config/berth /data/.config/old && echo ESCAPED",
		"mv /data/.config /data/.config.old && mkdir -p /data/.config/berth && echo x > /data/.config/berth/config.yaml && echo ESCAPED",
		"rm -rf /data/.config/berth && echo ESCAPED",
		"umount /data/.config/berth && echo ESCAPED",
		"(sleep 0.2; echo x >> /data/.config/berth/config.yaml && echo ESCAPED) & wait $!",
	} {
		out, code := run(t, b, c)
		if code == 0 || strings.Contains(out, "ESCAPED") {
			t.Errorf("%s: exit %d %q: it got through", c, code, out)
		}
	}
	if after, _ := os.ReadFile(filepath.Join(home, "config.yaml")); !bytes.Equal(after, before) {
		t.Fatalf("berth's config changed: %q", after)
	}
	if _, err := os.Lstat(filepath.Join(home, ".env")); err == nil {
		t.Fatal("a .env appeared in berth's home")
	}
	if out, code := run(t, b, "echo mine > /data/mine && mkdir /data/.config/other && mv /data/mine /data/.config/other/ && cat /data/.config/other/mine"); code != 0 || out != "mine\n" {
		t.Fatalf("the rest of the bound directory: exit %d %q", code, out)
	}
	fp := Doctor(context.Background(), opts)
	if all := strings.Join(fp.Details, "\n"); !strings.Contains(all, home+" (berth's own settings) lies in a host directory bound writable into the container: kept read-only there (at /data/.config/berth)") {
		t.Errorf("doctor does not say so:\n%s", all)
	}
}

// TestBerthsFilesInBindsSpec is what the container spec does with berth's
// files in host binds, without a daemon: nothing for a read-only bind or
// one that does not hold them; a refusal, naming the path and the fix,
// where no bind can keep them (the bind is berth's home; a config file
// in the working directory bound at /workspace without a .env beside it).
func TestBerthsFilesInBindsSpec(t *testing.T) {
	host, home := berthsFilesIn(t)
	opts := func(volumes []string, mutate func(*config.Terminal)) backend.Options {
		cfg := config.Default().Terminal
		mustSet(&cfg, keyVolumes, volumes)
		if mutate != nil {
			mutate(&cfg)
		}
		return backend.Options{Key: "k", Config: cfg, Home: home, Getenv: func(string) string { return "" }}
	}
	s, err := buildSpec(opts([]string{host + ":/data:ro", t.TempDir() + ":/other"}, nil))
	if err != nil || len(s.Kept) != 0 {
		t.Fatalf("read-only bind, unrelated bind: %v, kept %q", err, s.Kept)
	}
	s, err = buildSpec(opts([]string{host + ":/data"}, nil))
	if err != nil || !slices.Equal(s.Kept, []string{"/data/.config/berth"}) || !slices.Contains(s.Binds, home+":/data/.config/berth:ro") || !slices.Contains(s.Binds, host+"/.config:/data/.config") {
		t.Fatalf("writable bind holding berth's home: %v, binds %q, kept %q", err, s.Binds, s.Kept)
	}
	if _, err := buildSpec(opts([]string{home + ":/berth"}, nil)); err == nil || !strings.Contains(err.Error(), "bind it read-only (:ro)") {
		t.Fatalf("berth's home bound writable: %v", err)
	}
	wd, _ := os.Getwd()
	o := opts(nil, func(c *config.Terminal) { mustSet(c, keyMountCwd, true) })
	o.ConfigFile = filepath.Join(wd, "spec.go") // a file in the working directory
	if _, err := buildSpec(o); err == nil || !strings.Contains(err.Error(), filepath.Join(wd, ".env")+" does not exist") {
		t.Fatalf("config file in the mounted working directory, no .env: %v", err)
	}
}
