package cli

import (
	"os"
	"testing"

	"github.com/creack/pty"
)

// TestIsTerminal: /dev/null is a character device but no terminal (agents
// give it as stdin, and must not be taken for a human); a pty is one.
func TestIsTerminal(t *testing.T) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if IsTerminal(null) {
		t.Error("IsTerminal(/dev/null) = true")
	}
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	defer tty.Close()
	if !IsTerminal(tty) {
		t.Error("IsTerminal(pty) = false")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if IsTerminal(r) {
		t.Error("IsTerminal(pipe) = true")
	}
}
