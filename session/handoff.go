package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"
)

// Handoff is a foreground command that was moved to the background while
// it ran (a timeout with Request.BackgroundOnTimeout, or Request.Detach):
// it goes on, untouched, in the shell it started in, and the Handoff
// follows it to its end. The session itself has moved on to a fresh shell.
//
// The handed-off shell keeps the session's mark of the moment (see
// TreeVar), and the session takes a new one for its later shells: a later
// timeout or interrupt in the session does not touch the handed-off
// command, and Kill reaches the command's whole tree, including what it
// started that left the shell's process group, and background jobs (`cmd
// &`) that earlier commands left in that shell.
//
// When the command ends, the shell that ran it is ended too (its stdin is
// closed, which ends an idle shell) and reaped; a shell that does not go
// within a few seconds is killed. Session.Close stops whatever is left of
// every handoff.
type Handoff struct {
	// PID is the pid, inside the target, of the shell that runs the
	// command (0 when unknown).
	PID int
	// Output is the command's output from the moment it was handed off,
	// raw (as the session's writer would have received it), without the
	// frame. It reaches EOF when the command has ended. The owner must
	// read it to its end: the command blocks when its output is not read.
	Output io.Reader

	sess  *Session
	sh    *shell
	mark  string // the session's mark when the command started
	pw    *io.PipeWriter
	done  chan struct{}
	code  int
	err   error
	once  sync.Once
	ended time.Time
}

// Done is closed when the command has ended and its shell is reaped.
func (h *Handoff) Done() <-chan struct{} { return h.done }

// ExitCode reports the command's exit status once Done is closed: its exit
// code, 128+N when its shell was killed by signal N (Kill), or -1 with a
// non-nil error (wrapping ErrShellLost) when the shell was lost and the
// status cannot be known.
func (h *Handoff) ExitCode() (int, error) {
	<-h.done
	return h.code, h.err
}

// Kill stops the command and everything it started: the kill script runs
// against the shell's process group and descendants (while the pid still
// belongs to the shell) and everything carrying its mark. It returns once
// the kill script has finished; Done follows when the shell is reaped.
func (h *Handoff) Kill(ctx context.Context) error {
	pid, _ := strconv.Atoi(h.sh.pid)
	if h.sh.exited() {
		pid = 0
	}
	return h.sess.kill(ctx, pid, h.sh.start, h.mark)
}

// handoff takes sh away from the session: the session gets a fresh mark
// for its later shells and starts a new shell on the next command (with
// cwd and exported variables restored, as after a lost shell). Callers
// hold s.mu.
func (s *Session) handoff(sh *shell) *Handoff {
	pid, _ := strconv.Atoi(sh.pid)
	pr, pw := io.Pipe()
	h := &Handoff{PID: pid, Output: pr, sess: s, sh: sh, mark: s.mark, pw: pw, done: make(chan struct{})}
	s.mark = TreeVar + "=" + nonce()
	s.sh = nil
	s.jobsMu.Lock()
	kept := s.handoffs[:0]
	for _, o := range s.handoffs {
		select {
		case <-o.done:
			// Ended: what it left behind (stray jobs of its shell) is still
			// found by its mark at Close, so keep the few most recent.
			if len(s.handoffs) < maxJobs {
				kept = append(kept, o)
			}
		default:
			kept = append(kept, o)
		}
	}
	s.handoffs = append(kept, h)
	s.jobsMu.Unlock()
	s.log.Debug("session: command handed off to the background", "backend", s.be.Name(), "pid", sh.pid)
	return h
}

// reapWait bounds how long an idle handed-off shell may take to end once
// its stdin is closed, before it is killed.
const reapWait = 5 * time.Second

// follow reads the handed-off command's output (chunks: the shell's output
// channel, nil when it already ended) through feed until the frame or the
// shell's end, then ends and reaps the shell. flush writes out bytes the
// framers held back when the stream ends without a frame; framed reports
// the frame's exit code once feed has seen it.
func (h *Handoff) follow(chunks <-chan *[]byte, feed func([]byte) bool, flush func(), framed func() (int, bool)) {
	sh, s := h.sh, h.sess
	code, err := -1, error(nil)
loop:
	for {
		select {
		case chunk, ok := <-chunks:
			if !ok {
				chunks = nil
				continue
			}
			done := feed(*chunk)
			recycle(chunk)
			if done {
				code, _ = framed()
				break loop
			}
		case <-sh.done:
			broken := s.drain(sh, feed)
			if c, ok := framed(); ok {
				code = c
				break loop
			}
			flush()
			if lost := errors.Join(sh.err, broken); lost != nil {
				code, err = -1, fmt.Errorf("%w on %s while the handed-off command ran (its outcome is unknown): %w", ErrShellLost, s.be.Name(), lost)
			} else {
				code = sh.code
			}
			break loop
		}
	}
	// The command is over: an idle shell ends when its input does.
	sh.proc.Stdin().Close()
	select {
	case <-sh.done:
	case <-time.After(reapWait):
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.Grace+10*time.Second)
		pid, _ := strconv.Atoi(sh.pid)
		if kerr := s.kill(ctx, pid, sh.start, ""); kerr != nil {
			s.log.Warn("session: kill a handed-off shell that did not end", "backend", s.be.Name(), "pid", sh.pid, "err", kerr)
		}
		cancel()
		select {
		case <-sh.done:
		case <-time.After(time.Second):
		}
	}
	s.release(sh)
	h.code, h.err = code, err
	h.pw.Close()
	close(h.done)
}
