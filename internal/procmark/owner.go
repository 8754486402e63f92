package procmark

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// maxAncestors bounds the walk up the process tree (a loop in a /proc that
// changes under the walk ends there).
const maxAncestors = 256

// UnderBerth returns the owner mark (the value of OwnerVar) that process
// pid or one of its ancestors carries in its environment, "" when none
// does: a process that berth started, or one started below it, runs under
// that berth. Removing the variable from a process's own environment (`env
// -u BERTH_OWNER berth …`) does not hide it: the shell berth runs the
// command in, and every process between, keep theirs. Only a process that
// leaves berth's tree (a double fork re-parents it to init) and drops the
// variable escapes the test.
//
// An ancestor whose environment cannot be read (a process of another
// user, or one that is not dumpable, as berth's own are) is passed over:
// the shells berth starts are dumpable and readable by their user.
func UnderBerth(pid int) string {
	for i := 0; i < maxAncestors && pid > 0; i++ {
		if m := envOwner(pid); m != "" {
			return m
		}
		ppid, ok := parentOf(pid)
		if !ok || ppid == pid {
			return ""
		}
		pid = ppid
	}
	return ""
}

// envOwner returns the value of OwnerVar in process pid's environment ("",
// when it has none or the environment cannot be read); the last one wins,
// as in getenv.
func envOwner(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return ""
	}
	prefix := []byte(OwnerVar + "=")
	var mark string
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, prefix); ok {
			mark = string(v)
		}
	}
	return mark
}

// parentOf returns the parent pid of pid (field 4 of /proc/PID/stat).
func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return 0, false
	}
	return ppid, true
}
