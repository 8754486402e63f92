package confine

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// keptCaps are the capabilities a Domain's processes may keep when berth
// runs with them (as root): Docker's default set without MKNOD, NET_RAW,
// SETPCAP, SETFCAP and SYS_CHROOT (a chroot would make the supervisor
// resolve a path differently from its caller). Every capability that
// reaches past Landlock and the filter (SYS_ADMIN, SYS_MODULE, SYS_RAWIO,
// SYS_BOOT, SYS_TIME, NET_ADMIN, BPF, DAC_READ_SEARCH's open_by_handle_at,
// ...) is dropped.
var keptCaps = []int{
	unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_FOWNER,
	unix.CAP_FSETID, unix.CAP_KILL, unix.CAP_SETGID, unix.CAP_SETUID,
	unix.CAP_NET_BIND_SERVICE, unix.CAP_AUDIT_WRITE,
}

func keptMask() uint64 {
	var m uint64
	for _, c := range keptCaps {
		m |= 1 << uint(c)
	}
	return m
}

// lastCap is the highest capability this kernel knows.
func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return n
		}
	}
	return unix.CAP_LAST_CAP
}

// dropCapabilities removes every capability outside keptCaps from the
// calling thread: the bounding set (when the thread may change it), the
// ambient set, and the effective, permitted and inheritable sets. With
// no_new_privs, an exec cannot give any of them back. A thread without
// capabilities (a non-root berth) has nothing to drop.
func dropCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("confine: capget: %w", err)
	}
	keep := keptMask()
	for c := 0; c <= lastCap(); c++ {
		if keep&(1<<uint(c)) != 0 {
			continue
		}
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		if err != nil || in == 0 {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EPERM) {
			return fmt.Errorf("confine: drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("confine: clear ambient capabilities: %w", err)
	}
	for i := range data {
		k := uint32(keep >> (32 * uint(i)))
		data[i].Effective &= k
		data[i].Permitted &= k
		data[i].Inheritable = 0
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("confine: capset: %w", err)
	}
	return nil
}
