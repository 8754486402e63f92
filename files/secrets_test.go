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

// N16: an agent that writes back a file as read_file showed it (secrets
// redacted) would replace the real secret with the placeholder. The write
// is refused and the file keeps its secret; edits that leave the secret's
// line alone go through, on the native and the shell path.
func TestWriteDoesNotOverwriteASecretWithThePlaceholder(t *testing.T) {
	for name, wrap := range map[string]func(backend.Backend) backend.Backend{
		"native": func(b backend.Backend) backend.Backend { return b },
		"shell":  func(b backend.Backend) backend.Backend { return shellOnly{b} },
	} {
		t.Run(name, func(t *testing.T) {
			env := localEnv(t, wrap)
			ctx := context.Background()
			p := filepath.Join(t.TempDir(), ".env")
			orig := "DEBUG=1\nOPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz0123456789AB\n"
			if err := os.WriteFile(p, []byte(orig), 0o600); err != nil {
				t.Fatal(err)
			}
			rr, err := files.Read(ctx, env, p, 1, 100)
			if err != nil {
				t.Fatal(err)
			}
			seen := rr.Content
			if !strings.Contains(seen, "[REDACTED]") {
				t.Fatalf("read_file did not redact: %q", seen)
			}
			// What the agent saw, without line numbers, with one change.
			var lines []string
			for _, l := range strings.Split(seen, "\n") {
				if _, text, ok := strings.Cut(l, "|"); ok {
					lines = append(lines, text)
				}
			}
			back := strings.Replace(strings.Join(lines, "\n"), "DEBUG=1", "DEBUG=0", 1) + "\n"
			if _, err := files.Write(ctx, env, p, back); err == nil || !strings.Contains(err.Error(), "holds a secret") {
				t.Errorf("write back of the redacted view: %v", err)
			}
			if _, err := files.Patch(ctx, env, p, "DEBUG=1", "DEBUG=0\n"+lines[1], false); err == nil || !strings.Contains(err.Error(), "holds a secret") {
				t.Errorf("patch inserting the redacted line: %v", err)
			}
			if b, _ := os.ReadFile(p); string(b) != orig {
				t.Fatalf("the file changed: %q", b)
			}
			if _, err := files.Patch(ctx, env, p, "DEBUG=1", "DEBUG=0", false); err != nil {
				t.Errorf("patch around the secret: %v", err)
			}
			if b, _ := os.ReadFile(p); !strings.Contains(string(b), "sk-proj-abcdefghij") || !strings.Contains(string(b), "DEBUG=0") {
				t.Errorf("after the patch: %q", b)
			}
		})
	}
}
