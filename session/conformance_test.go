package session_test

import (
	"context"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/local"
	"github.com/a55dbaac/berth/backendtest"
)

// TestConformance runs berth's conformance suite on the local backend's
// primary configuration, so that `go test ./session` tests the session
// itself: framing, state, timeouts, interrupts and restarts are the
// session's behaviour, whatever backend carries it. This is the local
// backend's one full run; its secondary configuration, workspace mode
// (kernel confinement), is TestConformanceWorkspace in backend/local, next
// to the confinement's own tests.
func TestConformance(t *testing.T) {
	backendtest.Run(t, "local", backendtest.Config{Setup: func(t *testing.T) backendtest.Target {
		return backendtest.Target{
			New: func(t testing.TB) backend.Backend {
				be, err := local.New(backend.Options{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { be.Close(context.Background()) })
				return be
			},
			Options: backendtest.Options{Scratch: t.TempDir()},
		}
	}})
}
