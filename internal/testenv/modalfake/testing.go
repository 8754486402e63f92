package modalfake

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
	"github.com/a55dbaac/berth/internal/testenv/fault"
)

// Start runs a fake for one test on the tests' Docker daemon (see
// dockerenv.Require: it skips unless docker is selected, and fails when it
// is selected and no daemon answers) and
// closes it at cleanup, failing the test if anything could not be removed.
// It builds the test image first, so dockerenv.ImageRef can be used as a
// registry image.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, Faults{})
}

// StartWith is Start for a fake that shows faults from the start
// (Realistic() for all of them). The faults are drawn from the seed
// BERTH_FAKE_SEED gives, or a random one; the test's log names it when the
// fake starts and again when the test fails.
func StartWith(t testing.TB, faults Faults) *Server {
	t.Helper()
	return start(t, Options{Faults: faults})
}

// start runs a fake with opts (and the tests' Docker daemon) for the test.
func start(t testing.TB, opts Options) *Server {
	t.Helper()
	opts.Docker = dockerenv.Require(t)
	dockerenv.Image(t)
	opts.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := New(ctx, opts)
	if err != nil {
		t.Fatalf("modalfake: %v", err)
	}
	t.Logf("modalfake: serving %s; faults: %s; %s", s.URL(), opts.Faults, s.faults.src)
	// Registered first, so run last: a failure to close counts too.
	fault.Report(t, "modalfake", s.faults.src)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("modalfake: close: %v", err)
		}
	})
	return s
}

// testWriter sends log lines to the test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}
