package confine

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// metaOp is a kind of metadata change.
type metaOp int

const (
	opChmod metaOp = iota
	opChown
	opSetxattr
	opRemovexattr
	opUtimens
)

// metaCall describes where a metadata call keeps its arguments (indexes
// into seccomp_data.args; noArg when absent).
type metaCall struct {
	op       metaOp
	fd       bool // the file is the descriptor in argument 0
	dirfd    int  // directory the path is relative to; noArg: the cwd
	path     int  // the path
	flags    int  // AT_* flags
	nofollow bool // the l* variant: a final symlink is not followed
	arg      int  // the first argument of the change itself
}

// fileID identifies a directory or file across names.
type fileID struct{ dev, ino uint64 }

func idOf(st *unix.Stat_t) fileID { return fileID{uint64(st.Dev), st.Ino} }

// treeIDs identifies the writable trees (following a symlinked name, as
// Landlock does).
func treeIDs(paths []string) ([]fileID, error) {
	var ids []fileID
	for _, p := range paths {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			return nil, fmt.Errorf("confine: writable path %s: %w", p, err)
		}
		ids = append(ids, idOf(&st))
	}
	return ids, nil
}

// The kernel's XATTR_NAME_MAX and XATTR_SIZE_MAX.
const xattrNameMax = 255

// maxXattrValue is the kernel's XATTR_SIZE_MAX.
const maxXattrValue = 64 << 10

// meta performs one metadata change for the caller when the file it names
// lies in a writable tree, and returns the errno the call returns.
//
// The caller's path is resolved once, here, into a descriptor (O_PATH) of
// the file; the check and the change both use that descriptor, so no
// rename or symlink swap between them can redirect the change. It is
// resolved as the caller sees it (through /proc/PID/root, cwd or fd), so
// the descriptor carries the caller's mount: a change to a file the
// Domain's mount namespace keeps read-only fails with EROFS.
func (s *supervisor) meta(req *seccompNotif, m metaCall) unix.Errno {
	pid := int(req.Pid)
	args := req.Data.Args
	obj, e := s.object(req, m)
	if e != 0 {
		return e
	}
	defer unix.Close(obj)
	var st unix.Stat_t
	if err := unix.Fstat(obj, &st); err != nil {
		return errnoOf(err)
	}
	in, err := s.inside(obj, &st)
	if err != nil || !in {
		return unix.EACCES
	}
	link := "/proc/self/fd/" + strconv.Itoa(obj)
	isLink := st.Mode&unix.S_IFMT == unix.S_IFLNK
	switch m.op {
	case opChmod:
		mode := uint32(args[m.arg]) & 0o7777
		// No set-user-ID file, and set-group-ID only on directories
		// (group inheritance): see createCalls.
		if mode&unix.S_ISUID != 0 || mode&unix.S_ISGID != 0 && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return unix.EPERM
		}
		if isLink {
			return unix.EOPNOTSUPP
		}
		return errnoOf(unix.Chmod(link, mode))
	case opChown:
		uid, gid := int(int32(args[m.arg])), int(int32(args[m.arg+1]))
		return errnoOf(unix.Fchownat(obj, "", uid, gid, unix.AT_EMPTY_PATH))
	case opSetxattr, opRemovexattr:
		name, e := readString(pid, args[m.arg], xattrNameMax+1)
		if e != 0 {
			return e
		}
		if !allowedXattr(name) {
			return unix.EPERM
		}
		if isLink {
			return unix.EPERM // user.* attributes exist only on files and directories
		}
		if m.op == opRemovexattr {
			return errnoOf(unix.Removexattr(link, name))
		}
		size := int(args[m.arg+2])
		if size < 0 || size > maxXattrValue {
			return unix.E2BIG
		}
		var value []byte
		if size > 0 {
			if value, e = readMem(pid, args[m.arg+1], size); e != 0 {
				return e
			}
		}
		if !s.valid(req.ID) {
			return unix.EINTR
		}
		return errnoOf(unix.Setxattr(link, name, value, int(int32(args[m.arg+3]))))
	case opUtimens:
		var ts *[2]unix.Timespec
		if p := args[m.arg]; p != 0 {
			b, e := readMem(pid, p, int(unsafe.Sizeof([2]unix.Timespec{})))
			if e != 0 {
				return e
			}
			ts = (*[2]unix.Timespec)(unsafe.Pointer(&b[0]))
		}
		if !s.valid(req.ID) {
			return unix.EINTR
		}
		target, dirfd, flags := link, unix.AT_FDCWD, 0
		if isLink {
			target, dirfd, flags = "", obj, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW
		}
		p, err := unix.BytePtrFromString(target)
		if err != nil {
			return unix.EINVAL
		}
		_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(ts)), uintptr(flags), 0, 0)
		return e
	}
	return unix.ENOSYS
}

// allowedXattr admits the attributes a process of the user may set on its
// own files: user.* and POSIX ACLs. security.* and trusted.* (file
// capabilities, for one) need privileges the supervisor has and the
// caller must not borrow.
func allowedXattr(name string) bool {
	return strings.HasPrefix(name, "user.") || name == "system.posix_acl_access" || name == "system.posix_acl_default"
}

// object opens (O_PATH) the file a metadata call names, resolved as the
// caller would: its descriptor, or its path relative to its directory
// descriptor or working directory.
func (s *supervisor) object(req *seccompNotif, m metaCall) (int, unix.Errno) {
	pid := strconv.Itoa(int(req.Pid))
	args := req.Data.Args
	fdPath := func(fd int32) string { return "/proc/" + pid + "/fd/" + strconv.Itoa(int(fd)) }
	open := func(name string, flags int) (int, unix.Errno) {
		fd, err := unix.Open(name, flags|unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, errnoOf(err)
		}
		if !s.valid(req.ID) { // the pid may name another process by now
			unix.Close(fd)
			return -1, unix.EINTR
		}
		return fd, 0
	}
	if m.fd {
		fd, e := open(fdPath(int32(args[0])), 0)
		if e == unix.ENOENT {
			e = unix.EBADF
		}
		return fd, e
	}
	flags := 0
	if m.flags != noArg {
		flags = int(int32(args[m.flags]))
	}
	base := "/proc/" + pid + "/cwd"
	if m.dirfd != noArg {
		if d := int32(args[m.dirfd]); d != unix.AT_FDCWD {
			base = fdPath(d)
		}
	}
	if m.op == opUtimens && args[m.path] == 0 {
		// utimensat(fd, NULL, ...) changes fd itself.
		fd, e := open(base, 0)
		if e == unix.ENOENT {
			e = unix.EBADF
		}
		return fd, e
	}
	name, e := readString(int(req.Pid), args[m.path], unix.PathMax)
	if e != 0 {
		return -1, e
	}
	if name == "" {
		if flags&unix.AT_EMPTY_PATH == 0 {
			return -1, unix.ENOENT
		}
		return open(base, 0)
	}
	oflags := 0
	if m.nofollow || flags&unix.AT_SYMLINK_NOFOLLOW != 0 {
		oflags = unix.O_NOFOLLOW
	}
	if filepath.IsAbs(name) {
		// From the caller's root, in the caller's mount namespace:
		// the supervisor's own would show a Policy.ReadOnly path
		// writable.
		root, e := open("/proc/"+pid+"/root", 0)
		if e != 0 {
			return -1, e
		}
		defer unix.Close(root)
		fd, err := unix.Openat2(root, name, &unix.OpenHow{Flags: uint64(oflags | unix.O_PATH | unix.O_CLOEXEC), Resolve: unix.RESOLVE_IN_ROOT})
		if err != nil {
			return -1, errnoOf(err)
		}
		return fd, 0
	}
	dir, e := open(base, 0)
	if e != 0 {
		if e == unix.ENOENT && m.dirfd != noArg && int32(args[m.dirfd]) != unix.AT_FDCWD {
			e = unix.EBADF
		}
		return -1, e
	}
	defer unix.Close(dir)
	fd, err := unix.Openat(dir, name, oflags|unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, errnoOf(err)
	}
	return fd, 0
}

// inside reports whether the file open as obj lies in a writable tree: it
// walks up from its directory through "..", comparing each directory with
// the trees, as Landlock does from the path it was reached by.
func (s *supervisor) inside(obj int, st *unix.Stat_t) (bool, error) {
	dir := obj
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		// A file has no ".."; its directory is found from its name,
		// and checked to hold this very file.
		name, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(obj))
		if err != nil || !filepath.IsAbs(name) || strings.HasSuffix(name, " (deleted)") {
			return false, errors.New("confine: file has no directory")
		}
		d, err := unix.Open(filepath.Dir(name), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return false, err
		}
		defer unix.Close(d)
		var again unix.Stat_t
		if err := unix.Fstatat(d, filepath.Base(name), &again, unix.AT_SYMLINK_NOFOLLOW); err != nil || idOf(&again) != idOf(st) {
			return false, errors.New("confine: file moved")
		}
		dir = d
	}
	cur, err := unix.Dup(dir)
	if err != nil {
		return false, err
	}
	for range 4096 {
		var cst unix.Stat_t
		if err := unix.Fstat(cur, &cst); err != nil {
			unix.Close(cur)
			return false, err
		}
		id := idOf(&cst)
		for _, r := range s.roots {
			if r == id {
				unix.Close(cur)
				return true, nil
			}
		}
		up, err := unix.Openat(cur, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(cur)
		if err != nil {
			return false, err
		}
		var ust unix.Stat_t
		if err := unix.Fstat(up, &ust); err != nil || idOf(&ust) == id {
			unix.Close(up)
			return false, err // the root: no tree on the way
		}
		cur = up
	}
	unix.Close(cur)
	return false, errors.New("confine: directory tree too deep")
}

// readMem copies n bytes at addr from process pid.
func readMem(pid int, addr uint64, n int) ([]byte, unix.Errno) {
	b := make([]byte, n)
	if n == 0 {
		return b, 0
	}
	local := []unix.Iovec{{Base: &b[0]}}
	local[0].SetLen(n)
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: n}}
	got, err := unix.ProcessVMReadv(pid, local, remote, 0)
	if err != nil || got != n {
		return nil, unix.EFAULT
	}
	return b, 0
}

// readString copies a NUL-terminated string of at most max-1 bytes at
// addr from process pid, a page at a time (the next page may not be
// mapped).
func readString(pid int, addr uint64, max int) (string, unix.Errno) {
	if addr == 0 {
		return "", unix.EFAULT
	}
	const page = 4096
	var out []byte
	for len(out) < max {
		n := page - int(addr%page)
		b, e := readMem(pid, addr, n)
		if e != 0 {
			return "", e
		}
		if i := bytes.IndexByte(b, 0); i >= 0 {
			out = append(out, b[:i]...)
			if len(out) >= max {
				break
			}
			return string(out), 0
		}
		out = append(out, b...)
		addr += uint64(n)
	}
	return "", unix.ENAMETOOLONG
}
