package kubernetes

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/a55dbaac/berth/bench"
	"github.com/a55dbaac/berth/terminal"
)

// BenchmarkTrivialCommand is berth's way: `true` through the full terminal
// path, one stdin write to the shell's long-lived exec stream and the
// framed reply.
func BenchmarkTrivialCommand(b *testing.B) {
	f := newFixture(b)
	env := newEnv(b, newBackend(b, f.options(b, nil)))
	ctx := context.Background()
	for range 5 {
		mustRun(b, env, terminal.Request{Command: bench.TrivialCommand})
	}
	for b.Loop() {
		if r := env.Run(ctx, terminal.Request{Command: bench.TrivialCommand}); r.Error != nil || r.ExitCode != 0 {
			b.Fatal(r.ExitCode, r.Error)
		}
	}
}

// BenchmarkKubectlExec is how most agent harnesses on Kubernetes run a
// command: one `kubectl exec POD -- bash -c CMD` process per command (the
// kubectl built with the test cluster, v1.32.0, over WebSocket).
func BenchmarkKubectlExec(b *testing.B) {
	f := newFixture(b)
	be := newBackend(b, f.options(b, nil))
	f.cl.KubectlPath(b) // built (the first time) before the clock starts
	for b.Loop() {
		kubectlExec(b, f, be.PodName())
	}
}

// BenchmarkAPIExec is the same baseline without the kubectl process: one
// pods/exec per command through client-go (WebSocket v5, what kubectl
// exec does inside), `bash -c true`, output read to the end.
func BenchmarkAPIExec(b *testing.B) {
	f := newFixture(b)
	be := newBackend(b, f.options(b, nil))
	ctx := context.Background()
	for b.Loop() {
		if err := apiExec(ctx, be); err != nil {
			b.Fatal(err)
		}
	}
}

// apiExec runs bench.TrivialCommand in be's pod as one plain exec (no
// berth wrapper, no spare) and waits for its end.
func apiExec(ctx context.Context, be *Backend) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req := be.c.api.execRequest(be.c.namespace, be.PodName(), &corev1.PodExecOptions{Container: containerName,
		Command: []string{"bash", "-c", bench.TrivialCommand}, Stdout: true, Stderr: true})
	ex, err := remotecommand.NewWebSocketExecutor(be.c.cfg, "GET", req.URL().String())
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &out}); err != nil {
		return fmt.Errorf("exec: %w (%s)", err, out.String())
	}
	return nil
}

func kubectlExec(b testing.TB, f *fixture, pod string) {
	out, err := exec.Command(f.cl.KubectlPath(b), "--kubeconfig", f.cl.Kubeconfig, "exec", "-n", f.ns, pod, "--",
		"bash", "-c", bench.TrivialCommand).CombinedOutput()
	if err != nil {
		b.Fatalf("kubectl exec: %v %s", err, out)
	}
}

// BenchmarkCompare measures, in one run on the same pod: berth's
// per-command latency (bench.Latency, the full terminal path), one plain
// pods/exec per command through client-go (apiExec: what an in-process
// harness, or kubectl inside, does), and one `kubectl exec` process per
// command; it reports the p50s and the ratios.
func BenchmarkCompare(b *testing.B) {
	f := newFixture(b)
	be := newBackend(b, f.options(b, nil))
	env := newEnv(b, be)
	ctx := context.Background()
	const n = 30
	for b.Loop() {
		lat, err := bench.Latency(ctx, env, 5*n)
		if err != nil {
			b.Fatal(err)
		}
		api := make([]time.Duration, 0, n)
		for range n {
			start := time.Now()
			if err := apiExec(ctx, be); err != nil {
				b.Fatal(err)
			}
			api = append(api, time.Since(start))
		}
		sort.Slice(api, func(i, j int) bool { return api[i] < api[j] })
		ap50 := api[len(api)/2]
		kubectlExec(b, f, be.PodName())
		ks := make([]time.Duration, 0, n)
		for range n {
			start := time.Now()
			kubectlExec(b, f, be.PodName())
			ks = append(ks, time.Since(start))
		}
		sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
		kp50 := ks[len(ks)/2]
		b.ReportMetric(ms(lat.P50), "berth-p50-ms")
		b.ReportMetric(ms(lat.P90), "berth-p90-ms")
		b.ReportMetric(ms(ap50), "api-exec-p50-ms")
		b.ReportMetric(ms(kp50), "kubectl-exec-p50-ms")
		b.ReportMetric(float64(ap50)/float64(lat.P50), "x-vs-api-exec")
		b.ReportMetric(float64(kp50)/float64(lat.P50), "x-vs-kubectl-exec")
	}
}

// BenchmarkEnvironmentReady is the time from nothing to the first
// command's answer: New (create the pod, wait until it runs) plus the
// session's shell start and `true`, then Close (reported apart).
func BenchmarkEnvironmentReady(b *testing.B) {
	f := newFixture(b)
	ctx := context.Background()
	var ready, created, closed time.Duration
	for b.Loop() {
		start := time.Now()
		be, err := New(ctx, f.options(b, nil))
		if err != nil {
			b.Fatal(err)
		}
		created += time.Since(start)
		env := terminal.New(be, terminal.Options{DefaultTimeout: time.Minute, SpillDir: b.TempDir()})
		if r := env.Run(ctx, terminal.Request{Command: bench.TrivialCommand}); r.Error != nil {
			b.Fatal(*r.Error)
		}
		ready += time.Since(start)
		cstart := time.Now()
		if err := env.Close(ctx); err != nil {
			b.Fatal(err)
		}
		closed += time.Since(cstart)
	}
	b.ReportMetric(ms(created)/float64(b.N), "pod-running-ms")
	b.ReportMetric(ms(ready)/float64(b.N), "first-answer-ms")
	b.ReportMetric(ms(closed)/float64(b.N), "close-ms")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
