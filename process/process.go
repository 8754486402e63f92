// Package process tracks background processes started by the terminal tool
// (`background: true`) and answers the process tool's actions: list, poll,
// log, wait, kill, write, submit and close.
//
// It is event-driven: output is cleaned (UTF-8 repair, escape stripping,
// redaction: the foreground pipeline's stages) and kept as it arrives, and
// wait returns the moment the process exits; nothing polls on a timer. A
// process counts as exited when the process itself ends, even if a child it
// left behind still holds its output open.
//
// A process belongs to the environment key (for MCP, the session) that
// started it: only list may show other keys' processes, and only when
// asked for all of them; every other action on another key's process
// answers not_found.
package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/a55dbaac/berth/approval"
	"github.com/a55dbaac/berth/internal/randhex"
	"github.com/a55dbaac/berth/output"
	"github.com/a55dbaac/berth/terminal"
)

// Limits of the contract.
const (
	BufferChars   = 200_000          // rolling output buffer per process
	MaxTracked    = 64               // processes tracked at once
	KeepFinished  = 30 * time.Minute // how long an exited process stays listed
	previewList   = 200
	previewPoll   = 1000
	defaultLog    = 200
	commandInList = 200
)

// Status values.
const (
	Running = "running"
	Exited  = "exited"
)

// Proc is one tracked background process.
type Proc struct {
	ID      string
	Key     string // environment key that started it, and the only one that may act on it
	Command string // as given; list shows it redacted
	Cwd     string
	PID     int
	TTY     bool
	Started time.Time

	env  *terminal.Environment
	det  io.WriteCloser
	kill func(ctx context.Context) error
	out  *output.Rolling // cleaned output, the last BufferChars characters
	// shown is the command as list shows it: secrets redacted, cut to
	// commandInList characters.
	shown string

	// foreground says the process was a foreground command moved to the
	// background: it reads no input.
	foreground bool

	mu       sync.Mutex
	exited   bool
	code     int
	ended    time.Time
	done     chan struct{}
	stdinEOF bool
}

// Registry holds the background processes of a berth process.
type Registry struct {
	mu       sync.Mutex
	procs    map[string]*Proc
	starting int // slots reserved by starts in progress
	// startingIn counts the starts in progress by key: a process being
	// started is work in progress, so the idle sweep must spare its
	// environment before the process is tracked.
	startingIn map[string]int
	// fg holds the foreground terminal calls in progress, by id.
	fg map[string]*Foreground
	// MaxWait clamps wait timeouts (terminal.timeout).
	MaxWait time.Duration
	now     func() time.Time
}

// NewRegistry returns an empty registry. maxWait clamps the wait action's
// timeout (the contract clamps it to terminal.timeout).
func NewRegistry(maxWait time.Duration) *Registry {
	if maxWait <= 0 {
		maxWait = 180 * time.Second
	}
	return &Registry{procs: map[string]*Proc{}, MaxWait: maxWait, now: time.Now}
}

func newID() string { return "proc_" + randhex.String(6) }

// StartResult is the terminal tool's answer to a background request.
type StartResult struct {
	Output    string  `json:"output"`
	SessionID string  `json:"session_id,omitempty"`
	PID       *int    `json:"pid"`
	ExitCode  int     `json:"exit_code"`
	Error     *string `json:"error"`
	// Approval: what the approval check decided, as in terminal.Result.
	Approval *approval.Decision `json:"approval,omitempty"`
	// Err is the Go error behind Error (errors.Is/As for Go callers); it
	// is not part of the JSON contract.
	Err error `json:"-"`
}

// StartError is the answer to a background request that could not start:
// the error's text in "error", exit code -1, no session id.
func StartError(err error) StartResult {
	msg := err.Error()
	return StartResult{ExitCode: -1, Error: &msg, Err: err}
}

// Start runs req.Command in the background in env (the environment of
// key) and tracks it.
func (r *Registry) Start(ctx context.Context, env *terminal.Environment, key string, req terminal.Request) StartResult {
	if err := terminal.Validate(req); err != nil {
		return StartError(err)
	}
	// Reserve a slot before the (slow) start so concurrent starts cannot
	// overshoot the limit; the slot becomes the process or is given back.
	r.mu.Lock()
	r.pruneLocked(1)
	if len(r.procs)+r.starting >= MaxTracked {
		r.mu.Unlock()
		return StartError(fmt.Errorf("%d background processes are running, the most berth tracks; kill or wait for one first", MaxTracked))
	}
	r.starting++
	if r.startingIn == nil {
		r.startingIn = map[string]int{}
	}
	r.startingIn[key]++
	r.mu.Unlock()
	reserved := true
	defer func() {
		r.mu.Lock()
		if r.startingIn[key]--; r.startingIn[key] == 0 {
			delete(r.startingIn, key)
		}
		if reserved {
			r.starting--
		}
		r.mu.Unlock()
	}()

	sess := env.Session()
	det, err := sess.StartDetached(ctx, req.Command, req.Workdir, req.PTY)
	if err != nil {
		return StartError(err)
	}
	cwd := req.Workdir
	if cwd == "" {
		cwd = sess.Cwd()
	}
	p := &Proc{
		ID: newID(), Key: key, Command: req.Command, Cwd: cwd, PID: det.PID, TTY: req.PTY,
		Started: r.now(), env: env, det: det.Proc.Stdin(), done: make(chan struct{}),
		out: output.NewRolling(BufferChars), shown: output.FirstChars(output.RedactCommand(req.Command), commandInList),
	}
	pid := det.PID
	p.kill = func(ctx context.Context) error { return sess.KillTree(ctx, pid) }
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		// Cleaned on arrival; Close flushes the unfinished line.
		io.Copy(p.out, det.Output)
		p.out.Close()
	}()
	go func() {
		waited := make(chan int, 1)
		go func() {
			code, err := det.Proc.Wait()
			if err != nil {
				code = -1
			}
			waited <- code
		}()
		var code int
		select {
		case code = <-det.Exited:
		case code = <-waited:
			// The backend saw the end before the exit frame came through
			// the output (docker reports an exec's end while the stream
			// still delivers what it printed): the rest of the output is
			// on its way, and ending here cut it short. The stream now
			// ends by itself (the backend's after-exit bound), so wait for
			// the frame or that end, not for a timer.
			select {
			case code = <-det.Exited:
			case <-outDone:
			}
		}
		// Everything the command printed came before its frame and is in
		// p.out (the frame is reported after it), or the stream has ended.
		// Give what its descendants print a moment, but never wait for one
		// that keeps the stream open.
		select {
		case <-outDone:
		case <-time.After(100 * time.Millisecond):
		}
		p.mu.Lock()
		p.exited, p.code, p.ended = true, code, r.now()
		p.mu.Unlock()
		close(p.done)
		det.Proc.Close()
	}()
	r.mu.Lock()
	r.procs[p.ID] = p
	r.starting--
	reserved = false
	r.mu.Unlock()
	var pidp *int
	if pid > 0 {
		pidp = &pid
	}
	return StartResult{Output: "Background process started", SessionID: p.ID, PID: pidp, ExitCode: 0}
}

// Output returns the last n characters of the process's cleaned output
// (n is capped at BufferChars).
func (p *Proc) Output(n int) string { return p.out.Last(n) }

// state returns status, exit code and uptime.
func (p *Proc) state(now time.Time) (status string, code int, uptime float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	end := now
	if p.exited {
		end = p.ended
		status, code = Exited, p.code
	} else {
		status = Running
	}
	return status, code, end.Sub(p.Started).Round(time.Millisecond).Seconds()
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// pruneLocked forgets processes that exited more than KeepFinished ago,
// then, while fewer than room slots are free under MaxTracked, the oldest
// finished ones. Start asks for room 1 (the slot it needs); a read asks
// for none, so it never costs a finished process its place.
func (r *Registry) pruneLocked(room int) {
	now := r.now()
	type fin struct {
		id    string
		ended time.Time
	}
	var finished []fin
	for id, p := range r.procs {
		p.mu.Lock()
		ex, ended := p.exited, p.ended
		p.mu.Unlock()
		if ex && now.Sub(ended) > KeepFinished {
			delete(r.procs, id)
			continue
		}
		if ex {
			finished = append(finished, fin{id, ended})
		}
	}
	sort.Slice(finished, func(i, j int) bool { return finished[i].ended.Before(finished[j].ended) })
	for len(r.procs)+r.starting+room > MaxTracked && len(finished) > 0 {
		delete(r.procs, finished[0].id)
		finished = finished[1:]
	}
}

// Running reports how many processes of key (all keys when key is "")
// are still running.
func (r *Registry) Running(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.startingIn[key]
	if key == "" {
		n = r.starting
	}
	for _, p := range r.procs {
		if key != "" && p.Key != key {
			continue
		}
		select {
		case <-p.done:
		default:
			n++
		}
	}
	return n
}

// ErrNotFound is returned by Find for unknown or ambiguous ids.
var ErrNotFound = errors.New("process: not found")

// Find resolves a session id among the processes of key: the full id, or
// a prefix of at least 4 hex characters unique among them, with or
// without "proc_". Another key's process is not found, as if it did not
// exist.
func (r *Registry) Find(key, id string) (*Proc, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pruneLocked(0)
	want := strings.TrimPrefix(strings.TrimSpace(id), "proc_")
	if p, ok := r.procs["proc_"+want]; ok && p.Key == key {
		return p, nil
	}
	if len(want) < 4 {
		return nil, fmt.Errorf("%w: No process with ID %q (give at least 4 characters of the id)", ErrNotFound, id)
	}
	var match *Proc
	for pid, p := range r.procs {
		if p.Key == key && strings.HasPrefix(strings.TrimPrefix(pid, "proc_"), want) {
			if match != nil {
				return nil, fmt.Errorf("%w: ID prefix %q matches several processes; give more characters", ErrNotFound, id)
			}
			match = p
		}
	}
	if match == nil {
		return nil, fmt.Errorf("%w: No process with ID %q", ErrNotFound, id)
	}
	return match, nil
}

// List returns the tracked processes, oldest first (of key, or all when
// key is "").
func (r *Registry) List(key string) []*Proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pruneLocked(0)
	var ps []*Proc
	for _, p := range r.procs {
		if key == "" || p.Key == key {
			ps = append(ps, p)
		}
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Started.Before(ps[j].Started) })
	return ps
}

// KillAll stops every running process of key (all when key is "") and
// waits for the kills to finish.
func (r *Registry) KillAll(ctx context.Context, key string) {
	var wg sync.WaitGroup
	for _, p := range r.List(key) {
		select {
		case <-p.done:
			continue
		default:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.kill(ctx)
		}()
	}
	wg.Wait()
}
