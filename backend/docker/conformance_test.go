package docker

import (
	"context"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backendtest"
	"github.com/a55dbaac/berth/config"
)

// TestConformance is the docker backend's one entry into berth's suite: a
// fresh throwaway container per test on the busybox+bash test image,
// persistent containers for the Persistence group, and the docker-only
// tests as the Internal group.
func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t testing.TB) backend.Backend {
		return newBackend(t, testOptions(t, nil))
	}, backendtest.Options{
		Reopen: func(t testing.TB, key string) backend.Backend {
			opts := testOptions(t, func(c *config.Terminal) { c.ContainerPersistent = true })
			opts.Key = key
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				envAdmin{}.Remove(ctx, opts, key)
			})
			return newBackend(t, opts)
		},
		KeptDir: "/root",
		Internal: func(t *testing.T) {
			for _, c := range []struct {
				name string
				fn   func(*testing.T)
			}{
				{"RunExitCodeAndMergedOutput", testRunExitCodeAndMergedOutput},
				{"ProcSpecDirAndEnv", testProcSpecDirAndEnv},
				{"ExecIsProcessGroupLeader", testExecIsProcessGroupLeader},
				{"PersistentShellRoundTrip", testPersistentShellRoundTrip},
				{"HardeningFromInside", testHardeningFromInside},
				{"PidsLimitStopsForkBomb", testPidsLimitStopsForkBomb},
				{"ReadOnlyRoot", testReadOnlyRoot},
				{"MemoryLimitOOMKill", testMemoryLimitOOMKill},
				{"ForwardedSecretsStayOutOfConfigAndCmdlines", testForwardedSecretsStayOutOfConfigAndCmdlines},
				{"PersistenceAcrossBackends", testPersistenceAcrossBackends},
				{"SettingsChangeReplacesContainerKeepsVolumes", testSettingsChangeReplacesContainerKeepsVolumes},
				{"NonPersistentCloseRemovesEverything", testNonPersistentCloseRemovesEverything},
				{"RecreateAfterOutsideRemovalAndStop", testRecreateAfterOutsideRemovalAndStop},
				{"WaitWhenContainerStops", testWaitWhenContainerStops},
				{"OrphanPruning", testOrphanPruning},
				{"NoNetwork", testNoNetwork},
				{"VolumesAndCwdMount", testVolumesAndCwdMount},
				{"BerthsHomeReadOnlyInBind", testBerthsHomeReadOnlyInBind},
				{"MissingImage", testMissingImage},
				{"Doctor", testDoctor},
				{"CreateToFirstCommandAndExecLatency", testCreateToFirstCommandAndExecLatency},
				{"WriteFileExactBytes", testWriteFileExactBytes},
				{"WriteFileDeclinesHiddenPaths", testWriteFileDeclinesHiddenPaths},
				{"WriteFileReadOnlyRoot", testWriteFileReadOnlyRoot},
				{"WriteFileRecoversRemovedContainer", testWriteFileRecoversRemovedContainer},
				{"FilesWriteUsesArchive", testFilesWriteUsesArchive},
				{"TimeoutRestoresPidBaseline", testTimeoutRestoresPidBaseline},
				{"ConcurrentFirstCallsOneContainer", testConcurrentFirstCallsOneContainer},
				{"EnvironmentRecreatedInResult", testEnvironmentRecreatedInResult},
				{"CrashedOwnersContainersCleaned", testCrashedOwnersContainersCleaned},
				{"ReattachedByLiveBerthSurvivesSweep", testReattachedByLiveBerthSurvivesSweep},
				{"DeadClaimantsContainerStopped", testDeadClaimantsContainerStopped},
			} {
				t.Run(c.name, c.fn)
			}
		},
	})
}
