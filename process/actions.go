package process

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Request is a process tool call, with the contract's field names.
type Request struct {
	Action    string `json:"action"`
	SessionID string `json:"session_id,omitempty"`
	Data      string `json:"data,omitempty"`
	Timeout   int    `json:"timeout,omitempty"` // wait, seconds
	Offset    *int   `json:"offset,omitempty"`  // log: first line (0-based)
	Limit     *int   `json:"limit,omitempty"`   // log: number of lines
}

// Actions lists the accepted actions.
var Actions = []string{"list", "poll", "log", "wait", "kill", "write", "submit", "close", "detach"}

// Result is a process tool answer: a JSON object whose fields depend on
// the action, as the contract lists them.
type Result map[string]any

func errResult(status, msg string) Result {
	return Result{"status": status, "error": msg}
}

// Do answers one process tool call from the environment key. list shows
// key's processes ("" lists every key's: an operator's view, such as
// /ps); every other action acts only on a process key started, and
// answers not_found for any other, so one MCP session can neither see nor
// touch another's jobs.
func (r *Registry) Do(ctx context.Context, key string, req Request) Result {
	action := strings.ToLower(strings.TrimSpace(req.Action))
	if action == "list" {
		return r.list(key)
	}
	known := false
	for _, a := range Actions {
		known = known || a == action
	}
	if !known {
		return errResult("error", fmt.Sprintf("unknown action %q: use one of %s", req.Action, strings.Join(Actions, ", ")))
	}
	if req.SessionID == "" {
		return errResult("error", fmt.Sprintf("action %q needs a session_id (from the background start or from list)", action))
	}
	if action == "detach" {
		return r.detach(ctx, key, req.SessionID)
	}
	p, err := r.Find(key, req.SessionID)
	if err != nil {
		if f := r.findForeground(key, req.SessionID); f != nil {
			return errResult("error", fmt.Sprintf("%s is a foreground command still running in a terminal call; use action detach to move it to the background, then %s works on it", f.ID, action))
		}
		return errResult("not_found", strings.TrimPrefix(err.Error(), ErrNotFound.Error()+": "))
	}
	p.env.Touch()
	switch action {
	case "poll":
		status, code, up := p.state(r.now())
		res := Result{"session_id": p.ID, "status": status, "pid": pidValue(p.PID), "uptime_seconds": up,
			"output_preview": p.Output(previewPoll)}
		if status == Exited {
			res["exit_code"] = code
		}
		return res
	case "log":
		return r.log(p, req)
	case "wait":
		return r.wait(ctx, p, req)
	case "kill":
		return r.kill(ctx, p)
	case "write", "submit", "close":
		return r.stdin(p, action, req.Data)
	}
	return errResult("error", "unreachable")
}

func pidValue(pid int) any {
	if pid <= 0 {
		return nil
	}
	return pid
}

func (r *Registry) list(key string) Result {
	now := r.now()
	items := []map[string]any{}
	for _, f := range r.foregrounds(key) {
		items = append(items, map[string]any{
			"session_id": f.ID, "command": f.shown, "cwd": f.cwd, "pid": nil,
			"started_at": f.Started.UTC().Format(time.RFC3339), "uptime_seconds": now.Sub(f.Started).Round(time.Millisecond).Seconds(),
			"status": StatusForeground, "output_preview": "",
		})
	}
	for _, p := range r.List(key) {
		status, code, up := p.state(now)
		it := map[string]any{
			"session_id": p.ID, "command": p.shown, "cwd": p.Cwd, "pid": pidValue(p.PID),
			"started_at": p.Started.UTC().Format(time.RFC3339), "uptime_seconds": up,
			"status": status, "output_preview": p.Output(previewList),
		}
		if status == Exited {
			it["exit_code"] = code
		}
		items = append(items, it)
	}
	return Result{"processes": items}
}

func (r *Registry) log(p *Proc, req Request) Result {
	text := p.Output(BufferChars)
	lines := strings.Split(text, "\n")
	if text == "" {
		lines = nil
	}
	total := len(lines)
	limit := defaultLog
	if req.Limit != nil {
		if *req.Limit < 1 {
			return errResult("error", fmt.Sprintf("limit %d: must be at least 1", *req.Limit))
		}
		limit = *req.Limit
	}
	start := total - limit
	if req.Offset != nil {
		if *req.Offset < 0 {
			return errResult("error", fmt.Sprintf("offset %d: must be 0 or more", *req.Offset))
		}
		start = *req.Offset
	}
	start = max(0, min(start, total))
	end := min(total, start+limit)
	status, code, _ := p.state(r.now())
	res := Result{"session_id": p.ID, "status": status, "output": strings.Join(lines[start:end], "\n"),
		"total_lines": total, "offset": start, "limit": limit}
	if status == Exited {
		res["exit_code"] = code
	}
	return res
}

func (r *Registry) wait(ctx context.Context, p *Proc, req Request) Result {
	d := r.MaxWait
	if req.Timeout > 0 && time.Duration(req.Timeout)*time.Second < d {
		d = time.Duration(req.Timeout) * time.Second
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		_, code, up := p.state(r.now())
		return Result{"session_id": p.ID, "status": Exited, "exit_code": code, "uptime_seconds": up,
			"output": p.Output(previewPoll)}
	case <-t.C:
		return Result{"session_id": p.ID, "status": "timeout", "process_running": true,
			"timeout_seconds": d.Seconds(), "output_preview": p.Output(previewPoll)}
	case <-ctx.Done():
		return Result{"session_id": p.ID, "status": "interrupted", "process_running": true}
	}
}

func (r *Registry) kill(ctx context.Context, p *Proc) Result {
	select {
	case <-p.done:
		_, code, _ := p.state(r.now())
		return Result{"session_id": p.ID, "status": "already_exited", "exit_code": code}
	default:
	}
	if err := p.kill(ctx); err != nil {
		return errResult("error", err.Error())
	}
	select {
	case <-p.done:
	case <-time.After(2 * time.Second):
	}
	res := Result{"session_id": p.ID, "status": "killed"}
	if _, code, _ := p.state(r.now()); code != 0 {
		res["exit_code"] = code
	}
	return res
}

// eot is what ends input on a terminal (Ctrl-D); closing a pty master
// would hang the process up instead.
const eot = "\x04"

func (r *Registry) stdin(p *Proc, action, data string) Result {
	select {
	case <-p.done:
		return errResult("error", fmt.Sprintf("process %s has exited; it reads no more input", p.ID))
	default:
	}
	if p.foreground {
		return errResult("error", fmt.Sprintf("process %s was a foreground command moved to the background; it reads no input (its stdin was /dev/null or the call's stdin_data)", p.ID))
	}
	p.mu.Lock()
	closed := p.stdinEOF
	p.mu.Unlock()
	if closed {
		return errResult("error", fmt.Sprintf("stdin of %s was already closed", p.ID))
	}
	var err error
	n := 0
	switch action {
	case "write":
		n, err = p.det.Write([]byte(data))
	case "submit":
		nl := "\n"
		if p.TTY {
			nl = "\r"
		}
		n, err = p.det.Write([]byte(data + nl))
	case "close":
		if p.TTY {
			_, err = p.det.Write([]byte(eot))
		} else {
			err = p.det.Close()
		}
		p.mu.Lock()
		p.stdinEOF = true
		p.mu.Unlock()
	}
	if err != nil {
		return errResult("error", fmt.Sprintf("%s to %s: %v", action, p.ID, err))
	}
	res := Result{"session_id": p.ID, "status": "ok"}
	if action != "close" {
		res["bytes_written"] = n
	}
	return res
}
