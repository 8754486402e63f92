// Package k8senv gives tests the single-node Kubernetes cluster that
// scripts/ensure-k8s.sh runs on this machine (kube-apiserver, kubelet,
// controller-manager, scheduler, a CRI containerd; no registry), with the
// test image imported into it.
//
// Start the cluster first with scripts/ensure-k8s.sh (make test's deps
// target does), and select the engine with BERTH_TEST_ENGINES=kubernetes:
// a test that needs the cluster skips unless it is selected, and fails
// when it is selected and does not answer (see package testenv).
package k8senv

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/a55dbaac/berth/internal/procmark"
	"github.com/a55dbaac/berth/internal/testenv"
	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
)

// ImageRef is the test image Image imports: the docker tests' image
// (busybox-static and bash from the host, see dockerenv.Image), built here
// as an OCI image without Docker.
const ImageRef = "berth-test/base:1"

// NodeName is the test cluster's one node.
const NodeName = "berth-node"

// Cluster is the test cluster as its administrator sees it.
type Cluster struct {
	// Kubeconfig is the admin kubeconfig's path (O=system:masters).
	Kubeconfig string
	Config     *rest.Config
	Client     kubernetes.Interface
	// State is the cluster's state directory (BERTH_K8S_STATE, default
	// /var/lib/berth-k8s).
	State string
}

// stateDir is where ensure-k8s.sh keeps the cluster.
func stateDir() string {
	if d := os.Getenv("BERTH_K8S_STATE"); d != "" {
		return d
	}
	return "/var/lib/berth-k8s"
}

func cacheDir() string {
	if d := os.Getenv("BERTH_K8S_CACHE"); d != "" {
		return d
	}
	v := os.Getenv("BERTH_K8S_VERSION")
	if v == "" {
		v = "v1.32.0"
	}
	return "/var/cache/berth-k8s/" + v
}

// Require returns the running test cluster. The test is skipped unless
// BERTH_TEST_ENGINES selects kubernetes, and fails when the cluster is
// selected and does not answer.
func Require(t testing.TB) *Cluster {
	t.Helper()
	var c *Cluster
	testenv.Need(t, testenv.Kubernetes, func() (err error) {
		c, err = find()
		if err != nil {
			return fmt.Errorf("no test cluster answers: %w", err)
		}
		return nil
	})
	return c
}

func find() (*Cluster, error) {
	state := stateDir()
	kc := filepath.Join(state, "admin.kubeconfig")
	if _, err := os.Stat(kc); err != nil {
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	node, err := cs.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	ready := false
	for _, c := range node.Status.Conditions {
		ready = ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
	}
	if !ready {
		return nil, fmt.Errorf("node %s is not Ready", NodeName)
	}
	return &Cluster{Kubeconfig: kc, Config: cfg, Client: cs, State: state}, nil
}

// Namespace creates a namespace for the test (its default service account
// made by the controller-manager) and deletes it, with everything in it, at
// the end of the test.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "berth-test-", Labels: map[string]string{"berth-test": "1"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("k8senv: create namespace: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		bg := metav1.DeletePropagationBackground
		if err := c.Client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("k8senv: delete namespace %s: %v", ns.Name, err)
		}
	})
	for {
		if _, err := c.Client.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return ns.Name
		}
		select {
		case <-ctx.Done():
			t.Fatalf("k8senv: namespace %s got no default service account (is the controller-manager running?)", ns.Name)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

var (
	imageOnce sync.Once
	imageErr  error
)

// Image returns ImageRef, imported into the cluster's container runtime
// (the k8s.io namespace of its containerd) once per machine. Pods use it
// without pulling (the default policy for a tag other than latest).
func (c *Cluster) Image(t testing.TB) string {
	t.Helper()
	imageOnce.Do(func() { imageErr = c.importImage() })
	if imageErr != nil {
		t.Fatalf("k8senv: import the test image: %v", imageErr)
	}
	return ImageRef
}

// ctr runs containerd's ctr against the cluster's containerd.
func (c *Cluster) ctr(args ...string) *exec.Cmd {
	return exec.Command("ctr", append([]string{"-a", filepath.Join(c.State, "containerd", "containerd.sock"), "-n", "k8s.io"}, args...)...)
}

func (c *Cluster) importImage() error {
	full := "docker.io/" + ImageRef
	out, err := c.ctr("images", "ls", "-q", "name=="+full).Output()
	if err != nil {
		return fmt.Errorf("ctr images ls: %w", err)
	}
	if strings.TrimSpace(string(out)) == full {
		return nil
	}
	rootfs, err := dockerenv.RootFS()
	if err != nil {
		return err
	}
	layout, err := ociLayout(full, rootfs)
	if err != nil {
		return err
	}
	cmd := c.ctr("images", "import", "-")
	cmd.Stdin = bytes.NewReader(layout)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ctr images import: %v: %s", err, out)
	}
	return nil
}

// ociLayout packs a root filesystem (an uncompressed tar) as a one-layer
// OCI image layout named name, the tar `ctr images import` reads.
func ociLayout(name string, rootfs []byte) ([]byte, error) {
	digest := func(b []byte) string {
		s := sha256.Sum256(b)
		return hex.EncodeToString(s[:])
	}
	layer := digest(rootfs)
	cfg, _ := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{
			"Env": []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			"Cmd": []string{"/bin/sh"},
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + layer}},
	})
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:" + digest(cfg), "size": len(cfg)},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": "sha256:" + layer, "size": len(rootfs)}},
	})
	tag := name[strings.LastIndexByte(name, ':')+1:]
	index, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"manifests": []any{map[string]any{
			"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + digest(manifest), "size": len(manifest),
			"annotations": map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag},
		}},
	})
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(n string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{"blobs/sha256/" + layer, rootfs},
		{"blobs/sha256/" + digest(cfg), cfg},
		{"blobs/sha256/" + digest(manifest), manifest},
	} {
		if err := add(f.name, f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// RestartAPIServer stops the API server (by its pid file: SIGTERM, and
// SIGKILL if it has not exited after 10 s: its graceful shutdown can wait
// a minute for requests in flight) and starts it again with
// scripts/ensure-k8s.sh, which restarts only what is down; it returns once
// the API server answers again.
func (c *Cluster) RestartAPIServer(t testing.TB) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.State, "run", "apiserver.pid"))
	if err != nil {
		t.Fatalf("k8senv: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("k8senv: apiserver.pid: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatalf("k8senv: stop the API server (pid %d): %v", pid, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for procmark.Of(pid) != "" { // runs (a zombie does not)
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		if time.Now().After(deadline.Add(30 * time.Second)) {
			t.Fatalf("k8senv: the API server (pid %d) does not exit", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.Ensure(t)
}

// Ensure runs scripts/ensure-k8s.sh (found from this source file's
// directory), which starts whatever part of the cluster is down.
func (c *Cluster) Ensure(t testing.TB) {
	t.Helper()
	script, err := repoFile("scripts/ensure-k8s.sh")
	if err != nil {
		t.Fatalf("k8senv: %v", err)
	}
	cmd := exec.Command("bash", script, "up")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("k8senv: %s up: %v\n%s", script, err, out)
	}
}

// KubectlPath returns the kubectl of the cluster's version, built the first
// time it is asked for (scripts/k8s/build.sh kubectl: minutes, then cached
// beside the cluster's binaries). No test needs it, and the cluster's
// set-up does not build it; the kubectl exec benchmark does.
func (c *Cluster) KubectlPath(t testing.TB) string {
	t.Helper()
	p := filepath.Join(cacheDir(), "bin", "kubectl")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	script, err := repoFile("scripts/k8s/build.sh")
	if err != nil {
		t.Fatalf("k8senv: kubectl is not built and its build script cannot be found: %v", err)
	}
	t.Logf("k8senv: building kubectl (bash %s kubectl), once", script)
	if out, err := exec.Command("bash", script, "kubectl").CombinedOutput(); err != nil {
		t.Fatalf("k8senv: build kubectl (bash %s kubectl): %v\n%s", script, err, out)
	}
	return p
}

// repoFile finds path relative to the repository root above the working
// directory (tests run in their package's directory).
func repoFile(path string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, path)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%s not found above the working directory", path)
		}
		dir = parent
	}
}

// UserKubeconfig makes a service account in namespace ns bound to a Role
// with exactly rules, and writes a kubeconfig that authenticates as it
// (with a token from the TokenRequest API); berth then works as a user of
// the cluster with those permissions only.
func (c *Cluster) UserKubeconfig(t testing.TB, ns string, rules []rbacv1.PolicyRule) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A name of its own per call: a test may make several users.
	var rnd [3]byte
	_, _ = rand.Read(rnd[:])
	name := fmt.Sprintf("berth-user-%x", rnd)
	if _, err := c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("k8senv: create service account: %v", err)
	}
	if _, err := c.Client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("k8senv: create role: %v", err)
	}
	if _, err := c.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("k8senv: create role binding: %v", err)
	}
	exp := int64(3600)
	tok, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("k8senv: request a token: %v", err)
	}
	path := filepath.Join(t.TempDir(), "user.kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: berth-k8s
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: user
  context: {cluster: berth-k8s, user: %s, namespace: %s}
current-context: user
`, c.Config.Host, filepath.Join(c.State, "pki", "ca.crt"), name, tok.Status.Token, name, ns)
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
