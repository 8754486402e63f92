package docker

import (
	"context"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
)

// BenchmarkCheckpoint times a checkpoint, and a new environment made from
// one (until New returns: the container runs and takes commands), of an
// environment that wrote 100 MB of random bytes: in its /root volume
// (copied by the helper) or in its own filesystem (the writable layer,
// committed). Issue 31 asks ≤ 2 s for each.
//
//	BERTH_TEST_ENGINES=docker go test -run '^$' -bench Checkpoint -benchtime 5x ./backend/docker/
func BenchmarkCheckpoint(bm *testing.B) {
	dockerenv.Require(bm)
	for _, where := range []struct{ name, file string }{
		{"volume", "/root/big"},
		{"layer", "/opt/big"},
	} {
		bm.Run(where.name, func(bm *testing.B) {
			src := newBackend(bm, testOptions(bm, nil))
			mustRun(bm, src, "mkdir -p /opt && head -c 104857600 /dev/urandom >"+where.file)
			ctx := context.Background()
			bm.Run("checkpoint", func(bm *testing.B) {
				for bm.Loop() {
					cp, err := src.Checkpoint(ctx, "bench")
					if err != nil {
						bm.Fatal(err)
					}
					bm.StopTimer()
					if err := (checkpointAdmin{}).Remove(ctx, backend.Options{}, cp); err != nil {
						bm.Fatal(err)
					}
					bm.StartTimer()
				}
			})
			cp := checkpoint(bm, src, "bench")
			bm.Run("new-from", func(bm *testing.B) {
				for bm.Loop() {
					opts := fromCheckpoint(bm, cp, nil)
					b, err := New(ctx, opts)
					if err != nil {
						bm.Fatal(err)
					}
					bm.StopTimer()
					if out := mustRun(bm, b, "wc -c <"+where.file); out != "104857600\n" {
						bm.Fatalf("%s in the new environment: %q bytes", where.file, out)
					}
					cctx, cancel := context.WithTimeout(ctx, time.Minute)
					if err := b.Close(cctx); err != nil {
						bm.Fatal(err)
					}
					cancel()
					bm.StartTimer()
				}
			})
		})
	}
}
