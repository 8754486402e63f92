package modal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/procmark"
	"github.com/a55dbaac/berth/internal/randhex"
	"github.com/a55dbaac/berth/terminal"
	modal "github.com/modal-labs/libmodal/modal-go"
	pb "github.com/modal-labs/libmodal/modal-go/proto/modal_proto"
	"google.golang.org/protobuf/encoding/prototext"
)

// sdkClient is a second Modal client on the fake, as a user's dashboard or
// CLI would be.
func sdkClient(t *testing.T, f *fixture) *modal.Client {
	t.Helper()
	cred, err := resolveCredentials(f.getenv)
	if err != nil {
		t.Fatal(err)
	}
	c, err := newClient(context.Background(), cred, slog.New(slog.DiscardHandler), retryPolicyOf(DefaultRetryTimeoutSecs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func testInterruptAndTimeoutKeepSandbox(t *testing.T, f *fixture) {
	b := newBackend(t, f.options(t, "", nil))
	e := newEnv(t, b)
	id := b.SandboxID()
	mustRun(t, e, terminal.Request{Command: "export KEEP=yes; cd /tmp; echo data >/root/state"})

	r := mustRun(t, e, terminal.Request{Command: "echo start; sleep 3021", Timeout: 1})
	if r.ExitCode != 124 || !strings.HasSuffix(r.Output, "[Command timed out after 1s]") {
		t.Fatalf("timeout: %q exit %d", r.Output, r.ExitCode)
	}
	// Interrupt once the command runs in the sandbox (seen through an exec
	// of its own), not after a guessed delay.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan terminal.Result, 1)
	go func() { done <- e.Run(ctx, terminal.Request{Command: "echo start; sleep 3022", Timeout: 60}) }()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if out, _ := sh(t, b, "ps | grep -c '[s]leep 3022'"); strings.TrimSpace(out) == "1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("sleep 3022 never ran in the sandbox")
		}
	}
	cancel()
	r = <-done
	if r.ExitCode != 130 || !strings.HasSuffix(r.Output, "[Command interrupted]") {
		t.Fatalf("interrupt: %q exit %d error %v", r.Output, r.ExitCode, r.Err)
	}

	r = mustRun(t, e, terminal.Request{Command: "echo $KEEP; pwd; cat /root/state; ps | grep -c '[s]leep 302'"})
	if r.Output != "yes\n/tmp\ndata\n0" || r.EnvironmentRecreated {
		t.Fatalf("after a timeout and an interrupt: %q (recreated %v); want the state kept and no sleep left", r.Output, r.EnvironmentRecreated)
	}
	if b.SandboxID() != id || !sandboxInfo(t, f.srv, id).Running {
		t.Fatalf("the sandbox changed or stopped: %s -> %s", id, b.SandboxID())
	}
}

func testSnapshotRestoreAcrossBackends(t *testing.T, f *fixture) {
	key := "snap-" + randhex.String(4)
	opts := f.options(t, key, func(c *config.Terminal) { c.ContainerPersistent = true })
	t.Cleanup(func() { envAdmin{}.Remove(context.Background(), opts, key) })
	ctx := context.Background()

	first, err := New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	firstID := first.SandboxID()
	if out, code := sh(t, first, "mkdir -p /opt/app && echo v1 >/opt/app/conf && echo home >/root/notes"); code != 0 {
		t.Fatalf("write: %q", out)
	}
	if err := first.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if sandboxInfo(t, f.srv, firstID).Running {
		t.Fatal("the first sandbox still runs after Close")
	}
	data, err := os.ReadFile(filepath.Join(f.home, SnapshotsFile))
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]string
	if err := json.Unmarshal(data, &rec); err != nil || !strings.HasPrefix(rec["direct:"+key], "im-") {
		t.Fatalf("%s holds %s (%v); want {\"direct:%s\": \"im-...\"}", SnapshotsFile, data, err, key)
	}

	second := newBackend(t, opts)
	if second.SandboxID() == firstID {
		t.Fatal("the second backend reused the terminated sandbox")
	}
	if out, _ := sh(t, second, "cat /opt/app/conf /root/notes"); out != "v1\nhome\n" {
		t.Fatalf("restored files: %q", out)
	}
	if second.Recreated() {
		t.Error("a restored snapshot reported environment_recreated")
	}
	// The restored sandbox started from the snapshot's image.
	var img string
	for _, r := range f.srv.Records() {
		if r.SandboxID == second.SandboxID() {
			img = r.Definition.GetImageId()
		}
	}
	if img != rec["direct:"+key] {
		t.Errorf("second sandbox image %s, want the snapshot %s", img, rec["direct:"+key])
	}
}

func testUnrestorableSnapshot(t *testing.T, f *fixture) {
	key := "gone-" + randhex.String(4)
	opts := f.options(t, key, func(c *config.Terminal) { c.ContainerPersistent = true })
	t.Cleanup(func() { envAdmin{}.Remove(context.Background(), opts, key) })
	snaps := snapshots{dir: f.home}
	if _, err := snaps.set(key, "im-DoesNotExistAnymore00000"); err != nil {
		t.Fatal(err)
	}
	b := newBackend(t, opts)
	if !b.Recreated() {
		t.Error("starting over from modal_image did not report environment_recreated")
	}
	if id, _ := snaps.get(key); id != "" {
		t.Errorf("the unrestorable record %q was kept", id)
	}
	if out, code := sh(t, b, "echo ok"); out != "ok\n" || code != 0 {
		t.Fatalf("the fallback sandbox: %q %d", out, code)
	}
}

func testRecreateAfterOutsideTerminate(t *testing.T, f *fixture) {
	b := newBackend(t, f.options(t, "", nil))
	e := newEnv(t, b)
	mustRun(t, e, terminal.Request{Command: "echo before"})
	old := b.SandboxID()
	other := sdkClient(t, f)
	sb, err := other.Sandboxes.FromID(context.Background(), old)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Terminate(context.Background(), &modal.SandboxTerminateParams{Wait: true}); err != nil {
		t.Fatal(err)
	}
	r := e.Run(context.Background(), terminal.Request{Command: "echo after"})
	if r.Error != nil {
		// The command may have met the dying shell; the next one must work.
		r = e.Run(context.Background(), terminal.Request{Command: "echo after"})
	}
	if r.Error != nil || r.Output != "after" || !r.EnvironmentRecreated {
		t.Fatalf("after an outside terminate: %q err %v recreated %v; want \"after\" and environment_recreated", r.Output, r.Error, r.EnvironmentRecreated)
	}
	if b.SandboxID() == old {
		t.Fatal("still the terminated sandbox")
	}
	r = mustRun(t, e, terminal.Request{Command: "echo again"})
	if r.EnvironmentRecreated {
		t.Error("environment_recreated reported twice")
	}
}

func testNoSecretInDefinition(t *testing.T, f *fixture) {
	secret := "sk-berth-" + randhex.String(8)
	pass := "pass-" + randhex.String(8)
	plain := "plain-" + randhex.String(8)
	f.setenv("BERTH_TEST_FORWARDED", secret)
	f.setenv("BERTH_TEST_PASSTHROUGH", pass)
	b := newBackend(t, f.options(t, "", func(c *config.Terminal) {
		c.DockerForwardEnv = []string{"BERTH_TEST_FORWARDED"}
		c.EnvPassthrough = []string{"BERTH_TEST_PASSTHROUGH"}
		mustSet(c, keyDockerEnv, map[string]string{"BERTH_TEST_PLAIN": plain})
	}))
	e := newEnv(t, b)
	r := mustRun(t, e, terminal.Request{Command: "echo ${#BERTH_TEST_FORWARDED} $BERTH_TEST_PASSTHROUGH $BERTH_TEST_PLAIN"})
	if r.Output != fmt.Sprintf("%d %s %s", len(secret), pass, plain) {
		t.Fatalf("forwarded variables in the session: %q", r.Output)
	}
	for _, rec := range f.srv.Records() {
		if rec.SandboxID != b.SandboxID() {
			continue
		}
		text := prototext.Format(rec.Definition)
		if strings.Contains(text, secret) || strings.Contains(text, pass) || strings.Contains(text, plain) || len(rec.SecretEnv) > 0 {
			t.Fatalf("a forwarded value reached the sandbox definition: %s secrets %v", text, rec.SecretEnv)
		}
	}
	for _, x := range f.srv.Execs() {
		if x.SandboxID != b.SandboxID() {
			continue
		}
		if argv := strings.Join(x.Argv, " "); strings.Contains(argv, secret) || strings.Contains(argv, pass) || strings.Contains(argv, plain) || len(x.SecretEnv) > 0 {
			t.Fatalf("a forwarded value reached an exec: %q %v", x.Argv, x.SecretEnv)
		}
	}
}

func testDefinition(t *testing.T, f *fixture) {
	opts := f.options(t, "", func(c *config.Terminal) {
		mustSet(c, keySandboxTimeout, 600)
		mustSet(c, keyIdleTimeout, 120)
		c.DockerNetwork = false
		c.ContainerCPU = 1.5
		c.ContainerMemory = 2048
	})
	b := newBackend(t, opts)
	var def *pb.Sandbox
	for _, r := range f.srv.Records() {
		if r.SandboxID == b.SandboxID() {
			def = r.Definition
		}
	}
	if def.GetTimeoutSecs() != 600 || def.GetIdleTimeoutSecs() != 120 ||
		def.GetNetworkAccess().GetNetworkAccessType() != pb.NetworkAccess_BLOCKED ||
		def.GetResources().GetMilliCpu() != 1500 || def.GetResources().GetMemoryMb() != 2048 ||
		def.GetName() != sandboxName(ownerOf(f.home), opts.Key) || def.GetWorkdir() != "/root" {
		t.Fatalf("definition: %s", prototext.Format(def))
	}
	info := sandboxInfo(t, f.srv, b.SandboxID())
	if info.Tags[TagKey] != opts.Key || info.Tags[TagOwner] != ownerOf(f.home) || info.Tags[TagProcess] != currentProcess() || info.Tags[TagPersistent] != "0" {
		t.Fatalf("tags: %v", info.Tags)
	}
	if _, err := time.Parse(time.RFC3339, info.Tags[TagCreated]); err != nil {
		t.Errorf("created tag %q: %v", info.Tags[TagCreated], err)
	}
	if out, _ := sh(t, b, "ls /sys/class/net"); strings.TrimSpace(out) != "lo" {
		t.Errorf("docker_network false: interfaces %q", out)
	}
	var app string
	for _, r := range f.srv.Records() {
		if r.SandboxID == b.SandboxID() {
			app = r.AppID
		}
	}
	other := sdkClient(t, f)
	berthApp, err := other.Apps.FromName(context.Background(), DefaultApp, nil)
	if err != nil || berthApp.AppID != app {
		t.Errorf("sandbox in app %s, want app %q (%v)", app, DefaultApp, err)
	}
}

func testEnvAdmin(t *testing.T, f *fixture) {
	ctx := context.Background()
	key := "adm-" + randhex.String(4)
	opts := f.options(t, key, func(c *config.Terminal) { c.ContainerPersistent = true })
	b, err := New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	id := b.SandboxID()
	list, err := envAdmin{}.List(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	found := func(list []backend.EnvInfo, state string) bool {
		for _, e := range list {
			if e.Key == key && e.State == state && e.Backend == Name {
				return true
			}
		}
		return false
	}
	if !found(list, "running") {
		t.Fatalf("env ls while running: %+v", list)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	list, _ = envAdmin{}.List(ctx, opts)
	if !found(list, "snapshot") || found(list, "running") {
		t.Fatalf("env ls after a persistent Close: %+v", list)
	}
	// A second key, running, is removed by rm with its sandbox.
	key2 := "adm2-" + randhex.String(4)
	opts2 := f.options(t, key2, nil)
	b2, err := New(ctx, opts2)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close(ctx)
	if err := (envAdmin{}).Remove(ctx, opts2, key2); err != nil {
		t.Fatal(err)
	}
	if sandboxInfo(t, f.srv, b2.SandboxID()).Running {
		t.Fatal("env rm left the sandbox running")
	}
	if err := (envAdmin{}).Remove(ctx, opts2, "nothing-"+randhex.String(4)); err != nil {
		t.Fatalf("rm of a key with nothing: %v", err)
	}
	// prune takes the snapshot (older than zero) and deletes its image.
	snapID, _ := snapshots{dir: f.home}.get(key)
	removed, err := envAdmin{}.Prune(ctx, opts, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !contains(removed, key) {
		t.Fatalf("prune removed %v, want %s", removed, key)
	}
	if _, err := sdkClient(t, f).Images.FromID(ctx, snapID); !isNotFound(err) {
		t.Fatalf("the pruned snapshot image: %v, want NotFound", err)
	}
	if sandboxInfo(t, f.srv, id).Running {
		t.Fatal("sandbox still running")
	}

	// Without any Modal credentials, env ls and prune have nothing to say
	// about Modal (berth cannot have sandboxes there) instead of failing.
	bare := f.options(t, "", nil)
	bare.Getenv = envOf(map[string]string{"HOME": t.TempDir()})
	bare.Home = t.TempDir()
	if list, err := (envAdmin{}).List(ctx, bare); err != nil || len(list) != 0 {
		t.Fatalf("env ls without credentials: %v, %v", list, err)
	}
	if removed, err := (envAdmin{}).Prune(ctx, bare, 0); err != nil || len(removed) != 0 {
		t.Fatalf("env prune without credentials: %v, %v", removed, err)
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

func testCrashCleanup(t *testing.T, f *fixture) {
	ctx := context.Background()
	// A sandbox held by a berth process that is gone: a dead pid of this
	// boot.
	orphanOpts := f.options(t, "orphan-"+randhex.String(4), nil)
	orphan := newBackend(t, orphanOpts)
	tags := sandboxInfo(t, f.srv, orphan.SandboxID()).Tags
	tags[TagProcess] = procmark.BootID() + "/999999999/1"
	orphan.mu.Lock()
	err := orphan.sb.SetTags(ctx, tags)
	orphan.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	cleanedMu.Lock()
	delete(cleaned, orphan.cred.ServerURL+"\x00"+orphan.cred.Environment+"\x00"+orphan.owner)
	cleanedMu.Unlock()
	newBackend(t, f.options(t, "", nil))
	if sandboxInfo(t, f.srv, orphan.SandboxID()).Running {
		t.Fatal("a crashed berth's sandbox was left running")
	}
}

func testWriteFileUsesFileAPI(t *testing.T, f *fixture) {
	b := newBackend(t, f.options(t, "", nil))
	ctx := context.Background()
	before := f.srv.Calls()["/modal.client.ModalClient/ContainerFilesystemExec"]
	data := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	if err := b.WriteFile(ctx, "/root/big.txt", strings.NewReader(data), int64(len(data)), 0o640); err != nil {
		t.Fatal(err)
	}
	if f.srv.Calls()["/modal.client.ModalClient/ContainerFilesystemExec"] == before {
		t.Fatal("WriteFile did not go through the file API")
	}
	out, _ := sh(t, b, "wc -c </root/big.txt; stat -c %a /root/big.txt")
	if out != fmt.Sprintf("%d\n640\n", len(data)) {
		t.Fatalf("written file: %q", out)
	}
	if err := b.WriteFile(ctx, "/root/big.txt", strings.NewReader("x"), 1, 0o666); err == nil || errors.Is(err, backend.ErrUnsupported) {
		t.Fatalf("writing over an existing file: %v, want a refusal", err)
	}
	if err := b.WriteFile(ctx, "/nonexistent-dir/f", strings.NewReader("x"), 1, 0o666); !errors.Is(err, backend.ErrUnsupported) {
		t.Fatalf("a path the API cannot open: %v, want ErrUnsupported", err)
	}
}

func testDoctor(t *testing.T, f *fixture) {
	fp := Doctor(context.Background(), f.options(t, "", nil))
	if !fp.Usable || !strings.Contains(fp.Summary, f.srv.URL()) || !strings.Contains(strings.Join(fp.Details, "\n"), "MODAL_TOKEN_ID and MODAL_TOKEN_SECRET") {
		t.Fatalf("doctor with good credentials: %+v", fp)
	}
	bad := f.options(t, "", nil)
	bad.Getenv = func(k string) string {
		if k == "MODAL_TOKEN_SECRET" {
			return "as-wrong"
		}
		return f.getenv(k)
	}
	fp = Doctor(context.Background(), bad)
	if fp.Usable || !strings.Contains(fp.Summary, "rejected") || !strings.Contains(fp.Fix, "modal token new") {
		t.Fatalf("doctor with a wrong secret: %+v", fp)
	}
}

// testWaitWhenSandboxDiesSilently: a router that never reports the exit
// status of an exec in a sandbox that finished must not hang Wait.
func testWaitWhenSandboxDiesSilently(t *testing.T, f *fixture) {
	b := newBackend(t, f.options(t, "", nil))
	p, err := b.Start(context.Background(), backend.ProcSpec{Argv: []string{"sleep", "3031"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	f.srv.StallExecWait(true)
	defer f.srv.StallExecWait(false)
	other := sdkClient(t, f)
	sb, err := other.Sandboxes.FromID(context.Background(), b.SandboxID())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Terminate(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := p.Wait(); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "finished") {
			t.Fatalf("Wait after the sandbox died: %v, want an error saying it finished", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Wait hung on an exec whose sandbox finished")
	}
}
