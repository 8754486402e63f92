package local_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/local"
	"github.com/a55dbaac/berth/config"
)

// BenchmarkWorkspaceStart is the cost of confining an environment in
// workspace mode (local.New, then Close: no shell is started): in an empty
// workspace; with berth's home inside it; in a workspace holding a
// repository with a worktree, a submodule and a nested repository; and in
// this source tree's module root, a real project.
func BenchmarkWorkspaceStart(b *testing.B) {
	_, file, _, _ := runtime.Caller(0)
	module := filepath.Join(filepath.Dir(file), "..", "..")
	for _, c := range []struct {
		name, ws, home string
	}{
		{"empty", b.TempDir(), ""},
		{"home-inside", "", ".berth"},
		{"repositories", "", ""},
		{"module", module, ""},
	} {
		b.Run(c.name, func(b *testing.B) {
			ws := c.ws
			home := "/nonexistent/berth-home"
			if c.home != "" {
				ws = b.TempDir()
				home = filepath.Join(ws, c.home)
				if err := os.MkdirAll(home, 0o700); err != nil {
					b.Fatal(err)
				}
			}
			if c.name == "repositories" {
				ws = b.TempDir()
				makeRepos(b, ws)
			}
			cfg := config.Default().Terminal
			cfg.Cwd = ws
			if err := cfg.Set("local_sandbox", "workspace"); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				be, err := local.New(backend.Options{Config: cfg, Home: home})
				if err != nil {
					b.Skip(err)
				}
				be.Close(context.Background())
			}
		})
	}
}
