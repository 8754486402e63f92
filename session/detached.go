package session

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/shellword"
)

// Detached is a process started beside the session's shell (a background
// job of the process tool): same environment, same cwd and exported
// variables as the session at the moment it started, but its own process
// with its own stdin and output.
type Detached struct {
	Proc backend.Process
	// PID is the process's pid inside the target (0 when unknown).
	PID int
	// Output is the process's output, after the start handshake, without
	// the exit frame.
	Output io.Reader
	// Exited receives the command's exit status as soon as the wrapper
	// reports it in its output (once the reader of Output has taken all
	// the command printed before it), which can be well before the backend
	// reports the process's end (docker holds an exec's exit back while a
	// descendant keeps the stream open). It is never closed; a command
	// killed by a signal reports nothing here and is seen through Wait.
	Exited <-chan int

	sess *Session
	id   identity
}

// Kill stops the process and everything it started (see KillTree), after
// checking that its pid still belongs to it.
func (d *Detached) Kill(ctx context.Context) error {
	if d.PID <= 0 {
		return errors.New("session: background process has no known pid")
	}
	return d.sess.kill(ctx, d.PID, d.id.start, d.id.mark)
}

// detachedWrapper reads one line from stdin holding the printf %b encoded
// preamble (cwd, exported variables, the command), prints its own pid and
// start time on a line, and evaluates the preamble. Secrets in the preamble
// never appear in an argv. The wrapper's stdin then belongs to the command.
const detachedWrapper = `IFS= read -r __berth_l || exit 127
exec 2>&1
` + selfLine + `
eval "$(command printf '%b' "$__berth_l")"`

// selfLine prints "<pid> <start time>" of the shell that runs it.
const selfLine = `__berth_st=
if IFS= read -r __berth_s </proc/$$/stat; then __berth_s=${__berth_s##*) }; set -- $__berth_s; __berth_st=${20-}; fi
command printf '%s %s\n' "$$" "$__berth_st"`

// markArgv prefixes argv so that it starts with mark (NAME=value) in its
// environment from the first instruction on, on every backend (some cannot
// pass an environment, and a variable exported later would miss the
// shell's own forks).
func markArgv(mark string, argv ...string) []string {
	name, value, _ := strings.Cut(mark, "=")
	return append([]string{"/bin/sh", "-c", name + `=$1; export ` + name + `; shift; exec "$@"`, "berth-mark", value}, argv...)
}

// StartDetached starts command in the session's environment as a separate
// process: it runs with the session's current cwd (or workdir) and exported
// variables, in the same shell kind as the session, and with a terminal when
// tty is set. The session's own shell is not involved and stays free.
func (s *Session) StartDetached(ctx context.Context, command, workdir string, tty bool) (*Detached, error) {
	if strings.IndexByte(command, 0) >= 0 {
		return nil, errors.New("session: command contains a NUL byte, which no shell can receive")
	}
	s.mu.Lock()
	if err := s.ensure(ctx); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	cwd, exports, bash, tmp := s.cwd, s.exports, s.sh.bash, s.sh.tmp
	s.mu.Unlock()

	var pre strings.Builder
	if exports != "" {
		pre.WriteString("{\n" + exports + "\n} >/dev/null 2>&1\n")
	}
	if len(s.opts.Env) > 0 {
		lines, err := exportLines(s.opts.Env)
		if err != nil {
			return nil, err
		}
		pre.WriteString(lines)
	}
	pre.WriteString(commandEnv)
	dir := cwd
	if workdir != "" {
		dir = workdir
	}
	if dir != "" {
		pre.WriteString(cdLine(dir, false) + " || exit 1\n")
	}
	// The command runs in a subshell so that exit, exec or set -e in it
	// cannot skip the exit frame printed after it.
	n := nonce()
	pre.WriteString("( eval " + shellword.Quote(command) + " )\n__berth_s=$?\n")
	pre.WriteString("command printf '" + markerPrefix + "%s_%s\\000' " + n + " \"$__berth_s\"\nexit $__berth_s\n")

	sh := "sh"
	if bash {
		sh = "bash"
	}
	mark := TreeVar + "=" + nonce()
	var p backend.Process
	var err error
	if tty {
		p, err = s.startDetachedTTY(ctx, mark, sh, tmp, pre.String())
	} else {
		p, err = s.be.Start(ctx, backend.ProcSpec{Argv: markArgv(mark, sh, "-c", detachedWrapper, "berth-bg")})
		if err == nil {
			line := printfLine([]byte(pre.String()))
			line = line[1:len(line)-1] + "\n" // raw %b text, no shell quotes
			if _, werr := io.WriteString(p.Stdin(), line); werr != nil {
				p.Close()
				err = fmt.Errorf("send preamble: %w", werr)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("session: start background process on %s: %w", s.be.Name(), err)
	}
	br := bufio.NewReader(p.Stdout())
	pidc := make(chan string, 1)
	go func() {
		for {
			l, err := br.ReadString('\n')
			l = strings.TrimRight(l, "\r\n")
			if _, perr := strconv.Atoi(strings.Fields(l + " x")[0]); perr == nil || err != nil {
				pidc <- l
				return
			}
			// Anything before the pid line (a login banner) is skipped.
		}
	}()
	var pidLine string
	select {
	case pidLine = <-pidc:
	case <-time.After(30 * time.Second):
		p.Close()
		return nil, fmt.Errorf("session: background process on %s did not start", s.be.Name())
	case <-ctx.Done():
		p.Close()
		return nil, ctx.Err()
	}
	f := strings.Fields(pidLine)
	id := identity{mark: mark}
	var pid int
	if len(f) > 0 {
		pid, _ = strconv.Atoi(f[0])
	}
	if len(f) > 1 {
		id.start = f[1]
	}
	if pid > 0 {
		s.remember(pid, id)
	}
	pr, pw := io.Pipe()
	exited := make(chan int, 1)
	go func() {
		fr := newFramer(n, 1)
		buf := make([]byte, 32<<10)
		framed := false
		for {
			k, err := br.Read(buf)
			if k > 0 {
				if framed {
					pw.Write(buf[:k])
				} else if fr.feed(buf[:k], pw) {
					framed = true
					code, _ := strconv.Atoi(fr.got[0])
					// An empty write returns once the reader came back for
					// more, that is once it has handled all that came
					// before the frame: then the exit is reported.
					pw.Write(nil)
					exited <- code
					if len(fr.rest) > 0 {
						pw.Write(fr.rest)
					}
				}
			}
			if err != nil {
				if !framed {
					fr.flush(pw)
				}
				pw.CloseWithError(err)
				return
			}
		}
	}()
	return &Detached{Proc: p, PID: pid, Output: pr, Exited: exited, sess: s, id: id}, nil
}

// detachedTTYWrapper runs the preamble from a private file ($1) that it
// deletes at once, so nothing has to be typed into the terminal (which
// would echo it, secrets included, and cut lines at 4 KiB).
const detachedTTYWrapper = `exec 2>&1
__berth_f=$1
` + selfLine + `
. "$__berth_f"`

// startDetachedTTY writes the preamble to a 0600 file inside the target
// (content on stdin, never in argv), then starts the wrapper on a terminal
// to source it.
func (s *Session) startDetachedTTY(ctx context.Context, mark, sh, tmp, preamble string) (backend.Process, error) {
	file := tmpDir(tmp) + "/.berth-bg-" + nonce()
	if err := s.putFile(ctx, file, []byte("command rm -f \"$__berth_f\"\n"+preamble)); err != nil {
		return nil, err
	}
	return s.be.Start(ctx, backend.ProcSpec{Argv: markArgv(mark, sh, "-c", detachedTTYWrapper, "berth-bg", file), TTY: true})
}

// putFile writes data to a new private (0600) file inside the target
// through a helper process's raw stdin: nothing goes through an argv, and
// the bytes are not parsed by a shell (bash reads a piped script one byte
// at a time, so large data through the session would be slow).
func (s *Session) putFile(ctx context.Context, path string, data []byte) error {
	msg, code, err := backend.Output(ctx, s.be, backend.ProcSpec{Argv: []string{"/bin/sh", "-c", "umask 077 && cat >\"$1\"", "berth-put", path}}, bytes.NewReader(data), 4096)
	if err != nil {
		return fmt.Errorf("session: write %s on %s: %w", path, s.be.Name(), err)
	}
	if code != 0 {
		return fmt.Errorf("session: write %s on %s: helper exited with status %d: %q", path, s.be.Name(), code, msg)
	}
	return nil
}

// maxJobs bounds the identities kept for KillTree.
const maxJobs = 1024

// remember keeps the identity of a background process for KillTree.
func (s *Session) remember(pid int, id identity) {
	s.jobsMu.Lock()
	defer s.jobsMu.Unlock()
	if s.jobs == nil {
		s.jobs = make(map[int]identity)
	}
	if _, ok := s.jobs[pid]; !ok {
		s.order = append(s.order, pid)
	}
	s.jobs[pid] = id
	for len(s.order) > maxJobs {
		delete(s.jobs, s.order[0])
		s.order = s.order[1:]
	}
}

// KillTree stops a process inside the environment and everything it
// started: TERM to its process group, its descendants and (for a process
// started by StartDetached) everything carrying its mark, even what left
// the group or was reparented; KILL to what is left after the grace period,
// frozen first so nothing escapes by forking. For a process started by
// StartDetached the pid is signalled only while it still belongs to that
// process (its start time is checked); an unknown pid is signalled as is.
// It returns when the kill script has finished.
func (s *Session) KillTree(ctx context.Context, pid int) error {
	if pid <= 0 {
		return errors.New("session: no pid to kill")
	}
	s.jobsMu.Lock()
	id := s.jobs[pid]
	s.jobsMu.Unlock()
	return s.kill(ctx, pid, id.start, id.mark)
}

// kill runs the kill script in the environment: pid (0 for none) with its
// expected start time ("" for unchecked), and mark ("" for none).
func (s *Session) kill(ctx context.Context, pid int, start, mark string) error {
	if pid <= 0 && mark == "" {
		return errors.New("session: nothing to kill: no pid and no mark")
	}
	if pid < 0 {
		pid = 0
	}
	_, _, err := backend.Output(ctx, s.be, backend.ProcSpec{Argv: []string{"/bin/sh", "-c", killScript, "berth-kill", strconv.Itoa(pid), graceTenths(s.opts.Grace.Seconds()), start, mark}}, nil, 64<<10)
	if err != nil {
		return fmt.Errorf("session: kill %d on %s: %w", pid, s.be.Name(), err)
	}
	return nil
}
