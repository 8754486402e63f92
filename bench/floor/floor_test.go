package floor_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/docker"
	"github.com/a55dbaac/berth/backend/kubernetes"
	"github.com/a55dbaac/berth/bench"
	"github.com/a55dbaac/berth/bench/floor"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
	"github.com/a55dbaac/berth/internal/testenv/k8senv"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func set(t *testing.T, c *config.Terminal, key string, v any) {
	t.Helper()
	if err := c.Set(key, v); err != nil {
		t.Fatal(err)
	}
}

// names are the names of phases, in order.
func names(ph floor.Phases) []string {
	var n []string
	for _, p := range ph {
		n = append(n, p.Name)
	}
	return n
}

// checkPhases fails unless ph has the steps want, in order, at times that
// never go back.
func checkPhases(t *testing.T, what string, ph floor.Phases, want ...string) {
	t.Helper()
	if !slices.Equal(names(ph), want) {
		t.Fatalf("%s: steps %v, want %v", what, names(ph), want)
	}
	for i := 1; i < len(ph); i++ {
		if ph[i].At < ph[i-1].At {
			t.Fatalf("%s: step %s ends before the step before it: %v", what, ph[i].Name, ph)
		}
	}
}

func TestForUnknownBackend(t *testing.T) {
	_, err := floor.For(context.Background(), fakeBackend{}, backend.Options{})
	if !errors.Is(err, floor.ErrNone) {
		t.Fatalf("For(fake) = %v, want ErrNone", err)
	}
}

type fakeBackend struct{ backend.Backend }

func (fakeBackend) Name() string { return "fake" }

// TestDockerFloors runs the docker floors against the real daemon, beside a
// berth container: the exec shell answers, the bare run and the least
// persistent-shell start report their steps and leave no container.
func TestDockerFloors(t *testing.T) {
	cli := dockerenv.Require(t)
	img := dockerenv.Image(t)
	ctx := ctxT(t)
	cfg := config.Default().Terminal
	cfg.Backend = docker.Name
	cfg.ContainerPersistent = false
	cfg.ContainerDisk = 0
	set(t, &cfg, "docker_image", img)
	opts := backend.Options{Key: "floor-" + t.Name(), Config: cfg}
	be, err := docker.New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close(context.Background())
	fl, err := floor.For(ctx, be, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()

	sh, err := fl.Shell(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := bench.RoundTrips(sh, 10)
	sh.Close()
	if err != nil || s.N != 10 {
		t.Fatalf("RoundTrips: %+v %v", s, err)
	}
	ph, err := fl.BareStart(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkPhases(t, fl.Bare, ph, "create", "attach, wait", "start", "exited", "removed")
	ph, err = fl.ReadyStart(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkPhases(t, fl.Ready, ph, "create", "start", "exec open", "first answer")
	left, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", floor.Label+"=1")})
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Items) > 0 {
		t.Fatalf("the floors left %d containers behind: %v", len(left.Items), left.Items[0].Names)
	}

	// The daemon's record of berth's own start of a new container.
	key := "floor-trace-" + t.Name()
	start := time.Now()
	stop, err := fl.Trace(ctx, key, start)
	if err != nil {
		t.Fatal(err)
	}
	o2 := opts
	o2.Key = key
	be2, err := docker.New(ctx, o2)
	if err != nil {
		t.Fatal(err)
	}
	defer be2.Close(context.Background())
	sh2, err := bench.StartShell(ctx, be2)
	if err != nil {
		t.Fatal(err)
	}
	sh2.Close()
	got := names(stop())
	for _, want := range []string{"create", "start", "exec_create", "exec_start"} {
		if !slices.Contains(got, want) {
			t.Fatalf("trace of berth's start: %v, without %s", got, want)
		}
	}
}

// TestKubernetesFloors runs the kubernetes floors against the test
// cluster, beside a berth pod.
func TestKubernetesFloors(t *testing.T) {
	cl := k8senv.Require(t)
	ns, img := cl.Namespace(t), cl.Image(t)
	ctx := ctxT(t)
	cfg := config.Default().Terminal
	cfg.Backend = kubernetes.Name
	cfg.ContainerPersistent = false
	cfg.ContainerCPU, cfg.ContainerMemory, cfg.ContainerDisk = 0, 256, 1024
	set(t, &cfg, "kubernetes_kubeconfig", cl.Kubeconfig)
	set(t, &cfg, "kubernetes_namespace", ns)
	set(t, &cfg, "kubernetes_image", img)
	opts := backend.Options{Key: "floor", Config: cfg}
	be, err := kubernetes.New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close(context.Background())
	fl, err := floor.For(ctx, be, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()

	sh, err := fl.Shell(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := bench.RoundTrips(sh, 10)
	sh.Close()
	if err != nil || s.N != 10 {
		t.Fatalf("RoundTrips: %+v %v", s, err)
	}
	ph, err := fl.BareStart(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkPhases(t, fl.Bare, ph, "create", "running", "exec true")
	ph, err = fl.ReadyStart(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkPhases(t, fl.Ready, ph, "create", "running", "exec stream, first answer")
	pods, err := cl.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: floor.Label + "=1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded {
			t.Fatalf("the floors left pod %s behind, not being deleted", p.Name)
		}
	}
}
