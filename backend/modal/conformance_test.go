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

// TestConformance is the modal backend's entry into berth's suite, on the
// real Modal SDK against the fake control plane: a fresh sandbox per test,
// persistent sandboxes for the Persistence group (a second backend for a
// key reattaches; Close snapshots and the next one restores), and the
// modal-only tests as the Internal group.
func TestConformance(t *testing.T) {
	t.Parallel() // beside TestConformanceRealistic: both mostly wait on the fake
	runConformance(t, newFixture(t), nil)
}

// TestConformanceRealistic runs the same suite against a fake as unkind as
// the real Modal (modalfake.Realistic): sandboxes that take a moment to be
// scheduled, rate limits, transient failures and broken streams, a router
// that goes silent when a sandbox dies, lifetimes that end a little early,
// slow snapshots. The tests of berth's own shell code
// (backendtest.ShellOnly) run once, against the kind fake: the sandbox's
// shell is the same.
func TestConformanceRealistic(t *testing.T) {
	t.Parallel()
	runConformance(t, newFixtureWith(t, modalfake.Realistic()), func(n string) bool { return !backendtest.ShellOnly(n) })
}

func runConformance(t *testing.T, f *fixture, only func(string) bool) {
	backendtest.Run(t, func(t testing.TB) backend.Backend {
		return newBackend(t, f.options(t, "", nil))
	}, backendtest.Options{
		Only: only,
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
	})
}
