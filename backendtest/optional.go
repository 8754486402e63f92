package backendtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/randhex"
	"github.com/a55dbaac/berth/terminal"
)

// fileWriterTests check the backend.FileWriter contract directly: exactly
// the bytes given, the mode asked for, and no file left behind on failure.
func (s *Suite) fileWriterTests(t *testing.T, be backend.Backend, fw backend.FileWriter) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := s.opts.Scratch + "/berth-fw-" + randhex.String(6)
	sh := func(t *testing.T, script string) string {
		t.Helper()
		out, code, err := backend.Output(ctx, be, backend.ProcSpec{Argv: []string{"/bin/sh", "-c", script, "berth-test", dir}}, nil, 64<<20)
		if err != nil || code != 0 {
			t.Fatalf("%q: exit %d, %v: %q", script, code, err, out)
		}
		return string(out)
	}
	sh(t, `mkdir -p "$1"`)
	t.Cleanup(func() {
		backend.Output(context.Background(), be, backend.ProcSpec{Argv: []string{"/bin/sh", "-c", `rm -rf "$1"`, "berth-test", dir}}, nil, 0)
	})

	t.Run("ByteExact", func(t *testing.T) {
		data := make([]byte, 3<<20+17) // every byte value, odd size, past any chunking
		rand.Read(data)
		for i := range 256 {
			data[i] = byte(i)
		}
		name := dir + "/exact.bin"
		err := fw.WriteFile(ctx, name, bytes.NewReader(data), int64(len(data)), 0o640)
		if errors.Is(err, backend.ErrUnsupported) {
			t.Skipf("%s declined %s: %v", be.Name(), name, err)
		}
		if err != nil {
			t.Fatalf("WriteFile: %v", err)
		}
		got := sh(t, `cat "$1/exact.bin"`)
		if got != string(data) {
			t.Fatalf("read back %d bytes, want the %d written (first difference at %d)", len(got), len(data), firstDiff(got, string(data)))
		}
		if mode := strings.TrimSpace(sh(t, `stat -c %a "$1/exact.bin"`)); mode != "640" && mode != "600" && mode != "400" {
			t.Errorf("mode %s, want 640 less the umask", mode)
		}
	})
	t.Run("ShortReaderFailsAndLeavesNothing", func(t *testing.T) {
		name := dir + "/short.bin"
		err := fw.WriteFile(ctx, name, strings.NewReader("only five"), 100, 0o644)
		if errors.Is(err, backend.ErrUnsupported) {
			t.Skipf("%s declined %s: %v", be.Name(), name, err)
		}
		if err == nil {
			t.Fatal("WriteFile with 9 of 100 bytes succeeded")
		}
		if out := sh(t, `[ -e "$1/short.bin" ] && echo left || echo gone`); out != "gone\n" {
			t.Errorf("a failed write left the file behind (%s)", strings.TrimSpace(out))
		}
	})
	t.Run("ExistingFileRefused", func(t *testing.T) {
		sh(t, `echo keep >"$1/exists.txt"`)
		err := fw.WriteFile(ctx, dir+"/exists.txt", strings.NewReader("new"), 3, 0o644)
		if errors.Is(err, backend.ErrUnsupported) {
			t.Skipf("%s declined: %v", be.Name(), err)
		}
		if err == nil {
			t.Error("WriteFile replaced an existing file; the contract says the file does not exist yet")
		}
		if out := sh(t, `cat "$1/exists.txt"`); out != "keep\n" {
			t.Errorf("existing file now holds %q", out)
		}
	})
}

func firstDiff(a, b string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// persistenceTests check reattach and persistence for backends that keep
// environments (Options.Reopen).
func persistenceTests() []namedTest {
	return []namedTest{
		{"ReattachSeesSameEnvironment", (*Suite).testReattach, freshEnv},
		{"KeptDirSurvivesClose", (*Suite).testKeptDirSurvivesClose, freshEnv},
	}
}

// envOn wraps a backend in a terminal environment closed with the test.
func (s *Suite) envOn(t *testing.T, be backend.Backend) *terminal.Environment {
	e := terminal.New(be, terminal.Options{DefaultTimeout: 60 * time.Second, SpillDir: t.TempDir()})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		e.Close(ctx)
	})
	return e
}

func (s *Suite) testReattach(t *testing.T) {
	key := "bt-reattach-" + randhex.String(4)
	a := s.envOn(t, s.opts.Reopen(t, key))
	marker := "/tmp/berth-reattach-" + randhex.String(6)
	expect(t, a, cmd("echo here >"+marker), "", 0)
	// A second backend for the key while the first still holds it: the same
	// environment (a file outside any kept volume is visible), not a copy.
	b := s.envOn(t, s.opts.Reopen(t, key))
	expect(t, b, cmd("cat "+marker), "here", 0)
}

func (s *Suite) testKeptDirSurvivesClose(t *testing.T) {
	key := "bt-kept-" + randhex.String(4)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	value := randhex.String(8)
	file := s.opts.KeptDir + "/.berth-kept-" + value
	first := s.opts.Reopen(t, key)
	e := terminal.New(first, terminal.Options{DefaultTimeout: 60 * time.Second, SpillDir: t.TempDir()})
	expect(t, e, cmd("echo "+value+" >"+file), "", 0)
	if err := e.Close(ctx); err != nil {
		t.Fatalf("closing the first backend: %v", err)
	}
	second := s.envOn(t, s.opts.Reopen(t, key))
	r := run(t, second, cmd("cat "+file))
	if r.Output != value || r.ExitCode != 0 {
		t.Fatalf("after Close and reopen, %s holds %q (exit %d), want %q", file, r.Output, r.ExitCode, value)
	}
	// Not a rebuilt environment pretending to be the old one.
	if r.EnvironmentRecreated {
		t.Errorf("reopening a kept environment reported environment_recreated")
	}
}
