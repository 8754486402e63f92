package wire

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets this test binary be another user's fake daemon: with
// BERTH_WIRE_TEST_LISTEN set it listens there, says "ready", and prints
// whatever a client sends it (fakeDaemon).
func TestMain(m *testing.M) {
	if path := os.Getenv("BERTH_WIRE_TEST_LISTEN"); path != "" {
		os.Exit(fakeDaemon(path))
	}
	os.Exit(m.Run())
}

// fakeDaemon is the attacker of N8: it answers as berth's daemon would
// and reports what it was sent.
func fakeDaemon(path string) int {
	ln, err := net.Listen("unix", path)
	if err != nil {
		fmt.Println("listen:", err)
		return 1
	}
	os.Chmod(path, 0o777)
	fmt.Println("ready")
	for {
		c, err := ln.Accept()
		if err != nil {
			return 1
		}
		fmt.Fprintf(c, `{"t":"hello","hello":{"protocol":%d,"identity":"x","pid":1}}`+"\n", ProtocolVersion)
		b, _ := io.ReadAll(c)
		fmt.Printf("got %d bytes: %s\n", len(b), b)
		c.Close()
	}
}

func mustMkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.Mkdir(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// TestCheckHome (N8): berth connects to, or starts, a daemon only in a
// home and daemon directory that are the caller's own directories, which
// nobody else may write; the error names the path, what is wrong and the
// fix.
func TestCheckHome(t *testing.T) {
	base := t.TempDir()
	ok := filepath.Join(base, "ok")
	mustMkdir(t, ok, 0o755)
	if err := CheckHome(ok); err != nil {
		t.Fatalf("own 0755 home: %v", err)
	}
	mustMkdir(t, filepath.Join(ok, "daemon"), 0o700)
	if err := CheckHome(ok); err != nil {
		t.Fatalf("own home and daemon directory: %v", err)
	}

	groupW := filepath.Join(base, "groupw")
	mustMkdir(t, groupW, 0o775)
	worldDaemon := filepath.Join(base, "worldd")
	mustMkdir(t, worldDaemon, 0o700)
	mustMkdir(t, filepath.Join(worldDaemon, "daemon"), os.ModeSticky|0o777)
	link := filepath.Join(base, "link")
	if err := os.Symlink(ok, link); err != nil {
		t.Fatal(err)
	}
	cases := map[string][]string{
		groupW:      {groupW, "writable by group or others (mode 0775)", "chmod go-w " + groupW},
		worldDaemon: {filepath.Join(worldDaemon, "daemon"), "mode 1777", "chmod go-w"},
		link:        {link, "is a symbolic link (to " + ok + ")", "set BERTH_HOME to the directory itself"},
	}
	if os.Getuid() == 0 {
		theirs := filepath.Join(base, "theirs")
		mustMkdir(t, theirs, 0o755)
		if err := os.Chown(theirs, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		cases[theirs] = []string{theirs, "belongs to uid 65534", "not to you (uid 0", "use a BERTH_HOME of your own"}
	}
	for home, want := range cases {
		err := CheckHome(home)
		if !errors.Is(err, ErrUntrusted) {
			t.Errorf("CheckHome(%s) = %v; want ErrUntrusted", home, err)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("CheckHome(%s) = %q; want it to say %q", home, err, w)
			}
		}
	}
	// Dial refuses before it connects or starts anything.
	if _, err := Dial(context.Background(), DialOptions{Home: groupW, Exe: "/bin/false"}); !errors.Is(err, ErrUntrusted) {
		t.Errorf("Dial into a group-writable home: %v; want ErrUntrusted", err)
	}
	if _, err := os.Stat(filepath.Join(groupW, "daemon")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Dial created the daemon directory in an untrusted home: %v", err)
	}
}

// TestCheckFile: a configuration file or .env another user may write is
// refused, one its group may write gets a warning, a missing one is fine.
func TestCheckFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("terminal: {}\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if w, err := CheckFile("the configuration file", write("own.yaml", 0o644)); w != "" || err != nil {
		t.Errorf("own 0644 file: %q, %v", w, err)
	}
	if w, err := CheckFile("the configuration file", filepath.Join(dir, "missing.yaml")); w != "" || err != nil {
		t.Errorf("missing file: %q, %v", w, err)
	}
	p := write("world.yaml", 0o666)
	if _, err := CheckFile("the configuration file", p); !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), "writable by anybody (mode 0666)") || !strings.Contains(err.Error(), "chmod o-w "+p) {
		t.Errorf("world-writable file: %v", err)
	}
	p = write("group.env", 0o664)
	if w, err := CheckFile("the .env file", p); err != nil || !strings.Contains(w, "writable by its group (mode 0664)") {
		t.Errorf("group-writable file: %q, %v; want a warning", w, err)
	}
	if os.Getuid() == 0 {
		p = write("theirs.yaml", 0o644)
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := CheckFile("the configuration file", p); !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), "belongs to uid 65534") {
			t.Errorf("another user's file: %v", err)
		}
	}
}

// TestDialRefusesAnotherUsersSocket (N8): a socket in the caller's own
// daemon directory that another user serves (the review's fake daemon) is
// refused after connecting, by SO_PEERCRED, before anything is sent.
func TestDialRefusesAnotherUsersSocket(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run the fake daemon as another user")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.MkdirTemp("", "bwbin")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(bin)
	os.Chmod(bin, 0o755)
	fake := filepath.Join(bin, "fake")
	if b, err := os.ReadFile(exe); err != nil || os.WriteFile(fake, b, 0o755) != nil {
		t.Fatalf("copy the test binary: %v", err)
	}
	home, err := os.MkdirTemp("", "bwh")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(home)
	os.Chmod(home, 0o755)
	paths, err := PathsFor(home)
	if err != nil {
		t.Fatal(err)
	}
	// The other user gets in while the directory is open, then it is
	// closed again: the directory passes CheckHome, the socket is theirs.
	mustMkdir(t, paths.Dir, os.ModeSticky|0o777)
	cmd := exec.Command(fake)
	cmd.Env = append(os.Environ(), "BERTH_WIRE_TEST_LISTEN="+paths.Socket)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	r := bufio.NewReader(out)
	if line, err := r.ReadString('\n'); line != "ready\n" {
		t.Fatalf("fake daemon: %q, %v", line, err)
	}
	if err := os.Chmod(paths.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err = Dial(context.Background(), DialOptions{Home: home, NoStart: true})
	if !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), "served by uid 65534") || !strings.Contains(err.Error(), "nothing was sent") {
		t.Fatalf("Dial to another user's socket: %v; want a refusal naming its uid", err)
	}
	// What the fake got: nothing.
	got := make(chan string, 1)
	go func() { line, _ := r.ReadString('\n'); got <- line }()
	select {
	case line := <-got:
		if !strings.HasPrefix(line, "got 0 bytes") {
			t.Fatalf("the fake daemon got %q", line)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the fake daemon reported nothing")
	}
}

// TestConnectionEndedBeforeHelloRanNothing: a daemon that goes away after
// accepting, before its hello (it was exiting, its socket still queued
// connections), took no request: the error wraps ErrNotRunning, which the
// front takes as "run it yourself".
func TestConnectionEndedBeforeHelloRanNothing(t *testing.T) {
	home := t.TempDir()
	paths, err := PathsFor(home)
	if err != nil {
		t.Fatal(err)
	}
	if err := PrivateDir(paths.Dir); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", paths.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	c, err := Dial(context.Background(), DialOptions{Home: home, NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Run(context.Background(), Request{Op: OpRun, Command: "true"}, RunOptions{})
	if !errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), "nothing ran") {
		t.Fatalf("Run on a connection closed before the hello: %v; want ErrNotRunning", err)
	}
}
