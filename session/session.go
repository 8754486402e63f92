// Package session drives one persistent shell over any backend's byte
// stream. A command is one write to the shell's stdin and a read of its
// output up to a per-command random frame, so a trivial command costs a
// pipe round trip instead of a process spawn; cd, exported variables,
// functions and aliases persist because every command runs in the same
// shell.
//
// The frame travels on a copy of the output pipe that the command cannot
// reach (bash keeps it while the command's own stdout and stderr are given
// to it alone, POSIX sh on a private descriptor closed for the command), so
// a command that redirects or closes its output (exec >/dev/null 2>&1) ends
// normally and the next command's output is captured again. Before a command runs the
// shell acknowledges it, so a command the shell never read (it died just
// before) is retried on a fresh shell instead of being reported as a
// success. berth's own shell code is written to be immune to the state a
// command leaves behind (set -e, set -u, set -x, noclobber, posix mode, glob
// options, IFS, functions and aliases named like builtins).
//
// The session does not know which backend it runs on. Timeouts, interrupts
// and Close kill the command's whole process tree inside the target with a
// second process started through the same backend: the shell's process
// group first, then everything that carries the session's mark (see
// TreeVar) or descends from the shell, frozen before the final kill so
// nothing forks its way out. A pid is signalled only while it still belongs
// to the process berth started (its start time is checked). A shell that
// dies (exit, exec, set -e, kill -9 $$, a timeout) is replaced on the next
// command with its working directory and exported variables restored.
//
// A command can also be handed off instead of stopped (Request.
// BackgroundOnTimeout, Request.Detach): it goes on in its shell, which then
// belongs to a Handoff with the session's mark of the moment, and the
// session takes a fresh mark and, on the next command, a fresh shell with
// the working directory and exported variables restored.
//
// What the kill cannot guarantee: a process that clears its environment
// (env -i, a setuid program, sudo) and also leaves the shell's process
// group and tree is out of reach of the mark; so is one running as another
// user (its /proc/PID/environ is unreadable), and on a target without grep
// the mark is not scanned at all. A process that forks faster than
// the kill script can scan /proc and also leaves the group is frozen round
// after round but may outrun it. A timeout or interrupt kills everything
// the session's shells started, including background jobs of earlier
// commands (the shell is replaced anyway); background jobs of the process
// tool have their own mark and are not touched. Containers collect orphans
// in their init; on a remote host berth can do no more than this.
//
// What framing cannot guarantee: the frame and the command share one pipe
// and the commands arrive on the shell's stdin, so code running in the
// environment as the same user can read /proc/<shell>/fd/0 (learning later
// commands and their nonces) or write into the pipe, and can then hide
// commands or forge their results. Output cannot forge a frame: a command
// never sees the nonce of its own frame.
package session

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/randhex"
	"github.com/a55dbaac/berth/internal/shellword"
	"github.com/a55dbaac/berth/internal/shparse"
	"mvdan.cc/sh/v3/syntax"
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
	// Script is Command already parsed (shparse.New(Command)), when the
	// caller has parsed it for its own checks; nil (or the parse of
	// another text) means Run parses Command itself. A command nested
	// deeper than shparse.MaxNesting is refused either way.
	Script *shparse.Script
	// Timeout bounds the command; zero means no limit beyond the context.
	Timeout time.Duration
	// Workdir, when set, runs this command there without moving the
	// session's cwd.
	Workdir string
	// Stdin is the command's standard input. Nil means /dev/null.
	Stdin []byte
	// BackgroundOnTimeout, when set, does not stop a command that is still
	// running at its timeout: it is handed off (see Handoff) and Run
	// returns at once with Result.Handoff set.
	BackgroundOnTimeout bool
	// Detach, when it is closed while the command runs, hands the command
	// off the same way, whatever its timeout.
	Detach <-chan struct{}
}

// Result is what became of a command.
type Result struct {
	// ExitCode is the command's status: its exit code, 128+N when the shell
	// was killed by signal N, 124 on timeout and 130 on interrupt.
	ExitCode int
	// Cwd is the session's working directory after the command.
	Cwd string
	// TimedOut and Interrupted report why a command was stopped.
	// Interrupted is also set when Close stopped the command.
	TimedOut    bool
	Interrupted bool
	// ShellExited reports that the command ended the shell (exit, exec, a
	// fatal signal); the next command gets a fresh shell with state
	// restored.
	ShellExited bool
	// Handoff is set when the command was still running at its timeout
	// with Request.BackgroundOnTimeout, or when Request.Detach was closed:
	// the command goes on in the shell it started in, which now belongs to
	// the Handoff; ExitCode is then -1 (not known yet). The session is free
	// at once: the next command gets a fresh shell with the working
	// directory and exported variables of before this command.
	Handoff *Handoff
}

// Session is a persistent shell in one environment. Commands run one at a
// time; Run is safe to call from several goroutines.
type Session struct {
	be   backend.Backend
	opts Options
	log  *slog.Logger
	mark string // TreeVar=<random>: in the environment of every shell

	abort     chan struct{} // closed by Close: interrupts a running command
	abortOnce sync.Once

	mu       sync.Mutex      // serialises commands
	sh       *shell          // nil when no shell is running
	cwd      string          // last known cwd
	exports  string          // last snapshot of exported variables (export -p)
	names    map[string]bool // functions and aliases the shell defines
	nameList []string        // the same, sorted (Names)
	defs     string          // their definitions (declare -f, alias -p), berth's own left out
	// ifs is IFS in the shell as of its start or the last snapshot, when
	// ifsKnown.
	ifs      string
	ifsKnown bool
	starts   int
	closed   bool
	timer    *time.Timer // the running command's timeout, reused

	jobsMu   sync.Mutex
	jobs     map[int]identity // background processes started by StartDetached
	order    []int            // jobs, oldest first (the map is bounded)
	handoffs []*Handoff       // commands handed off; Close stops what is left of them
}

// identity tells a process berth started from one that reused its pid.
type identity struct {
	start string // field 22 of /proc/PID/stat; "" when unknown
	mark  string // TreeVar=<random> in the process's environment
}

// shell is one running shell process.
type shell struct {
	proc   backend.Process
	pid    string
	start  string        // start time (field 22 of /proc/PID/stat), "" if unknown
	bash   bool          // bash rather than POSIX sh
	tmp    string        // the shell's temporary directory
	chunks chan *[]byte  // output chunks, from chunkPool; closed at EOF
	rerr   error         // why the output ended; valid once chunks is closed
	done   chan struct{} // closed when the process has exited
	code   int           // exit status, valid after done
	err    error         // Wait error, valid after done
	rest   []byte        // output read past the last frame

	parent      string // ShellParent's answer for this shell
	parentKnown bool

	// ackWant is the acknowledgement the running command's line makes the
	// shell print, set before the line is written; the reader compares
	// the first chunk it reads after that with it, and when the chunk is
	// that acknowledgement and nothing else (the usual case: the shell
	// prints it alone, before the command runs) takes it in place of the
	// command's follower, setting acked: a command then wakes its
	// follower once, for the frame. Any other first chunk goes to the
	// follower as it is, whose framer finds the acknowledgement there.
	ackWant atomic.Pointer[[]byte]
	acked   atomic.Bool
}

// exited reports whether the shell process has ended.
func (sh *shell) exited() bool {
	select {
	case <-sh.done:
		return true
	default:
		return false
	}
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
	return &Session{be: be, opts: opts, log: log, mark: TreeVar + "=" + nonce(), abort: make(chan struct{})}
}

// ErrClosed is returned by Run after Close.
var ErrClosed = errors.New("session: closed")

// ErrShellLost is wrapped by the error Run returns when the shell was lost
// while the command ran (the connection to it dropped, its status could not
// be learnt) or before it read the command twice in a row: the command's
// outcome is unknown or it never ran. The next command starts a new shell
// with the working directory and exported variables restored.
var ErrShellLost = errors.New("session: lost the shell")

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

// Names reports the functions and aliases the shell is known to define,
// sorted, as of the last snapshot of its state (taken after every command
// that may change it, on bash): a later command calling one runs whatever
// its definition says. The list is the session's own, made at the
// snapshot and asked for before every command: callers must not change it.
func (s *Session) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nameList
}

// Definitions reports the definitions of the functions and aliases the
// shell is known to define, as shell text (declare -f and alias -p, as
// of the last snapshot, berth's own helpers left out): a later call of
// one runs what its definition says, and the approval gate checks it so.
// It is "" when the shell cannot print them (sh).
func (s *Session) Definitions() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.defs
}

// IFS reports IFS in the session's shell as of its last report (its
// start, or the snapshot after a command that could change it), and false
// when the report did not parse or a shell that died is yet to be
// replaced. An
// unset IFS is reported as the default, which splits alike.
func (s *Session) IFS() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.sh == nil && s.starts == 0:
		// The first shell starts with the default: every shell sets it so
		// at start, whatever its environment says.
		return defaultIFS, true
	case s.sh == nil || s.sh.exited():
		// The next shell replays the last exports, which may hold IFS.
		return "", false
	}
	return s.ifs, s.ifsKnown
}

// defaultIFS is IFS in a shell that has not set it.
const defaultIFS = " \t\n"

// startIFS reads the start frame's IFS field: x and the value, "" when
// unset.
func startIFS(field string) (string, bool) {
	switch {
	case field == "":
		return defaultIFS, true
	case strings.HasPrefix(field, "x"):
		return field[1:], true
	}
	return "", false
}

// snapIFS splits IFS off the front of a snapshot: its length in
// characters (none when unset), a colon, the value and \x01. It returns
// the value, the rest of the snapshot and whether the front parsed (a
// value of bytes the shell counted otherwise does not).
func snapIFS(snap string) (ifs, rest string, ok bool) {
	n, after, found := strings.Cut(snap, ":")
	if !found {
		return "", snap, false
	}
	if n == "" {
		v, r, found := strings.Cut(after, "\x01")
		return defaultIFS, r, found && v == ""
	}
	want, err := strconv.Atoi(n)
	if err != nil || want < 0 {
		return "", snap, false
	}
	if want < len(after) && after[want] == '\x01' && utf8.RuneCountInString(after[:want]) != want {
		// Counted in bytes (a shell in the C locale).
		return after[:want], after[want+1:], true
	}
	i := 0
	for k := 0; k < want && i < len(after); k++ {
		_, size := utf8.DecodeRuneInString(after[i:])
		i += size
	}
	if i >= len(after) || after[i] != '\x01' {
		// IFS is not known; the rest most likely follows the first \x01.
		_, r, _ := strings.Cut(after, "\x01")
		return "", r, false
	}
	return after[:i], after[i+1:], true
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

// ShellParent returns lookup(pid) for the running shell's pid, asked once
// per shell and kept: a shell's parent, as its $PPID, is fixed when it
// starts, and the approval gate asks for it before every command (reading
// it from /proc each time was a third of the daemon's CPU for a trivial
// command). It is "" when no shell is running.
func (s *Session) ShellParent(lookup func(pid string) string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sh == nil {
		return ""
	}
	if !s.sh.parentKnown {
		s.sh.parent, s.sh.parentKnown = lookup(s.sh.pid), true
	}
	return s.sh.parent
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
	s.starts, s.exports, s.names, s.nameList, s.defs, s.cwd = 0, "", nil, nil, "", ""
}

// Close stops the shell and everything its commands started, interrupting
// a command that is running (its Run returns as interrupted), and releases
// it. It returns once the tree is killed.
func (s *Session) Close() error {
	s.abortOnce.Do(func() { close(s.abort) })
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.stopShell()
	s.jobsMu.Lock()
	hs := s.handoffs
	s.handoffs = nil
	s.jobsMu.Unlock()
	for _, h := range hs {
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.Grace+10*time.Second)
		h.Kill(ctx)
		cancel()
	}
	return nil
}

// stopShell kills the running shell's tree, if there is a shell, and
// releases it. A shell that already exited is not signalled by its pid (the
// pid may belong to someone else by now); what it left behind is still
// found by the session's mark. Callers hold s.mu.
func (s *Session) stopShell() {
	if s.sh == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Grace+10*time.Second)
	defer cancel()
	s.killTree(ctx, s.sh)
	s.release(s.sh)
	s.sh = nil
}

// tmpDir is the directory for the session's private files: the shell's
// $TMPDIR (a confined environment may write nowhere else), else /tmp.
func tmpDir(shellTmp string) string {
	if t := strings.TrimRight(shellTmp, "/"); strings.HasPrefix(t, "/") {
		return t
	}
	return "/tmp"
}

// nonce is a fresh random marker (for files, marks and separators).
func nonce() string { return randhex.String(12) }

// lineNonce is a fresh random nonce for one command line: 16 characters of
// base64url, the frame's 12 (72 bits) and the acknowledgement's 4 (see
// ackNonce). Shorter than nonce because the shell reads its command line a
// byte at a time: every byte of it costs every command.
func lineNonce() string {
	var b [12]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// ensure starts a shell if none is running. Callers hold s.mu.
func (s *Session) ensure(ctx context.Context) error {
	if s.closed {
		return ErrClosed
	}
	if r, ok := s.be.(backend.Renewer); ok && r.Renew(ctx) && s.sh != nil {
		// The environment was carried over into a new one: the shell is
		// in the old one, which is gone (nothing there to kill).
		s.release(s.sh)
		s.sh = nil
	}
	if s.sh != nil {
		if !s.sh.exited() {
			return nil
		}
		s.release(s.sh)
		s.sh = nil
	}
	proc, err := s.be.Start(ctx, backend.ProcSpec{Argv: bootstrap(strings.TrimPrefix(s.mark, TreeVar+"="))})
	if err != nil {
		return fmt.Errorf("session: start shell on %s: %w", s.be.Name(), err)
	}
	sh := &shell{proc: proc, chunks: make(chan *[]byte, 16), done: make(chan struct{})}
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
	script.WriteString("__berth_ready " + n + "\n")
	if _, err := io.WriteString(proc.Stdin(), script.String()); err != nil {
		s.release(sh)
		return fmt.Errorf("session: write init script on %s: %w", s.be.Name(), err)
	}
	fr := newFramer(n, 6)
	var junk strings.Builder
	sink := limitWriter{w: &junk, n: 4096}
	for {
		select {
		case chunk, ok := <-sh.chunks:
			if !ok {
				s.release(sh)
				return fmt.Errorf("session: shell on %s ended during start: %q", s.be.Name(), junk.String())
			}
			done := fr.feed(*chunk, &sink)
			recycle(chunk)
			if done {
				sh.pid, sh.start, s.cwd, sh.bash, sh.tmp = fr.got[0], fr.got[1], fr.got[2], fr.got[3] == "bash", fr.got[4]
				s.ifs, s.ifsKnown = startIFS(fr.got[5])
				sh.rest = fr.rest
				if junk.Len() > 0 {
					s.log.Debug("session: shell start printed", "backend", s.be.Name(), "output", junk.String())
				}
				s.sh = sh
				s.starts++
				return nil
			}
		case <-ctx.Done():
			s.discard(sh)
			return fmt.Errorf("session: start shell on %s: %w", s.be.Name(), ctx.Err())
		case <-s.abort:
			s.discard(sh)
			return ErrClosed
		}
	}
}

// discard kills a shell that never became the session's and releases it.
func (s *Session) discard(sh *shell) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Grace+10*time.Second)
	defer cancel()
	s.kill(ctx, 0, "", s.mark)
	s.release(sh)
}

// chunkPool recycles read buffers: every command's output (often a few
// bytes) would otherwise cost a fresh 64 KiB buffer.
var chunkPool = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// recycle returns a chunk to the pool once its consumer is done with it
// (the framer and the output writers copy what they keep). Chunks travel
// as the pool's pointers, so that giving one back allocates nothing.
func recycle(chunk *[]byte) {
	*chunk = (*chunk)[:cap(*chunk)]
	chunkPool.Put(chunk)
}

// read pumps the process's output into the chunk channel until EOF.
func (sh *shell) read() {
	defer close(sh.chunks)
	r := sh.proc.Stdout()
	for {
		bp := chunkPool.Get().(*[]byte)
		n, err := r.Read(*bp)
		if want := sh.ackWant.Swap(nil); n > 0 && want != nil && bytes.Equal((*bp)[:n], *want) {
			sh.acked.Store(true)
			chunkPool.Put(bp)
		} else if n > 0 {
			*bp = (*bp)[:n]
			sh.chunks <- bp
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
// merged in arrival order) to out. A context cancel or Close interrupts the
// command (exit 130); the request timeout stops it with 124. In both cases
// the whole tree the command started inside the target is killed.
//
// The error is non-nil only when the command could not be run at all (the
// shell cannot be started, the backend is unreachable, the command nests
// deeper than shparse.MaxNesting) or its fate is unknown (ErrShellLost); a failing
// command is a Result with its exit code.
func (s *Session) Run(ctx context.Context, req Request, out io.Writer) (Result, error) {
	if strings.IndexByte(req.Command, 0) >= 0 {
		return Result{}, errors.New("session: command contains a NUL byte, which no shell can receive")
	}
	sc := shparse.Of(req.Script, req.Command)
	var ne *shparse.NestingError
	if errors.As(sc.Err, &ne) {
		return Result{}, fmt.Errorf("session: %w", ne)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.ensure(ctx); err != nil {
		return Result{}, err
	}
	// Rejected text must not leave anything behind (such as a large
	// stdin's file), so the check comes before any work.
	changes, incomplete := analyze(sc, s.names)
	if incomplete != nil {
		io.WriteString(out, "syntax error: "+incomplete.Error())
		return Result{ExitCode: 2, Cwd: s.cwd}, nil
	}

	stdinArg, redir, cleanup := "", "</dev/null", ""
	switch {
	case len(req.Stdin) > stdinInline:
		// Large input goes to a private file through a helper process.
		path := tmpDir(s.sh.tmp) + "/.berth-in-" + nonce()
		if err := s.putFile(ctx, path, req.Stdin); err != nil {
			return Result{}, err
		}
		redir, cleanup = "<"+shellword.Quote(path), path
	case req.Stdin != nil:
		stdinArg = printfBytes(req.Stdin)
		redir = "<\"$__berth_i\""
	}
	snap := "0"
	if changes {
		snap = "1"
	}

	var timeout <-chan time.Time
	if req.Timeout > 0 {
		// One timer for the session's commands, which run one at a time:
		// stopped, it delivers nothing stale to the next (Go 1.23 timers).
		if s.timer == nil {
			s.timer = time.NewTimer(req.Timeout)
		} else {
			s.timer.Reset(req.Timeout)
		}
		defer s.timer.Stop()
		timeout = s.timer.C
	}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if err := s.ensure(ctx); err != nil {
				return Result{}, err
			}
		}
		sh := s.sh
		if !sh.bash {
			snap = "1" // no cheap way to learn sh's function names
		}
		n := lineNonce()
		line := commandLine(sh.bash, n, req.Workdir, stdinArg, redir, req.Command, snap, cleanup)
		res, err, ran := s.runOnce(ctx, sh, n, snap, line, timeout, req, out)
		if ran || attempt > 0 {
			if !ran && err == nil {
				err = fmt.Errorf("%w on %s: it ended twice before reading the command (the command did not run; the next command starts a new shell with cwd and exported variables restored)", ErrShellLost, s.be.Name())
				res = Result{ExitCode: -1, Cwd: s.cwd, ShellExited: true}
			}
			return res, err
		}
		s.log.Debug("session: shell ended before reading the command; retrying on a new shell", "backend", s.be.Name(), "status", res.ExitCode)
	}
}

// runOnce sends one command line to sh and follows it to its frame. ran is
// false when the shell ended without acknowledging the command (it never
// read it): the caller may send it again to a new shell.
func (s *Session) runOnce(ctx context.Context, sh *shell, n, snap, line string, timeout <-chan time.Time, req Request, out io.Writer) (res Result, err error, ran bool) {
	if len(sh.rest) > 0 {
		out.Write(sh.rest)
		sh.rest = nil
	}
	ack, fr := newFramer(ackNonce(n), 1), newFramer(frameNonce(n), 3)
	want := append(ack.marker[:len(ack.marker):len(ack.marker)], 0)
	sh.acked.Store(false)
	sh.ackWant.Store(&want)
	// Write in the background: a large command can fill the pipe while the
	// shell is still producing output from an earlier stray job. Nothing
	// waits for the write: a failed one means the shell is gone, and its
	// exit shows on done.
	go func() {
		if _, err := io.WriteString(sh.proc.Stdin(), line); err != nil {
			s.log.Debug("session: write command", "backend", s.be.Name(), "err", err)
		}
	}()

	acked, framed := false, false
	dst := out
	// takeAck takes in an acknowledgement the reader took (ackWant): what
	// the acknowledgement's framer held back was output after all.
	takeAck := func() {
		if !acked && sh.acked.Load() {
			ack.flush(dst)
			acked = true
		}
	}
	// feed passes output on (to out, and to the Handoff's output once the
	// command is handed off) until the acknowledgement, then until the
	// frame; it reports whether the frame is complete.
	feed := func(b []byte) bool {
		takeAck()
		if !acked {
			if !ack.feed(b, dst) {
				return false
			}
			acked = true
			b = ack.rest
		}
		if fr.feed(b, dst) {
			framed = true
		}
		return framed
	}
	// handoff gives the running command and its shell to a Handoff, which
	// follows it to its end from here on.
	var chunks <-chan *[]byte
	handoff := func() Result {
		h := s.handoff(sh)
		dst = h.pw
		flush := func() {
			takeAck()
			if !acked {
				ack.flush(dst)
			} else {
				fr.flush(dst)
			}
		}
		go h.follow(chunks, feed, flush, func() (int, bool) {
			if !framed {
				return 0, false
			}
			code, _ := strconv.Atoi(fr.got[0])
			return code, true
		})
		return Result{ExitCode: -1, Cwd: s.cwd, Handoff: h}
	}
	var bgTimeout <-chan time.Time
	if req.BackgroundOnTimeout {
		timeout, bgTimeout = nil, timeout
	}
	finish := func() Result {
		code, _ := strconv.Atoi(fr.got[0])
		s.cwd = fr.got[1]
		if snap == "1" {
			s.keepSnapshot(fr.got[2])
		}
		sh.rest = fr.rest
		return Result{ExitCode: code, Cwd: s.cwd}
	}
	chunks = sh.chunks
	for {
		select {
		case chunk, ok := <-chunks:
			if !ok {
				// The output ended. Either the shell exited (done follows)
				// or the command closed the shell's copies of the pipe; the
				// frame cannot come then, but the command may still run, so
				// keep waiting for its exit, the timeout or a cancel.
				chunks = nil
				continue
			}
			done := feed(*chunk)
			recycle(chunk)
			if done {
				return finish(), nil, true
			}
		case <-sh.done:
			broken := s.drain(sh, feed)
			takeAck()
			if framed {
				// The frame made it out before the shell went away.
				s.release(sh)
				s.sh = nil
				return finish(), nil, true
			}
			if !acked {
				ack.flush(out)
			} else {
				fr.flush(out)
			}
			res, err := s.shellEnded(sh, broken)
			return res, err, acked
		case <-timeout:
			s.stop(sh, feed)
			return Result{ExitCode: 124, Cwd: s.cwd, TimedOut: true}, nil, true
		case <-bgTimeout:
			res := handoff()
			res.TimedOut = true
			return res, nil, true
		case <-req.Detach:
			return handoff(), nil, true
		case <-ctx.Done():
			s.stop(sh, feed)
			return Result{ExitCode: 130, Cwd: s.cwd, Interrupted: true}, nil, true
		case <-s.abort:
			s.stop(sh, feed)
			return Result{ExitCode: 130, Cwd: s.cwd, Interrupted: true}, nil, true
		}
	}
}

// keepSnapshot stores the exported variables and defined names reported
// by the shell after a state-changing command. The session's own mark is
// left out: a restored shell keeps the one it was started with, and
// background jobs carry their own.
func (s *Session) keepSnapshot(snap string) {
	s.ifs, snap, s.ifsKnown = snapIFS(snap)
	exports, rest, _ := strings.Cut(snap, "\x01")
	names, defs, _ := strings.Cut(rest, "\x01")
	exports = treeLine.ReplaceAllString(exports, "")
	s.exports = strings.TrimRight(exports, "\n")
	s.names = make(map[string]bool)
	for _, n := range strings.Fields(names) {
		if !strings.HasPrefix(n, "__berth_") {
			s.names[n] = true
		}
	}
	s.nameList = make([]string, 0, len(s.names))
	for n := range s.names {
		s.nameList = append(s.nameList, n)
	}
	sort.Strings(s.nameList)
	s.defs = userDefinitions(defs)
}

// userDefinitions returns the definitions of declare -f and alias -p
// output that are the user's (berth's __berth_ helpers left out), or ""
// when the text does not parse.
func userDefinitions(defs string) string {
	sc := shparse.New(defs)
	if sc.Err != nil {
		return ""
	}
	var b strings.Builder
	for _, st := range sc.File.Stmts {
		if fd, ok := st.Cmd.(*syntax.FuncDecl); ok && fd.Name != nil && strings.HasPrefix(fd.Name.Value, "__berth_") {
			continue
		}
		from, to := int(st.Pos().Offset()), int(st.End().Offset())
		if from < 0 || from > to || to > len(defs) {
			return ""
		}
		b.WriteString(defs[from:to])
		b.WriteByte('\n')
	}
	return b.String()
}

// stdinInline is the largest stdin sent inline through the session; more
// goes through a helper process (see putFile).
const stdinInline = 16 << 10

// drainWindow bounds how long output is still collected after the shell
// exited: a descendant that keeps the stream open must not hang the call.
const drainWindow = 200 * time.Millisecond

// shellEnded finishes a command whose shell exited (exit N, exec, set -e,
// a fatal signal) once its output was drained. When the backend cannot tell
// how the shell ended (the connection to it was lost), the command's fate
// is unknown: that is an error wrapping ErrShellLost, and the next command
// starts a fresh shell with state restored.
func (s *Session) shellEnded(sh *shell, broken error) (Result, error) {
	s.release(sh)
	s.sh = nil
	// A status the backend could not learn, or an output stream that broke
	// rather than ended (a dropped connection, even when the shell's death
	// was reported just before), means the shell was lost, not that the
	// command chose to end it.
	if lost := errors.Join(sh.err, broken); lost != nil {
		return Result{ExitCode: -1, Cwd: s.cwd, ShellExited: true},
			fmt.Errorf("%w on %s while the command ran (its outcome is unknown; the next command starts a new shell with cwd and exported variables restored): %w", ErrShellLost, s.be.Name(), lost)
	}
	return Result{ExitCode: sh.code, Cwd: s.cwd, ShellExited: true}, nil
}

// drain feeds what is left of the output after the shell exited, for at
// most drainWindow, until feed reports the frame. It reports how the output
// ended when it did (nil for a clean EOF or when it did not end in time).
func (s *Session) drain(sh *shell, feed func([]byte) bool) (broken error) {
	t := time.NewTimer(drainWindow)
	defer t.Stop()
	for {
		select {
		case chunk, ok := <-sh.chunks:
			if !ok {
				if sh.rerr != nil && !errors.Is(sh.rerr, io.EOF) {
					return sh.rerr
				}
				return nil
			}
			done := feed(*chunk)
			recycle(chunk)
			if done {
				return nil
			}
		case <-t.C:
			return nil
		}
	}
}

// stop kills the running command's tree and the shell, keeping what it
// printed. The next command starts a fresh shell with state restored.
func (s *Session) stop(sh *shell, feed func([]byte) bool) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Grace+10*time.Second)
	defer cancel()
	s.killTree(ctx, sh)
	select {
	case <-sh.done:
	case <-time.After(time.Second):
		s.log.Warn("session: shell still running after kill", "backend", s.be.Name(), "pid", sh.pid)
	}
	s.drain(sh, feed)
	s.release(sh)
	s.sh = nil
}

// killTree runs the kill script against the shell's tree and everything
// that carries the session's mark, and waits for it. A shell that has
// exited is not signalled by pid: only the mark finds what it left.
func (s *Session) killTree(ctx context.Context, sh *shell) {
	pid, _ := strconv.Atoi(sh.pid)
	if sh.exited() {
		pid = 0
	}
	if err := s.kill(ctx, pid, sh.start, s.mark); err != nil {
		s.log.Warn("session: kill shell tree", "backend", s.be.Name(), "err", err)
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
