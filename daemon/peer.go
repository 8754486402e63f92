package daemon

import (
	"bufio"
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

// readConfinement reads the confinement of process pid ("self" for this
// one).
func readConfinement(pid string) (confinement, error) {
	var c confinement
	dir := "/proc/" + pid
	status, err := os.ReadFile(dir + "/status")
	if err != nil {
		return c, err
	}
	var sec []string
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		v = strings.TrimSpace(v)
		switch k {
		case "NSpid":
			c.pidDepth = len(strings.Fields(v))
		case "Seccomp", "Seccomp_filters", "NoNewPrivs":
			sec = append(sec, k+"="+v)
		}
	}
	c.seccomp = strings.Join(sec, " ")
	mounts, err := os.ReadFile(dir + "/mountinfo")
	if err != nil {
		return c, err
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		// ID parent major:minor root mountpoint ...
		if f := strings.Fields(line); len(f) > 4 && f[4] == "/" {
			c.mnt = f[0] + " " + f[3] // the last root mount is the one on top
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(dir+"/net/dev", &st); err != nil {
		return c, &os.PathError{Op: "stat", Path: dir + "/net/dev", Err: err}
	}
	c.net = st.Ino
	for _, m := range []string{"uid_map", "gid_map"} {
		b, err := os.ReadFile(dir + "/" + m)
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
// message. A sandboxed caller (a read-only root, no network, its own PID
// namespace) would otherwise get its commands run outside its sandbox,
// and a daemon started inside a sandbox would confine everybody else's.
func (s *Server) checkPeer(c *net.UnixConn) (code, msg string) {
	cred, err := peerCred(c)
	if err != nil {
		return wire.CodeOtherUser, fmt.Sprintf("refused: cannot tell who the caller is: %v", err)
	}
	if int(cred.Uid) != os.Getuid() {
		return wire.CodeOtherUser, fmt.Sprintf("refused: this berth daemon serves uid %d only (peer uid %d)", os.Getuid(), cred.Uid)
	}
	const fallback = "; berth runs the call in the caller's own process instead, inside its sandbox"
	if cred.Pid <= 0 {
		return wire.CodeSandboxed, fmt.Sprintf("refused: the caller's process is not visible in the PID namespace of this berth daemon (pid %d): it runs in another one%s", os.Getpid(), fallback)
	}
	peer, err := readConfinement(strconv.Itoa(int(cred.Pid)))
	if err != nil {
		return wire.CodeSandboxed, fmt.Sprintf("refused: cannot read the namespaces of the caller (pid %d): %v%s", cred.Pid, err, fallback)
	}
	if what := peer.differs(s.confined); what != "" {
		return wire.CodeSandboxed, fmt.Sprintf("refused: the caller (pid %d) runs in another %s than this berth daemon (pid %d): a sandbox, or a daemon started in one%s", cred.Pid, what, os.Getpid(), fallback)
	}
	return "", ""
}
