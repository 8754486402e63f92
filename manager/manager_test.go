package manager_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
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

// A backend constructor that ends its goroutine (a test helper's t.Fatal
// inside the factory does: runtime.Goexit) still answers the entry, so
// the CloseAll that the test's cleanup then runs on the same goroutine
// returns at once instead of waiting for a create that never ends.
func TestCloseAllAfterFactoryExitsItsGoroutine(t *testing.T) {
	m := manager.NewWithFactory(&config.Config{Home: t.TempDir(), Terminal: config.Default().Terminal}, nil,
		func(ctx context.Context, opts backend.Options) (backend.Backend, error) {
			runtime.Goexit()
			return nil, nil
		})
	closed := make(chan error, 1)
	go func() {
		defer func() {
			// Runs after Goexit unwound Env, as t.Cleanup runs after t.Fatal.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			closed <- m.CloseAll(ctx)
		}()
		m.Env(context.Background(), "k")
	}()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("CloseAll: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("CloseAll still waits for the abandoned create after 30 s")
	}
	if _, err := m.Env(context.Background(), "k"); !errors.Is(err, manager.ErrClosed) {
		t.Errorf("Env after CloseAll: %v", err)
	}
}

// The progress reporter set on the manager reaches the backend's
// constructor, which reports its set-up steps through it.
func TestProgressReachesTheBackend(t *testing.T) {
	var steps []string
	m := manager.NewWithFactory(&config.Config{Home: t.TempDir(), Terminal: config.Default().Terminal}, nil,
		func(ctx context.Context, opts backend.Options) (backend.Backend, error) {
			opts.Begin("making things", "").End(nil)
			return nil, errors.New("no backend here")
		})
	m.SetProgress(func(ev backend.Event) { steps = append(steps, fmt.Sprintf("%s end=%v", ev.Step, ev.End)) })
	m.Env(context.Background(), "k")
	if strings.Join(steps, ";") != "making things end=false;making things end=true" {
		t.Errorf("events: %q", steps)
	}
}
