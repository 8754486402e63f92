// Package confine confines the processes of one environment on this
// machine in the kernel, so that what they may write, signal and reach does
// not depend on how a command is spelled: a Domain is an OS thread of the
// calling process, restricted once (Landlock, a seccomp filter, no new
// privileges, a reduced capability set), from which every process of the
// environment is forked. A process inherits its forking thread's
// restrictions and passes them on to everything it starts; none of them can
// be lifted from inside.
//
// # What a Domain enforces
//
//   - Writes (Landlock, ABI 3, Linux 6.2): creating, writing, truncating,
//     renaming, linking and removing files only under Policy.Writable, plus
//     writing the harmless character devices (/dev/null, /dev/zero,
//     /dev/full, /dev/tty, /dev/random, /dev/urandom). Device nodes cannot
//     be created anywhere. Reading and executing are not restricted: the
//     processes read what the user can read.
//   - Metadata (the supervisor): Landlock leaves chmod, chown, extended
//     attributes and timestamps alone. The filter hands those calls to a
//     supervisor goroutine (SECCOMP_RET_USER_NOTIF), which resolves the
//     caller's path once into a descriptor, checks that the file lies in a
//     writable tree by walking up its directories, and makes the change on
//     that descriptor. No set-user-ID or set-group-ID file is made, and
//     only user.* attributes and ACLs are set.
//   - Read-only paths inside the writable trees (Policy.ReadOnly, a mount
//     namespace of the Domain's thread; see mounts.go): Landlock only
//     grants, so berth's own settings or a repository's hooks inside the
//     workspace are bound read-only onto themselves there, and the
//     directories down to them (and Policy.Pinned) onto themselves, so
//     nothing on the way can be renamed away and replaced. It needs
//     CAP_SYS_ADMIN (Support.MountNS).
//   - Signals (Landlock scopes, ABI 6, Linux 6.12): kill, SIGIO and ptrace
//     reach only processes of the same domain, so `kill -9 -1` ends the
//     environment's own processes and nothing else. Abstract unix sockets
//     outside the domain cannot be connected to either. The Domain's own
//     thread belongs to the domain but also to berth; the filter refuses
//     every call that would signal, trace or limit berth through it.
//   - Scheduling (seccomp): Landlock does not scope setpriority,
//     ioprio_set or the sched_set* calls; the filter allows them on the
//     caller itself only, so berth and the user's other processes cannot
//     be reniced, made SCHED_IDLE or pinned to one CPU.
//   - Unix sockets (seccomp): a unix socket is how a process asks a daemon
//     outside to act for it (the Docker daemon, the user's D-Bus session
//     bus and through it systemd, tmux and ssh control sockets, berth's own
//     daemon) — each a way to write outside the workspace however the
//     command is spelled. Creating AF_UNIX sockets is refused unless
//     Policy.UnixSockets; socketpair(2) works for stream and seqpacket
//     sockets, not datagram ones (which sendto(2) any pathname socket).
//     On Landlock ABI 9 the kernel
//     restricts connecting to pathname sockets itself, and sockets under
//     the writable trees are then allowed.
//   - Network (Policy.Network): NetworkNone refuses every socket but unix
//     and netlink ones (seccomp, and Landlock's TCP rights from ABI 4).
//     NetworkLoopback allows TCP to loopback addresses only: the supervisor
//     takes connect(2), bind(2) and listen(2), copies the address once,
//     checks the copy and makes the call itself with it on the process's
//     own socket (pidfd_getfd), so the address it checked is the address
//     used; a bind to the wildcard address binds loopback; UDP, raw
//     sockets, SCTP, MPTCP and TCP Fast Open are refused.
//   - Always: TIOCSTI and TIOCLINUX ioctls (typing into a terminal), chattr
//     and io_uring (which would bypass the filter) are refused; no process
//     gains privileges through setuid or file capabilities
//     (PR_SET_NO_NEW_PRIVS); and when berth runs as root, the capabilities
//     that reach past these rules (loading modules, raw I/O, mounting,
//     rebooting, setting the clock, ...) are dropped from every set.
//
// Enforced reports exactly what this kernel enforces; Support says what
// it offers. New fails, naming what is missing, when the kernel cannot
// enforce the whole Policy, unless Policy.Partial asks for what it can.
//
// # Why a thread, and not a helper or bubblewrap
//
// Landlock, seccomp filters, no_new_privs and capabilities all belong to a
// thread and are inherited by its children; restricting the whole process
// (go-landlock's usual calls) would confine berth itself, or the Go
// program that uses berth as a library. A Domain's goroutine locks itself
// to an OS thread, restricts that thread alone and never unlocks it: the
// Go runtime then never schedules another goroutine there, creates new
// threads from a clean template thread instead of cloning a locked one,
// and ends the thread when the goroutine returns (Close). The main thread
// is never used: its id is the process's, so confining it would put berth
// itself in the domain. Every process of the environment is forked from
// the one thread, so they all share one Landlock domain and may signal
// each other (a timeout's kill helper reaches the command's tree).
//
// Measured on the 2-core test machine (heavily loaded; see BenchmarkNew,
// BenchmarkStart and BenchmarkChmod): confining costs about 1-4 ms once per
// environment, a mount namespace with read-only paths a few tenths of a
// millisecond more; a start from the Domain costs what a plain fork/exec
// costs, in a mount namespace too;
// a metadata call pays a round trip to the supervisor (tenths of a
// millisecond); other system calls pay nothing, since the kernel caches the
// filter's verdict for every call whose verdict does not depend on its
// arguments.
//
// A re-executed helper would work for both binaries, but every start would
// pay for a second exec and a Go runtime start, and a Go program using
// berth as a library would need a hook in its main. bubblewrap cannot scope
// signals without a PID namespace per start (which would hide the shell's
// processes from the kill helper started next to it), needs unprivileged
// user namespaces or a setuid binary, is an external program, and made a
// start about five times slower here.
package confine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Network says which IP networking the processes of a Domain may use.
type Network string

const (
	// NetworkAll leaves IP networking alone.
	NetworkAll Network = "all"
	// NetworkLoopback allows TCP to and from loopback addresses only.
	NetworkLoopback Network = "loopback"
	// NetworkNone allows no IP networking at all, loopback included.
	NetworkNone Network = "none"
)

// ParseNetwork reads "all", "loopback" or "none".
func ParseNetwork(s string) (Network, error) {
	switch n := Network(s); n {
	case NetworkAll, NetworkLoopback, NetworkNone:
		return n, nil
	}
	return "", fmt.Errorf("network %q: use all, loopback or none", s)
}

// Policy is what a Domain should enforce.
type Policy struct {
	// Writable are the directory trees the processes may write: absolute
	// paths of existing directories (a symlink is followed once, when the
	// Domain is made).
	Writable []string
	// Network limits IP networking; "" means NetworkAll.
	Network Network
	// UnixSockets allows creating unix sockets. Below Landlock ABI 9 this
	// lets the processes connect to any unix socket the user can open,
	// and through a daemon listening there act outside the domain. It
	// cannot be combined with NetworkLoopback.
	UnixSockets bool
	// ReadOnly are files and directories inside the writable trees that
	// stay read-only all the same (berth's own configuration, a
	// repository's hooks), however a command names them. They must exist
	// and be named without symbolic links. Landlock only grants, so the
	// Domain's thread gets a mount namespace of its own in which each is
	// bound read-only onto itself; each directory between it and its
	// writable tree is bound onto itself too (writable), and the kernel
	// refuses to rename or remove a mount point (EBUSY), so no directory
	// on the way can be moved aside and replaced. The processes cannot
	// change these mounts: they have no CAP_SYS_ADMIN, and Landlock
	// refuses mount(2), umount(2) and pivot_root(2) to them even inside a
	// user namespace of their own. A path outside every writable tree is
	// read-only already and needs nothing. It needs Support.MountNS.
	ReadOnly []string
	// Pinned are directories inside the writable trees that stay where
	// they are, writable: each, and each directory between it and its
	// writable tree, is bound onto itself as for ReadOnly, so it cannot be
	// renamed, removed and replaced by another (a repository's .git,
	// whose hooks and config are ReadOnly). A rename or hard link from a
	// pinned directory to outside it fails with EXDEV (tools fall back to
	// copying). It needs Support.MountNS.
	Pinned []string
	// Partial enforces what this kernel can when it cannot enforce all of
	// the policy, instead of failing; Enforced says what that is.
	Partial bool
}

// Enforced is what the kernel enforces on a Domain's processes.
type Enforced struct {
	// Writable are the directory trees the processes may write, each
	// under the name it was given and under its resolved name when that
	// differs; nil when writes are not confined (everything the user may
	// write is writable).
	Writable []string
	// Signals is true when the processes cannot signal or trace processes
	// outside the domain.
	Signals bool
	// Network is the IP networking they are held to (NetworkAll: none).
	Network Network
	// UnixConfined is true when they cannot reach unix sockets outside
	// the writable trees (the filter refuses creating them, or Landlock
	// ABI 9 confines connecting to them by path): no daemon listening on
	// one can act for them.
	UnixConfined bool
	// ReadOnly are the Policy's ReadOnly paths that lie inside the
	// writable trees, each under every name of its tree that Writable
	// lists: what the kernel keeps read-only although a tree holds it.
	ReadOnly []string
	// ABI is the Landlock ABI version used, 0 when Landlock is absent.
	ABI int
	// Missing lists what the policy asked for that this kernel does not
	// enforce (only with Policy.Partial).
	Missing []string
}

// UnsupportedError reports that this kernel cannot enforce a Policy.
type UnsupportedError struct {
	Missing []string
}

func (e *UnsupportedError) Error() string {
	return "confine: this kernel cannot enforce: " + strings.Join(e.Missing, "; ")
}

// ErrClosed is returned by Do after Close.
var ErrClosed = errors.New("confine: domain closed")

// Domain is an OS thread restricted by a Policy, from which the processes
// of one environment are started. It is safe for concurrent use.
type Domain struct {
	enforced Enforced

	mu     sync.Mutex
	closed bool
	reqs   chan func()
	gone   chan struct{} // closed when the thread has ended

	sup *supervisor // NetworkLoopback only
}

// devices are the character devices every process may write.
var devices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/random", "/dev/urandom"}

// New makes a Domain for p. It fails with an *UnsupportedError when this
// kernel cannot enforce p (and p.Partial is false), and with a plain error
// when p itself is wrong (a writable path that is relative or missing).
func New(p Policy) (*Domain, error) {
	return newDomain(p, Probe(), func(f func()) { go f() })
}

// newDomain is New on a kernel offering sup, the Domain's goroutine
// launched by launch (tests run it on the main thread).
func newDomain(p Policy, sup Support, launch func(func())) (*Domain, error) {
	if p.Network == "" {
		p.Network = NetworkAll
	}
	if _, err := ParseNetwork(string(p.Network)); err != nil {
		return nil, fmt.Errorf("confine: %w", err)
	}
	if p.UnixSockets && p.Network == NetworkLoopback {
		return nil, errors.New("confine: unix sockets cannot be allowed with loopback networking: a unix socket's connect cannot be told from a TCP one's in the filter")
	}
	trees, err := writableTrees(p.Writable)
	if err != nil {
		return nil, err
	}
	roots, err := treeIDs(p.Writable)
	if err != nil {
		return nil, err
	}
	var prot protection
	if len(p.ReadOnly)+len(p.Pinned) > 0 {
		if prot, err = planMounts(p.Writable, p.ReadOnly, p.Pinned); err != nil {
			return nil, err
		}
	}
	pl := sup.plan(p)
	if !pl.mountNS {
		prot = protection{}
	}
	if len(pl.missing) > 0 && !p.Partial {
		return nil, &UnsupportedError{Missing: pl.missing}
	}

	rulesetFD := -1
	var rulesetFlags uint32
	if pl.landlock {
		rulesetFD, rulesetFlags, err = pl.ruleset(p.Writable)
		if err != nil {
			return nil, err
		}
		defer unix.Close(rulesetFD)
	}
	// berth's memory must not be open to its commands through the
	// Domain's thread (ptrace, /proc/PID/mem): hostproc does the same
	// before its first start.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("confine: prctl(PR_SET_DUMPABLE, 0): %w", err)
	}

	d := &Domain{
		reqs: make(chan func()),
		gone: make(chan struct{}),
	}
	ready := make(chan threadResult, 1)
	launch(func() { d.thread(pl, prot.targets, rulesetFD, rulesetFlags, ready) })
	r := <-ready
	if r.err != nil {
		return nil, r.err
	}
	if r.notifyFD >= 0 {
		s, err := startSupervisor(r.notifyFD, roots, pl.filter.loopback)
		if err != nil {
			d.Close()
			return nil, err
		}
		d.sup = s
	}
	d.enforced = Enforced{
		Signals:      pl.signals,
		Network:      pl.network,
		UnixConfined: pl.unixConfined,
		ReadOnly:     prot.readOnly,
		ABI:          pl.abi,
		Missing:      pl.missing,
	}
	if pl.writes {
		d.enforced.Writable = trees
	}
	return d, nil
}

// Enforced says what the kernel enforces on the Domain's processes.
func (d *Domain) Enforced() Enforced {
	e := d.enforced
	e.Writable = slices.Clone(e.Writable)
	e.Missing = slices.Clone(e.Missing)
	e.ReadOnly = slices.Clone(e.ReadOnly)
	return e
}

// Do runs fn on the Domain's thread and returns when it has: a process
// that fn forks (os/exec's Cmd.Start) inherits the restrictions, and, with
// PR_SET_PDEATHSIG, is signalled when the Domain is closed. fn must not
// call runtime.UnlockOSThread. Do returns ErrClosed after Close.
func (d *Domain) Do(fn func()) error {
	done := make(chan struct{})
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return ErrClosed
	}
	d.reqs <- func() { defer close(done); fn() }
	d.mu.Unlock()
	<-done
	return nil
}

// Close ends the Domain's thread and its supervisor. The runtime ends the
// thread just after Close returns; processes started from it with
// PR_SET_PDEATHSIG then get their signal. It is idempotent.
func (d *Domain) Close() error {
	d.mu.Lock()
	if !d.closed {
		d.closed = true
		close(d.reqs)
	}
	d.mu.Unlock()
	<-d.gone
	if d.sup != nil {
		d.sup.stop()
	}
	return nil
}

type threadResult struct {
	notifyFD int
	err      error
}

// thread is the Domain's goroutine: it locks itself to an OS thread other
// than the main one, restricts it, and runs the Domain's requests there
// until Close. It never unlocks the thread, so the Go runtime ends the
// thread when the goroutine returns.
func (d *Domain) thread(pl plan, mounts []mountTarget, rulesetFD int, rulesetFlags uint32, ready chan<- threadResult) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// The main thread's id is the process's: confining it would put
		// berth's own pid in the domain, and the Go runtime never ends
		// it. Start over on another thread (this one stays locked until
		// then, so the new goroutine cannot land here) and give this one
		// back untouched.
		moved := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(moved)
			d.restricted(pl, mounts, rulesetFD, rulesetFlags, ready)
		}()
		<-moved
		runtime.UnlockOSThread()
		return
	}
	d.restricted(pl, mounts, rulesetFD, rulesetFlags, ready)
}

// restricted restricts the locked calling thread and serves requests.
func (d *Domain) restricted(pl plan, mounts []mountTarget, rulesetFD int, rulesetFlags uint32, ready chan<- threadResult) {
	defer close(d.gone)
	if unix.Gettid() == unix.Getpid() {
		ready <- threadResult{-1, errors.New("confine: the domain's thread is the main thread")}
		return
	}
	// The mount namespace first: making it needs the capabilities the
	// next step drops.
	if len(mounts) > 0 {
		if err := enterMountNamespace(mounts); err != nil {
			ready <- threadResult{-1, err}
			return
		}
	}
	var filter []unix.SockFilter
	if pl.seccomp {
		filter = buildFilter(pl.filter, self{pid: unix.Getpid(), tid: unix.Gettid()})
	}
	fd, err := restrictThread(rulesetFD, rulesetFlags, filter, pl.filter.notify())
	ready <- threadResult{fd, err}
	if err != nil {
		return
	}
	for f := range d.reqs {
		f()
	}
}

// writableTrees checks the writable paths and returns the trees as
// reported: each path, and its resolved name when that differs.
func writableTrees(paths []string) ([]string, error) {
	var trees []string
	for _, p := range paths {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("confine: writable path %q is not absolute", p)
		}
		p = filepath.Clean(p)
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("confine: writable path: %w", err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("confine: writable path %s is not a directory", p)
		}
		trees = append(trees, p)
		if real, err := filepath.EvalSymlinks(p); err == nil && real != p {
			trees = append(trees, real)
		}
	}
	slices.Sort(trees)
	return slices.Compact(trees), nil
}

// restrictThread restricts the calling (locked) thread: capabilities,
// no_new_privs, the seccomp filter, then Landlock. It returns the seccomp
// listener when notify is set, else -1. On error the thread is left in an
// unknown state, and the caller lets it end.
func restrictThread(rulesetFD int, rulesetFlags uint32, filter []unix.SockFilter, notify bool) (int, error) {
	if err := dropCapabilities(); err != nil {
		return -1, err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return -1, fmt.Errorf("confine: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	notifyFD := -1
	if filter != nil {
		fd, err := installFilter(filter, notify)
		if err != nil {
			return -1, err
		}
		notifyFD = fd
	}
	if rulesetFD >= 0 {
		if err := ll.LandlockRestrictSelf(rulesetFD, rulesetFlags); err != nil {
			if notifyFD >= 0 {
				unix.Close(notifyFD)
			}
			return -1, fmt.Errorf("confine: landlock_restrict_self: %w", err)
		}
	}
	return notifyFD, nil
}
