package terminal

import (
	"context"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/local"
)

func TestFreshShellCarriesNoState(t *testing.T) {
	be, err := local.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		fresh bool
		want  string
	}{{false, "kept /"}, {true, " " + be.Dir()}} {
		e := New(be, Options{SpillDir: t.TempDir(), FreshShell: c.fresh})
		e.Run(ctx, Request{Command: "export V=kept; cd /"})
		r := e.Run(ctx, Request{Command: "echo \"$V\" \"$PWD\""})
		if r.Output != c.want {
			t.Errorf("fresh=%v: got %q, want %q", c.fresh, r.Output, c.want)
		}
		e.Close(ctx)
	}
}
