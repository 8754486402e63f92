package wire

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestGoBuildID: the build ID read from the first 32 KiB of an executable
// is the one `go tool buildid` prints, and a file without one gives "".
func TestGoBuildID(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	got := GoBuildID(exe)
	out, err := exec.Command("go", "tool", "buildid", exe).Output()
	if err != nil {
		t.Fatalf("go tool buildid: %v", err)
	}
	if want := strings.TrimSpace(string(out)); got == "" || got != want {
		t.Fatalf("GoBuildID = %q, go tool buildid = %q", got, want)
	}
	if id := GoBuildID("/etc/passwd"); id != "" {
		t.Errorf("GoBuildID(/etc/passwd) = %q", id)
	}
	if id := GoBuildID(filepath.Join(t.TempDir(), "none")); id != "" {
		t.Errorf("GoBuildID(missing) = %q", id)
	}
}

// TestIdentityFollowsTheEngine: a daemon's identity names the protocol and
// changes with the engine's build ID (a rebuilt engine gets a socket of
// its own); the engine and a front that reads the same engine agree.
func TestIdentityFollowsTheEngine(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	self := SelfIdentity()
	if !regexp.MustCompile(`^` + strconv.Itoa(ProtocolVersion) + `-[0-9a-f]{12}$`).MatchString(self) {
		t.Fatalf("SelfIdentity = %q", self)
	}
	if got := EngineIdentity(exe); got != self {
		t.Fatalf("EngineIdentity(this executable) = %q, SelfIdentity %q", got, self)
	}
	// A "rebuilt" engine: the same file with another build ID.
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	id := GoBuildID(exe)
	other := bytes.Replace(b[:64<<10], []byte(id), []byte(strings.Repeat("x", len(id))), 1)
	rebuilt := filepath.Join(t.TempDir(), "engine")
	if err := os.WriteFile(rebuilt, other, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := EngineIdentity(rebuilt); got == self || !strings.HasPrefix(got, strconv.Itoa(ProtocolVersion)+"-") {
		t.Fatalf("EngineIdentity(rebuilt engine) = %q, this one %q; want another", got, self)
	}
}

// TestPathsAndDaemons: each build's daemon has its own socket, pid and
// start lock in the home's daemon directory, sharing the log; Daemons
// finds every build's socket, this build's first, and the one of a
// daemon from before protocol 3.
func TestPathsAndDaemons(t *testing.T) {
	home := t.TempDir()
	p, err := PathsFor(home)
	if err != nil {
		t.Fatal(err)
	}
	id := SelfIdentity()
	dir := filepath.Join(home, "daemon")
	want := Paths{Identity: id, Dir: dir, Socket: filepath.Join(dir, "berth-"+id+".sock"), PID: filepath.Join(dir, "berth-"+id+".pid"),
		Lock: filepath.Join(dir, "start-"+id+".lock"), Log: filepath.Join(dir, "berth.log")}
	if p != want {
		t.Fatalf("PathsFor = %+v\nwant %+v", p, want)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"berth.sock", "berth-2-aaaaaaaaaaaa.sock", "berth-" + id + ".sock", "berthx.sock", "other.sock"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	all, err := Daemons(home)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range all {
		ids = append(ids, d.Identity)
	}
	if strings.Join(ids, ",") != id+",2-aaaaaaaaaaaa," {
		t.Fatalf("Daemons found %q; want this build's, then 2-aaaaaaaaaaaa and the legacy one", ids)
	}
	if all[2].Socket != filepath.Join(dir, "berth.sock") || all[2].PID != filepath.Join(dir, "berth.pid") {
		t.Fatalf("legacy daemon's paths %+v", all[2])
	}
}
