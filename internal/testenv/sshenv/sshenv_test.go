package sshenv

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

func dialServer(t *testing.T, s *Server) *gossh.Client {
	t.Helper()
	c, err := gossh.Dial("tcp", s.Addr(), &gossh.ClientConfig{
		User:            s.User,
		Auth:            []gossh.AuthMethod{gossh.PublicKeys(s.Signer)},
		HostKeyCallback: gossh.FixedHostKey(s.HostKey),
		Timeout:         5 * time.Second,
	})
	if err != nil {
		t.Fatalf("dial %s: %v\n%s", s.Addr(), err, s.Log())
	}
	return c
}

func run(t *testing.T, c *gossh.Client, cmd string) string {
	t.Helper()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	out, err := sess.CombinedOutput(cmd)
	if err != nil {
		t.Fatalf("%s: %v: %s", cmd, err, out)
	}
	return string(out)
}

func TestServerLifecycle(t *testing.T) {
	s := Start(t)
	c := dialServer(t, s)
	if got := run(t, c, "echo hi"); got != "hi\n" {
		t.Fatalf("echo: %q", got)
	}

	s.DropConnections(t)
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("connection survived DropConnections")
	}
	c = dialServer(t, s)
	run(t, c, "true")
	c.Close()

	old := s.HostKey
	s.Restart(t)
	if string(s.HostKey.Marshal()) != string(old.Marshal()) {
		t.Fatal("Restart changed the host key")
	}
	dialServer(t, s).Close()

	s.RestartWithNewHostKey(t)
	if string(s.HostKey.Marshal()) == string(old.Marshal()) {
		t.Fatal("RestartWithNewHostKey kept the host key")
	}
	_, err := gossh.Dial("tcp", s.Addr(), &gossh.ClientConfig{
		User:            s.User,
		Auth:            []gossh.AuthMethod{gossh.PublicKeys(s.Signer)},
		HostKeyCallback: gossh.FixedHostKey(old),
	})
	if err == nil || !strings.Contains(err.Error(), "host key mismatch") {
		t.Fatalf("dial with the old host key: %v", err)
	}
	dialServer(t, s).Close()
}

// sftpOffered reports whether the server accepts a request for the sftp
// subsystem.
func sftpOffered(t *testing.T, s *Server) bool {
	t.Helper()
	c := dialServer(t, s)
	defer c.Close()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	return sess.RequestSubsystem("sftp") == nil
}

func TestSFTPSubsystemOption(t *testing.T) {
	if !sftpOffered(t, Start(t)) {
		t.Error("default server refused the sftp subsystem")
	}
	if sftpOffered(t, Start(t, WithoutSFTP())) {
		t.Error("WithoutSFTP server accepted the sftp subsystem")
	}
}

// TestDropConnectionsReportsNoExitStatus: a dropped connection looks like
// a network failure to the client, every time: a running session ends
// without an exit status (gossh's ExitMissingError or a transport error),
// never with the status of a shell sshd saw die.
func TestDropConnectionsReportsNoExitStatus(t *testing.T) {
	s := Start(t)
	for i := range 20 {
		c := dialServer(t, s)
		sess, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		out, err := sess.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := sess.Start("echo started; sleep 30 & sleep 30"); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 8)
		if _, err := io.ReadFull(out, buf); err != nil {
			t.Fatal(err)
		}
		s.DropConnections(t)
		done := make(chan error, 1)
		go func() { done <- sess.Wait() }()
		select {
		case err := <-done:
			var ee *gossh.ExitError
			if errors.As(err, &ee) || err == nil {
				t.Fatalf("round %d: the dropped session reported an exit status: %v", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: session survived DropConnections", i)
		}
		c.Close()
	}
}
