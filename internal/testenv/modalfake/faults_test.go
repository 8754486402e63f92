package modalfake_test

import (
	"bufio"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
	"github.com/a55dbaac/berth/internal/testenv/fault"
	"github.com/a55dbaac/berth/internal/testenv/modalfake"
	modal "github.com/modal-labs/libmodal/modal-go"
	pb "github.com/modal-labs/libmodal/modal-go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// rawControl is a control-plane client without the SDK (and so without its
// retries and polling): what the service answers, call by call.
func rawControl(t *testing.T, srv *modalfake.Server) (pb.ModalClientClient, context.Context) {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(srv.URL(), "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	cp := pb.NewModalClientClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-modal-token-id", srv.TokenID(), "x-modal-token-secret", srv.TokenSecret())
	tok, err := cp.AuthTokenGet(ctx, &pb.AuthTokenGetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return cp, metadata.AppendToOutgoingContext(ctx, "x-modal-auth-token", tok.GetToken())
}

// A sandbox being scheduled has no task id yet and says so with an empty
// one; the SDK (v0.7.2 on) polls until it has one, so its first exec works.
func TestFaultSchedulingDelay(t *testing.T) {
	srv := modalfake.StartWith(t, modalfake.Faults{SchedulingDelay: modalfake.Jitter{Min: 10 * time.Minute}})
	c := mustClient(t, srv)
	cp, ctx := rawControl(t, srv)
	slow := newSandbox(t, c, nil)
	resp, err := cp.SandboxGetTaskId(ctx, pb.SandboxGetTaskIdRequest_builder{SandboxId: slow.SandboxID}.Build())
	if err != nil || resp.GetTaskId() != "" || resp.GetTaskResult() != nil {
		t.Fatalf("task id of a sandbox being scheduled: %q result %v err %v; want an empty id and no result", resp.GetTaskId(), resp.GetTaskResult(), err)
	}

	srv.SetFaults(modalfake.Faults{SchedulingDelay: modalfake.Jitter{Min: 300 * time.Millisecond, Max: 900 * time.Millisecond}})
	sb := newSandbox(t, c, nil)
	if out, _, code := run(t, sb, "", "echo", "scheduled"); out != "scheduled\n" || code != 0 {
		t.Fatalf("first exec after a scheduling delay: %q %d", out, code)
	}
	resp, err = cp.SandboxGetTaskId(ctx, pb.SandboxGetTaskIdRequest_builder{SandboxId: sb.SandboxID}.Build())
	if err != nil || resp.GetTaskId() == "" {
		t.Fatalf("task id once scheduled: %q, %v", resp.GetTaskId(), err)
	}
}

// A rate-limited call fails with RESOURCE_EXHAUSTED and Modal's retry
// delay in an RPCRetryPolicy detail: queued by Inject, or when the token
// bucket is empty.
func TestFaultRateLimit(t *testing.T) {
	srv := modalfake.Start(t)
	c := mustClient(t, srv)
	cp, ctx := rawControl(t, srv)
	app, err := c.Apps.FromName(context.Background(), "fake-test", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Inject("/SandboxCreate", 1, codes.ResourceExhausted, 1500*time.Millisecond)
	_, err = c.Sandboxes.Create(context.Background(), app, c.Images.FromRegistry(dockerenv.ImageRef, nil), nil)
	st, _ := status.FromError(unwrap(err))
	if st.Code() != codes.ResourceExhausted || retryAfter(st) != 1500*time.Millisecond {
		t.Fatalf("injected throttle: %v (retry after %v); want RESOURCE_EXHAUSTED asking for 1.5s", err, retryAfter(st))
	}
	if srv.Injected("/SandboxCreate") != 0 {
		t.Fatal("the injected failure was not used up")
	}

	// Two tokens, refilled once in 100 s: the third creation is refused
	// and told how long to wait.
	srv.SetFaults(modalfake.Faults{RateLimit: modalfake.RateLimit{Rate: 0.01, Burst: 2}})
	create := func() error {
		_, err := cp.SecretGetOrCreate(ctx, pb.SecretGetOrCreateRequest_builder{
			ObjectCreationType: pb.ObjectCreationType_OBJECT_CREATION_TYPE_EPHEMERAL,
			EnvDict:            map[string]string{"A": "1"},
		}.Build())
		return err
	}
	for i := 0; i < 2; i++ {
		if err := create(); err != nil {
			t.Fatalf("creation %d within the burst: %v", i+1, err)
		}
	}
	err = create()
	st, _ = status.FromError(err)
	if st.Code() != codes.ResourceExhausted || retryAfter(st) < 50*time.Second {
		t.Fatalf("creation past the burst: %v (retry after %v); want RESOURCE_EXHAUSTED asking to wait for the next token", err, retryAfter(st))
	}
	// Calls that are not creations are not metered.
	if _, err := cp.AppGetOrCreate(ctx, pb.AppGetOrCreateRequest_builder{AppName: "fake-test"}.Build()); err != nil {
		t.Fatalf("an unmetered call: %v", err)
	}
}

// Transient failures: calls fail with UNAVAILABLE before their handler.
func TestFaultTransient(t *testing.T) {
	srv := modalfake.Start(t)
	cp, ctx := rawControl(t, srv)
	srv.Inject("/AppGetOrCreate", 2, codes.Unavailable, 0)
	req := pb.AppGetOrCreateRequest_builder{AppName: "t", ObjectCreationType: pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_IF_MISSING}.Build()
	for i := 0; i < 2; i++ {
		if _, err := cp.AppGetOrCreate(ctx, req); status.Code(err) != codes.Unavailable {
			t.Fatalf("injected failure %d: %v, want UNAVAILABLE", i+1, err)
		}
	}
	if _, err := cp.AppGetOrCreate(ctx, req); err != nil {
		t.Fatalf("after the injected failures: %v", err)
	}
	srv.SetFaults(modalfake.Faults{Transient: 1})
	if _, err := cp.AppGetOrCreate(ctx, req); status.Code(err) != codes.Unavailable {
		t.Fatalf("with every call failing: %v, want UNAVAILABLE", err)
	}
	// The SDK retries what fails now and then, output streams included:
	// with a few failures the work still gets done.
	srv.SetFaults(modalfake.Faults{Transient: 0.05})
	c := mustClient(t, srv)
	sb := newSandbox(t, c, nil)
	out, _, code := run(t, sb, "", "sh", "-c", "for i in $(seq 1 200); do echo line $i; sleep 0.005; done")
	if code != 0 || !strings.HasSuffix(out, "line 200\n") || strings.Count(out, "\n") != 200 {
		t.Fatalf("output through breaking streams: exit %d, %d lines, ends %q", code, strings.Count(out, "\n"), out[max(0, len(out)-20):])
	}
}

// The router of a finished sandbox stops answering: the exit status of an
// exec the sandbox took down never comes; without the fault it is 137.
func TestFaultSilentRouter(t *testing.T) {
	srv := modalfake.Start(t)
	c := mustClient(t, srv)
	for _, silent := range []bool{false, true} {
		srv.SetFaults(modalfake.Faults{SilentRouter: silent})
		sb := newSandbox(t, c, nil)
		p, err := sb.Exec(context.Background(), []string{"sh", "-c", "echo up; exec sleep 3001"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Terminate once the command runs, not while it is being started.
		if line, err := bufio.NewReader(p.Stdout).ReadString('\n'); line != "up\n" {
			t.Fatalf("exec's first line: %q, %v", line, err)
		}
		// From outside: terminating through sb would detach its exec.
		other, err := c.Sandboxes.FromID(context.Background(), sb.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Terminate(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		code, err := p.Wait(ctx)
		cancel()
		switch {
		case !silent && (err != nil || code != 137):
			t.Fatalf("exit status of an exec whose sandbox was terminated: %d, %v; want 137", code, err)
		case silent && err == nil:
			t.Fatalf("a silent router reported exit status %d", code)
		}
	}
}

// A slow snapshot takes longer than the caller allows: TIMEOUT.
func TestFaultSnapshotDelay(t *testing.T) {
	srv := modalfake.StartWith(t, modalfake.Faults{SnapshotDelay: modalfake.Jitter{Min: time.Minute}})
	c := mustClient(t, srv)
	sb := newSandbox(t, c, nil)
	_, err := sb.SnapshotFilesystem(context.Background(), time.Second)
	if err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("a snapshot slower than its timeout: %v, want a timeout", err)
	}
}

// A lifetime ends up to ExpiryEarly before the timeout.
func TestFaultExpiryEarly(t *testing.T) {
	srv := modalfake.StartWith(t, modalfake.Faults{ExpiryEarly: modalfake.Jitter{Min: 119 * time.Second}})
	c := mustClient(t, srv)
	sb := newSandbox(t, c, &modal.SandboxCreateParams{Timeout: 2 * time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if code, err := sb.Wait(ctx); err != nil || code != 124 {
		t.Fatalf("a sandbox with 2 minutes, 119 s of which the service's clock is ahead: %d, %v; want it timed out (124) within a minute", code, err)
	}
}

func TestRealisticIsAllFaults(t *testing.T) {
	f := modalfake.Realistic()
	if !f.SchedulingDelay.On() || !f.ExpiryEarly.On() || f.RateLimit.Rate <= 0 || f.Transient <= 0 || !f.SilentRouter || !f.SnapshotDelay.On() {
		t.Fatalf("Realistic leaves a fault off: %+v", f)
	}
	for _, j := range []modalfake.Jitter{f.SchedulingDelay, f.ExpiryEarly, f.SnapshotDelay} {
		if j.Max > time.Second {
			t.Errorf("a realistic delay up to %v: keep them under a second", j.Max)
		}
	}
}

// Two fakes of one seed make the same fault decisions for the same calls
// (which calls fail, what delays a sandbox gets); a fake of another seed
// makes others.
func TestSeedReplaysDecisions(t *testing.T) {
	cli := dockerenv.Require(t)
	dockerenv.Image(t)
	delays := modalfake.Faults{
		SchedulingDelay: modalfake.Jitter{Min: time.Millisecond, Max: 30 * time.Millisecond},
		ExpiryEarly:     modalfake.Jitter{Max: time.Millisecond},
		SnapshotDelay:   modalfake.Jitter{Min: time.Millisecond, Max: 30 * time.Millisecond},
	}
	decide := func(seed uint64) []fault.Decision {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		srv, err := modalfake.New(ctx, modalfake.Options{Docker: cli, Seed: seed, Faults: delays})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		if srv.Seed() != seed {
			t.Fatalf("seed %d, want %d", srv.Seed(), seed)
		}
		// Made through the SDK, which polls while the sandbox is being
		// scheduled: no failure drawn yet, so the polls draw nothing.
		sb := newSandbox(t, mustClient(t, srv), nil)
		cp, ctx := rawControl(t, srv)
		on := delays
		on.Transient = 0.3
		srv.SetFaults(on)
		for range 15 {
			cp.AppGetOrCreate(ctx, pb.AppGetOrCreateRequest_builder{AppName: "fake-test"}.Build())
			cp.SandboxTagsGet(ctx, pb.SandboxTagsGetRequest_builder{SandboxId: sb.SandboxID}.Build())
			cp.SandboxGetTaskId(ctx, pb.SandboxGetTaskIdRequest_builder{SandboxId: sb.SandboxID}.Build())
		}
		for range 2 {
			cp.SandboxSnapshotFs(ctx, pb.SandboxSnapshotFsRequest_builder{SandboxId: sb.SandboxID, Timeout: 60}.Build())
		}
		return srv.Decisions()
	}
	a, b, other := decide(12345), decide(12345), decide(54321)
	kinds := map[string]bool{}
	for _, d := range a {
		kinds[strings.Fields(d.Stream)[0]] = true
	}
	if !kinds["transient"] || !kinds["scheduling"] || !kinds["early"] || !kinds["snapshot"] {
		t.Fatalf("decisions drawn: %v; want transient failures and every delay", a)
	}
	if !slices.Equal(a, b) {
		t.Fatalf("two fakes of seed 12345 decided differently:\n%v\n%v", a, b)
	}
	if slices.Equal(a, other) {
		t.Fatal("seeds 12345 and 54321 made the same decisions: the seed plays no part")
	}
}

// BERTH_FAKE_SEED gives the fake its seed; a value that is no number is
// refused with the variable's name.
func TestSeedFromEnvironment(t *testing.T) {
	t.Setenv(fault.SeedEnv, "4242")
	if srv := modalfake.Start(t); srv.Seed() != 4242 {
		t.Fatalf("seed %d with BERTH_FAKE_SEED=4242", srv.Seed())
	}
	t.Setenv(fault.SeedEnv, "x")
	_, err := modalfake.New(context.Background(), modalfake.Options{Docker: dockerenv.Require(t)})
	if err == nil || !strings.Contains(err.Error(), "BERTH_FAKE_SEED") {
		t.Fatalf("BERTH_FAKE_SEED=x: %v", err)
	}
}

func retryAfter(st *status.Status) time.Duration {
	for _, d := range st.Details() {
		if rp, ok := d.(*pb.RPCRetryPolicy); ok {
			return time.Duration(float64(rp.GetRetryAfterSecs()) * float64(time.Second)).Round(time.Millisecond)
		}
	}
	return 0
}

func unwrap(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}
