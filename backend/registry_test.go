package backend_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
)

func newNothing(context.Context, backend.Options) (backend.Backend, error) {
	return nil, fmt.Errorf("not for running")
}

// A registration's keys become configuration keys: in the file, in
// variables and through the accessors, with the backend's default.
func TestRegisterDeclaresKeys(t *testing.T) {
	backend.Register(backend.Registration{
		Name: "regtest", New: newNothing,
		Keys: []config.Key{
			{Name: "regtest_image", Default: "base:1", Help: "image"},
			{Name: "regtest_slots", Default: 4, Help: "slots"},
		},
	})
	if !slices.Contains(backend.Names(), "regtest") || !slices.Contains(config.Keys(), "terminal.regtest_slots") {
		t.Fatalf("names %v keys %v", backend.Names(), config.Keys())
	}
	r, _ := backend.Lookup("regtest")
	if len(r.Keys) != 2 {
		t.Errorf("Lookup lost the keys: %+v", r.Keys)
	}
	home := t.TempDir()
	env := map[string]string{"BERTH_HOME": home, "TERMINAL_REGTEST_SLOTS": "8"}
	cfg, err := config.Load(config.LoadOptions{Getenv: func(k string) string { return env[k] }, Flags: map[string]string{"backend": "regtest"}})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Terminal.Int("regtest_slots") != 8 || cfg.Terminal.String("regtest_image") != "base:1" || cfg.Terminal.Backend != "regtest" {
		t.Errorf("slots %d image %q backend %q", cfg.Terminal.Int("regtest_slots"), cfg.Terminal.String("regtest_image"), cfg.Terminal.Backend)
	}
	if c := backend.Choices(); !strings.Contains(c, "regtest") {
		t.Errorf("Choices() = %q", c)
	}
}

// Two backends may share a key of one kind; a key of another kind, a
// shared key redeclared with another kind, or a second registration of a
// name is a programming error that panics at Register and registers
// nothing.
func TestRegisterKeyConflictsPanic(t *testing.T) {
	backend.Register(backend.Registration{Name: "conf_a", New: newNothing, Keys: []config.Key{{Name: "conf_shared", Default: "x"}}})
	backend.Register(backend.Registration{Name: "conf_b", New: newNothing, Keys: []config.Key{
		{Name: "conf_shared", Default: "y"}, {Name: "container_cpu", Default: 2.0}}})

	for _, tt := range []struct {
		r    backend.Registration
		want string
	}{
		{backend.Registration{Name: "conf_c", New: newNothing, Keys: []config.Key{{Name: "conf_shared", Default: 1}}},
			"backend: Register conf_c: config: backend conf_c: key conf_shared: declared as a whole number (int), but backend conf_a, conf_b declares it as a string"},
		{backend.Registration{Name: "conf_d", New: newNothing, Keys: []config.Key{{Name: "timeout", Default: "soon"}}},
			"key timeout: declared as a string, but the shared configuration declares it as a whole number"},
		{backend.Registration{Name: "conf_a", New: newNothing}, "backend: Register called twice for conf_a"},
		{backend.Registration{Name: "conf_e"}, "needs a name and a constructor"},
	} {
		func() {
			defer func() {
				r := recover()
				if r == nil || !strings.Contains(fmt.Sprint(r), tt.want) {
					t.Errorf("Register(%s): panic %v, want %q", tt.r.Name, r, tt.want)
				}
			}()
			backend.Register(tt.r)
		}()
		if tt.r.Name != "conf_a" {
			if _, ok := backend.Lookup(tt.r.Name); ok {
				t.Errorf("%s registered despite the panic", tt.r.Name)
			}
		}
	}
	if b, _ := config.BackendNames(); slices.Contains(b, "conf_c") || slices.Contains(b, "conf_d") {
		t.Errorf("config took a refused backend: %v", b)
	}
}
