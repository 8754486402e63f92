package session_test

import (
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/local"
	"github.com/a55dbaac/berth/backendtest"
)

// TestConformance runs berth's conformance suite on the local backend, so
// that `go test ./session` tests the session itself: framing, state,
// timeouts, interrupts and restarts are the session's behaviour, whatever
// backend carries it.
func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t testing.TB) backend.Backend {
		be, err := local.New(backend.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return be
	}, backendtest.Options{Scratch: t.TempDir()})
}
