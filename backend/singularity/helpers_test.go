package singularity

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/testenv/apptainerenv"
)

// testEnv is what the tests of one top-level test share: the stand-in on
// PATH, a SIF of the test image, a berth home and a scratch directory.
type testEnv struct {
	bin     string
	image   string
	home    string
	scratch string
	noClean bool // helper berth processes skip the crash clean-up

	mu  sync.Mutex
	env map[string]string // what Options.Getenv sees
}

func setup(t testing.TB) *testEnv {
	t.Helper()
	bin := apptainerenv.Require(t)
	return &testEnv{
		bin:     bin,
		image:   apptainerenv.SIF(t),
		home:    t.TempDir(),
		scratch: t.TempDir(),
		env:     map[string]string{},
	}
}

func (e *testEnv) setenv(k, v string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.env[k] = v
}

func (e *testEnv) getenv(k string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if k == ScratchEnv {
		return e.scratch
	}
	return e.env[k]
}

// options builds backend options for key (a fresh random key when "").
func (e *testEnv) options(key string, mutate func(*config.Terminal)) backend.Options {
	cfg := config.Default().Terminal
	cfg.Backend = Name
	if err := cfg.Set(keyImage, e.image); err != nil {
		panic(err)
	}
	cfg.ContainerPersistent = false
	if mutate != nil {
		mutate(&cfg)
	}
	if key == "" {
		key = randomKey()
	}
	return backend.Options{Key: key, Config: cfg, Home: e.home, Getenv: e.getenv}
}

// mustSet sets a configuration key as a config file or variable would,
// failing the test when the value is refused.
func mustSet(t testing.TB, c *config.Terminal, name string, v any) {
	t.Helper()
	if err := c.Set(name, v); err != nil {
		t.Fatal(err)
	}
}

func randomKey() string {
	var b [6]byte
	rand.Read(b[:])
	return "test-" + hex.EncodeToString(b[:])
}

// newBackend creates a backend and closes it at the end of the test.
func newBackend(t testing.TB, opts backend.Options) *Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	b, err := New(ctx, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := b.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// run runs a shell script through one Start and returns its output and
// status.
func run(t testing.TB, be backend.Backend, script string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, code, err := backend.Output(ctx, be, backend.ProcSpec{Argv: []string{"/bin/sh", "-c", script}}, nil, 1<<20)
	if err != nil {
		t.Fatalf("run %q: %v", script, err)
	}
	return string(out), code
}

func mustRun(t testing.TB, be backend.Backend, script string) string {
	t.Helper()
	out, code := run(t, be, script)
	if code != 0 {
		t.Fatalf("run %q: exit %d: %s", script, code, out)
	}
	return out
}

// instances lists the running berth_ instances through the stand-in.
func (e *testEnv) instances(t testing.TB) []instanceInfo {
	t.Helper()
	bin, err := findBinary("")
	if err != nil {
		t.Fatal(err)
	}
	l, err := (&cli{bin: bin}).list(context.Background(), "berth_*")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func (e *testEnv) running(t testing.TB, name string) *instanceInfo {
	t.Helper()
	for _, i := range e.instances(t) {
		if i.Instance == name {
			return &i
		}
	}
	return nil
}

func contains(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
