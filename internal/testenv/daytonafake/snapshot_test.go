package daytonafake

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	apiclient "github.com/daytona/clients/api-client-go"
	toolbox "github.com/daytona/clients/toolbox-api-client-go"
	"github.com/moby/moby/client"

	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
	"github.com/a55dbaac/berth/internal/testenv/fault"
)

// snapshotOf asks for a snapshot of sandbox id named name and checks the
// answer: the sandbox, now snapshotting.
func snapshotOf(t *testing.T, s *Server, id, name string) {
	t.Helper()
	api := s.APIClient(s.APIKey())
	sb, _, err := api.SandboxAPI.CreateSandboxSnapshot(ctxT(t), id).CreateSandboxSnapshot(*apiclient.NewCreateSandboxSnapshot(name)).Execute()
	if err != nil {
		t.Fatalf("snapshot of %s: %v (%s)", id, err, body(err))
	}
	if sb.Id != id || sb.GetState() != apiclient.SANDBOXSTATE_SNAPSHOTTING {
		t.Fatalf("snapshot of %s answered sandbox %s in state %s, want it snapshotting", id, sb.Id, sb.GetState())
	}
}

// waitSnapshot waits until the sandbox id no longer snapshots and returns
// the snapshot named name as GET /snapshots/{name} then answers (nil with
// 404).
func waitSnapshot(t *testing.T, s *Server, id, name string) *apiclient.SnapshotDto {
	t.Helper()
	ctx := ctxT(t)
	api := s.APIClient(s.APIKey())
	for {
		sb, _, err := api.SandboxAPI.GetSandbox(ctx, id).Execute()
		if err != nil {
			t.Fatalf("get sandbox %s: %v", id, err)
		}
		if sb.GetState() != apiclient.SANDBOXSTATE_SNAPSHOTTING {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("sandbox %s still snapshotting", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
	snap, resp, err := api.SnapshotsAPI.GetSnapshot(ctx, name).Execute()
	if resp != nil && resp.StatusCode == http.StatusNotFound {
		return nil
	}
	if err != nil {
		t.Fatalf("get snapshot %s: %v (%s)", name, err, body(err))
	}
	return snap
}

// fromSnapshot creates a sandbox from the snapshot idOrName.
func fromSnapshot(t *testing.T, s *Server, idOrName string) *apiclient.Sandbox {
	t.Helper()
	req := apiclient.NewCreateSandbox()
	req.SetSnapshot(idOrName)
	return create(t, s, req)
}

// run executes a shell command line in a sandbox and returns its output.
func run(t *testing.T, s *Server, id, script string) string {
	t.Helper()
	res, _, err := execute(t, s.ToolboxClient(id, s.APIKey()), `sh -c "`+script+`"`)
	if err != nil || res.GetExitCode() != 0 {
		t.Fatalf("%s in %s: %v %+v (%s)", script, id, err, res, body(err))
	}
	return strings.TrimSpace(res.Result)
}

// snapshotImages lists the images of the fake's snapshots left in Docker.
func snapshotImages(t *testing.T, s *Server) []string {
	t.Helper()
	list, err := dockerenv.Require(t).ImageList(ctxT(t), client.ImageListOptions{Filters: make(client.Filters).Add("label", labelInstance+"="+s.inst)})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, im := range list.Items {
		for _, tag := range im.RepoTags {
			if strings.HasPrefix(tag, "daytonafake-snapshot/") {
				out = append(out, tag)
			}
		}
	}
	return out
}

// TestSnapshotOfRunningSandbox: a snapshot of a started sandbox is taken
// while it runs (a process started before is still there after, the
// container was never paused by the kind fake), it carries the
// sandbox's files and resources into every sandbox created from it, any
// number of them, each independent of the others and of the source, and
// removing it keeps those sandboxes running and leaves no image behind.
func TestSnapshotOfRunningSandbox(t *testing.T) {
	s := Start(t)
	ctx := ctxT(t)
	api := s.APIClient(s.APIKey())
	req := testImageBuild(t)
	req.SetCpu(1)
	req.SetMemory(1)
	req.SetDisk(4)
	src := create(t, s, req)
	run(t, s, src.Id, "echo carried >/tmp/file")
	pid := run(t, s, src.Id, "sleep 1000 >/dev/null 2>&1 & echo $!")

	snapshotOf(t, s, src.Id, "snap-running")
	snap := waitSnapshot(t, s, src.Id, "snap-running")
	if snap == nil || snap.State != apiclient.SNAPSHOTSTATE_ACTIVE || snap.Cpu != 1 || snap.Mem != 1 || snap.Disk != 4 || !snap.Size.IsSet() {
		t.Fatalf("snapshot: %+v", snap)
	}
	if got := waitState(t, s, src.Id, apiclient.SANDBOXSTATE_STARTED); got.GetState() != apiclient.SANDBOXSTATE_STARTED {
		t.Fatalf("the source is %s after its snapshot", got.GetState())
	}
	if out := run(t, s, src.Id, "kill -0 "+pid+" && echo alive"); out != "alive" {
		t.Fatalf("the process started before the snapshot: %q", out)
	}
	if n := s.Unkindness(); n.SnapshotsFailed != 0 {
		t.Fatalf("unkindness of the kind fake: %+v", n)
	}

	a := fromSnapshot(t, s, snap.Id) // by id
	b := fromSnapshot(t, s, snap.Name)
	for _, sb := range []*apiclient.Sandbox{a, b} {
		if sb.Cpu != 1 || sb.Memory != 1 || sb.Disk != 4 || sb.GetSnapshot() != snap.Name {
			t.Fatalf("sandbox from the snapshot: cpu %v memory %v disk %v snapshot %q", sb.Cpu, sb.Memory, sb.Disk, sb.GetSnapshot())
		}
		if out := run(t, s, sb.Id, "cat /tmp/file"); out != "carried" {
			t.Fatalf("the file in a sandbox from the snapshot: %q", out)
		}
	}
	run(t, s, a.Id, "echo a >/tmp/file")
	run(t, s, src.Id, "echo src >/tmp/file")
	for id, want := range map[string]string{a.Id: "a", b.Id: "carried", src.Id: "src"} {
		if out := run(t, s, id, "cat /tmp/file"); out != want {
			t.Fatalf("sandbox %s sees %q, want %q: they are not independent", id, out, want)
		}
	}

	if resp, err := api.SnapshotsAPI.RemoveSnapshot(ctx, snap.Name).Execute(); err == nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("DELETE /snapshots/{name}: %v (Daytona takes the id only)", err)
	}
	if _, err := api.SnapshotsAPI.RemoveSnapshot(ctx, snap.Id).Execute(); err != nil {
		t.Fatalf("remove the snapshot: %v (%s)", err, body(err))
	}
	for {
		got, resp, err := api.SnapshotsAPI.GetSnapshot(ctx, snap.Id).Execute()
		if resp != nil && resp.StatusCode == http.StatusNotFound {
			break
		}
		if err != nil || got.State != apiclient.SNAPSHOTSTATE_REMOVING {
			t.Fatalf("a removed snapshot: %v %+v", err, got)
		}
		if ctx.Err() != nil {
			t.Fatal("the removed snapshot never went")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if out := run(t, s, a.Id, "cat /tmp/file"); out != "a" {
		t.Fatalf("a sandbox made from the removed snapshot: %q", out)
	}
	again := apiclient.NewCreateSandbox()
	again.SetSnapshot(snap.Name)
	if _, resp, err := api.SandboxAPI.CreateSandbox(ctx).CreateSandbox(*again).Execute(); err == nil || resp.StatusCode != http.StatusBadRequest || !strings.Contains(body(err), "not found") {
		t.Fatalf("a sandbox from the removed snapshot: %v %s", err, body(err))
	}
	for _, sb := range []*apiclient.Sandbox{a, b} {
		api.SandboxAPI.DeleteSandbox(ctx, sb.Id).Execute()
		if err := waitGone(ctx, s, sb.Id); err != nil {
			t.Fatal(err)
		}
	}
	if left := snapshotImages(t, s); len(left) != 0 {
		t.Fatalf("images left after the snapshot and its sandboxes went: %v", left)
	}
}

// waitGone waits until the fake no longer holds sandbox id.
func waitGone(ctx context.Context, s *Server, id string) error {
	for {
		if _, ok := s.Sandbox(id); !ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sandbox %s never went: %w", id, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestSnapshotRefusals: the answers Daytona gives to snapshot calls it
// refuses, and what a snapshotting sandbox still does.
func TestSnapshotRefusals(t *testing.T) {
	s := StartUnkind(t, Unkind{SnapshotDelay: fault.Jitter{Min: 3 * time.Second}})
	ctx := ctxT(t)
	api := s.APIClient(s.APIKey())
	post := func(id, name string, memory bool) (int, string) {
		req := apiclient.NewCreateSandboxSnapshot(name)
		if memory {
			req.SetIncludeMemory(true)
		}
		_, resp, err := api.SandboxAPI.CreateSandboxSnapshot(ctx, id).CreateSandboxSnapshot(*req).Execute()
		if resp == nil {
			t.Fatalf("snapshot: %v", err)
		}
		return resp.StatusCode, body(err)
	}
	if code, msg := post("no-such-sandbox", "x", false); code != 404 {
		t.Fatalf("unknown sandbox: %d %s", code, msg)
	}
	sb := create(t, s, testImageBuild(t))
	if code, msg := post(sb.Id, "", false); code != 400 {
		t.Fatalf("no name: %d %s", code, msg)
	}
	if code, msg := post(sb.Id, "x", true); code != 400 || !strings.Contains(msg, "includeMemory") {
		t.Fatalf("includeMemory on a container sandbox: %d %s", code, msg)
	}

	snapshotOf(t, s, sb.Id, "first")
	// While the capture runs (its push takes 3 s): a second capture and a
	// stop are refused, the toolbox still answers.
	if code, msg := post(sb.Id, "second", false); code != 409 || !strings.Contains(msg, "state change in progress") {
		t.Fatalf("a snapshot during a snapshot: %d %s", code, msg)
	}
	if _, resp, err := api.SandboxAPI.StopSandbox(ctx, sb.Id).Execute(); err == nil || resp.StatusCode != 409 {
		t.Fatalf("a stop during a snapshot: %v", err)
	}
	if out := run(t, s, sb.Id, "echo busy"); out != "busy" {
		t.Fatalf("toolbox during a snapshot: %q", out)
	}
	if got, _, err := api.SnapshotsAPI.GetSnapshot(ctx, "first").Execute(); err != nil || got.State != apiclient.SNAPSHOTSTATE_SNAPSHOTTING {
		t.Fatalf("the snapshot while captured: %v %+v", err, got)
	}
	if snap := waitSnapshot(t, s, sb.Id, "first"); snap == nil || snap.State != apiclient.SNAPSHOTSTATE_ACTIVE {
		t.Fatalf("snapshot: %+v", snap)
	}
	if code, msg := post(sb.Id, "first", false); code != 409 || !strings.Contains(msg, "already exists") {
		t.Fatalf("a name taken: %d %s", code, msg)
	}

	// A stopped sandbox can be snapshotted; an archived one cannot.
	api.SandboxAPI.StopSandbox(ctx, sb.Id).Execute()
	waitState(t, s, sb.Id, apiclient.SANDBOXSTATE_STOPPED)
	snapshotOf(t, s, sb.Id, "stopped")
	if snap := waitSnapshot(t, s, sb.Id, "stopped"); snap == nil || snap.State != apiclient.SNAPSHOTSTATE_ACTIVE {
		t.Fatalf("snapshot of a stopped sandbox: %+v", snap)
	}
	waitState(t, s, sb.Id, apiclient.SANDBOXSTATE_STOPPED)
	api.SandboxAPI.ArchiveSandbox(ctx, sb.Id).Execute()
	waitState(t, s, sb.Id, apiclient.SANDBOXSTATE_ARCHIVED)
	if code, msg := post(sb.Id, "archived", false); code != 400 || !strings.Contains(msg, "started or stopped") {
		t.Fatalf("an archived sandbox: %d %s", code, msg)
	}

	withResources := apiclient.NewCreateSandbox()
	withResources.SetSnapshot("first")
	withResources.SetCpu(2)
	if _, resp, err := api.SandboxAPI.CreateSandbox(ctx).CreateSandbox(*withResources).Execute(); err == nil || resp.StatusCode != 400 || !strings.Contains(body(err), "resources") {
		t.Fatalf("a snapshot and resources: %v %s", err, body(err))
	}
	unknown := apiclient.NewCreateSandbox()
	unknown.SetSnapshot("no-such-snapshot")
	if _, resp, err := api.SandboxAPI.CreateSandbox(ctx).CreateSandbox(*unknown).Execute(); err == nil || resp.StatusCode != 400 || !strings.Contains(body(err), "not found") {
		t.Fatalf("an unknown snapshot: %v %s", err, body(err))
	}
	if _, resp, err := api.SnapshotsAPI.GetSnapshot(ctx, "no-such-snapshot").Execute(); err == nil || resp.StatusCode != 404 {
		t.Fatalf("get an unknown snapshot: %v", err)
	}
	list, _, err := api.SnapshotsAPI.GetAllSnapshots(ctx).Name("STOP").Execute()
	if err != nil || list.Total != 1 || len(list.Items) != 1 || list.Items[0].Name != "stopped" {
		t.Fatalf("list by part of the name: %v %+v", err, list)
	}
}

// TestUnkindSnapshotFailEvery: a failed capture leaves its snapshot in
// state error with the runner's reason, the sandbox started, no image; a
// sandbox cannot be made from it, and it can be removed.
func TestUnkindSnapshotFailEvery(t *testing.T) {
	s := StartUnkind(t, Unkind{SnapshotFailEvery: 1})
	ctx := ctxT(t)
	api := s.APIClient(s.APIKey())
	sb := create(t, s, testImageBuild(t))
	snapshotOf(t, s, sb.Id, "doomed")
	snap := waitSnapshot(t, s, sb.Id, "doomed")
	if snap == nil || snap.State != apiclient.SNAPSHOTSTATE_ERROR ||
		!strings.Contains(snap.GetErrorReason(), "timed out") && !strings.Contains(snap.GetErrorReason(), "push") {
		t.Fatalf("failed snapshot: %+v", snap)
	}
	waitState(t, s, sb.Id, apiclient.SANDBOXSTATE_STARTED)
	if n := s.Unkindness().SnapshotsFailed; n != 1 {
		t.Fatalf("%d captures failed, want 1", n)
	}
	req := apiclient.NewCreateSandbox()
	req.SetSnapshot("doomed")
	if _, resp, err := api.SandboxAPI.CreateSandbox(ctx).CreateSandbox(*req).Execute(); err == nil || resp.StatusCode != 400 || !strings.Contains(body(err), "is error") {
		t.Fatalf("a sandbox from a failed snapshot: %v %s", err, body(err))
	}
	if left := snapshotImages(t, s); len(left) != 0 {
		t.Fatalf("a failed capture left images: %v", left)
	}
	if _, err := api.SnapshotsAPI.RemoveSnapshot(ctx, snap.Id).Execute(); err != nil {
		t.Fatalf("remove a failed snapshot: %v", err)
	}
}

// TestUnkindSnapshotLateRecord: with the record made on success only, the
// snapshot is unknown while it is captured, appears once the sandbox is
// back, and a failed capture leaves nothing to find.
func TestUnkindSnapshotLateRecord(t *testing.T) {
	s := StartUnkind(t, Unkind{SnapshotLateRecord: true, SnapshotFailEvery: 2, SnapshotDelay: fault.Jitter{Min: time.Second}})
	ctx := ctxT(t)
	api := s.APIClient(s.APIKey())
	sb := create(t, s, testImageBuild(t))
	outcomes := map[bool]int{}
	for i := range 2 { // one of two captures fails
		name := fmt.Sprintf("late-%d", i)
		snapshotOf(t, s, sb.Id, name)
		// The record is made before the sandbox leaves snapshotting: a
		// snapshot unknown while the sandbox, asked after, still snapshots
		// was unknown during the capture.
		_, resp, _ := api.SnapshotsAPI.GetSnapshot(ctx, name).Execute()
		during, _, _ := api.SandboxAPI.GetSandbox(ctx, sb.Id).Execute()
		if during.GetState() == apiclient.SANDBOXSTATE_SNAPSHOTTING && (resp == nil || resp.StatusCode != http.StatusNotFound) {
			t.Fatalf("the snapshot was known while captured: %v", resp)
		}
		snap := waitSnapshot(t, s, sb.Id, name)
		if snap != nil && snap.State != apiclient.SNAPSHOTSTATE_ACTIVE {
			t.Fatalf("a snapshot recorded late is %s", snap.State)
		}
		outcomes[snap != nil]++
	}
	if outcomes[true] != 1 || outcomes[false] != 1 || s.Unkindness().SnapshotsFailed != 1 {
		t.Fatalf("outcomes %v, %d failed: want one snapshot and one capture that left nothing", outcomes, s.Unkindness().SnapshotsFailed)
	}
	if n := len(s.Snapshots()); n != 1 {
		t.Fatalf("the fake holds %d snapshots, want 1", n)
	}
	if left := snapshotImages(t, s); len(left) != 1 {
		t.Fatalf("snapshot images: %v, want the one of the snapshot that was made", left)
	}
}

// TestUnkindSnapshotPullFailEvery: a sandbox created from a snapshot can
// fail as its image is pulled; the next one from the same snapshot starts.
func TestUnkindSnapshotPullFailEvery(t *testing.T) {
	s := StartUnkind(t, Unkind{SnapshotPullFailEvery: 2})
	ctx := ctxT(t)
	api := s.APIClient(s.APIKey())
	sb := create(t, s, testImageBuild(t))
	run(t, s, sb.Id, "echo pulled >/tmp/file")
	snapshotOf(t, s, sb.Id, "pulled")
	if snap := waitSnapshot(t, s, sb.Id, "pulled"); snap == nil || snap.State != apiclient.SNAPSHOTSTATE_ACTIVE {
		t.Fatalf("snapshot: %+v", snap)
	}
	var failed, started int
	for range 2 {
		req := apiclient.NewCreateSandbox()
		req.SetSnapshot("pulled")
		got, _, err := api.SandboxAPI.CreateSandbox(ctx).CreateSandbox(*req).Execute()
		if err != nil {
			t.Fatalf("create: %v %s", err, body(err))
		}
		t.Cleanup(func() { api.SandboxAPI.DeleteSandbox(context.Background(), got.Id).Execute() })
		switch err := s.WaitState(ctx, got.Id, "started"); {
		case err == nil:
			started++
			if out := run(t, s, got.Id, "cat /tmp/file"); out != "pulled" {
				t.Fatalf("file: %q", out)
			}
		case strings.Contains(err.Error(), snapshotPullError):
			failed++
		default:
			t.Fatal(err)
		}
	}
	if failed != 1 || started != 1 || s.Unkindness().SnapshotPullsFailed != 1 {
		t.Fatalf("%d failed, %d started (%+v): want one of each", failed, started, s.Unkindness())
	}
}

// TestUnkindSnapshotFreeze: with the runner's pause, a snapshot of a
// started sandbox still keeps its processes (the container is unpaused
// after the commit) and process starts racing the freeze all end: none
// lands in the frozen container (which would hang Docker's shim).
func TestUnkindSnapshotFreeze(t *testing.T) {
	s := StartUnkind(t, Unkind{SnapshotFreeze: true})
	ctx := ctxT(t)
	cli := dockerenv.Require(t)
	sb := create(t, s, testImageBuild(t))
	pid := run(t, s, sb.Id, "sleep 1000 >/dev/null 2>&1 & echo $!")
	run(t, s, sb.Id, "head -c 20000000 /dev/urandom >/tmp/big")

	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 64)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tb := s.ToolboxClient(sb.Id, s.APIKey())
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				cctx, cancel := context.WithTimeout(ctx, time.Minute)
				res, _, err := tb.ProcessAPI.ExecuteCommand(cctx).Request(*toolbox.NewExecuteRequest(fmt.Sprintf("echo %d-%d", i, n))).Execute()
				cancel()
				if err != nil || strings.TrimSpace(res.Result) != fmt.Sprintf("%d-%d", i, n) {
					errs <- fmt.Errorf("execute during the snapshot: %v %+v", err, res)
					return
				}
			}
		}()
	}
	snapshotOf(t, s, sb.Id, "frozen")
	snap := waitSnapshot(t, s, sb.Id, "frozen")
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if snap == nil || snap.State != apiclient.SNAPSHOTSTATE_ACTIVE {
		t.Fatalf("snapshot: %+v", snap)
	}
	info, _ := s.Sandbox(sb.Id)
	ins, err := cli.ContainerInspect(ctx, info.ContainerID, client.ContainerInspectOptions{})
	if err != nil || ins.Container.State.Paused || !ins.Container.State.Running {
		t.Fatalf("the container after the snapshot: %v paused=%v", err, err == nil && ins.Container.State.Paused)
	}
	if out := run(t, s, sb.Id, "kill -0 "+pid+" && echo alive"); out != "alive" {
		t.Fatalf("the process started before the snapshot: %q", out)
	}
	child := fromSnapshot(t, s, "frozen")
	if a, b := run(t, s, sb.Id, "md5sum </tmp/big"), run(t, s, child.Id, "md5sum </tmp/big"); a != b {
		t.Fatalf("the file in the snapshot differs: %s vs %s", a, b)
	}
}

// TestExecGate: a freeze holds back process starts and toolbox calls
// until it thaws, and waits for the starts already under way.
func TestExecGate(t *testing.T) {
	var g execGate
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	end, err := g.begin(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	frozen := make(chan error, 1)
	go func() { frozen <- g.freeze(ctx, "c") }()
	// The freeze cannot end while a start is under way...
	select {
	case err := <-frozen:
		t.Fatalf("the freeze ended with a start under way: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	end()
	if err := <-frozen; err != nil {
		t.Fatal(err)
	}
	// ...and, frozen, new starts and toolbox calls wait for the thaw; other
	// containers do not.
	if e, err := g.begin(ctx, "other"); err != nil {
		t.Fatal(err)
	} else {
		e()
	}
	started := make(chan struct{})
	awaited := make(chan struct{})
	go func() {
		e, err := g.begin(ctx, "c")
		if err == nil {
			e()
		}
		close(started)
	}()
	go func() {
		g.await(ctx, "c")
		close(awaited)
	}()
	short, scancel := context.WithTimeout(ctx, 50*time.Millisecond)
	if err := g.await(short, "c"); err == nil {
		t.Fatal("await returned while the container was frozen")
	}
	scancel()
	select {
	case <-started:
		t.Fatal("a start went ahead in a frozen container")
	case <-awaited:
		t.Fatal("a toolbox call went ahead in a frozen container")
	default:
	}
	g.thaw("c")
	<-started
	<-awaited
}
