package kubernetes

import (
	"context"
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
func TestConformance(t *testing.T) {
	f := newFixture(t)
	backendtest.Run(t, func(t testing.TB) backend.Backend {
		return newBackend(t, f.options(t, nil))
	}, backendtest.Options{
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

// TestConformanceSPDY runs the Process and Terminal groups once more with
// the exec streams forced onto SPDY, the transport berth falls back to
// when the API server (or a proxy) cannot upgrade to WebSocket.
func TestConformanceSPDY(t *testing.T) {
	f := newFixture(t)
	backendtest.Run(t, func(t testing.TB) backend.Backend {
		b := newBackend(t, f.options(t, nil))
		b.protocol = protoSPDY
		return b
	}, backendtest.Options{
		Only: func(name string) bool {
			return len(name) > 8 && (name[:8] == "Process/" || name[:9] == "Terminal/")
		},
	})
}

// internalTests are the backend's own tests, run inside the suite.
func internalTests(t *testing.T, f *fixture) {
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
		{"APIServerRestart", testAPIServerRestart},
		{"ImagePullFailure", testImagePullFailure},
		{"FullVolume", testFullVolume},
		{"NetworkPolicy", testNetworkPolicy},
		{"Unschedulable", testUnschedulable},
		{"TolerationsAndNodeSelector", testTolerationsAndNodeSelector},
		{"RuntimeClass", testRuntimeClass},
		{"ServiceAccount", testServiceAccount},
		{"RunAsUser", testRunAsUser},
		{"CrashSweep", testCrashSweep},
		{"EnvAdmin", testEnvAdmin},
		{"ConcurrentNewOnePod", testConcurrentNewOnePod},
		{"SettingsChangeReplacesPodKeepsVolume", testSettingsChangeReplacesPodKeepsVolume},
		{"Unreachable", testUnreachable},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, f) })
	}
}
