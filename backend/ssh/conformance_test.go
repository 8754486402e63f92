package ssh

import (
	"context"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backendtest"
	"github.com/a55dbaac/berth/files"
	"github.com/a55dbaac/berth/internal/testenv/sshenv"
	"github.com/a55dbaac/berth/terminal"
)

// TestConformance runs berth's backend-agnostic suite over one private sshd,
// with a fresh backend (a fresh connection) per test.
func TestConformance(t *testing.T) {
	s := sshenv.Start(t)
	backendtest.Run(t, func(t testing.TB) backend.Backend {
		return newTestBackend(t, testOptions(s, nil))
	}, backendtest.Options{})
}

// TestFileToolsConformance runs the file tools' suite over SSH.
func TestFileToolsConformance(t *testing.T) {
	s := sshenv.Start(t)
	files.RunConformance(t, func(t testing.TB) *terminal.Env {
		env := terminal.New(newTestBackend(t, testOptions(s, nil)), terminal.Options{SpillDir: t.TempDir()})
		t.Cleanup(func() { env.Close(context.Background()) })
		return env
	})
}
