package files

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/a55dbaac/berth/terminal"
)

// ReadResult is the read_file tool's result.
type ReadResult struct {
	// Path is the file read, resolved (absolute, or under ~).
	Path string `json:"path"`
	// Content holds the selected lines as "N|text", N right-aligned to six
	// columns, lines joined by newlines.
	Content string `json:"content"`
	// TotalLines is the file's line count (a last line without a newline
	// counts).
	TotalLines int `json:"total_lines"`
	// FileSize is the file's size in bytes.
	FileSize int64 `json:"file_size"`
	// Truncated reports that lines remain after the ones shown.
	Truncated bool `json:"truncated"`
	// Hint tells how to continue ("use offset=N to continue") and whether
	// long lines were cut.
	Hint string `json:"hint,omitempty"`
}

// maxLineBytes is how many bytes of a line travel from the environment: a
// line of MaxLineChars characters is at most four bytes each.
const maxLineBytes = 4*MaxLineChars + 4

// Read returns up to limit numbered lines of the file at path, starting at
// the 1-based line offset. offset <= 0 means 1; limit <= 0 means
// DefaultReadLimit, and larger limits are clamped to it. Lines longer than
// MaxLineChars characters are cut, a UTF-8 byte order mark is dropped, and
// binary files are refused with their type. A missing file is an error
// naming similar files in the same directory.
//
// On backends other than local it is one shell command: a short header and
// the requested slice.
func Read(ctx context.Context, env *terminal.Environment, path string, offset, limit int) (ReadResult, error) {
	if offset <= 0 {
		offset = 1
	}
	if limit <= 0 || limit > DefaultReadLimit {
		limit = DefaultReadLimit
	}
	t, err := resolve(ctx, env, path)
	if err != nil {
		return ReadResult{}, fmt.Errorf("read_file: %w", err)
	}
	var raw rawRead
	if native(env) {
		raw, err = readNative(t, offset, limit)
	} else {
		raw, err = readShell(ctx, env, t, offset, limit)
	}
	if err != nil {
		return ReadResult{}, fmt.Errorf("read_file: %w", err)
	}
	kind, latin1 := textKind(raw.sample, raw.size > int64(len(raw.sample)))
	if kind != "" {
		return ReadResult{}, fmt.Errorf("read_file: %s is a binary file (%s), not text; inspect it with the terminal (file, xxd, unzip -l ...) instead", t, kind)
	}
	return format(t, raw, offset, limit, latin1), nil
}

// rawRead is what a read brings back from the environment.
type rawRead struct {
	size   int64
	total  int      // line count
	sample []byte   // the first sampleBytes bytes
	lines  [][]byte // the selected lines, each at most maxLineBytes, without "\n"
}

// format numbers the selected lines and builds the result. latin1 decodes
// the lines as Latin-1 instead of UTF-8. Secrets in the lines are redacted
// as in terminal output.
func format(t target, raw rawRead, offset, limit int, latin1 bool) ReadResult {
	var b strings.Builder
	cut := 0
	texts := make([]string, len(raw.lines))
	for i, line := range raw.lines {
		if offset+i == 1 && !latin1 {
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
		}
		if latin1 {
			texts[i] = decodeLatin1(line)
		} else {
			texts[i] = strings.ToValidUTF8(string(line), "\uFFFD")
		}
	}
	texts = redactLines(texts)
	for i, s := range texts {
		n := offset + i
		if utf8.RuneCountInString(s) > MaxLineChars || len(raw.lines[i]) >= maxLineBytes {
			s = string([]rune(s)[:min(MaxLineChars, utf8.RuneCountInString(s))]) + " ... [line truncated]"
			cut++
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%6d|%s", n, s)
	}
	res := ReadResult{Path: t.String(), Content: b.String(), TotalLines: raw.total, FileSize: raw.size}
	var hints []string
	last := offset + len(raw.lines) - 1
	switch {
	case raw.total == 0:
		hints = append(hints, "The file is empty.")
	case offset > raw.total:
		hints = append(hints, fmt.Sprintf("offset %d is past the end of the file (%d lines).", offset, raw.total))
	case last < raw.total:
		res.Truncated = true
		hints = append(hints, fmt.Sprintf("Showing lines %d-%d of %d; use offset=%d to continue.", offset, last, raw.total, last+1))
	}
	if cut > 0 {
		hints = append(hints, fmt.Sprintf("%d line(s) longer than %d characters were cut.", cut, MaxLineChars))
	}
	if latin1 {
		hints = append(hints, latin1Note)
	}
	res.Hint = strings.Join(hints, " ")
	return res
}

// readNative reads a file on this machine.
func readNative(t target, offset, limit int) (rawRead, error) {
	p, err := t.hostPath()
	if err != nil {
		return rawRead{}, err
	}
	f, st, err := openRegular(t, p)
	if err != nil {
		return rawRead{}, err
	}
	defer f.Close()
	raw := rawRead{size: st.Size()}
	sample := make([]byte, sampleBytes)
	n, err := io.ReadFull(f, sample)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return rawRead{}, fmt.Errorf("read %s: %w", t, err)
	}
	raw.sample = sample[:n]
	if bytes.IndexByte(raw.sample, 0) >= 0 {
		return raw, nil // binary; the caller refuses it
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return rawRead{}, fmt.Errorf("read %s: %w", t, err)
	}
	raw.lines, raw.total, err = scanLines(bufio.NewReaderSize(f, 64<<10), offset, limit)
	if err != nil {
		return rawRead{}, fmt.Errorf("read %s: %w", t, err)
	}
	return raw, nil
}

// latin1Note is the read_file hint for a Latin-1 file.
const latin1Note = "The file is not UTF-8; it is shown decoded as Latin-1 (ISO-8859-1), one character per byte, and patch keeps that encoding."

// openRegular opens the regular file at p (a target's host path) for
// reading. Anything else is refused at once: a FIFO, a device or a socket
// would block the read or never end. The type is checked before the open,
// and the open itself does not block (O_NONBLOCK), so a FIFO swapped in
// between is refused too.
func openRegular(t target, p string) (*os.File, fs.FileInfo, error) {
	st, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil, notFound(t, listHostDir(filepath.Dir(p)))
	case err != nil:
		return nil, nil, fmt.Errorf("stat %s: %w", t, unwrapPath(err))
	case st.IsDir():
		return nil, nil, isDir(t)
	case !st.Mode().IsRegular():
		return nil, nil, notRegular(t)
	}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, notFound(t, listHostDir(filepath.Dir(p)))
		}
		return nil, nil, fmt.Errorf("open %s: %w", t, unwrapPath(err))
	}
	st, err = f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("stat %s: %w", t, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		if st.IsDir() {
			return nil, nil, isDir(t)
		}
		return nil, nil, notRegular(t)
	}
	return f, st, nil
}

// scanLines counts every line of r and keeps lines offset..offset+limit-1,
// each cut at maxLineBytes, in bounded memory.
func scanLines(r *bufio.Reader, offset, limit int) ([][]byte, int, error) {
	var lines [][]byte
	n := 0
	var cur []byte
	started := false
	for {
		chunk, err := r.ReadSlice('\n')
		if len(chunk) > 0 {
			started = true
			keep := n+1 >= offset && n+1 < offset+limit
			if keep && len(cur) < maxLineBytes {
				room := maxLineBytes - len(cur)
				c := bytes.TrimSuffix(chunk, []byte("\n"))
				cur = append(cur, c[:min(len(c), room)]...)
			}
			if chunk[len(chunk)-1] == '\n' {
				n++
				if keep {
					lines = append(lines, cur)
				}
				cur, started = nil, false
			}
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if started {
				n++
				if n >= offset && n < offset+limit {
					lines = append(lines, cur)
				}
			}
			return lines, n, nil
		default:
			return nil, 0, err
		}
	}
}

// readScript prints "\nTAG ok LINES BYTES", the file's last byte when it
// is larger than the sample, "\nTAG sample", the first sampleBytes bytes,
// "\nTAG slice" and the selected lines cut at maxLineBytes. A missing file
// prints "missing" and the names in its directory, NUL-terminated. It
// starts as few processes as it can: forks are what a read costs.
// probeScript starts every script that reads an existing file: it answers
// isdir, missing (with the names in the directory, NUL-terminated), nodir,
// special or noperm, and leaves the "else" branch open for the reader.
const probeScript = shellPrologue + `p=%[2]s; d=%[3]s
if [ -d "$p" ]; then printf '\n%%s isdir\n' %[1]s
elif [ ! -e "$p" ]; then
  if [ -d "$d" ]; then
    printf '\n%%s missing\n' %[1]s
    for f in "$d"/* "$d"/.[!.]* "$d"/..?*; do
      if [ -e "$f" ] || [ -L "$f" ]; then printf '%%s\000' "${f##*/}"; fi
    done
  else printf '\n%%s nodir\n' %[1]s; fi
elif [ ! -f "$p" ]; then printf '\n%%s special\n' %[1]s
elif [ ! -r "$p" ]; then printf '\n%%s noperm\n' %[1]s
else
`

const readScript = probeScript + `  set -- $(command wc -lc <"$p")
  printf '\n%%s ok %%s %%s\n' %[1]s "$1" "$2"
  if [ "$2" -gt %[6]d ]; then command tail -c 1 <"$p"; fi
  printf '\n%%s sample\n' %[1]s
  command head -c %[6]d <"$p"
  printf '\n%%s slice\n' %[1]s
  %[4]s | command cut -b 1-%[5]d
fi`

// readShell reads a file through the environment's shell in one round trip.
func readShell(ctx context.Context, env *terminal.Environment, t target, offset, limit int) (rawRead, error) {
	tag := newTag()
	slice := fmt.Sprintf(`command head -n %d <"$p"`, limit)
	if offset > 1 {
		slice = fmt.Sprintf(`command tail -n +%d <"$p" | command head -n %d`, offset, limit)
	}
	script := fmt.Sprintf(readScript, tag, t.word(), t.dir().word(), slice, maxLineBytes, sampleBytes)
	out, err := runScript(ctx, env, script, nil, sampleBytes+limit*(maxLineBytes+1)+64<<10)
	if err != nil {
		return rawRead{}, fmt.Errorf("read %s: %w", t, err)
	}
	r, ok := parseReply(tag, out)
	if !ok {
		return rawRead{}, fmt.Errorf("read %s: unexpected reply from the environment: %q", t, clip(out, 300))
	}
	switch r.status {
	case "isdir":
		return rawRead{}, isDir(t)
	case "missing":
		return rawRead{}, notFound(t, splitNames(r.payload))
	case "nodir":
		return rawRead{}, notFound(t, nil)
	case "special":
		return rawRead{}, notRegular(t)
	case "noperm":
		return rawRead{}, fmt.Errorf("%s: permission denied", t)
	case "ok":
	default:
		return rawRead{}, fmt.Errorf("read %s: unexpected reply %q", t, r.status)
	}
	lines, err1 := strconv.Atoi(firstOr(r.fields, 0))
	size, err2 := strconv.ParseInt(firstOr(r.fields, 1), 10, 64)
	last, rest, ok1 := bytes.Cut(r.payload, []byte("\n"+tag+" sample\n"))
	sample, body, ok2 := bytes.Cut(rest, []byte("\n"+tag+" slice\n"))
	if err := errors.Join(err1, err2); err != nil || len(r.fields) != 2 || !ok1 || !ok2 {
		return rawRead{}, fmt.Errorf("read %s: malformed reply %q", t, clip(r.payload, 200))
	}
	if size <= sampleBytes && len(sample) > 0 {
		last = sample[len(sample)-1:]
	}
	if size > 0 && len(last) == 1 && last[0] != '\n' {
		lines++ // a last line without a newline
	}
	raw := rawRead{size: size, total: lines, sample: sample}
	if len(body) > 0 {
		body = bytes.TrimSuffix(body, []byte("\n"))
		raw.lines = bytes.Split(body, []byte("\n"))
	}
	return raw, nil
}

func firstOr(f []string, i int) string {
	if i < len(f) {
		return f[i]
	}
	return ""
}

// splitNames splits a NUL-terminated name list.
func splitNames(b []byte) []string {
	var names []string
	for _, n := range bytes.Split(b, []byte{0}) {
		if len(n) > 0 {
			names = append(names, string(n))
		}
	}
	return names
}

// listHostDir lists a directory on this machine, for similar-name hints.
func listHostDir(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names
}

// isDir is the error for a directory given where a file was expected.
func isDir(t target) error {
	return fmt.Errorf("%s is a directory, not a file; list it with search_files (target=files) or the terminal", t)
}

// notRegular is the error for a device, FIFO or socket.
func notRegular(t target) error {
	return fmt.Errorf("%s is not a regular file (a device, FIFO or socket); use the terminal for it", t)
}

// notFound is the error for a missing file, naming similar files in its
// directory when there are some. names nil means the directory itself does
// not exist.
func notFound(t target, names []string) error {
	if names == nil {
		return fmt.Errorf("file not found: %s (directory %s does not exist)", t, t.dir())
	}
	similar := similarNames(t.base(), names, 5)
	if len(similar) == 0 {
		return fmt.Errorf("file not found: %s", t)
	}
	return fmt.Errorf("file not found: %s; similar names in %s: %s", t, t.dir(), strings.Join(similar, ", "))
}

// unwrapPath drops the path from an *fs.PathError: the message names the
// path already.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// clip returns at most n bytes of b as a string, for error messages.
func clip(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
