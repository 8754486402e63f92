package modalfake_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
	"github.com/a55dbaac/berth/internal/testenv/modalfake"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	modal "github.com/modal-labs/libmodal/modal-go"
	pb "github.com/modal-labs/libmodal/modal-go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// newClient points the real SDK at srv (through MODAL_SERVER_URL, as a
// user would) with the given credential, and makes one call (the SDK
// exchanges the credential for its auth token on the first call).
func newClient(t *testing.T, srv *modalfake.Server, id, secret string) (*modal.Client, error) {
	t.Helper()
	t.Setenv("MODAL_SERVER_URL", srv.URL())
	t.Setenv("MODAL_CONFIG_PATH", t.TempDir()+"/none.toml")
	c, err := modal.NewClientWithOptions(&modal.ClientParams{
		TokenID:     id,
		TokenSecret: secret,
		Logger:      slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, err
	}
	t.Cleanup(c.Close)
	if _, err := c.Apps.FromName(context.Background(), "fake-test", &modal.AppFromNameParams{CreateIfMissing: true}); err != nil {
		return nil, err
	}
	return c, nil
}

func mustClient(t *testing.T, srv *modalfake.Server) *modal.Client {
	t.Helper()
	c, err := newClient(t, srv, srv.TokenID(), srv.TokenSecret())
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	return c
}

func newSandbox(t *testing.T, c *modal.Client, params *modal.SandboxCreateParams) *modal.Sandbox {
	t.Helper()
	ctx := context.Background()
	app, err := c.Apps.FromName(ctx, "fake-test", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatalf("app: %v", err)
	}
	img := c.Images.FromRegistry(dockerenv.ImageRef, nil)
	sb, err := c.Sandboxes.Create(ctx, app, img, params)
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	t.Cleanup(func() { sb.Terminate(context.Background(), nil) })
	return sb
}

// run execs argv and returns its stdout, stderr and exit code.
func run(t *testing.T, sb *modal.Sandbox, stdin string, argv ...string) (string, string, int) {
	t.Helper()
	ctx := context.Background()
	p, err := sb.Exec(ctx, argv, nil)
	if err != nil {
		t.Fatalf("exec %q: %v", argv, err)
	}
	if stdin != "" {
		if _, err := io.WriteString(p.Stdin, stdin); err != nil {
			t.Fatalf("stdin: %v", err)
		}
	}
	if err := p.Stdin.Close(); err != nil {
		t.Fatalf("close stdin: %v", err)
	}
	type res struct {
		b   []byte
		err error
	}
	errc := make(chan res, 1)
	go func() { b, err := io.ReadAll(p.Stderr); errc <- res{b, err} }()
	out, err := io.ReadAll(p.Stdout)
	if err != nil {
		t.Fatalf("stdout of %q: %v", argv, err)
	}
	e := <-errc
	if e.err != nil {
		t.Fatalf("stderr of %q: %v", argv, e.err)
	}
	code, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("wait %q: %v", argv, err)
	}
	return string(out), string(e.b), code
}

func TestAuthentication(t *testing.T) {
	srv := modalfake.Start(t)
	_, err := newClient(t, srv, srv.TokenID(), "as-wrong")
	if status.Code(errors.Unwrap(errors.Unwrap(errors.Unwrap(err)))) != codes.Unauthenticated && !strings.Contains(err.Error(), "Unauthenticated") {
		t.Fatalf("wrong secret: got %v, want Unauthenticated", err)
	}
	if _, err := newClient(t, srv, "ak-unknown", srv.TokenSecret()); err == nil || !strings.Contains(err.Error(), "Unauthenticated") {
		t.Fatalf("unknown token id: got %v, want Unauthenticated", err)
	}
	c := mustClient(t, srv)
	sb := newSandbox(t, c, nil)
	if out, _, code := run(t, sb, "", "echo", "ok"); out != "ok\n" || code != 0 {
		t.Fatalf("exec with a good credential: %q, %d", out, code)
	}

	// Calls without the JWT, or the router with a token for another task,
	// are refused.
	conn, err := grpc.NewClient(strings.TrimPrefix(srv.URL(), "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-modal-token-id", srv.TokenID(), "x-modal-token-secret", srv.TokenSecret())
	_, err = pb.NewModalClientClient(conn).SandboxWait(ctx, pb.SandboxWaitRequest_builder{SandboxId: sb.SandboxID}.Build())
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("unary call without auth token: got %v, want Unauthenticated", err)
	}
	rctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer not.a.token")
	_, err = pb.NewTaskCommandRouterClient(conn).TaskExecPoll(rctx, pb.TaskExecPollRequest_builder{TaskId: "ta-x", ExecId: "e"}.Build())
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("router call with a bad token: got %v, want Unauthenticated", err)
	}
}

func TestExecStdioExitCodesAndSignals(t *testing.T) {
	srv := modalfake.Start(t)
	sb := newSandbox(t, mustClient(t, srv), nil)

	out, errOut, code := run(t, sb, "", "sh", "-c", "echo out; echo err >&2; exit 3")
	if out != "out\n" || errOut != "err\n" || code != 3 {
		t.Fatalf("got stdout %q stderr %q code %d", out, errOut, code)
	}
	if out, _, code := run(t, sb, "line one\nline two\n", "cat"); out != "line one\nline two\n" || code != 0 {
		t.Fatalf("cat: %q, %d", out, code)
	}
	if _, _, code := run(t, sb, "", "sh", "-c", "kill -TERM $$"); code != 128+15 {
		t.Fatalf("killed by SIGTERM: code %d, want 143", code)
	}
	if _, _, code := run(t, sb, "", "/no/such/binary"); code == 0 {
		t.Fatalf("a missing binary exited 0")
	}

	// Output streams while the process runs: the first line arrives before
	// the process is told to finish.
	ctx := context.Background()
	p, err := sb.Exec(ctx, []string{"sh", "-c", "echo ready; read x; echo got $x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(p.Stdout)
	if line, err := r.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("first line: %q, %v", line, err)
	}
	io.WriteString(p.Stdin, "go\n")
	if line, err := r.ReadString('\n'); err != nil || line != "got go\n" {
		t.Fatalf("second line: %q, %v", line, err)
	}
	if code, err := p.Wait(ctx); err != nil || code != 0 {
		t.Fatalf("wait: %d, %v", code, err)
	}

	// Wait returns when the process exits, even while a descendant keeps
	// its output open.
	p, err = sb.Exec(ctx, []string{"sh", "-c", "sleep 300 & exit 7"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if code, err := p.Wait(wctx); err != nil || code != 7 {
		t.Fatalf("wait with a descendant holding stdout: %d, %v", code, err)
	}
}

// TestExecStdinAfterExit: once an exec has exited (its output ended), its
// stdin is gone as a pipe's whose reader exited: data is refused, and the
// end of input succeeds, whether it arrives before or after the exit is
// seen. The router applies stdin in order and the exec ends only when its
// process does: cat exits after the end of input, having echoed
// everything.
func TestExecStdinAfterExit(t *testing.T) {
	srv := modalfake.Start(t)
	sb := newSandbox(t, mustClient(t, srv), nil)
	ctx := context.Background()

	p, err := sb.Exec(ctx, []string{"sh", "-c", "exit 0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(p.Stdout); err != nil {
		t.Fatal(err)
	}
	if code, err := p.Wait(ctx); err != nil || code != 0 {
		t.Fatalf("wait: %d, %v", code, err)
	}
	if _, err := io.WriteString(p.Stdin, "x"); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("write to an exec that exited: %v, want FailedPrecondition", err)
	}
	if err := p.Stdin.Close(); err != nil {
		t.Errorf("end of input to an exec that exited: %v", err)
	}

	p, err = sb.Exec(ctx, []string{"cat"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"abc", "def\n"} {
		if _, err := io.WriteString(p.Stdin, s); err != nil {
			t.Fatalf("write %q: %v", s, err)
		}
	}
	if err := p.Stdin.Close(); err != nil {
		t.Fatalf("end of input: %v", err)
	}
	if out, err := io.ReadAll(p.Stdout); err != nil || string(out) != "abcdef\n" {
		t.Fatalf("cat echoed %q, %v", out, err)
	}
	if code, err := p.Wait(ctx); err != nil || code != 0 {
		t.Fatalf("wait: %d, %v", code, err)
	}
	if err := p.Stdin.Close(); err != nil {
		t.Errorf("a second end of input, after the exit: %v", err)
	}
}

func TestExecTimeoutKillsTheProcess(t *testing.T) {
	srv := modalfake.Start(t)
	sb := newSandbox(t, mustClient(t, srv), nil)
	ctx := context.Background()
	p, err := sb.Exec(ctx, []string{"sleep", "3011"}, &modal.SandboxExecParams{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Wait ends either with the SDK's own deadline error or with the
	// status of the killed process, whichever comes first.
	if code, err := p.Wait(ctx); !errors.As(err, new(modal.ExecTimeoutError)) && (err != nil || code != 137) {
		t.Fatalf("wait past the exec timeout: %d, %v; want ExecTimeoutError or 137", code, err)
	}
	// The process itself is gone from the container.
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _, _ := run(t, sb, "", "ps")
		if !strings.Contains(out, "sleep 3011") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sleep 3011 still runs after its exec timeout:\n%s", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestTerminateWaitAndNotFound(t *testing.T) {
	srv := modalfake.Start(t)
	c := mustClient(t, srv)
	sb := newSandbox(t, c, nil)
	ctx := context.Background()
	if code, err := sb.Poll(ctx); err != nil || code != nil {
		t.Fatalf("poll of a running sandbox: %v, %v", code, err)
	}
	run(t, sb, "", "true") // attach the command router before terminating
	cid := srv.Sandboxes()[0].ContainerID
	code, err := sb.Terminate(ctx, &modal.SandboxTerminateParams{Wait: true})
	if err != nil || code != 137 {
		t.Fatalf("terminate and wait: %d, %v (want 137, Modal's code for terminated)", code, err)
	}
	if _, err := dockerenv.Require(t).ContainerInspect(ctx, cid, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Fatalf("container of a terminated sandbox: %v, want it removed", err)
	}
	again, err := c.Sandboxes.FromID(ctx, sb.SandboxID)
	if err != nil {
		t.Fatalf("FromID of a finished sandbox: %v", err)
	}
	if _, err := again.Exec(ctx, []string{"true"}, nil); err == nil {
		t.Fatal("exec in a terminated sandbox succeeded")
	}
	if code, err := again.Terminate(ctx, &modal.SandboxTerminateParams{Wait: true}); err != nil || code != 137 {
		t.Fatalf("terminating again: %d, %v", code, err)
	}
	if _, err := c.Sandboxes.FromID(ctx, "sb-doesnotexist"); !errors.As(err, new(modal.NotFoundError)) {
		t.Fatalf("unknown sandbox id: %v, want NotFoundError", err)
	}
	if _, err := c.Images.FromID(ctx, "im-doesnotexist"); !errors.As(err, new(modal.NotFoundError)) {
		t.Fatalf("unknown image id: %v, want NotFoundError", err)
	}
}

func TestEntrypointExitFinishesTheSandbox(t *testing.T) {
	srv := modalfake.Start(t)
	sb := newSandbox(t, mustClient(t, srv), &modal.SandboxCreateParams{Command: []string{"sh", "-c", "exit 5"}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if code, err := sb.Wait(ctx); err != nil || code != 5 {
		t.Fatalf("wait: %d, %v", code, err)
	}
}

func TestSandboxTimeoutAndIdleTimeout(t *testing.T) {
	srv := modalfake.Start(t)
	c := mustClient(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	sb := newSandbox(t, c, &modal.SandboxCreateParams{Timeout: 2 * time.Second})
	if code, err := sb.Wait(ctx); err != nil || code != 124 {
		t.Fatalf("wait for a timed-out sandbox: %d, %v (want 124, Modal's code for a timeout)", code, err)
	}

	// An exec keeps an idle-timeout sandbox alive: a 5 s command in a
	// sandbox with a 2 s idle timeout completes normally (a sandbox
	// terminated under it would end it with SIGKILL, 137).
	idle := newSandbox(t, c, &modal.SandboxCreateParams{IdleTimeout: 2 * time.Second, Timeout: time.Hour})
	if _, _, code := run(t, idle, "", "sleep", "5"); code != 0 {
		t.Fatalf("a command longer than the idle timeout: code %d", code)
	}
	// Once nothing runs, the sandbox is terminated for idleness.
	idle.Wait(ctx)
	var got *pb.GenericResult
	for _, info := range srv.Sandboxes() {
		if info.ID == idle.SandboxID {
			got = info.Result
		}
	}
	if got.GetStatus() != pb.GenericResult_GENERIC_STATUS_IDLE_TIMEOUT {
		t.Fatalf("result of an idle sandbox: %v, want IDLE_TIMEOUT", got)
	}
}

func TestSnapshotRestoreAndDelete(t *testing.T) {
	srv := modalfake.Start(t)
	c := mustClient(t, srv)
	ctx := context.Background()
	sb := newSandbox(t, c, nil)
	run(t, sb, "", "sh", "-c", "echo kept > /root/state.txt")
	img, err := sb.SnapshotFilesystem(ctx, time.Minute)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if !strings.HasPrefix(img.ImageID, "im-") {
		t.Fatalf("snapshot image id %q", img.ImageID)
	}
	sb.Terminate(ctx, nil)

	restored, err := c.Images.FromID(ctx, img.ImageID)
	if err != nil {
		t.Fatalf("FromID of the snapshot: %v", err)
	}
	app, _ := c.Apps.FromName(ctx, "fake-test", nil)
	sb2, err := c.Sandboxes.Create(ctx, app, restored, nil)
	if err != nil {
		t.Fatalf("create from snapshot: %v", err)
	}
	defer sb2.Terminate(ctx, nil)
	if out, _, _ := run(t, sb2, "", "cat", "/root/state.txt"); out != "kept\n" {
		t.Fatalf("restored file: %q", out)
	}

	if err := c.Images.Delete(ctx, img.ImageID, nil); err != nil {
		t.Fatalf("delete snapshot: %v", err)
	}
	if _, err := c.Images.FromID(ctx, img.ImageID); !errors.As(err, new(modal.NotFoundError)) {
		t.Fatalf("FromID of a deleted snapshot: %v, want NotFoundError", err)
	}
}

func TestTagsListAndName(t *testing.T) {
	srv := modalfake.Start(t)
	c := mustClient(t, srv)
	ctx := context.Background()
	a := newSandbox(t, c, &modal.SandboxCreateParams{Name: "alpha"})
	b := newSandbox(t, c, nil)
	if err := a.SetTags(ctx, map[string]string{"berth.key": "k1", "role": "x"}); err != nil {
		t.Fatal(err)
	}
	if err := b.SetTags(ctx, map[string]string{"berth.key": "k2"}); err != nil {
		t.Fatal(err)
	}
	tags, err := a.GetTags(ctx)
	if err != nil || tags["berth.key"] != "k1" || tags["role"] != "x" {
		t.Fatalf("tags: %v, %v", tags, err)
	}
	it, err := c.Sandboxes.List(ctx, &modal.SandboxListParams{Tags: map[string]string{"berth.key": "k1"}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for sb, err := range it {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.SandboxID)
	}
	if len(ids) != 1 || ids[0] != a.SandboxID {
		t.Fatalf("list by tag: %v, want [%s]", ids, a.SandboxID)
	}
	found, err := c.Sandboxes.FromName(ctx, "fake-test", "alpha", nil)
	if err != nil || found.SandboxID != a.SandboxID {
		t.Fatalf("FromName: %v, %v", found, err)
	}
	app, _ := c.Apps.FromName(ctx, "fake-test", nil)
	if _, err := c.Sandboxes.Create(ctx, app, c.Images.FromRegistry(dockerenv.ImageRef, nil), &modal.SandboxCreateParams{Name: "alpha"}); !errors.As(err, new(modal.AlreadyExistsError)) {
		t.Fatalf("second sandbox with a running one's name: %v, want AlreadyExistsError", err)
	}
	a.Terminate(ctx, nil)
	it, _ = c.Sandboxes.List(ctx, &modal.SandboxListParams{Tags: map[string]string{"berth.key": "k1"}})
	for sb := range it {
		t.Fatalf("a terminated sandbox is listed: %s", sb.SandboxID)
	}
	if _, err := c.Apps.FromName(ctx, "no-such-app", nil); !errors.As(err, new(modal.NotFoundError)) {
		t.Fatalf("missing app: %v, want NotFoundError", err)
	}
}

func TestFiles(t *testing.T) {
	srv := modalfake.Start(t)
	sb := newSandbox(t, mustClient(t, srv), nil)
	ctx := context.Background()
	f, err := sb.Open(ctx, "/root/f.txt", "w")
	if err != nil {
		t.Fatalf("open for writing: %v", err)
	}
	if _, err := f.Write([]byte("hello\nworld\n")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if out, _, _ := run(t, sb, "", "cat", "/root/f.txt"); out != "hello\nworld\n" {
		t.Fatalf("file written through Open, read by cat: %q", out)
	}
	f, err = sb.Open(ctx, "/root/f.txt", "a")
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("more\n"))
	f.Close()
	f, err = sb.Open(ctx, "/root/f.txt", "r")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(f)
	f.Close()
	if err != nil || string(got) != "hello\nworld\nmore\n" {
		t.Fatalf("read back: %q, %v", got, err)
	}
	if _, err := sb.Open(ctx, "/root/missing.txt", "r"); !errors.As(err, new(modal.SandboxFilesystemError)) {
		t.Fatalf("open of a missing file: %v, want SandboxFilesystemError", err)
	}
	// An absolute link resolves inside the container, not on the host.
	run(t, sb, "", "ln", "-s", "/etc/passwd", "/root/link")
	want, _, _ := run(t, sb, "", "cat", "/etc/passwd")
	f, err = sb.Open(ctx, "/root/link", "r")
	if err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(f)
	f.Close()
	if string(got) != want {
		t.Fatalf("link read through Open: %q, want the container's %q", got, want)
	}
}

func TestRecordsDefinitionsAndSecrets(t *testing.T) {
	srv := modalfake.Start(t)
	c := mustClient(t, srv)
	sb := newSandbox(t, c, &modal.SandboxCreateParams{Env: map[string]string{"PLAIN_SECRET": "s3cr3t"}, Workdir: "/tmp", BlockNetwork: true})
	if out, _, _ := run(t, sb, "", "sh", "-c", "echo $PLAIN_SECRET; pwd"); out != "s3cr3t\n/tmp\n" {
		t.Fatalf("env and workdir in the sandbox: %q", out)
	}
	recs := srv.Records()
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1", len(recs))
	}
	r := recs[0]
	if r.SandboxID != sb.SandboxID || r.SecretEnv["PLAIN_SECRET"] != "s3cr3t" || !r.Definition.GetBlockNetwork() && r.Definition.GetNetworkAccess().GetNetworkAccessType() != pb.NetworkAccess_BLOCKED {
		t.Fatalf("record: %+v", r)
	}
	// A blocked network has no interface but loopback.
	if out, _, _ := run(t, sb, "", "sh", "-c", "ls /sys/class/net"); strings.TrimSpace(out) != "lo" {
		t.Fatalf("interfaces of a sandbox without network: %q", out)
	}
}

func TestCloseLeavesNothing(t *testing.T) {
	cli := dockerenv.Require(t)
	dockerenv.Image(t)
	ctx := context.Background()
	srv, err := modalfake.New(ctx, modalfake.Options{Docker: cli})
	if err != nil {
		t.Fatal(err)
	}
	c := mustClient(t, srv)
	sb := newSandbox(t, c, nil)
	run(t, sb, "", "touch", "/root/x")
	if _, err := sb.SnapshotFilesystem(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	busy := newSandbox(t, c, nil)
	// More output than the fake buffers, and nobody reading it: the
	// process blocks on its pipe, as it would on Modal, and Close must
	// still finish.
	if _, err := busy.Exec(ctx, []string{"head", "-c", "20000000", "/dev/zero"}, nil); err != nil {
		t.Fatal(err)
	}
	// Wait until head has written more than the fake holds (it is then
	// blocked on its pipe).
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		out, _, _ := run(t, busy, "", "sh", "-c", "cat /proc/$(pidof head)/io | sed -n 's/^wchar: //p'")
		if n, _ := strconv.Atoi(strings.TrimSpace(out)); n > 9<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("head never filled the fake's buffer (wrote %q)", out)
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- srv.Close() }()
	select {
	case err = <-closed:
	case <-time.After(2 * time.Minute):
		t.Fatal("Close hung with unread output")
	}
	if err != nil {
		t.Fatalf("close: %v", err)
	}
	f := make(client.Filters).Add("label", modalfake.LabelInstance+"="+srv.Instance())
	cs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil || len(cs.Items) != 0 {
		t.Fatalf("containers left after Close: %d, %v", len(cs.Items), err)
	}
	is, err := cli.ImageList(ctx, client.ImageListOptions{Filters: f})
	if err != nil || len(is.Items) != 0 {
		t.Fatalf("images left after Close: %d, %v", len(is.Items), err)
	}
}
