package confine

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Support is what this kernel offers for confinement.
type Support struct {
	// ABI is the Landlock ABI version (0: no Landlock). A kernel whose
	// signal scoping has the bug fixed by erratum 2 counts as ABI 5, as
	// go-landlock does.
	ABI int
	// NoLandlock says why ABI is 0.
	NoLandlock string
	// Seccomp is true when seccomp filters can be installed here (the
	// kernel has them and berth knows this architecture's system calls).
	Seccomp bool
	// NoSeccomp says why Seccomp is false.
	NoSeccomp string
	// Notify is true when the loopback supervisor can work: seccomp user
	// notification (Linux 5.0) and pidfd_getfd (Linux 5.6).
	Notify bool
	// NoNotify says why Notify is false.
	NoNotify string
	// MountNS is true when a Domain's thread can have a mount namespace
	// of its own, which Policy.ReadOnly and Policy.Pinned need: berth has
	// CAP_SYS_ADMIN (runs as root) and the kernel has mount_setattr
	// (Linux 5.12).
	MountNS bool
	// NoMountNS says why MountNS is false.
	NoMountNS string
}

var (
	probeOnce sync.Once
	probed    Support
)

// Probe returns what this kernel offers; it is computed once.
func Probe() Support {
	probeOnce.Do(func() { probed = probe() })
	return probed
}

func probe() Support {
	var s Support
	v, err := ll.LandlockGetABIVersion()
	switch {
	case errors.Is(err, unix.ENOSYS):
		s.NoLandlock = "this kernel has no Landlock (Linux 5.13 or later, built with CONFIG_SECURITY_LANDLOCK)"
	case errors.Is(err, unix.EOPNOTSUPP):
		s.NoLandlock = "Landlock is built in but not enabled at boot (add landlock to the lsm= kernel parameter)"
	case err != nil:
		s.NoLandlock = fmt.Sprintf("Landlock ABI query failed: %v", err)
	default:
		s.ABI = v
		if v >= 6 {
			if errata, err := ll.LandlockGetErrata(); err != nil || errata&0x2 == 0 {
				s.ABI = 5 // signal scoping without its fix
			}
		}
	}
	if nativeArch == 0 {
		s.NoSeccomp = "berth has no seccomp filter for this architecture"
	} else {
		// SECCOMP_GET_ACTION_AVAIL answers without installing anything.
		action := uint32(unix.SECCOMP_RET_ERRNO)
		if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action))); e != 0 {
			s.NoSeccomp = fmt.Sprintf("seccomp filters are not available (%v): the kernel needs CONFIG_SECCOMP_FILTER", e)
		} else {
			s.Seccomp = true
		}
	}
	switch {
	case !s.Seccomp:
		s.NoNotify = "no seccomp filters"
	default:
		action := uint32(unix.SECCOMP_RET_USER_NOTIF)
		if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action))); e != 0 {
			s.NoNotify = "seccomp user notification needs Linux 5.0"
			break
		}
		// pidfd_getfd on a bad descriptor: EBADF means it exists.
		if _, err := unix.PidfdGetfd(-1, 0, 0); errors.Is(err, unix.ENOSYS) {
			s.NoNotify = "pidfd_getfd needs Linux 5.6"
			break
		}
		s.Notify = true
	}
	if s.NoMountNS = probeMountNS(); s.NoMountNS == "" {
		s.MountNS = true
	}
	return s
}

// Landlock access rights, by the ABI that introduced them.
const (
	fsWriteABI1 = ll.AccessFSWriteFile | ll.AccessFSRemoveDir | ll.AccessFSRemoveFile |
		ll.AccessFSMakeChar | ll.AccessFSMakeDir | ll.AccessFSMakeReg | ll.AccessFSMakeSock |
		ll.AccessFSMakeFifo | ll.AccessFSMakeBlock | ll.AccessFSMakeSym
	fsDevices = ll.AccessFSMakeChar | ll.AccessFSMakeBlock
)

// plan is how a Policy is enforced on this kernel.
type plan struct {
	abi      int
	landlock bool // a ruleset is applied
	handled  uint64
	scoped   uint64
	netTCP   bool // Landlock's TCP rights handled, no port allowed
	seccomp  bool
	filter   filterSpec

	writes       bool // Policy.Writable is the whole truth about writes
	signals      bool
	network      Network
	unixConfined bool
	mountNS      bool // Policy.ReadOnly and Pinned are kept
	missing      []string
}

// plan decides the mechanisms for p and lists what cannot be enforced.
func (s Support) plan(p Policy) plan {
	pl := plan{abi: s.ABI, network: NetworkAll}
	need := func(what string) { pl.missing = append(pl.missing, what) }

	if s.ABI >= 1 {
		pl.landlock = true
		pl.handled = fsWriteABI1
		if s.ABI >= 2 {
			pl.handled |= ll.AccessFSRefer
		}
		if s.ABI >= 3 {
			pl.handled |= ll.AccessFSTruncate
			pl.writes = true
		} else {
			need(fmt.Sprintf("confining truncate(2) needs Landlock ABI 3 (Linux 6.2); this kernel has ABI %d", s.ABI))
		}
		if s.ABI >= 6 {
			pl.scoped = ll.ScopeSignal | ll.ScopeAbstractUnixSocket
			pl.signals = true
		} else {
			need(fmt.Sprintf("confining signals needs Landlock ABI 6 (Linux 6.12); this kernel has ABI %d", s.ABI))
		}
		if s.ABI >= 9 && !p.UnixSockets && p.Network != NetworkLoopback {
			pl.handled |= ll.AccessFSResolveUnix
		}
	} else {
		need("confining writes and signals needs Landlock: " + s.NoLandlock)
	}

	pl.seccomp = s.Seccomp
	f := filterSpec{unix: unixDeny, meta: s.Notify}
	if !s.Notify {
		// Landlock leaves chmod, chown, extended attributes and
		// timestamps alone: without the supervisor, files outside
		// the writable trees are not read-only.
		pl.writes = false
		need("confining chmod, chown, extended attributes and timestamps needs " + s.NoNotify)
	}
	switch {
	case p.UnixSockets:
		f.unix = unixAllow
	case pl.handled&ll.AccessFSResolveUnix != 0 && pl.scoped&ll.ScopeAbstractUnixSocket != 0:
		f.unix = unixAllow // Landlock confines pathname and abstract sockets itself
		pl.unixConfined = true
	default:
		pl.unixConfined = s.Seccomp
	}
	if !p.UnixSockets && !pl.unixConfined {
		need("refusing unix sockets (through which a daemon outside could act for a command) needs seccomp: " + s.NoSeccomp)
	}
	if !s.Seccomp {
		need("refusing TIOCSTI (typing into the terminal) and io_uring needs seccomp: " + s.NoSeccomp)
	}

	switch p.Network {
	case NetworkNone:
		if s.Seccomp {
			f.net = NetworkNone
			pl.network = NetworkNone
		} else {
			need("blocking the network needs seccomp: " + s.NoSeccomp)
		}
		if s.ABI >= 4 {
			pl.netTCP = true
		}
	case NetworkLoopback:
		if s.Notify {
			f.net = NetworkLoopback
			f.loopback = true
			pl.network = NetworkLoopback
		} else {
			need("loopback-only networking needs " + s.NoNotify)
		}
	}
	if len(p.ReadOnly)+len(p.Pinned) > 0 {
		if s.MountNS {
			pl.mountNS = true
		} else {
			need("keeping paths inside the writable trees read-only needs a mount namespace of the domain's own: " + s.NoMountNS)
		}
	}
	pl.filter = f
	return pl
}

// ruleset builds the Landlock ruleset of the plan: the handled write
// rights, granted under the writable trees (all but making device nodes)
// and for writing the harmless devices.
func (pl plan) ruleset(writable []string) (int, uint32, error) {
	cfg := landlock.Config{
		HandledAccessFS: landlock.AccessFSSet(pl.handled),
		Scoped:          landlock.ScopedSet(pl.scoped),
	}
	if pl.netTCP {
		cfg.HandledAccessNet = landlock.AccessNetSet(ll.AccessNetBindTCP | ll.AccessNetConnectTCP)
	}
	rules := []landlock.Rule{
		landlock.PathAccess(landlock.AccessFSSet(pl.handled&^fsDevices), writable...),
		landlock.PathAccess(landlock.AccessFSSet(pl.handled&(ll.AccessFSWriteFile|ll.AccessFSTruncate)), devices...).IgnoreIfMissing(),
	}
	fd, flags, err := cfg.NewRulesetFD(rules...)
	if err != nil {
		return -1, 0, fmt.Errorf("confine: Landlock ruleset: %w", err)
	}
	if fd < 0 {
		return -1, 0, errors.New("confine: Landlock ruleset: nothing to enforce")
	}
	return fd, flags, nil
}

// Missing lists what this kernel cannot enforce of p; nil when New(p)
// would enforce all of it.
func (s Support) Missing(p Policy) []string {
	if p.Network == "" {
		p.Network = NetworkAll
	}
	return s.plan(p).missing
}
