//go:build !amd64 && !arm64

package confine

import "golang.org/x/sys/unix"

// nativeArch is 0 where berth has no seccomp filter: Probe reports seccomp
// as unavailable, and a Domain needing it is refused (or partial).
const nativeArch = 0

const x32Bit = 0

var (
	metaCalls    map[uintptr]metaCall
	refusedCalls map[uintptr]unix.Errno
	createCalls  []createCall
)
