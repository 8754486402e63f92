package kubernetes

import (
	"context"
	"errors"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/files"
	"github.com/a55dbaac/berth/internal/procmark"
	"github.com/a55dbaac/berth/session"
	"github.com/a55dbaac/berth/terminal"
)

// The pod berth creates carries the docker backend's hardening, the
// resources asked for as equal requests and limits, no API token, berth's
// labels and the owner mark.
func testPodSpec(t *testing.T, f *fixture) {
	b := newBackend(t, f.options(t, func(c *config.Terminal) { c.ContainerCPU = 0.25 }))
	p := f.pod(t, b.PodName())
	spec := p.Spec
	if spec.ShareProcessNamespace == nil || !*spec.ShareProcessNamespace || spec.RestartPolicy != corev1.RestartPolicyNever ||
		spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken || spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
		t.Errorf("pod spec: shareProcessNamespace %v restartPolicy %s automountToken %v serviceLinks %v",
			spec.ShareProcessNamespace, spec.RestartPolicy, spec.AutomountServiceAccountToken, spec.EnableServiceLinks)
	}
	if sc := spec.SecurityContext; sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v: want seccomp RuntimeDefault", sc)
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Privileged == nil || *sc.Privileged ||
		sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 5 {
		t.Errorf("container security context %+v", sc)
	}
	want := map[corev1.ResourceName]string{corev1.ResourceCPU: "250m", corev1.ResourceMemory: "256Mi", corev1.ResourceEphemeralStorage: "1Gi"}
	for r, q := range want {
		wq := resource.MustParse(q)
		if got := c.Resources.Limits[r]; got.Cmp(wq) != 0 {
			t.Errorf("limit %s = %s, want %s", r, got.String(), q)
		}
		if got := c.Resources.Requests[r]; got.Cmp(wq) != 0 {
			t.Errorf("request %s = %s, want %s", r, got.String(), q)
		}
	}
	if p.Status.QOSClass != corev1.PodQOSGuaranteed {
		t.Errorf("QoS class %s, want Guaranteed", p.Status.QOSClass)
	}
	if strings.Join(c.Command, " ") != "sleep infinity" || c.ImagePullPolicy == corev1.PullAlways {
		t.Errorf("command %q pull policy %s", c.Command, c.ImagePullPolicy)
	}
	if p.Labels[LabelManaged] != "berth" || p.Labels[LabelEnv] != envHash(b.set.Key) || p.Annotations[AnnKey] != b.set.Key ||
		p.Annotations[AnnOwner] != procmark.Self() || p.Annotations[AnnConfig] != b.set.hash {
		t.Errorf("labels %v annotations %v", p.Labels, p.Annotations)
	}
}

// Inside the pod: docker's five capabilities and nothing else, no new
// privileges, seccomp filtering, no service account token, the pause
// process as PID 1, a memory /dev/shm (1 GiB, capped by the kubelet at the
// memory limit: 256 MiB here); CAP_CHOWN works, CAP_MKNOD is gone.
func testHardeningFromInside(t *testing.T, f *fixture) {
	b := newBackend(t, f.options(t, nil))
	out, _ := run(t, b, `grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; cat /proc/1/cmdline | tr '\0' ' '; echo; ls /var/run/secrets/kubernetes.io 2>&1; mount | grep ' /dev/shm '`)
	// CHOWN(0) DAC_OVERRIDE(1) FOWNER(3) SETGID(6) SETUID(7)
	const mask = "00000000000000cb"
	for _, want := range []string{"CapEff:\t" + mask, "CapBnd:\t" + mask, "NoNewPrivs:\t1", "Seccomp:\t2", "/pause", "No such file", "size=262144k"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if _, code := run(t, b, "chown nobody /root && chown root /root"); code != 0 {
		t.Errorf("chown with CAP_CHOWN failed")
	}
	if out, code := run(t, b, "mknod /tmp/x c 1 3"); code == 0 {
		t.Errorf("mknod (CAP_MKNOD dropped) succeeded: %s", out)
	}
}

// The kubelet's pod PID limit (512 on the test cluster) stops a fork loop.
// Its children live long enough that a slow loop (a loaded machine) still
// meets the limit; on its way out it kills them with a builtin (no fork
// left), so the pod can start the next exec.
func testPidLimitStopsForkLoop(t *testing.T, f *fixture) {
	b := newBackend(t, f.options(t, nil))
	out, code := run(t, b, `trap 'kill -9 0' EXIT; i=0; while [ $i -lt 700 ]; do sleep 600 & i=$((i+1)); echo $i > /tmp/n; done; echo all-started`)
	if code == 0 || strings.Contains(out, "all-started") {
		t.Fatalf("700 processes started despite the pod PID limit (exit %d): %s", code, out)
	}
	n, _ := run(t, b, "cat /tmp/n")
	if v, err := strconv.Atoi(strings.TrimSpace(n)); err != nil || v >= 512 {
		t.Errorf("started %q background processes, want < 512", n)
	}
}

// A command past container_memory is OOM-killed (137); the pod lives on.
func testMemoryLimitOOMKill(t *testing.T, f *fixture) {
	b := newBackend(t, f.options(t, func(c *config.Terminal) { c.ContainerMemory = 64 }))
	out, code := run(t, b, `exec bash -c 'x=$(head -c 300000000 /dev/zero | tr "\0" a); echo survived ${#x}'`)
	if code != 137 {
		t.Errorf("memory hog: exit %d, want 137 (OOM-killed); output %q", code, out)
	}
	if out, code := run(t, b, "echo alive"); code != 0 || out != "alive\n" {
		t.Errorf("pod unusable after the OOM kill: %d %q", code, out)
	}
}

// Exec streams use WebSocket (v5.channel.k8s.io) unless forced onto SPDY.
func testTransports(t *testing.T, f *fixture) {
	b := newBackend(t, f.options(t, nil))
	for _, proto := range []string{protoWebSocket, protoSPDY} {
		b.setProtocol(proto)
		if proto == protoWebSocket {
			b.setProtocol("")
		}
		p, err := b.Start(context.Background(), backend.ProcSpec{Argv: []string{"cat"}})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.(*process).Protocol(); got != proto {
			t.Errorf("transport %q, want %q", got, proto)
		}
		p.Stdin().Write([]byte("ping\n"))
		p.Stdin().Close()
		if out := readAll(t, p.Stdout(), 30*time.Second); out != "ping\n" {
			t.Errorf("%s: cat echoed %q", proto, out)
		}
		if code, err := waitTimeout(t, p, 30*time.Second); code != 0 || err != nil {
			t.Errorf("%s: cat: %d %v", proto, code, err)
		}
		p.Close()
	}
	b.setProtocol("")
}

// A command that fails runs once, on a terminal too, where the exit status
// comes from the stream itself: SPDY is tried only when the WebSocket
// upgrade failed (the FallbackExecutor trap: a predicate that falls back
// on any error runs the command a second time).
func testFailingCommandRunsOnce(t *testing.T, f *fixture) {
	b := newBackend(t, f.options(t, nil))
	for _, tty := range []bool{false, true} {
		run(t, b, "rm -f /tmp/count")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		p, err := b.Start(ctx, backend.ProcSpec{Argv: []string{"/bin/sh", "-c", "echo x >> /tmp/count; exit 7"}, TTY: tty})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		p.Stdin().Close()
		readAll(t, p.Stdout(), 30*time.Second)
		code, err := waitTimeout(t, p, 30*time.Second)
		p.Close()
		if code != 7 || err != nil {
			t.Errorf("tty %v: exit %d %v, want 7", tty, code, err)
		}
		if out, _ := run(t, b, "wc -l < /tmp/count"); strings.TrimSpace(out) != "1" {
			t.Errorf("tty %v: the command ran %s times, want once", tty, strings.TrimSpace(out))
		}
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{errors.New("command terminated with exit code 7"), false},
		{&apierrors.StatusError{ErrStatus: metav1.Status{Code: 404}}, false},
	} {
		if got := shouldFallback(c.err); got != c.want {
			t.Errorf("shouldFallback(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// A pod deleted from outside is replaced on the next command, which says
// environment_recreated; the session's cwd and variables are restored, the
// throwaway files are gone.
func testRecreateAfterPodDeleted(t *testing.T, f *fixture) {
	b := newBackend(t, f.options(t, nil))
	e := newEnv(t, b)
	mustRun(t, e, terminal.Request{Command: "cd /tmp && export A=kept && echo gone > /root/f"})
	old := b.PodUID()
	f.deletePod(t, b, func() error {
		return f.cl.Client.CoreV1().Pods(f.ns).Delete(context.Background(), b.PodName(), metav1.DeleteOptions{})
	})
	r := mustRun(t, e, terminal.Request{Command: "echo $A; pwd; cat /root/f 2>/dev/null || echo no-file"})
	if !r.EnvironmentRecreated {
		t.Errorf("result does not say environment_recreated: %+v", r)
	}
	if r.Output != "kept\n/tmp\nno-file" {
		t.Errorf("after the pod was replaced: %q, want the variable and cwd restored and the file gone", r.Output)
	}
	if b.PodUID() == old {
		t.Errorf("pod UID unchanged")
	}
	if r := mustRun(t, e, terminal.Request{Command: "true"}); r.EnvironmentRecreated {
		t.Errorf("environment_recreated reported twice")
	}
}

// An eviction (the Eviction API, as a node drain does) is the same.
func testRecreateAfterEviction(t *testing.T, f *fixture) {
	b := newBackend(t, f.options(t, nil))
	e := newEnv(t, b)
	mustRun(t, e, terminal.Request{Command: "cd /workspace"})
	f.deletePod(t, b, func() error {
		return f.cl.Client.CoreV1().Pods(f.ns).EvictV1(context.Background(), &policyv1.Eviction{
			ObjectMeta: metav1.ObjectMeta{Name: b.PodName(), Namespace: f.ns}})
	})
	r := mustRun(t, e, terminal.Request{Command: "pwd"})
	if !r.EnvironmentRecreated || r.Output != "/workspace" {
		t.Errorf("after eviction: recreated %v output %q", r.EnvironmentRecreated, r.Output)
	}
}

// With container_persistent the files under /root and /workspace survive
// the pod's deletion from outside.
func testPersistentRecreateKeepsFiles(t *testing.T, f *fixture) {
	b := newBackend(t, f.options(t, func(c *config.Terminal) {
		c.ContainerPersistent = true
		mustSet(c, keyVolumeSize, "32Mi")
	}))
	t.Cleanup(func() { envAdmin{}.Remove(context.Background(), f.options(t, nil), b.set.Key) })
	e := newEnv(t, b)
	mustRun(t, e, terminal.Request{Command: "echo kept > /root/f && echo ws > /workspace/g"})
	f.deletePod(t, b, func() error {
		return f.cl.Client.CoreV1().Pods(f.ns).Delete(context.Background(), b.PodName(), metav1.DeleteOptions{})
	})
	r := mustRun(t, e, terminal.Request{Command: "cat /root/f /workspace/g"})
	if !r.EnvironmentRecreated || r.Output != "kept\nws" {
		t.Errorf("after the pod was deleted: recreated %v output %q", r.EnvironmentRecreated, r.Output)
	}
}

// A pod that ended (its main process killed from inside: the pod fails,
// restartPolicy Never) is replaced too.
func testRecreateAfterPodFailed(t *testing.T, f *fixture) {
	b := newBackend(t, f.options(t, nil))
	e := newEnv(t, b)
	mustRun(t, e, terminal.Request{Command: "cd /tmp"})
	// From a process of its own (so the session's shell dies too): every
	// process of the pod but the pause is killed, `sleep infinity` with
	// them, and the pod fails. Its own exec dies with it: no status.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if p, err := b.Start(ctx, backend.ProcSpec{Argv: []string{"/bin/sh", "-c", "kill -9 -1"}}); err == nil {
		p.Stdin().Close()
		waitTimeout(t, p, 60*time.Second)
		p.Close()
	}
	for {
		if p := f.pod(t, b.PodName()); p.Status.Phase == corev1.PodFailed {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the pod did not fail after kill -9 -1: %v", f.pod(t, b.PodName()).Status)
		case <-time.After(100 * time.Millisecond):
		}
	}
	r := mustRun(t, e, terminal.Request{Command: "echo back; pwd"})
	if !r.EnvironmentRecreated || r.Output != "back\n/tmp" {
		t.Errorf("after the pod failed: recreated %v output %q", r.EnvironmentRecreated, r.Output)
	}
}

// An exec stream broken by an API server restart: the command that was
// running reports the shell lost (its outcome unknown — never a made-up
// exit status: a stream that ends without the wrapper's status is an
// error, kubernetes#137404), and the next command runs in a new shell
// with the cwd and exported variables restored, in the same pod (nothing
// was recreated).
func testAPIServerRestart(t *testing.T, f *fixture) {
	b := newBackend(t, f.options(t, nil))
	e := newEnv(t, b)
	mustRun(t, e, terminal.Request{Command: "cd /tmp && export A=1 && echo pod-file > /root/f"})
	uid := b.PodUID()
	inflight := make(chan terminal.Result, 1)
	go func() {
		inflight <- e.Run(context.Background(), terminal.Request{Command: "touch /tmp/running; sleep 120; echo finished", Timeout: 300})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		if _, code := run(t, b, "test -e /tmp/running"); code == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the command did not start within 60 s")
		case <-time.After(100 * time.Millisecond):
		}
	}
	f.cl.RestartAPIServer(t)
	var r terminal.Result
	select {
	case r = <-inflight:
	case <-time.After(90 * time.Second):
		t.Fatal("the command running across the API server restart did not end within 90 s")
	}
	if !errors.Is(r.Err, session.ErrShellLost) || strings.Contains(r.Output, "finished") {
		t.Errorf("the command running across the restart: exit %d output %q err %v, want the shell reported lost", r.ExitCode, r.Output, r.Err)
	}
	r = mustRun(t, e, terminal.Request{Command: "echo $A; pwd; cat /root/f"})
	if r.Output != "1\n/tmp\npod-file" || r.EnvironmentRecreated {
		t.Errorf("after the API server restarted: %q recreated %v, want the state restored in the same pod", r.Output, r.EnvironmentRecreated)
	}
	if b.PodUID() != uid {
		t.Errorf("the pod was replaced")
	}
}

// An image that cannot be pulled fails New at once with an error naming
// the image, and leaves no pod behind.
func testImagePullFailure(t *testing.T, f *fixture) {
	for _, c := range []struct {
		image, policy, reason string
	}{
		{"127.0.0.1:1/berth/missing:1", "", "ErrImagePull"},
		{"berth-test/never-imported:1", "Never", "ErrImageNeverPull"},
	} {
		opts := f.options(t, func(cfg *config.Terminal) {
			mustSet(cfg, keyImage, c.image)
			mustSet(cfg, keyPullPolicy, c.policy)
		})
		start := time.Now()
		_, err := New(context.Background(), opts)
		var ie *ImageError
		if !errors.As(err, &ie) || ie.Reason != c.reason || !strings.Contains(err.Error(), c.image) {
			t.Fatalf("New with image %s: %v, want an *ImageError (%s) naming the image", c.image, err, c.reason)
		}
		t.Logf("%s failed after %v: %v", c.image, time.Since(start).Round(time.Millisecond), err)
		if pods, _ := f.cl.Client.CoreV1().Pods(f.ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector(opts.Key)}); len(pods.Items) > 0 && pods.Items[0].DeletionTimestamp == nil {
			t.Errorf("pod left behind after the failure")
		}
	}
}

// A full volume claim: writes fail with ENOSPC, the shell and the session
// go on, write_file fails cleanly and keeps the old file, and freeing space
// makes writes work again.
func testFullVolume(t *testing.T, f *fixture) {
	b := newBackend(t, f.options(t, func(c *config.Terminal) {
		c.ContainerPersistent = true
		mustSet(c, keyVolumeSize, "8Mi")
	}))
	t.Cleanup(func() { envAdmin{}.Remove(context.Background(), f.options(t, nil), b.set.Key) })
	e := newEnv(t, b)
	mustRun(t, e, terminal.Request{Command: "cd /root && echo old > keep.txt && export A=1"})
	r := mustRun(t, e, terminal.Request{Command: "dd if=/dev/zero of=/root/big bs=1M count=64"})
	if r.ExitCode == 0 || !strings.Contains(r.Output, "No space left") {
		t.Fatalf("filling the 8Mi volume: exit %d %q, want ENOSPC", r.ExitCode, r.Output)
	}
	if _, err := files.Write(context.Background(), e, "/root/keep.txt", strings.Repeat("n", 1<<20)); err == nil {
		t.Errorf("write_file into the full volume succeeded")
	} else {
		t.Logf("write_file into the full volume: %v", err)
	}
	r = mustRun(t, e, terminal.Request{Command: "cat keep.txt; echo $A; pwd; rm big && echo fits > small && cat small"})
	if r.Output != "old\n1\n/root\nfits" {
		t.Errorf("after the volume was full: %q, want the old file, the session's state, and room again", r.Output)
	}
}

// docker_network: false creates a deny-all NetworkPolicy selecting the pod
// (enforced only by a capable network plugin); true creates none. Closing
// removes it.
func testNetworkPolicy(t *testing.T, f *fixture) {
	ctx := context.Background()
	b := newBackend(t, f.options(t, func(c *config.Terminal) { c.DockerNetwork = false }))
	np, err := f.cl.Client.NetworkingV1().NetworkPolicies(f.ns).Get(ctx, policyName(b.PodName()), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := f.pod(t, b.PodName())
	sel, _ := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if !sel.Matches(labels.Set(pod.Labels)) || len(np.Spec.Ingress)+len(np.Spec.Egress) != 0 || len(np.Spec.PolicyTypes) != 2 {
		t.Errorf("policy %+v does not deny everything to pod labels %v", np.Spec, pod.Labels)
	}
	open := newBackend(t, f.options(t, func(c *config.Terminal) { c.DockerNetwork = true }))
	if _, err := f.cl.Client.NetworkingV1().NetworkPolicies(f.ns).Get(ctx, policyName(open.PodName()), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("docker_network: true: policy lookup %v, want none", err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cl.Client.NetworkingV1().NetworkPolicies(f.ns).Get(ctx, policyName(b.PodName()), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("policy left after Close: %v", err)
	}
}

// A node selector no node matches: New fails on the start timeout with the
// scheduler's reason, and leaves nothing behind.
func testUnschedulable(t *testing.T, f *fixture) {
	opts := f.options(t, func(c *config.Terminal) {
		mustSet(c, keyNodeSelector, map[string]string{"berth-test/pool": "none"})
		mustSet(c, keyStartTimeout, 10)
	})
	_, err := New(context.Background(), opts)
	if err == nil || !strings.Contains(err.Error(), "could not be scheduled") || !strings.Contains(err.Error(), "node") {
		t.Fatalf("New = %v, want the scheduler's reason", err)
	}
	t.Log(err)
	if pods, _ := f.cl.Client.CoreV1().Pods(f.ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector(opts.Key)}); len(pods.Items) > 0 && pods.Items[0].DeletionTimestamp == nil {
		t.Errorf("pod left behind")
	}
}

// A taint on the node keeps berth's pod off it unless tolerated; the node
// selector picks the node by its labels.
func testTolerationsAndNodeSelector(t *testing.T, f *fixture) {
	ctx := context.Background()
	nodes := f.cl.Client.CoreV1().Nodes()
	taint := corev1.Taint{Key: "berth-test/dedicated", Value: "sandboxes", Effect: corev1.TaintEffectNoSchedule}
	node, err := nodes.Get(ctx, "berth-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Spec.Taints = append(node.Spec.Taints, taint)
	if _, err := nodes.Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n, err := nodes.Get(context.Background(), "berth-node", metav1.GetOptions{})
		if err != nil {
			t.Error(err)
			return
		}
		var keep []corev1.Taint
		for _, tt := range n.Spec.Taints {
			if tt.Key != taint.Key {
				keep = append(keep, tt)
			}
		}
		n.Spec.Taints = keep
		if _, err := nodes.Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
			t.Errorf("remove the test taint: %v", err)
		}
	})
	_, err = New(ctx, f.options(t, func(c *config.Terminal) { mustSet(c, keyStartTimeout, 10) }))
	if err == nil || !strings.Contains(err.Error(), "untolerated taint") {
		t.Errorf("New on a tainted node = %v, want the taint as the reason", err)
	}
	b := newBackend(t, f.options(t, func(c *config.Terminal) {
		mustSet(c, keyTolerations, []string{"berth-test/dedicated=sandboxes:NoSchedule"})
		mustSet(c, keyNodeSelector, map[string]string{"kubernetes.io/hostname": "berth-node"})
	}))
	if out, code := run(t, b, "echo on"); code != 0 || out != "on\n" {
		t.Errorf("tolerating pod: %d %q", code, out)
	}
}

// runtimeClassName: an existing class is used, a missing one is named in
// the error.
func testRuntimeClass(t *testing.T, f *fixture) {
	b := newBackend(t, f.options(t, func(c *config.Terminal) { mustSet(c, keyRuntimeClass, "berth-runc") }))
	if p := f.pod(t, b.PodName()); p.Spec.RuntimeClassName == nil || *p.Spec.RuntimeClassName != "berth-runc" {
		t.Errorf("runtimeClassName %v", p.Spec.RuntimeClassName)
	}
	if out, code := run(t, b, "echo ok"); code != 0 || out != "ok\n" {
		t.Errorf("pod of runtime class berth-runc: %d %q", code, out)
	}
	_, err := New(context.Background(), f.options(t, func(c *config.Terminal) { mustSet(c, keyRuntimeClass, "no-such-class") }))
	if err == nil || !strings.Contains(err.Error(), "no-such-class") {
		t.Errorf("missing runtime class: %v", err)
	}
}

// kubernetes_service_account mounts that account's token; without it the
// pod has none.
func testServiceAccount(t *testing.T, f *fixture) {
	b := newBackend(t, f.options(t, func(c *config.Terminal) { mustSet(c, keyServiceAccount, "default") }))
	if out, code := run(t, b, "cat /var/run/secrets/kubernetes.io/serviceaccount/namespace"); code != 0 || out != f.ns {
		t.Errorf("service account token: %d %q", code, out)
	}
}

// kubernetes_run_as_user runs as that uid, non-root enforced, without
// capabilities, with a writable home.
func testRunAsUser(t *testing.T, f *fixture) {
	b := newBackend(t, f.options(t, func(c *config.Terminal) { mustSet(c, keyRunAsUser, 1000) }))
	out, code := run(t, b, `id -u; grep CapEff /proc/self/status; echo x > $HOME/f && echo home-ok; echo $HOME`)
	if code != 0 || out != "1000\nCapEff:\t0000000000000000\nhome-ok\n/root\n" {
		t.Errorf("run as 1000: %d %q", code, out)
	}
	if p := f.pod(t, b.PodName()); p.Spec.SecurityContext.RunAsNonRoot == nil || !*p.Spec.SecurityContext.RunAsNonRoot {
		t.Errorf("runAsNonRoot not set")
	}
}

// deadOwner returns the mark of a process that has exited. The process
// waits to be killed: its mark is read while it surely runs (a process
// that exits by itself may be a zombie, which has no mark, before it is
// read).
func deadOwner(t testing.TB) string {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m := procmark.Of(cmd.Process.Pid)
	cmd.Process.Kill()
	cmd.Wait()
	if m == "" || !procmark.Gone(m) {
		t.Fatalf("no dead mark (%q)", m)
	}
	return m
}

// The crash sweep removes the pods of dead berths — a throwaway one with
// its policy, a persistent one without touching its volume claim — and
// keeps a pod a live berth holds even when its creator died.
func testCrashSweep(t *testing.T, f *fixture) {
	ctx := context.Background()
	dead := deadOwner(t)
	saved := currentOwner
	currentOwner = func() string { return dead }
	mk := func(mutate func(*config.Terminal)) *Backend {
		b, err := New(ctx, f.options(t, mutate))
		if err != nil {
			currentOwner = saved
			t.Fatal(err)
		}
		return b // no Close: its owner "crashed"
	}
	throwaway := mk(func(c *config.Terminal) { c.DockerNetwork = false })
	persistent := mk(func(c *config.Terminal) { c.ContainerPersistent = true; mustSet(c, keyVolumeSize, "8Mi") })
	held := mk(nil)
	currentOwner = saved
	t.Cleanup(func() {
		for _, b := range []*Backend{throwaway, persistent, held} {
			envAdmin{}.Remove(context.Background(), f.options(t, nil), b.set.Key)
		}
	})
	// A live berth reattaches to the third: it holds it.
	heldOpts := f.options(t, nil)
	heldOpts.Key = held.set.Key
	live := newBackend(t, heldOpts)
	if p := f.pod(t, live.PodName()); p.Annotations[AnnHolderPrefix+live.nonce] != procmark.Self() {
		t.Fatalf("reattaching berth did not record itself: %v", p.Annotations)
	}

	removed, err := sweep(ctx, throwaway.c, time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(removed, ",") != strings.Join(dedupe([]string{throwaway.set.Key, persistent.set.Key}), ",") {
		t.Errorf("swept %v, want the throwaway and persistent keys", removed)
	}
	for _, b := range []*Backend{throwaway, persistent} {
		if err := waitPodGone(ctx, b.c, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: b.PodName(), UID: b.PodUID()}}); err != nil {
			t.Error(err)
		}
	}
	if _, err := f.cl.Client.NetworkingV1().NetworkPolicies(f.ns).Get(ctx, policyName(throwaway.PodName()), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("throwaway environment's policy: %v, want it removed", err)
	}
	if _, err := f.cl.Client.CoreV1().PersistentVolumeClaims(f.ns).Get(ctx, claimName(persistent.PodName()), metav1.GetOptions{}); err != nil {
		t.Errorf("persistent environment's claim: %v, want it kept", err)
	}
	if out, code := run(t, live, "echo alive"); code != 0 || out != "alive\n" {
		t.Errorf("held pod: %d %q", code, out)
	}
}

// berth env: ls shows a running pod and a stopped persistent environment;
// prune removes the stopped one's claim once old enough; rm removes
// everything of a key.
func testEnvAdmin(t *testing.T, f *fixture) {
	ctx := context.Background()
	running := newBackend(t, f.options(t, nil))
	pOpts := f.options(t, func(c *config.Terminal) { c.ContainerPersistent = true; mustSet(c, keyVolumeSize, "8Mi") })
	stopped, err := New(ctx, pOpts)
	if err != nil {
		t.Fatal(err)
	}
	stoppedPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: stopped.PodName(), UID: stopped.PodUID()}}
	if err := stopped.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Close does not wait for the kubelet to stop the pod; until it has,
	// the environment is listed as terminating.
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := waitPodGone(wctx, stopped.c, stoppedPod); err != nil {
		t.Fatal(err)
	}
	admin := envAdmin{}
	list, err := admin.List(ctx, pOpts)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]backend.EnvInfo{}
	for _, e := range list {
		got[e.Key] = e
	}
	if e := got[running.set.Key]; e.State != "running" || e.Persistent || e.Image != f.cl.Image(t) {
		t.Errorf("running environment listed as %+v", e)
	}
	if e := got[stopped.set.Key]; e.State != "stopped" || !e.Persistent {
		t.Errorf("stopped persistent environment listed as %+v", e)
	}
	if keys, err := admin.Prune(ctx, pOpts, time.Hour); err != nil || len(keys) != 0 {
		t.Errorf("prune of environments younger than an hour: %v %v", keys, err)
	}
	keys, err := admin.Prune(ctx, pOpts, 0)
	if err != nil || !slices.Contains(keys, stopped.set.Key) || slices.Contains(keys, running.set.Key) {
		t.Errorf("prune: %v %v, want %s and not the running %s", keys, err, stopped.set.Key, running.set.Key)
	}
	if err := admin.Remove(ctx, pOpts, running.set.Key); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cl.Client.CoreV1().Pods(f.ns).Get(ctx, running.PodName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod after env rm: %v", err)
	}
	if err := admin.Remove(ctx, pOpts, "no-such-key"); err != nil {
		t.Errorf("removing a key with nothing: %v", err)
	}
}

// Two berths starting the same key at once get the same pod.
func testConcurrentNewOnePod(t *testing.T, f *fixture) {
	opts := f.options(t, nil)
	type res struct {
		b   *Backend
		err error
	}
	c := make(chan res, 2)
	for range 2 {
		go func() { b, err := New(context.Background(), opts); c <- res{b, err} }()
	}
	var uids []string
	for range 2 {
		r := <-c
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Cleanup(func() { r.b.Close(context.Background()) })
		uids = append(uids, string(r.b.PodUID()))
	}
	if uids[0] != uids[1] {
		t.Errorf("two pods for one key: %v", uids)
	}
}

// A later berth whose settings differ replaces the pod; the volume claim,
// and so the files, are kept.
func testSettingsChangeReplacesPodKeepsVolume(t *testing.T, f *fixture) {
	opts := f.options(t, func(c *config.Terminal) { c.ContainerPersistent = true; mustSet(c, keyVolumeSize, "8Mi") })
	t.Cleanup(func() { envAdmin{}.Remove(context.Background(), opts, opts.Key) })
	first, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	run(t, first, "echo v1 > /workspace/f")
	first.Close(context.Background())
	opts.Config.ContainerMemory = 300
	second := newBackend(t, opts)
	if second.PodUID() == first.PodUID() {
		t.Fatal("pod not replaced")
	}
	if out, _ := run(t, second, "cat /workspace/f"); out != "v1\n" {
		t.Errorf("file after the settings change: %q", out)
	}
	if q := f.pod(t, second.PodName()).Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]; q.Value() != 300<<20 {
		t.Errorf("memory limit %s, want 300Mi", q.String())
	}
}

// A cluster that does not answer is a *backend.UnreachableError, at once.
func testUnreachable(t *testing.T, f *fixture) {
	opts := f.options(t, nil)
	kc := t.TempDir() + "/kubeconfig"
	writeFile(t, kc, "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"+
		"users: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n")
	opts.Getenv = func(k string) string {
		if k == "KUBECONFIG" {
			return kc
		}
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := New(ctx, opts)
	var ue *backend.UnreachableError
	if !errors.As(err, &ue) || ue.Target != "https://127.0.0.1:1" {
		t.Fatalf("New = %v, want an UnreachableError for https://127.0.0.1:1", err)
	}
}

// berth doctor as the administrator: usable, every permission there, the
// runtime class, the storage class, the kubelet's pod PID limit and the
// ephemeral-storage enforcement are reported; with docker_network false it
// warns that NetworkPolicy needs an enforcing plugin.
func testDoctor(t *testing.T, f *fixture) {
	opts := f.options(t, func(c *config.Terminal) { c.DockerNetwork = false; c.ContainerPersistent = true })
	fp := Doctor(context.Background(), opts)
	all := fp.Summary + "\n" + strings.Join(fp.Details, "\n")
	if !fp.Usable {
		t.Fatalf("doctor: not usable: %s (fix: %s)", all, fp.Fix)
	}
	for _, want := range []string{"Kubernetes v1.32.0", "namespace " + f.ns, "every verb berth needs", "berth-runc (handler runc)",
		"berth-tmpfs (provisioner berth.test/tmpfs)", "pod PID limit (the kubelet's podPidsLimit; berth cannot set it per pod): ",
		"container_disk: enforced", "only a network plugin that enforces NetworkPolicy"} {
		if !strings.Contains(all, want) {
			t.Errorf("doctor lacks %q:\n%s", want, all)
		}
	}
	// The test node's address is 127.0.0.1, which the API server's node
	// proxy refuses ("address not allowed"): doctor says the limit is
	// unknown and why; on a node it can reach it reads 512.
	if !strings.Contains(all, "per pod): 512 on berth-node") && !strings.Contains(all, "per pod): unknown (") {
		t.Errorf("doctor neither reads the PID limit nor says why not:\n%s", all)
	}
	opts = f.options(t, func(c *config.Terminal) { mustSet(c, keyRuntimeClass, "gvisor") })
	if fp := Doctor(context.Background(), opts); fp.Usable || !strings.Contains(strings.Join(fp.Details, "\n"), `runtime class "gvisor"`) {
		t.Errorf("doctor with a missing runtime class: usable %v %v", fp.Usable, fp.Details)
	}
}

// As a user who may only read pods, doctor is not usable and names what
// is missing; New fails with a message that says the permission is
// missing (not a crash, not a hang).
func testRestrictedUser(t *testing.T, f *fixture) {
	kc := f.cl.UserKubeconfig(t, f.ns, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}})
	opts := f.options(t, nil)
	opts.Getenv = func(k string) string {
		if k == "KUBECONFIG" {
			return kc
		}
		return ""
	}
	mustSet(&opts.Config, keyNamespace, "") // the context's namespace
	fp := Doctor(context.Background(), opts)
	all := strings.Join(fp.Details, "\n")
	if fp.Usable || !strings.Contains(all, "create pods (create the environment's pod)") || !strings.Contains(all, "create pods/exec") ||
		strings.Contains(all, "get pods (") || !strings.Contains(all, "berth fork and checkpoints will fail: missing in namespace "+f.ns+": create persistentvolumeclaims") {
		t.Errorf("doctor as a pod reader: usable %v\n%s", fp.Usable, all)
	}
	_, err := New(context.Background(), opts)
	if err == nil || !strings.Contains(err.Error(), "not allowed in namespace "+f.ns) {
		t.Errorf("New as a pod reader: %v", err)
	}
	// With the Role the README lists, berth works.
	full := f.cl.UserKubeconfig(t, f.ns, readmeRules)
	opts.Getenv = func(k string) string {
		if k == "KUBECONFIG" {
			return full
		}
		return ""
	}
	opts.Config.ContainerPersistent = true
	opts.Config.DockerNetwork = false
	mustSet(&opts.Config, keyVolumeSize, "8Mi")
	if fp := Doctor(context.Background(), opts); !fp.Usable {
		t.Errorf("doctor with the README's role: %s %v", fp.Fix, fp.Details)
	}
	nonPersistent := opts
	nonPersistent.Config.ContainerPersistent = false
	if fp := Doctor(context.Background(), nonPersistent); !fp.Usable || strings.Contains(strings.Join(fp.Details, "\n"), "berth fork") {
		t.Errorf("doctor with the README's role, not persistent: usable %v, %v; want no word on fork", fp.Usable, fp.Details)
	}
	b := newBackend(t, opts)
	t.Cleanup(func() { envAdmin{}.Remove(context.Background(), opts, opts.Key) })
	if out, code := run(t, b, "echo ok > /workspace/f; cat /workspace/f"); code != 0 || out != "ok\n" {
		t.Errorf("as the README's role: %d %q", code, out)
	}
	// berth fork with the same Role, and no ClusterRole: berth may not
	// read the storage class, so it copies, and the copy, the restore
	// and the checkpoint's removal need nothing more than the Role.
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cp, err := b.Checkpoint(ctx, "role")
	if err != nil {
		t.Fatalf("checkpoint as the README's role: %v", err)
	}
	if cp.Meta[metaMethod] != methodCopy {
		t.Errorf("checkpoint as the README's role: method %q, want a copy", cp.Meta[metaMethod])
	}
	fopts := opts
	fopts.Key = opts.Key + "-fork"
	t.Cleanup(func() { envAdmin{}.Remove(context.Background(), fopts, fopts.Key) })
	fork := newBackend(t, from(fopts, cp))
	if out, code := run(t, fork, "cat /workspace/f"); code != 0 || out != "ok\n" {
		t.Errorf("fork as the README's role: %d %q", code, out)
	}
	if err := (checkpointAdmin{}).Remove(ctx, opts, cp); err != nil {
		t.Errorf("removing the checkpoint as the README's role: %v", err)
	}
}

// readmeRules is the Role of README.md's "What the cluster needs".
var readmeRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "list", "watch", "delete", "patch"}},
	{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create"}},
	{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"create", "get", "list", "patch", "delete"}},
	{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"create", "list", "delete"}},
}
