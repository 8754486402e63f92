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

// TestConformance is the daytona backend's one entry into berth's suite,
// through Daytona's real generated clients against the fake Daytona (real
// containers behind its API and toolbox): a fresh throwaway sandbox per
// test, persistent sandboxes for the Persistence group. The daytona-only
// tests are TestInternal.
func TestConformance(t *testing.T) {
	t.Parallel() // beside TestConformanceRealistic: both mostly wait on the fake
	conformance(t, daytonafake.Start(t), nil)
}

// TestInternal runs the daytona-only tests, the suite's Internal group,
// against the kind fake. It is not parallel: some stand in for another
// berth by changing the owner mark this process labels sandboxes with, so
// they run before the two parallel suites start.
func TestInternal(t *testing.T) {
	fake := daytonafake.Start(t)
	for _, c := range internalTests {
		t.Run(c.name, func(t *testing.T) { c.fn(t, fake) })
	}
}

// TestConformanceRealistic runs the suite again against the fake in its
// realistic preset (daytonafake.Realistic: every way Daytona is hard on its
// clients, with small random delays): slow-consumer drops behind a slow
// link, close messages ahead of output, a lagging list, 429s and 5xx,
// execute through the user's shell, a non-root user, random delays. The
// Internal group runs against the kind fake only (its tests of the unkind
// switches one by one are in unkind_test.go). The tests of berth's own
// shell code (backendtest.ShellOnly) run once, against the kind fake: the
// sandbox's shell is the same.
func TestConformanceRealistic(t *testing.T) {
	t.Parallel()
	conformance(t, daytonafake.StartRealistic(t), func(n string) bool { return !backendtest.ShellOnly(n) })
}

func conformance(t *testing.T, fake *daytonafake.Server, only func(string) bool) {
	opts := backendtest.Options{
		Only: only,
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
	}
	backendtest.Run(t, func(t testing.TB) backend.Backend {
		return newBackend(t, testOptions(t, fake, nil, nil))
	}, opts)
}

// internalTests are the daytona backend's own tests (TestInternal).
var internalTests []struct {
	name string
	fn   func(*testing.T, *daytonafake.Server)
}
