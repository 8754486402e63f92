package docker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backendtest"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
)

// TestConformance is the docker backend's one entry into berth's suite,
// its one configuration: throwaway containers on the busybox+bash test
// image (one per group of the suite), persistent containers for the
// Persistence group, and the docker-only tests as the Internal group.
func TestConformance(t *testing.T) {
	dockerenv.Require(t)
	backendtest.Run(t, Name, backendtest.Config{Setup: func(t *testing.T) backendtest.Target {
		// The Fork group's keys (fork-src, fork-dst) become keys of this
		// run's own, the same one each time a key comes back (a restore
		// replaces the environment of its key).
		var keysMu sync.Mutex
		keys := map[string]string{}
		return backendtest.Target{New: func(t testing.TB) backend.Backend {
			return newBackend(t, testOptions(t, nil))
		}, NewFrom: func(t testing.TB, o backend.Options) backend.Backend {
			opts := testOptions(t, nil)
			keysMu.Lock()
			if k, ok := keys[o.Key]; ok {
				opts.Key = k
			} else {
				keys[o.Key] = opts.Key
			}
			keysMu.Unlock()
			opts.From, opts.Progress = o.From, o.Progress
			return newBackend(t, opts)
		}, Checkpoints: checkpointAdmin{}, Options: backendtest.Options{
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
			// /tmp, the suite's scratch, is a tmpfs: not in a checkpoint.
			CheckpointDir: "/root",
			Internal:      internalTests,
		}}
	}})
}

// internalTests are the docker-only tests, the suite's Internal group. The
// three that stand in for another berth (they swap the owner mark this
// process labels containers with, and sweep what dead owners left) run
// first, one at a time, while nothing else creates containers. The rest
// run side by side (they mostly wait: on containers, on a fork loop's
// children, on the OOM killer), each in containers of its own, but for
// those that only run commands in a container with the default settings
// and look at it, which share one.
func internalTests(t *testing.T) {
	for _, c := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"CrashedOwnersContainersCleaned", testCrashedOwnersContainersCleaned},
		{"ReattachedByLiveBerthSurvivesSweep", testReattachedByLiveBerthSurvivesSweep},
		{"DeadClaimantsContainerStopped", testDeadClaimantsContainerStopped},
	} {
		t.Run(c.name, c.fn)
	}
	// The fork loop's children live 15 s: its wait overlaps the others.
	t.Run("PidsLimitStopsForkBomb", func(t *testing.T) {
		t.Parallel()
		testPidsLimitStopsForkBomb(t)
	})
	// Closed with t, after the parallel cases below have ended.
	shared := newBackend(t, testOptions(t, nil))
	for _, c := range []struct {
		name string
		fn   func(*testing.T, *Backend)
	}{
		{"RunExitCodeAndMergedOutput", testRunExitCodeAndMergedOutput},
		{"ExecIsProcessGroupLeader", testExecIsProcessGroupLeader},
		{"PersistentShellRoundTrip", testPersistentShellRoundTrip},
		{"HardeningFromInside", testHardeningFromInside},
		{"NoNetwork", testNoNetwork},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, shared)
		})
	}
	for _, c := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"ProcSpecDirAndEnv", testProcSpecDirAndEnv},
		{"ReadOnlyRoot", testReadOnlyRoot},
		{"MemoryLimitOOMKill", testMemoryLimitOOMKill},
		{"ForwardedSecretsStayOutOfConfigAndCmdlines", testForwardedSecretsStayOutOfConfigAndCmdlines},
		{"PersistenceAcrossBackends", testPersistenceAcrossBackends},
		{"SettingsChangeReplacesContainerKeepsVolumes", testSettingsChangeReplacesContainerKeepsVolumes},
		{"NonPersistentCloseRemovesEverything", testNonPersistentCloseRemovesEverything},
		{"RecreateAfterOutsideRemovalAndStop", testRecreateAfterOutsideRemovalAndStop},
		{"WaitWhenContainerStops", testWaitWhenContainerStops},
		{"OrphanPruning", testOrphanPruning},
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
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t)
		})
	}
}
