package daytona

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	apiclient "github.com/daytona/clients/api-client-go"
	"github.com/moby/moby/client"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/procmark"
	"github.com/a55dbaac/berth/internal/testenv/daytonafake"
	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
	"github.com/a55dbaac/berth/terminal"
)

func init() {
	internalTests = []struct {
		name string
		fn   func(*testing.T, *daytonafake.Server)
	}{
		{"SandboxDefinition", testSandboxDefinition},
		{"DiskCappedWithWarning", testDiskCapped},
		{"StopFromOutsideThenWake", testStopFromOutside},
		{"ArchiveFromOutsideThenWake", testArchiveFromOutside},
		{"DeletedFromOutsideIsRecreated", testDeletedFromOutside},
		{"TimeoutAndInterruptLeaveSandboxRunning", testTimeoutInterruptKeepSandbox},
		{"EnvPassthroughReachesCommandNotDefinition", testEnvPassthrough},
		{"BadCredentialsClearErrors", testBadCredentials},
		{"PersistentCloseStopsAndNextBerthStarts", testPersistentSleepWake},
		{"ThrowawayCloseDeletes", testThrowawayCloseDeletes},
		{"CrashedOwnersSandboxesCleaned", testCrashedOwners},
		{"ReattachedByLiveBerthSurvivesSweep", testReattachedSurvivesSweep},
		{"KilledReattachersSandboxStopped", testKilledReattacherStopped},
		{"RefusedRelabelWarnsAndCarriesOn", testClaimRefusedCarriesOn},
		{"EnvAdminListRemovePrune", testEnvAdmin},
		{"Doctor", testDoctor},
		{"OneShotLikeTheReference", testOneShot},
		{"WriteFileCarriesAnyPath", testWriteFileAnyPath},
		{"TrivialCommandIsOneRoundTrip", testOneRoundTrip},
		{"CwdDefaultsToHomeAndFollowsConfig", testCwd},
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// termEnv wraps a backend in a terminal environment closed with the test.
func termEnv(t *testing.T, be backend.Backend) *terminal.Environment {
	e := terminal.New(be, terminal.Options{DefaultTimeout: 60 * time.Second, SpillDir: t.TempDir()})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		e.Close(ctx)
	})
	return e
}

// must runs a command and checks output and exit code.
func must(t *testing.T, e *terminal.Environment, command, want string) terminal.Result {
	t.Helper()
	r := e.Run(context.Background(), terminal.Request{Command: command, Timeout: 60})
	if r.Error != nil || r.Output != want || r.ExitCode != 0 {
		t.Fatalf("%q: got %q exit %d err %v, want %q", command, r.Output, r.ExitCode, errText(r.Error), want)
	}
	return r
}

func errText(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

// outside is Daytona's generated client as another user of the account
// would drive it.
func outside(fake *daytonafake.Server) *apiclient.APIClient {
	return fake.APIClient(fake.APIKey())
}

// waitShellLost waits until the backend saw every process it started end:
// what a user's next command, seconds after the sandbox stopped, finds.
func waitShellLost(t *testing.T, b *Backend) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b.mu.Lock()
		live := 0
		for p := range b.procs {
			if !p.exited() {
				live++
			}
		}
		b.mu.Unlock()
		if live == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d processes still look alive after the sandbox stopped", live)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func testSandboxDefinition(t *testing.T, fake *daytonafake.Server) {
	opts := testOptions(t, fake, func(c *config.Terminal) {
		c.ContainerCPU = 1.5
		c.ContainerMemory = 1500
		c.ContainerDisk = 3000
		c.DockerNetwork = false
	}, nil)
	b := newBackend(t, opts)
	info, ok := fake.Sandbox(b.SandboxID())
	if !ok {
		t.Fatal("sandbox not found in the fake")
	}
	if info.Name != "berth-"+opts.Key || info.Labels[LabelKey] != opts.Key || info.Labels[LabelBerth] != "1" ||
		info.Labels[LabelOwner] == "" || info.Labels[LabelPersistent] != "0" {
		t.Errorf("name %q labels %v", info.Name, info.Labels)
	}
	if info.CPU != 2 || info.MemoryGiB != 2 || info.DiskGiB != 3 {
		t.Errorf("cpu %d memory %d GiB disk %d GiB, want 2, 2, 3 (rounded up)", info.CPU, info.MemoryGiB, info.DiskGiB)
	}
	if info.AutoStopInterval != 0 {
		t.Errorf("auto-stop %d minutes, want 0 (off) while berth holds the sandbox", info.AutoStopInterval)
	}
	if !info.NetworkBlockAll {
		t.Error("docker_network false did not block the sandbox's network")
	}
	if info.Image != dockerenv.Image(t) || len(info.Env) != 0 {
		t.Errorf("image %q env %v, want the test image and no env", info.Image, info.Env)
	}
	ins, err := dockerenv.Require(t).ContainerInspect(ctxT(t), info.ContainerID, client.ContainerInspectOptions{})
	if err != nil || ins.Container.HostConfig.NetworkMode != "none" {
		t.Errorf("container network: %v", err)
	}
}

func testDiskCapped(t *testing.T, fake *daytonafake.Server) {
	logs := &recordLogs{}
	opts := testOptions(t, fake, func(c *config.Terminal) { c.ContainerDisk = 20480 }, nil)
	opts.Logger = slog.New(logs)
	b := newBackend(t, opts)
	info, _ := fake.Sandbox(b.SandboxID())
	if info.DiskGiB != MaxDiskGiB {
		t.Fatalf("disk %d GiB, want the cap %d", info.DiskGiB, MaxDiskGiB)
	}
	found := false
	for _, l := range logs.all() {
		found = found || strings.HasPrefix(l, "WARN") && strings.Contains(l, "container_disk") && strings.Contains(l, "requested_gib=20")
	}
	if !found {
		t.Fatalf("no warning about the capped disk in %q", logs.all())
	}
}

// sleepAndWake puts the sandbox to sleep from outside with asleep, then
// checks the next command wakes it with the shell's state restored and the
// filesystem kept.
func sleepAndWake(t *testing.T, fake *daytonafake.Server, asleep func(ctx context.Context, api *apiclient.APIClient, id string)) {
	b := newBackend(t, testOptions(t, fake, nil, nil))
	e := termEnv(t, b)
	must(t, e, "mkdir -p /tmp/wd && cd /tmp/wd && export KEPT=yes && echo data >/root/kept", "")
	id := b.SandboxID()
	asleep(ctxT(t), outside(fake), id)
	waitShellLost(t, b)

	r := must(t, e, "echo $KEPT; pwd; cat /root/kept", "yes\n/tmp/wd\ndata")
	if r.EnvironmentRecreated {
		t.Error("environment_recreated set although the filesystem was kept")
	}
	if b.SandboxID() != id {
		t.Errorf("sandbox %s replaced by %s", id, b.SandboxID())
	}
	if info, _ := fake.Sandbox(id); info.State != "started" {
		t.Errorf("sandbox %s after the command, want started", info.State)
	}
}

func testStopFromOutside(t *testing.T, fake *daytonafake.Server) {
	sleepAndWake(t, fake, func(ctx context.Context, api *apiclient.APIClient, id string) {
		if _, _, err := api.SandboxAPI.StopSandbox(ctx, id).Execute(); err != nil {
			t.Fatal(err)
		}
		if err := fake.WaitState(ctx, id, "stopped"); err != nil {
			t.Fatal(err)
		}
	})
}

func testArchiveFromOutside(t *testing.T, fake *daytonafake.Server) {
	sleepAndWake(t, fake, func(ctx context.Context, api *apiclient.APIClient, id string) {
		if _, _, err := api.SandboxAPI.StopSandbox(ctx, id).Execute(); err != nil {
			t.Fatal(err)
		}
		if err := fake.WaitState(ctx, id, "stopped"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := api.SandboxAPI.ArchiveSandbox(ctx, id).Execute(); err != nil {
			t.Fatal(err)
		}
		if err := fake.WaitState(ctx, id, "archived"); err != nil {
			t.Fatal(err)
		}
	})
}

func testDeletedFromOutside(t *testing.T, fake *daytonafake.Server) {
	b := newBackend(t, testOptions(t, fake, nil, nil))
	e := termEnv(t, b)
	must(t, e, "cd /tmp && export KEPT=yes && echo data >/root/kept", "")
	id := b.SandboxID()
	ctx := ctxT(t)
	if _, _, err := outside(fake).SandboxAPI.DeleteSandbox(ctx, id).Execute(); err != nil {
		t.Fatal(err)
	}
	for {
		if _, ok := fake.Sandbox(id); !ok {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitShellLost(t, b)
	r := must(t, e, "echo $KEPT; pwd; cat /root/kept 2>/dev/null || echo gone", "yes\n/tmp\ngone")
	if !r.EnvironmentRecreated {
		t.Error("a sandbox rebuilt empty is not reported as environment_recreated")
	}
	if b.SandboxID() == id {
		t.Error("the sandbox id did not change")
	}
	if r := must(t, e, "true", ""); r.EnvironmentRecreated {
		t.Error("environment_recreated reported twice")
	}
}

func testTimeoutInterruptKeepSandbox(t *testing.T, fake *daytonafake.Server) {
	b := newBackend(t, testOptions(t, fake, nil, nil))
	e := termEnv(t, b)
	must(t, e, "cd /tmp && export KEPT=yes", "")
	id := b.SandboxID()
	r := e.Run(context.Background(), terminal.Request{Command: "echo go; sleep 3141", Timeout: 1})
	if r.ExitCode != 124 || !strings.HasSuffix(r.Output, "[Command timed out after 1s]") {
		t.Fatalf("timeout: %q exit %d err %s", r.Output, r.ExitCode, errText(r.Error))
	}
	// The interrupt comes once the command runs (seen from a second
	// process), not after a guess at how long starting it takes.
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer cancel()
		wctx, wcancel := context.WithTimeout(context.Background(), time.Minute)
		defer wcancel()
		backend.Output(wctx, b, backend.ProcSpec{Argv: []string{"/bin/sh", "-c",
			"until ps -o args | grep -q '^sleep 3142'; do sleep 0.05; done"}}, nil, 0)
	}()
	r = e.Run(ctx, terminal.Request{Command: "echo go; sleep 3142", Timeout: 60})
	if r.ExitCode != 130 {
		t.Fatalf("interrupt: %q exit %d err %s", r.Output, r.ExitCode, errText(r.Error))
	}
	if info, _ := fake.Sandbox(id); info.State != "started" || b.SandboxID() != id {
		t.Fatalf("sandbox %s is %s after a timeout and an interrupt, want the same sandbox started", info.ID, info.State)
	}
	must(t, e, "echo $KEPT; pwd; ps -o args | grep -c '^sleep 314' || true", "yes\n/tmp\n0")
}

func testEnvPassthrough(t *testing.T, fake *daytonafake.Server) {
	const pass, fwd = "passthrough-value-8d1e", "forwarded-value-2c7a"
	opts := testOptions(t, fake, func(c *config.Terminal) {
		c.EnvPassthrough = []string{"MY_PASSTHROUGH"}
		c.DockerForwardEnv = []string{"MY_FORWARDED"}
	}, map[string]string{"MY_PASSTHROUGH": pass, "MY_FORWARDED": fwd})
	b := newBackend(t, opts)
	e := termEnv(t, b)
	must(t, e, "echo $MY_PASSTHROUGH $MY_FORWARDED", pass+" "+fwd)
	// Background processes get them too (they inherit the session's exports).
	must(t, e, `sh -c 'echo "$MY_PASSTHROUGH"'`, pass)
	// In no command line of any process in the sandbox.
	must(t, e, `n=0; for f in /proc/[0-9]*/cmdline; do c=$(tr '\000' ' ' 2>/dev/null <"$f"); case "$c" in *passthrough-value*|*forwarded-value*) n=$((n+1));; esac; done; echo $n`, "0")

	for _, r := range fake.Requests() {
		if strings.Contains(string(r.Body), pass) || strings.Contains(string(r.Body), fwd) || strings.Contains(r.Path, pass) {
			t.Fatalf("a secret reached the Daytona API: %s %s %s", r.Method, r.Path, r.Body)
		}
	}
	info, _ := fake.Sandbox(b.SandboxID())
	for k, v := range info.Env {
		if v == pass || v == fwd || k == "MY_PASSTHROUGH" || k == "MY_FORWARDED" {
			t.Fatalf("sandbox env holds %s=%s", k, v)
		}
	}
	for k, v := range info.Labels {
		if strings.Contains(v, "value-") || strings.Contains(k, "MY_") {
			t.Fatalf("sandbox label %s=%s", k, v)
		}
	}
	ins, err := dockerenv.Require(t).ContainerInspect(ctxT(t), info.ContainerID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range ins.Container.Config.Env {
		if strings.Contains(kv, pass) || strings.Contains(kv, fwd) {
			t.Fatalf("container env holds %s", kv)
		}
	}
}

func testBadCredentials(t *testing.T, fake *daytonafake.Server) {
	ctx := ctxT(t)
	try := func(env map[string]string) error {
		opts := testOptions(t, fake, nil, nil)
		opts.Getenv = func(k string) string { return env[k] }
		b, err := New(ctx, opts)
		if err == nil {
			b.Close(ctx)
		}
		return err
	}
	err := try(map[string]string{EnvAPIURL: fake.APIURL(), EnvAPIKey: "wrong-key"})
	var ae *AuthError
	if !errors.As(err, &ae) || ae.Var != EnvAPIKey || !strings.Contains(err.Error(), EnvAPIKey) || ae.Status != 401 {
		t.Errorf("wrong key: %v", err)
	}
	err = try(map[string]string{EnvAPIURL: fake.APIURL(), EnvJWT: "a-jwt", EnvOrg: "org"})
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), EnvJWT) {
		t.Errorf("wrong JWT: %v", err)
	}
	if err := try(map[string]string{EnvAPIURL: fake.APIURL()}); !errors.Is(err, ErrNoCredentials) || !strings.Contains(err.Error(), EnvAPIKey) {
		t.Errorf("no credentials: %v", err)
	}
	if err := try(map[string]string{EnvAPIURL: fake.APIURL(), EnvJWT: "a-jwt"}); err == nil || !strings.Contains(err.Error(), EnvOrg) {
		t.Errorf("JWT without organization: %v", err)
	}
	if err := try(map[string]string{EnvAPIURL: "not a url", EnvAPIKey: "k"}); err == nil || !strings.Contains(err.Error(), EnvAPIURL) {
		t.Errorf("malformed URL: %v", err)
	}
	var ue *backend.UnreachableError
	if err := try(map[string]string{EnvAPIURL: "http://127.0.0.1:1/api", EnvAPIKey: "k"}); !errors.As(err, &ue) || !strings.Contains(err.Error(), EnvAPIURL) {
		t.Errorf("unreachable API: %v", err)
	}
}

func testPersistentSleepWake(t *testing.T, fake *daytonafake.Server) {
	opts := testOptions(t, fake, func(c *config.Terminal) { c.ContainerPersistent = true }, nil)
	t.Cleanup(func() { envAdmin{}.Remove(context.Background(), opts, opts.Key) })
	ctx := ctxT(t)
	b1, err := New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	id := b1.SandboxID()
	if out, _ := run(t, b1, "echo kept >/root/p && cat /root/p", ""); out != "kept\n" {
		t.Fatalf("write: %q", out)
	}
	if err := b1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if info, _ := fake.Sandbox(id); info.State != "stopped" {
		t.Fatalf("persistent sandbox is %s after Close, want stopped", info.State)
	}
	b2 := newBackend(t, opts)
	if b2.SandboxID() != id {
		t.Fatalf("next berth got sandbox %s, want %s started again", b2.SandboxID(), id)
	}
	if out, _ := run(t, b2, "cat /root/p", ""); out != "kept\n" {
		t.Fatalf("file after sleep and wake: %q", out)
	}
	if b2.Recreated() {
		t.Error("a woken sandbox reported as recreated")
	}
}

func testThrowawayCloseDeletes(t *testing.T, fake *daytonafake.Server) {
	opts := testOptions(t, fake, nil, nil)
	ctx := ctxT(t)
	b, err := New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	id := b.SandboxID()
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		if _, ok := fake.Sandbox(id); !ok {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("throwaway sandbox not deleted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := b.Start(ctx, backend.ProcSpec{Argv: []string{"true"}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close: %v", err)
	}
}

func testCrashedOwners(t *testing.T, fake *daytonafake.Server) {
	ctx := ctxT(t)
	// Two sandboxes as a berth that died would leave them: running, owned
	// by a process of this boot that no longer exists.
	dead := procmark.BootID() + "/999999999/1"
	old := currentOwner
	currentOwner = func() string { return dead }
	throwaway := testOptions(t, fake, nil, nil)
	persistent := testOptions(t, fake, func(c *config.Terminal) { c.ContainerPersistent = true }, nil)
	t.Cleanup(func() { envAdmin{}.Remove(context.Background(), persistent, persistent.Key) })
	var ids []string
	for _, o := range []backend.Options{throwaway, persistent} {
		b, err := New(ctx, o)
		if err != nil {
			currentOwner = old
			t.Fatal(err)
		}
		ids = append(ids, b.SandboxID()) // never closed: the crash
	}
	currentOwner = old
	reaped.Delete(fake.APIURL() + "\x00" + fake.APIKey())
	newBackend(t, testOptions(t, fake, nil, nil))
	if err := fake.WaitState(ctx, ids[1], "stopped"); err != nil {
		t.Errorf("persistent sandbox of the dead berth: %v", err)
	}
	for {
		if _, ok := fake.Sandbox(ids[0]); !ok {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("throwaway sandbox of the dead berth not deleted")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testEnvAdmin(t *testing.T, fake *daytonafake.Server) {
	ctx := ctxT(t)
	opts := testOptions(t, fake, func(c *config.Terminal) { c.ContainerPersistent = true }, nil)
	b, err := New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	id := b.SandboxID()
	list, err := envAdmin{}.List(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range list {
		found = found || e.Key == opts.Key && e.ID == id && e.Persistent && e.State == "started" && e.Backend == Name &&
			e.Image == dockerenv.Image(t)
	}
	if !found {
		t.Fatalf("berth env ls does not show %s: %+v", opts.Key, list)
	}
	b.Close(ctx) // stopped
	keys, err := envAdmin{}.Prune(ctx, opts, 0)
	if err != nil || !contains(keys, opts.Key) {
		t.Fatalf("prune: %v %v", keys, err)
	}
	// Remove: a second environment, running.
	opts2 := testOptions(t, fake, nil, nil)
	b2 := newBackend(t, opts2)
	if err := (envAdmin{}).Remove(ctx, opts2, opts2.Key); err != nil {
		t.Fatal(err)
	}
	for {
		if _, ok := fake.Sandbox(b2.SandboxID()); !ok {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("berth env rm left the sandbox")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := (envAdmin{}).Remove(ctx, opts2, "no-such-key"); err != nil {
		t.Fatalf("removing a key without a sandbox: %v", err)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func testDoctor(t *testing.T, fake *daytonafake.Server) {
	ctx := ctxT(t)
	opts := testOptions(t, fake, nil, nil)
	if fp := Doctor(ctx, opts); !fp.Usable || !strings.Contains(fp.Summary, fake.APIURL()) {
		t.Errorf("doctor with good credentials: %+v", fp)
	}
	opts.Getenv = func(k string) string {
		return map[string]string{EnvAPIURL: fake.APIURL(), EnvAPIKey: "bad"}[k]
	}
	if fp := Doctor(ctx, opts); fp.Usable || !strings.Contains(fp.Fix, EnvAPIKey) {
		t.Errorf("doctor with a bad key: %+v", fp)
	}
	opts.Getenv = func(string) string { return "" }
	if fp := Doctor(ctx, opts); fp.Usable || !strings.Contains(fp.Summary+" "+fp.Fix, EnvAPIKey) {
		t.Errorf("doctor without credentials: %+v", fp)
	}
}

func testOneShot(t *testing.T, fake *daytonafake.Server) {
	b := newBackend(t, testOptions(t, fake, nil, nil))
	code, err := b.RunOneShot(ctxT(t), "echo hi >/tmp/oneshot; exit 3")
	if err != nil || code != 3 {
		t.Fatalf("RunOneShot = %d, %v", code, err)
	}
	if out, _ := run(t, b, "cat /tmp/oneshot", ""); out != "hi\n" {
		t.Fatalf("one-shot command did not run: %q", out)
	}
}

// testWriteFileAnyPath checks that a path holding both kinds of quotes,
// which the toolbox's execute call could not carry before execLine
// escaped its words, is written.
func testWriteFileAnyPath(t *testing.T, fake *daytonafake.Server) {
	b := newBackend(t, testOptions(t, fake, nil, nil))
	run(t, b, `mkdir -p "/tmp/both'\"q"`, "")
	if err := b.WriteFile(ctxT(t), "/tmp/both'\"q/f", strings.NewReader("x"), 1, 0o644); err != nil {
		t.Fatalf("a path with both quotes: %v", err)
	}
	if out, _ := run(t, b, `cat "/tmp/both'\"q/f"`, ""); out != "x" {
		t.Fatalf("the file holds %q", out)
	}
}

// testOneRoundTrip checks that a trivial command of the persistent shell
// makes no API or toolbox call of its own: the sandbox's state is not asked
// before each command, no process is started, and the command and its
// output are one exchange on the open websocket.
func testOneRoundTrip(t *testing.T, fake *daytonafake.Server) {
	b := newBackend(t, testOptions(t, fake, nil, nil))
	e := termEnv(t, b)
	must(t, e, "echo warm", "warm")
	// The spare session prepared after the shell's start must not count.
	for deadline := time.Now().Add(time.Minute); ; {
		b.mu.Lock()
		ready := b.spare != nil && b.refilling == nil
		b.mu.Unlock()
		if ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no spare PTY session prepared")
		}
		time.Sleep(10 * time.Millisecond)
	}
	api, tb := len(fake.Requests()), fake.ToolboxCalls()
	for i := 0; i < 20; i++ {
		must(t, e, "echo x", "x")
	}
	if n := len(fake.Requests()) - api; n != 0 {
		t.Errorf("20 trivial commands made %d control-plane calls, want 0", n)
	}
	if n := fake.ToolboxCalls() - tb; n != 0 {
		t.Errorf("20 trivial commands made %d toolbox calls, want 0 (all over the open PTY session)", n)
	}
}

// TestConfigKey checks that daytona_image is declared to package config:
// its default, its variable and its check.
func TestConfigKey(t *testing.T) {
	d := config.Default().Terminal
	if d.String(KeyImage) != config.DefaultImage {
		t.Fatalf("default %s = %q", KeyImage, d.String(KeyImage))
	}
	if err := d.Set(KeyImage, "  "); err == nil || !strings.Contains(err.Error(), KeyImage) {
		t.Fatalf("a blank image was accepted: %v", err)
	}
	path := t.TempDir() + "/config.yaml"
	if err := os.WriteFile(path, []byte("terminal:\n  backend: daytona\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(config.LoadOptions{ConfigPath: path, Getenv: func(k string) string {
		return map[string]string{"TERMINAL_DAYTONA_IMAGE": "python:3.12", "BERTH_HOME": t.TempDir()}[k]
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Terminal.String(KeyImage); got != "python:3.12" {
		t.Fatalf("TERMINAL_DAYTONA_IMAGE gave %q", got)
	}
}

// testCwd checks where the shell starts: the home directory by default (as
// on the other container backends), the configured cwd when it is a path
// inside the sandbox.
func testCwd(t *testing.T, fake *daytonafake.Server) {
	must(t, termEnv(t, newBackend(t, testOptions(t, fake, nil, nil))), "pwd", "/root")
	b := newBackend(t, testOptions(t, fake, func(c *config.Terminal) { c.Cwd = "/tmp" }, nil))
	must(t, termEnv(t, b), "pwd", "/tmp")
	if out, _ := run(t, b, "pwd", ""); out != "/tmp\n" {
		t.Errorf("a process started without a directory runs in %q, want the configured /tmp", out)
	}
}
