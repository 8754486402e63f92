package ssh

import (
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backendtest"
	"github.com/a55dbaac/berth/internal/testenv/sshenv"
)

// TestConformance runs berth's backend-agnostic suite over one private sshd,
// with a fresh backend (a fresh connection) per test.
func TestConformance(t *testing.T) {
	s := sshenv.Start(t)
	backendtest.Run(t, func(t testing.TB) backend.Backend {
		return newTestBackend(t, testOptions(s, nil))
	}, backendtest.Options{})
}
