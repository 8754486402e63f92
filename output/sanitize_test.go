package output

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// capture runs the pipeline on the given writes with redaction off and no
// truncation, and returns Result.Output.
func capture(t *testing.T, writes ...string) string {
	t.Helper()
	c := NewCapture(Options{MaxChars: 1 << 20, NoRedact: true})
	for _, w := range writes {
		if n, err := c.Write([]byte(w)); n != len(w) || err != nil {
			t.Fatalf("Write(%q) = %d, %v; want %d, nil", w, n, err, len(w))
		}
	}
	return c.Finish("").Output
}

// bytewise splits s into one-byte writes.
func bytewise(s string) []string {
	out := make([]string, len(s))
	for i := range len(s) {
		out[i] = s[i : i+1]
	}
	return out
}

func TestUTF8SplitAcrossWritesByteByByte(t *testing.T) {
	for _, in := range []string{
		"héllo wörld",
		"中文字符 and 日本語",
		"emoji 😀🎉 four-byte",
		"mixed é中😀\r\nnext line ✓",
		"\u00a0\u07ff\u0800\uffff\U00010000\U0010ffff",
	} {
		if got := capture(t, bytewise(in)...); got != in {
			t.Errorf("byte-by-byte %q: got %q", in, got)
		}
	}
}

func TestInvalidUTF8ReplacedByFFFD(t *testing.T) {
	const R = "\uFFFD"
	tests := []struct {
		name   string
		writes []string
		want   string
	}{
		{"lone 0xff", []string{"a\xffb"}, "a" + R + "b"},
		{"lone continuation", []string{"\x80x"}, R + "x"},
		{"two invalid bytes", []string{"\xfe\xff"}, R + R},
		{"overlong C0 AF", []string{"\xc0\xaf"}, R + R},
		{"truncated 3-byte then ASCII", []string{"\xe2\x82A"}, R + "A"},
		{"truncated at end of stream", []string{"ok\xe2\x82"}, "ok" + R},
		{"truncated split across writes", []string{"\xe2", "\x82", "A"}, R + "A"},
		{"valid split across writes", []string{"\xe2", "\x82", "\xac"}, "€"},
		{"surrogate ED A0 80", []string{"\xed\xa0\x80"}, R + R + R},
		{"above U+10FFFF", []string{"\xf4\x90\x80\x80"}, R + R + R + R},
		{"CR LF kept", []string{"a\r\nb\r", "\nc"}, "a\r\nb\r\nc"},
		{"lone CR kept", []string{"50%\r100%"}, "50%\r100%"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, capture(t, tt.writes...)); diff != "" {
				t.Errorf("output mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

var ansiTests = []struct {
	name, in, want string
}{
	{"CSI SGR colour", "\x1b[1;31mred\x1b[0m plain", "red plain"},
	{"CSI private mode", "\x1b[?25lhidden cursor\x1b[?25h", "hidden cursor"},
	{"CSI cursor and erase", "a\x1b[2K\x1b[1Gb\x1b[10;20Hc", "abc"},
	{"CSI with intermediate", "x\x1b[0 qy", "xy"},
	{"OSC title ended by BEL", "\x1b]0;my title\x07text", "text"},
	{"OSC ended by ST", "\x1b]2;title\x1b\\text", "text"},
	{"OSC 8 hyperlink", "\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\ done", "link done"},
	{"OSC with UTF-8 title", "\x1b]0;tïtle 中\x07ok", "ok"},
	{"unterminated OSC stops at newline", "\x1b]0;title\nnext", "\nnext"},
	{"DCS string", "a\x1bPq#0;2;0;0;0#0~~@@vv\x1b\\b", "ab"},
	{"APC string", "a\x1b_Gf=100;AAAA\x1b\\b", "ab"},
	{"PM string", "a\x1b^private\x1b\\b", "ab"},
	{"SOS string", "a\x1bXstart of string\x1b\\b", "ab"},
	{"C1 CSI U+009B", "a\u009b31mb", "ab"},
	{"C1 OSC U+009D ended by C1 ST", "a\u009d0;title\u009cb", "ab"},
	{"C1 DCS U+0090", "a\u0090data\u009cb", "ab"},
	{"C1 single controls dropped", "a\u0085b\u0084c", "abc"},
	{"ESC charset designation", "\x1b(Bplain\x1b)0", "plain"},
	{"ESC keypad and save cursor", "\x1b=\x1b7a\x1b8\x1b>", "a"},
	{"ESC reset", "\x1bcafter", "after"},
	{"C0 controls dropped", "a\x07b\x08c\x00d\x7fe\x0bf\x0cg", "abcdefg"},
	{"tab newline CR kept", "a\tb\nc\rd\r\n", "a\tb\nc\rd"},
	{"newline inside CSI kept", "a\x1b[\n31mb", "a\nb"},
	{"unterminated CSI at end", "text\x1b[31", "text"},
	{"unicode after ESC ends it", "\x1bé", "é"},
	{"SGR around unicode", "\x1b[32m✓\x1b[0m passed", "✓ passed"},
}

func TestStripANSIKinds(t *testing.T) {
	for _, tt := range ansiTests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, strings.TrimRight(StripANSI(tt.in), " \t\r\n")); diff != "" {
				t.Errorf("StripANSI(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestStripANSISplitAcrossWrites(t *testing.T) {
	for _, tt := range ansiTests {
		t.Run(tt.name, func(t *testing.T) {
			for cut := 1; cut < len(tt.in); cut++ {
				if got := capture(t, tt.in[:cut], tt.in[cut:]); got != tt.want {
					t.Errorf("split at %d: got %q, want %q", cut, got, tt.want)
				}
			}
			if got := capture(t, bytewise(tt.in)...); got != tt.want {
				t.Errorf("byte-by-byte: got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestStripANSIKeepsPlainTextIntact(t *testing.T) {
	in := "plain ASCII text, with punctuation: !@#$%^&*()_+-=[]{};'\\:\"|,./<>?`~\n\tindented\n"
	if got := StripANSI(in); got != in {
		t.Errorf("StripANSI changed plain text: got %q", got)
	}
}
