package docker

import (
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backendtest"
)

// TestConformance runs berth's backend-agnostic suite against a fresh
// throwaway container per test, on the busybox+bash test image.
func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t testing.TB) backend.Backend {
		return newBackend(t, testOptions(t, nil))
	}, backendtest.Options{})
}
