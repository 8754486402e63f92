package ssh

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/testenv/sshenv"
)

// BenchmarkConnect measures dial + handshake + authentication.
func BenchmarkConnect(b *testing.B) {
	s := sshenv.Start(b)
	opts := testOptions(s, nil)
	for b.Loop() {
		be, err := New(context.Background(), opts)
		if err != nil {
			b.Fatal(err)
		}
		if err := be.Connect(context.Background()); err != nil {
			b.Fatal(err)
		}
		be.Close(context.Background())
	}
}

// BenchmarkStartTrue measures a new channel plus exec of `true` to its exit
// status on an open connection (what a kill helper costs).
func BenchmarkStartTrue(b *testing.B) {
	s := sshenv.Start(b)
	be := newTestBackend(b, testOptions(s, nil))
	if err := be.Connect(context.Background()); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		p, err := be.Start(context.Background(), backend.ProcSpec{Argv: []string{"true"}})
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, p.Stdout())
		if code, err := p.Wait(); code != 0 || err != nil {
			b.Fatal(code, err)
		}
		p.Close()
	}
}

// BenchmarkShellRoundTrip measures one line through a persistent remote
// shell (what a trivial command costs the session layer).
func BenchmarkShellRoundTrip(b *testing.B) {
	s := sshenv.Start(b)
	be := newTestBackend(b, testOptions(s, nil))
	sh1 := startShell(b, be)
	sh1.do("echo warm") // the remote login shell's startup files run first
	for b.Loop() {
		if got, err := sh1.do("echo x"); got != "x\n" || err != nil {
			b.Fatal(got, err)
		}
	}
}

// BenchmarkShellRoundTripTTY is the same through a pty (sshd then sets
// TCP_NODELAY; without a pty it does not, yet the round trip stays lower).
func BenchmarkShellRoundTripTTY(b *testing.B) {
	s := sshenv.Start(b)
	be := newTestBackend(b, testOptions(s, nil))
	p, err := be.Start(context.Background(), backend.ProcSpec{Argv: []string{"sh", "-c", "stty -echo; exec sh"}, TTY: true})
	if err != nil {
		b.Fatal(err)
	}
	sh1 := &shell{p, bufio.NewReader(p.Stdout())}
	sh1.do("echo ready")
	for {
		l, _ := sh1.r.ReadString('\n')
		if strings.Contains(l, "ready") && !strings.Contains(l, "echo") {
			break
		}
	}
	for b.Loop() {
		if got, err := sh1.do("echo x"); !strings.HasSuffix(got, "x\r\n") || err != nil {
			b.Fatalf("%q %v", got, err)
		}
	}
}
