package manager

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/a55dbaac/berth/approval"
	"github.com/a55dbaac/berth/internal/shparse"
	"github.com/a55dbaac/berth/process"
	"github.com/a55dbaac/berth/terminal"
)

// maxInputLine bounds the unfinished line of input kept per process for
// the approval check: a longer line cannot be checked and is refused.
const maxInputLine = 64 << 10

// maxPrelude bounds the earlier input kept per process as the prelude of
// the next check (the oldest lines are dropped first).
const maxPrelude = 64 << 10

// inputLines keeps, per background process, the input written to it and
// not yet checked: the line not yet ended by a newline, and lines that
// continue on the next one (a trailing backslash). Input to a process is
// checked like a command (a background bash reading its stdin runs what
// it is sent), one complete line at a time, so a command split across
// several writes is seen whole when its newline arrives, before the
// newline is sent; and it is checked after the lines sent before it (the
// prelude), so a function defined on one line is seen where a later line
// calls it.
type inputLines struct {
	mu    sync.Mutex
	procs map[*process.Proc]*inputState
}

// inputState is what is kept for one process.
type inputState struct {
	pending string // input not checked yet
	prelude string // the lines checked and sent before
}

// gateInput checks the input a write or submit would send to a process.
// It returns nil when the input may be sent, else the result to answer
// with. Input that ends no line (or ends a line that continues) is let
// through (it runs nothing yet) and kept, to be checked with the rest.
func (m *Manager) gateInput(ctx context.Context, key string, req process.Request, asker approval.Asker) process.Result {
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
	if m.input.procs == nil {
		m.input.procs = map[*process.Proc]*inputState{}
	}
	for q := range m.input.procs { // processes that ended need nothing kept
		select {
		case <-q.Done():
			delete(m.input.procs, q)
		default:
		}
	}
	st := m.input.procs[p]
	if st == nil {
		st = &inputState{}
	}
	pending, prelude := st.pending, st.prelude
	m.input.mu.Unlock()

	if p.TTY {
		if res, done := ttyControl(req.Action, p.ID, data, pending); res != nil {
			return res
		} else if done {
			m.setInput(p, &inputState{prelude: prelude}) // ^C discards the line typed so far
			return nil
		}
	}
	text := pending + data
	cut := checkedUpTo(text)
	rest := text[cut:]
	if len(rest) > maxInputLine {
		return process.Result{"status": "error", "error": fmt.Sprintf(
			"%s to %s refused: an unfinished line of input longer than %d bytes cannot be checked for dangerous commands; send it in lines",
			req.Action, p.ID, maxInputLine)}
	}
	if cut > 0 {
		lines := text[:cut]
		if err := shparse.Check(lines); err != nil {
			return process.Result{"status": "error", "session_id": p.ID, "error": fmt.Sprintf("%s to %s refused: %v", req.Action, p.ID, err)}
		}
		if p.TTY {
			if cmd := keyEditing(lines); cmd != "" {
				return process.Result{"status": "error", "session_id": p.ID, "error": fmt.Sprintf("%s to %s refused: %s", req.Action, p.ID, keyEditingRefusal(cmd))}
			}
		}
		c := m.approvalContext(m.liveEnv(key), p.Cwd)
		c.Prelude, c.Names = prelude, nil // this shell's own history, not the session's
		if d := m.gate.Command(ctx, key, lines, c, asker); !d.Allowed() {
			return process.Result{"status": "blocked", "session_id": p.ID, "error": d.Err().Error(), "approval": d}
		}
		if p.TTY && strings.Contains(lines, "\t") {
			// A tab on a terminal completes the word before it: check
			// what it could complete to as a glob.
			if d := m.gate.Command(ctx, key, strings.ReplaceAll(lines, "\t", "*"), c, asker); !d.Allowed() {
				return process.Result{"status": "blocked", "session_id": p.ID, "error": d.Err().Error(), "approval": d}
			}
		}
		prelude = keepLast(prelude+lines, maxPrelude)
	}
	if req.Action == "close" {
		m.setInput(p, nil)
		return nil
	}
	m.setInput(p, &inputState{pending: rest, prelude: prelude})
	return nil
}

// setInput stores what is kept for p (nil forgets it).
func (m *Manager) setInput(p *process.Proc, st *inputState) {
	m.input.mu.Lock()
	defer m.input.mu.Unlock()
	if st == nil || st.pending == "" && st.prelude == "" {
		delete(m.input.procs, p)
		return
	}
	m.input.procs[p] = st
}

// checkedUpTo returns how much of text can be checked now: up to its last
// line end, less the lines at the end that a trailing backslash continues
// onto a line not sent yet (rm \ then -rf / is one command to the shell).
func checkedUpTo(text string) int {
	end := strings.LastIndexAny(text, "\r\n") + 1
	for end > 0 {
		line := strings.TrimRight(text[:end], "\r\n")
		start := strings.LastIndexAny(line, "\r\n") + 1
		if backslashes := len(line) - len(strings.TrimRight(line, `\`)); backslashes%2 == 0 {
			return end
		}
		end = start
	}
	return 0
}

// keepLast returns the last max bytes of text, from a line start.
func keepLast(text string, max int) string {
	if len(text) <= max {
		return text
	}
	text = text[len(text)-max:]
	if i := strings.IndexAny(text, "\r\n"); i >= 0 {
		return text[i+1:]
	}
	return ""
}

// ttyControl checks input to a process on a terminal. The terminal (and
// readline behind it) edits the line after berth checked it: DEL, ^H,
// ^W and ^U erase, ^Y yanks back what was erased, ^A, ^E and the escape
// sequences of the arrow keys move the cursor, ^R searches the history.
// Such input is refused, with two exceptions that edit nothing: a lone ^C
// (interrupt; the line typed so far is discarded) and a ^D on an empty
// line (end of input); done reports them.
func ttyControl(action, id, data, pending string) (refused process.Result, done bool) {
	if data == "\x03" || data == "\x04" && pending == "" {
		return nil, true // nothing is kept: the line is gone, or was empty
	}
	for i := 0; i < len(data); i++ {
		c := data[i]
		if c == '\t' || c == '\r' || c == '\n' || c >= 0x20 && c != 0x7f {
			continue
		}
		return process.Result{"status": "error", "session_id": id, "error": fmt.Sprintf(
			"%s to %s refused: the input holds the control character %s at byte %d; on a terminal it edits the line after berth checked it (DEL, ^H, ^W, ^U and ^Y, ^A, arrow keys ...), so berth sends only plain text, tab and line ends, a lone ^C (interrupt) and a ^D on an empty line (end of input). Send the line as plain text.",
			action, id, controlName(c), i)}, false
	}
	return nil, false
}

// controlName names a control byte as a terminal user would: ^U, DEL, ESC.
func controlName(c byte) string {
	switch c {
	case 0x7f:
		return "DEL (0x7f)"
	case 0x1b:
		return "ESC (0x1b)"
	}
	return fmt.Sprintf("^%c (0x%02x)", c+'@', c)
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
