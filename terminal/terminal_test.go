package terminal

import (
	"context"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/local"
)

func TestFreshShellCarriesNoState(t *testing.T) {
	ctx := context.Background()
	for _, fresh := range []bool{false, true} {
		// A closed backend refuses to start anything: one per environment.
		be, err := local.New(backend.Options{})
		if err != nil {
			t.Fatal(err)
		}
		c := struct {
			fresh bool
			want  string
		}{fresh, "kept /"}
		if fresh {
			c.want = " " + be.Dir()
		}
		e := New(be, Options{SpillDir: t.TempDir(), FreshShell: c.fresh})
		e.Run(ctx, Request{Command: "export V=kept; cd /"})
		r := e.Run(ctx, Request{Command: "echo \"$V\" \"$PWD\""})
		if r.Output != c.want {
			t.Errorf("fresh=%v: got %q, want %q", c.fresh, r.Output, c.want)
		}
		e.Close(ctx)
	}
}
