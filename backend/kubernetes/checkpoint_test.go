package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/procmark"
	"github.com/a55dbaac/berth/internal/testenv/k8senv"
)

// TestCheckpoint takes checkpoints of environments of the real cluster and
// makes new environments from them: the test cluster's storage (the tmpfs
// provisioner) is no CSI driver and serves no snapshots, so what runs here
// is the copy through exec streams; the snapshot and clone requests are
// TestCheckpointNative's, against a fake API server. It runs in parallel
// with TestConformance and TestCLI, in a namespace of its own.
func TestCheckpoint(t *testing.T) {
	k8senv.Require(t)
	t.Parallel()
	f := newFixture(t)
	// Those that look at the whole namespace first.
	t.Run("CrashLeftoversSwept", func(t *testing.T) { testCheckpointCrashSwept(t, f) })
	t.Run("EnvAdminLeavesCheckpoints", func(t *testing.T) { testCheckpointEnvAdmin(t, f) })
	for _, c := range []struct {
		name string
		fn   func(*testing.T, *fixture)
	}{
		{"ThrowawayCarriedAndIndependent", func(t *testing.T, f *fixture) { testForkCarried(t, f, false) }},
		{"PersistentCarriedAndIndependent", func(t *testing.T, f *fixture) { testForkCarried(t, f, true) }},
		{"RestoreTwice", testRestoreTwice},
		{"RestoreReplacesTheKey", testRestoreReplacesKey},
		{"RemoveLeavesNothing", testCheckpointRemove},
		{"Empty", testCheckpointEmpty},
		{"CopyWipesOnRestore", testCopyWipes},
		{"CopyWithoutSPDY", testCopyWithoutSPDY},
		{"CopyDestinationNeverReady", testCopyNeverReady},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, f)
		})
	}
}

// persistentOpts are options of a persistent environment with a small
// volume.
func (f *fixture) persistentOpts(t testing.TB) backend.Options {
	opts := f.options(t, func(c *config.Terminal) {
		c.ContainerPersistent = true
		mustSet(c, keyVolumeSize, "32Mi")
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		envAdmin{}.Remove(ctx, opts, opts.Key)
	})
	return opts
}

// checkpoint takes a checkpoint of b and removes it at the end of the test.
func (f *fixture) checkpoint(t testing.TB, b *Backend, name string) backend.Checkpoint {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cp, err := b.Checkpoint(ctx, name)
	if err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := (checkpointAdmin{}).Remove(ctx, f.options(t, nil), cp); err != nil {
			t.Errorf("removing checkpoint %s: %v", cp.ID, err)
		}
	})
	return cp
}

// from returns opts for a new environment made from cp.
func from(opts backend.Options, cp backend.Checkpoint) backend.Options {
	opts.From = &cp
	return opts
}

// treeScript writes a small tree with what a copy can get wrong: a mode,
// a symlink, a hard link, an empty directory, names with spaces, a
// newline and a leading dash, dot files, and a file of 1 MiB of binary.
const treeScript = `set -e
cd /workspace
mkdir -p proj/empty 'sp ace' && printf 'one\n' > proj/a.txt && chmod 751 proj/a.txt
ln -s a.txt proj/link && ln proj/a.txt proj/hard
printf 'nl\n' > "$(printf 'new\nline')" && printf 'dash\n' > ./-dash && printf 'dot\n' > .hidden && printf 's\n' > 'sp ace/f'
head -c 1048576 /dev/urandom > proj/blob
echo home > /root/home.txt && mkdir -p /root/.config && echo cfg > /root/.config/c
`

// treeSum describes the tree treeScript wrote, as the test compares it.
const treeSum = `cd /workspace
stat -c '%n %a %h %F' proj/a.txt proj/link proj/hard proj/empty 'sp ace/f' .hidden ./-dash
readlink proj/link; cat proj/a.txt "$(printf 'new\nline')" ./-dash .hidden 'sp ace/f' /root/home.txt /root/.config/c
md5sum proj/blob | cut -d' ' -f1
`

// A checkpoint of an environment carries /root and /workspace into a new
// one (modes, links, odd names, binary content), and after the fork the
// two are independent both ways.
func testForkCarried(t *testing.T, f *fixture, persistent bool) {
	opts := f.options(t, nil)
	if persistent {
		opts = f.persistentOpts(t)
	}
	src := newBackend(t, opts)
	if out, code := run(t, src, treeScript); code != 0 {
		t.Fatalf("writing the tree: %d %s", code, out)
	}
	want, _ := run(t, src, treeSum)
	cp := f.checkpoint(t, src, "")
	if cp.Backend != Name || cp.Key != opts.Key || cp.ID == "" || cp.Size < 1<<20 || cp.Meta[metaMethod] != methodCopy {
		t.Errorf("checkpoint %+v: want this backend's and key's, a copy of at least 1 MiB", cp)
	}
	if c := src.Capabilities().Checkpoint; c == "" {
		t.Error("Capabilities().Checkpoint is empty")
	}
	fopts := f.options(t, nil)
	if persistent {
		fopts = f.persistentOpts(t)
	}
	fork := newBackend(t, from(fopts, cp))
	if got, _ := run(t, fork, treeSum); got != want {
		t.Errorf("fork's tree:\n%s\nwant:\n%s", got, want)
	}
	// Independent both ways.
	run(t, src, "echo src-after > /workspace/proj/a.txt; touch /root/src-only")
	run(t, fork, "echo fork-after > /workspace/proj/b.txt; rm /root/home.txt")
	if out, _ := run(t, fork, "cat /workspace/proj/a.txt; ls /root/src-only 2>&1"); !strings.HasPrefix(out, "one\n") || !strings.Contains(out, "No such file") {
		t.Errorf("the source's later writes reached the fork: %q", out)
	}
	if out, _ := run(t, src, "ls /workspace/proj/b.txt 2>&1; cat /root/home.txt"); !strings.Contains(out, "No such file") || !strings.HasSuffix(out, "home\n") {
		t.Errorf("the fork's writes reached the source: %q", out)
	}
}

// One checkpoint restores any number of times; each restored environment
// is its own.
func testRestoreTwice(t *testing.T, f *fixture) {
	src := newBackend(t, f.options(t, nil))
	run(t, src, "echo v1 > /workspace/f")
	cp := f.checkpoint(t, src, "twice")
	if err := src.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	first := newBackend(t, from(f.options(t, nil), cp))
	run(t, first, "echo changed > /workspace/f; echo new > /workspace/g")
	second := newBackend(t, from(f.persistentOpts(t), cp))
	if out, _ := run(t, second, "cat /workspace/f; ls /workspace"); out != "v1\nf\n" {
		t.Errorf("second restore: %q, want the checkpoint's f alone", out)
	}
	if out, _ := run(t, first, "cat /workspace/f"); out != "changed\n" {
		t.Errorf("first restore after the second: %q", out)
	}
}

// A restore into the key a checkpoint was taken of replaces its files
// (its claim, when persistent) with the checkpoint's.
func testRestoreReplacesKey(t *testing.T, f *fixture) {
	opts := f.persistentOpts(t)
	b, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	run(t, b, "echo v1 > /workspace/f")
	cp := f.checkpoint(t, b, "v1")
	run(t, b, "echo v2 > /workspace/f; echo later > /root/g")
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	restored := newBackend(t, from(opts, cp))
	if out, _ := run(t, restored, "cat /workspace/f; ls /root/g 2>&1"); !strings.HasPrefix(out, "v1\n") || !strings.Contains(out, "No such file") {
		t.Errorf("after the restore: %q, want f as in the checkpoint and no g", out)
	}
}

// Remove deletes the checkpoint's claim (and it does not come back); a
// second Remove is not an error; a restore from a removed checkpoint
// fails at once, saying so, and leaves the key as it was.
func testCheckpointRemove(t *testing.T, f *fixture) {
	src := newBackend(t, f.options(t, nil))
	ctx := context.Background()
	cp, err := src.Checkpoint(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	admin := checkpointAdmin{}
	opts := f.options(t, nil)
	if _, err := f.cl.Client.CoreV1().PersistentVolumeClaims(f.ns).Get(ctx, cp.ID, metav1.GetOptions{}); err != nil {
		t.Fatalf("the checkpoint's claim: %v", err)
	}
	if err := admin.Remove(ctx, opts, cp); err != nil {
		t.Fatal(err)
	}
	// Deleted at once; gone once nothing uses it (the pvc-protection
	// finalizer), within seconds.
	sel := metav1.ListOptions{LabelSelector: LabelCheckpoint + "=" + cp.ID}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		claims, err := f.cl.Client.CoreV1().PersistentVolumeClaims(f.ns).List(ctx, sel)
		pods, perr := f.cl.Client.CoreV1().Pods(f.ns).List(ctx, sel)
		if err == nil && perr == nil && len(claims.Items) == 0 && len(pods.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after Remove: claims %v (%v), helper pods %v (%v)", claims, err, pods, perr)
		}
		for _, c := range claimItems(claims, err) {
			if c.DeletionTimestamp == nil {
				t.Fatalf("claim %s of the removed checkpoint is not being deleted", c.Name)
			}
		}
	}
	if err := admin.Remove(ctx, opts, cp); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	ropts := from(f.options(t, nil), cp)
	start := time.Now()
	if _, err := New(ctx, ropts); err == nil || !strings.Contains(err.Error(), "is gone") {
		t.Errorf("restore of a removed checkpoint: %v", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the refusal took %v", d)
	}
	if l, _ := f.cl.Client.CoreV1().Pods(f.ns).List(ctx, metav1.ListOptions{LabelSelector: selector(ropts.Key)}); len(l.Items) != 0 {
		t.Errorf("a failed restore left pods: %v", l.Items)
	}
}

// An environment with nothing in /workspace and an empty /root
// checkpoints and restores (nothing to archive is no error).
func testCheckpointEmpty(t *testing.T, f *fixture) {
	src := newBackend(t, f.persistentOpts(t))
	cp := f.checkpoint(t, src, "empty")
	fork := newBackend(t, from(f.options(t, nil), cp))
	if out, code := run(t, fork, "ls -A /workspace /root"); code != 0 || out != "/root:\n\n/workspace:\n" {
		t.Errorf("fork of an empty environment: %d %q", code, out)
	}
}

// What a berth that died in the middle of a checkpoint left — the claim
// it was copying into, still "copying", and the helper pod — is removed by
// the crash sweep; a complete checkpoint of a dead berth stays (berth's
// records name it), and so does one a live berth is taking.
func testCheckpointCrashSwept(t *testing.T, f *fixture) {
	ctx := context.Background()
	src := newBackend(t, f.options(t, nil))
	complete := f.checkpoint(t, src, "kept")

	dead := staleMark(t)
	saved := currentOwner
	currentOwner = func() string { return dead }
	// The first steps of copyCheckpoint, as a berth that then died left
	// them: the claim and the helper pod that mounts it.
	object := checkpointObjectName(src.set.Key)
	claim := src.checkpointClaimObject(object, "crashed", "", src.set.VolumeSize, nil)
	_, err := src.c.api.claims(f.ns).Create(ctx, claim, metav1.CreateOptions{})
	helper := src.helperObject(object+"-w", object, "crashed",
		corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: object}}, false)
	if err == nil {
		err = src.startHelper(ctx, helper)
	}
	currentOwner = saved
	if err != nil {
		t.Fatal(err)
	}
	// A live berth's checkpoint in progress.
	liveObject := checkpointObjectName(src.set.Key)
	if _, err := src.c.api.claims(f.ns).Create(ctx, src.checkpointClaimObject(liveObject, "in progress", "", src.set.VolumeSize, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteCheckpointObject(context.Background(), src.c, methodCopy, liveObject) })

	if _, err := sweep(ctx, src.c, time.Hour, false); err != nil {
		t.Fatal(err)
	}
	if err := waitPodGone(ctx, src.c, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: helper.Name, UID: f.pod(t, helper.Name).UID}}); err != nil {
		t.Error(err)
	}
	pvcs := f.cl.Client.CoreV1().PersistentVolumeClaims(f.ns)
	if c, err := pvcs.Get(ctx, object, metav1.GetOptions{}); err == nil && c.DeletionTimestamp == nil {
		t.Errorf("the crashed checkpoint's claim %s was not swept", object)
	}
	for _, keep := range []string{complete.ID, liveObject} {
		if c, err := pvcs.Get(ctx, keep, metav1.GetOptions{}); err != nil || c.DeletionTimestamp != nil {
			t.Errorf("claim %s swept (%v), want it kept", keep, err)
		}
	}
	if procmark.Gone(procmark.Self()) {
		t.Fatal("this process's own mark reads as gone")
	}
}

// berth env ls lists no checkpoint (nor its helper) as an environment, and
// berth env rm and prune of the key leave its checkpoints: they outlive
// the environment, as berth's records say.
func testCheckpointEnvAdmin(t *testing.T, f *fixture) {
	ctx := context.Background()
	opts := f.persistentOpts(t)
	src := newBackend(t, opts)
	cp := f.checkpoint(t, src, "outlives")
	list, err := envAdmin{}.List(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list {
		if strings.Contains(e.ID, "berth-ck-") {
			t.Errorf("env ls lists a checkpoint's object: %+v", e)
		}
	}
	if err := src.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := (envAdmin{}).Remove(ctx, opts, opts.Key); err != nil {
		t.Fatal(err)
	}
	if _, err := envAdmin.Prune(envAdmin{}, ctx, opts, 0); err != nil {
		t.Fatal(err)
	}
	if c, err := f.cl.Client.CoreV1().PersistentVolumeClaims(f.ns).Get(ctx, cp.ID, metav1.GetOptions{}); err != nil || c.DeletionTimestamp != nil {
		t.Fatalf("the checkpoint after env rm and prune: %v", err)
	}
	if _, err := f.cl.Client.CoreV1().PersistentVolumeClaims(f.ns).Get(ctx, claimName(PodName(opts.Key)), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the environment's own claim after env rm: %v", err)
	}
	restored := newBackend(t, from(f.options(t, nil), cp))
	if out, code := run(t, restored, "true"); code != 0 {
		t.Errorf("restore after env rm: %d %s", code, out)
	}
}

// factoryFrom is the Fork group's factory (backendtest.Target.NewFrom):
// throwaway pods of the fixture, with what the group's manager gives (the
// key, the checkpoint to start from, berth's home).
func (f *fixture) factoryFrom() func(testing.TB, backend.Options) backend.Backend {
	return func(t testing.TB, o backend.Options) backend.Backend {
		t.Helper()
		opts := f.options(t, nil)
		opts.Key, opts.From, opts.Home, opts.Progress = o.Key, o.From, o.Home, o.Progress
		return newBackend(t, opts)
	}
}

// fixtureCheckpoints removes checkpoints as Registration.Checkpoints does,
// with the fixture's cluster and namespace (opts).
type fixtureCheckpoints struct{ opts backend.Options }

func (c fixtureCheckpoints) Remove(ctx context.Context, _ backend.Options, cp backend.Checkpoint) error {
	return checkpointAdmin{}.Remove(ctx, c.opts, cp)
}

// claimItems is the claims of a list that was read (none when err).
func claimItems(l *corev1.PersistentVolumeClaimList, err error) []corev1.PersistentVolumeClaim {
	if err != nil || l == nil {
		return nil
	}
	return l.Items
}

// A restore empties the new pod's /root and /workspace before it extracts
// the checkpoint's (an image's files in /root that the source had
// deleted must not come back); a checkpoint's copy into its fresh claim
// does not need to.
func testCopyWipes(t *testing.T, f *fixture) {
	from, into := newBackend(t, f.options(t, nil)), newBackend(t, f.options(t, nil))
	run(t, from, "echo a > /workspace/a; echo ra > /root/ra")
	for _, wipe := range []bool{false, true} {
		run(t, into, "echo b > /workspace/b; echo rb > /root/.rb")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		_, err := into.copyTree(ctx, endpoint{pod: from.PodName(), base: "/"}, endpoint{pod: into.PodName(), base: "/"}, wipe)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		want := "/root:\n.rb\nra\n\n/workspace:\na\nb\n"
		if wipe {
			want = "/root:\nra\n\n/workspace:\na\n"
		}
		if out, _ := run(t, into, "ls -A /root /workspace"); out != want {
			t.Errorf("after a copy with wipe %v: %q, want %q", wipe, out, want)
		}
	}
}

// The copy reads the source's archive while the destination's pod starts
// (the read-ahead at most); a destination that never becomes ready fails
// the copy with its own error (not as an extraction's), and ends the
// source's exec, which had more than the read-ahead to give.
func testCopyNeverReady(t *testing.T, f *fixture) {
	opts := f.options(t, func(c *config.Terminal) { c.ContainerMemory = 256 + readAhead>>20 })
	from := newBackend(t, opts)
	if out, code := run(t, from, fmt.Sprintf("head -c %d /dev/urandom > /workspace/big", readAhead+(8<<20))); code != 0 {
		t.Fatal(out)
	}
	never := errors.New("the helper did not start")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, err := from.copyTree(ctx, endpoint{pod: from.PodName(), base: "/"}, endpoint{pod: "no-such-pod", base: "/",
		ready: func(ctx context.Context) error {
			// The source's tar runs, and has a while to fill the
			// read-ahead.
			for d := 10 * time.Millisecond; ; time.Sleep(d) {
				if out, _ := run(t, from, "pidof tar >/dev/null && echo running"); out == "running\n" {
					break
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
			time.Sleep(3 * time.Second)
			return never
		}}, false)
	if !errors.Is(err, never) || strings.Contains(err.Error(), "extract") {
		t.Fatalf("copyTree: %d bytes, %v; want the destination's error as it is", n, err)
	}
	if ctx.Err() != nil {
		t.Fatal("copyTree returned only at its deadline")
	}
	if n == 0 || n > readAhead+(1<<20) {
		t.Errorf("%d bytes read while the destination was not ready; want some, the read-ahead (%d) at most", n, readAhead)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if out, _ := run(t, from, "pidof tar || echo none"); out == "none\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the source's tar still runs 30 s after the copy failed")
		}
	}
}

// Where SPDY cannot be had (a proxy in front of the API server that
// refuses its upgrade, as some do), a copy that tried SPDY first goes over
// WebSocket: a checkpoint and a restore through such a proxy carry the
// files.
func testCopyWithoutSPDY(t *testing.T, f *fixture) {
	admin := rest.CopyConfig(f.cl.Config)
	admin.NextProtos = []string{"http/1.1"} // an upgrade cannot go through HTTP/2
	tr, err := rest.TransportFor(admin)
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(admin.Host)
	if err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int32
	proxy := &httputil.ReverseProxy{Transport: tr, Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Host = target.Host
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(strings.ToLower(r.Header.Get("Upgrade")), "spdy/") {
			refused.Add(1)
			http.Error(w, "this proxy does not pass SPDY", http.StatusBadRequest)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: p, cluster: {server: %q}}]\n"+
		"users: [{name: u, user: {}}]\ncontexts: [{name: c, context: {cluster: p, user: u}}]\ncurrent-context: c\n", srv.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	viaProxy := func(opts backend.Options) backend.Options {
		opts.Getenv = func(k string) string {
			if k == "KUBECONFIG" {
				return kc
			}
			return ""
		}
		return opts
	}
	src := newBackend(t, viaProxy(f.options(t, nil)))
	run(t, src, "echo through > /workspace/f")
	cp, err := src.Checkpoint(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { checkpointAdmin{}.Remove(context.Background(), f.options(t, nil), cp) })
	fork := newBackend(t, viaProxy(from(f.options(t, nil), cp)))
	if out, _ := run(t, fork, "cat /workspace/f"); out != "through\n" {
		t.Errorf("fork through the proxy: %q", out)
	}
	if refused.Load() == 0 {
		t.Error("no SPDY upgrade reached the proxy: the copies did not try SPDY first")
	}
}

// staleMark is the mark of a berth that died and whose pid now belongs to
// this process, started later: dead to procmark.Gone. (deadOwner, which
// marks a child that exited, once read no mark at all while this test ran
// in parallel with the others; this one reads only this process.)
func staleMark(t *testing.T) string {
	parts := strings.Split(procmark.Self(), "/")
	if len(parts) != 4 {
		t.Fatalf("this process's mark %q", procmark.Self())
	}
	parts[2] = "1" // clock ticks after boot: long before this process began
	m := strings.Join(parts, "/")
	if !procmark.Gone(m) {
		t.Fatalf("mark %q not gone", m)
	}
	return m
}
