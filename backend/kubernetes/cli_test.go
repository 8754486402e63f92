package kubernetes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/a55dbaac/berth/internal/testenv/k8senv"
)

var (
	cliOnce sync.Once
	cliDir  string
	cliErr  error
)

// berthBin builds berth and berth-engine once (side by side, as
// installed) and returns the front's path.
func berthBin(t *testing.T) string {
	t.Helper()
	cliOnce.Do(func() {
		cliDir, cliErr = os.MkdirTemp("", "berth-k8s-cli-")
		if cliErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", cliDir+"/", "../../cmd/berth", "../../cmd/berth-engine").CombinedOutput()
		if err != nil {
			cliErr = errors.New("go build: " + err.Error() + ": " + string(out))
		}
	})
	if cliErr != nil {
		t.Fatal(cliErr)
	}
	return filepath.Join(cliDir, "berth")
}

// cli runs berth as a user does, with no configuration file: only
// KUBECONFIG and the image setting say where and what (the namespace is
// the kubeconfig's, "default"; every other setting is berth's default).
type cli struct {
	bin, home, kubeconfig, image string
}

func (c cli) run(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(c.bin, args...)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TERMINAL_") && !strings.HasPrefix(kv, "BERTH_") && !strings.HasPrefix(kv, "KUBECONFIG=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "BERTH_HOME="+c.home, "BERTH_CONFIG=", "KUBECONFIG="+c.kubeconfig,
		"TERMINAL_ENV=kubernetes", "TERMINAL_KUBERNETES_IMAGE="+c.image)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("berth %v: %v", args, err)
		}
	case <-time.After(3 * time.Minute):
		cmd.Process.Kill()
		t.Fatalf("berth %v did not finish; stderr: %s", args, errb.String())
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// TestCLI runs `berth exec` and `berth shell` end to end against the
// cluster with only KUBECONFIG and terminal.kubernetes_image set: one
// process per call, then through the berth daemon (warm environment), then
// berth env ls/rm and berth doctor.
func TestCLI(t *testing.T) {
	cl := k8sCluster(t)
	t.Parallel()
	c := cli{bin: berthBin(t), home: t.TempDir(), kubeconfig: cl.Kubeconfig, image: cl.Image(t)}
	key := testKey(t)
	t.Cleanup(func() {
		c.run(t, "", "daemon", "stop")
		c.run(t, "", "env", "rm", "--backend", "kubernetes", key)
	})

	out, errs, code := c.run(t, "", "exec", "--no-daemon", "--task", key, "--", "echo hi; id -u; exit 3")
	if code != 3 || out != "hi\n0\n" {
		t.Fatalf("berth exec --no-daemon: exit %d out %q stderr %s", code, out, errs)
	}
	// The default container_persistent keeps /root: the next call finds the
	// file of the first.
	c.run(t, "", "exec", "--no-daemon", "--task", key, "--", "echo kept > /root/f")
	out, errs, code = c.run(t, "cd /tmp\nexport A=1\necho $A; pwd; cat /root/f\n", "shell", "--json", "--no-daemon", "--task", key)
	if code != 0 {
		t.Fatalf("berth shell: exit %d stderr %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var last struct {
		Output   string `json:"output"`
		ExitCode int    `json:"exit_code"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Output != "1\n/tmp\nkept" || len(lines) != 3 {
		t.Fatalf("berth shell --json: %d lines, last %q (%v); output:\n%s", len(lines), lines[len(lines)-1], err, out)
	}

	// Through the daemon: the second call finds the first's shell.
	c.run(t, "", "exec", "--task", key, "--", "cd /workspace; export B=2")
	out, errs, code = c.run(t, "", "exec", "--task", key, "--", "echo $B; pwd")
	if code != 0 || out != "2\n/workspace\n" {
		t.Fatalf("berth exec through the daemon: exit %d out %q stderr %s", code, out, errs)
	}
	c.run(t, "", "daemon", "stop")

	// env ls asks every backend; those with no credentials or binary on
	// this machine (daytona, singularity) make it exit 1: only kubernetes'
	// part matters here.
	out, errs, _ = c.run(t, "", "env", "ls")
	if !strings.Contains(out, key) || strings.Contains(errs, "kubernetes") {
		t.Errorf("berth env ls: %q lacks %s, or kubernetes failed: %s", out, key, errs)
	}
	if _, errs, code := c.run(t, "", "env", "rm", "--backend", "kubernetes", key); code != 0 {
		t.Errorf("berth env rm: exit %d %s", code, errs)
	}
	// The claim is deleted; the controller manager's pvc-protection
	// removes it once no pod uses it (the pod is gone when env rm returns).
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		pvc, err := cl.Client.CoreV1().PersistentVolumeClaims("default").Get(ctx, claimName(PodName(key)), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if err != nil || pvc.DeletionTimestamp == nil || ctx.Err() != nil {
			t.Errorf("volume claim after berth env rm: %v (being deleted: %v)", err, err == nil && pvc.DeletionTimestamp != nil)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, errs, code = c.run(t, "", "doctor")
	if !strings.Contains(out+errs, "Kubernetes v1.32.0") {
		t.Errorf("berth doctor (exit %d) does not report the cluster:\n%s%s", code, out, errs)
	}
}

func k8sCluster(t *testing.T) *k8senv.Cluster { return k8senv.Require(t) }
