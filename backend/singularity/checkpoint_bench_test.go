package singularity

import (
	"context"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
)

// BenchmarkCheckpoint times a checkpoint, and a new environment made from
// one (until New returns: the overlay is copied and the instance runs and
// takes commands), of a persistent instance that wrote 100 MB of random
// bytes, on a directory overlay and on an ext3 overlay image. The copies
// are cp -a --reflink=auto on this machine (plain copies on ext4, clones
// on XFS or btrfs); the instance is the stand-in apptainer's, whose start
// is quicker than a real Apptainer's (0.45–0.57 s measured on the VM).
//
//	BERTH_TEST_ENGINES=apptainer go test -run '^$' -bench Checkpoint -benchtime 5x ./backend/singularity/
func BenchmarkCheckpoint(bm *testing.B) {
	e := setup(bm)
	for _, kind := range []struct {
		name   string
		mutate func(*config.Terminal)
	}{
		{"dir", func(c *config.Terminal) {
			c.ContainerPersistent = true
			mustSet(bm, c, keyOverlay, "dir")
		}},
		{"image", func(c *config.Terminal) {
			c.ContainerPersistent = true
			c.ContainerDisk = 256
			mustSet(bm, c, keyOverlay, "image")
		}},
	} {
		bm.Run(kind.name, func(bm *testing.B) {
			ctx := context.Background()
			opts := e.options("", kind.mutate)
			bm.Cleanup(func() { envAdmin{}.Remove(ctx, opts, opts.Key) })
			src := newBackend(bm, opts)
			if got := mustRun(bm, src, "head -c 104857600 /dev/urandom >/root/big && wc -c </root/big"); got != "104857600\n" {
				bm.Fatalf("the source's file: %q bytes", got)
			}
			admin := scratchAdmin{e}
			bm.Run("checkpoint", func(bm *testing.B) {
				for bm.Loop() {
					cp, err := src.Checkpoint(ctx, "bench")
					if err != nil {
						bm.Fatal(err)
					}
					bm.StopTimer()
					if err := admin.Remove(ctx, backend.Options{}, cp); err != nil {
						bm.Fatal(err)
					}
					bm.StartTimer()
				}
			})
			cp := ckpt(bm, src, "bench")
			bm.Cleanup(func() { admin.Remove(ctx, backend.Options{}, cp) })
			bm.Run("new-from", func(bm *testing.B) {
				for bm.Loop() {
					fo := e.options("", kind.mutate)
					fo.From = &cp
					b, err := New(ctx, fo)
					if err != nil {
						bm.Fatal(err)
					}
					bm.StopTimer()
					if got := mustRun(bm, b, "wc -c </root/big"); got != "104857600\n" {
						bm.Fatalf("the fork's file: %q bytes", got)
					}
					b.Close(ctx)
					if err := (envAdmin{}).Remove(ctx, fo, fo.Key); err != nil {
						bm.Fatal(err)
					}
					bm.StartTimer()
				}
			})
		})
	}
}
