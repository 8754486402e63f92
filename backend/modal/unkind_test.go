package modal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/randhex"
	"github.com/a55dbaac/berth/internal/testenv/modalfake"
	"github.com/a55dbaac/berth/terminal"
	modal "github.com/modal-labs/libmodal/modal-go"
	pb "github.com/modal-labs/libmodal/modal-go/proto/modal_proto"
	"google.golang.org/grpc/codes"
)

// The tests of this file each turn on one of the fake's faults (how the
// real Modal is less kind than a fake answering at once) and check that
// berth gets through it with nothing lost that the user did not lose.

// A new sandbox is "scheduled" for a while, without a task id: the first
// command and the first file write wait for it instead of failing
// (modal-go v0.7.0 asked once and failed; v0.7.3 polls).
func TestFirstCommandWhileScheduling(t *testing.T) {
	t.Parallel() // on a fake of its own; it waits on the scheduling delay
	f := newFixtureWith(t, modalfake.Faults{SchedulingDelay: modalfake.Jitter{Min: 4 * time.Second, Max: 5 * time.Second}})
	b := newBackend(t, f.options(t, "", nil))
	r := mustRun(t, newEnv(t, b), terminal.Request{Command: "echo first"})
	if r.Output != "first" || r.ExitCode != 0 {
		t.Fatalf("first command on a sandbox being scheduled: %q exit %d", r.Output, r.ExitCode)
	}
	w := newBackend(t, f.options(t, "", nil))
	if err := w.WriteFile(context.Background(), "/root/early.txt", strings.NewReader("early"), 5, 0o644); err != nil {
		t.Fatalf("first file write on a sandbox being scheduled: %v", err)
	}
	if out, _ := sh(t, w, "cat /root/early.txt"); out != "early" {
		t.Fatalf("written file: %q", out)
	}
}

// Sandbox creation rate-limited with RESOURCE_EXHAUSTED and a retry delay:
// berth waits as asked and goes on; past modal_retry_timeout it gives up
// and says Modal rate-limited it, how often and how long it tried.
func TestRateLimitRetried(t *testing.T) {
	f := newFixture(t)
	f.srv.Inject("/SandboxCreate", 3, codes.ResourceExhausted, 300*time.Millisecond)
	b := newBackend(t, f.options(t, "", nil))
	if n := f.srv.Injected("/SandboxCreate"); n != 0 {
		t.Fatalf("%d of the 3 throttled creations were never tried", n)
	}
	if out, _ := sh(t, b, "echo ok"); out != "ok\n" {
		t.Fatalf("sandbox created after throttling: %q", out)
	}

	f.srv.Inject("/SandboxCreate", -1, codes.ResourceExhausted, 400*time.Millisecond)
	defer f.srv.Inject("/SandboxCreate", 0, codes.OK, 0)
	opts := f.options(t, "", func(c *config.Terminal) { mustSet(c, keyRetryTimeout, 2) })
	_, err := New(context.Background(), opts)
	g, ok := gaveUp(err)
	if !ok || !g.Throttled() || g.Attempts < 2 || g.Method != "SandboxCreate" ||
		!strings.Contains(err.Error(), "rate-limit") || !strings.Contains(err.Error(), "gave up after") || !strings.Contains(err.Error(), keyRetryTimeout) {
		t.Fatalf("creation throttled for longer than modal_retry_timeout: %v; want a give-up that says Modal rate-limited SandboxCreate and names %s", err, keyRetryTimeout)
	}
}

// Transient failures (UNAVAILABLE) beyond the SDK's own three retries:
// berth retries them with backoff; past modal_retry_timeout the target is
// reported unreachable with how often berth tried.
func TestTransientFailuresRetried(t *testing.T) {
	t.Parallel() // on a fake of its own; it waits on retries
	f := newFixture(t)
	f.srv.Inject("/SandboxCreate", 6, codes.Unavailable, 0)
	f.srv.Inject("/SandboxGetTaskId", 5, codes.Internal, 0)
	b := newBackend(t, f.options(t, "", nil))
	if out, _ := sh(t, b, "echo ok"); out != "ok\n" {
		t.Fatalf("after transient failures: %q", out)
	}
	if n := f.srv.Injected("/SandboxCreate") + f.srv.Injected("/SandboxGetTaskId"); n != 0 {
		t.Fatalf("%d injected failures were never met", n)
	}

	f.srv.Inject("/SandboxCreate", -1, codes.Unavailable, 0)
	defer f.srv.Inject("/SandboxCreate", 0, codes.OK, 0)
	_, err := New(context.Background(), f.options(t, "", func(c *config.Terminal) { mustSet(c, keyRetryTimeout, 2) }))
	var ue *backend.UnreachableError
	if _, ok := gaveUp(err); !ok || !errors.As(err, &ue) || !strings.Contains(err.Error(), "gave up after") {
		t.Fatalf("creation failing for longer than modal_retry_timeout: %v; want an UnreachableError saying berth gave up", err)
	}
}

// A sandbox reaches the end of its lifetime (modal_sandbox_timeout): it is
// carried over into a new one before Modal ends it, with the files, the
// cwd and the exported variables kept and environment_recreated said
// once. Two environments: one idle at its end (the backend carries it over
// by itself), one with a command at the start of the last part of its
// lifetime (carried over before that command runs).
func TestLifetimeCarriedOver(t *testing.T) {
	t.Parallel() // on a fake of its own; it waits for a sandbox lifetime to end
	f := newFixtureWith(t, modalfake.Faults{ExpiryEarly: modalfake.Jitter{Max: 500 * time.Millisecond}})
	const life = 48 // seconds: a margin of 8 s
	setup := "mkdir -p /work/dir && cd /work/dir && export KEEP=kept && echo data >/root/f"
	check := "pwd; echo $KEEP; cat /root/f"
	want := "/work/dir\nkept\ndata"

	idle := newBackend(t, f.options(t, "", func(c *config.Terminal) { mustSet(c, keySandboxTimeout, life) }))
	busyKey := "life-" + randhex.String(4)
	busyOpts := f.options(t, busyKey, func(c *config.Terminal) {
		mustSet(c, keySandboxTimeout, life)
		c.ContainerPersistent = true
	})
	t.Cleanup(func() { envAdmin{}.Remove(context.Background(), busyOpts, busyKey) })
	busy := newBackend(t, busyOpts)
	ie, be := newEnv(t, idle), newEnv(t, busy)
	mustRun(t, ie, terminal.Request{Command: setup})
	mustRun(t, be, terminal.Request{Command: setup})
	idleFirst, busyFirst := idle.SandboxID(), busy.SandboxID()

	// The busy one: a command once the last part of its lifetime began.
	busy.mu.Lock()
	early := busy.life.early(busy.set.Timeout)
	busy.mu.Unlock()
	time.Sleep(time.Until(early))
	r := mustRun(t, be, terminal.Request{Command: check})
	if r.Output != want || !r.EnvironmentRecreated || busy.SandboxID() == busyFirst {
		t.Fatalf("command near the end of the lifetime: %q recreated %v sandbox %s (was %s); want %q in a new sandbox, environment_recreated", r.Output, r.EnvironmentRecreated, busy.SandboxID(), busyFirst, want)
	}
	if id, _ := (snapshots{dir: f.home}).get(busyKey); id == "" {
		t.Error("the carry-over of a persistent environment recorded no snapshot")
	}
	if r := mustRun(t, be, terminal.Request{Command: "true"}); r.EnvironmentRecreated {
		t.Error("environment_recreated said twice")
	}

	// The idle one: carried over by the backend itself, before Modal
	// ends the first sandbox.
	for deadline := time.Now().Add(time.Minute); idle.SandboxID() == idleFirst; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the idle sandbox was not carried over")
		}
	}
	if res := sandboxInfo(t, f.srv, idleFirst).Result; res.GetStatus() == pb.GenericResult_GENERIC_STATUS_TIMEOUT {
		t.Fatalf("the idle sandbox reached its timeout before it was carried over: %v", res)
	}
	r = mustRun(t, ie, terminal.Request{Command: check})
	if r.Output != want || !r.EnvironmentRecreated {
		t.Fatalf("after an idle carry-over: %q recreated %v; want %q, environment_recreated", r.Output, r.EnvironmentRecreated, want)
	}
}

// A persistent environment is snapshotted every modal_snapshot_interval
// while it runs (slowly: snapshots take a second or two), so a sandbox
// killed from outside loses at most that much; and a periodic snapshot
// still in flight at Close does not overwrite the snapshot of Close.
func TestPeriodicSnapshotWhileSlow(t *testing.T) {
	t.Parallel() // on a fake of its own; it waits on slow snapshots
	f := newFixtureWith(t, modalfake.Faults{SnapshotDelay: modalfake.Jitter{Min: time.Second, Max: 2 * time.Second}})
	key := "periodic-" + randhex.String(4)
	opts := f.options(t, key, func(c *config.Terminal) {
		c.ContainerPersistent = true
		mustSet(c, keySnapshotInterval, 1)
	})
	t.Cleanup(func() { envAdmin{}.Remove(context.Background(), opts, key) })
	snaps := snapshots{dir: f.home}
	b, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, b)
	mustRun(t, e, terminal.Request{Command: "echo v1 >/root/state"})
	// Snapshots are taken one after the other: of two recorded after the
	// write, the second began after it.
	before, _ := snaps.get(key)
	seen := map[string]bool{}
	for deadline := time.Now().Add(time.Minute); len(seen) < 2; time.Sleep(100 * time.Millisecond) {
		id, err := snaps.get(key)
		if err != nil {
			t.Fatal(err)
		}
		if id != "" && id != before {
			seen[id] = true
		}
		if time.Now().After(deadline) {
			t.Fatalf("periodic snapshots recorded after the write: %d, want 2", len(seen))
		}
	}
	old := b.SandboxID()
	sb, err := sdkClient(t, f).Sandboxes.FromID(context.Background(), old)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Terminate(context.Background(), &modal.SandboxTerminateParams{Wait: true}); err != nil {
		t.Fatal(err)
	}
	r := e.Run(context.Background(), terminal.Request{Command: "cat /root/state"})
	if r.Error != nil {
		r = e.Run(context.Background(), terminal.Request{Command: "cat /root/state"})
	}
	if r.Output != "v1" || !r.EnvironmentRecreated {
		t.Fatalf("after the sandbox was killed from outside: %q err %v recreated %v; want the periodic snapshot's v1", r.Output, r.Error, r.EnvironmentRecreated)
	}

	// Close while periodic snapshots come and go: the last state wins.
	mustRun(t, e, terminal.Request{Command: "echo v2 >/root/state"})
	time.Sleep(1500 * time.Millisecond) // let a periodic snapshot start
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	again := newBackend(t, opts)
	if out, _ := sh(t, again, "cat /root/state"); out != "v2\n" {
		t.Fatalf("reopened after Close: %q, want v2 (the snapshot of Close)", out)
	}
}

// A sandbox terminated from outside while a command runs, on a command
// router that goes silent instead of ending the streams: the command fails
// (its outcome is unknown) instead of hanging, and the next one runs in a
// new sandbox with cwd and exported variables restored.
func TestOutsideTerminateWithSilentRouter(t *testing.T) {
	f := newFixtureWith(t, modalfake.Faults{SilentRouter: true})
	b := newBackend(t, f.options(t, "", nil))
	// Not newEnv: if the command hangs (the bug this tests), closing the
	// session would wait for it, and the test would end at the test
	// binary's timeout instead of failing here.
	e := terminal.New(b, terminal.Options{DefaultTimeout: 60 * time.Second, SpillDir: t.TempDir()})
	t.Cleanup(func() {
		closed := make(chan struct{})
		go func() { e.Close(context.Background()); close(closed) }()
		select {
		case <-closed:
		case <-time.After(time.Minute):
			t.Error("the environment did not close")
		}
	})
	mustRun(t, e, terminal.Request{Command: "cd /tmp && export KEEP=yes"})
	done := make(chan terminal.Result, 1)
	go func() {
		done <- e.Run(context.Background(), terminal.Request{Command: "echo started; sleep 3041", Timeout: 600})
	}()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if out, _ := sh(t, b, "ps | grep -c '[s]leep 3041'"); strings.TrimSpace(out) == "1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("sleep 3041 never ran in the sandbox")
		}
	}
	old := b.SandboxID()
	sb, err := sdkClient(t, f).Sandboxes.FromID(context.Background(), old)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Terminate(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.Error == nil || !strings.Contains(*r.Error, "finished") {
			t.Fatalf("the command whose sandbox was terminated: %q exit %d error %v; want an error saying the sandbox finished", r.Output, r.ExitCode, r.Err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the command whose sandbox was terminated under a silent router hung")
	}
	r := mustRun(t, e, terminal.Request{Command: "echo $KEEP; pwd"})
	if r.Output != "yes\n/tmp" || !r.EnvironmentRecreated || b.SandboxID() == old {
		t.Fatalf("next command: %q recreated %v; want yes and /tmp in a new sandbox", r.Output, r.EnvironmentRecreated)
	}
}

func TestSettingsBounds(t *testing.T) {
	c := config.Default().Terminal
	for _, bad := range []struct {
		key string
		v   int
	}{{keySnapshotInterval, -1}, {keySnapshotInterval, 86401}, {keyRetryTimeout, 0}, {keyRetryTimeout, 3601}} {
		err := c.Set(bad.key, bad.v)
		if err == nil || !strings.Contains(err.Error(), bad.key) || !strings.Contains(err.Error(), fmt.Sprintf("%q", fmt.Sprint(bad.v))) || !strings.Contains(err.Error(), "must be") {
			t.Errorf("%s = %d: %v; want an error naming the key, the value and the accepted range", bad.key, bad.v, err)
		}
	}
	for _, good := range []struct {
		key string
		v   int
	}{{keySnapshotInterval, 0}, {keySnapshotInterval, 60}, {keyRetryTimeout, 1}, {keyRetryTimeout, 3600}} {
		if err := c.Set(good.key, good.v); err != nil {
			t.Errorf("%s = %d: %v", good.key, good.v, err)
		}
	}
}

func TestLifetimeMargin(t *testing.T) {
	var l lifetime
	for _, c := range []struct{ life, snap, want time.Duration }{
		{time.Hour, 0, 10 * time.Minute},
		{24 * time.Hour, 0, 10 * time.Minute},
		{48 * time.Second, 0, 8 * time.Second},
		{6 * time.Second, 0, 2 * time.Second},
		{3 * time.Second, 0, 1500 * time.Millisecond},
		{time.Hour, 20 * time.Minute, 30 * time.Minute},
		{time.Hour, 10 * time.Second, 10 * time.Minute},
	} {
		l.snapDur = c.snap
		if got := l.margin(c.life); got != c.want {
			t.Errorf("margin of a %v lifetime after a %v snapshot: %v, want %v", c.life, c.snap, got, c.want)
		}
	}
}
