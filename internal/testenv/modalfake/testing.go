package modalfake

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
)

// Start runs a fake for one test on the tests' Docker daemon (see
// dockerenv.Require: it skips unless docker is selected, and fails when it
// is selected and no daemon answers) and
// closes it at cleanup, failing the test if anything could not be removed.
// It builds the test image first, so dockerenv.ImageRef can be used as a
// registry image.
func Start(t testing.TB) *Server { return StartWith(t, Faults{}) }

// StartWith is Start for a fake that shows faults from the start
// (Realistic() for all of them).
func StartWith(t testing.TB, faults Faults) *Server {
	t.Helper()
	cli := dockerenv.Require(t)
	dockerenv.Image(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := New(ctx, Options{Docker: cli, Faults: faults, Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatalf("modalfake: %v", err)
	}
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
