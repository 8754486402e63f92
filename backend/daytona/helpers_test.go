package daytona

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/randhex"
	"github.com/a55dbaac/berth/internal/testenv/daytonafake"
	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
)

// testOptions returns backend options for a fresh environment key on the
// fake, with the test image and a throwaway sandbox; mod adjusts the
// configuration, env adds variables to what Getenv sees.
func testOptions(t testing.TB, fake *daytonafake.Server, mod func(*config.Terminal), env map[string]string) backend.Options {
	t.Helper()
	c := config.Default().Terminal
	c.Backend = Name
	if err := c.Set(KeyImage, dockerenv.Image(t)); err != nil {
		t.Fatal(err)
	}
	c.ContainerPersistent = false
	c.ContainerMemory = 512
	c.ContainerDisk = 2048
	if mod != nil {
		mod(&c)
	}
	vars := map[string]string{EnvAPIURL: fake.APIURL(), EnvAPIKey: fake.APIKey()}
	for k, v := range env {
		vars[k] = v
	}
	return backend.Options{
		Key:    "t-" + randhex.String(6),
		Config: c,
		Home:   t.TempDir(),
		Logger: testLogger(t),
		Getenv: func(k string) string { return vars[k] },
	}
}

// newBackend creates a backend and closes it (removing or stopping its
// sandbox) at the end of the test.
func newBackend(t testing.TB, opts backend.Options) *Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := New(ctx, opts)
	if err != nil {
		t.Fatalf("daytona.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := b.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return b
}

// testLogger discards the backend's logs unless BERTH_TEST_LOG is set.
func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("BERTH_TEST_LOG") == "" {
		return slog.New(slog.NewTextHandler(nopWriter{}, nil))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }

// recordLogs is a slog handler that keeps every record's message and
// attributes as one line.
type recordLogs struct {
	lines atomic.Pointer[[]string]
}

func (r *recordLogs) Enabled(context.Context, slog.Level) bool { return true }
func (r *recordLogs) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Level.String() + " " + rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	for {
		old := r.lines.Load()
		var next []string
		if old != nil {
			next = append(next, *old...)
		}
		next = append(next, b.String())
		if r.lines.CompareAndSwap(old, &next) {
			return nil
		}
	}
}
func (r *recordLogs) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recordLogs) WithGroup(string) slog.Handler      { return r }

func (r *recordLogs) all() []string {
	if p := r.lines.Load(); p != nil {
		return *p
	}
	return nil
}

// run runs a shell script in the backend to completion.
func run(t testing.TB, be backend.Backend, script string, stdin string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var in *strings.Reader
	if stdin != "" {
		in = strings.NewReader(stdin)
	}
	var out []byte
	var code int
	var err error
	if in != nil {
		out, code, err = backend.Output(ctx, be, backend.ProcSpec{Argv: []string{"/bin/sh", "-c", script}}, in, 0)
	} else {
		out, code, err = backend.Output(ctx, be, backend.ProcSpec{Argv: []string{"/bin/sh", "-c", script}}, nil, 0)
	}
	if err != nil {
		t.Fatalf("%q: %v", script, err)
	}
	return string(out), code
}
