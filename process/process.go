// Package process tracks background processes started by the terminal tool
// (`background: true`) and answers the process tool's actions: list, poll,
// log, wait, kill, write, submit and close.
//
// It is event-driven: output is appended as it arrives and wait returns the
// moment the process exits; nothing polls on a timer. A process counts as
// exited when the process itself ends, even if a child it left behind still
// holds its output open.
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
	"unicode/utf8"

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
	Key     string // environment key
	Command string
	Cwd     string
	PID     int
	TTY     bool
	Started time.Time

	env  *terminal.Env
	det  io.WriteCloser
	kill func(ctx context.Context) error

	mu       sync.Mutex
	buf      []byte // raw output, at most BufferChars*4 bytes, trimmed to whole runes
	dropped  int64  // bytes dropped from the front
	exited   bool
	code     int
	ended    time.Time
	killed   bool
	done     chan struct{}
	stdinEOF bool
}

// Registry holds the background processes of a berth process.
type Registry struct {
	mu       sync.Mutex
	procs    map[string]*Proc
	starting int // slots reserved by starts in progress
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
}

// StartError is the answer to a background request that could not start:
// the error's text in "error", exit code -1, no session id.
func StartError(err error) StartResult {
	msg := err.Error()
	return StartResult{ExitCode: -1, Error: &msg}
}

// Start runs req.Command in the background in env (the environment of
// key) and tracks it.
func (r *Registry) Start(ctx context.Context, env *terminal.Env, key string, req terminal.Request) StartResult {
	if err := terminal.Validate(req); err != nil {
		return StartError(err)
	}
	// Reserve a slot before the (slow) start so concurrent starts cannot
	// overshoot the limit; the slot becomes the process or is given back.
	r.mu.Lock()
	r.pruneLocked()
	if len(r.procs)+r.starting >= MaxTracked {
		r.mu.Unlock()
		return StartError(fmt.Errorf("%d background processes are running, the most berth tracks; kill or wait for one first", MaxTracked))
	}
	r.starting++
	r.mu.Unlock()
	reserved := true
	defer func() {
		if reserved {
			r.mu.Lock()
			r.starting--
			r.mu.Unlock()
		}
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
	}
	pid := det.PID
	p.kill = func(ctx context.Context) error { return sess.KillTree(ctx, pid) }
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		b := make([]byte, 32<<10)
		for {
			n, err := det.Output.Read(b)
			if n > 0 {
				p.appendOutput(b[:n])
			}
			if err != nil {
				return
			}
		}
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
		}
		// Give output already in flight a moment, but never wait for a
		// descendant that keeps the stream open.
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

func (p *Proc) appendOutput(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	if max := BufferChars * 2; len(p.buf) > max {
		cut := len(p.buf) - max
		for cut < len(p.buf) && !utf8.RuneStart(p.buf[cut]) {
			cut++
		}
		p.dropped += int64(cut)
		p.buf = append(p.buf[:0], p.buf[cut:]...)
	}
}

// text returns the cleaned output kept for the process, the last
// BufferChars characters.
func (p *Proc) text() string {
	p.mu.Lock()
	raw := string(p.buf)
	p.mu.Unlock()
	s := output.Clean(raw)
	if n := utf8.RuneCountInString(s); n > BufferChars {
		s = string([]rune(s)[n-BufferChars:])
	}
	return s
}

func tail(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[len(r)-n:])
}

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
// and the oldest finished ones when over MaxTracked.
func (r *Registry) pruneLocked() {
	now := r.now()
	var finished []*Proc
	for id, p := range r.procs {
		p.mu.Lock()
		ex, ended := p.exited, p.ended
		p.mu.Unlock()
		if ex && now.Sub(ended) > KeepFinished {
			delete(r.procs, id)
			continue
		}
		if ex {
			finished = append(finished, p)
		}
	}
	sort.Slice(finished, func(i, j int) bool { return finished[i].ended.Before(finished[j].ended) })
	for len(r.procs)+r.starting >= MaxTracked && len(finished) > 0 {
		delete(r.procs, finished[0].ID)
		finished = finished[1:]
	}
}

// Running reports how many processes of key (all keys when key is "")
// are still running.
func (r *Registry) Running(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
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

// Find resolves a session id: the full id, or a unique prefix of at least
// 4 hex characters, with or without "proc_".
func (r *Registry) Find(id string) (*Proc, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pruneLocked()
	want := strings.TrimPrefix(strings.TrimSpace(id), "proc_")
	if p, ok := r.procs["proc_"+want]; ok {
		return p, nil
	}
	if len(want) < 4 {
		return nil, fmt.Errorf("%w: No process with ID %q (give at least 4 characters of the id)", ErrNotFound, id)
	}
	var match *Proc
	for pid, p := range r.procs {
		if strings.HasPrefix(strings.TrimPrefix(pid, "proc_"), want) {
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
	r.pruneLocked()
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
			p.mu.Lock()
			p.killed = true
			p.mu.Unlock()
			p.kill(ctx)
		}()
	}
	wg.Wait()
}
