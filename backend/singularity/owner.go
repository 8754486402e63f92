package singularity

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Owner marks name the berth process that started an instance:
// "<boot id>/<pid>/<process start time in clock ticks>", so a later berth on
// the same machine can tell whether that process still runs even after its
// pid was reused. (The docker backend marks its containers the same way.)
var (
	ownerOnce sync.Once
	ownerSelf string
)

// currentOwner returns this process's owner mark ("" when /proc cannot
// tell). Tests replace it to leave instances owned by a dead process.
var currentOwner = func() string {
	ownerOnce.Do(func() { ownerSelf = ownerOf(os.Getpid()) })
	return ownerSelf
}

func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// startTime reads field 22 of /proc/<pid>/stat; ok is false when the
// process does not exist (or is a zombie).
func startTime(pid int) (string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return "", false
	}
	return f[19], true
}

func ownerOf(pid int) string {
	boot := bootID()
	st, ok := startTime(pid)
	if boot == "" || !ok {
		return ""
	}
	return boot + "/" + strconv.Itoa(pid) + "/" + st
}

// ownerGone reports whether mark names a process of this boot of this
// machine that no longer runs. Marks from elsewhere or unreadable ones are
// never judged gone.
func ownerGone(mark string) bool {
	parts := strings.Split(mark, "/")
	if len(parts) != 3 || parts[0] == "" || parts[0] != bootID() {
		return false
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil || pid <= 0 {
		return false
	}
	st, alive := startTime(pid)
	return !alive || st != parts[2]
}
