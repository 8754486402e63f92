package modal

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Tags berth puts on its sandboxes, so berth env ls/rm/prune and a later
// berth find them.
const (
	TagKey        = "berth.key"        // the environment key
	TagOwner      = "berth.owner"      // the berth installation: user@host:home
	TagProcess    = "berth.process"    // the berth process holding it: boot id/pid/start time
	TagCreated    = "berth.created"    // RFC 3339 creation time
	TagPersistent = "berth.persistent" // "1" with container_persistent
)

// ownerOf names the berth installation that owns sandboxes: the user, the
// machine and the berth home. Two people (or two homes) with the same key
// never share a sandbox.
func ownerOf(home string) string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	if abs, err := filepath.Abs(home); err == nil {
		home = abs
	}
	return name + "@" + host + ":" + home
}

// sandboxName is the sandbox's name in the app: unique per owner and key,
// within Modal's rules (letters, digits, '-', '.', '_'; under 64
// characters).
func sandboxName(owner, key string) string {
	sum := sha256.Sum256([]byte(owner + "\x00" + key))
	var b strings.Builder
	for _, r := range key {
		if b.Len() >= 32 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	return "berth-" + b.String() + "-" + hex.EncodeToString(sum[:6])
}

var (
	processOnce sync.Once
	processSelf string
)

// currentProcess identifies this berth process ("" when /proc cannot).
func currentProcess() string {
	processOnce.Do(func() { processSelf = processOf(os.Getpid()) })
	return processSelf
}

func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

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
	if len(f) < 20 {
		return "", false
	}
	return f[19], true
}

func processOf(pid int) string {
	boot := bootID()
	st, ok := startTime(pid)
	if boot == "" || !ok {
		return ""
	}
	return boot + "/" + strconv.Itoa(pid) + "/" + st
}

// processGone reports whether label names a process of this boot of this
// machine that no longer runs. Anything else is never judged gone.
func processGone(label string) bool {
	parts := strings.Split(label, "/")
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
