package kubernetes

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
)

// berth redirects client-go's logging (quietKlog) before it makes any
// client; the test helpers make clients of their own (k8senv, whose
// certificate rotation reads klog's settings in the background), so the
// test binary redirects it first too, before any test runs.
func init() { quietKlog() }

// TestDoctorWithoutCluster: with no kubeconfig, doctor says so once, in
// one line naming where it looked, with the fix on its own; a kubeconfig
// that does not load is not called "no cluster configured" but named with
// its error. Neither needs a cluster.
func TestDoctorWithoutCluster(t *testing.T) {
	home := t.TempDir()
	cfg := config.Default().Terminal
	cfg.Backend = Name
	env := map[string]string{"HOME": home}
	opts := backend.Options{Key: "doctor", Config: cfg, Getenv: func(k string) string { return env[k] }}

	fp := Doctor(context.Background(), opts)
	want := "no cluster configured: no kubeconfig at " + filepath.Join(home, ".kube", "config") + " and not running in a pod"
	if fp.Usable || fp.Summary != want || len(fp.Details) != 0 || !strings.Contains(fp.Fix, "KUBECONFIG") {
		t.Errorf("doctor without a kubeconfig: %+v\nwant summary %q, no details, a fix naming KUBECONFIG", fp, want)
	}
	if all := fp.Summary + "\n" + strings.Join(fp.Details, "\n") + "\n" + fp.Fix; strings.Count(all, "no cluster configured") != 1 {
		t.Errorf("doctor says %q more than once:\n%s", "no cluster configured", all)
	}

	bad := filepath.Join(home, "bad-kubeconfig")
	if err := os.WriteFile(bad, []byte("garbage: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env["KUBECONFIG"] = bad
	fp = Doctor(context.Background(), opts)
	if fp.Usable || strings.Contains(fp.Summary, "no cluster configured") || len(fp.Details) != 1 || !strings.Contains(fp.Details[0], bad) {
		t.Errorf("doctor with a kubeconfig that does not load: %+v; want its error, naming %s", fp, bad)
	}
}
