package files_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/files"
	"github.com/a55dbaac/berth/internal/testenv"
	"github.com/a55dbaac/berth/terminal"
)

// The hardening cases of the security review (L5, L9, L17, F3) on the
// native path and on the shell path docker and ssh take. Each is written
// against an environment factory so it can join the conformance suite.

func hardeningEnvs() map[string]func(t testing.TB) *terminal.Environment {
	return map[string]func(t testing.TB) *terminal.Environment{
		"native": func(t testing.TB) *terminal.Environment {
			return localEnv(t, func(b backend.Backend) backend.Backend { return b })
		},
		"shell": func(t testing.TB) *terminal.Environment {
			return localEnv(t, func(b backend.Backend) backend.Backend { return shellOnly{b} })
		},
	}
}

func forEachEnv(t *testing.T, f func(t *testing.T, env *terminal.Environment)) {
	for name, newEnv := range hardeningEnvs() {
		t.Run(name, func(t *testing.T) { f(t, newEnv(t)) })
	}
}

// shell runs a command in env's session and fails the test unless it
// exits 0.
func shell(t *testing.T, env *terminal.Environment, cmd string) string {
	t.Helper()
	r := env.Run(context.Background(), terminal.Request{Command: cmd, Timeout: 30})
	if r.Error != nil || r.ExitCode != 0 {
		t.Fatalf("%s: exit %d %v: %s", cmd, r.ExitCode, r.Error, r.Output)
	}
	return r.Output
}

// within runs f and fails the test if it has not returned after d (the
// call is left behind: a hang is the failure being tested).
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s still blocked after %s", what, d)
	}
}

// L9: a FIFO, a device or a socket is refused at once, never read.
func TestReadSpecialFileRefusedAtOnce(t *testing.T) {
	forEachEnv(t, func(t *testing.T, env *terminal.Environment) {
		d := t.TempDir()
		fifo := filepath.Join(d, "fifo")
		if err := syscall.Mkfifo(fifo, 0o666); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{fifo, "/dev/zero"} {
			var err error
			within(t, 10*time.Second, "read_file of "+p, func() { _, err = files.Read(context.Background(), env, p, 0, 0) })
			wantErr(t, err, "not a regular file")
			within(t, 10*time.Second, "patch of "+p, func() { _, err = files.Patch(context.Background(), env, p, "a", "b", false) })
			wantErr(t, err, "not a regular file")
		}
	})
}

// L17: a patch into a CRLF file inserts CRLF lines, also when old_string
// is a single line (which matches without any line ending).
func TestPatchCRLFKeepsLineEndings(t *testing.T) {
	forEachEnv(t, func(t *testing.T, env *terminal.Environment) {
		p := filepath.Join(t.TempDir(), "win.txt")
		os.WriteFile(p, []byte("one\r\ntwo\r\nthree\r\n"), 0o644)
		if _, err := files.Patch(context.Background(), env, p, "two", "2a\n2b", false); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(p); string(got) != "one\r\n2a\r\n2b\r\nthree\r\n" {
			t.Fatalf("CRLF file after patch: %q", got)
		}
		// An LF file stays LF.
		q := filepath.Join(t.TempDir(), "unix.txt")
		os.WriteFile(q, []byte("one\ntwo\n"), 0o644)
		if _, err := files.Patch(context.Background(), env, q, "two", "2a\n2b", false); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(q); string(got) != "one\n2a\n2b\n" {
			t.Fatalf("LF file after patch: %q", got)
		}
	})
}

// L17: writing through a dangling symbolic link creates its target and
// keeps the link, as writing through a live one does.
func TestWriteDanglingSymlink(t *testing.T) {
	forEachEnv(t, func(t *testing.T, env *terminal.Environment) {
		d := t.TempDir()
		for name, target := range map[string]string{
			"relative":       "target.txt",
			"absolute":       filepath.Join(d, "abs-target.txt"),
			"missing parent": filepath.Join(d, "newdir", "deep.txt"),
		} {
			link := filepath.Join(d, strings.ReplaceAll(name, " ", "-")+".link")
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			if _, err := files.Write(context.Background(), env, link, "through "+name+"\n"); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Fatalf("%s: the link was replaced (%v, %v)", name, fi.Mode(), err)
			}
			real := target
			if !filepath.IsAbs(real) {
				real = filepath.Join(d, real)
			}
			if got, err := os.ReadFile(real); err != nil || string(got) != "through "+name+"\n" {
				t.Fatalf("%s: target holds %q (%v)", name, got, err)
			}
		}
	})
}

// L17: a Latin-1 file is text: read decodes it with a note, patch edits it
// and keeps it Latin-1, and refuses a character Latin-1 cannot hold.
func TestLatin1ReadAndPatch(t *testing.T) {
	forEachEnv(t, func(t *testing.T, env *terminal.Environment) {
		p := filepath.Join(t.TempDir(), "legacy.txt")
		orig := "caf\xe9 cr\xe8me\nna\xefve\n"
		os.WriteFile(p, []byte(orig), 0o644)
		r, err := files.Read(context.Background(), env, p, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if r.Content != "     1|café crème\n     2|naïve" || !strings.Contains(r.Hint, "Latin-1") || r.TotalLines != 2 {
			t.Fatalf("read: %+v", r)
		}
		res, err := files.Patch(context.Background(), env, p, "naïve", "déjà vu", false)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(p); string(got) != "caf\xe9 cr\xe8me\nd\xe9j\xe0 vu\n" {
			t.Fatalf("file after patch: %q, want Latin-1 bytes", got)
		}
		if !strings.Contains(res.Diff, "-naïve\n+déjà vu\n") {
			t.Fatalf("diff: %q", res.Diff)
		}
		_, err = files.Patch(context.Background(), env, p, "déjà vu", "5 €", false)
		wantErr(t, err, "Latin-1", "€")
		if got, _ := os.ReadFile(p); string(got) != "caf\xe9 cr\xe8me\nd\xe9j\xe0 vu\n" {
			t.Fatalf("a refused patch changed the file: %q", got)
		}
	})
}

// L17: a writable file in a directory berth cannot write to is written in
// place, keeping its mode. The directory is made immutable (as root) or
// read-only (otherwise).
func TestWriteInUnwritableDirectory(t *testing.T) {
	forEachEnv(t, func(t *testing.T, env *terminal.Environment) {
		d := filepath.Join(t.TempDir(), "locked")
		os.Mkdir(d, 0o755)
		p := filepath.Join(d, "notes.txt")
		os.WriteFile(p, []byte("old\n"), 0o640)
		lockDir(t, d)
		r, err := files.Write(context.Background(), env, p, "new content\n")
		if err != nil {
			t.Fatal(err)
		}
		if r.BytesWritten != 12 || r.Created {
			t.Fatalf("result %+v", r)
		}
		got, _ := os.ReadFile(p)
		fi, _ := os.Stat(p)
		if string(got) != "new content\n" || fi.Mode().Perm() != 0o640 {
			t.Fatalf("file holds %q, mode %v", got, fi.Mode())
		}
		if _, err := files.Patch(context.Background(), env, p, "new", "patched", false); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(p); string(got) != "patched content\n" {
			t.Fatalf("after patch: %q", got)
		}
		// A new file there still cannot be created, and says why.
		_, err = files.Write(context.Background(), env, filepath.Join(d, "other.txt"), "x")
		if err == nil {
			t.Fatal("a file was created in an unwritable directory")
		}
	})
}

func lockDir(t *testing.T, d string) {
	t.Helper()
	if os.Getuid() != 0 {
		os.Chmod(d, 0o555)
		t.Cleanup(func() { os.Chmod(d, 0o755) })
		return
	}
	// Root writes through any mode: only the immutable attribute locks
	// the directory, and not every filesystem keeps it.
	testenv.Need(t, testenv.Root, func() error {
		if out, err := exec.Command("chattr", "+i", d).CombinedOutput(); err != nil {
			return fmt.Errorf("cannot lock a directory as root here: chattr +i %s: %v %s", d, err, out)
		}
		return nil
	})
	t.Cleanup(func() { exec.Command("chattr", "-i", d).Run() })
}

// L5: what the file tools show of a file is redacted like terminal output,
// line numbers intact.
func TestFileToolsRedactSecrets(t *testing.T) {
	const key = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"
	const body1, body2 = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7", "VJTUt9Us8cKjMzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDu"
	pem := "-----BEGIN PRIVATE KEY-----\n" + body1 + "\n" + body2 + "\n-----END PRIVATE KEY-----\n"
	forEachEnv(t, func(t *testing.T, env *terminal.Environment) {
		d := t.TempDir()
		shell(t, env, "cd "+d)
		os.WriteFile(filepath.Join(d, ".env"), []byte("# config\nOPENAI_API_KEY="+key+"\nDEBUG=1\n"), 0o600)
		os.WriteFile(filepath.Join(d, "id.pem"), []byte("comment\n"+pem+"tail\n"), 0o600)
		leaks := func(what, s string) {
			t.Helper()
			for _, secret := range []string{"abcdefghijklmnopqrstuvwxyz0123456789", body1, body2} {
				if strings.Contains(s, secret) {
					t.Fatalf("%s shows a secret:\n%s", what, s)
				}
			}
		}
		r, err := files.Read(context.Background(), env, ".env", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		leaks("read_file", r.Content)
		if !strings.Contains(r.Content, "     2|OPENAI_API_KEY=sk-proj-[REDACTED]") || !strings.Contains(r.Content, "     3|DEBUG=1") {
			t.Fatalf("read_file of .env: %q", r.Content)
		}
		for _, off := range []int{1, 3, 4} {
			r, err = files.Read(context.Background(), env, "id.pem", off, 0)
			if err != nil {
				t.Fatal(err)
			}
			leaks(fmt.Sprintf("read_file at offset %d", off), r.Content)
			if r.TotalLines != 6 || strings.Count(r.Content, "\n")+1 != 7-off {
				t.Fatalf("read at offset %d lost lines: %q", off, r.Content)
			}
		}
		s, err := files.Search(context.Background(), env, files.SearchRequest{Pattern: "OPENAI|MIIE|BEGIN", Path: d, Context: 3})
		if err != nil {
			t.Fatal(err)
		}
		if s.Total != 3 {
			t.Fatalf("search: %+v", s)
		}
		for _, m := range s.Matches {
			leaks("search_files", m.Content)
			for _, c := range append(m.Before, m.After...) {
				leaks("search_files context", c.Content)
			}
		}
		_, err = files.Patch(context.Background(), env, ".env", "OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz012345678X", "x", false)
		if err == nil {
			t.Fatal("patch with a wrong old_string succeeded")
		}
		leaks("patch's closest match", err.Error())
		if !strings.Contains(err.Error(), "OPENAI_API_KEY=sk-proj-[REDACTED]") {
			t.Fatalf("closest match does not show the (redacted) line: %v", err)
		}
		pr, err := files.Patch(context.Background(), env, ".env", "DEBUG=1", "DEBUG=0", false)
		if err != nil {
			t.Fatal(err)
		}
		leaks("patch diff", pr.Diff)
		pr, err = files.Patch(context.Background(), env, "id.pem", "tail", "end", false)
		if err != nil {
			t.Fatal(err)
		}
		leaks("patch diff", pr.Diff)
	})
}

// F3 (the file tools' part): with noclobber set in the user's session, a
// write on the shell path either writes exactly the content or fails and
// leaves the file as it was; it never reports success for an empty or
// stale file.
func TestShellWriteNeverLiesAboutContent(t *testing.T) {
	env := localEnv(t, func(b backend.Backend) backend.Backend { return shellOnly{b} })
	d := t.TempDir()
	shell(t, env, "set -o noclobber")
	for i, content := range []string{"FIRST write\n", "SECOND write, different\n", "third\n"} {
		p := filepath.Join(d, "f.txt")
		if i == 2 {
			p = filepath.Join(d, "g.txt")
		}
		before, _ := os.ReadFile(p)
		r, err := files.Write(context.Background(), env, p, content)
		got, _ := os.ReadFile(p)
		if err == nil && (string(got) != content || r.BytesWritten != int64(len(content))) {
			t.Fatalf("write %d reported %+v but the file holds %q, want %q", i, r, got, content)
		}
		if err != nil {
			t.Logf("write %d failed loudly: %v", i, err)
			if string(got) != string(before) {
				t.Fatalf("write %d failed but changed the file from %q to %q", i, before, got)
			}
		}
	}
}

// The file scripts ignore the user's shell options and IFS.
func TestShellScriptsImmuneToUserShellState(t *testing.T) {
	env := localEnv(t, func(b backend.Backend) backend.Backend { return shellOnly{b} })
	d := t.TempDir()
	os.WriteFile(filepath.Join(d, "a.txt"), []byte("alpha\nbeta\n"), 0o644)
	shell(t, env, "set -o noclobber; set -u; IFS=,")
	r, err := files.Read(context.Background(), env, filepath.Join(d, "a.txt"), 0, 0)
	if err != nil || r.Content != "     1|alpha\n     2|beta" || r.TotalLines != 2 {
		t.Fatalf("read with IFS=, and set -u: %+v %v", r, err)
	}
	big := strings.Repeat("0123456789abcdef", files.SessionStdinMax/16+10) // the helper path
	if _, err := files.Write(context.Background(), env, filepath.Join(d, "a.txt"), big); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(d, "a.txt")); string(got) != big {
		t.Fatal("large write under noclobber: content differs")
	}
	s, err := files.Search(context.Background(), env, files.SearchRequest{Pattern: "0123", Path: d})
	if err != nil || s.Total != 1 {
		t.Fatalf("search: %+v %v", s, err)
	}
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
