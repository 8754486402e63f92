package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// treeStats says what copyTree copied.
type treeStats struct {
	Bytes   int64 // the regular files' sizes, added up
	Files   int   // regular files
	Cloned  int   // of them, cloned with FICLONE (sharing their blocks)
	Skipped int   // sockets and devices, which are not copied
}

// copyTree copies the tree at src to dst, which must not exist: every
// directory, regular file, symbolic link and named pipe, with its
// permission bits (set-user-ID and set-group-ID dropped: berth makes no
// such file), its modification and access times, and its content. A
// regular file is cloned with the FICLONE ioctl, sharing the source's
// blocks copy-on-write, where the filesystem can (XFS with reflink=1,
// btrfs, bcachefs, ZFS 2.2); where it refuses (EOPNOTSUPP, EXDEV, EINVAL,
// ENOTTY: ext4, tmpfs, another filesystem) that file is copied byte by
// byte. Hard links become separate files; ownership and extended
// attributes are not kept. skip names absolute paths in src not to copy
// (berth's own home, when the tree holds it). progress, when not nil,
// hears the bytes copied so far. dst is left half-made on error; the
// caller removes it.
func copyTree(ctx context.Context, src, dst string, skip func(string) bool, progress func(int64)) (treeStats, error) {
	var st treeStats
	src = filepath.Clean(src)
	type dirTimes struct {
		path string
		mode fs.FileMode
		info fs.FileInfo
	}
	var dirs []dirTimes // fixed up after their content: mode and times
	last := time.Now()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, walkErr error) error {
		if walkErr != nil {
			if p != src && errors.Is(walkErr, fs.ErrNotExist) {
				return nil // removed while we copied
			}
			return walkErr
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p != src && skip != nil && skip(p) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		switch mode := info.Mode(); {
		case mode.IsDir():
			if err := os.Mkdir(to, 0o700); err != nil {
				return err
			}
			dirs = append(dirs, dirTimes{to, perm(mode), info})
		case mode.IsRegular():
			cloned, n, err := copyFile(p, to, perm(mode))
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ELOOP) {
				return nil // gone, or replaced by a link, while we copied
			}
			if err != nil {
				return err
			}
			st.Files++
			st.Bytes += n
			if cloned {
				st.Cloned++
			}
			if err := setTimes(to, info, false); err != nil {
				return err
			}
			if progress != nil && time.Since(last) > 100*time.Millisecond {
				last = time.Now()
				progress(st.Bytes)
			}
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, to); err != nil {
				return err
			}
			if err := setTimes(to, info, true); err != nil {
				return err
			}
		case mode&fs.ModeNamedPipe != 0:
			if err := unix.Mkfifo(to, uint32(perm(mode))); err != nil {
				return fmt.Errorf("mkfifo %s: %w", to, err)
			}
			if err := os.Chmod(to, perm(mode)); err != nil {
				return err
			}
		default:
			st.Skipped++
		}
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	// Deepest first: a directory's times move while its content is made.
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		if err := os.Chmod(d.path, d.mode); err != nil {
			return st, fmt.Errorf("copy %s: %w", src, err)
		}
		if err := setTimes(d.path, d.info, false); err != nil {
			return st, fmt.Errorf("copy %s: %w", src, err)
		}
	}
	if progress != nil {
		progress(st.Bytes)
	}
	return st, nil
}

// perm keeps a mode's permission bits and the sticky bit.
func perm(m fs.FileMode) fs.FileMode { return m & (fs.ModePerm | fs.ModeSticky) }

// copyFile makes to, a copy of the regular file from, with mode: cloned
// when the filesystem can (cloned true), else copied. n is its size.
func copyFile(from, to string, mode fs.FileMode) (cloned bool, n int64, err error) {
	in, err := os.OpenFile(from, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, 0, err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return false, 0, err
	}
	if !fi.Mode().IsRegular() {
		return false, 0, fmt.Errorf("%s is no longer a regular file", from)
	}
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return false, 0, err
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if fi.Size() > 0 {
		err = unix.IoctlFileClone(int(out.Fd()), int(in.Fd()))
		switch {
		case err == nil:
			cloned = true
		case errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EINVAL) ||
			errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM):
			// This filesystem (or pair of them) cannot share blocks.
			if _, err = io.Copy(out, in); err != nil {
				return false, 0, fmt.Errorf("copy %s: %w", from, err)
			}
		default:
			return false, 0, fmt.Errorf("clone %s: %w", from, err)
		}
	}
	if err := out.Chmod(mode); err != nil {
		return false, 0, err
	}
	return cloned, fi.Size(), nil
}

// setTimes gives p the access and modification times of info.
func setTimes(p string, info fs.FileInfo, link bool) error {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	flags := 0
	if link {
		flags = unix.AT_SYMLINK_NOFOLLOW
	}
	ts := []unix.Timespec{{Sec: st.Atim.Sec, Nsec: st.Atim.Nsec}, {Sec: st.Mtim.Sec, Nsec: st.Mtim.Nsec}}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, flags); err != nil {
		return fmt.Errorf("set the times of %s: %w", p, err)
	}
	return nil
}
