package process

import (
	"context"
	"strconv"
	"strings"

	"github.com/a55dbaac/berth/terminal"
)

// Line is a parsed ":verb ..." line of berth shell, the process tool on a
// command line:
//
//	:bg COMMAND, :bgpty COMMAND   start COMMAND in the background (Start)
//	:ps                           list
//	:poll ID, :log ID, :kill ID, :close ID
//	:wait ID [SECONDS]
//	:write ID DATA, :submit ID DATA
//
// Exactly one of Start and Request is set.
type Line struct {
	// Start is the background command of :bg and :bgpty; the caller sets
	// its Workdir.
	Start *terminal.Request
	// Request is the process tool request of the other verbs.
	Request *Request
}

// ParseLine parses a ":verb ..." line. It reports false for any other
// line: an ordinary shell command, or a colon followed by a verb it does
// not know (the shell's own ":" builtin, for one).
func ParseLine(line string) (Line, bool) {
	if !strings.HasPrefix(line, ":") {
		return Line{}, false
	}
	verb, rest, _ := strings.Cut(strings.TrimSpace(line[1:]), " ")
	rest = strings.TrimSpace(rest)
	switch verb {
	case "bg", "bgpty":
		return Line{Start: &terminal.Request{Command: rest, PTY: verb == "bgpty"}}, true
	case "ps":
		return Line{Request: &Request{Action: "list"}}, true
	case "poll", "log", "kill", "close":
		return Line{Request: &Request{Action: verb, SessionID: rest}}, true
	case "wait":
		id, secs, _ := strings.Cut(rest, " ")
		n, _ := strconv.Atoi(strings.TrimSpace(secs))
		return Line{Request: &Request{Action: "wait", SessionID: id, Timeout: n}}, true
	case "write", "submit":
		id, data, _ := strings.Cut(rest, " ")
		return Line{Request: &Request{Action: verb, SessionID: id, Data: data}}, true
	}
	return Line{}, false
}

// Doer runs process tool calls in an environment; manager.Manager.Doer
// returns one.
type Doer interface {
	Background(ctx context.Context, key string, req terminal.Request) StartResult
	Process(ctx context.Context, key string, req Request) Result
}

// Do runs the line in key's environment of d, a background command in
// workdir ("" for the shell's cwd), and returns the tool's answer.
func (l Line) Do(ctx context.Context, d Doer, key, workdir string) any {
	if l.Start != nil {
		req := *l.Start
		req.Workdir = workdir
		return d.Background(ctx, key, req)
	}
	return d.Process(ctx, key, *l.Request)
}
