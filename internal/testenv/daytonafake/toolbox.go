package daytonafake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	apiclient "github.com/daytona/clients/api-client-go"
	toolbox "github.com/daytona/clients/toolbox-api-client-go"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"
)

// toolboxError writes an error in the toolbox's ErrorResponse envelope.
func toolboxError(w http.ResponseWriter, r *http.Request, code int, dcode toolbox.DaemonErrorCode, msg string) {
	e := toolbox.NewErrorResponse(msg, r.URL.Path, int32(code), time.Now().UTC().Format(time.RFC3339))
	e.SetCode(dcode)
	e.SetMethod(r.Method)
	e.SetSource("DAYTONA_DAEMON")
	writeJSON(w, code, e)
}

// toolboxAuth checks the credential of a toolbox call and that its
// sandbox exists and is started, answering as the Daytona proxy does when
// it is not: 404 for an unknown or archived sandbox, 400 for one that is
// stopped or between states.
func (s *Server) toolboxAuth(h func(http.ResponseWriter, *http.Request, *sandbox)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.toolboxN++
		s.mu.Unlock()
		if !s.authorized(r) {
			toolboxError(w, r, http.StatusUnauthorized, toolbox.DAEMONERRORCODE_CodeUnauthorized, "unauthorized: invalid credentials")
			return
		}
		subject := s.subject(r)
		s.delay(r.Context(), where("toolbox", subject))
		if s.transient(w, "toolbox", subject) {
			return
		}
		id := r.PathValue("sandboxId")
		s.mu.Lock()
		sb := s.sandboxes[id]
		var st apiclient.SandboxState
		if sb != nil {
			st = sb.state
			if st == apiclient.SANDBOXSTATE_SNAPSHOTTING {
				// A snapshot's capture does not stop the sandbox: its
				// toolbox answers as in the state it returns to.
				st = sb.snapshotFrom
			}
		}
		s.mu.Unlock()
		if st == apiclient.SANDBOXSTATE_STARTED {
			// While its container is frozen for a snapshot's commit, the
			// daemon inside answers nothing: the call waits.
			if err := s.gate.await(r.Context(), sb.container()); err != nil {
				return
			}
		}
		switch {
		case sb == nil:
			toolboxError(w, r, http.StatusNotFound, toolbox.DAEMONERRORCODE_CodeNotFound, fmt.Sprintf("not found: sandbox %s not found", id))
		case st == apiclient.SANDBOXSTATE_ARCHIVED || st == apiclient.SANDBOXSTATE_ARCHIVING:
			toolboxError(w, r, http.StatusNotFound, toolbox.DAEMONERRORCODE_CodeNotFound,
				fmt.Sprintf("not found: sandbox container not found: no such container: %s", id))
		case st != apiclient.SANDBOXSTATE_STARTED:
			toolboxError(w, r, http.StatusBadRequest, toolbox.DAEMONERRORCODE_CodeBadRequest,
				"bad request: failed to resolve container IP after 3 attempts: no IP address found. Is the Sandbox started?")
		default:
			sb.touch()
			h(w, r, sb)
		}
	}
}

// containerID returns the sandbox's running container, or "".
func (sb *sandbox) container() string {
	sb.s.mu.Lock()
	defer sb.s.mu.Unlock()
	return sb.containerID
}

// execOpts describes a non-interactive process run in the container.
type execOpts struct {
	argv  []string
	env   []string
	dir   string
	user  string    // "" is the container's user
	stdin io.Reader // nil: no stdin
}

// run runs a process in the sandbox's container and waits for it, copying
// its stdout and stderr. The exit status is the process's (126/127 from the
// runtime when it cannot be started).
func (sb *sandbox) run(ctx context.Context, o execOpts, stdout, stderr io.Writer) (int, error) {
	id := sb.container()
	if id == "" {
		return -1, errors.New("the sandbox has no container")
	}
	return sb.s.runIn(ctx, id, o, stdout, stderr)
}

// runIn runs a process in a container (see sandbox.run).
func (s *Server) runIn(ctx context.Context, id string, o execOpts, stdout, stderr io.Writer) (int, error) {
	d := s.docker
	// Not while the container is frozen for a snapshot (see execGate).
	end, err := s.gate.begin(ctx, id)
	if err != nil {
		return -1, err
	}
	defer end()
	cr, err := d.ExecCreate(ctx, id, client.ExecCreateOptions{
		AttachStdin: o.stdin != nil, AttachStdout: true, AttachStderr: true,
		Cmd: o.argv, Env: o.env, WorkingDir: o.dir, User: o.user,
	})
	if err != nil {
		return -1, fmt.Errorf("create exec: %w", err)
	}
	att, err := d.ExecAttach(ctx, cr.ID, client.ExecAttachOptions{})
	if err != nil {
		return -1, fmt.Errorf("attach exec: %w", err)
	}
	defer att.Close()
	if s.opts.Unkind.SnapshotFreeze {
		s.awaitExecRunning(ctx, cr.ID)
	}
	end()
	werr := make(chan error, 1)
	if o.stdin != nil {
		go func() {
			_, err := io.Copy(att.Conn, o.stdin)
			att.CloseWrite()
			werr <- err
		}()
	} else {
		werr <- nil
	}
	_, cerr := stdcopy.StdCopy(stdout, stderr, att.Reader)
	if err := <-werr; err != nil {
		return -1, fmt.Errorf("write stdin: %w", err)
	}
	if cerr != nil {
		return -1, fmt.Errorf("read output: %w", cerr)
	}
	return s.execExit(ctx, cr.ID)
}

// execExit waits for an exec whose streams ended to be reported exited.
func (s *Server) execExit(ctx context.Context, execID string) (int, error) {
	delay := 2 * time.Millisecond
	for {
		r, err := s.docker.ExecInspect(ctx, execID, client.ExecInspectOptions{})
		if err != nil {
			return -1, fmt.Errorf("inspect exec: %w", err)
		}
		if !r.Running {
			return r.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// killTreeScript signals a process and all its descendants inside the
// container, found by walking /proc. $1 is the pid, $2 the signal.
const killTreeScript = `p=$1; sig=$2
all=$(for f in /proc/[0-9]*/stat; do
  IFS= read -r l <"$f" 2>/dev/null || continue
  c=${f#/proc/}; c=${c%/stat}; r=${l##*) }
  set -- $r
  echo "$c:$2"
done)
want=" $p "; more=1
while [ $more = 1 ]; do
  more=0
  for e in $all; do
    c=${e%%:*}; pp=${e#*:}
    case $want in *" $pp "*) case $want in *" $c "*) ;; *) want="$want$c "; more=1 ;; esac ;; esac
  done
done
kill -s "$sig" $want 2>/dev/null
exit 0`

// killTree signals pid's process tree inside the container.
func (sb *sandbox) killTree(ctx context.Context, pid int, sig string) {
	if pid <= 0 {
		return
	}
	_, err := sb.run(ctx, execOpts{argv: []string{"/bin/sh", "-c", killTreeScript, "kill-tree", strconv.Itoa(pid), sig}}, io.Discard, io.Discard)
	if err != nil {
		sb.s.log.Debug("daytonafake: kill tree", "sandbox", sb.id, "pid", pid, "err", err)
	}
}

// ParseCommand splits a command line as Daytona's daemon does when it runs
// /process/execute without a shell (apps/daemon/pkg/toolbox/process/
// execute.go, parseCommand): on spaces outside quotes, with quotes
// removed, empty words dropped, and no other shell syntax.
func ParseCommand(cmd string) []string {
	var args []string
	var cur strings.Builder
	var quote rune
	for _, r := range cmd {
		switch {
		case (r == '"' || r == '\'') && quote == 0:
			quote = r
		case r == quote:
			quote = 0
		case r == ' ' && quote == 0:
			if cur.Len() > 0 {
				args = append(args, cur.String())
			}
			cur.Reset()
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		args = append(args, cur.String())
	}
	return args
}

// pidLine passes everything on except the first line, which it parses as
// a pid.
type pidLine struct {
	w    io.Writer
	line []byte
	done bool
	pid  chan int
}

func (p *pidLine) Write(b []byte) (int, error) {
	n := len(b)
	if !p.done {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.line = append(p.line, b...)
			return n, nil
		}
		p.line = append(p.line, b[:i]...)
		p.done = true
		pid, _ := strconv.Atoi(strings.TrimSpace(string(p.line)))
		p.pid <- pid
		b = b[i+1:]
	}
	if len(b) > 0 {
		p.w.Write(b)
	}
	return n, nil
}

// execute is POST /process/execute: the command line split into argv (no
// shell), stdout and stderr combined, an optional timeout after which the
// process tree is terminated and 408 returned.
func (s *Server) execute(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	var req toolbox.ExecuteRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		toolboxError(w, r, http.StatusBadRequest, toolbox.DAEMONERRORCODE_CodeInvalidRequestBody, "command is required")
		return
	}
	shell := s.opts.Unkind.ExecShell
	var wrapped []string
	var stdin io.Reader
	if shell {
		if strings.TrimSpace(req.Command) == "" {
			toolboxError(w, r, http.StatusBadRequest, toolbox.DAEMONERRORCODE_CodeBadRequest, "empty command")
			return
		}
		// The wrapper reports its pid (see below), then becomes the
		// user's shell reading the command from stdin.
		wrapped, stdin = []string{"/bin/sh", "-c", execShellWrapper}, strings.NewReader(req.Command)
	} else {
		argv := ParseCommand(req.Command)
		if len(argv) == 0 {
			toolboxError(w, r, http.StatusBadRequest, toolbox.DAEMONERRORCODE_CodeBadRequest, "empty command")
			return
		}
		// The wrapper reports the command's pid on stderr's first line so
		// a timeout can kill its tree; then it becomes the command, with
		// its stderr on the stdout pipe: the daemon gives both the same
		// pipe, so their order is kept.
		wrapped = append([]string{"/bin/sh", "-c", `printf '%s\n' "$$" >&2; exec "$@" 2>&1`, "sh"}, argv...)
	}
	var env []string
	for k, v := range req.GetEnvs() {
		env = append(env, k+"="+v)
	}
	dir := req.GetCwd()
	if dir == "" {
		dir = sb.workDir(r.Context())
	}
	var out bytes.Buffer
	pl := &pidLine{w: &out, pid: make(chan int, 1)}
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	ctx := context.WithoutCancel(r.Context()) // the daemon finishes even when the client goes away
	go func() {
		code, err := sb.run(ctx, execOpts{argv: wrapped, env: env, dir: dir, stdin: stdin}, &out, pl)
		done <- result{code, err}
	}()
	var timeout <-chan time.Time
	if req.Timeout != nil && *req.Timeout > 0 {
		t := time.NewTimer(time.Duration(*req.Timeout) * time.Second)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case res := <-done:
		if res.err != nil {
			writeJSON(w, http.StatusOK, &toolbox.ExecuteResponse{ExitCode: toolbox.PtrInt32(-1), Result: res.err.Error()})
			return
		}
		resp := toolbox.NewExecuteResponse(out.String())
		resp.SetExitCode(int32(res.code))
		writeJSON(w, http.StatusOK, resp)
	case <-timeout:
		var pid int
		select {
		case pid = <-pl.pid:
		default:
		}
		if shell {
			sb.killTree(ctx, pid, "KILL") // the current daemon: SIGKILL to the process group
			<-done
		} else {
			sb.killTree(ctx, pid, "TERM")
			select {
			case <-done:
			case <-time.After(2 * time.Second):
				sb.killTree(ctx, pid, "KILL")
				<-done
			}
		}
		toolboxError(w, r, http.StatusRequestTimeout, toolbox.DAEMONERRORCODE_CodeRequestTimeout,
			fmt.Sprintf("Command execution timed out after %d seconds. The timeout can be increased by adjusting the timeout parameter in the request.", *req.Timeout))
	}
}

// execShellWrapper runs a command read from stdin with the user's shell
// as Daytona's daemon picks it (zsh, else bash, else $SHELL, else sh),
// stdout and stderr joined; first it reports its pid on stderr's first
// line, for the timeout's kill.
const execShellWrapper = `printf '%s\n' "$$" >&2
exec 2>&1
for s in zsh bash; do
  if command -v "$s" >/dev/null 2>&1; then exec "$s"; fi
done
if [ -n "$SHELL" ] && [ -x "$SHELL" ]; then exec "$SHELL"; fi
exec sh`

// fileScript reads a file for download: it exits 44 when the path does not
// exist, 45 for a directory, 46 when it cannot be read.
const fileScript = `[ -e "$1" ] || exit 44
[ -d "$1" ] && exit 45
[ -r "$1" ] || exit 46
exec cat -- "$1"`

// downloadFile is GET /files/download?path=.
func (s *Server) downloadFile(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	p := r.URL.Query().Get("path")
	if p == "" {
		toolboxError(w, r, http.StatusBadRequest, toolbox.DAEMONERRORCODE_CodeBadRequest, "path is required")
		return
	}
	var out, errOut bytes.Buffer
	code, err := sb.run(r.Context(), execOpts{argv: []string{"/bin/sh", "-c", fileScript, "download", p}}, &out, &errOut)
	switch {
	case err != nil:
		toolboxError(w, r, http.StatusInternalServerError, toolbox.DAEMONERRORCODE_CodeInternalServerError, err.Error())
	case code == 44:
		toolboxError(w, r, http.StatusNotFound, toolbox.DAEMONERRORCODE_CodeFileNotFound, fmt.Sprintf("file not found: %s", p))
	case code == 45:
		toolboxError(w, r, http.StatusBadRequest, toolbox.DAEMONERRORCODE_CodeBadRequest, fmt.Sprintf("path is a directory: %s", p))
	case code == 46:
		toolboxError(w, r, http.StatusForbidden, toolbox.DAEMONERRORCODE_CodeFileAccessDenied, fmt.Sprintf("permission denied: %s", p))
	case code != 0:
		toolboxError(w, r, http.StatusInternalServerError, toolbox.DAEMONERRORCODE_CodeInternalServerError, fmt.Sprintf("read %s: %s", p, strings.TrimSpace(errOut.String())))
	default:
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", "attachment; filename="+strconv.Quote(path.Base(p)))
		w.Header().Set("Content-Length", strconv.Itoa(out.Len()))
		w.WriteHeader(http.StatusOK)
		w.Write(out.Bytes())
	}
}

// uploadScript writes stdin to $1, creating its parent directories.
const uploadScript = `d=$(dirname -- "$1") && mkdir -p -- "$d" && cat >"$1"`

// uploadFile is POST /files/upload-v2?path=: the body is the file, raw or
// as the multipart field "file". Parents are created; an existing file is
// overwritten.
func (s *Server) uploadFile(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	p := r.URL.Query().Get("path")
	if p == "" {
		toolboxError(w, r, http.StatusBadRequest, toolbox.DAEMONERRORCODE_CodeBadRequest, "path is required")
		return
	}
	var body io.Reader = r.Body
	if mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err == nil && mt == "multipart/form-data" {
		mr := multipart.NewReader(r.Body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if err != nil {
				toolboxError(w, r, http.StatusBadRequest, toolbox.DAEMONERRORCODE_CodeBadRequest, "multipart body has no field \"file\"")
				return
			}
			if part.FormName() == "file" {
				body = part
				break
			}
		}
	}
	var errOut bytes.Buffer
	code, err := sb.run(r.Context(), execOpts{argv: []string{"/bin/sh", "-c", uploadScript, "upload", p}, stdin: body}, io.Discard, &errOut)
	switch {
	case err != nil:
		toolboxError(w, r, http.StatusInternalServerError, toolbox.DAEMONERRORCODE_CodeInternalServerError, err.Error())
	case code != 0:
		toolboxError(w, r, http.StatusBadRequest, toolbox.DAEMONERRORCODE_CodeBadRequest, fmt.Sprintf("write %s: %s", p, strings.TrimSpace(errOut.String())))
	default:
		writeJSON(w, http.StatusOK, toolbox.NewUploadedFile(path.Base(p), p, "file"))
	}
}

// setPermissions is POST /files/permissions?path=&mode=&owner=&group=.
func (s *Server) setPermissions(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	q := r.URL.Query()
	p := q.Get("path")
	if p == "" {
		toolboxError(w, r, http.StatusBadRequest, toolbox.DAEMONERRORCODE_CodeBadRequest, "path is required")
		return
	}
	var script strings.Builder
	args := []string{"/bin/sh", "-c", "", "perms", p}
	script.WriteString("set -e\n")
	if m := q.Get("mode"); m != "" {
		if _, err := strconv.ParseUint(m, 8, 32); err != nil {
			toolboxError(w, r, http.StatusBadRequest, toolbox.DAEMONERRORCODE_CodeBadRequest, fmt.Sprintf("invalid mode %q: must be octal", m))
			return
		}
		script.WriteString(`chmod "$2" -- "$1"` + "\n")
		args = append(args, m)
	} else {
		args = append(args, "")
	}
	if o, g := q.Get("owner"), q.Get("group"); o != "" || g != "" {
		spec := o
		if g != "" {
			spec += ":" + g
		}
		script.WriteString(`chown "$3" -- "$1"` + "\n")
		args = append(args, spec)
	}
	args[2] = script.String()
	var errOut bytes.Buffer
	code, err := sb.run(r.Context(), execOpts{argv: args}, io.Discard, &errOut)
	switch {
	case err != nil:
		toolboxError(w, r, http.StatusInternalServerError, toolbox.DAEMONERRORCODE_CodeInternalServerError, err.Error())
	case code != 0:
		toolboxError(w, r, http.StatusBadRequest, toolbox.DAEMONERRORCODE_CodeBadRequest, fmt.Sprintf("set permissions of %s: %s", p, strings.TrimSpace(errOut.String())))
	default:
		w.WriteHeader(http.StatusOK)
	}
}

// version is GET /version.
func (s *Server) version(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	writeJSON(w, http.StatusOK, map[string]string{"version": "daytonafake"})
}
