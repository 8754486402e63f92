package local

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/local/confine"
	"github.com/a55dbaac/berth/config"
)

// TestFallbacks is what berth does on a kernel that cannot confine:
// refuse, naming what is missing and the settings that change it, or, with
// local_sandbox_fallback off, run unconfined and say so.
func TestFallbacks(t *testing.T) {
	saved := confineNew
	defer func() { confineNew = saved }()
	missing := "confining signals needs Landlock ABI 6 (Linux 6.12); this kernel has ABI 5"
	confineNew = func(confine.Policy) (*confine.Domain, error) {
		return nil, &confine.UnsupportedError{Missing: []string{missing}}
	}
	build := func(fallback string) (*Local, string, error) {
		cfg := config.Default().Terminal
		cfg.Cwd = t.TempDir()
		for k, v := range map[string]string{keySandbox: SandboxWorkspace, keyFallback: fallback} {
			if err := cfg.Set(k, v); err != nil {
				t.Fatal(err)
			}
		}
		var logs bytes.Buffer
		l, err := New(backend.Options{Config: cfg, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		return l, logs.String(), err
	}

	_, _, err := build(FallbackRefuse)
	if err == nil {
		t.Fatal("refuse: an environment started unconfined")
	}
	for _, want := range []string{"terminal.local_sandbox=workspace cannot be enforced", missing, "refuses to run unconfined", "local_sandbox_fallback to partial", "terminal.backend docker"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refuse: %q lacks %q", err, want)
		}
	}

	l, logs, err := build(FallbackOff)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	if c := l.Capabilities(); l.sb != nil || c.Isolation != backend.IsolationNone || !c.NativeFS {
		t.Fatal("fallback off: the environment claims confinement")
	}
	if !strings.Contains(logs, "UNCONFINED") || !strings.Contains(logs, missing) {
		t.Fatalf("fallback off: the log does not say so: %s", logs)
	}
}

// BenchmarkRepositorySearch is the bounded search for repositories: in
// this module's tree, and in /usr, where it reads its gitSearchDirs
// directories and stops.
func BenchmarkRepositorySearch(b *testing.B) {
	_, file, _, _ := runtime.Caller(0)
	for _, c := range []struct{ name, tree string }{
		{"module", filepath.Join(filepath.Dir(file), "..", "..")},
		{"usr", "/usr"},
	} {
		b.Run(c.name, func(b *testing.B) {
			var g guard
			for b.Loop() {
				g = guard{}
				g.repositories([]string{c.tree})
			}
			b.ReportMetric(float64(len(g.pinned)), "repos")
		})
	}
}
