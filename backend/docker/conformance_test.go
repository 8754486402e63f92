package docker

import (
	"context"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backendtest"
	"github.com/a55dbaac/berth/files"
	"github.com/a55dbaac/berth/terminal"
)

// TestConformance runs berth's backend-agnostic suite against a fresh
// throwaway container per test, on the busybox+bash test image.
func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t testing.TB) backend.Backend {
		return newBackend(t, testOptions(t, nil))
	}, backendtest.Options{})
}

// TestFileToolsConformance runs the file tools' suite inside a container.
func TestFileToolsConformance(t *testing.T) {
	files.RunConformance(t, func(t testing.TB) *terminal.Env {
		env := terminal.New(newBackend(t, testOptions(t, nil)), terminal.Options{SpillDir: t.TempDir()})
		t.Cleanup(func() { env.Close(context.Background()) })
		return env
	})
}
