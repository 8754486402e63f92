package output

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// The Tap sees the whole cleaned, redacted text, line by line as it comes,
// trailing whitespace included, while Output is truncated and trimmed.
func TestTapSeesProcessedText(t *testing.T) {
	var tap bytes.Buffer
	ctx := WithTap(context.Background(), &tap)
	c := NewCapture(Options{MaxChars: 1000, Tap: TapFrom(ctx)})
	c.Write([]byte("\x1b[31mred\x1b[0m line\npassword=hunter2secret\npart"))
	if got := tap.String(); got != "red line\npassword=[REDACTED]\n" {
		t.Fatalf("tap after first write %q: want the complete lines, cleaned and redacted", got)
	}
	c.Write([]byte("ial\n" + strings.Repeat("x", 2000) + "\n\n"))
	res := c.Finish("")
	if !strings.HasPrefix(tap.String(), "red line\npassword=[REDACTED]\npartial\nxxx") || !strings.HasSuffix(tap.String(), "x\n\n") {
		t.Fatalf("tap %q...: want every line and the trailing newlines", tap.String()[:40])
	}
	if !res.Truncated || strings.Contains(res.Output, "hunter2") {
		t.Fatalf("output not truncated or not redacted: %+v", res)
	}
	if TapFrom(context.Background()) != nil {
		t.Fatal("TapFrom of a plain context is not nil")
	}
}
