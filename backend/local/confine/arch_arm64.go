package confine

import "golang.org/x/sys/unix"

// nativeArch is the AUDIT_ARCH of this build's system calls.
const nativeArch = unix.AUDIT_ARCH_AARCH64

// x32Bit is 0: arm64 has no x32-like ABI under its own AUDIT_ARCH.
const x32Bit = 0

// metaCalls are the system calls that change a file's metadata, which
// Landlock does not confine; the supervisor makes them after checking the
// file lies in a writable tree.
var metaCalls = map[uintptr]metaCall{
	unix.SYS_FCHMOD:       {op: opChmod, fd: true, arg: 1},
	unix.SYS_FCHMODAT:     {op: opChmod, dirfd: 0, path: 1, flags: noArg, arg: 2},
	unix.SYS_FCHMODAT2:    {op: opChmod, dirfd: 0, path: 1, flags: 3, arg: 2},
	unix.SYS_FCHOWN:       {op: opChown, fd: true, arg: 1},
	unix.SYS_FCHOWNAT:     {op: opChown, dirfd: 0, path: 1, flags: 4, arg: 2},
	unix.SYS_SETXATTR:     {op: opSetxattr, dirfd: noArg, path: 0, flags: noArg, arg: 1},
	unix.SYS_LSETXATTR:    {op: opSetxattr, dirfd: noArg, path: 0, flags: noArg, arg: 1, nofollow: true},
	unix.SYS_FSETXATTR:    {op: opSetxattr, fd: true, arg: 1},
	unix.SYS_REMOVEXATTR:  {op: opRemovexattr, dirfd: noArg, path: 0, flags: noArg, arg: 1},
	unix.SYS_LREMOVEXATTR: {op: opRemovexattr, dirfd: noArg, path: 0, flags: noArg, arg: 1, nofollow: true},
	unix.SYS_FREMOVEXATTR: {op: opRemovexattr, fd: true, arg: 1},
	unix.SYS_UTIMENSAT:    {op: opUtimens, dirfd: 0, path: 1, flags: 3, arg: 2},
}

// refusedCalls are refused outright, with the errno callers fall back on
// (see arch_amd64.go).
var refusedCalls = map[uintptr]unix.Errno{
	unix.SYS_SETXATTRAT:        unix.ENOSYS,
	unix.SYS_REMOVEXATTRAT:     unix.ENOSYS,
	unix.SYS_OPENAT2:           unix.ENOSYS,
	unix.SYS_PIDFD_SEND_SIGNAL: unix.ENOSYS,
}

// createCalls create files with a mode (see arch_amd64.go).
var createCalls = []createCall{
	{nr: unix.SYS_OPENAT, flags: 2, mode: 3},
	{nr: unix.SYS_MKNODAT, flags: noArg, mode: 2},
}
