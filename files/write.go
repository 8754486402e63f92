package files

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

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

// A Check approves a write before anything is written. path is the file
// as the write names it, absolute; on a backend whose files are this
// machine's (Capabilities.NativeFS), lands is where the write will land
// once every symbolic link is followed, and the write then goes there and
// nowhere else: it follows no link after the check, and fails when one
// appears on the way. Elsewhere lands is "" (the environment resolves the
// path itself). An error stops the write and is returned as it is.
type Check func(path, lands string) error

// A WriteOption configures Write and Patch.
type WriteOption func(*writeOptions)

type writeOptions struct {
	check Check
}

// WithCheck has the write approved by c before anything is written (the
// manager's approval gate).
func WithCheck(c Check) WriteOption {
	return func(o *writeOptions) { o.check = c }
}

// checkErr carries a Check's error through the write unchanged.
type checkErr struct{ err error }

func (e checkErr) Error() string { return e.err.Error() }

// approve runs the check of o, if any.
func (o *writeOptions) approve(path, lands string) error {
	if o.check == nil {
		return nil
	}
	if err := o.check(path, lands); err != nil {
		return checkErr{err}
	}
	return nil
}

// Write replaces the file at path with content, atomically: the content
// goes to a temporary file in the same directory which is then renamed over
// the target, so readers see the old or the new file, never a mix. An
// existing file's mode (and, where permitted, owner) is kept; a new file
// gets the environment's umask; missing parent directories are created. A
// symbolic link is followed and its target replaced. WithCheck has the
// write approved first; on this machine's files the write then lands
// where the check was told (see Check).
//
// The content never appears in a command line: it travels on a stdin (the
// session's or a helper process's) or through the backend's FileWriter.
// Content larger than MaxWriteBytes is refused.
func Write(ctx context.Context, env *terminal.Environment, path, content string, opts ...WriteOption) (WriteResult, error) {
	if len(content) > MaxWriteBytes {
		return WriteResult{}, fmt.Errorf("write_file: content is %s; at most %s can be written in one call (write the file in parts with the terminal, or generate it there)",
			mib(len(content)), mib(MaxWriteBytes))
	}
	var o writeOptions
	for _, opt := range opts {
		opt(&o)
	}
	t, err := resolve(ctx, env, path)
	if err != nil {
		return WriteResult{}, fmt.Errorf("write_file: %w", err)
	}
	var lands string
	if native(env) {
		if lands, err = t.lands(); err != nil {
			return WriteResult{}, fmt.Errorf("write_file: %w", err)
		}
	}
	res, err := write(ctx, env, t, lands, content, &o)
	if ce, ok := err.(checkErr); ok {
		return WriteResult{}, ce.err
	}
	if err != nil {
		return WriteResult{}, fmt.Errorf("write_file: %w", err)
	}
	return res, nil
}

// write writes content to t, whose landing lands is resolved on a native
// backend ("" elsewhere), after o approved it. A check's refusal comes
// back as a checkErr.
func write(ctx context.Context, env *terminal.Environment, t target, lands, content string, o *writeOptions) (WriteResult, error) {
	if t.isRoot() {
		return WriteResult{}, isDir(t)
	}
	if err := keepsSecrets(ctx, env, t, content); err != nil {
		return WriteResult{}, err
	}
	if native(env) {
		p, err := t.hostPath()
		if err != nil {
			return WriteResult{}, err
		}
		if err := o.approve(p, lands); err != nil {
			return WriteResult{}, err
		}
		return writeAt(t, lands, content)
	}
	if err := o.approve(t.String(), ""); err != nil {
		return WriteResult{}, err
	}
	fw, ok := env.Backend().(backend.FileWriter)
	if ok && len(content) > sessionStdinMax {
		// Small content rides the session in one round trip; a file API
		// only pays off past that.
		res, err := writeFileWriter(ctx, env, fw, t, content)
		if !errors.Is(err, backend.ErrUnsupported) {
			return res, err
		}
	}
	return writeShell(ctx, env, t, content)
}

func mib(n int) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// shellPrologue starts every file script. The scripts run in a subshell
// of the user's session, so they inherit its options and functions:
//   - POSIXLY_CORRECT=1 (an assignment, which no function can shadow) puts
//     bash in POSIX mode, where the special builtins (set, unset, exec,
//     exit, ...) are found before functions of the same name; dash and
//     busybox ash do so always and refuse to define such functions;
//   - it turns off the options that would break the scripts (errexit,
//     noclobber, nounset, xtrace) and restores the default IFS their word
//     splitting needs;
//   - it drops the functions that would shadow the builtins the scripts
//     call by name: [ and test (a `[` that always fails made a write report
//     success for a file that was never renamed into place, N13), command,
//     printf, cd, and the special builtins themselves. In bash, unset -f
//     fails only for a readonly function, which cannot be dropped: the
//     script then repeats the unset to show bash's complaint and exits, so
//     the tool reports an error instead of a false result. (zsh and ksh93
//     fail unset -f for names that are no functions; they go on.)
//
// Every other command the scripts run is called through `command`.
const shellPrologue = "POSIXLY_CORRECT=1; set +eCux 2>/dev/null; IFS=' \t\n'; " +
	"unset -f unset set exec exit command printf cd [ test 2>/dev/null || " +
	"case ${BASH_VERSION-} in ?*) unset -f unset set exec exit command printf cd [ test; exit 125 ;; esac\n"

// writePrelude resolves a symbolic link, refuses a directory and creates
// the parent directories; it leaves the real path in $p, its directory in
// $d, the old mode and owner in $m and $o, and $new = 1 for a new file.
// Like every file script it starts as few processes as it can.
const writePrelude = shellPrologue + `exec 2>&1
p=%[2]s
if [ -L "$p" ]; then
  q=$(command readlink -f "$p" 2>/dev/null); i=0
  while [ -z "$q" ] && [ -L "$p" ] && [ "$i" -lt 40 ]; do
    # A dangling link (readlink -f gives up when the target's directory
    # is missing too): one hop at a time, so the write creates the
    # target and keeps the link.
    q=$(command readlink "$p") || break
    case $q in /*) ;; *) q=${p%%/*}/$q ;; esac
    p=$q; q=; i=$((i + 1))
  done
  [ -n "$q" ] && p=$q
fi
d=${p%%/*}; [ -n "$d" ] || d=/
if [ -d "$p" ]; then printf '\n%%s isdir\n' %[1]s; exit 1; fi
if [ ! -d "$d" ]; then command mkdir -p "$d" || { printf '\n%%s mkdir\n' %[1]s; exit 1; }; fi
m=; o=; new=1
if [ -e "$p" ]; then
  new=0
  if [ ! -f "$p" ]; then printf '\n%%s special\n' %[1]s; exit 1; fi
  set -- $(command stat -c '%%a %%u:%%g' "$p" 2>/dev/null); m=${1-}; o=${2-}
fi
t="$d/.berth-%[1]s.tmp"; inplace=
if [ "$new" = 0 ] && [ ! -w "$d" ] && [ -w "$p" ]; then
  # The directory is not writable but the file is, as for echo >file:
  # write it in place (not atomic, same inode and mode).
  t=$p; inplace=1
fi
`

// writeCommit moves the filled temporary file into place and prints
// "ok SIZE NEW" and the real path. SIZE is always measured and compared
// with $want, the size sent: a transport or a shell option that delivered
// a short, empty or stale file fails loudly ("short SIZE"), and the old
// file stays as it was.
const writeCommit = `if [ -z "$inplace" ]; then
  if [ -n "$m" ]; then command chmod "$m" "$t"; fi
  if [ -n "$o" ]; then command chown "$o" "$t" 2>/dev/null; fi
fi
n=$(command stat -c %%s "$t" 2>/dev/null) || n=$(( $(command wc -c <"$t") ))
if [ "$n" != "$want" ]; then
  [ -n "$inplace" ] || command rm -f "$t"
  printf '\n%%s short %%s %%s\n' %[1]s "$n" "$inplace"; exit 1
fi
if [ -z "$inplace" ]; then
  command mv -f "$t" "$p" || { command rm -f "$t"; printf '\n%%s rename\n' %[1]s; exit 1; }
fi
printf '\n%%s ok %%s %%s\n%%s' %[1]s "$n" "$new" "$p"
`

// writeFill fills the temporary file (or, in place, the file) from stdin;
// >| because the user's shell may have set noclobber.
const writeFill = `command cat >|"$t" || { [ -n "$inplace" ] || command rm -f "$t"; printf '\n%%s fill\n' %[1]s; exit 1; }
`

// writeShell writes through the shell: small content on the session's
// stdin (one round trip), large content on a helper process's raw stdin.
func writeShell(ctx context.Context, env *terminal.Environment, t target, content string) (WriteResult, error) {
	tag := newTag()
	var out []byte
	var err error
	script := fmt.Sprintf(writePrelude+writeFill+"want=%[3]d\n"+writeCommit, tag, t.word(), len(content))
	if len(content) <= sessionStdinMax {
		// The session's stdin is a complete file before the command runs.
		out, err = runScript(ctx, env, script, []byte(content), 64<<10)
	} else {
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
	case "short":
		got := firstOr(r.fields, 0)
		if len(r.fields) > 1 && r.fields[1] == "1" {
			return WriteResult{}, fmt.Errorf("write %s: only %s of the %d bytes sent arrived, and the file was written in place, so it now holds them; write it again", t, got, size)
		}
		return WriteResult{}, fmt.Errorf("write %s: only %s of the %d bytes sent arrived; the file was left as it was", t, got, size)
	default:
		return WriteResult{}, fmt.Errorf("write %s: unexpected reply %q%s", t, r.status, detail)
	}
	if len(r.fields) != 2 {
		return WriteResult{}, fmt.Errorf("write %s: malformed reply %q", t, r.fields)
	}
	n, err := strconv.ParseInt(r.fields[0], 10, 64)
	if err != nil || n != int64(size) {
		return WriteResult{}, fmt.Errorf("write %s: the file holds %q bytes, not the %d sent; it is not what was asked for, so check it and write again", t, r.fields[0], size)
	}
	return WriteResult{Path: t.String(), BytesWritten: n, Created: r.fields[1] == "1"}, nil
}

// writeFileWriter writes through the backend's file API: the shell prepares
// (directories, mode) and commits (rename), the bytes go through fw.
func writeFileWriter(ctx context.Context, env *terminal.Environment, fw backend.FileWriter, t target, content string) (WriteResult, error) {
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
	commit := fmt.Sprintf(shellPrologue+"exec 2>&1\np=%[2]s; t=%[3]s; m=%[4]s; o=%[5]s; new=%[6]s; want=%[7]d; inplace=\n"+writeCommit,
		tag, shellword.Quote(real), shellword.Quote(tmp), shellword.Quote(m), shellword.Quote(o), shellword.Quote(r.fields[2]), len(content))
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
