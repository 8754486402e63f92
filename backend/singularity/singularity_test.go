package singularity

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/testenv/apptainerenv"
	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
	"github.com/a55dbaac/berth/session"
	"github.com/a55dbaac/berth/terminal"
)

// The helper process: a second (and third) berth process for the tests
// that need one. It creates the backend of BERTH_SING_KEY, runs
// BERTH_SING_SCRIPT through one Start, prints the output, and closes the
// backend only when BERTH_SING_CLOSE=1 (otherwise it exits as if it
// crashed, leaving the instance running).
func TestHelperBerthProcess(t *testing.T) {
	if os.Getenv("BERTH_SING_HELPER") != "1" {
		t.Skip("helper process for other tests")
	}
	env := map[string]string{ScratchEnv: os.Getenv("BERTH_SING_SCRATCH")}
	cfg := config.Default().Terminal
	cfg.Backend = Name
	if err := cfg.Set(keyImage, os.Getenv("BERTH_SING_IMAGE")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	cfg.ContainerPersistent = os.Getenv("BERTH_SING_PERSISTENT") == "1"
	opts := backend.Options{Key: os.Getenv("BERTH_SING_KEY"), Config: cfg, Home: os.Getenv("BERTH_SING_HOME"),
		Getenv: func(k string) string { return env[k] }}
	ctx := context.Background()
	if os.Getenv("BERTH_SING_NOCLEAN") == "1" {
		cleaned[opts.Getenv(ScratchEnv)] = true // a berth that crashed before its clean-up
	}
	b, err := New(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "New: %v\n", err)
		os.Exit(3)
	}
	out, code, err := backend.Output(ctx, b, backend.ProcSpec{Argv: []string{"/bin/sh", "-c", os.Getenv("BERTH_SING_SCRIPT")}}, nil, 1<<20)
	if err != nil || code != 0 {
		fmt.Fprintf(os.Stderr, "script: exit %d: %v: %s\n", code, err, out)
		os.Exit(4)
	}
	os.Stdout.Write(out)
	if os.Getenv("BERTH_SING_CLOSE") == "1" {
		if err := b.Close(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "Close: %v\n", err)
			os.Exit(5)
		}
	}
	os.Exit(0)
}

// berthProcess runs the helper as a separate berth process.
func (e *testEnv) berthProcess(t *testing.T, key string, persistent, closeIt bool, script string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperBerthProcess$", "-test.count=1")
	b := func(v bool) string {
		if v {
			return "1"
		}
		return "0"
	}
	cmd.Env = append(os.Environ(), "BERTH_SING_HELPER=1", "BERTH_SING_KEY="+key, "BERTH_SING_HOME="+e.home,
		"BERTH_SING_SCRATCH="+e.scratch, "BERTH_SING_IMAGE="+e.image, "BERTH_SING_PERSISTENT="+b(persistent),
		"BERTH_SING_CLOSE="+b(closeIt), "BERTH_SING_SCRIPT="+script, "BERTH_SING_NOCLEAN="+b(e.noClean))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("berth helper process (key %s): %v\n%s", key, err, errb.String())
	}
	return out.String()
}

// withScratch is e with another scratch directory (crash clean-up runs
// once per scratch directory per process).
func (e *testEnv) withScratch(t *testing.T) *testEnv {
	return &testEnv{bin: e.bin, image: e.image, home: e.home, scratch: t.TempDir(), env: map[string]string{}, noClean: e.noClean}
}

func persistent(c *config.Terminal) { c.ContainerPersistent = true }

func testOverlayPersistsAcrossProcesses(t *testing.T, e *testEnv) {
	key := randomKey()
	opts := e.options(key, persistent)
	t.Cleanup(func() { envAdmin{}.Remove(context.Background(), opts, key) })
	e.berthProcess(t, key, true, true, "echo kept-across-processes > /root/persist.txt")
	name := InstanceName(key)
	if e.running(t, name) != nil {
		t.Fatal("Close of a persistent environment left the instance running")
	}
	upper := filepath.Join(overlayDirPath(e.scratch, name), "upper", "root", "persist.txt")
	if data, err := os.ReadFile(upper); err != nil || string(data) != "kept-across-processes\n" {
		t.Errorf("overlay directory holds %q (%v) at %s", data, err, upper)
	}
	if out := e.berthProcess(t, key, true, true, "cat /root/persist.txt"); out != "kept-across-processes\n" {
		t.Errorf("second berth process read %q", out)
	}
}

func testImageOverlayPersists(t *testing.T, e *testEnv) {
	key := randomKey()
	opts := e.options(key, func(c *config.Terminal) {
		mustSet(t, c, keyOverlay, "image")
		c.ContainerPersistent = true
		c.ContainerDisk = 64
	})
	t.Cleanup(func() { envAdmin{}.Remove(context.Background(), opts, key) })
	b := newBackend(t, opts)
	if !strings.HasSuffix(b.Overlay(), ".img") {
		t.Fatalf("overlay %q, want an image", b.Overlay())
	}
	if st, err := os.Stat(b.Overlay()); err != nil || st.Size() != 64<<20 {
		t.Fatalf("overlay image: %v %v", st, err)
	}
	mustRun(t, b, "echo in-image > /root/img.txt")
	if contains(b.NotEnforced(), "container_disk") {
		t.Errorf("an image overlay enforces container_disk, but it was reported: %q", b.NotEnforced())
	}
	b.Close(context.Background())
	b2 := newBackend(t, opts)
	if out := mustRun(t, b2, "cat /root/img.txt"); out != "in-image\n" {
		t.Errorf("after restart: %q", out)
	}
}

func testReattachRunningInstance(t *testing.T, e *testEnv) {
	key := randomKey()
	opts := e.options(key, persistent)
	t.Cleanup(func() { envAdmin{}.Remove(context.Background(), opts, key) })
	// A berth process starts the instance, leaves a process and a file in
	// the instance's private /tmp (a tmpfs that lives as long as the
	// instance), and dies without closing.
	e.berthProcess(t, key, true, false, "setsid sleep 4321 >/dev/null 2>&1 </dev/null & echo here > /tmp/alive-marker")
	name := InstanceName(key)
	before := e.running(t, name)
	if before == nil {
		t.Fatal("the crashed berth's instance is not running")
	}
	b := newBackend(t, opts)
	after := e.running(t, name)
	if after == nil || after.PID != before.PID {
		t.Fatalf("instance PID %v after New, %d before: not reattached", after, before.PID)
	}
	if out := mustRun(t, b, "cat /tmp/alive-marker; ps | grep -c '[s]leep 4321'"); out != "here\n1\n" {
		t.Errorf("reattached instance shows %q", out)
	}
	rec, err := readRecord(e.scratch, name)
	if err != nil || rec.Owner != currentOwner() {
		t.Errorf("owner mark after reattach: %+v %v (want %q)", rec, err, currentOwner())
	}
}

func testOrphansCleaned(t *testing.T, e *testEnv) {
	e = e.withScratch(t)
	e.noClean = true // the helpers play berths that crash before cleaning up
	throwaway, kept := randomKey(), randomKey()
	t.Cleanup(func() {
		for _, k := range []string{throwaway, kept} {
			envAdmin{}.Remove(context.Background(), e.options(k, nil), k)
		}
	})
	e.berthProcess(t, throwaway, false, false, "true")
	e.berthProcess(t, kept, true, false, "echo survive > /root/orphan.txt")
	for _, k := range []string{throwaway, kept} {
		if e.running(t, InstanceName(k)) == nil {
			t.Fatalf("instance of %s not left running by its crashed berth", k)
		}
	}
	// The next berth process (this one) cleans up at its first creation in
	// that scratch directory.
	newBackend(t, e.options("", nil))
	if e.running(t, InstanceName(throwaway)) != nil || e.running(t, InstanceName(kept)) != nil {
		t.Fatal("orphaned instances still running")
	}
	if _, err := readRecord(e.scratch, InstanceName(throwaway)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record of the throwaway orphan: %v", err)
	}
	rec, err := readRecord(e.scratch, InstanceName(kept))
	if err != nil || rec.Stopped.IsZero() {
		t.Errorf("record of the persistent orphan: %+v %v", rec, err)
	}
	// The persistent one comes back with its files.
	b := newBackend(t, e.options(kept, persistent))
	if out := mustRun(t, b, "cat /root/orphan.txt"); out != "survive\n" {
		t.Errorf("persistent orphan's overlay after clean-up: %q", out)
	}
}

func newTerminal(t *testing.T, be backend.Backend) *terminal.Environment {
	t.Helper()
	env := terminal.New(be, terminal.Options{
		DefaultTimeout: 60 * time.Second,
		MaxOutputChars: 50000,
		SpillDir:       t.TempDir(),
		Session:        session.Options{Grace: time.Second},
	})
	t.Cleanup(func() { env.Close(context.Background()) })
	return env
}

func testTimeoutKillsTreeInstanceLives(t *testing.T, e *testEnv) {
	b := newBackend(t, e.options("", nil))
	term := newTerminal(t, b)
	pid := e.running(t, b.Instance()).PID
	r := term.Run(context.Background(), terminal.Request{Command: "sleep 3101 & (sleep 3102 &) ; setsid sleep 3103 & sleep 3104", Timeout: 2})
	if r.ExitCode != 124 || !strings.Contains(r.Output, "[Command timed out after 2s]") {
		t.Fatalf("timeout result: exit %d output %q", r.ExitCode, r.Output)
	}
	// Seen from a fresh exec in the instance: the command's tree is gone.
	var left string
	for i := 0; i < 50; i++ {
		left, _ = run(t, b, "ps | grep '[s]leep 310' || true")
		if left == "" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if left != "" {
		t.Errorf("processes of the timed-out command left in the instance:\n%s", left)
	}
	if after := e.running(t, b.Instance()); after == nil || after.PID != pid {
		t.Fatalf("instance after the timeout: %+v, want PID %d still running", after, pid)
	}
	if r := term.Run(context.Background(), terminal.Request{Command: "echo still-here"}); r.ExitCode != 0 || r.Output != "still-here" {
		t.Errorf("next command: %d %q", r.ExitCode, r.Output)
	}
}

func testEnvPassthroughOnly(t *testing.T, e *testEnv) {
	t.Setenv("BERTH_SING_HOST_ONLY", "host-leak")
	t.Setenv("OPENAI_API_KEY", "sk-host-leak")
	e.setenv("BERTH_PASSED", "passed-value")
	e.setenv("BERTH_FORWARDED", "forwarded-value")
	b := newBackend(t, e.options("", func(c *config.Terminal) {
		c.EnvPassthrough = []string{"BERTH_PASSED"}
		mustSet(t, c, keyForwardEnv, []string{"BERTH_FORWARDED"})
	}))
	term := newTerminal(t, b)
	r := term.Run(context.Background(), terminal.Request{Command: "env"})
	if r.ExitCode != 0 {
		t.Fatalf("env: %d %q", r.ExitCode, r.Output)
	}
	for _, want := range []string{"BERTH_PASSED=passed-value", "BERTH_FORWARDED=forwarded-value"} {
		if !strings.Contains(r.Output, want) {
			t.Errorf("%s missing from the command's environment:\n%s", want, r.Output)
		}
	}
	for _, leak := range []string{"host-leak", "BERTH_SING_HOST_ONLY", "OPENAI_API_KEY", "APPTAINER_CONFIGDIR"} {
		if strings.Contains(r.Output, leak) {
			t.Errorf("%s reached the command from the host environment:\n%s", leak, r.Output)
		}
	}
	// Nothing else from berth's environment: every variable is the
	// container's, Apptainer's, or the session's own.
	host := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		host[k] = v
	}
	for _, line := range strings.Split(r.Output, "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "TERM" || k == "PWD" || k == "HOME" || k == "LANG" || k == "PATH" || k == "SHLVL" || k == "_" || k == "OLDPWD" {
			continue
		}
		if hv, found := host[k]; found && hv == v && !strings.HasPrefix(k, "APPTAINER_") && !strings.HasPrefix(k, "SINGULARITY_") {
			t.Errorf("host variable %s=%s reached the command", k, v)
		}
	}
	// The forwarded values are not in any command line on the host.
	for _, p := range procCmdlines(t) {
		if strings.Contains(p, "passed-value") || strings.Contains(p, "forwarded-value") {
			t.Errorf("a forwarded value is in a command line: %q", p)
		}
	}
}

func procCmdlines(t *testing.T) []string {
	t.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []string
	for _, d := range dirs {
		if b, err := os.ReadFile(d); err == nil {
			out = append(out, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

// logRecorder is a slog handler that keeps the messages.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	l.mu.Lock()
	l.msgs = append(l.msgs, b.String())
	l.mu.Unlock()
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }
func (l *logRecorder) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs...)
}

func testLimitsReported(t *testing.T, e *testEnv) {
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		t.Skip("systemd runs here: the stand-in's stock config can apply limits")
	}
	limitsMu.Lock() // probe afresh
	limitsProbe = map[string]limitState{}
	limitsMu.Unlock()
	rec := &logRecorder{}
	opts := e.options("", func(c *config.Terminal) { c.ContainerCPU = 1.5; c.ContainerMemory = 700 })
	opts.Logger = slog.New(rec)
	b := newBackend(t, opts)
	ne := b.NotEnforced()
	if !contains(ne, "container_cpu=1.5 not enforced") || !contains(ne, "container_memory=700MB not enforced") ||
		!contains(ne, "cannot use systemd cgroups manager") || !contains(ne, "container_disk=") {
		t.Errorf("NotEnforced = %q", ne)
	}
	if !contains(rec.all(), "limits not enforced (berth doctor shows them too) limits=container_cpu=1.5 not enforced") ||
		!contains(rec.all(), "; container_memory=700MB not enforced") {
		t.Errorf("creation did not log the unenforced memory limit:\n%s", strings.Join(rec.all(), "\n"))
	}
	// The instance runs (without the limits) rather than not at all.
	mustRun(t, b, "true")
	fp := Doctor(context.Background(), opts)
	if !fp.Usable || !contains(fp.Details, "limit NOT enforced: container_memory=700MB") || !contains(fp.Details, "limit NOT enforced: container_cpu=1.5") {
		t.Errorf("doctor: %+v", fp)
	}
}

func testLimitsEnforced(t *testing.T, e *testEnv) {
	apptainerenv.RequireConf(t, "systemd cgroups = no")
	bin, _ := findBinary("")
	limitsMu.Lock()
	limitsProbe = map[string]limitState{}
	limitsMu.Unlock()
	b := newBackend(t, e.options("", func(c *config.Terminal) { c.ContainerCPU = 0.5; c.ContainerMemory = 300 }))
	if b.cli.bin != bin {
		t.Fatalf("backend drives %s, want the configured stand-in %s", b.cli.bin, bin)
	}
	if contains(b.NotEnforced(), "container_memory") || contains(b.NotEnforced(), "container_cpu") {
		t.Fatalf("limits reported unenforced: %q", b.NotEnforced())
	}
	pid := e.running(t, b.Instance()).PID
	out := mustRun(t, b, "cat /proc/self/cgroup")
	if !strings.Contains(out, "/apptainer/"+strconv.Itoa(pid)) {
		t.Errorf("exec not in the instance's cgroup:\n%s", out)
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory/apptainer"); err == nil {
		mem, _ := os.ReadFile(fmt.Sprintf("/sys/fs/cgroup/memory/apptainer/%d/memory.limit_in_bytes", pid))
		if strings.TrimSpace(string(mem)) != strconv.Itoa(300<<20) {
			t.Errorf("memory.limit_in_bytes = %q", mem)
		}
	}
}

func testSIFCacheBuiltOnce(t *testing.T, e *testEnv) {
	home := t.TempDir()
	ref := "docker-daemon://" + dockerenv.Image(t)
	const n = 4
	var wg sync.WaitGroup
	recs := make([]*logRecorder, n)
	bes := make([]*Backend, n)
	errs := make([]error, n)
	events := make([][]backend.Event, n) // each New reports on its own goroutine
	for i := range n {
		recs[i] = &logRecorder{}
		opts := e.options("", func(c *config.Terminal) { mustSet(t, c, keyImage, ref) })
		opts.Home = home
		opts.Logger = slog.New(recs[i])
		opts.Progress = func(ev backend.Event) { events[i] = append(events[i], ev) }
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			bes[i], errs[i] = New(ctx, opts)
		}()
	}
	wg.Wait()
	builds, shown := 0, 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("New %d: %v", i, errs[i])
		}
		// The build is a step a person watching sees begin and end.
		for _, ev := range events[i] {
			if strings.HasPrefix(ev.Step, "building "+ref+" into a SIF") && ev.End && ev.Err == nil {
				shown++
			}
		}
		defer bes[i].Close(context.Background())
		for _, m := range recs[i].all() {
			if strings.HasPrefix(m, "singularity: building the image once") {
				builds++
			}
		}
		if bes[i].Image() != bes[0].Image() || !strings.HasPrefix(bes[i].Image(), filepath.Join(home, "singularity", "sif")+"/") {
			t.Errorf("backend %d runs %s", i, bes[i].Image())
		}
		mustRun(t, bes[i], "test -x /bin/busybox")
	}
	if builds != 1 || shown != 1 {
		t.Errorf("%d builds (%d shown as progress) for %d concurrent first uses, want 1", builds, shown, n)
	}
	sifs, _ := filepath.Glob(filepath.Join(home, "singularity", "sif", "*.sif"))
	if len(sifs) != 1 {
		t.Errorf("cache holds %q", sifs)
	}
}

func testBuildFailureFallsBack(t *testing.T, e *testEnv) {
	rec := &logRecorder{}
	opts := e.options("", func(c *config.Terminal) { mustSet(t, c, keyImage, "docker://berth-no-such-registry.invalid/img:1") })
	opts.Logger = slog.New(rec)
	_, err := New(context.Background(), opts)
	if err == nil {
		t.Fatal("New succeeded with an image no registry serves")
	}
	if !contains(rec.all(), "building the image into a SIF failed; running the reference directly") {
		t.Errorf("no fallback warning:\n%s", strings.Join(rec.all(), "\n"))
	}
	if !strings.Contains(err.Error(), "docker://berth-no-such-registry.invalid/img:1") {
		t.Errorf("error does not name the image: %v", err)
	}
}

func testRecreatedAfterOutsideKill(t *testing.T, e *testEnv) {
	b := newBackend(t, e.options("", nil))
	term := newTerminal(t, b)
	if r := term.Run(context.Background(), terminal.Request{Command: "echo before"}); r.ExitCode != 0 {
		t.Fatalf("first command: %+v", r)
	}
	if err := b.kill(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.running(t, b.Instance()) != nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	var r terminal.Result
	for i := 0; i < 3; i++ { // the lost shell is reported once, then replaced
		if r = term.Run(context.Background(), terminal.Request{Command: "echo after"}); r.ExitCode == 0 {
			break
		}
	}
	if r.ExitCode != 0 || r.Output != "after" {
		t.Fatalf("after the instance was killed: %+v", r)
	}
	if e.running(t, b.Instance()) == nil {
		t.Error("instance not running again")
	}
}

func testNoNetworkAndBinds(t *testing.T, e *testEnv) {
	data := t.TempDir()
	ro := t.TempDir()
	os.WriteFile(filepath.Join(ro, "cred"), []byte("c\n"), 0o600)
	b := newBackend(t, e.options("", func(c *config.Terminal) {
		c.DockerNetwork = false
		mustSet(t, c, keyBinds, []string{data + ":/data", ro + ":/creds:ro"})
	}))
	if out := mustRun(t, b, "cat /proc/net/dev | grep -c :"); out != "1\n" {
		t.Errorf("interfaces without network: %q", out)
	}
	mustRun(t, b, "echo from-inside > /data/f")
	if got, _ := os.ReadFile(filepath.Join(data, "f")); string(got) != "from-inside\n" {
		t.Errorf("read-write singularity_binds entry: host sees %q", got)
	}
	if out, code := run(t, b, "cat /creds/cred && touch /creds/x 2>&1"); code == 0 || !strings.HasPrefix(out, "c\n") || !strings.Contains(out, "Read-only") {
		t.Errorf("read-only singularity_binds entry: %d %q", code, out)
	}
}

func testEnvAdmin(t *testing.T, e *testEnv) {
	e = e.withScratch(t)
	// An instance list of its own: List shows every berth_ instance of the
	// user, and one another test leaves behind (a manager whose idle
	// clean-up was cut short under load) is not this test's business.
	apptainerenv.Isolate(t, e.bin)
	key := randomKey()
	opts := e.options(key, persistent)
	b := newBackend(t, opts)
	mustRun(t, b, "echo x > /root/x")
	list, err := envAdmin{}.List(context.Background(), opts)
	if err != nil || len(list) != 1 || list[0].Key != key || list[0].State != "running" || !list[0].Persistent || list[0].ID != b.Instance() {
		t.Fatalf("List: %+v %v", list, err)
	}
	b.Close(context.Background())
	list, _ = envAdmin{}.List(context.Background(), opts)
	if len(list) != 1 || list[0].State != "stopped" {
		t.Fatalf("List after Close: %+v", list)
	}
	if pruned, err := (envAdmin{}).Prune(context.Background(), opts, time.Hour); err != nil || len(pruned) != 0 {
		t.Errorf("Prune of a fresh environment: %v %v", pruned, err)
	}
	if pruned, err := (envAdmin{}).Prune(context.Background(), opts, 0); err != nil || len(pruned) != 1 || pruned[0] != key {
		t.Errorf("Prune(0): %v %v", pruned, err)
	}
	if _, err := os.Stat(overlayDirPath(e.scratch, b.Instance())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("overlay after prune: %v", err)
	}
	// Remove stops a running one and deletes its files.
	b2 := newBackend(t, e.options(key, persistent))
	if err := (envAdmin{}).Remove(context.Background(), opts, key); err != nil {
		t.Fatal(err)
	}
	if e.running(t, b2.Instance()) != nil {
		t.Error("Remove left the instance running")
	}
	if list, _ := (envAdmin{}).List(context.Background(), opts); len(list) != 0 {
		t.Errorf("List after Remove: %+v", list)
	}
}

func testDoctor(t *testing.T, e *testEnv) {
	fp := Doctor(context.Background(), e.options("", nil))
	if !fp.Usable || !strings.HasPrefix(fp.Summary, "apptainer 1.5.") || !contains(fp.Details, "scratch: "+e.scratch) {
		t.Errorf("doctor: %+v", fp)
	}
	fp = Doctor(context.Background(), e.options("", func(c *config.Terminal) { mustSet(t, c, keyImage, "/nonexistent/x.sif") }))
	if fp.Usable || !strings.Contains(fp.Fix, "singularity_image") {
		t.Errorf("doctor with a missing image: %+v", fp)
	}
}

func testMissingBinary(t *testing.T, e *testEnv) {
	missing := func(c *config.Terminal) { mustSet(t, c, keyBinary, "berth-no-such-apptainer") }
	_, err := New(context.Background(), e.options("", missing))
	var ue *backend.UnreachableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "berth-no-such-apptainer") {
		t.Fatalf("New with a missing executable: %v", err)
	}
	fp := Doctor(context.Background(), e.options("", missing))
	if fp.Usable || fp.Fix == "" {
		t.Errorf("doctor with a missing executable: %+v", fp)
	}
}

// testNoHostEnvInInstance is N10: berth's environment reaches no process
// of the instance (PID 1 included: it used to hold every host variable,
// provider keys too) and no host-side apptainer process berth starts (the
// instance's monitor lives as long as the instance). Only this test
// process, whose environment it is, holds the secret afterwards.
func testNoHostEnvInInstance(t *testing.T, e *testEnv) {
	// Unique per run: a concurrent run of this test elsewhere holds its
	// own secret in its own environment.
	secret := fmt.Sprintf("SINGSECRET-N10-%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Setenv("OPENAI_API_KEY", "sk-proj-"+secret)
	t.Setenv("HOSTONLY_N10_VAR", "hostonly-"+secret) // a name no filter calls secret
	b := newBackend(t, e.options("", nil))
	out := mustRun(t, b, `for p in /proc/[0-9]*; do
  if tr '\0' '\n' <"$p/environ" | grep -q `+secret+`; then echo "$p $(cat "$p/cmdline" | tr '\0' ' ')"; fi
done 2>/dev/null; echo scanned`)
	if out != "scanned\n" {
		t.Errorf("host variables in the environ of processes inside the instance:\n%s", out)
	}
	if pid1 := mustRun(t, b, `tr '\0' '\n' </proc/1/environ | grep -c APPTAINER_ || true`); pid1 == "0\n" {
		t.Errorf("the scan could not read /proc/1/environ inside the instance (no Apptainer variable in it)")
	}
	files, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, f := range files {
		pid, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(f, "/proc/"), "/environ"))
		if pid == os.Getpid() {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(data), secret) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join(filepath.Dir(f), "cmdline"))
		t.Errorf("host process %d holds a variable of berth's environment: %s", pid, strings.ReplaceAll(string(cmdline), "\x00", " "))
	}
}

// testBerthsHomeReadOnlyInBind is the 2026-11-28 review's R1 on the
// singularity backend: a host directory bound writable into the instance
// (singularity_binds) that holds berth's home gave the commands berth's
// settings. Inside the instance the home is read-only, and neither it nor
// a directory above it can be moved aside and replaced; the rest of the
// bound directory stays writable.
func testBerthsHomeReadOnlyInBind(t *testing.T, e *testEnv) {
	host := t.TempDir()
	home := filepath.Join(host, ".config", "berth")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(home, "config.yaml")
	if err := os.WriteFile(conf, []byte("approvals:\n  mode: manual\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := e.options("", func(c *config.Terminal) { mustSet(t, c, keyBinds, []string{host + ":/data"}) })
	opts.Home = home
	b := newBackend(t, opts)
	for _, c := range []string{
		"echo 'approvals: {mode: off}' >> /data/.config/berth/config.yaml && echo ESCAPED",
		"echo TERMINAL_ENV=local > /data/.config/berth/.env && echo ESCAPED",
		"mv /data/.config/berth /data/.config/old && echo ESCAPED",
		"mv /data/.config /data/.config.old && mkdir -p /data/.config/berth && echo x > /data/.config/berth/config.yaml && echo ESCAPED",
		"rm -rf /data/.config/berth && echo ESCAPED",
		"(sleep 0.2; echo x >> /data/.config/berth/config.yaml && echo ESCAPED) & wait $!",
	} {
		if out, code := run(t, b, c); code == 0 || strings.Contains(out, "ESCAPED") {
			t.Errorf("%s: exit %d %q: it got through", c, code, out)
		}
	}
	if b, _ := os.ReadFile(conf); string(b) != "approvals:\n  mode: manual\n" {
		t.Fatalf("berth's config changed: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(home, ".env")); err == nil {
		t.Fatal("a .env appeared in berth's home")
	}
	if out := mustRun(t, b, "echo mine > /data/mine && cat /data/mine"); out != "mine\n" {
		t.Fatalf("the rest of the bound directory: %q", out)
	}
	fp := Doctor(context.Background(), opts)
	if all := strings.Join(fp.Details, "\n"); !strings.Contains(all, home+" (berth's own settings) lies in a host directory bound writable into the instance: kept read-only there (at /data/.config/berth)") {
		t.Errorf("doctor does not say so:\n%s", all)
	}
}
