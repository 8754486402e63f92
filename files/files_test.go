package files_test

import (
	"context"
	"fmt"
	"github.com/a55dbaac/berth/backendtest"
	"github.com/a55dbaac/berth/files"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/local"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/testenv"
	"github.com/a55dbaac/berth/terminal"
)

// shellOnly hides the local backend's type, so the file tools take the
// shell path that docker and ssh use.
type shellOnly struct{ backend.Backend }

// withFileWriter is a shell-only local backend that also offers the
// FileWriter capability, counting its uses.
type withFileWriter struct {
	backend.Backend
	uses *atomic.Int64
}

func (w withFileWriter) WriteFile(ctx context.Context, name string, r io.Reader, size int64, perm os.FileMode) error {
	w.uses.Add(1)
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != size {
		err = io.ErrShortWrite
	}
	return err
}

func localEnv(t testing.TB, wrap func(backend.Backend) backend.Backend) *terminal.Environment {
	be, err := local.New(backend.Options{Config: config.Default().Terminal})
	if err != nil {
		t.Fatal(err)
	}
	env := terminal.New(wrap(be), terminal.Options{})
	t.Cleanup(func() { env.Close(context.Background()) })
	return env
}

func TestConformanceLocalNative(t *testing.T) {
	backendtest.RunFiles(t, func() *terminal.Environment {
		env := localEnv(t, func(b backend.Backend) backend.Backend { return b })
		if !files.IsNative(env) {
			t.Fatal("the local backend is not recognised as native")
		}
		return env
	}())
}

func TestConformanceLocalShell(t *testing.T) {
	backendtest.RunFiles(t, func() *terminal.Environment {
		env := localEnv(t, func(b backend.Backend) backend.Backend { return shellOnly{b} })
		if files.IsNative(env) {
			t.Fatal("shellOnly is taken for native")
		}
		return env
	}())
}

func TestConformanceLocalShellGrepFallback(t *testing.T) {
	files.SetNoRipgrep(t, true)
	backendtest.RunFiles(t, func() *terminal.Environment {
		return localEnv(t, func(b backend.Backend) backend.Backend { return shellOnly{b} })
	}())
}

func TestConformanceLocalFileWriter(t *testing.T) {
	var uses atomic.Int64
	backendtest.RunFiles(t, func() *terminal.Environment {
		return localEnv(t, func(b backend.Backend) backend.Backend { return withFileWriter{b, &uses} })
	}())
	if uses.Load() == 0 {
		t.Fatal("the FileWriter capability was never used")
	}
}

// decliningWriter offers FileWriter but declines every path, as docker does
// for tmpfs mounts and ssh for servers without SFTP.
type decliningWriter struct {
	backend.Backend
	asked *atomic.Int64
}

func (w decliningWriter) WriteFile(ctx context.Context, name string, r io.Reader, size int64, perm os.FileMode) error {
	w.asked.Add(1)
	return fmt.Errorf("declined %s: %w", name, backend.ErrUnsupported)
}

func TestFileWriterDecliningFallsBackToShell(t *testing.T) {
	var asked atomic.Int64
	env := localEnv(t, func(b backend.Backend) backend.Backend { return decliningWriter{b, &asked} })
	path := filepath.Join(t.TempDir(), "f.txt")
	content := strings.Repeat("through the shell\n", 2000) // past the inline size
	if _, err := files.Write(context.Background(), env, path, content); err != nil {
		t.Fatalf("write with a declining FileWriter: %v", err)
	}
	if asked.Load() != 1 {
		t.Fatalf("FileWriter asked %d times, want 1", asked.Load())
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != content {
		t.Fatalf("file holds %d bytes (%v), want %d", len(b), err, len(content))
	}
}

// TestConformanceBusybox runs the shell path with nothing but busybox on
// PATH (its sh, grep, find, stat ...), as in a minimal container.
func TestConformanceBusybox(t *testing.T) {
	var bb string
	testenv.Need(t, testenv.BusyBox, func() (err error) {
		bb, err = exec.LookPath("busybox")
		return err
	})
	dir := t.TempDir()
	out, err := exec.Command(bb, "--list").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, applet := range strings.Fields(string(out)) {
		if err := os.Symlink(bb, filepath.Join(dir, applet)); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir)
	backendtest.RunFiles(t, func() *terminal.Environment {
		env := localEnv(t, func(b backend.Backend) backend.Backend { return shellOnly{b} })
		r := env.Run(context.Background(), terminal.Request{Command: "command -v bash; command -v rg; grep --help 2>&1 | head -n 1"})
		if strings.Contains(r.Output, "bash") || strings.Contains(r.Output, "rg") || !strings.Contains(r.Output, "BusyBox") {
			t.Fatalf("environment is not busybox-only: %+v", r)
		}
		return env
	}())
}

// TestMeasureWrite reports how long writes of 1 MiB and 50 MiB take on the
// shell path, through the session's stdin and through a helper's stdin.
// It only runs with BERTH_MEASURE=1.
func TestMeasureWrite(t *testing.T) {
	if os.Getenv("BERTH_MEASURE") == "" {
		t.Skip("set BERTH_MEASURE=1 to measure")
	}
	env := localEnv(t, func(b backend.Backend) backend.Backend { return shellOnly{b} })
	nat := localEnv(t, func(b backend.Backend) backend.Backend { return b })
	dir := t.TempDir()
	ctx := context.Background()
	text := func(n int) string {
		return strings.Repeat("0123456789abcdef0123456789abcdef0123456789abcdef012345678901234\n", n/64+1)[:n]
	}
	for _, n := range []int{4 << 10, 16 << 10, 1 << 20, 50 << 20} {
		content := text(n)
		for _, mode := range []string{"session", "helper", "native"} {
			if mode == "session" && n > 1<<20 {
				continue // about 80 s; measured once by hand
			}
			switch mode {
			case "session":
				files.SetSessionStdinMax(t, n)
			case "helper":
				files.SetSessionStdinMax(t, -1)
			}
			e := env
			if mode == "native" {
				e = nat
			}
			start := time.Now()
			if _, err := files.Write(ctx, e, filepath.Join(dir, "m.txt"), content); err != nil {
				t.Fatal(err)
			}
			t.Logf("write %8d bytes via %-7s: %v", n, mode, time.Since(start))
		}
	}
	for _, n := range []int{1 << 20, 50 << 20} {
		os.WriteFile(filepath.Join(dir, "r.txt"), []byte(text(n)), 0o644)
		for _, e := range []*terminal.Environment{env, nat} {
			start := time.Now()
			if _, err := files.Read(ctx, e, filepath.Join(dir, "r.txt"), 1, 2000); err != nil {
				t.Fatal(err)
			}
			t.Logf("read 2000 lines of %d bytes (native %v): %v", n, files.IsNative(e), time.Since(start))
		}
	}
}
