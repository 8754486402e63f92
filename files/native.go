package files

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// On this machine's filesystem a write is checked and made in two steps
// that must agree: the caller's check (the approval gate) judges where the
// write lands, and the write must then land there and nowhere else. A
// symbolic link followed once to decide and once more to write could be
// swapped in between by any process of the user (N2: a background loop
// flipping a link between a harmless directory and berth's home won 17
// writes of 60). So the path is resolved once (landing), the check is
// given that result, and the write goes to it through descriptors: the
// directory is opened one component at a time with O_NOFOLLOW from the
// root, and the temporary file, its rename and an in-place rewrite are
// made relative to that descriptor, following no link. A link that
// appears on the way after the resolution makes the write fail; it never
// redirects it.

// maxLinkHops is how many symbolic links a resolution follows before it
// gives up, as the kernel does (ELOOP).
const maxLinkHops = 40

// landing returns where a write to the absolute, clean host path p lands:
// every symbolic link on the way, the last component's included (a write
// replaces a link's target and keeps the link, as echo >link does) and a
// dangling one too, is replaced by what it points to, as the kernel would
// follow it; once a component does not exist, the rest is appended as
// written (the write creates it). Every component of the result was a
// directory or missing when it was read, the last one a file or missing.
func landing(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%s is not an absolute path", p)
	}
	todo := strings.Split(strings.TrimPrefix(p, "/"), "/")
	done := "/"
	for hops := 0; len(todo) > 0; {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			done = filepath.Dir(done)
			continue
		}
		next := filepath.Join(done, c)
		fi, err := os.Lstat(next)
		if err != nil {
			return filepath.Join(append([]string{next}, todo...)...), nil
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			done = next
			continue
		}
		if hops++; hops > maxLinkHops {
			return "", fmt.Errorf("follow symbolic links of %s: %w", p, unix.ELOOP)
		}
		dest, err := os.Readlink(next)
		if err != nil {
			return "", fmt.Errorf("follow symbolic link %s: %w", next, unwrapPath(err))
		}
		if filepath.IsAbs(dest) {
			done = "/"
		}
		todo = append(strings.Split(strings.Trim(dest, "/"), "/"), todo...)
	}
	return done, nil
}

// errMoved says that a symbolic link appeared on the way to a file after
// the path was resolved and checked: the write would land elsewhere.
var errMoved = errors.New("a symbolic link appeared on the way after the path was checked, so the write would land elsewhere; nothing was written (write it again)")

// openDirAt opens the directory dir (absolute, clean, as landing returns
// it) following no symbolic link: from the root, one component at a time,
// O_PATH|O_DIRECTORY|O_NOFOLLOW. With create, missing components are made
// (0777 less the umask) on the way, each relative to the descriptor of its
// parent. A component that is a link, or not a directory, is an error
// wrapping errMoved or ENOTDIR.
func openDirAt(dir string, create bool) (int, error) {
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: "/", Err: err}
	}
	walked := "/"
	for _, c := range strings.Split(strings.TrimPrefix(dir, "/"), "/") {
		if c == "" {
			continue
		}
		walked = filepath.Join(walked, c)
		next, err := openDirComponent(fd, c, create)
		unix.Close(fd)
		if err != nil {
			return -1, &fs.PathError{Op: "open directory", Path: walked, Err: err}
		}
		fd = next
	}
	return fd, nil
}

// openDirComponent opens the directory name below the directory parent,
// following no link; with create, it makes it when it is missing.
func openDirComponent(parent int, name string, create bool) (int, error) {
	const flags = unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	for range 2 {
		fd, err := unix.Openat(parent, name, flags, 0)
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.ENOENT) && create:
			if err := unix.Mkdirat(parent, name, 0o777); err != nil && !errors.Is(err, unix.EEXIST) {
				return -1, err
			}
			continue // made, or made by another writer meanwhile: open it
		case errors.Is(err, unix.ENOTDIR):
			// O_PATH|O_NOFOLLOW opens a link itself, which is no directory.
			var st unix.Stat_t
			if unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				return -1, errMoved
			}
			return -1, err
		case errors.Is(err, unix.ELOOP):
			return -1, errMoved
		default:
			return -1, err
		}
	}
	return -1, unix.ENOENT
}

// writeAt writes content to the file lands (as landing returned it, for
// the target t) through descriptors, atomically as Write promises: a
// temporary file in the same directory renamed over the file, the old
// file's mode (and, where permitted, owner) kept, missing parents made. A
// directory that is not writable falls back to rewriting a writable file
// in place, as echo >file does.
func writeAt(t target, lands, content string) (WriteResult, error) {
	dir, base := filepath.Split(lands)
	if base == "" || base == "." || base == ".." {
		return WriteResult{}, isDir(t)
	}
	dfd, err := openDirAt(filepath.Clean(dir), true)
	if err != nil {
		if errors.Is(err, errMoved) {
			return WriteResult{}, fmt.Errorf("write %s: %w", t, errMoved)
		}
		return WriteResult{}, fmt.Errorf("create parent directories of %s: %w", t, err)
	}
	defer unix.Close(dfd)
	res := WriteResult{Path: t.String(), BytesWritten: int64(len(content))}
	var old unix.Stat_t
	exists := true
	switch err := unix.Fstatat(dfd, base, &old, unix.AT_SYMLINK_NOFOLLOW); {
	case errors.Is(err, unix.ENOENT):
		exists, res.Created = false, true
	case err != nil:
		return WriteResult{}, fmt.Errorf("stat %s: %w", t, err)
	case old.Mode&unix.S_IFMT == unix.S_IFLNK:
		return WriteResult{}, fmt.Errorf("write %s: %w", t, errMoved)
	case old.Mode&unix.S_IFMT == unix.S_IFDIR:
		return WriteResult{}, isDir(t)
	case old.Mode&unix.S_IFMT != unix.S_IFREG:
		return WriteResult{}, notRegular(t)
	}
	tmp := ".berth-" + newTag() + ".tmp"
	tfd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o666)
	if err != nil && exists && (errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM)) {
		// The directory is not writable but the file may be.
		if ierr := rewriteAt(dfd, base, content); ierr == nil {
			return res, nil
		}
	}
	if err != nil {
		return WriteResult{}, fmt.Errorf("create temporary file in %s: %w", filepath.Dir(t.String()), err)
	}
	f := os.NewFile(uintptr(tfd), tmp)
	_, err = f.WriteString(content)
	if err == nil && exists {
		// The owner first: a change of owner clears the set-id bits the
		// mode then restores.
		_ = unix.Fchown(tfd, int(old.Uid), int(old.Gid)) // best effort: only root may give files away
		err = unix.Fchmod(tfd, old.Mode&0o7777)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dfd, tmp, dfd, base)
		if err != nil && exists && errors.Is(err, unix.EBUSY) {
			// A bind-mounted file (a container's /etc/hosts) cannot be
			// replaced, only rewritten.
			unix.Unlinkat(dfd, tmp, 0)
			if err = rewriteAt(dfd, base, content); err == nil {
				return res, nil
			}
		}
	}
	if err != nil {
		unix.Unlinkat(dfd, tmp, 0)
		return WriteResult{}, fmt.Errorf("write %s: %w", t, unwrapPath(err))
	}
	return res, nil
}

// rewriteAt truncates the existing regular file name in the directory dfd
// and writes content into it, following no link.
func rewriteAt(dfd int, name, content string) error {
	fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return fmt.Errorf("%s is not a regular file", name)
	}
	_, err = f.WriteString(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
