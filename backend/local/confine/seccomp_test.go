package confine

import (
	"encoding/binary"
	"fmt"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// call is one system call as the filter sees it: its number and
// arguments, on the build's architecture unless arch is set.
type call struct {
	name string
	nr   uintptr
	args [6]uint64
	arch uint32
}

func sys(name string, nr uintptr, args ...uint64) call {
	c := call{name: name, nr: nr}
	copy(c.args[:], args)
	return c
}

// seccompData lays c out as struct seccomp_data for x/net/bpf's VM. The
// kernel loads the structure's 32-bit words in the machine's byte order;
// the VM, written for packets, loads them big-endian. So each word is
// written big-endian at its offset, and the VM loads the value the kernel
// would: an argument's low word (at +0 on a little-endian machine, which
// the filter's offsets assume) and its high word (at +4).
func (c call) seccompData() []byte {
	b := make([]byte, 64)
	arch := c.arch
	if arch == 0 {
		arch = nativeArch
	}
	binary.BigEndian.PutUint32(b[offNr:], uint32(c.nr))
	binary.BigEndian.PutUint32(b[offArch:], arch)
	for i, a := range c.args {
		binary.BigEndian.PutUint32(b[offArgs+8*i:], uint32(a))
		binary.BigEndian.PutUint32(b[offArgs+8*i+4:], uint32(a>>32))
	}
	return b
}

// verdict runs filter over c in the VM and names the result.
func verdict(t *testing.T, vm *bpf.VM, c call) string {
	t.Helper()
	v, err := vm.Run(c.seccompData())
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	return actionName(uint32(v))
}

func actionName(v uint32) string {
	switch v & unix.SECCOMP_RET_ACTION_FULL {
	case unix.SECCOMP_RET_ALLOW:
		return "allow"
	case unix.SECCOMP_RET_KILL_PROCESS:
		return "kill"
	case unix.SECCOMP_RET_USER_NOTIF:
		return "supervisor"
	case unix.SECCOMP_RET_ERRNO:
		e := unix.Errno(v & unix.SECCOMP_RET_DATA)
		if e == unix.EOPNOTSUPP {
			return "EOPNOTSUPP" // ErrnoName says ENOTSUP, its alias
		}
		return unix.ErrnoName(e)
	}
	return fmt.Sprintf("action %#x", v)
}

func newVM(t *testing.T, f filterSpec, me self) *bpf.VM {
	t.Helper()
	prog := buildFilter(f, me)
	if len(prog) > unix.BPF_MAXINSNS {
		t.Fatalf("the filter has %d instructions; the kernel takes at most %d", len(prog), unix.BPF_MAXINSNS)
	}
	raw := make([]bpf.RawInstruction, len(prog))
	for i, in := range prog {
		raw[i] = bpf.RawInstruction{Op: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	insts, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatalf("the filter holds instructions the VM cannot decode: %v", insts)
	}
	vm, err := bpf.NewVM(insts)
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

// TestFilterTruthTable runs the seccomp filter over synthetic calls in a
// BPF virtual machine, so it holds on any kernel (one without Landlock or
// seccomp too) and the table, not the opcodes, is what a reader checks.
func TestFilterTruthTable(t *testing.T) {
	if nativeArch == 0 {
		t.Skip("berth has no seccomp filter for this architecture")
	}
	me := self{pid: 4242, tid: 4243}
	const (
		other  = 777
		eacces = "EACCES"
		eperm  = "EPERM"
	)
	hi := uint64(1) << 32 // a high word the kernel drops from an int argument
	common := []struct {
		c    call
		want string
	}{
		// Another ABI's numbers mean other calls.
		{call{name: "any call, 32-bit ABI", nr: unix.SYS_GETPID, arch: unix.AUDIT_ARCH_I386}, "kill"},
		{call{name: "any call, arm32 ABI", nr: unix.SYS_GETPID, arch: unix.AUDIT_ARCH_ARM}, "kill"},
		{sys("getpid", unix.SYS_GETPID), "allow"},

		// berth's pid and its confined thread cannot be signalled,
		// traced, limited or made the owner of SIGIO.
		{sys("kill(berth)", unix.SYS_KILL, uint64(me.pid), 9), eperm},
		{sys("kill(berth's domain thread)", unix.SYS_KILL, uint64(me.tid), 9), eperm},
		{sys("kill(berth) with a high word", unix.SYS_KILL, hi|uint64(me.pid), 9), eperm},
		{sys("kill(other)", unix.SYS_KILL, other, 9), "allow"},
		{sys("kill(-1)", unix.SYS_KILL, uint64(0xffffffff), 9), "allow"}, // Landlock scopes it
		{sys("tkill(berth's thread)", unix.SYS_TKILL, uint64(me.tid), 9), eperm},
		{sys("tgkill(berth, …)", unix.SYS_TGKILL, uint64(me.pid), other, 9), eperm},
		{sys("rt_sigqueueinfo(berth)", unix.SYS_RT_SIGQUEUEINFO, uint64(me.pid), 9, 0), eperm},
		{sys("rt_tgsigqueueinfo(berth)", unix.SYS_RT_TGSIGQUEUEINFO, uint64(me.pid), other, 9, 0), eperm},
		{sys("pidfd_open(berth)", unix.SYS_PIDFD_OPEN, uint64(me.pid), 0), eperm},
		{sys("pidfd_open(other)", unix.SYS_PIDFD_OPEN, other, 0), "allow"},
		{sys("pidfd_send_signal", unix.SYS_PIDFD_SEND_SIGNAL, 3, 9, 0, 0), "ENOSYS"},
		{sys("ptrace(ATTACH, berth)", unix.SYS_PTRACE, unix.PTRACE_ATTACH, uint64(me.pid)), eperm},
		{sys("process_vm_readv(berth)", unix.SYS_PROCESS_VM_READV, uint64(me.pid)), eperm},
		{sys("process_vm_writev(berth's thread)", unix.SYS_PROCESS_VM_WRITEV, uint64(me.tid)), eperm},
		{sys("fcntl(F_SETOWN, berth)", unix.SYS_FCNTL, 3, unix.F_SETOWN, uint64(me.pid)), eperm},
		{sys("fcntl(F_SETOWN, other)", unix.SYS_FCNTL, 3, unix.F_SETOWN, other), "allow"},
		{sys("fcntl(F_SETOWN_EX)", unix.SYS_FCNTL, 3, unix.F_SETOWN_EX, 0), "EINVAL"},
		{sys("fcntl(F_GETFL)", unix.SYS_FCNTL, 3, unix.F_GETFL), "allow"},
		{sys("prlimit64(self, set)", unix.SYS_PRLIMIT64, 0, unix.RLIMIT_CPU, 0x1000), "allow"},
		{sys("prlimit64(other, get)", unix.SYS_PRLIMIT64, other, unix.RLIMIT_CPU, 0, 0x2000), "allow"},
		{sys("prlimit64(other, set)", unix.SYS_PRLIMIT64, other, unix.RLIMIT_CPU, 0x1000), eperm},
		{sys("prlimit64(other, set, high address)", unix.SYS_PRLIMIT64, other, unix.RLIMIT_CPU, 0x7fff00000000), eperm},

		// R6: the scheduling of any process but the caller.
		{sys("setpriority(PROCESS, 0)", unix.SYS_SETPRIORITY, unix.PRIO_PROCESS, 0, 19), "allow"},
		{sys("setpriority(PROCESS, berth)", unix.SYS_SETPRIORITY, unix.PRIO_PROCESS, uint64(me.pid), 19), eperm},
		{sys("setpriority(PROCESS, other)", unix.SYS_SETPRIORITY, unix.PRIO_PROCESS, other, 19), eperm},
		{sys("setpriority(PROCESS, 0 with a high word)", unix.SYS_SETPRIORITY, unix.PRIO_PROCESS, hi, 19), "allow"},
		{sys("setpriority(PGRP, 0)", unix.SYS_SETPRIORITY, unix.PRIO_PGRP, 0, 19), eperm},
		{sys("setpriority(USER, 0)", unix.SYS_SETPRIORITY, unix.PRIO_USER, 0, 19), eperm},
		{sys("setpriority(USER, 1000)", unix.SYS_SETPRIORITY, unix.PRIO_USER, 1000, 19), eperm},
		{sys("ioprio_set(PROCESS, 0)", unix.SYS_IOPRIO_SET, ioprioWhoProcess, 0, 3<<13), "allow"},
		{sys("ioprio_set(PROCESS, berth)", unix.SYS_IOPRIO_SET, ioprioWhoProcess, uint64(me.pid), 3<<13), eperm},
		{sys("ioprio_set(PGRP, 0)", unix.SYS_IOPRIO_SET, 2, 0, 3<<13), eperm},
		{sys("ioprio_set(USER, 1000)", unix.SYS_IOPRIO_SET, 3, 1000, 3<<13), eperm},
		{sys("sched_setscheduler(0)", unix.SYS_SCHED_SETSCHEDULER, 0, 5), "allow"},
		{sys("sched_setscheduler(berth's thread, IDLE)", unix.SYS_SCHED_SETSCHEDULER, uint64(me.tid), 5), eperm},
		{sys("sched_setscheduler(other)", unix.SYS_SCHED_SETSCHEDULER, other, 5), eperm},
		{sys("sched_setparam(0)", unix.SYS_SCHED_SETPARAM, 0), "allow"},
		{sys("sched_setparam(other)", unix.SYS_SCHED_SETPARAM, other), eperm},
		{sys("sched_setattr(0)", unix.SYS_SCHED_SETATTR, 0), "allow"},
		{sys("sched_setattr(berth)", unix.SYS_SCHED_SETATTR, uint64(me.pid)), eperm},
		{sys("sched_setaffinity(0)", unix.SYS_SCHED_SETAFFINITY, 0, 8), "allow"},
		{sys("sched_setaffinity(berth)", unix.SYS_SCHED_SETAFFINITY, uint64(me.pid), 8), eperm},
		{sys("sched_getaffinity(berth)", unix.SYS_SCHED_GETAFFINITY, uint64(me.pid), 8), "allow"},

		// Calls that would bypass the filter, or type into a terminal.
		{sys("io_uring_setup", unix.SYS_IO_URING_SETUP, 8, 0), "ENOSYS"},
		{sys("io_uring_enter", unix.SYS_IO_URING_ENTER), "ENOSYS"},
		{sys("io_uring_register", unix.SYS_IO_URING_REGISTER), "ENOSYS"},
		{sys("openat2", unix.SYS_OPENAT2), "ENOSYS"},
		{sys("setxattrat", unix.SYS_SETXATTRAT), "ENOSYS"},
		{sys("ioctl(TIOCSTI)", unix.SYS_IOCTL, 0, unix.TIOCSTI), eperm},
		{sys("ioctl(TIOCLINUX)", unix.SYS_IOCTL, 0, unix.TIOCLINUX), eperm},
		{sys("ioctl(FS_IOC_SETFLAGS)", unix.SYS_IOCTL, 3, fsIocSetflags), eperm},
		{sys("ioctl(TCGETS)", unix.SYS_IOCTL, 0, unix.TCGETS), "allow"},

		// No set-user-ID or set-group-ID file is created.
		{sys("openat(O_CREAT, 0755)", unix.SYS_OPENAT, uint64(0xffffff9c), 0, unix.O_CREAT|unix.O_WRONLY, 0o755), "allow"},
		{sys("openat(O_CREAT, 04755)", unix.SYS_OPENAT, uint64(0xffffff9c), 0, unix.O_CREAT|unix.O_WRONLY, 0o4755), eperm},
		{sys("openat(O_TMPFILE, 02755)", unix.SYS_OPENAT, uint64(0xffffff9c), 0, unix.O_TMPFILE|unix.O_WRONLY, 0o2755), eperm},
		{sys("openat(O_RDONLY, garbage mode)", unix.SYS_OPENAT, uint64(0xffffff9c), 0, unix.O_RDONLY, 0o4755), "allow"},
		{sys("mknodat(04755)", unix.SYS_MKNODAT, uint64(0xffffff9c), 0, unix.S_IFREG|0o4755), eperm},

		// Metadata changes go to the supervisor.
		{sys("fchmodat", unix.SYS_FCHMODAT, uint64(0xffffff9c), 0, 0o644), "supervisor"},
		{sys("fchownat", unix.SYS_FCHOWNAT, uint64(0xffffff9c), 0, 0, 0, 0), "supervisor"},
		{sys("utimensat", unix.SYS_UTIMENSAT, uint64(0xffffff9c), 0, 0, 0), "supervisor"},
		{sys("fsetxattr", unix.SYS_FSETXATTR, 3, 0, 0, 0, 0), "supervisor"},

		{sys("socket(AF_NETLINK)", unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, 0), "allow"},
	}

	networks := []struct {
		name string
		spec filterSpec
		rows []struct {
			c    call
			want string
		}
	}{
		{"all", filterSpec{unix: unixDeny, meta: true}, []struct {
			c    call
			want string
		}{
			{sys("socket(AF_UNIX)", unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, 0), eacces},
			{sys("socket(AF_UNIX, DGRAM|CLOEXEC)", unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0), eacces},
			{sys("socket(AF_INET, DGRAM)", unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM, 0), "allow"},
			{sys("socket(AF_INET6, STREAM)", unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_STREAM, 0), "allow"},
			{sys("socket(AF_PACKET)", unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_RAW, 0), "allow"},
			// R5: no unix datagram socket, through socketpair either.
			{sys("socketpair(AF_UNIX, STREAM)", unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_STREAM, 0), "allow"},
			{sys("socketpair(AF_UNIX, STREAM|CLOEXEC|NONBLOCK)", unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0), "allow"},
			{sys("socketpair(AF_UNIX, SEQPACKET)", unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_SEQPACKET, 0), "allow"},
			{sys("socketpair(AF_UNIX, DGRAM)", unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_DGRAM, 0), eacces},
			{sys("socketpair(AF_UNIX, DGRAM|CLOEXEC)", unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0), eacces},
			{sys("socketpair(AF_UNIX, RAW)", unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_RAW, 0), eacces},
			{sys("connect", unix.SYS_CONNECT, 3, 0, 16), "allow"},
			{sys("sendto(MSG_FASTOPEN)", unix.SYS_SENDTO, 3, 0, 1, unix.MSG_FASTOPEN), "allow"},
		}},
		{"loopback", filterSpec{unix: unixDeny, net: NetworkLoopback, loopback: true, meta: true}, []struct {
			c    call
			want string
		}{
			{sys("socket(AF_UNIX)", unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, 0), eacces},
			{sys("socket(AF_INET, STREAM)", unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, 0), "allow"},
			{sys("socket(AF_INET6, STREAM|NONBLOCK, TCP)", unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, unix.IPPROTO_TCP), "allow"},
			{sys("socket(AF_INET, STREAM, SCTP)", unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_SCTP), "EPROTONOSUPPORT"},
			{sys("socket(AF_INET, DGRAM)", unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM, 0), eacces},
			{sys("socket(AF_PACKET)", unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_RAW, 0), eacces},
			{sys("socketpair(AF_UNIX, STREAM)", unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_STREAM, 0), "allow"},
			{sys("socketpair(AF_UNIX, DGRAM)", unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_DGRAM, 0), eacces},
			{sys("connect", unix.SYS_CONNECT, 3, 0, 16), "supervisor"},
			{sys("bind", unix.SYS_BIND, 3, 0, 16), "supervisor"},
			{sys("listen", unix.SYS_LISTEN, 3, 5), "supervisor"},
			{sys("sendto(MSG_FASTOPEN)", unix.SYS_SENDTO, 3, 0, 1, unix.MSG_FASTOPEN), "EOPNOTSUPP"},
			{sys("sendto", unix.SYS_SENDTO, 3, 0, 1, 0), "allow"},
			{sys("sendmsg(MSG_FASTOPEN)", unix.SYS_SENDMSG, 3, 0, unix.MSG_FASTOPEN), "EOPNOTSUPP"},
		}},
		{"none", filterSpec{unix: unixDeny, net: NetworkNone, meta: true}, []struct {
			c    call
			want string
		}{
			{sys("socket(AF_INET, STREAM)", unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, 0), eacces},
			{sys("socket(AF_INET6, DGRAM)", unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_DGRAM, 0), eacces},
			{sys("socket(AF_UNIX)", unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, 0), eacces},
			{sys("socket(AF_NETLINK)", unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, 0), "allow"},
			{sys("socketpair(AF_UNIX, SEQPACKET)", unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_SEQPACKET, 0), "allow"},
			{sys("socketpair(AF_UNIX, DGRAM)", unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_DGRAM, 0), eacces},
		}},
		{"unix sockets allowed", filterSpec{unix: unixAllow, meta: true}, []struct {
			c    call
			want string
		}{
			{sys("socket(AF_UNIX)", unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, 0), "allow"},
			{sys("socketpair(AF_UNIX, DGRAM)", unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_DGRAM, 0), "allow"},
		}},
	}
	if x32Bit != 0 {
		common = append(common, struct {
			c    call
			want string
		}{sys("getpid, x32 ABI", x32Bit|unix.SYS_GETPID), "kill"})
	}
	for _, n := range networks {
		t.Run(n.name, func(t *testing.T) {
			vm := newVM(t, n.spec, me)
			for _, r := range common {
				if got := verdict(t, vm, r.c); got != r.want {
					t.Errorf("%s: %s, want %s", r.c.name, got, r.want)
				}
			}
			for _, r := range n.rows {
				if got := verdict(t, vm, r.c); got != r.want {
					t.Errorf("%s: %s, want %s", r.c.name, got, r.want)
				}
			}
		})
	}

	// Without the supervisor, metadata calls are not handed to it.
	vm := newVM(t, filterSpec{unix: unixDeny}, me)
	if got := verdict(t, vm, sys("fchmodat", unix.SYS_FCHMODAT, uint64(0xffffff9c), 0, 0o644)); got != "allow" {
		t.Errorf("fchmodat without the supervisor: %s", got)
	}
}

// TestSeccompDataLayout checks the layout seccompData gives the VM: a
// load at an argument's offset reads the argument's low 32 bits, as the
// kernel's load does on a little-endian machine.
func TestSeccompDataLayout(t *testing.T) {
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArgs + 8, Size: 4},
		bpf.RetA{},
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	got, err := vm.Run(sys("x", 0, 0, 0x1122334455667788).seccompData())
	if err != nil || uint32(got) != 0x55667788 {
		t.Fatalf("low word of argument 1: %#x %v, want 0x55667788", got, err)
	}
}
