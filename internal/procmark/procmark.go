// Package procmark names a process of this machine so that a later process
// can tell whether it still runs, even after its pid was reused.
//
// A mark is "<boot id>/<pid>/<start time in clock ticks since boot>". The
// backends label what they create (containers, instances, sandboxes) with
// the mark of the berth that created it; a berth that starts later reaps
// what a dead berth left behind by asking Gone. Marks from another machine
// or another boot, and marks that cannot be read, are never judged gone:
// reaping is only ever done for a process known to be dead.
package procmark

import (
	"os"
	"strconv"
	"strings"
	"sync"
)

var (
	selfOnce sync.Once
	self     string
)

// Self returns this process's mark, "" when /proc cannot tell.
func Self() string {
	selfOnce.Do(func() { self = Of(os.Getpid()) })
	return self
}

// Of returns the mark of a live process, "" when it does not run or /proc
// cannot tell.
func Of(pid int) string {
	boot := BootID()
	st, ok := StartTime(pid)
	if boot == "" || !ok {
		return ""
	}
	return boot + "/" + strconv.Itoa(pid) + "/" + st
}

// Gone reports whether mark names a process of this boot of this machine
// that no longer runs (it exited, is a zombie, or its pid now belongs to a
// process started at another time).
func Gone(mark string) bool {
	parts := strings.Split(mark, "/")
	if len(parts) != 3 || parts[0] == "" || parts[0] != BootID() {
		return false
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil || pid <= 0 {
		return false
	}
	st, alive := StartTime(pid)
	return !alive || st != parts[2]
}

// BootID returns this machine's boot id, "" when unknown.
func BootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// StartTime reads a process's start time (clock ticks since boot, field 22
// of /proc/PID/stat); ok is false when the process does not exist or is a
// zombie that only waits to be reaped.
func StartTime(pid int) (string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", false
	}
	// Fields after the command name start with the state (field 3); the
	// start time is field 22.
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return "", false
	}
	return f[19], true
}
