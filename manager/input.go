package manager

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/a55dbaac/berth/internal/shparse"
	"github.com/a55dbaac/berth/process"
	"github.com/a55dbaac/berth/terminal"
)

// maxInputLine bounds the unfinished line of input kept per process for
// the approval check: a longer line cannot be checked and is refused.
const maxInputLine = 64 << 10

// inputLines keeps, per background process, the line of input written to
// it and not yet ended by a newline. Input to a process is checked like a
// command (a background bash reading its stdin runs what it is sent), one
// complete line at a time, so a command split across several writes is
// seen whole when its newline arrives, before the newline is sent.
type inputLines struct {
	mu      sync.Mutex
	pending map[*process.Proc]string
}

// gateInput checks the input a write or submit would send to a process.
// It returns nil when the input may be sent, else the result to answer
// with. Input that ends no line is let through (it runs nothing yet) and
// kept, to be checked with the rest of its line.
func (m *Manager) gateInput(ctx context.Context, key string, req process.Request) process.Result {
	p, err := m.procs.Find(key, req.SessionID)
	if err != nil {
		return nil // Do answers not_found
	}
	data := req.Data
	switch req.Action {
	case "submit":
		data += "\n"
	case "close":
		if p.TTY {
			return nil // end of transmission on a terminal runs nothing
		}
		data = "\n" // a shell runs an unfinished last line at end of input
	}
	m.input.mu.Lock()
	if m.input.pending == nil {
		m.input.pending = map[*process.Proc]string{}
	}
	for q := range m.input.pending { // processes that ended need nothing kept
		select {
		case <-q.Done():
			delete(m.input.pending, q)
		default:
		}
	}
	text := m.input.pending[p] + data
	m.input.mu.Unlock()

	// A terminal discards the line typed so far on ^C and ^U.
	if p.TTY {
		if i := strings.LastIndexAny(text, "\x03\x15"); i >= 0 {
			text = text[i+1:]
		}
	}
	end := strings.LastIndexAny(text, "\r\n")
	rest := text[end+1:]
	if len(rest) > maxInputLine {
		return process.Result{"status": "error", "error": fmt.Sprintf(
			"%s to %s refused: an unfinished line of input longer than %d bytes cannot be checked for dangerous commands; send it in lines",
			req.Action, p.ID, maxInputLine)}
	}
	if end >= 0 {
		if err := shparse.Check(text[:end+1]); err != nil {
			return process.Result{"status": "error", "session_id": p.ID, "error": fmt.Sprintf("%s to %s refused: %v", req.Action, p.ID, err)}
		}
		c := m.approvalContext(m.liveEnv(key), p.Cwd)
		if d := m.gate.Command(ctx, key, text[:end+1], c); !d.Allowed() {
			return process.Result{"status": "blocked", "session_id": p.ID, "error": d.Err().Error(), "approval": d}
		}
	}
	m.input.mu.Lock()
	m.input.pending[p] = rest
	if req.Action == "close" || rest == "" {
		delete(m.input.pending, p)
	}
	m.input.mu.Unlock()
	return nil
}

// liveEnv returns key's environment if it exists and is ready, else nil.
func (m *Manager) liveEnv(key string) *terminal.Environment {
	m.mu.Lock()
	e := m.envs[key]
	m.mu.Unlock()
	if e == nil {
		return nil
	}
	return e.live()
}
