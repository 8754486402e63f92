package shellword

import (
	"os/exec"
	"testing"
)

// TestQuoteRoundTrip passes awkward strings through a real sh and checks
// they arrive unchanged.
func TestQuoteRoundTrip(t *testing.T) {
	for _, s := range []string{"", "plain", "it's", "''", `a\b"c$d` + "`e`", "two\nlines", "tab\there", "€ ünïcode", "\x01\x7f\xff"} {
		out, err := exec.Command("sh", "-c", "printf %s "+Quote(s)).Output()
		if err != nil || string(out) != s {
			t.Errorf("Quote(%q) came back as %q (%v)", s, out, err)
		}
	}
}
