package ssh

import (
	"context"
	"testing"

	"github.com/a55dbaac/berth/internal/testenv/sshenv"
)

// BenchmarkCheckpoint times a checkpoint, and a new environment made from
// one (until New returns: the copy is made and the environment takes
// commands), of a workspace holding 100 MB of random bytes, on the
// private sshd on this machine: the copies are cp -a --reflink=auto on the
// host, so the figure is the host's filesystem's (plain copies on ext4,
// clones on XFS or btrfs) plus a few commands over the connection.
//
//	BERTH_TEST_ENGINES=ssh go test -run '^$' -bench Checkpoint -benchtime 5x ./backend/ssh/
func BenchmarkCheckpoint(bm *testing.B) {
	s := sshenv.Start(bm)
	ws := bm.TempDir()
	src := newTestBackend(bm, wsTestOptions(s, ws))
	if got := out(bm, src, "head -c 104857600 /dev/urandom >big && wc -c <big"); got != "104857600\n" {
		bm.Fatalf("the source's file: %q bytes", got)
	}
	ctx := context.Background()
	bm.Run("checkpoint", func(bm *testing.B) {
		for bm.Loop() {
			cp, err := src.Checkpoint(ctx, "bench")
			if err != nil {
				bm.Fatal(err)
			}
			bm.StopTimer()
			if err := (checkpointAdmin{}).Remove(ctx, wsTestOptions(s, ws), cp); err != nil {
				bm.Fatal(err)
			}
			bm.StartTimer()
		}
	})
	cp := checkpoint(bm, src, "bench")
	bm.Run("new-from", func(bm *testing.B) {
		for bm.Loop() {
			opts := wsTestOptions(s, ws)
			opts.Key, opts.From = "bench-fork", &cp
			b, err := New(ctx, opts)
			if err != nil {
				bm.Fatal(err)
			}
			bm.StopTimer()
			if got := out(bm, b, "wc -c <big"); got != "104857600\n" {
				bm.Fatalf("the fork's file: %q bytes", got)
			}
			b.Close(ctx)
			if err := (envAdmin{}).Remove(ctx, wsTestOptions(s, ws), "bench-fork"); err != nil {
				bm.Fatal(err)
			}
			bm.StartTimer()
		}
	})
}
