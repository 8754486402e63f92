package ssh

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
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/files"
	"github.com/a55dbaac/berth/internal/testenv/sshenv"
	"github.com/a55dbaac/berth/terminal"
)

// remoteDir creates a private directory on the remote host and returns its
// absolute path.
func remoteDir(t testing.TB, b backend.Backend) string {
	t.Helper()
	r := run(t, b, sh(`d=$(mktemp -d /tmp/berth-sftp-XXXXXX) && printf %s "$d"`))
	if r.err != nil || r.code != 0 || !strings.HasPrefix(r.out, "/tmp/berth-sftp-") {
		t.Fatalf("mktemp: %+v", r)
	}
	t.Cleanup(func() { run(t, b, sh("rm -rf "+r.out)) })
	return r.out
}

// remoteSum returns the sha256 and octal mode of a remote file as seen by a
// remote process.
func remoteSum(t testing.TB, b backend.Backend, name string) (sum, mode string) {
	t.Helper()
	r := run(t, b, backend.ProcSpec{Argv: []string{"sh", "-c", `sha256sum <"$1" && stat -c %a "$1"`, "sh", name}})
	if r.err != nil || r.code != 0 {
		t.Fatalf("sha256sum %s: %+v", name, r)
	}
	f := strings.Fields(r.out)
	if len(f) != 3 {
		t.Fatalf("sha256sum %s: %q", name, r.out)
	}
	return f[0], f[2]
}

func sha(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

func randomBytes(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func exists(t testing.TB, b backend.Backend, name string) bool {
	t.Helper()
	return run(t, b, backend.ProcSpec{Argv: []string{"test", "-e", name}}).code == 0
}

func testWriteFileSFTP(t *testing.T) {
	s := sshenv.Start(t)
	b := newTestBackend(t, testOptions(s, nil))
	dir := remoteDir(t, b)
	umask := strings.TrimSpace(run(t, b, sh("umask")).out)

	binary := make([]byte, 0, 3*256)
	for i := range 3 * 256 {
		binary = append(binary, byte(i))
	}
	binary = append(binary, "\r\n\x00\x00 trailing"...)
	cases := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"text.txt", []byte("hello\nworld\n")},
		{"binary.bin", binary},
		{"odd.bin", randomBytes(t, sftpMaxPacket*3+17)},
		{"big.bin", randomBytes(t, 20<<20)},
		{"name with spaces 'and' quotes", []byte("x")},
	}
	for _, tc := range cases {
		name := dir + "/" + tc.name
		start := time.Now()
		if err := b.WriteFile(context.Background(), name, bytes.NewReader(tc.data), int64(len(tc.data)), 0o666); err != nil {
			t.Fatalf("WriteFile %s: %v", tc.name, err)
		}
		took := time.Since(start)
		sum, mode := remoteSum(t, b, name)
		if sum != sha(tc.data) {
			t.Errorf("%s: remote sha256 %s, want %s", tc.name, sum, sha(tc.data))
		}
		if umask == "0022" && mode != "644" {
			t.Errorf("%s: mode %s, want 644 under umask 022", tc.name, mode)
		}
		t.Logf("%s: %d bytes in %v", tc.name, len(tc.data), took)
	}
	// perm is applied before the umask.
	if err := b.WriteFile(context.Background(), dir+"/script", strings.NewReader("#!/bin/sh\n"), 10, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, mode := remoteSum(t, b, dir+"/script"); umask == "0022" && mode != "755" {
		t.Errorf("perm 0755: mode %s, want 755", mode)
	}
	if err := b.WriteFile(context.Background(), dir+"/private", strings.NewReader("k"), 1, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, mode := remoteSum(t, b, dir+"/private"); mode != "600" {
		t.Errorf("perm 0600: mode %s, want 600", mode)
	}
	// Concurrent writes share the client.
	var wg sync.WaitGroup
	blobs := make([][]byte, 4)
	errs := make([]error, len(blobs))
	for i := range blobs {
		blobs[i] = randomBytes(t, 2<<20+i)
		wg.Go(func() {
			errs[i] = b.WriteFile(context.Background(), fmt.Sprintf("%s/conc%d", dir, i), bytes.NewReader(blobs[i]), int64(len(blobs[i])), 0o666)
		})
	}
	wg.Wait()
	for i, data := range blobs {
		if errs[i] != nil {
			t.Fatalf("concurrent WriteFile %d: %v", i, errs[i])
		}
		if sum, _ := remoteSum(t, b, fmt.Sprintf("%s/conc%d", dir, i)); sum != sha(data) {
			t.Errorf("concurrent WriteFile %d: remote sha256 %s, want %s", i, sum, sha(data))
		}
	}
	// One client, opened on first use, served every write.
	if n := b.sftpOpens.Load(); n != 1 {
		t.Errorf("%d sftp clients opened, want 1", n)
	}
	if n, want := b.sftpWrites.Load(), int64(len(cases)+2+len(blobs)); n != want {
		t.Errorf("%d sftp writes counted, want %d", n, want)
	}
}

func testWriteFileSFTPRefusals(t *testing.T) {
	s := sshenv.Start(t)
	b := newTestBackend(t, testOptions(s, nil))
	dir := remoteDir(t, b)
	ctx := context.Background()

	// An existing name is refused and left alone (exclusive creation).
	name := dir + "/existing"
	run(t, b, backend.ProcSpec{Argv: []string{"sh", "-c", `printf old >"$1"`, "sh", name}})
	err := b.WriteFile(ctx, name, strings.NewReader("new"), 3, 0o666)
	if !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), "ssh: sftp write "+name) {
		t.Fatalf("existing file: err = %v, want fs.ErrExist with context", err)
	}
	if got := run(t, b, backend.ProcSpec{Argv: []string{"cat", name}}).out; got != "old" {
		t.Fatalf("existing file changed to %q", got)
	}
	// A directory in the way is refused too.
	if err := b.WriteFile(ctx, dir, strings.NewReader("x"), 1, 0o666); err == nil {
		t.Fatal("writing over a directory succeeded")
	}
	// A missing parent is an error (files.Write creates parents first).
	if err := b.WriteFile(ctx, dir+"/no/such/file", strings.NewReader("x"), 1, 0o666); err == nil {
		t.Fatal("missing parent: no error")
	}
	// A relative name is refused before anything is sent.
	if err := b.WriteFile(ctx, "relative", strings.NewReader("x"), 1, 0o666); err == nil {
		t.Fatal("relative name accepted")
	}
	// A reader shorter than size fails and leaves no partial file.
	name = dir + "/short"
	err = b.WriteFile(ctx, name, bytes.NewReader(randomBytes(t, 100<<10)), 200<<10, 0o666)
	if err == nil || !strings.Contains(err.Error(), "102400 of 204800") {
		t.Fatalf("short reader: err = %v", err)
	}
	if exists(t, b, name) {
		t.Fatal("short reader: partial file left behind")
	}
	// Only size bytes are taken from a longer reader.
	name = dir + "/long"
	if err := b.WriteFile(ctx, name, strings.NewReader("0123456789"), 4, 0o666); err != nil {
		t.Fatal(err)
	}
	if got := run(t, b, backend.ProcSpec{Argv: []string{"cat", name}}).out; got != "0123" {
		t.Fatalf("long reader: file holds %q", got)
	}
	// A reader that fails mid-way leaves no partial file.
	name = dir + "/failing"
	boom := errors.New("boom")
	err = b.WriteFile(ctx, name, io.MultiReader(bytes.NewReader(randomBytes(t, 1<<20)), errReader{boom}), 2<<20, 0o666)
	if !errors.Is(err, boom) {
		t.Fatalf("failing reader: err = %v, want boom", err)
	}
	if exists(t, b, name) {
		t.Fatal("failing reader: partial file left behind")
	}
	// Cancelling the context mid-transfer stops it and removes the file.
	name = dir + "/cancelled"
	cctx, cancel := context.WithCancel(ctx)
	r := &cancelAfter{r: bytes.NewReader(randomBytes(t, 8<<20)), n: 1 << 20, cancel: cancel}
	err = b.WriteFile(cctx, name, r, 8<<20, 0o666)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: err = %v, want context.Canceled", err)
	}
	if exists(t, b, name) {
		t.Fatal("cancelled: partial file left behind")
	}
	// The client survived every failure.
	if err := b.WriteFile(ctx, dir+"/after", strings.NewReader("ok"), 2, 0o666); err != nil {
		t.Fatal(err)
	}
	if n := b.sftpOpens.Load(); n != 1 {
		t.Errorf("%d sftp clients opened, want 1", n)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// cancelAfter cancels a context once n bytes have been read.
type cancelAfter struct {
	r      io.Reader
	n      int
	cancel func()
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.n -= n; c.n <= 0 {
		c.cancel()
	}
	return n, err
}

// newTestEnv returns a terminal environment on be.
func newTestEnv(t testing.TB, be backend.Backend) *terminal.Environment {
	t.Helper()
	env := terminal.New(be, terminal.Options{SpillDir: t.TempDir()})
	t.Cleanup(func() { env.Close(context.Background()) })
	return env
}

func testWriteFileWithoutSFTP(t *testing.T) {
	s := sshenv.Start(t, sshenv.WithoutSFTP())
	b := newTestBackend(t, testOptions(s, nil))
	dir := remoteDir(t, b)
	ctx := context.Background()

	for range 2 {
		err := b.WriteFile(ctx, dir+"/x", strings.NewReader("x"), 1, 0o666)
		if !errors.Is(err, backend.ErrUnsupported) {
			t.Fatalf("WriteFile without sftp: err = %v, want backend.ErrUnsupported", err)
		}
	}
	if exists(t, b, dir+"/x") {
		t.Fatal("declined write left a file")
	}
	// The refusal is remembered for the connection: one subsystem request.
	if n := strings.Count(s.Log(), "subsystem request for sftp"); n != 1 {
		t.Errorf("sshd saw %d sftp subsystem requests, want 1 (refusal remembered)\n%s", n, s.Log())
	}

	// files.Write falls back to the shell, small and large.
	env := newTestEnv(t, b)
	for _, data := range [][]byte{[]byte("small\n"), randomBytes(t, 1<<20)} {
		name := dir + "/via-shell-" + fmt.Sprint(len(data))
		res, err := files.Write(ctx, env, name, string(data))
		if err != nil {
			t.Fatalf("files.Write without sftp: %v", err)
		}
		if res.BytesWritten != int64(len(data)) || !res.Created {
			t.Errorf("files.Write: %+v", res)
		}
		if sum, _ := remoteSum(t, b, name); sum != sha(data) {
			t.Errorf("files.Write without sftp: remote sha256 %s, want %s", sum, sha(data))
		}
	}
	if n := b.sftpWrites.Load(); n != 0 {
		t.Errorf("%d sftp writes without sftp", n)
	}
	if out := run(t, b, backend.ProcSpec{Argv: []string{"ls", "-A", dir}}).out; strings.Contains(out, ".berth-") {
		t.Errorf("temporary files left: %q", out)
	}
}

func testFilesWriteUsesSFTP(t *testing.T) {
	s := sshenv.Start(t)
	b := newTestBackend(t, testOptions(s, nil))
	dir := remoteDir(t, b)
	env := newTestEnv(t, b)
	ctx := context.Background()

	name := dir + "/sub/dir/file.bin"
	data := randomBytes(t, 1<<20)
	res, err := files.Write(ctx, env, name, string(data))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Created || res.BytesWritten != int64(len(data)) {
		t.Errorf("files.Write: %+v", res)
	}
	if n := b.sftpWrites.Load(); n != 1 {
		t.Fatalf("files.Write made %d sftp writes, want 1", n)
	}
	if sum, _ := remoteSum(t, b, name); sum != sha(data) {
		t.Fatalf("remote sha256 %s, want %s", sum, sha(data))
	}
	// Replacing keeps the old mode (the shell copies it onto the new file).
	run(t, b, backend.ProcSpec{Argv: []string{"chmod", "750", name}})
	replaced := randomBytes(t, 64<<10)
	res, err = files.Write(ctx, env, name, string(replaced))
	if err != nil || res.Created {
		t.Fatalf("replace: %+v %v", res, err)
	}
	if n := b.sftpWrites.Load(); n != 2 {
		t.Fatalf("%d sftp writes, want 2", n)
	}
	// Content small enough to ride the session does not use SFTP.
	if _, err := files.Write(ctx, env, dir+"/small.txt", "small\n"); err != nil {
		t.Fatal(err)
	}
	if n := b.sftpWrites.Load(); n != 2 {
		t.Fatalf("a small write went through SFTP (%d writes)", n)
	}
	if sum, mode := remoteSum(t, b, name); sum != sha(replaced) || mode != "750" {
		t.Fatalf("replace: sha256 %s mode %s", sum, mode)
	}
	if out := run(t, b, backend.ProcSpec{Argv: []string{"ls", "-A", dir + "/sub/dir"}}).out; out != "file.bin\n" {
		t.Errorf("directory holds %q, want only file.bin", out)
	}
}

func testWriteFileAfterReconnect(t *testing.T) {
	s := sshenv.Start(t)
	b := newTestBackend(t, testOptions(s, nil))
	dir := remoteDir(t, b)
	env := newTestEnv(t, b)
	ctx := context.Background()

	if err := b.WriteFile(ctx, dir+"/before", strings.NewReader("1"), 1, 0o666); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		s.DropConnections(t)
		data := randomBytes(t, 3<<20)
		name := fmt.Sprintf("%s/after%d", dir, i)
		if err := b.WriteFile(ctx, name, bytes.NewReader(data), int64(len(data)), 0o666); err != nil {
			t.Fatalf("WriteFile after drop %d: %v", i, err)
		}
		if sum, _ := remoteSum(t, b, name); sum != sha(data) {
			t.Fatalf("after drop %d: remote sha256 %s, want %s", i, sum, sha(data))
		}
	}
	if n := b.sftpOpens.Load(); n != 3 {
		t.Errorf("%d sftp clients opened, want 3 (one per connection)", n)
	}
	// files.Write through the session also recovers.
	s.DropConnections(t)
	time.Sleep(50 * time.Millisecond)
	if _, err := files.Write(ctx, env, dir+"/tool", "after the drop\n"); err != nil {
		// The session reports the drop on its first use; the next works.
		if _, err := files.Write(ctx, env, dir+"/tool", "after the drop\n"); err != nil {
			t.Fatalf("files.Write after drop: %v", err)
		}
	}
	if sum, _ := remoteSum(t, b, dir+"/tool"); sum != sha([]byte("after the drop\n")) {
		t.Fatalf("files.Write after drop: wrong content")
	}
}

// shellOnly hides the backend's FileWriter so files.Write moves the bytes
// through the shell, for comparison.
type shellOnly struct{ backend.Backend }

// BenchmarkFilesWrite measures files.Write on ssh through SFTP and through
// the shell (a helper process's stdin), in the same run.
func BenchmarkFilesWrite(b *testing.B) {
	s := sshenv.Start(b)
	dir := remoteDir(b, newTestBackend(b, testOptions(s, nil)))
	for _, size := range []int{1 << 20, 50 << 20} {
		content := string(randomBytes(b, size))
		for _, via := range []string{"sftp", "shell"} {
			b.Run(fmt.Sprintf("%s/%dMiB", via, size>>20), func(b *testing.B) {
				be := newTestBackend(b, testOptions(s, nil))
				var target backend.Backend = be
				if via == "shell" {
					target = shellOnly{be}
				}
				env := newTestEnv(b, target)
				name := dir + "/bench-" + via
				// Warm up: start the session (and the sftp client).
				if _, err := files.Write(context.Background(), env, name, "warm"); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(size))
				for b.Loop() {
					if _, err := files.Write(context.Background(), env, name, content); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkWriteFile measures WriteFile alone (no shell round trips).
func BenchmarkWriteFile(b *testing.B) {
	s := sshenv.Start(b)
	be := newTestBackend(b, testOptions(s, nil))
	dir := remoteDir(b, be)
	for _, size := range []int{1 << 20, 50 << 20} {
		data := randomBytes(b, size)
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			b.SetBytes(int64(size))
			i := 0
			for b.Loop() {
				i++
				name := fmt.Sprintf("%s/wf-%d-%d", dir, size, i)
				if err := be.WriteFile(context.Background(), name, bytes.NewReader(data), int64(size), 0o666); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				run(b, be, backend.ProcSpec{Argv: []string{"rm", name}})
				b.StartTimer()
			}
		})
	}
}
