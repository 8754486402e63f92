package daytona

import (
	"context"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backendtest"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/testenv/daytonafake"
)

// TestConformance is the daytona backend's entry into berth's suite, its
// table of configurations, through Daytona's real generated clients
// against the fake Daytona (real containers behind its API and toolbox).
// The primary configuration is the fake in its realistic preset
// (daytonafake.Realistic: every way Daytona is hard on its clients, with
// small random delays): slow-consumer drops behind a slow link, close
// messages ahead of output, a lagging list, 429s and 5xx, execute through
// the user's shell, a non-root user, random delays; a sandbox per group of
// the suite, persistent sandboxes for the Persistence group. The
// secondary one, "kind", is the fake without faults, for telling a fault's
// effect from a bug when the primary one fails: it runs in the full tier
// only, everything but the cases about berth's own shell code (the
// sandbox's shell is the same). The daytona-only tests are TestInternal,
// against the kind fake (its tests of the unkind switches one by one are
// in unkind_test.go).
func TestConformance(t *testing.T) {
	backendtest.Run(t, Name, backendtest.Config{Setup: func(t *testing.T) backendtest.Target {
		return target(daytonafake.StartRealistic(t))
	}}, backendtest.Config{
		Name:   "kind",
		Groups: []string{"Process", "Terminal", "Background", "Hardening", "Fork", "Files", "FileWriter", "Persistence"},
		Full:   true,
		Setup:  func(t *testing.T) backendtest.Target { return target(daytonafake.Start(t)) },
	})
}

// TestInternal runs the daytona-only tests against the kind fake. Those in
// sequentialInternal run first, one at a time: some stand in for another
// berth by changing the owner mark this process labels sandboxes with (no
// other test of the package runs beside TestInternal), one lists and
// prunes the fake's sandboxes, one counts every call the fake gets. The
// rest, each on sandboxes of its own, run side by side: they mostly wait
// on the fake.
func TestInternal(t *testing.T) {
	names := map[string]bool{}
	for _, c := range internalTests {
		names[c.name] = true
	}
	for n := range sequentialInternal {
		if !names[n] {
			t.Fatalf("sequentialInternal names %s, which is no internal test", n)
		}
	}
	fake := daytonafake.Start(t)
	for _, c := range internalTests {
		if sequentialInternal[c.name] {
			t.Run(c.name, func(t *testing.T) { c.fn(t, fake) })
		}
	}
	for _, c := range internalTests {
		if !sequentialInternal[c.name] {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				c.fn(t, fake)
			})
		}
	}
}

// sequentialInternal names the internal tests that must run alone.
var sequentialInternal = map[string]bool{
	"CrashedOwnersSandboxesCleaned":      true,
	"ReattachedByLiveBerthSurvivesSweep": true,
	"KilledReattachersSandboxStopped":    true,
	"RefusedRelabelWarnsAndCarriesOn":    true,
	"EnvAdminListRemovePrune":            true,
	"TrivialCommandIsOneRoundTrip":       true,
}

// target is the suite's factory and options on fake: NewFrom and
// Checkpoints (the Fork group's) add the fake's credentials and the test
// image to the options the group's manager gives.
func target(fake *daytonafake.Server) backendtest.Target {
	return backendtest.Target{New: func(t testing.TB) backend.Backend {
		return newBackend(t, testOptions(t, fake, nil, nil))
	}, NewFrom: func(t testing.TB, o backend.Options) backend.Backend {
		opts := testOptions(t, fake, nil, nil)
		opts.Key, opts.From, opts.Home, opts.Progress = o.Key, o.From, o.Home, o.Progress
		return newBackend(t, opts)
	}, Checkpoints: fakeCheckpoints{fake}, Options: backendtest.Options{
		Reopen: func(t testing.TB, key string) backend.Backend {
			opts := testOptions(t, fake, func(c *config.Terminal) { c.ContainerPersistent = true }, nil)
			opts.Key = key
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				envAdmin{}.Remove(ctx, opts, key)
			})
			return newBackend(t, opts)
		},
	}}
}

// fakeCheckpoints removes checkpoints as Registration.Checkpoints does,
// with the fake's credentials.
type fakeCheckpoints struct{ fake *daytonafake.Server }

func (f fakeCheckpoints) Remove(ctx context.Context, opts backend.Options, cp backend.Checkpoint) error {
	opts.Getenv = func(k string) string {
		return map[string]string{EnvAPIURL: f.fake.APIURL(), EnvAPIKey: f.fake.APIKey()}[k]
	}
	return checkpointAdmin{}.Remove(ctx, opts, cp)
}

// internalTests are the daytona backend's own tests (TestInternal).
var internalTests []struct {
	name string
	fn   func(*testing.T, *daytonafake.Server)
}
