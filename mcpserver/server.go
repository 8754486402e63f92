// Package mcpserver exposes berth to agents over the Model Context
// Protocol: the terminal tool and the file tools (read_file, write_file,
// patch, search_files) with the contract's names, parameters and result
// fields, every call running in the environment the manager gives the MCP
// session; with checkpoints.environment_tool set, the environment tool
// too (checkpoint, restore and list of that environment).
//
// The server is transport-agnostic: `berth mcp` runs it over stdio and
// `berth serve` over streamable HTTP (see Handler).
package mcpserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/a55dbaac/berth/approval"
	"github.com/a55dbaac/berth/files"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/process"
	"github.com/a55dbaac/berth/terminal"
)

// Options configures the MCP server.
type Options struct {
	// Key is the environment key of a stdio session and of a shared
	// environment, and the prefix of per-session keys over HTTP. Empty
	// means manager.DefaultKey.
	Key string
	// ShareEnvironment gives every MCP session the one environment Key
	// instead of one each. The configuration's terminal.share_environment
	// turns it on too.
	ShareEnvironment bool
	// Version is reported to clients as the server's version.
	Version string
	// Logger receives diagnostics; nil means slog.Default().
	Logger *slog.Logger
	// Context, when done, cancels every running and later tool call, as
	// Server.Shutdown does: their commands are interrupted (exit 130 with
	// the interrupt marker) and the calls return. berth passes the context
	// its shutdown signals cancel. nil means context.Background().
	Context context.Context
}

// instructions is what the server tells the model about itself.
const instructions = `berth gives you a persistent shell and file tools in one environment (this machine, a container or a remote host, as configured). State persists between calls: the working directory, exported variables and functions carry over from one terminal call to the next. Use read_file, write_file, patch and search_files for files rather than cat, sed, echo > or grep in the terminal: they are exact, atomic and paginated. Long-running work (servers, watchers, builds that take minutes) belongs in the background (terminal with background=true), followed with the process tool.`

// server holds what the tool handlers share.
type server struct {
	m    *manager.Manager
	opts Options
	log  *slog.Logger

	base  context.Context    // done when the server shuts down
	stop  context.CancelFunc // shuts the server down
	calls callCounter        // tool calls running
	posts callCounter        // HTTP requests being answered through Handler

	mu      sync.Mutex
	watched map[string]bool // per-session keys whose end is watched

	dmu      sync.Mutex
	detaches map[*mcp.ServerSession][]time.Time // cancels asking for a detach, not yet matched to a call
	dsignal  chan struct{}                      // closed and replaced when one arrives

	elicit *Elicitor // asks the user about commands that need approval
}

// Server is berth's MCP server: the SDK's server (embedded, so it connects
// and serves as usual) with a shutdown that interrupts running tool calls
// and still delivers their results.
type Server struct {
	*mcp.Server
	s *server
}

// New returns an MCP server whose tools run in m's environments: one per
// MCP session by default (a stdio server has one session), or one shared
// environment when opts.ShareEnvironment or terminal.share_environment is
// set. An HTTP session's environment is closed when the session ends.
func New(m *manager.Manager, opts Options) *Server {
	if opts.Key == "" {
		opts.Key = manager.DefaultKey
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	if cfg := m.Config(); cfg != nil && cfg.Terminal.ShareEnvironment {
		opts.ShareEnvironment = true
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	parent := opts.Context
	if parent == nil {
		parent = context.Background()
	}
	base, stop := context.WithCancel(parent)
	s := &server{m: m, opts: opts, log: log, base: base, stop: stop, watched: map[string]bool{}, elicit: NewElicitor(),
		detaches: map[*mcp.ServerSession][]time.Time{}, dsignal: make(chan struct{})}
	srv := mcp.NewServer(&mcp.Implementation{Name: "berth", Title: "berth: terminal and files for agents", Version: opts.Version},
		&mcp.ServerOptions{Instructions: instructions, Logger: log})
	srv.AddReceivingMiddleware(s.guard)
	s.register(srv)
	return &Server{Server: srv, s: s}
}

// Run serves one session over t (stdio) until the client ends it or ctx
// ends. When ctx ends, running tool calls are cancelled (their commands
// interrupted, exit 130), their results are sent, and then the session is
// closed; the wait for the results is bounded by drain. It returns
// ctx.Err() when ctx ended the session.
func (srv *Server) Run(ctx context.Context, t mcp.Transport, drain time.Duration) error {
	if st, ok := t.(*StdioTransport); ok {
		// A question to a client whose input ended can get no answer.
		srv.s.elicit.mu.Lock()
		srv.s.elicit.ended = st.InputEnded()
		srv.s.elicit.mu.Unlock()
	}
	ss, err := srv.Server.Connect(context.WithoutCancel(ctx), t, nil)
	if err != nil {
		return fmt.Errorf("mcp: connect: %w", err)
	}
	ended := make(chan error, 1)
	go func() { ended <- ss.Wait() }()
	select {
	case err := <-ended:
		return err
	case <-ctx.Done():
	}
	dctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	srv.s.stop()
	if st, ok := t.(*StdioTransport); ok {
		// The SDK drops answers written after Close: let them out first.
		st.waitAnswered(dctx)
	}
	srv.Shutdown(dctx)
	return ctx.Err()
}

// Shutdown cancels every running tool call (and any later one), waits until
// ctx ends for their results to be sent (over HTTP: for the requests being
// answered through Handler), then closes every session.
func (srv *Server) Shutdown(ctx context.Context) {
	srv.s.stop()
	srv.s.calls.wait(ctx)
	srv.s.posts.wait(ctx)
	var wg sync.WaitGroup
	for ss := range srv.Sessions() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ss.Close()
		}()
	}
	closed := make(chan struct{})
	go func() {
		wg.Wait()
		close(closed)
	}()
	select {
	case <-closed:
	case <-ctx.Done():
	}
}

// callCounter counts running calls and tells when none runs.
type callCounter struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0
}

func (c *callCounter) add() {
	c.mu.Lock()
	if c.n == 0 {
		c.idle = make(chan struct{})
	}
	c.n++
	c.mu.Unlock()
}

func (c *callCounter) done() {
	c.mu.Lock()
	c.n--
	if c.n == 0 {
		close(c.idle)
	}
	c.mu.Unlock()
}

// wait returns when no call runs or ctx ends.
func (c *callCounter) wait(ctx context.Context) {
	c.mu.Lock()
	if c.n == 0 {
		c.mu.Unlock()
		return
	}
	idle := c.idle
	c.mu.Unlock()
	select {
	case <-idle:
	case <-ctx.Done():
	}
}

// key returns the environment key for a call, and arranges for a
// per-session environment to be closed when its session ends.
func (s *server) key(req *mcp.CallToolRequest) string {
	if s.opts.ShareEnvironment || req == nil || req.Session == nil {
		return s.opts.Key
	}
	id := req.Session.ID()
	if id == "" {
		return s.opts.Key // stdio: one session, one environment
	}
	key := s.opts.Key + "-" + sanitize(id)
	s.mu.Lock()
	first := !s.watched[key]
	s.watched[key] = true
	s.mu.Unlock()
	if first {
		ss := req.Session
		go func() {
			ss.Wait()
			if s.shuttingDown() {
				// The server is going down: its owner closes every
				// environment (manager.CloseAll), and must find this one.
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := s.m.Close(ctx, key); err != nil {
				s.log.Warn("mcp: close environment of ended session", "key", key, "err", err)
			}
			s.mu.Lock()
			delete(s.watched, key)
			s.mu.Unlock()
		}()
	}
	return key
}

// shuttingDown reports whether the server is shutting down.
func (s *server) shuttingDown() bool {
	return s.base.Err() != nil
}

// errShutdown is the cause of a tool call cancelled by the server's
// shutdown.
var errShutdown = errors.New("berth is shutting down")

// guard wraps every request the server handles. A tool call runs under a
// context that the server's shutdown also cancels, and is counted so the
// shutdown can wait for its result. A panic in any handler is recovered and
// logged with its stack: a tool call gets an error result, another request
// a JSON-RPC internal error, and the server goes on.
func (s *server) guard(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
		if method == notificationCancelled {
			s.noteCancel(req)
		}
		if method == "tools/call" {
			s.calls.add()
			defer s.calls.done()
			var cancel context.CancelCauseFunc
			ctx, cancel = context.WithCancelCause(ctx)
			stop := context.AfterFunc(s.base, func() { cancel(errShutdown) })
			defer func() {
				stop()
				cancel(nil)
			}()
		}
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			tool := ""
			if ctr, ok := req.(*mcp.CallToolRequest); ok && ctr.Params != nil {
				tool = ctr.Params.Name
			}
			s.log.Error("mcp: handler panicked; the request failed, the server goes on", "method", method, "tool", tool, "panic", p, "stack", string(debug.Stack()))
			if method == "tools/call" {
				res, err = toolErrorResult(fmt.Errorf("%s: internal error in berth: %v (this call failed; the environment and the server are still usable; please report it)", tool, p)), nil
				return
			}
			res, err = nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("internal error in berth handling %s: %v", method, p)}
		}()
		return next(ctx, method, req)
	}
}

// DetachReason is the reason of an MCP cancel (notifications/cancelled)
// that moves the cancelled terminal call's command to the background
// instead of interrupting it: the command goes on as a background process
// followed with the process tool, and the call is answered with
// moved_to_background and its session_id (a client that drops answers to
// cancelled calls finds it with process list).
const DetachReason = "background"

const notificationCancelled = "notifications/cancelled"

// detachWindow is how long a cancelled terminal call waits for the cancel
// notification's reason: the SDK cancels the call's context and hands the
// notification to the middleware concurrently, so either may come first.
// A cancel without the reason interrupts the command that much later.
const detachWindow = 250 * time.Millisecond

// noteCancel records a cancel notification whose reason asks for a detach.
func (s *server) noteCancel(req mcp.Request) {
	p, ok := req.GetParams().(*mcp.CancelledParams)
	ss, _ := req.GetSession().(*mcp.ServerSession)
	if !ok || p == nil || ss == nil || !strings.EqualFold(strings.TrimSpace(p.Reason), DetachReason) {
		return
	}
	s.dmu.Lock()
	now := time.Now()
	// Forget cancels no call took (in any session), so nothing piles up.
	for o, ats := range s.detaches {
		kept := ats[:0]
		for _, at := range ats {
			if now.Sub(at) < 2*detachWindow {
				kept = append(kept, at)
			}
		}
		if len(kept) == 0 {
			delete(s.detaches, o)
		} else {
			s.detaches[o] = kept
		}
	}
	s.detaches[ss] = append(s.detaches[ss], now)
	close(s.dsignal)
	s.dsignal = make(chan struct{})
	s.dmu.Unlock()
}

// takeDetach consumes a recent detach cancel of ss, waiting up to
// detachWindow for one to arrive.
func (s *server) takeDetach(ss *mcp.ServerSession) bool {
	deadline := time.NewTimer(detachWindow)
	defer deadline.Stop()
	for {
		s.dmu.Lock()
		now := time.Now()
		for i, at := range s.detaches[ss] {
			if now.Sub(at) < 2*detachWindow {
				s.detaches[ss] = append(s.detaches[ss][:i], s.detaches[ss][i+1:]...)
				if len(s.detaches[ss]) == 0 {
					delete(s.detaches, ss)
				}
				s.dmu.Unlock()
				return true
			}
		}
		sig := s.dsignal
		s.dmu.Unlock()
		select {
		case <-sig:
		case <-deadline.C:
			return false
		}
	}
}

// detachable returns the context of a terminal call and its detach
// channel (manager.WithDetach): the context is not cancelled by the
// client's cancel at once; a cancel whose notification gives DetachReason
// closes the detach channel instead, any other (or the server's shutdown)
// cancels the context with the original cause. The returned stop ends the
// watch and releases the context.
func (s *server) detachable(ctx context.Context, ss *mcp.ServerSession) (context.Context, <-chan struct{}, func()) {
	inner, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	detach := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		cause := context.Cause(ctx)
		if errors.Is(cause, context.Canceled) && ss != nil && s.takeDetach(ss) {
			close(detach)
			return
		}
		cancel(cause)
	})
	return inner, detach, func() {
		stop()
		cancel(nil)
	}
}

// toolErrorResult is a complete tool result carrying only an error, as the
// file tools report failures: {"error": "..."} as text and structured
// content.
func toolErrorResult(err error) *mcp.CallToolResult {
	body := map[string]string{"error": err.Error()}
	text, _ := json.Marshal(body)
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: string(text)}}, StructuredContent: body}
}

// sanitize keeps the characters every backend accepts in names (container
// names, labels): letters, digits, '-' and '_'; at most 32 of them.
func sanitize(id string) string {
	var b strings.Builder
	for _, r := range id {
		if r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			b.WriteRune(r)
		}
		if b.Len() == 32 {
			break
		}
	}
	if b.Len() == 0 {
		sum := sha256.Sum256([]byte(id))
		return hex.EncodeToString(sum[:8])
	}
	return b.String()
}

// errorResult is a tool result carrying only an error, as the contract's
// file tools report failures: {"error": "..."}.
func errorResult(err error) (*mcp.CallToolResult, any, error) {
	return &mcp.CallToolResult{IsError: true}, map[string]string{"error": err.Error()}, nil
}

// terminalArgs are the terminal tool's parameters.
type terminalArgs struct {
	Command    string `json:"command" jsonschema:"The shell command to run (bash when the environment has it, else POSIX sh). Multi-line scripts and heredocs work."`
	Background bool   `json:"background,omitempty" jsonschema:"Run in the background and return at once with a session_id; follow it with the process tool. Use for servers, watchers and anything that runs for minutes. Default false."`
	Timeout    int    `json:"timeout,omitempty" jsonschema:"Seconds (>= 1) before the command and everything it started are killed; the output then ends with [Command timed out after Ns] and exit_code is 124. Default: the configured terminal.timeout (180)."`
	Workdir    string `json:"workdir,omitempty" jsonschema:"Absolute directory (or ~/...) to run this one command in; the session's own working directory does not move."`
	PTY        bool   `json:"pty,omitempty" jsonschema:"Give a background process a pseudo-terminal (for programs that need a TTY). Default false."`
	OnTimeout  string `json:"on_timeout,omitempty" jsonschema:"What happens to a command still running at its timeout: kill (stop it and everything it started, exit_code 124) or background (keep it running as a background process: the result has the output so far, exit_code null, moved_to_background true and the session_id to follow it with the process tool). Default: the configured terminal.on_timeout (kill)."`
}

type readArgs struct {
	Path   string `json:"path" jsonschema:"File to read: absolute, relative to the shell's current directory, or ~/..."`
	Offset int    `json:"offset,omitempty" jsonschema:"1-based line to start from. Default 1."`
	Limit  int    `json:"limit,omitempty" jsonschema:"Lines to return, at most 2000. Default 2000."`
}

type writeArgs struct {
	Path    string `json:"path" jsonschema:"File to create or replace: absolute, relative to the shell's current directory, or ~/... Parent directories are created."`
	Content string `json:"content" jsonschema:"The complete new content of the file (up to 10 MiB)."`
}

type patchArgs struct {
	Path       string `json:"path" jsonschema:"File to edit."`
	OldString  string `json:"old_string" jsonschema:"Exact text to replace, including whitespace and indentation, with enough surrounding lines to be unique in the file."`
	NewString  string `json:"new_string" jsonschema:"Text to put in its place."`
	ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"Replace every occurrence instead of requiring exactly one. Default false."`
}

type searchArgs struct {
	Pattern  string `json:"pattern" jsonschema:"With target content: a regular expression to find in files. With target files: a glob on file names such as *.py (with a slash, on paths relative to path; ** crosses directories)."`
	Path     string `json:"path,omitempty" jsonschema:"Directory (or file) to search. Default: the shell's current directory."`
	Target   string `json:"target,omitempty" jsonschema:"content (search inside files, the default) or files (find files by name)."`
	FileGlob string `json:"file_glob,omitempty" jsonschema:"Only search files whose name matches this glob, e.g. *.go or *.{ts,tsx}."`
	Limit    int    `json:"limit,omitempty" jsonschema:"Results per page, at most 500. Default 50."`
	Context  int    `json:"context,omitempty" jsonschema:"Lines of context before and after each content match, at most 10. Default 0."`
	Offset   int    `json:"offset,omitempty" jsonschema:"Results to skip, for the next page. Default 0."`
}

// maxContentText is MaxContentBytes as the descriptions say it.
const maxContentText = "10 MiB"

// Tool descriptions: what the model reads to decide how to use each tool.
const (
	terminalDesc = `Run a shell command in berth's persistent shell and get {"output", "exit_code", "error"} back (plus "cwd" when the command changed directory, and truncation details for long output).

The shell persists between calls: cd, exported variables, functions and activated virtualenvs carry over, so "cd project" once and later commands run there. For a one-off command elsewhere pass workdir instead of cd-ing back and forth.

stdout and stderr are merged; output over 50,000 characters keeps its start and end, and the full text is saved to the file named in full_output_path. Stdin is empty: commands that would prompt get EOF, so pass non-interactive flags (-y, --yes). Pagers are disabled.

A command is killed (with everything it started) after timeout seconds: exit_code 124 and "[Command timed out after Ns]". Servers, watchers and long builds should run with background=true and be followed with the process tool (poll, log, wait, kill) instead of blocking here. When a command may take longer than you guess (a build, a test suite), pass on_timeout="background": at the timeout it keeps running as a background process, and the result carries the output so far, exit_code null, moved_to_background true and its session_id for the process tool; the shell is free at once, with its cwd and exported variables. A running command can also be moved there on demand: process action detach with the session_id that process list shows for it (status "foreground"), or an MCP cancel of the call with reason "background".

For files prefer read_file, write_file, patch and search_files over cat, sed, echo > and grep: they are exact, atomic and paginated.`

	readDesc = `Read a text file from the environment as numbered lines "N|text" (up to 2000 lines per call, starting at offset). Long lines are cut at 2000 characters. When more lines remain the result says "use offset=N to continue". Binary files are refused with their type; a missing path reports similar file names. Use this instead of cat, head or sed -n.`

	writeDesc = `Create or replace a file with the given content (at most ` + maxContentText + ` per call). The write is atomic (a temporary file renamed into place), keeps the mode of an existing file and creates missing parent directories. Returns {"path", "bytes_written"}. For a small change to an existing file prefer patch, which does not need the whole content. Use this instead of echo > or heredocs in the terminal.`

	patchDesc = `Replace old_string with new_string in a file and return a unified diff of the change. old_string must match the file exactly (whitespace and indentation included) and occur once, unless replace_all is set; include a few surrounding lines to make it unique. When it does not match, the error shows the most similar region of the file with line numbers so you can correct it. Read the file first if you are not sure of its current text.`

	searchDesc = `Search the environment's files. target=content (default) finds lines matching a regular expression, with path, line number and optional context lines; target=files finds files whose name matches a glob. Narrow with path and file_glob. Results are paginated: total counts them all, truncated says more exist, offset fetches the next page. Uses ripgrep when installed (hidden and .gitignored files skipped), else grep/find. Use this instead of grep -r or find in the terminal.`
)

// register adds the tools.
func (s *server) register(srv *mcp.Server) {
	openWorld := true
	destructive := true
	notDestructive := false
	mcp.AddTool(srv, &mcp.Tool{Name: "terminal", Description: terminalDesc,
		Annotations: &mcp.ToolAnnotations{Title: "Run a shell command", DestructiveHint: &destructive, OpenWorldHint: &openWorld}},
		s.terminal)
	mcp.AddTool(srv, &mcp.Tool{Name: "process", Description: processDesc,
		Annotations: &mcp.ToolAnnotations{Title: "Follow background processes", DestructiveHint: &destructive, OpenWorldHint: &openWorld}},
		s.process)
	mcp.AddTool(srv, &mcp.Tool{Name: "read_file", Description: readDesc,
		Annotations: &mcp.ToolAnnotations{Title: "Read a file", ReadOnlyHint: true, OpenWorldHint: &notDestructive}},
		s.readFile)
	mcp.AddTool(srv, &mcp.Tool{Name: "write_file", Description: writeDesc,
		Annotations: &mcp.ToolAnnotations{Title: "Write a file", DestructiveHint: &destructive, IdempotentHint: true, OpenWorldHint: &notDestructive}},
		s.writeFile)
	mcp.AddTool(srv, &mcp.Tool{Name: "patch", Description: patchDesc,
		Annotations: &mcp.ToolAnnotations{Title: "Edit a file", DestructiveHint: &destructive, OpenWorldHint: &notDestructive}},
		s.patch)
	mcp.AddTool(srv, &mcp.Tool{Name: "search_files", Description: searchDesc,
		Annotations: &mcp.ToolAnnotations{Title: "Search files", ReadOnlyHint: true, OpenWorldHint: &notDestructive}},
		s.search)
	if cfg := s.m.Config(); cfg != nil && cfg.Checkpoints.EnvironmentTool {
		mcp.AddTool(srv, &mcp.Tool{Name: "environment", Description: environmentDesc,
			Annotations: &mcp.ToolAnnotations{Title: "Checkpoint and restore the environment", DestructiveHint: &destructive, OpenWorldHint: &notDestructive}},
			s.environment)
	}
}

func (s *server) terminal(ctx context.Context, req *mcp.CallToolRequest, in terminalArgs) (*mcp.CallToolResult, any, error) {
	// A command that needs approval asks the user through the client's
	// elicitation; on protocol 2026-07-28 and later the question goes back
	// in the result and the client calls again with the answer. A client's
	// cancel may ask for the command to go to the background
	// (DetachReason) instead of being interrupted.
	ask := s.elicit.Asker(req)
	ctx, detach, stop := s.detachable(ctx, req.Session)
	defer stop()
	res := s.m.Terminal(ctx, s.key(req), terminal.Request{
		Command: in.Command, Background: in.Background, Timeout: in.Timeout, Workdir: in.Workdir, PTY: in.PTY, OnTimeout: in.OnTimeout,
	}, manager.WithAsker(ask), manager.WithDetach(detach))
	if p := ask.Pending(); p != nil {
		return p, nil, nil
	}
	return &mcp.CallToolResult{IsError: res.Failed()}, res.Value(), nil
}

type processArgs struct {
	Action    string `json:"action" jsonschema:"One of list, poll, log, wait, kill, write, submit, close, detach."`
	SessionID string `json:"session_id,omitempty" jsonschema:"The process's id (proc_ + 12 hex, from the background start or list); a unique prefix of 4 or more characters works. Needed by every action but list."`
	Data      string `json:"data,omitempty" jsonschema:"write: bytes to send to the process's stdin as is. submit: a line to send (a newline is added)."`
	Timeout   int    `json:"timeout,omitempty" jsonschema:"wait: seconds to wait for the process to exit, at most terminal.timeout. On timeout the result says status timeout and process_running true."`
	Offset    *int   `json:"offset,omitempty" jsonschema:"log: first line to return (0-based). Default: the last limit lines."`
	Limit     *int   `json:"limit,omitempty" jsonschema:"log: number of lines to return. Default 200."`
}

const processDesc = `Follow and control processes started with terminal(background=true), or moved there from the foreground.

- list: every process with session_id, command, cwd, pid, started_at, uptime_seconds, status (running or exited), output_preview and exit_code once exited.
- poll: status, pid, uptime and the last 1000 characters of output of one process. Cheap; use it to check on a server or build.
- log: output lines (the last 200 by default; offset and limit to page), with total_lines.
- wait: block until the process exits (returns at once when it does) or timeout seconds pass; on timeout status is "timeout" and process_running is true, which is not an error.
- kill: stop the process and everything it started (TERM, then KILL after a grace period).
- write / submit / close: send raw data, a line, or end-of-input to the process's stdin (for interactive programs; start them with pty=true when they need a terminal).
- detach: move a foreground command that a terminal call is still running (list shows it with status "foreground" and its session_id) to the background: the terminal call returns at once with the output so far and moved_to_background, and the process keeps the same session_id. A command moved from the foreground reads no input.

A terminal call with on_timeout="background" whose command outlives its timeout is moved the same way.

Output is cleaned like terminal output. Unknown ids answer status "not_found".`

func (s *server) process(ctx context.Context, req *mcp.CallToolRequest, in processArgs) (*mcp.CallToolResult, any, error) {
	// The key scopes every action: a session reaches only the processes
	// started in its own environment (the process package answers
	// not_found for another's, whole id or prefix).
	// Input that needs approval (write, submit, close) asks the user as a
	// command does.
	ask := s.elicit.Asker(req)
	res := s.m.Process(ctx, s.key(req), process.Request{
		Action: in.Action, SessionID: in.SessionID, Data: in.Data, Timeout: in.Timeout, Offset: in.Offset, Limit: in.Limit,
	}, manager.WithAsker(ask))
	if p := ask.Pending(); p != nil {
		return p, nil, nil
	}
	_, failed := res["error"]
	return &mcp.CallToolResult{IsError: failed}, res, nil
}

func (s *server) readFile(ctx context.Context, req *mcp.CallToolRequest, in readArgs) (*mcp.CallToolResult, any, error) {
	return fileResult(s.m.ReadFile(ctx, s.key(req), in.Path, in.Offset, in.Limit))
}

// writeResult answers a file-tool write: the question for the client when
// the gate handed it one, {"error": "BLOCKED: ...", "approval": {...}} when
// the gate refused, else the result or the error.
func writeResult[T any](ask *ElicitAsker, res T, err error) (*mcp.CallToolResult, any, error) {
	if p := ask.Pending(); p != nil {
		return p, nil, nil
	}
	var be *approval.BlockedError
	if errors.As(err, &be) {
		return &mcp.CallToolResult{IsError: true}, map[string]any{"error": be.Decision.Message, "approval": be.Decision}, nil
	}
	return fileResult(res, err)
}

// fileResult answers a file tool call with its result, or its error.
func fileResult[T any](res T, err error) (*mcp.CallToolResult, any, error) {
	if err != nil {
		return errorResult(err)
	}
	return nil, res, nil
}

func (s *server) writeFile(ctx context.Context, req *mcp.CallToolRequest, in writeArgs) (*mcp.CallToolResult, any, error) {
	ask := s.elicit.Asker(req)
	res, err := s.m.WriteFile(ctx, s.key(req), in.Path, in.Content, manager.WithAsker(ask))
	return writeResult(ask, res, err)
}

func (s *server) patch(ctx context.Context, req *mcp.CallToolRequest, in patchArgs) (*mcp.CallToolResult, any, error) {
	ask := s.elicit.Asker(req)
	res, err := s.m.Patch(ctx, s.key(req), in.Path, in.OldString, in.NewString, in.ReplaceAll, manager.WithAsker(ask))
	return writeResult(ask, res, err)
}

func (s *server) search(ctx context.Context, req *mcp.CallToolRequest, in searchArgs) (*mcp.CallToolResult, any, error) {
	return fileResult(s.m.Search(ctx, s.key(req), files.SearchRequest{Pattern: in.Pattern, Path: in.Path, Target: in.Target,
		FileGlob: in.FileGlob, Limit: in.Limit, Context: in.Context, Offset: in.Offset}))
}
