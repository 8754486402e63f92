package backendtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"github.com/a55dbaac/berth/files"
	"github.com/a55dbaac/berth/internal/randhex"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/internal/shellword"
	"github.com/a55dbaac/berth/terminal"
)

// RunFiles runs the file tools' behavioural suite (the Files group of Run)
// in env. Run calls it for every backend; package files calls it for its
// own variants of the local environment. The suite needs a POSIX sh
// and busybox-level tools in the environment (mktemp, stat, sha256sum, ln,
// chmod) and a writable /tmp and $HOME. One environment serves the whole
// suite; each test works in its own temporary directory.
func RunFiles(t *testing.T, env *terminal.Environment) {
	c := &conf{env: env}
	for _, tc := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"ReadNumberedLines", c.testReadNumbered},
		{"ReadOffsetLimitHint", c.testReadOffsetLimit},
		{"ReadLongLinesCut", c.testReadLongLines},
		{"ReadBOMStripped", c.testReadBOM},
		{"ReadEdges", c.testReadEdges},
		{"ReadBinaryRefused", c.testReadBinary},
		{"ReadMissingSuggestsNames", c.testReadMissing},
		{"ReadDirectoryRefused", c.testReadDir},
		{"TildeExpandsInEnvironment", c.testTilde},
		{"RelativePathsUseSessionCwd", c.testRelative},
		{"WriteKeepsModeAndIsAtomic", c.testWriteMode},
		{"WriteNewFileUsesUmask", c.testWriteNewMode},
		{"WriteCreatesParents", c.testWriteParents},
		{"WriteFollowsSymlink", c.testWriteSymlink},
		{"WriteExactBytes", c.testWriteExact},
		{"WriteLarge", c.testWriteLarge},
		{"WriteTooLargeRefused", c.testWriteTooLarge},
		{"ContentIsNeverInterpreted", c.testNotInterpreted},
		{"StrangePaths", c.testStrangePaths},
		{"PatchUniqueWithDiff", c.testPatch},
		{"PatchNotFoundShowsClosest", c.testPatchNotFound},
		{"PatchAmbiguousAndReplaceAll", c.testPatchAmbiguous},
		{"PatchKeepsMode", c.testPatchMode},
		{"PatchCRLF", c.testPatchCRLF},
		{"SearchContent", c.testSearchContent},
		{"SearchContext", c.testSearchContext},
		{"SearchPagination", c.testSearchPagination},
		{"SearchFiles", c.testSearchFiles},
		{"SearchErrors", c.testSearchErrors},
	} {
		t.Run(tc.name, tc.fn)
	}
}

type conf struct {
	env *terminal.Environment
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// sh runs a command in the environment and returns its output; a non-zero
// exit fails the test.
func (c *conf) sh(t *testing.T, cmd string) string {
	t.Helper()
	r := c.env.Run(ctxT(t), terminal.Request{Command: cmd, Timeout: 60})
	if r.Error != nil || r.ExitCode != 0 {
		errText := ""
		if r.Error != nil {
			errText = *r.Error
		}
		t.Fatalf("command %q: exit %d, error %q, output %q", cmd, r.ExitCode, errText, r.Output)
	}
	return r.Output
}

// scratch makes a fresh directory in the environment, removed after the
// test.
func (c *conf) scratch(t *testing.T) string {
	t.Helper()
	dir := strings.TrimSpace(c.sh(t, "mktemp -d /tmp/berth-files.XXXXXX"))
	t.Cleanup(func() {
		c.env.Run(context.Background(), terminal.Request{Command: "rm -rf " + shellword.Quote(dir), Timeout: 60})
	})
	return dir
}

func (c *conf) write(t *testing.T, p, content string) files.WriteResult {
	t.Helper()
	r, err := files.Write(ctxT(t), c.env, p, content)
	if err != nil {
		t.Fatalf("files.Write(%q): %v", p, err)
	}
	return r
}

func (c *conf) read(t *testing.T, p string, offset, limit int) files.ReadResult {
	t.Helper()
	r, err := files.Read(ctxT(t), c.env, p, offset, limit)
	if err != nil {
		t.Fatalf("files.Read(%q): %v", p, err)
	}
	return r
}

// sum is the SHA-256 of a file inside the environment.
func (c *conf) sum(t *testing.T, p string) string {
	t.Helper()
	return strings.Fields(c.sh(t, "sha256sum <"+shellword.Quote(p)))[0]
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not contain %q", err, p)
		}
	}
}

func numbered(from int, lines ...string) string {
	var b []string
	for i, l := range lines {
		b = append(b, fmt.Sprintf("%6d|%s", from+i, l))
	}
	return strings.Join(b, "\n")
}

func (c *conf) testReadNumbered(t *testing.T) {
	d := c.scratch(t)
	c.sh(t, "printf 'alpha\\nbeta\\n\\ngamma\\n' >"+shellword.Quote(d+"/a.txt"))
	r := c.read(t, d+"/a.txt", 0, 0)
	if want := numbered(1, "alpha", "beta", "", "gamma"); r.Content != want {
		t.Fatalf("content %q, want %q", r.Content, want)
	}
	if r.TotalLines != 4 || r.Truncated || r.Path != d+"/a.txt" || r.FileSize != 18 {
		t.Fatalf("result %+v: want 4 lines, not truncated, path %s, 18 bytes", r, d+"/a.txt")
	}
}

func (c *conf) testReadOffsetLimit(t *testing.T) {
	d := c.scratch(t)
	p := d + "/n.txt"
	c.sh(t, "i=1; while [ $i -le 2500 ]; do echo line$i; i=$((i+1)); done >"+shellword.Quote(p))
	r := c.read(t, p, 3, 4)
	if want := numbered(3, "line3", "line4", "line5", "line6"); r.Content != want {
		t.Fatalf("content %q, want %q", r.Content, want)
	}
	if !r.Truncated || r.TotalLines != 2500 || !strings.Contains(r.Hint, "use offset=7 to continue") {
		t.Fatalf("result %+v: want truncated, 2500 lines, hint with offset=7", r)
	}
	r = c.read(t, p, 1, 100000)
	if n := strings.Count(r.Content, "\n") + 1; n != files.DefaultReadLimit || !strings.Contains(r.Hint, "offset=2001") {
		t.Fatalf("limit 100000 gave %d lines, hint %q; want %d lines and offset=2001", n, r.Hint, files.DefaultReadLimit)
	}
	r = c.read(t, p, 2401, 0)
	if n := strings.Count(r.Content, "\n") + 1; n != 100 || r.Truncated || !strings.HasSuffix(r.Content, "2500|line2500") {
		t.Fatalf("tail read: %d lines, truncated %v, ends %q", n, r.Truncated, r.Content[max(0, len(r.Content)-30):])
	}
	r = c.read(t, p, 3000, 0)
	if r.Content != "" || !strings.Contains(r.Hint, "past the end") {
		t.Fatalf("read past end: %+v", r)
	}
}

func (c *conf) testReadLongLines(t *testing.T) {
	d := c.scratch(t)
	long := strings.Repeat("é", 2500)
	c.write(t, d+"/long.txt", "short\n"+long+"\nafter\n")
	r := c.read(t, d+"/long.txt", 0, 0)
	lines := strings.Split(r.Content, "\n")
	if len(lines) != 3 || lines[2] != fmt.Sprintf("%6d|after", 3) {
		t.Fatalf("lines %q", lines)
	}
	want := fmt.Sprintf("%6d|", 2) + strings.Repeat("é", files.MaxLineChars)
	if !strings.HasPrefix(lines[1], want) || strings.Count(lines[1], "é") != files.MaxLineChars || !strings.Contains(lines[1], "truncated") {
		t.Fatalf("long line not cut at %d characters: %d é, %q...", files.MaxLineChars, strings.Count(lines[1], "é"), lines[1][len(lines[1])-40:])
	}
	if !strings.Contains(r.Hint, "cut") {
		t.Fatalf("hint %q does not mention the cut line", r.Hint)
	}
}

func (c *conf) testReadBOM(t *testing.T) {
	d := c.scratch(t)
	c.write(t, d+"/bom.txt", "\ufeffhello\nworld\n")
	r := c.read(t, d+"/bom.txt", 0, 0)
	if want := numbered(1, "hello", "world"); r.Content != want {
		t.Fatalf("content %q, want %q", r.Content, want)
	}
}

func (c *conf) testReadEdges(t *testing.T) {
	d := c.scratch(t)
	c.write(t, d+"/nonl.txt", "a\nb")
	if r := c.read(t, d+"/nonl.txt", 0, 0); r.TotalLines != 2 || r.Content != numbered(1, "a", "b") {
		t.Fatalf("no trailing newline: %+v", r)
	}
	c.write(t, d+"/empty.txt", "")
	if r := c.read(t, d+"/empty.txt", 0, 0); r.TotalLines != 0 || r.Content != "" || !strings.Contains(r.Hint, "empty") {
		t.Fatalf("empty file: %+v", r)
	}
	c.write(t, d+"/blank.txt", "\n\n")
	if r := c.read(t, d+"/blank.txt", 2, 0); r.TotalLines != 2 || r.Content != numbered(2, "") {
		t.Fatalf("blank lines from offset 2: %+v", r)
	}
	c.write(t, d+"/crlf.txt", "x\r\ny\r\n")
	if r := c.read(t, d+"/crlf.txt", 0, 0); r.TotalLines != 2 || !strings.HasPrefix(r.Content, fmt.Sprintf("%6d|x", 1)) {
		t.Fatalf("CRLF file: %+v", r)
	}
}

func (c *conf) testReadBinary(t *testing.T) {
	d := c.scratch(t)
	for name, data := range map[string]string{
		"PNG":  "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
		"JPEG": "\xff\xd8\xff\xe0\x00\x10JFIF",
		"GIF":  "GIF89a\x01\x00\x01\x00",
		"PDF":  "%PDF-1.7\n%\xe2\xe3\xcf\xd3\n",
		"ZIP":  "PK\x03\x04\x14\x00\x00\x00",
		"gzip": "\x1f\x8b\x08\x00\x00\x00\x00\x00",
		"ELF":  "\x7fELF\x02\x01\x01\x00\x00\x00",
		"NUL":  "text\x00more text",
		"UTF":  "\x01\x02\x03caf\xe9\x04\x05\x06 au lait\n", // neither UTF-8 nor plausible Latin-1 text
	} {
		p := d + "/bin-" + name
		c.write(t, p, data)
		_, err := files.Read(ctxT(t), c.env, p, 0, 0)
		switch name {
		case "NUL":
			wantErr(t, err, "binary", "NUL")
		case "UTF":
			wantErr(t, err, "binary", "neither UTF-8 nor Latin-1")
		default:
			wantErr(t, err, "binary", name)
		}
	}
	// A text file whose 8 KiB sample ends inside a multi-byte character is
	// still text.
	c.write(t, d+"/multi.txt", "a"+strings.Repeat("€", 4000))
	if _, err := files.Read(ctxT(t), c.env, d+"/multi.txt", 0, 0); err != nil {
		t.Fatalf("text file with a character across the 8 KiB boundary: %v", err)
	}
}

func (c *conf) testReadMissing(t *testing.T) {
	d := c.scratch(t)
	c.write(t, d+"/config.yaml", "a: 1\n")
	c.write(t, d+"/unrelated.bin.txt", "x")
	_, err := files.Read(ctxT(t), c.env, d+"/confg.yaml", 0, 0)
	wantErr(t, err, "not found", d+"/confg.yaml", "config.yaml")
	if strings.Contains(err.Error(), "unrelated") {
		t.Fatalf("error %q suggests an unrelated name", err)
	}
	_, err = files.Read(ctxT(t), c.env, d+"/zzzzzz", 0, 0)
	wantErr(t, err, "not found")
	if strings.Contains(err.Error(), "similar") {
		t.Fatalf("error %q suggests names for a name with no similar one", err)
	}
	_, err = files.Read(ctxT(t), c.env, d+"/nodir/x.txt", 0, 0)
	wantErr(t, err, "not found", "does not exist")
}

func (c *conf) testReadDir(t *testing.T) {
	d := c.scratch(t)
	_, err := files.Read(ctxT(t), c.env, d, 0, 0)
	wantErr(t, err, "is a directory")
	_, err = files.Write(ctxT(t), c.env, d, "x")
	wantErr(t, err, "is a directory")
}

func (c *conf) testTilde(t *testing.T) {
	sub := ".berth-files-" + randhex.String(4)
	t.Cleanup(func() {
		c.env.Run(context.Background(), terminal.Request{Command: `rm -rf "$HOME"/` + shellword.Quote(sub), Timeout: 60})
	})
	r := c.write(t, "~/"+sub+"/t.txt", "home sweet home\n")
	if r.Path != "~/"+sub+"/t.txt" || !r.Created {
		t.Fatalf("write result %+v", r)
	}
	if got := c.sh(t, `cat "$HOME"/`+shellword.Quote(sub+"/t.txt")); got != "home sweet home" {
		t.Fatalf("file in $HOME holds %q", got)
	}
	if rr := c.read(t, "~/"+sub+"/t.txt", 0, 0); rr.Content != numbered(1, "home sweet home") {
		t.Fatalf("read ~ path: %+v", rr)
	}
	if _, err := files.Patch(ctxT(t), c.env, "~/"+sub+"/t.txt", "sweet", "dear", false); err != nil {
		t.Fatal(err)
	}
	s, err := files.Search(ctxT(t), c.env, files.SearchRequest{Pattern: "dear", Path: "~/" + sub, Target: "content"})
	if err != nil || s.Total != 1 {
		t.Fatalf("search under ~: %+v %v", s, err)
	}
}

func (c *conf) testRelative(t *testing.T) {
	d := c.scratch(t)
	before := strings.TrimSpace(c.sh(t, "pwd"))
	c.sh(t, "cd "+shellword.Quote(d))
	t.Cleanup(func() { c.env.Run(context.Background(), terminal.Request{Command: "cd " + shellword.Quote(before)}) })
	r := c.write(t, "sub/rel.txt", "relative\n")
	if r.Path != d+"/sub/rel.txt" {
		t.Fatalf("relative write resolved to %q, want %q", r.Path, d+"/sub/rel.txt")
	}
	if got := c.sh(t, "cat "+shellword.Quote(d+"/sub/rel.txt")); got != "relative" {
		t.Fatalf("file holds %q", got)
	}
	if rr := c.read(t, "sub/rel.txt", 0, 0); rr.Content != numbered(1, "relative") {
		t.Fatalf("relative read %+v", rr)
	}
	if _, err := files.Patch(ctxT(t), c.env, "./sub/../sub/rel.txt", "relative", "patched", false); err != nil {
		t.Fatal(err)
	}
	s, err := files.Search(ctxT(t), c.env, files.SearchRequest{Pattern: "patched", Target: "content"})
	if err != nil || s.Total != 1 || s.Matches[0].Path != d+"/sub/rel.txt" {
		t.Fatalf("search in the session's cwd: %+v %v", s, err)
	}
}

func (c *conf) testWriteMode(t *testing.T) {
	d := c.scratch(t)
	p := d + "/script.sh"
	c.sh(t, "echo old >"+shellword.Quote(p)+" && chmod 751 "+shellword.Quote(p))
	r := c.write(t, p, "#!/bin/sh\necho new\n")
	if r.Created || r.BytesWritten != 19 {
		t.Fatalf("result %+v: want created false, 19 bytes", r)
	}
	if m := strings.TrimSpace(c.sh(t, "stat -c %a "+shellword.Quote(p))); m != "751" {
		t.Fatalf("mode %s after write, want 751", m)
	}
	if got := c.sh(t, "ls -A "+shellword.Quote(d)); got != "script.sh" {
		t.Fatalf("directory holds %q after write; want only script.sh (no temporary files)", got)
	}
	if got := c.sh(t, shellword.Quote(p)); got != "new" {
		t.Fatalf("script prints %q", got)
	}
}

func (c *conf) testWriteNewMode(t *testing.T) {
	d := c.scratch(t)
	c.write(t, d+"/new.txt", "x")
	umask := strings.TrimSpace(c.sh(t, "umask"))
	var u int
	fmt.Sscanf(umask, "%o", &u)
	want := fmt.Sprintf("%o", 0o666&^u)
	if m := strings.TrimSpace(c.sh(t, "stat -c %a "+shellword.Quote(d+"/new.txt"))); m != want {
		t.Fatalf("new file mode %s, want %s (0666 with umask %s)", m, want, umask)
	}
}

func (c *conf) testWriteParents(t *testing.T) {
	d := c.scratch(t)
	r := c.write(t, d+"/a/b/c/deep.txt", "deep\n")
	if !r.Created || r.Path != d+"/a/b/c/deep.txt" {
		t.Fatalf("result %+v", r)
	}
	if got := c.sh(t, "cat "+shellword.Quote(d+"/a/b/c/deep.txt")); got != "deep" {
		t.Fatalf("file holds %q", got)
	}
}

func (c *conf) testWriteSymlink(t *testing.T) {
	d := c.scratch(t)
	c.sh(t, "cd "+shellword.Quote(d)+" && echo old >real.txt && ln -s real.txt link.txt && cd /")
	c.write(t, d+"/link.txt", "via link\n")
	if got := c.sh(t, "cat "+shellword.Quote(d+"/real.txt")); got != "via link" {
		t.Fatalf("link target holds %q", got)
	}
	c.sh(t, "test -L "+shellword.Quote(d+"/link.txt"))
}

func (c *conf) testWriteExact(t *testing.T) {
	d := c.scratch(t)
	var all strings.Builder
	for i := 0; i < 256; i++ {
		all.WriteByte(byte(i))
	}
	content := all.String() + "\n'\"$HOME`\\\n%s%b\\0101" + all.String()
	r := c.write(t, d+"/bytes.bin", content)
	if r.BytesWritten != int64(len(content)) {
		t.Fatalf("bytes_written %d, want %d", r.BytesWritten, len(content))
	}
	if got := c.sum(t, d+"/bytes.bin"); got != sha(content) {
		t.Fatalf("content differs after write (sha256 %s, want %s)", got, sha(content))
	}
	// Just above the session-stdin size, on the helper path.
	big := strings.Repeat(all.String(), files.SessionStdinMax/256+3)
	c.write(t, d+"/big.bin", big)
	if got := c.sum(t, d+"/big.bin"); got != sha(big) {
		t.Fatalf("%d-byte content differs after write", len(big))
	}
}

func (c *conf) testWriteLarge(t *testing.T) {
	d := c.scratch(t)
	var b strings.Builder
	for i := 0; b.Len() < 8<<20; i++ {
		fmt.Fprintf(&b, "line %d of a large file, with some text to make it wider\n", i)
	}
	content := b.String()
	start := time.Now()
	r := c.write(t, d+"/large.txt", content)
	t.Logf("wrote %d bytes in %s", len(content), time.Since(start))
	if r.BytesWritten != int64(len(content)) || c.sum(t, d+"/large.txt") != sha(content) {
		t.Fatalf("large write: %+v, content differs", r)
	}
	rr := c.read(t, d+"/large.txt", 100000, 2)
	if rr.Content != numbered(100000, "line 99999 of a large file, with some text to make it wider", "line 100000 of a large file, with some text to make it wider") {
		t.Fatalf("read deep in a large file: %q", rr.Content)
	}
}

func (c *conf) testWriteTooLarge(t *testing.T) {
	d := c.scratch(t)
	_, err := files.Write(ctxT(t), c.env, d+"/huge", strings.Repeat("x", files.MaxWriteBytes+1))
	wantErr(t, err, "at most 50.0 MiB")
	c.sh(t, "test ! -e "+shellword.Quote(d+"/huge"))
}

func (c *conf) testNotInterpreted(t *testing.T) {
	d := c.scratch(t)
	content := "$(touch " + d + "/pwned1)\n`touch " + d + "/pwned2`\n'; touch " + d + "/pwned3; '\n\"; touch " + d + "/pwned4; \"\n"
	c.write(t, d+"/evil.txt", content)
	big := strings.Repeat(content, files.SessionStdinMax/len(content)+2)
	c.write(t, d+"/evil-big.txt", big)
	if got := c.sh(t, "ls "+shellword.Quote(d)); got != "evil-big.txt\nevil.txt" {
		t.Fatalf("directory holds %q: content was interpreted", got)
	}
	if c.sum(t, d+"/evil.txt") != sha(content) || c.sum(t, d+"/evil-big.txt") != sha(big) {
		t.Fatal("content differs after write")
	}
}

func (c *conf) testStrangePaths(t *testing.T) {
	d := c.scratch(t)
	for _, name := range []string{
		"with space.txt", "quote's.txt", `dq"uote.txt`, "dollar$HOME.txt", "back\\slash.txt",
		"new\nline.txt", "ünïcødé-日本.txt", "-dash.txt", "star*.txt", "semi;colon&.txt", "trail ",
	} {
		p := d + "/" + name
		c.write(t, p, "hello "+name+"\n")
		if got := c.sum(t, p); got != sha("hello "+name+"\n") {
			t.Fatalf("%q: content differs", name)
		}
		r := c.read(t, p, 0, 0)
		if !strings.HasPrefix(r.Content, fmt.Sprintf("%6d|hello ", 1)) {
			t.Fatalf("%q: read %q", name, r.Content)
		}
		if _, err := files.Patch(ctxT(t), c.env, p, "hello", "bye", false); err != nil {
			t.Fatalf("%q: patch: %v", name, err)
		}
		if got := c.sum(t, p); got != sha("bye "+name+"\n") {
			t.Fatalf("%q: content differs after patch", name)
		}
	}
	s, err := files.Search(ctxT(t), c.env, files.SearchRequest{Pattern: "bye", Path: d, Target: "content", Limit: 100})
	if err != nil || s.Total < 10 {
		t.Fatalf("search among strange names: total %d, err %v", s.Total, err)
	}
	found := false
	for _, m := range s.Matches {
		if m.Path == d+"/quote's.txt" && m.Line == 1 {
			found = true
		}
	}
	if !found {
		t.Fatalf("search did not report %q: %+v", d+"/quote's.txt", s.Matches)
	}
	f, err := files.Search(ctxT(t), c.env, files.SearchRequest{Pattern: "*日本*", Path: d, Target: "files"})
	if err != nil || f.Total != 1 || f.Files[0] != d+"/ünïcødé-日本.txt" {
		t.Fatalf("file search for a non-ASCII name: %+v %v", f, err)
	}
	// A directory with strange characters, relative to a cwd with them.
	sub := d + "/dir $x 'q'"
	c.write(t, sub+"/f.txt", "in dir\n")
	if r := c.read(t, sub+"/f.txt", 0, 0); r.Content != numbered(1, "in dir") {
		t.Fatalf("read in strange dir: %+v", r)
	}
}

func (c *conf) testPatch(t *testing.T) {
	d := c.scratch(t)
	p := d + "/p.go"
	c.write(t, p, "package p\n\nfunc A() int {\n\treturn 1\n}\n\nfunc B() int {\n\treturn 2\n}\n")
	r, err := files.Patch(ctxT(t), c.env, p, "\treturn 2\n", "\treturn 3 // changed\n", false)
	if err != nil {
		t.Fatal(err)
	}
	wantDiff := "--- a" + p + "\n+++ b" + p + "\n@@ -5,5 +5,5 @@\n }\n \n func B() int {\n-\treturn 2\n+\treturn 3 // changed\n }\n"
	if r.Replacements != 1 || r.Diff != wantDiff || r.Path != p {
		t.Fatalf("result %+v\ndiff:\n%s\nwant:\n%s", r, r.Diff, wantDiff)
	}
	if got := c.sum(t, p); got != sha("package p\n\nfunc A() int {\n\treturn 1\n}\n\nfunc B() int {\n\treturn 3 // changed\n}\n") {
		t.Fatal("file content wrong after patch")
	}
	_, err = files.Patch(ctxT(t), c.env, d+"/missing.go", "a", "b", false)
	wantErr(t, err, "not found")
	_, err = files.Patch(ctxT(t), c.env, p, "", "b", false)
	wantErr(t, err, "empty")
	_, err = files.Patch(ctxT(t), c.env, p, "same", "same", false)
	wantErr(t, err, "identical")
}

func (c *conf) testPatchNotFound(t *testing.T) {
	d := c.scratch(t)
	p := d + "/f.py"
	c.write(t, p, "import os\n\n\ndef main():\n    print('hello')\n    return 0\n\n\nif __name__ == '__main__':\n    main()\n")
	_, err := files.Patch(ctxT(t), c.env, p, "def main():\n  print('hello')\n  return 0\n", "x", false)
	wantErr(t, err, "not found", "closest match", "lines 4-6", "print('hello')", "whitespace")
	_, err = files.Patch(ctxT(t), c.env, p, "def mian():\n    print('helo')\n", "x", false)
	wantErr(t, err, "closest match", "lines 4-5")
	_, err = files.Patch(ctxT(t), c.env, p, "zzzzqqqq xxxx", "x", false)
	wantErr(t, err, "not found")
	if got := c.sum(t, p); got != sha("import os\n\n\ndef main():\n    print('hello')\n    return 0\n\n\nif __name__ == '__main__':\n    main()\n") {
		t.Fatal("failed patch changed the file")
	}
}

func (c *conf) testPatchAmbiguous(t *testing.T) {
	d := c.scratch(t)
	p := d + "/dup.txt"
	c.write(t, p, "x = 1\ny = 2\nx = 1\n")
	_, err := files.Patch(ctxT(t), c.env, p, "x = 1", "x = 9", false)
	wantErr(t, err, "2 times", "lines 1, 3", "replace_all")
	r, err := files.Patch(ctxT(t), c.env, p, "x = 1", "x = 9", true)
	if err != nil || r.Replacements != 2 {
		t.Fatalf("replace_all: %+v %v", r, err)
	}
	if !strings.Contains(r.Diff, "-x = 1\n+x = 9\n y = 2\n-x = 1\n+x = 9\n") {
		t.Fatalf("diff %q", r.Diff)
	}
}

func (c *conf) testPatchMode(t *testing.T) {
	d := c.scratch(t)
	p := d + "/run.sh"
	c.sh(t, "printf '#!/bin/sh\\necho one\\n' >"+shellword.Quote(p)+" && chmod 700 "+shellword.Quote(p))
	if _, err := files.Patch(ctxT(t), c.env, p, "one", "two", false); err != nil {
		t.Fatal(err)
	}
	if m := strings.TrimSpace(c.sh(t, "stat -c %a "+shellword.Quote(p))); m != "700" {
		t.Fatalf("mode %s after patch, want 700", m)
	}
	if got := c.sh(t, shellword.Quote(p)); got != "two" {
		t.Fatalf("script prints %q", got)
	}
}

func (c *conf) testPatchCRLF(t *testing.T) {
	d := c.scratch(t)
	p := d + "/win.txt"
	c.write(t, p, "one\r\ntwo\r\nthree\r\n")
	if _, err := files.Patch(ctxT(t), c.env, p, "one\ntwo\n", "uno\ndos\n", false); err != nil {
		t.Fatal(err)
	}
	if got := c.sum(t, p); got != sha("uno\r\ndos\r\nthree\r\n") {
		t.Fatalf("CRLF patch: content %q", c.sh(t, "od -c "+shellword.Quote(p)))
	}
}

// tree writes a small source tree for the search tests.
func (c *conf) tree(t *testing.T) string {
	d := c.scratch(t)
	c.write(t, d+"/main.go", "package main\n\nfunc main() {\n\tprintln(\"needle one\")\n}\n")
	c.write(t, d+"/lib/util.go", "package lib\n\n// Needle finds.\nfunc Needle() string { return \"needle two\" }\n")
	c.write(t, d+"/lib/util_test.go", "package lib\n")
	c.write(t, d+"/docs/readme.md", "# Docs\n\nno match here\nneedle three\n")
	c.write(t, d+"/web/app.ts", "const needle = 4;\n")
	c.write(t, d+"/web/view.tsx", "export const x = 'needle five';\n")
	return d
}

func (c *conf) testSearchContent(t *testing.T) {
	d := c.tree(t)
	s, err := files.Search(ctxT(t), c.env, files.SearchRequest{Pattern: "needle", Path: d, Target: "content"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Total != 5 || len(s.Matches) != 5 || s.Truncated {
		t.Fatalf("search: %+v, want 5 matches", s)
	}
	byPath := map[string]files.Match{}
	for _, m := range s.Matches {
		byPath[m.Path] = m
	}
	if m := byPath[d+"/main.go"]; m.Line != 4 || m.Content != "\tprintln(\"needle one\")" {
		t.Fatalf("main.go match %+v", m)
	}
	if m := byPath[d+"/docs/readme.md"]; m.Line != 4 || m.Content != "needle three" {
		t.Fatalf("readme match %+v", m)
	}
	s, err = files.Search(ctxT(t), c.env, files.SearchRequest{Pattern: "needle", Path: d, Target: "content", FileGlob: "*.go"})
	if err != nil || s.Total != 2 {
		t.Fatalf("file_glob *.go: %+v %v", s, err)
	}
	s, err = files.Search(ctxT(t), c.env, files.SearchRequest{Pattern: "needle", Path: d, Target: "content", FileGlob: "*.{ts,tsx}"})
	if err != nil || s.Total != 2 {
		t.Fatalf("file_glob *.{ts,tsx}: %+v %v", s, err)
	}
	s, err = files.Search(ctxT(t), c.env, files.SearchRequest{Pattern: "Needle\\(\\)", Path: d, Target: "content"})
	if err != nil || s.Total != 1 || s.Matches[0].Path != d+"/lib/util.go" {
		t.Fatalf("regex search: %+v %v", s, err)
	}
	s, err = files.Search(ctxT(t), c.env, files.SearchRequest{Pattern: "absent-text-xyz", Path: d, Target: "content"})
	if err != nil || s.Total != 0 || s.Matches == nil || s.Truncated {
		t.Fatalf("no matches: %+v %v", s, err)
	}
	s, err = files.Search(ctxT(t), c.env, files.SearchRequest{Pattern: "needle", Path: d + "/main.go", Target: "content"})
	if err != nil || s.Total != 1 || s.Matches[0].Path != d+"/main.go" {
		t.Fatalf("search in one file: %+v %v", s, err)
	}
}

func (c *conf) testSearchContext(t *testing.T) {
	d := c.scratch(t)
	c.write(t, d+"/ctx.txt", "a\nb\nTARGET 1\nc\nd\ne\nf\nTARGET 2\ng\n")
	s, err := files.Search(ctxT(t), c.env, files.SearchRequest{Pattern: "TARGET", Path: d, Target: "content", Context: 1})
	if err != nil || s.Total != 2 {
		t.Fatalf("context search: %+v %v", s, err)
	}
	m := s.Matches[0]
	if m.Line != 3 || len(m.Before) != 1 || m.Before[0] != (files.ContextLine{Line: 2, Content: "b"}) || len(m.After) != 1 || m.After[0] != (files.ContextLine{Line: 4, Content: "c"}) {
		t.Fatalf("first match with context %+v", m)
	}
	m = s.Matches[1]
	if m.Line != 8 || len(m.Before) != 1 || m.Before[0] != (files.ContextLine{Line: 7, Content: "f"}) || len(m.After) != 1 || m.After[0] != (files.ContextLine{Line: 9, Content: "g"}) {
		t.Fatalf("second match with context %+v", m)
	}
}

func (c *conf) testSearchPagination(t *testing.T) {
	d := c.scratch(t)
	c.sh(t, "i=1; while [ $i -le 120 ]; do echo hit $i; i=$((i+1)); done >"+shellword.Quote(d+"/many.txt"))
	s, err := files.Search(ctxT(t), c.env, files.SearchRequest{Pattern: "hit", Path: d, Target: "content"})
	if err != nil || s.Total != 120 || len(s.Matches) != files.DefaultSearchLimit || !s.Truncated || !strings.Contains(s.Hint, "offset=50") {
		t.Fatalf("first page: total %d, %d shown, truncated %v, hint %q, err %v", s.Total, len(s.Matches), s.Truncated, s.Hint, err)
	}
	s, err = files.Search(ctxT(t), c.env, files.SearchRequest{Pattern: "hit", Path: d, Target: "content", Limit: 30, Offset: 100})
	if err != nil || len(s.Matches) != 20 || s.Matches[0].Line != 101 || s.Truncated {
		t.Fatalf("last page: %d shown, first %+v, truncated %v, err %v", len(s.Matches), s.Matches, s.Truncated, err)
	}
}

func (c *conf) testSearchFiles(t *testing.T) {
	d := c.tree(t)
	s, err := files.Search(ctxT(t), c.env, files.SearchRequest{Pattern: "*.go", Path: d, Target: "files"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{d + "/lib/util.go", d + "/lib/util_test.go", d + "/main.go"}
	if s.Total != 3 || strings.Join(s.Files, ",") != strings.Join(want, ",") {
		t.Fatalf("files *.go: %+v, want %q", s, want)
	}
	s, err = files.Search(ctxT(t), c.env, files.SearchRequest{Pattern: "lib/*_test.go", Path: d, Target: "files"})
	if err != nil || s.Total != 1 || s.Files[0] != d+"/lib/util_test.go" {
		t.Fatalf("files lib/*_test.go: %+v %v", s, err)
	}
	s, err = files.Search(ctxT(t), c.env, files.SearchRequest{Pattern: "", Path: d, Target: "files", FileGlob: "*.ts*", Limit: 2, Offset: 1})
	if err != nil || s.Total != 2 || len(s.Files) != 1 || s.Files[0] != d+"/web/view.tsx" {
		t.Fatalf("files with file_glob and offset: %+v %v", s, err)
	}
	s, err = files.Search(ctxT(t), c.env, files.SearchRequest{Pattern: "*", Path: d, Target: "files", Limit: 2})
	if err != nil || s.Total != 6 || len(s.Files) != 2 || !s.Truncated {
		t.Fatalf("all files, limit 2: %+v %v", s, err)
	}
}

func (c *conf) testSearchErrors(t *testing.T) {
	d := c.scratch(t)
	_, err := files.Search(ctxT(t), c.env, files.SearchRequest{Pattern: "x", Path: d + "/nope", Target: "content"})
	wantErr(t, err, "does not exist")
	c.write(t, d+"/f.txt", "x\n")
	_, err = files.Search(ctxT(t), c.env, files.SearchRequest{Pattern: "(unclosed", Path: d, Target: "content"})
	if err == nil {
		t.Fatal("an invalid regular expression gave no error")
	}
	_, err = files.Search(ctxT(t), c.env, files.SearchRequest{Pattern: "x", Path: d, Target: "bogus"})
	wantErr(t, err, "target", "content", "files")
	_, err = files.Search(ctxT(t), c.env, files.SearchRequest{Pattern: "", Path: d, Target: "content"})
	wantErr(t, err, "empty")
}
