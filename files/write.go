package files

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/shellword"
	"github.com/a55dbaac/berth/terminal"
)

// WriteResult is the write_file tool's result.
type WriteResult struct {
	// Path is the file written, resolved (absolute, or under ~). When the
	// path was a symbolic link, the link's target was written and the link
	// kept.
	Path string `json:"path"`
	// BytesWritten is the size of the new content in bytes.
	BytesWritten int64 `json:"bytes_written"`
	// Created reports that the file did not exist before.
	Created bool `json:"created,omitempty"`
}

// SessionStdinMax is the largest content sent through the session's stdin
// by default. The session hands stdin to the shell as printf escapes, which bash reads
// one byte at a time (about 1.6 µs a byte for text, 5 µs for binary), so
// anything larger goes to a helper process's raw stdin instead, which costs
// one process start on the backend but then moves bytes at pipe speed.
const SessionStdinMax = 16 << 10

// sessionStdinMax is SessionStdinMax unless a test lowers it.
var sessionStdinMax = SessionStdinMax

// Write replaces the file at path with content, atomically: the content
// goes to a temporary file in the same directory which is then renamed over
// the target, so readers see the old or the new file, never a mix. An
// existing file's mode (and, where permitted, owner) is kept; a new file
// gets the environment's umask; missing parent directories are created. A
// symbolic link is followed and its target replaced.
//
// The content never appears in a command line: it travels on a stdin (the
// session's or a helper process's) or through the backend's FileWriter.
// Content larger than MaxWriteBytes is refused.
func Write(ctx context.Context, env *terminal.Env, path, content string) (WriteResult, error) {
	if len(content) > MaxWriteBytes {
		return WriteResult{}, fmt.Errorf("write_file: content is %s; at most %s can be written in one call (write the file in parts with the terminal, or generate it there)",
			mib(len(content)), mib(MaxWriteBytes))
	}
	t, err := resolve(ctx, env, path)
	if err != nil {
		return WriteResult{}, fmt.Errorf("write_file: %w", err)
	}
	if t.isRoot() {
		return WriteResult{}, fmt.Errorf("write_file: %w", isDir(t))
	}
	var res WriteResult
	switch fw, ok := env.Backend().(backend.FileWriter); {
	case native(env):
		res, err = writeNative(t, content)
	case ok && len(content) > sessionStdinMax:
		// Small content rides the session in one round trip; a file API
		// only pays off past that.
		res, err = writeFileWriter(ctx, env, fw, t, content)
		if errors.Is(err, backend.ErrUnsupported) {
			res, err = writeShell(ctx, env, t, content)
		}
	default:
		res, err = writeShell(ctx, env, t, content)
	}
	if err != nil {
		return WriteResult{}, fmt.Errorf("write_file: %w", err)
	}
	return res, nil
}

func mib(n int) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// writeNative writes a file on this machine.
func writeNative(t target, content string) (WriteResult, error) {
	p, err := t.hostPath()
	if err != nil {
		return WriteResult{}, err
	}
	if fi, err := os.Lstat(p); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
	}
	res := WriteResult{Path: t.String(), BytesWritten: int64(len(content))}
	old, err := os.Stat(p)
	switch {
	case err == nil && old.IsDir():
		return WriteResult{}, isDir(t)
	case err == nil && !old.Mode().IsRegular():
		return WriteResult{}, notRegular(t)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return WriteResult{}, fmt.Errorf("stat %s: %w", t, unwrapPath(err))
	case err != nil:
		old = nil
		res.Created = true
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return WriteResult{}, fmt.Errorf("create parent directories of %s: %w", t, unwrapPath(err))
	}
	tmp := filepath.Join(dir, "."+"berth-"+newTag()+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return WriteResult{}, fmt.Errorf("create temporary file in %s: %w", dir, unwrapPath(err))
	}
	_, err = f.WriteString(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && old != nil {
		err = os.Chmod(tmp, old.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
		if st, ok := old.Sys().(*syscall.Stat_t); ok {
			_ = os.Lchown(tmp, int(st.Uid), int(st.Gid)) // best effort: only root may give files away
		}
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
		return WriteResult{}, fmt.Errorf("write %s: %w", t, unwrapPath(err))
	}
	return res, nil
}

// writePrelude resolves a symbolic link, refuses a directory and creates
// the parent directories; it leaves the real path in $p, its directory in
// $d, the old mode and owner in $m and $o, and $new = 1 for a new file.
// Like every file script it starts as few processes as it can.
const writePrelude = `exec 2>&1
p=%[2]s
if [ -L "$p" ]; then q=$(command readlink -f "$p") && [ -n "$q" ] && p=$q; fi
d=${p%%/*}; [ -n "$d" ] || d=/
if [ -d "$p" ]; then printf '\n%%s isdir\n' %[1]s; exit 1; fi
if [ ! -d "$d" ]; then command mkdir -p "$d" || { printf '\n%%s mkdir\n' %[1]s; exit 1; }; fi
m=; o=; new=1
if [ -e "$p" ]; then
  new=0
  if [ ! -f "$p" ]; then printf '\n%%s special\n' %[1]s; exit 1; fi
  set -- $(command stat -c '%%a %%u:%%g' "$p" 2>/dev/null); m=${1-}; o=${2-}
fi
t="$d/.berth-%[1]s.tmp"
`

// writeCommit moves the filled temporary file into place and prints
// "ok SIZE NEW" and the real path. SIZE is measured (wc) when $check is
// set, for transports that could deliver a short file.
const writeCommit = `if [ -n "$m" ]; then command chmod "$m" "$t"; fi
if [ -n "$o" ]; then command chown "$o" "$t" 2>/dev/null; fi
n=-
if [ -n "$check" ]; then n=$(( $(command wc -c <"$t") )); fi
command mv -f "$t" "$p" || { command rm -f "$t"; printf '\n%%s rename\n' %[1]s; exit 1; }
printf '\n%%s ok %%s %%s\n%%s' %[1]s "$n" "$new" "$p"
`

// writeFill fills the temporary file from stdin.
const writeFill = `command cat >"$t" || { command rm -f "$t"; printf '\n%%s fill\n' %[1]s; exit 1; }
`

// writeShell writes through the shell: small content on the session's
// stdin (one round trip), large content on a helper process's raw stdin.
func writeShell(ctx context.Context, env *terminal.Env, t target, content string) (WriteResult, error) {
	tag := newTag()
	var out []byte
	var err error
	if len(content) <= sessionStdinMax {
		// The session's stdin is a complete file before the command runs.
		script := fmt.Sprintf(writePrelude+writeFill+"check=\n"+writeCommit, tag, t.word())
		out, err = runScript(ctx, env, script, []byte(content), 64<<10)
	} else {
		script := fmt.Sprintf(writePrelude+writeFill+"check=1\n"+writeCommit, tag, t.word())
		out, err = runHelper(ctx, env.Backend(), script, strings.NewReader(content), 64<<10)
	}
	if err != nil {
		return WriteResult{}, fmt.Errorf("write %s: %w", t, err)
	}
	return writeReply(t, tag, out, len(content))
}

// writeReply interprets the reply of a write script.
func writeReply(t target, tag string, out []byte, size int) (WriteResult, error) {
	r, ok := parseReply(tag, out)
	if !ok {
		return WriteResult{}, fmt.Errorf("write %s: unexpected reply from the environment: %q", t, clip(out, 300))
	}
	detail := ""
	if r.before != "" {
		detail = ": " + lastLines(r.before, 3)
	}
	switch r.status {
	case "ok":
	case "isdir":
		return WriteResult{}, isDir(t)
	case "special":
		return WriteResult{}, notRegular(t)
	case "mkdir":
		return WriteResult{}, fmt.Errorf("create parent directories of %s%s", t, detail)
	case "fill", "rename":
		return WriteResult{}, fmt.Errorf("write %s%s", t, detail)
	default:
		return WriteResult{}, fmt.Errorf("write %s: unexpected reply %q%s", t, r.status, detail)
	}
	if len(r.fields) != 2 {
		return WriteResult{}, fmt.Errorf("write %s: malformed reply %q", t, r.fields)
	}
	n, err := strconv.ParseInt(r.fields[0], 10, 64)
	if r.fields[0] == "-" {
		n, err = int64(size), nil
	}
	if err != nil || n != int64(size) {
		return WriteResult{}, fmt.Errorf("write %s: %s bytes arrived of %d", t, r.fields[0], size)
	}
	return WriteResult{Path: t.String(), BytesWritten: n, Created: r.fields[1] == "1"}, nil
}

// writeFileWriter writes through the backend's file API: the shell prepares
// (directories, mode) and commits (rename), the bytes go through fw.
func writeFileWriter(ctx context.Context, env *terminal.Env, fw backend.FileWriter, t target, content string) (WriteResult, error) {
	tag := newTag()
	prep := fmt.Sprintf(writePrelude+"printf '\\n%%s ok %%s %%s %%s\\n%%s' %[1]s \"${m:--}\" \"${o:--}\" \"$new\" \"$p\"\n", tag, t.word())
	out, err := runScript(ctx, env, prep, nil, 64<<10)
	if err != nil {
		return WriteResult{}, fmt.Errorf("write %s: %w", t, err)
	}
	r, ok := parseReply(tag, out)
	if !ok || r.status != "ok" {
		_, err := writeReply(t, tag, out, len(content))
		return WriteResult{}, err
	}
	if len(r.fields) != 3 {
		return WriteResult{}, fmt.Errorf("write %s: malformed reply %q", t, r.fields)
	}
	real := string(r.payload)
	dir := real[:strings.LastIndexByte(real, '/')+1]
	if dir == "" {
		return WriteResult{}, fmt.Errorf("write %s: environment resolved it to the relative path %q", t, real)
	}
	tmp := dir + ".berth-" + tag + ".tmp"
	if err := fw.WriteFile(ctx, tmp, strings.NewReader(content), int64(len(content)), 0o666); err != nil {
		if errors.Is(err, backend.ErrUnsupported) {
			return WriteResult{}, err // the caller falls back to the shell
		}
		return WriteResult{}, fmt.Errorf("write %s through the %s file API: %w", t, env.Backend().Name(), err)
	}
	m, o := r.fields[0], r.fields[1]
	if m == "-" {
		m = ""
	}
	if o == "-" {
		o = ""
	}
	// The FileWriter contract guarantees exactly size bytes, so the commit
	// does not re-count them (busybox wc reads the whole file to do so).
	commit := fmt.Sprintf("exec 2>&1\np=%[2]s; t=%[3]s; m=%[4]s; o=%[5]s; new=%[6]s; check=\n"+writeCommit,
		tag, shellword.Quote(real), shellword.Quote(tmp), shellword.Quote(m), shellword.Quote(o), shellword.Quote(r.fields[2]))
	out, err = runScript(ctx, env, commit, nil, 64<<10)
	if err != nil {
		return WriteResult{}, fmt.Errorf("write %s: %w", t, err)
	}
	return writeReply(t, tag, out, len(content))
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.TrimSpace(strings.Join(lines, "; "))
}
