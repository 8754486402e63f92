package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/a55dbaac/berth/backend"
)

// Shell is a shell kept open on a stream, with nothing of berth's session
// between the caller and it: a command is written to its input and its
// reply read back up to a marker. It is what a trivial command costs at
// its floor on one kind of stream (a bash over pipes, one exec attached
// through the Engine API, one pods/exec stream): the shell runs the
// command and reports its status, nothing else happens.
//
// A Shell is used by one goroutine at a time.
type Shell struct {
	w     io.Writer
	r     *bufio.Reader
	close func() error
	seq   int
	line  []byte
}

// NewShell wraps a shell's input w and output r; close ends it (closing
// its input, the stream, the process).
func NewShell(w io.Writer, r io.Reader, close func() error) *Shell {
	return &Shell{w: w, r: bufio.NewReaderSize(r, 4096), close: close}
}

// RoundTrip runs TrivialCommand in the shell and reads its status back:
// it writes `true; echo __floor_N $?` and reads lines up to that marker's.
// A status other than 0 is an error.
func (s *Shell) RoundTrip() error {
	s.seq++
	marker := "__floor_" + strconv.Itoa(s.seq) + " "
	s.line = append(append(append(s.line[:0], TrivialCommand+"; echo "...), marker...), "$?\n"...)
	if _, err := s.w.Write(s.line); err != nil {
		return fmt.Errorf("bench: shell: write: %w", err)
	}
	for {
		line, err := s.r.ReadSlice('\n')
		if err != nil {
			return fmt.Errorf("bench: shell: read the reply to command %d: %w", s.seq, err)
		}
		rest, ok := bytes.CutPrefix(line, []byte(marker))
		if !ok {
			continue // the prompt, or what the command printed
		}
		if st := string(bytes.TrimSpace(rest)); st != "0" {
			return fmt.Errorf("bench: shell: command %d exited %s", s.seq, st)
		}
		return nil
	}
}

// Close ends the shell.
func (s *Shell) Close() error {
	if s.close == nil {
		return nil
	}
	return s.close()
}

// RoundTrips times n round trips on sh after a short warm-up.
func RoundTrips(sh *Shell, n int) (Stats, error) {
	for range 5 {
		if err := sh.RoundTrip(); err != nil {
			return Stats{}, err
		}
	}
	d := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if err := sh.RoundTrip(); err != nil {
			return Stats{}, err
		}
		d = append(d, time.Since(start))
	}
	return summarise(d), nil
}

// StartShell starts a shell (bash, else sh) through be's Start and keeps it
// open: the backend's own process stream, without berth's session on it.
// Its round trip is the floor of a command through that backend as it is
// (the process wrapper of each backend included), so berth's session
// costs what it costs above it.
func StartShell(ctx context.Context, be backend.Backend) (*Shell, error) {
	var errs []error
	for _, shell := range []string{"bash", "sh"} {
		p, err := be.Start(ctx, backend.ProcSpec{Argv: []string{shell}})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		close := func() error {
			p.Stdin().Close()
			return p.Close()
		}
		sh := NewShell(p.Stdin(), p.Stdout(), close)
		if err := sh.RoundTrip(); err != nil {
			close()
			errs = append(errs, fmt.Errorf("%s: %w", shell, err))
			continue
		}
		return sh, nil
	}
	return nil, fmt.Errorf("bench: start a shell through %s: %w", be.Name(), errors.Join(errs...))
}
