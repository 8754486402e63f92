package modal

import (
	"context"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backendtest"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/testenv/modalfake"
)

// TestConformance is the modal backend's entry into berth's suite, its
// table of configurations, on the real Modal SDK against the fake control
// plane. The primary configuration is the fake as unkind as the real Modal
// (modalfake.Realistic): sandboxes that take a moment to be scheduled, rate
// limits, transient failures and broken streams, a router that goes silent
// when a sandbox dies, lifetimes that end a little early, slow snapshots;
// a sandbox per group of the suite, persistent sandboxes for the
// Persistence group (a second backend for a key reattaches; Close
// snapshots and the next one restores), and the modal-only tests as the
// Internal group. The secondary one, "kind", is the fake without faults,
// for telling a fault's effect from a bug when the primary one fails: it
// runs in the full tier only, everything but the cases about berth's own
// shell code (the sandbox's shell is the same).
func TestConformance(t *testing.T) {
	// Beside the fault tests on fakes of their own: all mostly wait.
	t.Parallel()
	backendtest.Run(t, Name, backendtest.Config{Setup: func(t *testing.T) backendtest.Target {
		return target(newFixtureWith(t, modalfake.Realistic()))
	}}, backendtest.Config{
		Name:   "kind",
		Groups: []string{"Process", "Terminal", "Background", "Hardening", "Files", "FileWriter", "Persistence", "Fork", "Internal"},
		Full:   true,
		Setup:  func(t *testing.T) backendtest.Target { return target(newFixture(t)) },
	})
}

// fixtureAdmin removes checkpoints on f's fake, whatever options the Fork
// group's manager gives.
type fixtureAdmin struct{ f *fixture }

func (a fixtureAdmin) Remove(ctx context.Context, opts backend.Options, cp backend.Checkpoint) error {
	o := opts
	o.Getenv, o.Home = a.f.getenv, a.f.home
	return checkpointAdmin{}.Remove(ctx, o, cp)
}

// target is the suite's factory and options on f.
func target(f *fixture) backendtest.Target {
	return backendtest.Target{New: func(t testing.TB) backend.Backend {
		return newBackend(t, f.options(t, "", nil))
	}, NewFrom: func(t testing.TB, opts backend.Options) backend.Backend {
		// The Fork group's key and checkpoint (and progress), with the
		// fixture's fake and berth home.
		o := f.options(t, opts.Key, nil)
		o.From, o.Progress = opts.From, opts.Progress
		return newBackend(t, o)
	}, Checkpoints: fixtureAdmin{f}, Options: backendtest.Options{
		Reopen: func(t testing.TB, key string) backend.Backend {
			opts := f.options(t, key, func(c *config.Terminal) { c.ContainerPersistent = true })
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				envAdmin{}.Remove(ctx, opts, key)
			})
			return newBackend(t, opts)
		},
		KeptDir: "/root",
		Internal: func(t *testing.T) {
			for _, c := range []struct {
				name string
				fn   func(*testing.T, *fixture)
			}{
				{"InterruptAndTimeoutKeepSandboxAndState", testInterruptAndTimeoutKeepSandbox},
				{"SnapshotRestoreAcrossBackends", testSnapshotRestoreAcrossBackends},
				{"UnrestorableSnapshotFallsBack", testUnrestorableSnapshot},
				{"RecreateAfterOutsideTerminate", testRecreateAfterOutsideTerminate},
				{"NoSecretInDefinitionOrArgv", testNoSecretInDefinition},
				{"Definition", testDefinition},
				{"EnvAdmin", testEnvAdmin},
				{"CrashedBerthsSandboxCleaned", testCrashCleanup},
				{"WriteFileUsesFileAPI", testWriteFileUsesFileAPI},
				{"Doctor", testDoctor},
				{"WaitWhenSandboxDiesSilently", testWaitWhenSandboxDiesSilently},
			} {
				t.Run(c.name, func(t *testing.T) { c.fn(t, f) })
			}
		},
	}}
}
