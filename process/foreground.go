package process

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/a55dbaac/berth/output"
	"github.com/a55dbaac/berth/terminal"
)

// StatusForeground is the status list shows for a foreground terminal call
// that is still running: the process tool's detach action moves it to the
// background under the same session_id.
const StatusForeground = "foreground"

// Foreground is a foreground terminal call in progress, registered so that
// list shows it and detach can move it to the background.
type Foreground struct {
	// ID is the call's id; it becomes the background process's session_id
	// if the command is moved.
	ID      string
	Key     string
	Started time.Time
	cwd     string
	shown   string

	detach  chan struct{}
	once    sync.Once
	adopted chan struct{} // closed when the call ended, moved or not
	moved   bool
}

// Call returns the terminal.Call that lets the environment move the
// command (the id, and the channel detach closes).
func (f *Foreground) Call() terminal.Call { return terminal.Call{ID: f.ID, Detach: f.detach} }

// Detach asks for the command to be moved to the background now.
func (f *Foreground) Detach() { f.once.Do(func() { close(f.detach) }) }

// BeginForeground registers a foreground call of key about to run command
// in cwd. End must be called when the call returns.
func (r *Registry) BeginForeground(key, command, cwd string) *Foreground {
	f := &Foreground{ID: newID(), Key: key, Started: r.now(), cwd: cwd,
		shown:  output.FirstChars(output.RedactCommand(command), commandInList),
		detach: make(chan struct{}), adopted: make(chan struct{})}
	r.mu.Lock()
	if r.fg == nil {
		r.fg = map[string]*Foreground{}
	}
	r.fg[f.ID] = f
	r.mu.Unlock()
	return f
}

// End unregisters a foreground call once it returned. When res says the
// command was moved to the background, it is adopted first (under the
// call's id), so there is no moment when the id names nothing.
func (r *Registry) End(f *Foreground, env *terminal.Environment, command string, res terminal.Result) {
	if res.Moved != nil {
		r.Adopt(env, f.Key, f.ID, command, res.Moved)
		f.moved = true
	}
	r.mu.Lock()
	delete(r.fg, f.ID)
	r.mu.Unlock()
	close(f.adopted)
}

// findForeground resolves id among key's running foreground calls, like
// Find.
func (r *Registry) findForeground(key, id string) *Foreground {
	r.mu.Lock()
	defer r.mu.Unlock()
	want := strings.TrimPrefix(strings.TrimSpace(id), "proc_")
	if f, ok := r.fg["proc_"+want]; ok && f.Key == key {
		return f
	}
	if len(want) < 4 {
		return nil
	}
	var match *Foreground
	for fid, f := range r.fg {
		if f.Key == key && strings.HasPrefix(strings.TrimPrefix(fid, "proc_"), want) {
			if match != nil {
				return nil
			}
			match = f
		}
	}
	return match
}

// foregrounds returns key's running foreground calls (all when key is "").
func (r *Registry) foregrounds(key string) []*Foreground {
	r.mu.Lock()
	defer r.mu.Unlock()
	var fs []*Foreground
	for _, f := range r.fg {
		if key == "" || f.Key == key {
			fs = append(fs, f)
		}
	}
	return fs
}

// detachWait bounds how long the detach action waits for the command to
// be handed over.
const detachWait = 30 * time.Second

// detach moves a foreground call to the background and waits until it is
// tracked.
func (r *Registry) detach(ctx context.Context, key, id string) Result {
	f := r.findForeground(key, id)
	if f == nil {
		if p, err := r.Find(key, id); err == nil {
			return errResult("error", fmt.Sprintf("process %s already runs in the background; detach applies to a foreground command (status %q in list)", p.ID, StatusForeground))
		}
		return errResult("not_found", fmt.Sprintf("No foreground command with ID %q (list shows running terminal calls with status %q)", id, StatusForeground))
	}
	f.Detach()
	t := time.NewTimer(detachWait)
	defer t.Stop()
	select {
	case <-f.adopted:
	case <-t.C:
		return Result{"session_id": f.ID, "status": "detaching", "error": "the command did not hand over yet; poll the session_id shortly"}
	case <-ctx.Done():
		return Result{"session_id": f.ID, "status": "interrupted"}
	}
	if !f.moved {
		// It ended (or was stopped) before it could be moved: its result
		// went to the terminal call.
		return errResult("not_found", fmt.Sprintf("the foreground command %s ended before it could be moved to the background; its result went to its terminal call", f.ID))
	}
	p, err := r.Find(key, f.ID)
	if err != nil {
		return errResult("not_found", err.Error())
	}
	status, code, _ := p.state(r.now())
	res := Result{"session_id": p.ID, "status": "detached", "process_status": status, "pid": pidValue(p.PID),
		"output_preview": p.Output(previewPoll)}
	if status == Exited {
		res["exit_code"] = code
	}
	return res
}

// Adopt tracks a foreground command that was moved to the background
// (terminal.Result.Moved) as process id of key: its log starts with the
// output it printed before the move and goes on with what it prints now,
// cleaned like any background process's; kill stops its whole tree; it
// takes no input (its stdin was the foreground command's, /dev/null or the
// request's stdin_data). The command already runs, so it is tracked even
// past MaxTracked.
func (r *Registry) Adopt(env *terminal.Environment, key, id, command string, mv *terminal.Moved) *Proc {
	h := mv.Handoff
	p := &Proc{
		ID: id, Key: key, Command: command, Cwd: mv.Cwd, PID: h.PID,
		Started: r.now(), env: env, done: make(chan struct{}), foreground: true,
		out: output.NewRolling(BufferChars), shown: output.FirstChars(output.RedactCommand(command), commandInList),
	}
	p.out.Write(mv.Before)
	p.kill = h.Kill
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		io.Copy(p.out, h.Output)
		p.out.Close()
	}()
	go func() {
		code, err := h.ExitCode()
		if err != nil {
			code = -1
		}
		<-outDone // Output reaches EOF before Done is closed
		p.mu.Lock()
		p.exited, p.code, p.ended = true, code, r.now()
		p.mu.Unlock()
		close(p.done)
	}()
	r.mu.Lock()
	r.pruneLocked(1)
	r.procs[p.ID] = p
	r.mu.Unlock()
	return p
}
