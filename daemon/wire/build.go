package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
)

// A daemon is named by its build, as gopls names its -remote=auto socket
// from its build ID: a client talks only to a daemon of its own build, a
// rebuilt berth starts its own daemon, and the old one exits after its
// lifetime (berth daemon status and stop still see it: Daemons).
//
// The identity of a daemon is made of three parts:
//
//   - ProtocolVersion, so that two builds never exchange frames of
//     different versions;
//   - Build, the release of this binary (its module version and the
//     commit it was built from), which the front and the engine of one
//     `go build ./cmd/...` or one `go install` share: a front execs only
//     an engine of its own Build (FrontBuildEnv);
//   - the Go build ID of the engine binary, the one that runs the daemon:
//     it changes with every rebuild that changes the engine, also one from
//     a modified working tree, where the commit does not.
//
// The engine reads its own build ID; the front reads that of the engine it
// would exec (EngineID), so both name the same socket.

// FrontBuildEnv is set by the berth front to its Build when it execs the
// engine; an engine of another build refuses to run in its place.
const FrontBuildEnv = "BERTH_FRONT_BUILD"

var (
	buildOnce sync.Once
	build     string
)

// Build returns the release this binary was built from: a short hash of
// its main module's version and sum and of the commit (revision, time,
// modified) recorded at build time. The berth front and engine of one
// build return the same value; "unknown" when the binary carries no build
// information.
func Build() string {
	buildOnce.Do(func() {
		bi, ok := debug.ReadBuildInfo()
		if !ok {
			build = "unknown"
			return
		}
		h := fnv.New64a()
		write := func(s string) { io.WriteString(h, s); h.Write([]byte{0}) }
		write(bi.Main.Path)
		write(bi.Main.Version)
		write(bi.Main.Sum)
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision", "vcs.time", "vcs.modified":
				write(s.Key + "=" + s.Value)
			}
		}
		build = fmt.Sprintf("%012x", h.Sum64()>>16)
	})
	return build
}

// Identity is the name of the daemon a front or engine of this Build talks
// to, for the engine whose Go build ID is engineBuildID ("" when it cannot
// be read): "<protocol>-<hash>", a file name.
func Identity(engineBuildID string) string {
	h := fnv.New64a()
	io.WriteString(h, Build())
	h.Write([]byte{0})
	io.WriteString(h, engineBuildID)
	return strconv.Itoa(ProtocolVersion) + "-" + fmt.Sprintf("%012x", h.Sum64()>>16)
}

var (
	selfOnce sync.Once
	selfID   string
)

// SelfIdentity is the Identity of this executable as the engine: the
// daemon it serves, or talks to.
func SelfIdentity() string {
	selfOnce.Do(func() {
		id := ""
		if exe, err := os.Executable(); err == nil {
			id = GoBuildID(exe)
		}
		selfID = Identity(id)
	})
	return selfID
}

// EngineIdentity is the Identity of the daemon of the engine at path, for
// the front that would exec it.
func EngineIdentity(path string) string { return Identity(GoBuildID(path)) }

// goNote is the type (4, little-endian) and name ("Go") of the ELF note
// holding the Go build ID, which the linker puts near the start of the
// file (what `go tool buildid` prints); goBuildIDPrefix starts the same ID
// written as text, in executables of other formats.
var (
	goNote          = []byte("\x04\x00\x00\x00Go\x00\x00")
	goBuildIDPrefix = []byte("\xff Go build ID: \"")
)

// GoBuildID returns the Go build ID of the executable at path, "" when it
// cannot be read. It reads the first 32 KiB of the file only, as cmd/go
// does.
func GoBuildID(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	buf := make([]byte, 32<<10)
	n, _ := io.ReadFull(f, buf)
	buf = buf[:n]
	// An ELF note: namesz 4, descsz, type 4, "Go\0\0", then desc.
	if i := bytes.Index(buf, goNote); i >= 8 && binary.LittleEndian.Uint32(buf[i-8:]) == 4 {
		size := int(binary.LittleEndian.Uint32(buf[i-4:]))
		if desc := buf[i+len(goNote):]; size > 0 && size <= len(desc) {
			return string(desc[:size])
		}
	}
	i := bytes.Index(buf, goBuildIDPrefix)
	if i < 0 {
		return ""
	}
	rest := buf[i+len(goBuildIDPrefix):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}
