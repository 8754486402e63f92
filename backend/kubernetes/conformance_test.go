package kubernetes

import (
	"context"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backendtest"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/testenv/k8senv"
)

// TestConformance is the kubernetes backend's entry into berth's suite,
// its table of configurations, against the real cluster
// scripts/ensure-k8s.sh runs here. The primary one: throwaway pods on the
// busybox+bash test image (one per group of the suite), persistent
// environments (a volume claim each) for the Persistence group, and the
// backend's own tests as the Internal group. The secondary one, "spdy",
// forces the exec streams onto SPDY, the transport berth falls back to
// when the API server (or a proxy) cannot upgrade to WebSocket, and runs
// what the transport changes: the Process group, and the Terminal cases
// that lean on the stream (stdin, large and binary output). The session's
// kill on a timeout or an interrupt is the same exec as any other (Process
// covers signals); the suite's timed cases of it run once, in the primary
// configuration, so that this one does not double their exposure to a
// loaded machine.
//
// It runs in parallel with TestCLI (each in a namespace of its own), after
// TestClusterWide, which disturbs the whole cluster and so runs alone.
func TestConformance(t *testing.T) {
	k8senv.Require(t)
	t.Parallel()
	backendtest.Run(t, Name, backendtest.Config{Setup: func(t *testing.T) backendtest.Target {
		f := newFixture(t)
		return backendtest.Target{New: f.factory(nil), NewFrom: f.factoryFrom(), Checkpoints: fixtureCheckpoints{f.options(t, nil)}, Options: backendtest.Options{
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
			KeptDir:       "/root",
			CheckpointDir: "/workspace",
			Internal:      func(t *testing.T) { internalTests(t, f) },
		}}
	}}, backendtest.Config{
		Name: "spdy",
		Groups: []string{"Process", "Terminal/ExitCodeAndMergedOutput", "Terminal/StatePersists", "Terminal/StdinData",
			"Terminal/BinaryOutput", "Terminal/HugeOutputTruncated"},
		Setup: func(t *testing.T) backendtest.Target {
			f := newFixture(t)
			return backendtest.Target{New: f.factory(func(b *Backend) { b.setProtocol(protoSPDY) })}
		},
	}, backendtest.Config{
		// Warm pools (terminal.warm_pool) of the primary configuration's
		// throwaway pods, in a namespace of their own.
		Name:   "pool",
		Groups: []string{"Pool"},
		Setup: func(t *testing.T) backendtest.Target {
			f := newFixture(t)
			return backendtest.Target{New: f.factory(nil), Options: backendtest.Options{Pool: &backendtest.PoolOptions{
				Options: func(t testing.TB) backend.Options { return f.options(t, nil) },
				Orphan: func(t testing.TB, opts backend.Options) string {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					defer cancel()
					m, err := makeMember(ctx, opts, deadOwner(t))
					if err != nil {
						t.Fatalf("a dead berth's pooled pod: %v", err)
					}
					t.Cleanup(func() { _ = m.Discard(context.Background()) })
					return m.ID()
				},
				Sweep: func(t testing.TB, opts backend.Options) {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					defer cancel()
					_, c, err := poolSettings(opts)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := sweep(ctx, c, 2*time.Minute, false); err != nil {
						t.Fatalf("the crash sweep: %v", err)
					}
				},
			}}}
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
