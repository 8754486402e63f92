package backendtest

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/a55dbaac/berth/backend"
)

// fakeBackend records what reaches it; it implements every optional
// behaviour but FileWriter.
type fakeBackend struct {
	closed, starts, renews int
	recreated              bool
}

func (f *fakeBackend) Name() string { return "fake" }
func (f *fakeBackend) Start(context.Context, backend.ProcSpec) (backend.Process, error) {
	f.starts++
	return nil, errors.New("fake: no processes")
}
func (f *fakeBackend) Close(context.Context) error { f.closed++; return nil }
func (f *fakeBackend) Capabilities() backend.Capabilities {
	return backend.Capabilities{Isolation: backend.IsolationImage}
}
func (f *fakeBackend) SessionEnv() map[string]string { return map[string]string{"K": "v"} }
func (f *fakeBackend) Recreated() bool               { r := f.recreated; f.recreated = false; return r }
func (f *fakeBackend) Renew(context.Context) bool    { f.renews++; return true }

type fakeWriter struct {
	fakeBackend
	wrote string
}

func (f *fakeWriter) WriteFile(_ context.Context, name string, _ io.Reader, _ int64, _ os.FileMode) error {
	f.wrote = name
	return nil
}

// TestHandleForwardsAndOwnsNothing: a case's handle answers as the shared
// backend does, has a file API exactly when the backend has one, and its
// Close ends the handle (Start refused), never the shared backend.
func TestHandleForwardsAndOwnsNothing(t *testing.T) {
	ctx := context.Background()
	be := &fakeBackend{recreated: true}
	h := share(be)
	if _, ok := h.(backend.FileWriter); ok {
		t.Fatal("a handle on a backend without a file API has one")
	}
	if got := backend.CapabilitiesOf(h); got.Isolation != backend.IsolationImage {
		t.Errorf("capabilities %+v, want the backend's", got)
	}
	if env := h.(backend.SessionEnver).SessionEnv(); env["K"] != "v" {
		t.Errorf("session env %v, want the backend's", env)
	}
	if !h.(backend.Recreator).Recreated() || be.recreated {
		t.Error("Recreated did not reach the backend")
	}
	if !h.(backend.Renewer).Renew(ctx) || be.renews != 1 {
		t.Error("Renew did not reach the backend")
	}
	h.Start(ctx, backend.ProcSpec{Argv: []string{"true"}})
	if be.starts != 1 {
		t.Fatalf("Start reached the backend %d times, want 1", be.starts)
	}
	if err := h.Close(ctx); err != nil || be.closed != 0 {
		t.Fatalf("handle Close: %v, backend closed %d times: a case closed the group's environment", err, be.closed)
	}
	if _, err := h.Start(ctx, backend.ProcSpec{Argv: []string{"true"}}); !errors.Is(err, errHandleClosed) || be.starts != 1 {
		t.Fatalf("Start after the handle's Close: %v (backend starts %d), want it refused", err, be.starts)
	}
	if other := share(be); other.Name() != "fake" {
		t.Fatal("a second handle does not reach the backend")
	}

	w := &fakeWriter{}
	hw := share(w)
	fw, ok := hw.(backend.FileWriter)
	if !ok {
		t.Fatal("a handle on a backend with a file API has none")
	}
	if err := fw.WriteFile(ctx, "/x", strings.NewReader(""), 0, 0o644); err != nil || w.wrote != "/x" {
		t.Fatalf("WriteFile: %v, reached the backend with %q", err, w.wrote)
	}
	hw.Close(ctx)
	if err := fw.WriteFile(ctx, "/y", strings.NewReader(""), 0, 0o644); !errors.Is(err, errHandleClosed) || w.wrote != "/x" {
		t.Fatalf("WriteFile after the handle's Close: %v", err)
	}
}

// TestConfigNamesChecked: a configuration's Groups may name only groups and
// cases the suite has, and the cases about berth's shell code exist.
func TestConfigNamesChecked(t *testing.T) {
	for _, n := range []string{"Process", "Files", "Internal", "Hardening/BackgroundKillKillsEscapedProcesses", "Persistence/KeptDirSurvivesClose"} {
		if !knownName(n) {
			t.Errorf("knownName(%q) = false", n)
		}
	}
	for _, n := range []string{"process", "Terminal/NoSuchCase", "Files/ReadEdges", ""} {
		if knownName(n) {
			t.Errorf("knownName(%q) = true", n)
		}
	}
	for n := range shellOnly {
		if !knownName(n) {
			t.Errorf("shellOnly names %q, which the suite does not have", n)
		}
	}
}

// TestTier: BERTH_TEST_TIER=all selects the full tier; unset or default
// does not.
func TestTier(t *testing.T) {
	for v, want := range map[string]bool{"": false, "default": false, "all": true} {
		t.Setenv(TierVar, v)
		if got := fullTier(t); got != want {
			t.Errorf("%s=%q: full tier %v, want %v", TierVar, v, got, want)
		}
	}
}
