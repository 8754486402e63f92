package singularity

import (
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backendtest"
	"github.com/a55dbaac/berth/config"
)

// TestConformance is the singularity backend's one entry into berth's
// suite, its one configuration, against the stand-in apptainer: throwaway
// instances (one per group of the suite), persistent instances (directory
// overlays) for the Persistence group, and the backend's own tests as the
// Internal group.
func TestConformance(t *testing.T) {
	backendtest.Run(t, Name, backendtest.Config{Setup: func(t *testing.T) backendtest.Target {
		e := setup(t)
		return backendtest.Target{New: func(t testing.TB) backend.Backend {
			return newBackend(t, e.options("", nil))
		}, Options: backendtest.Options{
			Reopen: func(t testing.TB, key string) backend.Backend {
				opts := e.options(key, func(c *config.Terminal) { c.ContainerPersistent = true })
				t.Cleanup(func() { envAdmin{}.Remove(t.Context(), opts, key) })
				return newBackend(t, opts)
			},
			KeptDir: "/root",
			Internal: func(t *testing.T) {
				for _, c := range []struct {
					name string
					fn   func(*testing.T, *testEnv)
				}{
					{"OverlayPersistsAcrossBerthProcesses", testOverlayPersistsAcrossProcesses},
					{"ImageOverlayPersists", testImageOverlayPersists},
					{"ReattachRunningInstance", testReattachRunningInstance},
					{"OrphansCleaned", testOrphansCleaned},
					{"TimeoutKillsTreeInstanceLives", testTimeoutKillsTreeInstanceLives},
					{"EnvPassthroughOnly", testEnvPassthroughOnly},
					{"NoHostEnvInInstance", testNoHostEnvInInstance},
					{"LimitsReportedWhenNotEnforceable", testLimitsReported},
					{"LimitsEnforcedWhenAllowed", testLimitsEnforced},
					{"SIFCacheBuiltOnceConcurrently", testSIFCacheBuiltOnce},
					{"BuildFailureFallsBackToReference", testBuildFailureFallsBack},
					{"RecreatedAfterOutsideKill", testRecreatedAfterOutsideKill},
					{"NoNetworkAndBinds", testNoNetworkAndBinds},
					{"BerthsHomeReadOnlyInBind", testBerthsHomeReadOnlyInBind},
					{"EnvAdmin", testEnvAdmin},
					{"Doctor", testDoctor},
					{"MissingBinaryIsUnreachable", testMissingBinary},
					{"CheckpointDirOverlay", testCheckpointDirOverlay},
					{"CheckpointImageOverlay", testCheckpointImageOverlay},
					{"CheckpointTmpfsRefused", testCheckpointTmpfsRefused},
					{"CheckpointHostileNames", testCheckpointHostileNames},
					{"CheckpointCrashLeftovers", testCheckpointCrashLeftovers},
				} {
					t.Run(c.name, func(t *testing.T) { c.fn(t, e) })
				}
			},
		}}
	}})
}
