package modal

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/user"
	"path/filepath"
	"strings"

	"github.com/a55dbaac/berth/internal/procmark"
)

// Tags berth puts on its sandboxes, so berth env ls/rm/prune and a later
// berth find them.
const (
	TagKey        = "berth.key"        // the environment key
	TagOwner      = "berth.owner"      // the berth installation: user@host:home
	TagProcess    = "berth.process"    // the berth process holding it: boot id/pid/start time
	TagCreated    = "berth.created"    // RFC 3339 creation time
	TagPersistent = "berth.persistent" // "1" with container_persistent
	// TagExpires is when the sandbox's lifetime (its timeout) ends, RFC
	// 3339 with nanoseconds, counted from just before it was asked for,
	// so that a berth that reattaches knows when to carry it over.
	TagExpires = "berth.expires"
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

// currentProcess identifies this berth process ("" when /proc cannot).
var currentProcess = procmark.Self
