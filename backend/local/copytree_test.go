package local

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/a55dbaac/berth/internal/testenv"
)

// makeTree makes a tree of every kind of file copyTree handles in dir.
func makeTree(t *testing.T, dir string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "a", "b", "data"), bytes.Repeat([]byte("berth"), 100000), 0o640))
	must(os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "empty"), nil, 0o600))
	must(os.WriteFile(filepath.Join(dir, "setuid"), []byte("x"), 0o755))
	must(os.Chmod(filepath.Join(dir, "setuid"), 0o755|fs.ModeSetuid))
	must(os.Symlink("a/b/data", filepath.Join(dir, "link")))
	must(os.Symlink("/nonexistent/target", filepath.Join(dir, "dangling")))
	must(unix.Mkfifo(filepath.Join(dir, "fifo"), 0o620))
	must(os.Chmod(filepath.Join(dir, "fifo"), 0o620))
	must(os.Mkdir(filepath.Join(dir, "ro"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "ro", "f"), []byte("in a read-only directory"), 0o444))
	must(os.Chmod(filepath.Join(dir, "ro"), 0o555))
	must(os.Mkdir(filepath.Join(dir, "skipme"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "skipme", "secret"), []byte("not copied"), 0o600))
	old := time.Date(2020, 1, 2, 3, 4, 5, 6000, time.UTC)
	for _, p := range []string{"a/b/data", "run.sh", "a", "ro/f"} {
		must(os.Chtimes(filepath.Join(dir, p), old, old))
	}
	must(unix.Lutimes(filepath.Join(dir, "link"), []unix.Timeval{unix.NsecToTimeval(old.UnixNano()), unix.NsecToTimeval(old.UnixNano())}))
	t.Cleanup(func() { os.Chmod(filepath.Join(dir, "ro"), 0o755) })
}

// checkCopy compares the copy dst with the tree makeTree made in src.
func checkCopy(t *testing.T, src, dst string, skipped bool) {
	t.Helper()
	for _, p := range []string{"a", "a/b", "a/b/data", "run.sh", "empty", "link", "dangling", "fifo", "ro", "ro/f"} {
		a, err := os.Lstat(filepath.Join(src, p))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.Lstat(filepath.Join(dst, p))
		if err != nil {
			t.Errorf("%s not copied: %v", p, err)
			continue
		}
		if a.Mode() != b.Mode() {
			t.Errorf("%s: mode %v, want %v", p, b.Mode(), a.Mode())
		}
		if a.Mode().IsRegular() || a.Mode()&fs.ModeSymlink != 0 || a.IsDir() {
			if !a.ModTime().Equal(b.ModTime()) {
				t.Errorf("%s: modified %v, want %v", p, b.ModTime(), a.ModTime())
			}
		}
		switch {
		case a.Mode().IsRegular():
			x, _ := os.ReadFile(filepath.Join(src, p))
			y, _ := os.ReadFile(filepath.Join(dst, p))
			if !bytes.Equal(x, y) {
				t.Errorf("%s: content differs", p)
			}
		case a.Mode()&fs.ModeSymlink != 0:
			x, _ := os.Readlink(filepath.Join(src, p))
			y, _ := os.Readlink(filepath.Join(dst, p))
			if x != y {
				t.Errorf("%s: points to %q, want %q", p, y, x)
			}
		}
	}
	if fi, err := os.Lstat(filepath.Join(dst, "setuid")); err != nil || fi.Mode() != 0o755 {
		t.Errorf("setuid: %v %v, want 0755 without the set-user-ID bit", fi.Mode(), err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "skipme")); (err == nil) == skipped {
		t.Errorf("skipme: %v (skipped: %v)", err, skipped)
	}
	// The copy is a copy: writing it leaves the source alone.
	os.WriteFile(filepath.Join(dst, "a", "b", "data"), []byte("changed"), 0o640)
	if x, _ := os.ReadFile(filepath.Join(src, "a", "b", "data")); len(x) != 500000 {
		t.Error("writing the copy changed the source")
	}
}

// TestCopyTree: every kind of file is copied with its mode (set-user-ID
// dropped) and times, links as links, and a skipped tree is left out; on
// a filesystem without reflinks (ext4, tmpfs) every file is copied byte by
// byte, and the stats say so.
func TestCopyTree(t *testing.T) {
	src := t.TempDir()
	makeTree(t, src)
	dst := filepath.Join(t.TempDir(), "copy")
	skip := filepath.Join(src, "skipme")
	var seen int64
	st, err := copyTree(context.Background(), src, dst, func(p string) bool { return p == skip }, func(n int64) { seen = n })
	if err != nil {
		t.Fatal(err)
	}
	checkCopy(t, src, dst, true)
	if st.Files != 5 || st.Bytes != 500000+int64(len("#!/bin/sh\necho hi\n"))+1+int64(len("in a read-only directory")) || seen != st.Bytes {
		t.Errorf("stats %+v, progress %d", st, seen)
	}
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(src, &sfs); err == nil && sfs.Type == unix.EXT4_SUPER_MAGIC && st.Cloned != 0 {
		t.Errorf("on ext4, %d files were reported cloned", st.Cloned)
	}
	if _, err := copyTree(context.Background(), src, dst, nil, nil); err == nil {
		t.Error("a copy onto an existing directory succeeded")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := copyTree(ctx, src, filepath.Join(t.TempDir(), "c"), nil, nil); err == nil {
		t.Error("a cancelled copy succeeded")
	}
}

// TestCopyTreeClonesOnXFS: on XFS with reflink=1 every regular file is
// cloned (FICLONE), sharing its blocks: the copy of 64 MB takes next to no
// space; the files still read back the same.
func TestCopyTreeClonesOnXFS(t *testing.T) {
	dir := xfsDir(t)
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	makeTree(t, src)
	if err := os.WriteFile(filepath.Join(src, "big"), bytes.Repeat([]byte{7}, 64<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	var before, after syscall.Statfs_t
	syscall.Sync()
	syscall.Statfs(dir, &before)
	st, err := copyTree(context.Background(), src, filepath.Join(dir, "dst"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Sync()
	syscall.Statfs(dir, &after)
	if st.Cloned != st.Files-1 { // the empty file is made, not cloned
		t.Errorf("%d of %d files cloned on XFS with reflinks", st.Cloned, st.Files)
	}
	if used := int64(before.Bfree-after.Bfree) * before.Bsize; used > 16<<20 {
		t.Errorf("the clone of 64 MB took %d bytes", used)
	}
	checkCopy(t, src, filepath.Join(dir, "dst"), false)
}

// xfsDir mounts a fresh XFS filesystem with reflinks (a loop image) and
// returns it, unmounted and removed with tb; it skips unless the test may
// use root and mkfs.xfs is installed (xfsprogs).
func xfsDir(tb testing.TB) string {
	tb.Helper()
	testenv.Need(tb, testenv.Root, testenv.IsRoot)
	mkfs, err := exec.LookPath("mkfs.xfs")
	if err != nil {
		tb.Skip("no mkfs.xfs (install xfsprogs) for a filesystem with reflinks")
	}
	base, err := os.MkdirTemp("/var/tmp", "berth-xfs-")
	if err != nil {
		tb.Fatal(err)
	}
	img, mnt := filepath.Join(base, "fs.img"), filepath.Join(base, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		tb.Fatal(err)
	}
	run := func(name string, args ...string) {
		tb.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			os.RemoveAll(base)
			tb.Fatalf("%s %v: %v: %s", name, args, err, out)
		}
	}
	run("truncate", "-s", "3G", img)
	run(mkfs, "-q", "-m", "reflink=1", img)
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		os.RemoveAll(base)
		tb.Skipf("cannot mount a loop image here (no loop devices?): %v: %s", err, out)
	}
	tb.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			tb.Errorf("umount %s: %v: %s", mnt, err, out)
			return
		}
		os.RemoveAll(base)
	})
	return mnt
}

// berth doctor's line on checkpoints says whether the copies can be
// reflinks: no on ext4 (this machine's), yes on XFS with reflink=1, and
// no across filesystems.
func TestCheckpointLine(t *testing.T) {
	var sfs syscall.Statfs_t
	tmp := t.TempDir()
	if err := syscall.Statfs(tmp, &sfs); err != nil || sfs.Type != unix.EXT4_SUPER_MAGIC {
		t.Skip("the temporary directory is not on ext4")
	}
	home, ws := filepath.Join(tmp, "home"), filepath.Join(tmp, "ws")
	os.Mkdir(home, 0o700)
	os.Mkdir(ws, 0o755)
	if l := checkpointLine(home, ws); !strings.Contains(l, "reflinks: no") {
		t.Errorf("on ext4: %s", l)
	}
	x := xfsDir(t)
	xh := filepath.Join(x, "home")
	os.Mkdir(xh, 0o700)
	if l := checkpointLine(xh, x); !strings.Contains(l, "reflinks: yes") {
		t.Errorf("on XFS: %s", l)
	}
	if l := checkpointLine(xh, ws); !strings.Contains(l, "different filesystems") {
		t.Errorf("across filesystems: %s", l)
	}
}
