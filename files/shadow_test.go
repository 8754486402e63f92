package files_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/files"
)

// N13: functions in the user's session named like the builtins the file
// scripts call must not make a tool lie. The first case is the review's
// repro: a `[` that always fails made write_file report success (with the
// byte count) for a file that did not exist.
func TestShellScriptsImmuneToShadowingFunctions(t *testing.T) {
	shadows := []struct {
		name string
		defs string
	}{
		{"[ fails", `[() { return 1; }`},
		{"[ succeeds", `[() { return 0; }`},
		{"test fails", `test() { return 1; }`},
		{"unset and printf do nothing", `unset() { :; }; printf() { :; }`},
		{"unset and [ fail", `unset() { return 1; }; [() { return 1; }`},
		{"set does nothing", `set() { :; }`},
		{"exec does nothing", `exec() { :; }`},
		{"exit does nothing", `exit() { :; }`},
		{"command and cd do nothing", `command() { :; }; cd() { :; }`},
		{"all of them", `[() { return 1; }; test() { return 1; }; unset() { :; }; set() { :; }; exec() { :; }; command() { :; }; printf() { :; }; cd() { :; }`},
		{"readonly [", `[() { return 1; }; readonly -f [`},
	}
	for _, sh := range shadows {
		t.Run(sh.name, func(t *testing.T) {
			env := localEnv(t, func(b backend.Backend) backend.Backend { return shellOnly{b} })
			d := t.TempDir()
			shell(t, env, sh.defs)
			existing := filepath.Join(d, "old.txt")
			if err := os.WriteFile(existing, []byte("old content\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			wrote := 0
			for _, c := range []struct{ path, content string }{
				{filepath.Join(d, "new.txt"), "FIRST write\n"},
				{existing, "SECOND write, different\n"},
				{filepath.Join(d, "sub", "dir", "deep.txt"), "third\n"},
				{filepath.Join(d, "big.txt"), strings.Repeat("0123456789abcdef", files.SessionStdinMax/16+10)}, // the helper path
			} {
				before, _ := os.ReadFile(c.path)
				r, err := files.Write(context.Background(), env, c.path, c.content)
				got, _ := os.ReadFile(c.path)
				if err != nil {
					t.Logf("write %s failed loudly: %v", c.path, err)
					if string(got) != string(before) {
						t.Fatalf("write %s failed but changed the file from %q to %q", c.path, clip(before), clip(got))
					}
					continue
				}
				if string(got) != c.content || r.BytesWritten != int64(len(c.content)) {
					t.Fatalf("write %s reported %+v but the file holds %q, want %q", c.path, r, clip(got), clip([]byte(c.content)))
				}
				wrote++
			}
			if sh.name != "readonly [" && wrote != 4 {
				t.Fatalf("only %d of 4 writes succeeded; the prologue drops these functions, so all should", wrote)
			}
			rd, err := files.Read(context.Background(), env, existing, 0, 0)
			if err == nil && !strings.Contains(rd.Content, "write") && !strings.Contains(rd.Content, "old content") {
				t.Fatalf("read of %s: %+v, matches neither content", existing, rd)
			}
			if _, err := files.Read(context.Background(), env, filepath.Join(d, "missing.txt"), 0, 0); err == nil {
				t.Fatal("read of a missing file succeeded")
			}
		})
	}
}

func clip(b []byte) string {
	if len(b) > 60 {
		return string(b[:60]) + "..."
	}
	return string(b)
}
