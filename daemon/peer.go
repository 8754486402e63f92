package daemon

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/a55dbaac/berth/daemon/wire"
)

// PeerUID returns the uid of the process at the other end of a unix
// socket connection (SO_PEERCRED).
func PeerUID(c *net.UnixConn) (int, error) {
	cred, err := peerCred(c)
	if err != nil {
		return -1, err
	}
	return int(cred.Uid), nil
}

// peerCred returns the credentials of the process at the other end of c
// (SO_PEERCRED: the caller's pid, uid and gid when it connected, its pid
// seen from this daemon's PID namespace, 0 when it is not visible there).
func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, fmt.Errorf("daemon: SO_PEERCRED: %w", cerr)
	}
	return cred, nil
}

// confinement is what this daemon compares between itself and a caller:
// the namespaces and the seccomp state a sandbox changes. Every part is
// read from files of /proc/<pid> that the process's own user may read even
// when the process is not dumpable (berth's processes are not: their
// /proc/<pid>/ns/* links need ptrace access, which a daemon of the same
// uid does not have):
//
//   - pid: the depth of the process's PID namespace below the daemon's
//     (the NSpid line of status has one entry per level; a caller in a
//     namespace beside or above the daemon's has pid 0 in SO_PEERCRED);
//   - mnt: the mount ID and root of the process's root mount (mountinfo):
//     a mount namespace copies every mount under new IDs, and a chroot
//     changes the root;
//   - net: the inode of net/dev, one per network namespace;
//   - user: the uid_map and gid_map, seen from the daemon's user
//     namespace;
//   - seccomp: the Seccomp, Seccomp_filters and NoNewPrivs lines of
//     status (Landlock-style sandboxes set no_new_privs and a filter).
//
// The cgroup is not compared: a user's own terminals each run in their
// own cgroup (a systemd scope), cgroups limit resources rather than what
// a command may reach, and the cgroup namespace is readable only with
// ptrace access.
type confinement struct {
	pidDepth int
	mnt      string
	net      uint64
	user     string
	seccomp  string
}

// readHead reads up to len(buf) bytes of a /proc file with one read:
// these files are generated whole on the first read, and the daemon reads
// a caller's at every connection.
func readHead(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	n, err := unix.Read(fd, buf)
	if err != nil {
		return nil, &os.PathError{Op: "read", Path: path, Err: err}
	}
	return buf[:n], nil
}

// rootMount returns the mount ID and root of the first mount on "/" in a
// mountinfo text ("" if none): the same in one mount namespace (and
// root), different in any other, whose mounts are copies with new IDs.
func rootMount(mountinfo []byte) string {
	for len(mountinfo) > 0 {
		line, rest, _ := bytes.Cut(mountinfo, []byte("\n"))
		mountinfo = rest
		// ID parent major:minor root mountpoint ...
		if f := strings.Fields(string(line)); len(f) > 4 && f[4] == "/" {
			return f[0] + " " + f[3]
		}
	}
	return ""
}

// readConfinement reads the confinement of process pid ("self" for this
// one).
func readConfinement(pid string) (confinement, error) {
	var c confinement
	dir := "/proc/" + pid
	buf := make([]byte, 8<<10)
	status, err := readHead(dir+"/status", buf)
	if err != nil {
		return c, err
	}
	var sec []string
	for len(status) > 0 {
		line, rest, _ := bytes.Cut(status, []byte("\n"))
		status = rest
		k, v, _ := strings.Cut(string(line), ":")
		v = strings.TrimSpace(v)
		switch k {
		case "NSpid":
			c.pidDepth = len(strings.Fields(v))
		case "Seccomp", "Seccomp_filters", "NoNewPrivs":
			sec = append(sec, k+"="+v)
		}
	}
	c.seccomp = strings.Join(sec, " ")
	// The root mount comes first; a whole read only if it does not.
	mounts, err := readHead(dir+"/mountinfo", buf)
	if err != nil {
		return c, err
	}
	if c.mnt = rootMount(mounts); c.mnt == "" {
		all, err := os.ReadFile(dir + "/mountinfo")
		if err != nil {
			return c, err
		}
		c.mnt = rootMount(all)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir+"/net/dev", &st); err != nil {
		return c, &os.PathError{Op: "stat", Path: dir + "/net/dev", Err: err}
	}
	c.net = st.Ino
	for _, m := range []string{"uid_map", "gid_map"} {
		b, err := readHead(dir+"/"+m, buf)
		if err != nil {
			return c, err
		}
		c.user += strings.Join(strings.Fields(string(b)), " ") + ";"
	}
	return c, nil
}

// differs names the first part of c that differs from o, "" when none.
func (c confinement) differs(o confinement) string {
	switch {
	case c.pidDepth != o.pidDepth:
		return "PID namespace"
	case c.mnt != o.mnt:
		return "mount namespace (or root directory)"
	case c.net != o.net:
		return "network namespace"
	case c.user != o.user:
		return "user namespace"
	case c.seccomp != o.seccomp:
		return "seccomp filter or no_new_privs setting"
	}
	return ""
}

// checkPeer decides whether the daemon serves the process at the other
// end of c: it must run as the daemon's user, in the daemon's namespaces
// and under its seccomp state. Otherwise it returns the refusal's code and
// message; when it serves it, the caller's pid. A sandboxed caller (a
// read-only root, no network, its own PID namespace) would otherwise get
// its commands run outside its sandbox, and a daemon started inside a
// sandbox would confine everybody else's.
func (s *Server) checkPeer(c *net.UnixConn) (code, msg string, pid int) {
	cred, err := peerCred(c)
	if err != nil {
		return wire.CodeOtherUser, fmt.Sprintf("refused: cannot tell who the caller is: %v", err), 0
	}
	if int(cred.Uid) != os.Getuid() {
		return wire.CodeOtherUser, fmt.Sprintf("refused: this berth daemon serves uid %d only (peer uid %d)", os.Getuid(), cred.Uid), 0
	}
	const fallback = "; berth runs the call in the caller's own process instead, inside its sandbox"
	if cred.Pid <= 0 {
		return wire.CodeSandboxed, fmt.Sprintf("refused: the caller's process is not visible in the PID namespace of this berth daemon (pid %d): it runs in another one%s", os.Getpid(), fallback), 0
	}
	peer, err := readConfinement(strconv.Itoa(int(cred.Pid)))
	if err != nil {
		return wire.CodeSandboxed, fmt.Sprintf("refused: cannot read the namespaces of the caller (pid %d): %v%s", cred.Pid, err, fallback), 0
	}
	if what := peer.differs(s.confined); what != "" {
		return wire.CodeSandboxed, fmt.Sprintf("refused: the caller (pid %d) runs in another %s than this berth daemon (pid %d): a sandbox, or a daemon started in one%s", cred.Pid, what, os.Getpid(), fallback), 0
	}
	return "", "", int(cred.Pid)
}
