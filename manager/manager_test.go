package manager_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/terminal"
)

// A backend constructor that panics answers every caller of its key with
// an error; none of them hangs.
func TestConstructorPanicIsAnError(t *testing.T) {
	cfg := config.Default()
	cfg.Home = t.TempDir()
	m := manager.NewWithFactory(cfg, nil, func(ctx context.Context, _ backend.Options) (backend.Backend, error) {
		panic("boom")
	})
	defer m.CloseAll(context.Background())
	for i := range 2 {
		done := make(chan terminal.Result, 1)
		go func() { done <- m.Run(context.Background(), "k", terminal.Request{Command: "true"}) }()
		select {
		case r := <-done:
			if r.Err == nil || !strings.Contains(r.Err.Error(), "panicked: boom") {
				t.Fatalf("call %d: %+v, want the panic as an error", i, r)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("call %d hung after a constructor panic", i)
		}
	}
}
