// Package session drives one persistent shell over any backend's byte
// stream. A command is one write to the shell's stdin and a read of its
// output up to a per-command random frame, so a trivial command costs a
// pipe round trip instead of a process spawn; cd, exported variables,
// functions and aliases persist because every command runs in the same
// shell.
//
// The session does not know which backend it runs on. Timeouts and
// interrupts kill the command's whole process tree inside the target with a
// second process started through the same backend; a shell that dies (exit,
// exec, set -e, kill -9 $$, a timeout) is replaced on the next command with
// its working directory and exported variables restored.
package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/randhex"
	"github.com/a55dbaac/berth/internal/shellword"
)

// Options configures a session.
type Options struct {
	// Cwd is the initial working directory inside the target. "" keeps the
	// backend's default; "~" and "~/x" expand to the target user's home. A
	// directory that does not exist falls back to its nearest existing
	// parent.
	Cwd string
	// Env is exported into the shell when it starts (and again after a
	// restart). Values travel over the shell's stdin, never in a command
	// line.
	Env map[string]string
	// Grace is how long processes get between TERM and KILL when a command
	// is stopped. Zero means 2 seconds.
	Grace time.Duration
	// Logger receives diagnostics; nil means slog.Default().
	Logger *slog.Logger
}

// Request is one command for the shell.
type Request struct {
	// Command is shell text: anything bash or sh accepts, multi-line
	// commands and heredocs included. It must not contain NUL bytes.
	Command string
	// Timeout bounds the command; zero means no limit beyond the context.
	Timeout time.Duration
	// Workdir, when set, runs this command there without moving the
	// session's cwd.
	Workdir string
	// Stdin is the command's standard input. Nil means /dev/null.
	Stdin []byte
}

// Result is what became of a command.
type Result struct {
	// ExitCode is the command's status: its exit code, 128+N when the shell
	// was killed by signal N, 124 on timeout and 130 on interrupt.
	ExitCode int
	// Cwd is the session's working directory after the command.
	Cwd string
	// TimedOut and Interrupted report why a command was stopped.
	TimedOut    bool
	Interrupted bool
	// ShellExited reports that the command ended the shell (exit, exec, a
	// fatal signal); the next command gets a fresh shell with state
	// restored.
	ShellExited bool
}

// Session is a persistent shell in one environment. Commands run one at a
// time; Run is safe to call from several goroutines.
type Session struct {
	be   backend.Backend
	opts Options
	log  *slog.Logger

	mu      sync.Mutex      // serialises commands
	sh      *shell          // nil when no shell is running
	cwd     string          // last known cwd
	exports string          // last snapshot of exported variables (export -p)
	names   map[string]bool // functions and aliases the shell defines
	starts  int
	closed  bool
}

// shell is one running shell process.
type shell struct {
	proc   backend.Process
	pid    string
	bash   bool          // bash rather than POSIX sh
	chunks chan []byte   // output chunks; closed at EOF
	rerr   error         // why the output ended; valid once chunks is closed
	done   chan struct{} // closed when the process has exited
	code   int           // exit status, valid after done
	err    error         // Wait error, valid after done
	rest   []byte        // output read past the last frame
}

// New returns a session on be. The shell is started lazily by the first
// command (or by Start).
func New(be backend.Backend, opts Options) *Session {
	if opts.Grace <= 0 {
		opts.Grace = 2 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Session{be: be, opts: opts, log: log}
}

// ErrClosed is returned by Run after Close.
var ErrClosed = errors.New("session: closed")

// Start makes sure a shell is running, starting one if needed.
func (s *Session) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ensure(ctx)
}

// Cwd reports the session's last known working directory.
func (s *Session) Cwd() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cwd
}

// ShellPID reports the pid of the running shell inside the target, or ""
// when none is running.
func (s *Session) ShellPID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sh == nil {
		return ""
	}
	return s.sh.pid
}

// Starts reports how many shells this session has started.
func (s *Session) Starts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts
}

// Reset stops the shell and forgets its state, so the next command starts
// a fresh shell in the configured cwd with no carried variables (what
// persistent_shell: false asks for).
func (s *Session) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopShell()
	s.starts, s.exports, s.names, s.cwd = 0, "", nil, ""
}

// Close stops the shell (killing what it runs) and releases it.
func (s *Session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.stopShell()
	return nil
}

// stopShell kills the running shell's tree, if there is a shell, and
// releases it. Callers hold s.mu.
func (s *Session) stopShell() {
	if s.sh == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Grace+5*time.Second)
	defer cancel()
	s.killTree(ctx, s.sh)
	s.release(s.sh)
	s.sh = nil
}

// nonce is a fresh random marker for framing one command.
func nonce() string { return randhex.String(12) }

// ensure starts a shell if none is running. Callers hold s.mu.
func (s *Session) ensure(ctx context.Context) error {
	if s.closed {
		return ErrClosed
	}
	if s.sh != nil {
		select {
		case <-s.sh.done:
			s.release(s.sh)
			s.sh = nil
		default:
			return nil
		}
	}
	proc, err := s.be.Start(ctx, backend.ProcSpec{Argv: bootstrap})
	if err != nil {
		return fmt.Errorf("session: start shell on %s: %w", s.be.Name(), err)
	}
	sh := &shell{proc: proc, chunks: make(chan []byte, 16), done: make(chan struct{})}
	go sh.read()
	go func() {
		sh.code, sh.err = proc.Wait()
		close(sh.done)
	}()

	var script strings.Builder
	script.WriteString(initScript)
	if len(s.opts.Env) > 0 {
		lines, err := exportLines(s.opts.Env)
		if err != nil {
			s.release(sh)
			return err
		}
		script.WriteString(lines)
	}
	target := s.opts.Cwd
	if s.starts > 0 {
		// A previous shell died: restore its exported variables and cwd.
		if s.exports != "" {
			script.WriteString("{\n" + s.exports + "\n} >/dev/null 2>&1\n")
		}
		target = s.cwd
	}
	if target != "" {
		script.WriteString(cdLine(target, true) + "\n")
	}
	n := nonce()
	script.WriteString("command printf '\\n" + markerPrefix + "%s_%s\\000%s\\000%s\\000' " + n + " \"$$\" \"$PWD\" \"${BASH_VERSION:+bash}\"\n")
	if _, err := io.WriteString(proc.Stdin(), script.String()); err != nil {
		s.release(sh)
		return fmt.Errorf("session: write init script on %s: %w", s.be.Name(), err)
	}
	fr := newFramer(n, 3)
	var junk strings.Builder
	sink := limitWriter{w: &junk, n: 4096}
	for {
		select {
		case chunk, ok := <-sh.chunks:
			if !ok {
				s.release(sh)
				return fmt.Errorf("session: shell on %s ended during start: %q", s.be.Name(), junk.String())
			}
			done := fr.feed(chunk, &sink)
			recycle(chunk)
			if done {
				sh.pid, s.cwd, sh.bash = fr.got[0], fr.got[1], fr.got[2] == "bash"
				sh.rest = fr.rest
				if junk.Len() > 0 {
					s.log.Debug("session: shell start printed", "backend", s.be.Name(), "output", junk.String())
				}
				s.sh = sh
				s.starts++
				return nil
			}
		case <-ctx.Done():
			s.release(sh)
			return fmt.Errorf("session: start shell on %s: %w", s.be.Name(), ctx.Err())
		}
	}
}

// chunkPool recycles read buffers: every command's output (often a few
// bytes) would otherwise cost a fresh 64 KiB buffer.
var chunkPool = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// recycle returns a chunk to the pool once its consumer is done with it
// (the framer and the output writers copy what they keep).
func recycle(chunk []byte) {
	b := chunk[:cap(chunk)]
	chunkPool.Put(&b)
}

// read pumps the process's output into the chunk channel until EOF.
func (sh *shell) read() {
	defer close(sh.chunks)
	r := sh.proc.Stdout()
	for {
		bp := chunkPool.Get().(*[]byte)
		n, err := r.Read(*bp)
		if n > 0 {
			sh.chunks <- (*bp)[:n]
		} else {
			chunkPool.Put(bp)
		}
		if err != nil {
			sh.rerr = err
			return
		}
	}
}

// Run executes one command and streams its output (stdout and stderr
// merged in arrival order) to out. A context cancel interrupts the command
// (exit 130); the request timeout stops it with 124. In both cases the
// whole tree the command started inside the target is killed.
//
// The error is non-nil only when the command could not be run at all (the
// shell cannot be started, the backend is unreachable); a failing command
// is a Result with its exit code.
func (s *Session) Run(ctx context.Context, req Request, out io.Writer) (Result, error) {
	if strings.IndexByte(req.Command, 0) >= 0 {
		return Result{}, errors.New("session: command contains a NUL byte, which no shell can receive")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.ensure(ctx); err != nil {
		return Result{}, err
	}
	sh := s.sh
	// Rejected text must not leave anything behind (such as a large
	// stdin's file), so the check comes before any work.
	changes, incomplete := analyze(req.Command, s.names)
	if incomplete != nil {
		io.WriteString(out, "syntax error: "+incomplete.Error())
		return Result{ExitCode: 2, Cwd: s.cwd}, nil
	}

	var line strings.Builder
	redir := "</dev/null"
	status, cleanup := "$?", ""
	switch {
	case len(req.Stdin) > stdinInline:
		// Large input goes to a private file through a helper process.
		path := "/tmp/.berth-in-" + nonce()
		if err := s.putFile(ctx, path, req.Stdin); err != nil {
			return Result{}, err
		}
		redir = "<" + shellword.Quote(path)
		status, cleanup = "$__berth_s", "__berth_s=$?; command rm -f "+shellword.Quote(path)+"; "
	case req.Stdin != nil:
		line.WriteString("__berth_stdin " + printfBytes(req.Stdin) + "\n")
		redir = "<\"$__berth_in\""
	}
	snap := "0"
	if !sh.bash || changes {
		snap = "1"
	}
	n := nonce()
	// The leading blank line resets bash's parser after an eval that hit
	// an unterminated quote; without it the next line fails to parse.
	line.WriteString("\n{ __berth_pre " + shellword.Quote(req.Workdir) + "; } 2>/dev/null && command eval " +
		shellword.Quote(req.Command) + " " + redir + "; " + cleanup + "{ __berth_post " + status + " " + n + " " + snap + "; } 2>/dev/null\n")

	if len(sh.rest) > 0 {
		out.Write(sh.rest)
		sh.rest = nil
	}

	var timeout <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout)
		defer t.Stop()
		timeout = t.C
	}

	// Write in the background: a large command can fill the pipe while the
	// shell is still producing output from an earlier stray job.
	werr := make(chan error, 1)
	go func() {
		_, err := io.WriteString(sh.proc.Stdin(), line.String())
		werr <- err
	}()

	fr := newFramer(n, 3)
	for {
		select {
		case chunk, ok := <-sh.chunks:
			if !ok {
				return s.shellEnded(sh, fr, out)
			}
			done := fr.feed(chunk, out)
			recycle(chunk)
			if done {
				code, _ := strconv.Atoi(fr.got[0])
				s.cwd = fr.got[1]
				if snap == "1" {
					s.keepSnapshot(fr.got[2])
				}
				sh.rest = fr.rest
				return Result{ExitCode: code, Cwd: s.cwd}, nil
			}
		case <-sh.done:
			return s.shellEnded(sh, fr, out)
		case err := <-werr:
			if err != nil {
				s.log.Debug("session: write command", "backend", s.be.Name(), "err", err)
				// The shell is gone; its exit will show on done or chunks.
			}
			werr = nil
		case <-timeout:
			s.stop(sh, fr, out)
			return Result{ExitCode: 124, Cwd: s.cwd, TimedOut: true}, nil
		case <-ctx.Done():
			s.stop(sh, fr, out)
			return Result{ExitCode: 130, Cwd: s.cwd, Interrupted: true}, nil
		}
	}
}

// keepSnapshot stores the exported variables and defined names reported
// by the shell after a state-changing command.
func (s *Session) keepSnapshot(snap string) {
	exports, names, _ := strings.Cut(snap, "\x01")
	s.exports = strings.TrimRight(exports, "\n")
	s.names = make(map[string]bool)
	for _, n := range strings.Fields(names) {
		if !strings.HasPrefix(n, "__berth_") {
			s.names[n] = true
		}
	}
}

// stdinInline is the largest stdin sent inline through the session; more
// goes through a helper process (see putFile).
const stdinInline = 16 << 10

// drainWindow bounds how long output is still collected after the shell
// exited: a descendant that keeps the stream open must not hang the call.
const drainWindow = 200 * time.Millisecond

// shellEnded finishes a command whose shell exited (exit N, exec, set -e,
// a fatal signal). When the backend cannot tell how the shell ended (the
// connection to it was lost), the command's fate is unknown: that is an
// error, and the next command starts a fresh shell with state restored.
func (s *Session) shellEnded(sh *shell, fr *framer, out io.Writer) (Result, error) {
	<-sh.done
	broken := s.drain(sh, fr, out)
	s.release(sh)
	s.sh = nil
	// A status the backend could not learn, or an output stream that broke
	// rather than ended (a dropped connection, even when the shell's death
	// was reported just before), means the shell was lost, not that the
	// command chose to end it.
	if lost := errors.Join(sh.err, broken); lost != nil {
		return Result{ExitCode: -1, Cwd: s.cwd, ShellExited: true},
			fmt.Errorf("session: lost the shell on %s while the command ran (its outcome is unknown; the next command starts a new shell with cwd and exported variables restored): %w", s.be.Name(), lost)
	}
	return Result{ExitCode: sh.code, Cwd: s.cwd, ShellExited: true}, nil
}

// drain copies what is left of the output after the shell exited, for at
// most drainWindow. It reports how the output ended when it did (nil for a
// clean EOF or when it did not end in time).
func (s *Session) drain(sh *shell, fr *framer, out io.Writer) (broken error) {
	t := time.NewTimer(drainWindow)
	defer t.Stop()
	for {
		select {
		case chunk, ok := <-sh.chunks:
			if !ok {
				fr.flush(out)
				if sh.rerr != nil && !errors.Is(sh.rerr, io.EOF) {
					return sh.rerr
				}
				return nil
			}
			done := fr.feed(chunk, out)
			recycle(chunk)
			if done {
				return nil
			}
		case <-t.C:
			fr.flush(out)
			return nil
		}
	}
}

// stop kills the running command's tree and the shell, keeping what it
// printed. The next command starts a fresh shell with state restored.
func (s *Session) stop(sh *shell, fr *framer, out io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Grace+5*time.Second)
	defer cancel()
	s.killTree(ctx, sh)
	select {
	case <-sh.done:
	case <-time.After(time.Second):
		s.log.Warn("session: shell still running after kill", "backend", s.be.Name(), "pid", sh.pid)
	}
	s.drain(sh, fr, out)
	s.release(sh)
	s.sh = nil
}

// killTree runs the kill script in the environment against the shell's
// process tree and waits for it; without a known pid only the client side
// can be dropped.
func (s *Session) killTree(ctx context.Context, sh *shell) {
	pid, _ := strconv.Atoi(sh.pid)
	if pid <= 0 {
		s.release(sh)
		return
	}
	if err := s.KillTree(ctx, pid); err != nil {
		s.log.Warn("session: kill shell tree", "backend", s.be.Name(), "err", err)
		s.release(sh)
	}
}

// release frees the client side of a shell (closing its stdin ends a shell
// that is still reading) and drains its output channel so the reader
// goroutine can finish. Calling it twice is harmless.
func (s *Session) release(sh *shell) {
	sh.proc.Stdin().Close()
	sh.proc.Close()
	go func() {
		for chunk := range sh.chunks {
			recycle(chunk)
		}
	}()
}

// limitWriter keeps at most n bytes.
type limitWriter struct {
	w io.Writer
	n int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n <= 0 {
		return len(p), nil
	}
	q := p
	if len(q) > l.n {
		q = q[:l.n]
	}
	l.n -= len(q)
	l.w.Write(q)
	return len(p), nil
}
