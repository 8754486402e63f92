package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/testenv/k8senv"
	"github.com/a55dbaac/berth/session"
	"github.com/a55dbaac/berth/terminal"
)

// fixture is the test cluster, a namespace of the test's own, and the
// variables berth would read from its environment (KUBECONFIG only).
type fixture struct {
	cl *k8senv.Cluster
	ns string
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	cl := k8senv.Require(t)
	return &fixture{cl: cl, ns: cl.Namespace(t)}
}

// mustSet sets a configuration key in a test; a refused value is a bug in
// the test itself.
func mustSet(c *config.Terminal, name string, v any) {
	if err := c.Set(name, v); err != nil {
		panic(err)
	}
}

// testKey is a fresh environment key for the test.
func testKey(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 30 {
		name = name[len(name)-30:]
	}
	return "t-" + name + "-" + hex.EncodeToString(b[:])
}

// options builds backend options for a fresh key in the fixture's
// namespace: the test image, small memory and disk (several test pods
// share the node), no CPU limit (a CFS quota on a loaded 2-core machine
// stretches a shell start past the suite's interrupt and timeout bounds;
// PodSpec sets one), no persistence, and KUBECONFIG as the only variable.
func (f *fixture) options(t testing.TB, mutate func(*config.Terminal)) backend.Options {
	t.Helper()
	cfg := config.Default().Terminal
	cfg.Backend = Name
	mustSet(&cfg, keyImage, f.cl.Image(t))
	mustSet(&cfg, keyNamespace, f.ns)
	mustSet(&cfg, keyStartTimeout, 60)
	cfg.ContainerPersistent = false
	cfg.ContainerCPU = 0
	cfg.ContainerMemory = 256
	cfg.ContainerDisk = 1024
	if mutate != nil {
		mutate(&cfg)
	}
	kubeconfig := f.cl.Kubeconfig
	return backend.Options{Key: testKey(t), Config: cfg, Getenv: func(k string) string {
		if k == "KUBECONFIG" {
			return kubeconfig
		}
		return ""
	}}
}

// newBackend builds a backend and closes it at the end of the test.
func newBackend(t testing.TB, opts backend.Options) *Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	b, err := New(ctx, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := b.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// newEnv is the terminal layer over be, closed at the end of the test.
func newEnv(t testing.TB, be backend.Backend) *terminal.Environment {
	t.Helper()
	e := terminal.New(be, terminal.Options{
		DefaultTimeout: 60 * time.Second,
		MaxOutputChars: 50000,
		SpillDir:       t.TempDir(),
		Session:        session.Options{Grace: time.Second},
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		e.Close(ctx)
	})
	return e
}

// mustRun runs a command through the terminal layer and fails the test if
// it could not run at all.
func mustRun(t testing.TB, e *terminal.Environment, req terminal.Request) terminal.Result {
	t.Helper()
	r := e.Run(context.Background(), req)
	if r.Error != nil {
		t.Fatalf("command %q: error %s", req.Command, *r.Error)
	}
	return r
}

// run runs script with sh -c, stdin closed, and returns its merged output
// and exit status.
func run(t testing.TB, b backend.Backend, script string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, code, err := backend.Output(ctx, b, backend.ProcSpec{Argv: []string{"/bin/sh", "-c", script}}, nil, 0)
	if err != nil {
		t.Fatalf("run %q: %v", script, err)
	}
	return string(out), code
}

// pod reads the environment's pod as the administrator sees it.
func (f *fixture) pod(t testing.TB, name string) *corev1.Pod {
	t.Helper()
	p, err := f.cl.Client.CoreV1().Pods(f.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s: %v", name, err)
	}
	return p
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// deletePod removes b's pod from outside with del (a delete, an
// eviction) and waits until the kubelet has stopped it and it is gone, as
// `kubectl delete` does.
func (f *fixture) deletePod(t testing.TB, b *Backend, del func() error) {
	t.Helper()
	uid := b.PodUID()
	if err := del(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := waitPodGone(ctx, b.c, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: b.PodName(), UID: uid}}); err != nil {
		t.Fatal(err)
	}
}

// waitTimeout waits for p, failing the test after d.
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

// readAll reads p's output to its end, failing the test after d.
func readAll(t testing.TB, r io.Reader, d time.Duration) string {
	t.Helper()
	c := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(r); c <- b }()
	select {
	case b := <-c:
		return string(b)
	case <-time.After(d):
		t.Fatalf("output did not end within %v", d)
	}
	return ""
}

// factory returns the suite's factory of throwaway pods in the fixture's
// namespace (with prep applied, when not nil), each closed with the test or
// group that asked for it.
func (f *fixture) factory(prep func(*Backend)) func(testing.TB) backend.Backend {
	return func(t testing.TB) backend.Backend {
		t.Helper()
		b := newBackend(t, f.options(t, nil))
		if prep != nil {
			prep(b)
		}
		return b
	}
}
