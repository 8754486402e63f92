package confine

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel's struct seccomp_notif and seccomp_notif_resp.
type seccompData struct {
	Nr   int32
	Arch uint32
	IP   uint64
	Args [6]uint64
}

type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Data  seccompData
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// supervisor answers the connect, bind and listen calls of a Domain's
// processes under NetworkLoopback. For each call it takes a copy of the
// process's socket (pidfd_getfd) and of the address (process_vm_readv),
// checks the copy, and makes the call itself with that copy on that
// socket, so nothing the process changes after the check matters.
//
// It also makes the metadata changes Landlock does not confine (chmod,
// chown, extended attributes, timestamps; see meta.go), after checking
// that the file lies in a writable tree.
type supervisor struct {
	f        *os.File
	done     chan struct{}
	roots    []fileID // the writable trees
	loopback bool     // connect, bind and listen come here
}

func startSupervisor(fd int, roots []fileID, loopback bool) (*supervisor, error) {
	// Non-blocking, so that os.NewFile puts it in the runtime poller and
	// stop can end the loop by closing it.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("confine: seccomp listener: %w", err)
	}
	s := &supervisor{f: os.NewFile(uintptr(fd), "seccomp-listener"), done: make(chan struct{}), roots: roots, loopback: loopback}
	rc, err := s.f.SyscallConn()
	if err != nil {
		s.f.Close()
		return nil, fmt.Errorf("confine: seccomp listener: %w", err)
	}
	go s.loop(rc)
	return s, nil
}

// stop ends the loop. A call still being made (a connect to a port that
// does not answer) finishes by itself; its answer then goes nowhere.
func (s *supervisor) stop() {
	s.f.Close()
	<-s.done
}

func (s *supervisor) loop(rc interface {
	Read(func(uintptr) bool) error
}) {
	defer close(s.done)
	for {
		var req seccompNotif
		var got, hup bool
		err := rc.Read(func(fd uintptr) bool {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(pfd, 0)
			if err != nil && err != unix.EINTR {
				hup = true
				return true
			}
			if n <= 0 {
				return false // wait in the runtime poller
			}
			if pfd[0].Revents&unix.POLLIN == 0 {
				// POLLHUP alone: no process uses the filter any more.
				hup = pfd[0].Revents&unix.POLLHUP != 0
				return hup
			}
			req = seccompNotif{}
			_, _, e := unix.Syscall(unix.SYS_IOCTL, fd, uintptr(unix.SECCOMP_IOCTL_NOTIF_RECV), uintptr(unsafe.Pointer(&req)))
			got = e == 0 // ENOENT: the caller went away meanwhile
			return true
		})
		if err != nil || hup {
			return
		}
		if !got {
			continue
		}
		go func(req seccompNotif) {
			val, e := s.handle(&req)
			resp := seccompNotifResp{ID: req.ID, Val: val, Error: -int32(e)}
			if e == 0 {
				resp.Error = 0
			}
			rc2, err := s.f.SyscallConn()
			if err != nil {
				return
			}
			rc2.Control(func(fd uintptr) {
				// ENOENT: the caller was killed; nothing to answer.
				unix.Syscall(unix.SYS_IOCTL, fd, uintptr(unix.SECCOMP_IOCTL_NOTIF_SEND), uintptr(unsafe.Pointer(&resp)))
			})
		}(req)
	}
}

// valid reports whether the notification id still names a waiting call,
// so the pid it came with still names the caller.
func (s *supervisor) valid(id uint64) bool {
	rc, err := s.f.SyscallConn()
	if err != nil {
		return false
	}
	ok := false
	rc.Control(func(fd uintptr) {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, fd, uintptr(unix.SECCOMP_IOCTL_NOTIF_ID_VALID), uintptr(unsafe.Pointer(&id)))
		ok = e == 0
	})
	return ok
}

// handle performs one intercepted call and returns its result and errno.
func (s *supervisor) handle(req *seccompNotif) (int64, unix.Errno) {
	nr := uintptr(req.Data.Nr)
	if m, ok := metaCalls[nr]; ok {
		return 0, s.meta(req, m)
	}
	if s.loopback && (nr == unix.SYS_CONNECT || nr == unix.SYS_BIND || nr == unix.SYS_LISTEN) {
		return s.network(req)
	}
	return 0, unix.ENOSYS
}

// network performs connect, bind or listen on a copy of the caller's
// socket, allowing loopback addresses only.
func (s *supervisor) network(req *seccompNotif) (int64, unix.Errno) {
	pidfd, err := openPidfd(int(req.Pid))
	if err != nil {
		return 0, unix.EACCES
	}
	defer unix.Close(pidfd)
	if !s.valid(req.ID) {
		return 0, unix.EINTR
	}
	args := req.Data.Args
	sock, err := unix.PidfdGetfd(pidfd, int(int32(args[0])), 0)
	if err != nil {
		var e unix.Errno
		if errors.As(err, &e) && e == unix.EBADF {
			return 0, unix.EBADF
		}
		return 0, unix.EACCES
	}
	defer unix.Close(sock)
	domain, err := unix.GetsockoptInt(sock, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil {
		return 0, unix.ENOTSOCK
	}

	switch uintptr(req.Data.Nr) {
	case unix.SYS_LISTEN:
		if domain == unix.AF_INET || domain == unix.AF_INET6 {
			if e := bindLoopbackIfUnbound(sock, domain); e != 0 {
				return 0, e
			}
		}
		if err := unix.Listen(sock, int(int32(args[1]))); err != nil {
			return 0, errnoOf(err)
		}
		return 0, 0
	case unix.SYS_CONNECT, unix.SYS_BIND:
		n := int(uint32(args[2]))
		if n < 2 || n > unix.SizeofSockaddrAny {
			return 0, unix.EINVAL
		}
		addr, e := readMem(int(req.Pid), args[1], n)
		if e != 0 {
			return 0, e
		}
		if !s.valid(req.ID) {
			return 0, unix.EINTR
		}
		bind := uintptr(req.Data.Nr) == unix.SYS_BIND
		switch domain {
		case unix.AF_INET, unix.AF_INET6:
			if !loopbackAddr(addr, bind) {
				return 0, unix.EACCES
			}
		case unix.AF_NETLINK:
			// The kernel is the only peer.
		default:
			return 0, unix.EACCES
		}
		nr := uintptr(unix.SYS_CONNECT)
		if bind {
			nr = unix.SYS_BIND
		}
		if _, _, e := unix.Syscall(nr, uintptr(sock), uintptr(unsafe.Pointer(&addr[0])), uintptr(n)); e != 0 {
			return 0, e
		}
		return 0, 0
	}
	return 0, unix.ENOSYS
}

// errnoOf is err's errno, 0 for nil.
func errnoOf(err error) unix.Errno {
	if err == nil {
		return 0
	}
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return unix.EINVAL
}

// loopbackAddr reports whether the socket address (as the process passed
// it) is a loopback one; a connect to the wildcard address reaches this
// host's loopback too. For bind, the wildcard address is rewritten in
// place to the loopback one, so a server meant for every interface serves
// loopback only.
func loopbackAddr(a []byte, bind bool) bool {
	family := uint16(a[0]) | uint16(a[1])<<8
	switch family {
	case unix.AF_UNSPEC:
		return !bind // connect(AF_UNSPEC) dissolves an association
	case unix.AF_INET:
		if len(a) < unix.SizeofSockaddrInet4 {
			return false
		}
		ip := a[4:8]
		if ip[0] == 127 {
			return true
		}
		if ip[0]|ip[1]|ip[2]|ip[3] == 0 {
			if bind {
				copy(ip, []byte{127, 0, 0, 1})
			}
			return true
		}
	case unix.AF_INET6:
		if len(a) < unix.SizeofSockaddrInet6 {
			return false
		}
		ip := a[8:24]
		mapped := [12]byte{10: 0xff, 11: 0xff}
		switch {
		case [16]byte(ip) == [16]byte{15: 1}: // ::1
			return true
		case [12]byte(ip[:12]) == mapped && ip[12] == 127: // ::ffff:127.x.x.x
			return true
		case [16]byte(ip) == [16]byte{}: // ::
			if bind {
				ip[15] = 1
			}
			return true
		}
	}
	return false
}

// bindLoopbackIfUnbound binds an unbound socket to loopback, port 0, so
// listen(2) does not bind it to every interface.
func bindLoopbackIfUnbound(sock, domain int) unix.Errno {
	sa, err := unix.Getsockname(sock)
	if err != nil {
		return errnoOf(err)
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		if a.Port != 0 {
			if a.Addr[0] == 127 {
				return 0
			}
			return unix.EACCES
		}
		return errnoOf(unix.Bind(sock, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	case *unix.SockaddrInet6:
		if a.Port != 0 {
			mapped := [12]byte{10: 0xff, 11: 0xff}
			if a.Addr == [16]byte{15: 1} || [12]byte(a.Addr[:12]) == mapped && a.Addr[12] == 127 {
				return 0
			}
			return unix.EACCES
		}
		return errnoOf(unix.Bind(sock, &unix.SockaddrInet6{Addr: [16]byte{15: 1}}))
	}
	return unix.EACCES
}

// openPidfd opens a pidfd for a thread id: the thread itself where the
// kernel allows it (PIDFD_THREAD, Linux 6.9), else its thread group.
func openPidfd(tid int) (int, error) {
	fd, err := unix.PidfdOpen(tid, 0)
	if err == nil || !errors.Is(err, unix.EINVAL) {
		return fd, err
	}
	if fd, err := unix.PidfdOpen(tid, unix.O_EXCL); err == nil { // PIDFD_THREAD
		return fd, nil
	}
	b, rerr := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if rerr != nil {
		return -1, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
			if tgid, cerr := strconv.Atoi(strings.TrimSpace(v)); cerr == nil {
				return unix.PidfdOpen(tgid, 0)
			}
		}
	}
	return -1, err
}
