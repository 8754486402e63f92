package modal

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/randhex"
	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
	"github.com/a55dbaac/berth/internal/testenv/modalfake"
	"github.com/a55dbaac/berth/terminal"
)

// fixture is a fake Modal and a berth home shared by the backends a test
// builds, with the variables berth would read from its environment.
type fixture struct {
	srv  *modalfake.Server
	home string
	mu   sync.Mutex
	env  map[string]string
}

func newFixture(t testing.TB) *fixture { return newFixtureWith(t, modalfake.Faults{}) }

// newFixtureWith is newFixture on a fake that shows faults.
func newFixtureWith(t testing.TB, faults modalfake.Faults) *fixture {
	t.Helper()
	srv := modalfake.StartWith(t, faults)
	f := &fixture{srv: srv, home: t.TempDir(), env: map[string]string{}}
	for k, v := range srv.Env() {
		f.env[k] = v
	}
	// No ~/.modal.toml: the credentials come from the variables.
	f.env["HOME"] = t.TempDir()
	return f
}

func (f *fixture) setenv(k, v string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.env[k] = v
}

func (f *fixture) getenv(k string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.env[k]
}

// mustSet sets a configuration key in a test; a refused value is a bug in
// the test itself.
func mustSet(c *config.Terminal, name string, v any) {
	if err := c.Set(name, v); err != nil {
		panic(err)
	}
}

// options builds backend options for key (random when "").
func (f *fixture) options(t testing.TB, key string, edit func(*config.Terminal)) backend.Options {
	t.Helper()
	cfg := config.Default().Terminal
	cfg.Backend = Name
	mustSet(&cfg, keyImage, dockerenv.ImageRef)
	cfg.ContainerPersistent = false
	if edit != nil {
		edit(&cfg)
	}
	if key == "" {
		key = "t-" + randhex.String(4)
	}
	return backend.Options{
		Key:    key,
		Config: cfg,
		Home:   f.home,
		Getenv: f.getenv,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

// newBackend builds a backend closed at the end of the test.
func newBackend(t testing.TB, opts backend.Options) *Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := New(ctx, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := b.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// newEnv wraps a backend in the terminal layer, closed with the test.
func newEnv(t testing.TB, be backend.Backend) *terminal.Environment {
	e := terminal.New(be, terminal.Options{DefaultTimeout: 60 * time.Second, SpillDir: t.TempDir()})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		e.Close(ctx)
	})
	return e
}

// sh runs a script to completion through the backend.
func sh(t testing.TB, be backend.Backend, script string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, code, err := backend.Output(ctx, be, backend.ProcSpec{Argv: []string{"/bin/sh", "-c", script}}, nil, 1<<20)
	if err != nil {
		t.Fatalf("%q: %v", script, err)
	}
	return string(out), code
}

// mustRun runs a terminal command and fails on a tool error.
func mustRun(t testing.TB, e *terminal.Environment, req terminal.Request) terminal.Result {
	t.Helper()
	r := e.Run(context.Background(), req)
	if r.Error != nil {
		t.Fatalf("%q: %s", req.Command, *r.Error)
	}
	return r
}

// sandboxInfo finds a sandbox the fake knows.
func sandboxInfo(t testing.TB, srv *modalfake.Server, id string) modalfake.SandboxInfo {
	t.Helper()
	for _, s := range srv.Sandboxes() {
		if s.ID == id {
			return s
		}
	}
	t.Fatalf("the fake knows no sandbox %s", id)
	return modalfake.SandboxInfo{}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
