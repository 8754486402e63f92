package confine

import (
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// unixPolicy is what the filter does with socket(AF_UNIX, ...).
type unixPolicy int

const (
	unixDeny unixPolicy = iota
	unixAllow
)

// filterSpec describes the seccomp filter of a Domain.
type filterSpec struct {
	unix     unixPolicy
	net      Network // "" or NetworkAll: IP sockets allowed
	loopback bool    // connect, bind and listen go to the supervisor
	meta     bool    // metadata changes (metaCalls) go to the supervisor
}

// notify reports whether the filter hands calls to a supervisor.
func (f filterSpec) notify() bool { return f.loopback || f.meta }

// noArg marks an absent argument in the call tables.
const noArg = -1

// createCall is a system call that creates a file with a mode.
type createCall struct {
	nr          uintptr
	flags, mode int // argument indexes; flags noArg: always creates
}

// File-creating open flags: O_CREAT, and O_TMPFILE's own bit.
const openCreates = unix.O_CREAT | 0x400000

// Attribute ioctls that change a file through a descriptor opened only
// for reading (chattr).
const (
	fsIocSetflags   = 0x40086602
	fsIoc32Setflags = 0x40046602
	fsIocFssetxattr = 0x401c5820
)

// ioprioWhoProcess is the kernel's IOPRIO_WHO_PROCESS: ioprio_set's
// target is one process (2 is a process group, 3 a user).
const ioprioWhoProcess = 1

// Offsets in struct seccomp_data (little-endian: an argument's low 32
// bits come first).
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// Classic BPF opcodes used here.
const (
	ldAbsW = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	jeqK   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	jgeK   = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	jsetK  = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	andK   = unix.BPF_ALU | unix.BPF_AND | unix.BPF_K
	retK   = unix.BPF_RET | unix.BPF_K
)

func ld(off uint32) unix.SockFilter { return unix.SockFilter{Code: ldAbsW, K: off} }
func ldArg(i int) unix.SockFilter   { return ld(offArgs + 8*uint32(i)) }
func ret(v uint32) []unix.SockFilter {
	return []unix.SockFilter{{Code: retK, K: v}}
}
func errno(e unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e)&unix.SECCOMP_RET_DATA }

// ifEq runs then (which must end in a return) when A == k, and falls
// through past it otherwise.
func ifEq(k uint32, then []unix.SockFilter) []unix.SockFilter {
	if len(then) > 255 {
		panic("confine: filter block too long")
	}
	return append([]unix.SockFilter{{Code: jeqK, K: k, Jt: 0, Jf: uint8(len(then))}}, then...)
}

// ifSet runs then when A & mask != 0.
func ifSet(mask uint32, then []unix.SockFilter) []unix.SockFilter {
	return append([]unix.SockFilter{{Code: jsetK, K: mask, Jt: 0, Jf: uint8(len(then))}}, then...)
}

func cat(parts ...[]unix.SockFilter) []unix.SockFilter {
	var out []unix.SockFilter
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// onSyscall runs then (ending in a return) for system call nr; the
// number is loaded again first, since a previous block may have loaded
// an argument.
func onSyscall(nr uintptr, then []unix.SockFilter) []unix.SockFilter {
	return cat([]unix.SockFilter{ld(offNr)}, ifEq(uint32(nr), then))
}

// self names the process that makes a Domain and the Domain's own thread,
// which the Domain's processes must not reach.
type self struct{ pid, tid int }

// buildFilter compiles f. A system call of another ABI (32-bit or x32 on
// a 64-bit kernel) kills the process: its numbers mean other calls.
//
// Besides f's rules it keeps the Domain's processes away from berth
// itself, and from the scheduling of every process outside the domain. Landlock lets them signal the members of their domain, and the
// Domain's thread is one, although it belongs to berth: a signal sent to
// that thread's id (kill, tkill, sigqueue, a pidfd or /proc/TID as pidfd,
// SIGIO ownership) would be a signal to berth, and a fatal one ends it.
// Those calls are refused for berth's pid and that thread's id;
// pidfd_send_signal, whose target the filter cannot see, is reported as
// missing (refusedCalls; callers fall back to kill). Tracing berth is refused by the
// kernel already (berth is not dumpable), and here too. prlimit64 on
// another process (an RLIMIT_CPU of 1 s is a kill) is refused.
//
// Landlock does not scope the scheduling calls either: a command running
// as the user could make berth SCHED_IDLE, pin it to one CPU, renice it or
// every process of the user (PRIO_USER), or give it the idle I/O class.
// setpriority, ioprio_set, sched_setscheduler, sched_setparam,
// sched_setattr and sched_setaffinity are allowed on the caller itself
// (pid 0) only, and refused with EPERM for any other pid, process group
// or user; the filter cannot tell a process of the domain from one
// outside, so renicing one's own child by pid is refused too (nice, ionice,
// chrt and taskset starting a command use pid 0 and work).
//
// Under unixDeny no unix datagram socket exists in the domain: a datagram
// socket, even one of a socketpair, can sendto(2) (and connect(2)) any
// pathname socket the user may write, such as journald's or a user
// daemon's. socketpair(2) is allowed for SOCK_STREAM and SOCK_SEQPACKET
// only (whose peers are fixed: connect gives EISCONN, an address given to
// sendto is ignored); SOCK_DGRAM and SOCK_RAW (a datagram socket in
// AF_UNIX) are refused with EACCES, as socket(AF_UNIX) is.
func buildFilter(f filterSpec, me self) []unix.SockFilter {
	allow := uint32(unix.SECCOMP_RET_ALLOW)
	eperm := errno(unix.EPERM)
	notUs := func(argi int) []unix.SockFilter {
		return cat([]unix.SockFilter{ldArg(argi)}, ifEq(uint32(me.pid), ret(eperm)), ifEq(uint32(me.tid), ret(eperm)), ret(allow))
	}
	prog := cat(
		[]unix.SockFilter{ld(offArch)},
		ifEq(nativeArch, []unix.SockFilter{{Code: unix.BPF_JMP | unix.BPF_JA, K: 1}}),
		ret(unix.SECCOMP_RET_KILL_PROCESS),
	)
	if x32Bit != 0 {
		prog = cat(prog, []unix.SockFilter{ld(offNr), {Code: jgeK, K: x32Bit, Jt: 0, Jf: 1}}, ret(unix.SECCOMP_RET_KILL_PROCESS))
	}

	// socket(domain, type, protocol)
	var inet []unix.SockFilter
	switch f.net {
	case NetworkNone:
		inet = ret(errno(unix.EACCES))
	case NetworkLoopback:
		// TCP only (the supervisor checks its addresses); no SCTP or
		// MPTCP, whose extra associations it would not see.
		inet = cat(
			[]unix.SockFilter{ldArg(1), {Code: andK, K: 0xf}},
			ifEq(unix.SOCK_STREAM, cat(
				[]unix.SockFilter{ldArg(2)},
				ifEq(0, ret(allow)),
				ifEq(unix.IPPROTO_TCP, ret(allow)),
				ret(errno(unix.EPROTONOSUPPORT)),
			)),
			ret(errno(unix.EACCES)),
		)
	default:
		inet = ret(allow)
	}
	unixAction := errno(unix.EACCES)
	if f.unix == unixAllow {
		unixAction = allow
	}
	otherFamilies := allow
	if f.net == NetworkNone || f.net == NetworkLoopback {
		otherFamilies = errno(unix.EACCES)
	}
	socket := cat(
		[]unix.SockFilter{ldArg(0)},
		ifEq(unix.AF_UNIX, ret(unixAction)),
		ifEq(unix.AF_NETLINK, ret(allow)),
		ifEq(unix.AF_INET, inet),
		ifEq(unix.AF_INET6, inet),
		ret(otherFamilies),
	)
	// socketpair(domain, type, protocol, sv)
	socketpair := ret(allow)
	if f.unix == unixDeny {
		socketpair = cat(
			[]unix.SockFilter{ldArg(0)},
			ifEq(unix.AF_UNIX, cat(
				[]unix.SockFilter{ldArg(1), {Code: andK, K: 0xf}},
				ifEq(unix.SOCK_STREAM, ret(allow)),
				ifEq(unix.SOCK_SEQPACKET, ret(allow)),
				ret(errno(unix.EACCES)),
			)),
			ret(otherFamilies),
		)
	}
	// selfOnly allows a call whose pid argument is 0 (the caller).
	selfOnly := func(argi int) []unix.SockFilter {
		return cat([]unix.SockFilter{ldArg(argi)}, ifEq(0, ret(allow)), ret(eperm))
	}
	// whoSelf allows setpriority and ioprio_set for (process, 0) only.
	whoSelf := func(process uint32) []unix.SockFilter {
		return cat([]unix.SockFilter{ldArg(0)}, ifEq(process, selfOnly(1)), ret(eperm))
	}
	prog = cat(prog,
		onSyscall(unix.SYS_SOCKETPAIR, socketpair),
		onSyscall(unix.SYS_SETPRIORITY, whoSelf(unix.PRIO_PROCESS)),
		onSyscall(unix.SYS_IOPRIO_SET, whoSelf(ioprioWhoProcess)),
		onSyscall(unix.SYS_SCHED_SETSCHEDULER, selfOnly(0)),
		onSyscall(unix.SYS_SCHED_SETPARAM, selfOnly(0)),
		onSyscall(unix.SYS_SCHED_SETATTR, selfOnly(0)),
		onSyscall(unix.SYS_SCHED_SETAFFINITY, selfOnly(0)),
		onSyscall(unix.SYS_KILL, notUs(0)),
		onSyscall(unix.SYS_TKILL, notUs(0)),
		onSyscall(unix.SYS_TGKILL, notUs(0)),
		onSyscall(unix.SYS_RT_SIGQUEUEINFO, notUs(0)),
		onSyscall(unix.SYS_RT_TGSIGQUEUEINFO, notUs(0)),
		onSyscall(unix.SYS_PIDFD_OPEN, notUs(0)),
		onSyscall(unix.SYS_PTRACE, notUs(1)),
		onSyscall(unix.SYS_PROCESS_VM_READV, notUs(0)),
		onSyscall(unix.SYS_PROCESS_VM_WRITEV, notUs(0)),
		onSyscall(unix.SYS_FCNTL, cat(
			[]unix.SockFilter{ldArg(1)},
			ifEq(unix.F_SETOWN_EX, ret(errno(unix.EINVAL))),
			ifEq(unix.F_SETOWN, notUs(2)),
			ret(allow),
		)),
		onSyscall(unix.SYS_PRLIMIT64, cat(
			[]unix.SockFilter{ldArg(0)},
			ifEq(0, ret(allow)),
			[]unix.SockFilter{ldArg(2)}, // new limit: low and high word
			ifEq(0, cat([]unix.SockFilter{ld(offArgs + 8*2 + 4)}, ifEq(0, ret(allow)), ret(eperm))),
			ret(eperm),
		)),
		onSyscall(unix.SYS_SOCKET, socket),
		onSyscall(unix.SYS_IO_URING_SETUP, ret(errno(unix.ENOSYS))),
		onSyscall(unix.SYS_IO_URING_ENTER, ret(errno(unix.ENOSYS))),
		onSyscall(unix.SYS_IO_URING_REGISTER, ret(errno(unix.ENOSYS))),
		onSyscall(unix.SYS_IOCTL, cat(
			[]unix.SockFilter{ldArg(1)},
			ifEq(unix.TIOCSTI, ret(errno(unix.EPERM))),
			ifEq(unix.TIOCLINUX, ret(errno(unix.EPERM))),
			ifEq(fsIocSetflags, ret(errno(unix.EPERM))),
			ifEq(fsIoc32Setflags, ret(errno(unix.EPERM))),
			ifEq(fsIocFssetxattr, ret(errno(unix.EPERM))),
			ret(allow),
		)),
	)
	for _, nr := range sortedKeys(refusedCalls) {
		prog = cat(prog, onSyscall(nr, ret(errno(refusedCalls[nr]))))
	}
	// No set-user-ID or set-group-ID file is created: a root berth's
	// commands could otherwise leave a root-owned one in the workspace.
	setid := uint32(unix.S_ISUID | unix.S_ISGID)
	for _, c := range createCalls {
		check := cat([]unix.SockFilter{ldArg(c.mode)}, ifSet(setid, ret(eperm)), ret(allow))
		if c.flags != noArg {
			check = cat([]unix.SockFilter{ldArg(c.flags)}, ifSet(openCreates, check), ret(allow))
		}
		prog = cat(prog, onSyscall(c.nr, check))
	}
	if f.meta {
		for _, nr := range sortedKeys(metaCalls) {
			prog = cat(prog, onSyscall(nr, ret(unix.SECCOMP_RET_USER_NOTIF)))
		}
	}
	if f.loopback {
		fastOpen := func(flagsArg int) []unix.SockFilter {
			return cat([]unix.SockFilter{ldArg(flagsArg)}, ifSet(unix.MSG_FASTOPEN, ret(errno(unix.EOPNOTSUPP))), ret(allow))
		}
		prog = cat(prog,
			onSyscall(unix.SYS_CONNECT, ret(unix.SECCOMP_RET_USER_NOTIF)),
			onSyscall(unix.SYS_BIND, ret(unix.SECCOMP_RET_USER_NOTIF)),
			onSyscall(unix.SYS_LISTEN, ret(unix.SECCOMP_RET_USER_NOTIF)),
			onSyscall(unix.SYS_SENDTO, fastOpen(3)),
			onSyscall(unix.SYS_SENDMSG, fastOpen(2)),
			onSyscall(unix.SYS_SENDMMSG, fastOpen(3)),
		)
	}
	return cat(prog, ret(allow))
}

func sortedKeys[V any](m map[uintptr]V) []uintptr {
	keys := make([]uintptr, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// installFilter installs filter on the calling thread only (no TSYNC);
// with notify it returns the listener descriptor (close-on-exec), else -1.
// no_new_privs must be set.
func installFilter(filter []unix.SockFilter, notify bool) (int, error) {
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	flags := uintptr(0)
	if notify {
		// WAIT_KILLABLE_RECV (5.19): once the supervisor has the call,
		// only a fatal signal interrupts it, so a call it performed is
		// never reported as interrupted.
		flags = unix.SECCOMP_FILTER_FLAG_NEW_LISTENER | unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
	}
	for {
		r, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&prog)))
		if e == unix.EINVAL && flags&unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV != 0 {
			flags &^= unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
			continue
		}
		if e != 0 {
			return -1, fmt.Errorf("confine: install seccomp filter: %w", e)
		}
		if !notify {
			return -1, nil
		}
		if int(r) < 0 {
			return -1, errors.New("confine: install seccomp filter: no listener returned")
		}
		return int(r), nil
	}
}
