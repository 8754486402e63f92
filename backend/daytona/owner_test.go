package daytona

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/procmark"
	"github.com/a55dbaac/berth/internal/testenv/daytonafake"
)

// withOwner makes the backends built by fn label what they create, and
// retag what they reattach, with owner, then restores this process's mark.
func withOwner(owner string, fn func()) {
	saved := currentOwner
	currentOwner = func() string { return owner }
	defer func() { currentOwner = saved }()
	fn()
}

// liveProcess starts a process of this machine that berth can name by its
// mark, and returns the mark and a function that SIGKILLs it and waits
// until it is gone.
func liveProcess(t *testing.T) (mark string, kill func()) {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	kill = func() {
		if !killed {
			killed = true
			cmd.Process.Kill()
			cmd.Wait()
		}
	}
	t.Cleanup(kill)
	mark = procmark.Of(cmd.Process.Pid)
	if mark == "" || procmark.Gone(mark) {
		t.Fatalf("no usable mark for the live process %d: %q", cmd.Process.Pid, mark)
	}
	return mark, kill
}

// stoppedOfDeadCreator creates a persistent sandbox as a berth that has
// since exited would leave it after a clean Close: stopped, its owner label
// naming a process that no longer runs. It returns the options and the
// sandbox's id and labels.
func stoppedOfDeadCreator(t *testing.T, fake *daytonafake.Server) (backend.Options, string, map[string]string) {
	t.Helper()
	ctx := ctxT(t)
	opts := testOptions(t, fake, func(c *config.Terminal) { c.ContainerPersistent = true }, nil)
	t.Cleanup(func() { envAdmin{}.Remove(context.Background(), opts, opts.Key) })
	creator, exit := liveProcess(t)
	var id string
	withOwner(creator, func() {
		b, err := New(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		id = b.SandboxID()
		if err := b.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
	exit()
	info, _ := fake.Sandbox(id)
	if info.State != "stopped" || info.Labels[LabelOwner] != creator {
		t.Fatalf("sandbox of the exited creator is %s with labels %v, want stopped and owned by %s", info.State, info.Labels, creator)
	}
	return opts, id, info.Labels
}

// sweep runs the dead-owner sweep as the next berth process does: it
// constructs a backend for the same API, in a process that has not swept
// it yet.
func sweep(t *testing.T, fake *daytonafake.Server) {
	t.Helper()
	reaped.Delete(fake.APIURL() + "\x00" + fake.APIKey())
	newBackend(t, testOptions(t, fake, nil, nil))
}

// checkRetagged checks that the sandbox's labels are the creator's with
// only the owner replaced by owner.
func checkRetagged(t *testing.T, fake *daytonafake.Server, id string, creators map[string]string, owner string) {
	t.Helper()
	want := maps.Clone(creators)
	want[LabelOwner] = owner
	info, _ := fake.Sandbox(id)
	if !maps.Equal(info.Labels, want) {
		t.Fatalf("labels of the reattached sandbox = %v, want %v", info.Labels, want)
	}
}

// testReattachedSurvivesSweep: a persistent sandbox created by a berth that
// has exited, reattached by a live berth, is not stopped by another berth's
// sweep: the shell running in it keeps its state.
func testReattachedSurvivesSweep(t *testing.T, fake *daytonafake.Server) {
	ctx := ctxT(t)
	opts, id, labels := stoppedOfDeadCreator(t, fake)

	b := newBackend(t, opts) // this live process reattaches
	if b.SandboxID() != id {
		t.Fatalf("reattach got sandbox %s, want %s", b.SandboxID(), id)
	}
	checkRetagged(t, fake, id, labels, procmark.Self())
	sh, err := b.Start(ctx, backend.ProcSpec{Argv: []string{"/bin/sh"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	out := bufio.NewReader(sh.Stdout())
	fmt.Fprintln(sh.Stdin(), "export BERTH_STATE=kept; echo ready")
	if line, err := out.ReadString('\n'); line != "ready\n" {
		t.Fatalf("shell: %q, %v", line, err)
	}

	sweep(t, fake)

	if info, _ := fake.Sandbox(id); info.State != "started" {
		t.Fatalf("reattached sandbox is %s after another berth's sweep, want started", info.State)
	}
	fmt.Fprintln(sh.Stdin(), `echo "state=$BERTH_STATE"`)
	if line, err := out.ReadString('\n'); line != "state=kept\n" {
		t.Fatalf("shell after the sweep: %q, %v; want its exported variable", line, err)
	}
	fmt.Fprintln(sh.Stdin(), "exit 0")
	if code, err := sh.Wait(); code != 0 || err != nil {
		t.Fatalf("shell exit: %d, %v", code, err)
	}
	if b.Recreated() {
		t.Error("the sandbox had to be recreated after the sweep")
	}
}

// testKilledReattacherStopped: when the berth that reattached a persistent
// sandbox is killed (SIGKILL) without closing it, the next sweep stops the
// sandbox, keeping it, as it does for a crashed creator. While the
// reattacher lived, a sweep left the sandbox running.
func testKilledReattacherStopped(t *testing.T, fake *daytonafake.Server) {
	ctx := ctxT(t)
	opts, id, labels := stoppedOfDeadCreator(t, fake)
	reattacher, kill := liveProcess(t)
	withOwner(reattacher, func() {
		b, err := New(ctx, opts) // never closed: the crash
		if err != nil {
			t.Fatal(err)
		}
		if b.SandboxID() != id {
			t.Fatalf("reattach got sandbox %s, want %s", b.SandboxID(), id)
		}
	})
	checkRetagged(t, fake, id, labels, reattacher)
	sweep(t, fake)
	if info, _ := fake.Sandbox(id); info.State != "started" {
		t.Fatalf("sandbox of a live reattacher is %s after a sweep, want started", info.State)
	}

	kill()
	sweep(t, fake)
	if err := fake.WaitState(ctx, id, "stopped"); err != nil {
		t.Fatalf("sandbox of a killed reattacher: %v", err)
	}
	if _, ok := fake.Sandbox(id); !ok {
		t.Fatal("the persistent sandbox of a killed reattacher was deleted, want it stopped")
	}
}

// testClaimRefusedCarriesOn: when the API refuses to relabel a reattached
// sandbox (here an API without the labels endpoint, answering 404), berth
// warns and uses the sandbox all the same.
func testClaimRefusedCarriesOn(t *testing.T, fake *daytonafake.Server) {
	opts, id, labels := stoppedOfDeadCreator(t, fake)
	target, err := url.Parse(fake.APIURL())
	if err != nil {
		t.Fatal(err)
	}
	forward := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
	var refused atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/labels") {
			refused.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"statusCode":404,"message":"Cannot PUT `+r.URL.Path+`","error":"Not Found"}`)
			return
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	vars := map[string]string{EnvAPIURL: proxy.URL + "/api", EnvAPIKey: fake.APIKey()}
	opts.Getenv = func(k string) string { return vars[k] }
	logs := &recordLogs{}
	opts.Logger = slog.New(logs)

	b := newBackend(t, opts)
	if b.SandboxID() != id {
		t.Fatalf("reattach got sandbox %s, want %s", b.SandboxID(), id)
	}
	must(t, termEnv(t, b), "echo used", "used")
	if info, _ := fake.Sandbox(id); info.State != "started" || !maps.Equal(info.Labels, labels) {
		t.Errorf("sandbox is %s with labels %v, want started with its labels unchanged", info.State, info.Labels)
	}
	warned := false
	for _, l := range logs.all() {
		warned = warned || strings.HasPrefix(l, "WARN") && strings.Contains(l, "reattached sandbox") && strings.Contains(l, "404")
	}
	if refused.Load() != 1 || !warned {
		t.Errorf("%d relabel calls refused, logs %q; want one, and a warning naming the 404", refused.Load(), logs.all())
	}
}
