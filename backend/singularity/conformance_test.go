package singularity

import (
	"context"
	"sync"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backendtest"
	"github.com/a55dbaac/berth/config"
)

// TestConformance is the singularity backend's one entry into berth's
// suite, against the stand-in apptainer. Its primary configuration:
// throwaway instances (one per group of the suite; their writes are out
// of the host's reach, so the Fork group checks that they refuse to fork,
// clearly), persistent instances (directory overlays) for the Persistence
// group, and the backend's own tests as the Internal group. Its secondary
// ones run the Fork group on persistent instances: "overlay" on directory
// overlays in every tier, "image-overlay" on ext3 overlay images in the
// full tier.
func TestConformance(t *testing.T) {
	backendtest.Run(t, Name, backendtest.Config{Setup: func(t *testing.T) backendtest.Target {
		e := setup(t)
		return backendtest.Target{New: func(t testing.TB) backend.Backend {
			return newBackend(t, e.options("", nil))
		}, NewFrom: e.newFrom(nil), Checkpoints: scratchAdmin{e}, Options: backendtest.Options{
			Reopen: func(t testing.TB, key string) backend.Backend {
				opts := e.options(key, func(c *config.Terminal) { c.ContainerPersistent = true })
				t.Cleanup(func() { envAdmin{}.Remove(t.Context(), opts, key) })
				return newBackend(t, opts)
			},
			KeptDir: "/root",
			// /tmp, the suite's scratch, is the instance's own tmpfs
			// (--containall): no overlay holds it.
			CheckpointDir: "/root",
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
	}}, backendtest.Config{
		// Persistent instances on directory overlays, which a checkpoint
		// copies: the Fork group forks them. In every tier, since the
		// primary configuration's throwaway instances only refuse.
		Name:   "overlay",
		Groups: []string{"Fork"},
		Setup: func(t *testing.T) backendtest.Target {
			return overlayTarget(setup(t), func(c *config.Terminal) {
				c.ContainerPersistent = true
				mustSet(t, c, keyOverlay, "dir")
			})
		},
	}, backendtest.Config{
		// Persistent instances on ext3 overlay images, copied sparse and
		// checked.
		Name:   "image-overlay",
		Groups: []string{"Fork"},
		Full:   true,
		Setup: func(t *testing.T) backendtest.Target {
			return overlayTarget(setup(t), func(c *config.Terminal) {
				c.ContainerPersistent = true
				c.ContainerDisk = 64
				mustSet(t, c, keyOverlay, "image")
			})
		},
	})
}

// overlayTarget is the Fork group's factory of environments made with
// mutate on e, each removed with its overlay when its test ends.
func overlayTarget(e *testEnv, mutate func(*config.Terminal)) backendtest.Target {
	return backendtest.Target{New: func(t testing.TB) backend.Backend {
		opts := e.options("", mutate)
		t.Cleanup(func() { envAdmin{}.Remove(context.Background(), opts, opts.Key) })
		return newBackend(t, opts)
	}, NewFrom: e.newFrom(mutate), Checkpoints: scratchAdmin{e}, Options: backendtest.Options{
		KeptDir: "/root", CheckpointDir: "/root",
	}}
}

// newFrom is the Fork group's NewFrom on e: an environment with mutate's
// settings, e's image, home and scratch, and what the group's manager
// gives (a checkpoint, progress). The group's keys become keys of e's own,
// the same one each time a key comes back (a restore replaces its key's
// environment): instance names are the machine's, and another run's
// fork-src must not be this one's. Each environment is removed, with its
// overlay, when its test ends.
func (e *testEnv) newFrom(mutate func(*config.Terminal)) func(testing.TB, backend.Options) backend.Backend {
	var mu sync.Mutex
	keys := map[string]string{}
	return func(t testing.TB, o backend.Options) backend.Backend {
		mu.Lock()
		key, ok := keys[o.Key]
		if !ok {
			key = randomKey()
			keys[o.Key] = key
		}
		mu.Unlock()
		opts := e.options(key, mutate)
		opts.From, opts.Progress = o.From, o.Progress
		t.Cleanup(func() { envAdmin{}.Remove(context.Background(), e.options(key, mutate), key) })
		return newBackend(t, opts)
	}
}

// scratchAdmin removes checkpoints in e's scratch directory, whatever
// options the Fork group's manager gives (its berth home is its own).
type scratchAdmin struct{ e *testEnv }

func (a scratchAdmin) Remove(ctx context.Context, opts backend.Options, cp backend.Checkpoint) error {
	opts.Getenv, opts.Home = a.e.getenv, a.e.home
	return checkpointAdmin{}.Remove(ctx, opts, cp)
}
