package local

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/local/confine"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/testenv"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/terminal"
)

// BenchmarkFork1GB times berth env fork, checkpoint and restore of a
// workspace-mode environment whose workspace holds 1 GiB (256 files of 4
// MiB and 2,048 of 4 KiB), through the manager as berth does them: the
// shell state captured and replayed, the copy, the new confined
// environment. xfs-reflink runs on an XFS loop image made with
// reflink=1 (the copies are FICLONE clones: metadata only); ext4-plain on
// this machine's own filesystem, which has no reflinks (every byte is
// copied). The time of removing each copy afterwards is not counted.
//
//	sudo BERTH_TEST_ENGINES=root,landlock go test -run '^$' -bench Fork1GB -benchtime 3x ./backend/local
func BenchmarkFork1GB(b *testing.B) {
	testenv.Need(b, testenv.Landlock, func() error {
		if m := confine.Probe().Missing(confine.Policy{}); len(m) > 0 {
			return fmt.Errorf("this kernel cannot confine: %s", strings.Join(m, "; "))
		}
		return nil
	})
	for _, fsys := range []string{"xfs-reflink", "ext4-plain"} {
		b.Run(fsys, func(b *testing.B) {
			var base string
			if fsys == "xfs-reflink" {
				base = xfsDir(b)
			} else {
				dir, err := os.MkdirTemp("/var/tmp", "berth-bench-")
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { os.RemoveAll(dir) })
				base = dir
			}
			m, home := benchManager(b, base)
			ctx := context.Background()
			b.Run("fork", func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					key := fmt.Sprintf("fork-%d", i)
					if _, err := m.Fork(ctx, "src", key); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					m.Close(ctx, key)
					envAdmin{}.Remove(ctx, benchOptions(home), key)
					b.StartTimer()
				}
			})
			b.Run("checkpoint", func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					if _, err := m.Checkpoint(ctx, "src", "c"); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					if err := m.RemoveCheckpoint(ctx, "src", "c"); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			})
			b.Run("restore", func(b *testing.B) {
				b.StopTimer()
				if _, err := m.Checkpoint(ctx, "src", "r"); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				for i := 0; i < b.N; i++ {
					if _, err := m.Restore(ctx, "src", "r"); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

func benchOptions(home string) backend.Options { return backend.Options{Home: home} }

// benchManager makes a 1 GiB workspace in base and a manager whose
// environment "src" works in it, confined, with berth's home in base too.
func benchManager(b *testing.B, base string) (*manager.Manager, string) {
	b.Helper()
	ws, home := filepath.Join(base, "ws"), filepath.Join(base, "home")
	for _, d := range []string{filepath.Join(ws, "big"), filepath.Join(ws, "src"), home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	big := make([]byte, 4<<20)
	for i := range 256 {
		rand.Read(big)
		if err := os.WriteFile(filepath.Join(ws, "big", fmt.Sprintf("blob-%03d", i)), big, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 2048 {
		if err := os.WriteFile(filepath.Join(ws, "src", fmt.Sprintf("file-%04d.go", i)), big[:4096], 0o644); err != nil {
			b.Fatal(err)
		}
	}
	cfg := config.Default()
	cfg.Home = home
	cfg.Approvals.Mode = "off"
	cfg.Terminal.Cwd = ws
	if err := cfg.Terminal.Set(keySandbox, SandboxWorkspace); err != nil {
		b.Fatal(err)
	}
	m := manager.New(cfg, nil)
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		m.CloseAll(ctx)
		os.RemoveAll(home + "-workspaces")
	})
	if r := m.Run(context.Background(), "src", terminal.Request{Command: "cd src && export BENCH=1"}); r.Error != nil {
		b.Fatal(*r.Error)
	}
	return m, home
}
