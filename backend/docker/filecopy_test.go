package docker

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/files"
	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
	"github.com/a55dbaac/berth/terminal"
	"github.com/moby/moby/client"
)

func randomBytes(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// newCopyBackend returns a backend whose WriteFile copies content of any
// size through the archive endpoint.
func newCopyBackend(t *testing.T, opts backend.Options) *Backend {
	b := newBackend(t, opts)
	b.copyMin = 0
	return b
}

// writeFile calls b.WriteFile with a deadline.
func writeFile(b *Backend, name string, content []byte, perm os.FileMode) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return b.WriteFile(ctx, name, bytes.NewReader(content), int64(len(content)), perm)
}

// checkInContainer checks, from a process in the container, the file's
// sha256, size, mode and owner.
func checkInContainer(t *testing.T, b backend.Backend, name string, content []byte, mode string) {
	t.Helper()
	out, code := run(t, b, fmt.Sprintf("sha256sum %s | cut -d' ' -f1; stat -c '%%s %%a %%u:%%g' %s", name, name))
	want := fmt.Sprintf("%s\n%d %s 0:0\n", sha256Hex(content), len(content), mode)
	if code != 0 || out != want {
		t.Errorf("%s in the container: %q (exit %d), want %q", name, out, code, want)
	}
}

func testWriteFileExactBytes(t *testing.T) {
	hostDir := t.TempDir()
	b := newCopyBackend(t, testOptions(t, func(c *config.Terminal) {
		mustSet(c, keyVolumes, []string{hostDir + ":/data"})
	}))
	if out, code := run(t, b, "mkdir -p /root/sub/deeper /data/in"); code != 0 {
		t.Fatalf("mkdir: %s", out)
	}
	allBytes := make([]byte, 256*64)
	for i := range allBytes {
		allBytes[i] = byte(i)
	}
	big := randomBytes(t, 20<<20)
	for _, tc := range []struct {
		name    string
		content []byte
		perm    os.FileMode
		mode    string
	}{
		{"/root/hello.txt", []byte("hello\nworld\n"), 0o666, "644"},
		{"/root/empty", nil, 0o666, "644"},
		{"/root/sub/deeper/all.bin", allBytes, 0o600, "600"},
		{"/root/exec.sh", []byte("#!/bin/sh\necho hi\n"), 0o755, "755"},
		{"/root/big.bin", big, 0o666, "644"},
		{"/workspace/volume.bin", allBytes, 0o666, "644"},
		{"/data/in/bind.bin", big, 0o644, "644"},
	} {
		t.Run(filepath.Base(tc.name), func(t *testing.T) {
			start := time.Now()
			if err := writeFile(b, tc.name, tc.content, tc.perm); err != nil {
				t.Fatalf("WriteFile(%s): %v", tc.name, err)
			}
			t.Logf("WriteFile %s (%d bytes): %v", tc.name, len(tc.content), time.Since(start))
			checkInContainer(t, b, tc.name, tc.content, tc.mode)
		})
	}
	// The bind mount's host side holds the same bytes.
	got, err := os.ReadFile(filepath.Join(hostDir, "in", "bind.bin"))
	if err != nil || !bytes.Equal(got, big) {
		t.Errorf("host side of the bind mount: %d bytes, %v; want the 20 MiB written", len(got), err)
	}
}

func testWriteFileDeclinesHiddenPaths(t *testing.T) {
	b := newCopyBackend(t, testOptions(t, nil))
	if out, code := run(t, b, "ln -s /tmp /root/tmplink && mkdir -p /tmp/sub && ln -s /run /root/runlink"); code != 0 {
		t.Fatalf("setup: %s", out)
	}
	for _, name := range []string{
		"/tmp/x", "/tmp/sub/x", "/var/tmp/x", "/run/x", "/dev/shm/x", "/dev/x", "/proc/x",
		"/root/tmplink/x", "/root/tmplink/sub/x", "/root/runlink/x",
	} {
		err := writeFile(b, name, []byte("data"), 0o666)
		if !errors.Is(err, backend.ErrUnsupported) {
			t.Errorf("WriteFile(%s) = %v, want an error wrapping backend.ErrUnsupported", name, err)
		} else if !strings.HasPrefix(err.Error(), "docker: copy to "+name+": ") {
			t.Errorf("WriteFile(%s) error = %q, want it to start with docker: copy to %s:", name, err, name)
		}
	}
	if out, _ := run(t, b, "ls -A /tmp /tmp/sub /run"); strings.Contains(out, "x") {
		t.Errorf("a declined write left something: %q", out)
	}

	// Links that stay in writable places are followed.
	if out, code := run(t, b, "mkdir -p /root/real /workspace/w && ln -s real /root/rel && ln -s /workspace/w /root/abs"); code != 0 {
		t.Fatalf("setup: %s", out)
	}
	for name, real := range map[string]string{"/root/rel/x": "/root/real/x", "/root/abs/y": "/workspace/w/y"} {
		if err := writeFile(b, name, []byte(name), 0o666); err != nil {
			t.Errorf("WriteFile(%s): %v", name, err)
			continue
		}
		checkInContainer(t, b, real, []byte(name), "644")
	}

	// Errors that are not about the path's mount are real errors.
	for name, content := range map[string][]byte{
		"/root/missing-dir/x": []byte("data"),
	} {
		if err := writeFile(b, name, content, 0o666); !errors.Is(err, fs.ErrNotExist) || errors.Is(err, backend.ErrUnsupported) {
			t.Errorf("WriteFile(%s) = %v, want an error wrapping fs.ErrNotExist", name, err)
		}
	}
	err := b.WriteFile(context.Background(), "/root/short", strings.NewReader("abc"), 10, 0o666)
	if err == nil || errors.Is(err, backend.ErrUnsupported) {
		t.Errorf("WriteFile with a short reader = %v, want a plain error", err)
	}
	if out, code := run(t, b, "test -e /root/short"); code == 0 {
		t.Errorf("a short write left /root/short: %q", out)
	}
	if err := b.WriteFile(context.Background(), "relative", strings.NewReader(""), 0, 0o666); err == nil {
		t.Error("WriteFile with a relative path succeeded")
	}
}

func testWriteFileReadOnlyRoot(t *testing.T) {
	hostDir := t.TempDir()
	b := newCopyBackend(t, testOptions(t, func(c *config.Terminal) {
		mustSet(c, keyReadOnly, true)
		mustSet(c, keyVolumes, []string{hostDir + ":/data", hostDir + ":/data-ro:ro"})
	}))
	for _, name := range []string{"/etc/x", "/x", "/usr/x", "/data-ro/x", "/tmp/x"} {
		if err := writeFile(b, name, []byte("data"), 0o666); !errors.Is(err, backend.ErrUnsupported) {
			t.Errorf("WriteFile(%s) on a read-only root = %v, want an error wrapping backend.ErrUnsupported", name, err)
		}
	}
	content := randomBytes(t, 100<<10)
	for _, name := range []string{"/root/ok.bin", "/workspace/ok.bin", "/data/ok.bin"} {
		if err := writeFile(b, name, content, 0o666); err != nil {
			t.Errorf("WriteFile(%s) on a read-only root: %v", name, err)
			continue
		}
		checkInContainer(t, b, name, content, "644")
	}
}

func testWriteFileRecoversRemovedContainer(t *testing.T) {
	b := newCopyBackend(t, testOptions(t, nil))
	cli := dockerenv.Require(t)
	ctx := context.Background()
	if _, err := cli.ContainerRemove(ctx, b.ContainerID(), client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(b, "/root/after", []byte("back"), 0o666); err != nil {
		t.Fatalf("WriteFile after the container was removed: %v", err)
	}
	if !b.Recreated() {
		t.Error("Recreated() = false after WriteFile recreated the container")
	}
	checkInContainer(t, b, "/root/after", []byte("back"), "644")

	timeout := 1
	if _, err := cli.ContainerStop(ctx, b.ContainerID(), client.ContainerStopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(b, "/root/after-stop", []byte("again"), 0o666); err != nil {
		t.Fatalf("WriteFile after the container was stopped: %v", err)
	}
	if !b.Recreated() {
		t.Error("Recreated() = false after WriteFile restarted the container")
	}
	checkInContainer(t, b, "/root/after-stop", []byte("again"), "644")
}

// countingBackend counts how WriteFile calls ended.
type countingBackend struct {
	*Backend
	copied   atomic.Int32 // through the archive API
	declined atomic.Int32 // backend.ErrUnsupported
}

func (c *countingBackend) WriteFile(ctx context.Context, name string, r io.Reader, size int64, perm os.FileMode) error {
	err := c.Backend.WriteFile(ctx, name, r, size, perm)
	switch {
	case err == nil:
		c.copied.Add(1)
	case errors.Is(err, backend.ErrUnsupported):
		c.declined.Add(1)
	}
	return err
}

func newEnv(t testing.TB, be backend.Backend) *terminal.Environment {
	env := terminal.New(be, terminal.Options{SpillDir: t.TempDir()})
	t.Cleanup(func() { env.Close(context.Background()) })
	return env
}

func testFilesWriteUsesArchive(t *testing.T) {
	cb := &countingBackend{Backend: newBackend(t, testOptions(t, nil))}
	env := newEnv(t, cb)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	write := func(name string, content []byte, wantCopied, wantDeclined int32) {
		t.Helper()
		res, err := files.Write(ctx, env, name, string(content))
		if err != nil {
			t.Fatalf("files.Write(%s): %v", name, err)
		}
		if res.BytesWritten != int64(len(content)) {
			t.Errorf("files.Write(%s) = %+v, want %d bytes written", name, res, len(content))
		}
		if c, d := cb.copied.Load(), cb.declined.Load(); c != wantCopied || d != wantDeclined {
			t.Errorf("after files.Write(%s, %d bytes): %d copies through the API, %d declined; want %d, %d",
				name, len(content), c, d, wantCopied, wantDeclined)
		}
		out, _ := run(t, cb, "ls -A "+filepath.Dir(name))
		for _, f := range strings.Fields(out) {
			if strings.HasPrefix(f, ".berth-") && strings.HasSuffix(f, ".tmp") {
				t.Errorf("a temporary file was left in %s: %q", filepath.Dir(name), f)
			}
		}
	}

	big := randomBytes(t, copyMinSize+1<<20)
	write("/root/proj/big.bin", big, 1, 0) // parent created by the shell
	checkInContainer(t, cb, "/root/proj/big.bin", big, "644")
	write("/tmp/big.bin", big, 1, 1) // tmpfs: declined, the shell writes it
	checkInContainer(t, cb, "/tmp/big.bin", big, "644")
	small := randomBytes(t, 1<<20)
	write("/root/small.bin", small, 1, 2) // below copyMinSize: the shell is faster
	checkInContainer(t, cb, "/root/small.bin", small, "644")
	write("/tmp/small.txt", []byte("small\n"), 1, 2) // inline size: the API is not even asked
	checkInContainer(t, cb, "/tmp/small.txt", []byte("small\n"), "644")

	// Replacing a file through the API keeps its mode.
	if out, code := run(t, cb, "chmod 751 /root/proj/big.bin"); code != 0 {
		t.Fatal(out)
	}
	big2 := randomBytes(t, len(big))
	write("/root/proj/big.bin", big2, 2, 2)
	checkInContainer(t, cb, "/root/proj/big.bin", big2, "751")
}

// shellOnly hides the backend's WriteFile, so files.Write takes the shell
// path (a helper process's stdin for large content).
type shellOnly struct{ backend.Backend }

// BenchmarkFilesWrite compares files.Write through the archive API
// ("archive": any size; "default": from copyMinSize on) with the shell path
// alone, for 1 MiB and 50 MiB.
func BenchmarkFilesWrite(bm *testing.B) {
	for _, size := range []int{1 << 20, 50 << 20} {
		content := string(randomBytes(bm, size))
		for _, via := range []string{"default", "archive", "shell"} {
			bm.Run(fmt.Sprintf("%s/%dMiB", via, size>>20), func(bm *testing.B) {
				b := newBackend(bm, testOptions(bm, nil))
				var be backend.Backend = b
				switch via {
				case "archive":
					b.copyMin = 0
				case "shell":
					be = shellOnly{be}
				}
				env := newEnv(bm, be)
				ctx := context.Background()
				bm.SetBytes(int64(size))
				bm.ResetTimer()
				for i := 0; i < bm.N; i++ {
					if _, err := files.Write(ctx, env, "/root/bench.bin", content); err != nil {
						bm.Fatal(err)
					}
				}
			})
		}
	}
}
