// Package files implements the file tools of the agent contract —
// read_file, write_file, patch and search_files — on top of any backend.
//
// Every function takes a *terminal.Environment and works inside that environment:
// on a container or a remote host the file is read and written there, not on
// the machine running berth. Relative paths resolve against the session's
// current directory and "~" against the environment's $HOME.
//
// How the bytes travel depends on what the backend offers:
//
//   - A backend reporting Capabilities.NativeFS (the local one) is this
//     machine's filesystem: files are read and written with the os package,
//     no shell involved.
//   - Every other backend goes through the environment's persistent shell:
//     a read is one shell command that prints a small header followed by the
//     requested slice (one round trip). File content is never put in a
//     command line: small writes travel on the session's stdin; large ones on
//     the raw stdin of a helper process started through the backend (the
//     session delivers its stdin through printf escapes, which bash reads
//     byte by byte — about 1.6 s per MiB); backends implementing backend.FileWriter
//     receive the bytes through their own file API.
//
// Writes are atomic (a temporary file in the same directory, then a rename),
// keep the mode of the file they replace and create missing parent
// directories.
//
// This package checks nothing of policy: no approval gate, no size cap. It
// is the layer beneath package manager, whose ReadFile, WriteFile, Patch and
// Search are the one door agents and Go programs use (as database/sql.DB is
// for a driver); call these functions directly only where the manager's
// checks are not wanted.
package files

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/randhex"
	"github.com/a55dbaac/berth/internal/shellword"
	"github.com/a55dbaac/berth/session"
	"github.com/a55dbaac/berth/terminal"
)

// Limits of the file tools.
const (
	// DefaultReadLimit is how many lines Read returns when no limit is given;
	// it is also the largest limit accepted.
	DefaultReadLimit = 2000
	// MaxLineChars is where Read cuts a long line.
	MaxLineChars = 2000
	// MaxWriteBytes is the largest content Write accepts (and the largest
	// file Patch edits).
	MaxWriteBytes = 50 << 20
	// DefaultSearchLimit is how many results Search returns by default.
	DefaultSearchLimit = 50
	// sampleBytes is how much of a file's start decides whether it is text.
	sampleBytes = 8192
)

// opTimeout bounds one file operation inside the environment when the
// caller's context has no deadline.
const opTimeout = 180 * time.Second

// native reports whether env's backend is this machine's filesystem.
func native(env *terminal.Environment) bool {
	return backend.CapabilitiesOf(env.Backend()).NativeFS
}

// target is a path inside the environment: either absolute, or relative to
// the environment's $HOME (from "~" or "~/...").
type target struct {
	home bool   // relative to $HOME
	rel  string // home: the part after "~/" ("" for ~ itself); else an absolute, clean path
}

// resolve turns a tool's path argument into a target, relative paths being
// taken from the session's current directory.
func resolve(ctx context.Context, env *terminal.Environment, p string) (target, error) {
	if p == "" {
		return target{}, errors.New("path is empty")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return target{}, fmt.Errorf("path %q contains a NUL byte", p)
	}
	if p == "~" {
		return target{home: true}, nil
	}
	if strings.HasPrefix(p, "~/") {
		rel := strings.TrimPrefix(path.Clean("/"+p[2:]), "/")
		return target{home: true, rel: rel}, nil
	}
	if !path.IsAbs(p) {
		if err := env.Session().Start(ctx); err != nil {
			return target{}, fmt.Errorf("start session to resolve %q: %w", p, err)
		}
		cwd := env.Session().Cwd()
		switch {
		case cwd == "":
			return target{}, fmt.Errorf("path %q is relative and the session's directory is unknown; give an absolute path", p)
		case strings.HasPrefix(cwd, "~"):
			return resolve(ctx, env, cwd+"/"+p)
		}
		p = path.Join(cwd, p)
	}
	return target{rel: path.Clean(p)}, nil
}

// String is the path as shown to the model.
func (t target) String() string {
	if t.home {
		if t.rel == "" {
			return "~"
		}
		return "~/" + t.rel
	}
	return t.rel
}

// word is the path as one shell word.
func (t target) word() string {
	if t.home {
		if t.rel == "" {
			return `"$HOME"`
		}
		return `"$HOME"/` + shellword.Quote(t.rel)
	}
	return shellword.Quote(t.rel)
}

// dir is the parent directory.
func (t target) dir() target {
	if t.home {
		if !strings.Contains(t.rel, "/") {
			return target{home: true}
		}
		return target{home: true, rel: path.Dir(t.rel)}
	}
	return target{rel: path.Dir(t.rel)}
}

// base is the last element.
func (t target) base() string {
	if t.home && t.rel == "" {
		return "~"
	}
	return path.Base(t.rel)
}

// isRoot reports whether the target is "/" or "~": it has no parent to
// write a temporary file into.
func (t target) isRoot() bool {
	return t.rel == "/" || t.home && t.rel == ""
}

// hostPath is the path on this machine, for the native fast path.
func (t target) hostPath() (string, error) {
	if !t.home {
		return filepath.FromSlash(t.rel), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("expand ~: %w", err)
	}
	return filepath.Join(home, filepath.FromSlash(t.rel)), nil
}

// lands is where a write to t lands on this machine's files (landing).
func (t target) lands() (string, error) {
	p, err := t.hostPath()
	if err != nil {
		return "", err
	}
	return landing(p)
}

// newTag returns a random marker that no file content or stray output can
// contain by accident.
func newTag() string {
	return "BERTHF" + randhex.String(10)
}

// capWriter keeps at most max bytes and remembers that it overflowed.
type capWriter struct {
	buf      bytes.Buffer
	max      int
	overflow bool
}

func (w *capWriter) Write(p []byte) (int, error) {
	room := w.max - w.buf.Len()
	if len(p) > room {
		w.overflow = true
		if room > 0 {
			w.buf.Write(p[:room])
		}
		return len(p), nil
	}
	w.buf.Write(p)
	return len(p), nil
}

// shellReply is what a file script printed: the status word and fields of
// its tag line, what came before it (error text from failing commands) and
// the payload after it.
type shellReply struct {
	status  string
	fields  []string
	before  string
	payload []byte
}

// parseReply finds the script's tag line in out.
func parseReply(tag string, out []byte) (shellReply, bool) {
	i := bytes.Index(out, []byte("\n"+tag+" "))
	if i < 0 {
		return shellReply{}, false
	}
	rest := out[i+1+len(tag)+1:]
	line, payload, _ := bytes.Cut(rest, []byte("\n"))
	f := strings.Fields(string(line))
	r := shellReply{before: strings.TrimSpace(string(out[:i])), payload: payload}
	if len(f) > 0 {
		r.status, r.fields = f[0], f[1:]
	}
	return r, true
}

// runScript runs a POSIX sh script in the environment's persistent session,
// inside a subshell so it can neither change the session's state nor end
// it, and returns its merged output (at most max bytes).
func runScript(ctx context.Context, env *terminal.Environment, script string, stdin []byte, max int) ([]byte, error) {
	timeout := opTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	out := &capWriter{max: max}
	res, err := env.Session().Run(ctx, session.Request{Command: "(\n" + script + "\n)", Stdin: stdin, Timeout: timeout}, out)
	if err != nil {
		return nil, err
	}
	switch {
	case res.Interrupted:
		return nil, errors.New("interrupted")
	case res.TimedOut:
		return nil, fmt.Errorf("timed out after %s", timeout.Round(time.Second))
	case out.overflow:
		return nil, fmt.Errorf("output exceeded %d bytes", max)
	}
	return out.buf.Bytes(), nil
}

// runHelper runs a POSIX sh script as its own process in the environment,
// streaming stdin to it raw, and returns its output (at most max bytes).
// It costs a process start on the backend (a docker exec, an SSH channel)
// but moves bytes at pipe speed.
func runHelper(ctx context.Context, be backend.Backend, script string, stdin io.Reader, max int) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opTimeout)
		defer cancel()
	}
	// The script reports its own failures in its output; the exit status
	// adds nothing the caller reads.
	out, _, err := backend.Output(ctx, be, backend.ProcSpec{Argv: []string{"/bin/sh", "-c", script, "berth-files"}}, stdin, max)
	if err != nil {
		return nil, fmt.Errorf("helper on %s: %w", be.Name(), err)
	}
	return out, nil
}
