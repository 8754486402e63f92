package kubernetes

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backendtest"
	"github.com/a55dbaac/berth/config"
)

// TestConformance is the kubernetes backend's entry into berth's suite,
// against the real cluster scripts/ensure-k8s.sh runs here: a fresh
// throwaway pod per test on the busybox+bash test image, persistent
// environments (a volume claim each) for the Persistence group, and the
// backend's own tests as the Internal group.
//
// It runs in parallel with TestConformanceSPDY and TestCLI (each in a
// namespace of its own), after TestClusterWide, which disturbs the whole
// cluster and so runs alone.
func TestConformance(t *testing.T) {
	f := newFixture(t)
	t.Parallel()
	backendtest.Run(t, f.prefetch(t, nil), backendtest.Options{
		Reopen: func(t testing.TB, key string) backend.Backend {
			opts := f.options(t, func(c *config.Terminal) {
				c.ContainerPersistent = true
				mustSet(c, keyVolumeSize, "64Mi")
			})
			opts.Key = key
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				envAdmin{}.Remove(ctx, opts, key)
			})
			return newBackend(t, opts)
		},
		KeptDir:  "/root",
		Internal: func(t *testing.T) { internalTests(t, f) },
	})
}

// TestConformanceSPDY runs the Process group, and the Terminal tests that
// lean on the stream (stdin, large and binary output), once more with the
// exec streams forced onto SPDY, the transport berth falls back to when
// the API server (or a proxy) cannot upgrade to WebSocket. The session's
// kill on a timeout or an interrupt is the same exec as any other
// (Process covers signals); the suite's timed tests of it run once, in
// TestConformance, so that this run does not double their exposure to a
// loaded machine.
func TestConformanceSPDY(t *testing.T) {
	f := newFixture(t)
	t.Parallel()
	terminal := map[string]bool{"ExitCodeAndMergedOutput": true, "StatePersists": true, "StdinData": true,
		"BinaryOutput": true, "HugeOutputTruncated": true}
	backendtest.Run(t, f.prefetch(t, func(b *Backend) { b.setProtocol(protoSPDY) }), backendtest.Options{
		Only: func(name string) bool {
			group, test, _ := strings.Cut(name, "/")
			return group == "Process" || group == "Terminal" && terminal[test]
		},
	})
}

// TestClusterWide runs the faults and settings that touch the whole
// cluster or process — the API server restarted, a taint on the only
// node, the crash sweep (which swaps the package's owner mark) — alone:
// a top-level test that is not parallel ends before the parallel ones
// start.
func TestClusterWide(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		name string
		fn   func(*testing.T, *fixture)
	}{
		// The scheduler takes a while to watch again after the API
		// server restarted: the test that waits for its verdict comes
		// first.
		{"TolerationsAndNodeSelector", testTolerationsAndNodeSelector},
		{"CrashSweep", testCrashSweep},
		{"APIServerRestart", testAPIServerRestart},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, f) })
	}
}

// internalTests are the backend's own tests, run inside the suite. Those
// that look at the whole namespace (env ls, env prune) run first; the
// rest run in parallel, each in a pod of its own.
func internalTests(t *testing.T, f *fixture) {
	for _, c := range []struct {
		name string
		fn   func(*testing.T, *fixture)
	}{
		{"EnvAdmin", testEnvAdmin},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, f) })
	}
	for _, c := range []struct {
		name string
		fn   func(*testing.T, *fixture)
	}{
		{"PodSpec", testPodSpec},
		{"HardeningFromInside", testHardeningFromInside},
		{"PidLimitStopsForkLoop", testPidLimitStopsForkLoop},
		{"MemoryLimitOOMKill", testMemoryLimitOOMKill},
		{"Transports", testTransports},
		{"FailingCommandRunsOnce", testFailingCommandRunsOnce},
		{"RecreateAfterPodDeleted", testRecreateAfterPodDeleted},
		{"RecreateAfterEviction", testRecreateAfterEviction},
		{"RecreateAfterPodFailed", testRecreateAfterPodFailed},
		{"PersistentRecreateKeepsFiles", testPersistentRecreateKeepsFiles},
		{"ImagePullFailure", testImagePullFailure},
		{"FullVolume", testFullVolume},
		{"NetworkPolicy", testNetworkPolicy},
		{"Unschedulable", testUnschedulable},
		{"RuntimeClass", testRuntimeClass},
		{"ServiceAccount", testServiceAccount},
		{"RunAsUser", testRunAsUser},
		{"ConcurrentNewOnePod", testConcurrentNewOnePod},
		{"SettingsChangeReplacesPodKeepsVolume", testSettingsChangeReplacesPodKeepsVolume},
		{"Unreachable", testUnreachable},
		{"Doctor", testDoctor},
		{"RestrictedUser", testRestrictedUser},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, f)
		})
	}
}
