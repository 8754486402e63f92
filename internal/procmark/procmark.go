// Package procmark names a process of this machine so that a later process
// can tell whether it still runs, even after its pid was reused.
//
// A mark is "<boot id>/<pid>/<start time in clock ticks since boot>/<pid
// namespace>", the last field being the inode of the PID namespace the pid
// is valid in (/proc/self/ns/pid of the process that made the mark). The
// backends label what they create (containers, instances, sandboxes) with
// the mark of the berth that created it; a berth that starts later reaps
// what a dead berth left behind by asking Gone.
//
// Reaping is only ever done for a process known to be dead, so Gone is
// false for every mark it cannot judge:
//   - a mark of another machine or another boot;
//   - a mark made in another PID namespace (another container, an
//     `unshare --pid`): two berths on one kernel share the boot id, but the
//     pid of one means nothing, or another process, in the other's /proc;
//   - a pid whose /proc entry cannot be read (EACCES, or hidden by a /proc
//     mounted with hidepid=) while the kernel says the process exists;
//   - a mark that does not parse.
//
// Marks written before the namespace was recorded ("<boot id>/<pid>/<start
// time>") still parse. They are judged as they always were, in the
// caller's own PID namespace: the writer cannot be placed, and treating
// them as alive forever would leave every container, instance and sandbox
// of a crashed older berth running for good. The misjudgement this field
// removes (a live berth in another PID namespace counted as dead) remains
// for those old marks only, until every berth sharing the resources has
// been upgraded: each writes the new form, and re-marks what it reattaches.
package procmark

import (
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// OwnerVar names the environment variable that marks every process berth
// starts on this machine with its owner, "<berth pid>.<berth start time>"
// (backend/hostproc sets it; its guardian and ReapOrphans find berth's
// processes by it). A berth whose environment holds it runs under another
// berth: the manager's approval gate reads it.
const OwnerVar = "BERTH_OWNER"

var (
	selfOnce sync.Once
	self     string
)

// Self returns this process's mark, "" when /proc cannot tell.
func Self() string {
	selfOnce.Do(func() { self = Of(os.Getpid()) })
	return self
}

// Of returns the mark of a live process of this PID namespace (pid as this
// process sees it), "" when it does not run or /proc cannot tell.
func Of(pid int) string {
	boot := BootID()
	ns := PIDNamespace()
	st, ok := StartTime(pid)
	if boot == "" || ns == "" || !ok {
		return ""
	}
	return boot + "/" + strconv.Itoa(pid) + "/" + st + "/" + ns
}

// Gone reports whether mark names a process of this boot of this machine,
// in this PID namespace, that no longer runs (it exited, is a zombie, or
// its pid now belongs to a process started at another time). Every mark it
// cannot judge (see the package documentation) is not gone.
func Gone(mark string) bool {
	parts := strings.Split(mark, "/")
	switch len(parts) {
	case 3: // written before the namespace was recorded: judged here
	case 4:
		if own := PIDNamespace(); own == "" || parts[3] != own {
			return false
		}
	default:
		return false
	}
	if parts[0] == "" || parts[0] != BootID() || parts[2] == "" {
		return false
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil || pid <= 0 {
		return false
	}
	st, state, err := readStat(pid)
	switch {
	case err == nil:
		return state == "Z" || state == "X" || st != parts[2]
	case errors.Is(err, fs.ErrNotExist):
		// Gone, or hidden from this user by hidepid=2: the kernel knows.
		// kill(pid, 0) is refused with EPERM (not ESRCH) for a process of
		// another user that exists.
		return syscall.Kill(pid, 0) == syscall.ESRCH
	default:
		return false // EACCES (hidepid=1) and the like: cannot tell
	}
}

// BootID returns this machine's boot id, "" when unknown.
func BootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// PIDNamespace returns the inode number of this process's PID namespace
// (from the link /proc/self/ns/pid, "pid:[4026531836]"), "" when unknown.
// Processes of one PID namespace share it; a container or an
// `unshare --pid` has its own.
func PIDNamespace() string {
	l, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return ""
	}
	l, ok := strings.CutPrefix(l, "pid:[")
	l, ok2 := strings.CutSuffix(l, "]")
	if !ok || !ok2 {
		return ""
	}
	if _, err := strconv.ParseUint(l, 10, 64); err != nil {
		return ""
	}
	return l
}

// StartTime reads a process's start time (clock ticks since boot, field 22
// of /proc/PID/stat); ok is false when the process does not exist or is a
// zombie that only waits to be reaped.
func StartTime(pid int) (string, bool) {
	st, state, err := readStat(pid)
	if err != nil || state == "Z" || state == "X" {
		return "", false
	}
	return st, true
}

// readStat reads the start time and the state (field 3) of a process from
// /proc/PID/stat.
func readStat(pid int) (start, state string, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", "", err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", "", errors.New("procmark: malformed /proc/" + strconv.Itoa(pid) + "/stat")
	}
	// Fields after the command name start with the state (field 3); the
	// start time is field 22.
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return "", "", errors.New("procmark: short /proc/" + strconv.Itoa(pid) + "/stat")
	}
	return f[19], f[0], nil
}
