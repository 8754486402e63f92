package output

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// runes builds n runes of varied text (ASCII, 2-, 3- and 4-byte runes,
// newlines) that never ends in whitespace.
func runes(n int) string {
	alphabet := []rune("abcdefghijé中😀\nklmnopqrstuvwxyz")
	rs := make([]rune, n)
	for i := range rs {
		rs[i] = alphabet[i%len(alphabet)]
	}
	if n > 0 {
		rs[n-1] = 'Z'
	}
	return string(rs)
}

// feed writes s to c in chunks of the given size (cutting runes apart).
func feed(c *Capture, s string, chunk int) {
	for i := 0; i < len(s); i += chunk {
		c.Write([]byte(s[i:min(i+chunk, len(s))]))
	}
}

func firstN(s string, n int) string { return string([]rune(s)[:n]) }
func lastN(s string, n int) string  { rs := []rune(s); return string(rs[len(rs)-n:]) }

func TestTruncationAtExactBoundary(t *testing.T) {
	const max = 1000
	const marker = "\n[12345678]" // 11 runes
	tests := []struct {
		name      string
		total     int
		marker    string
		truncated bool
	}{
		{"cap-1 chars", max - 1, "", false},
		{"cap chars", max, "", false},
		{"cap+1 chars", max + 1, "", true},
		{"cap with marker", max - 11, marker, false},
		{"cap+1 with marker", max - 10, marker, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := runes(tt.total)
			c := NewCapture(Options{MaxChars: max})
			feed(c, in, 97)
			res := c.Finish(tt.marker)
			if res.Truncated != tt.truncated {
				t.Fatalf("Truncated = %v; want %v", res.Truncated, tt.truncated)
			}
			if res.TotalChars != tt.total {
				t.Errorf("TotalChars = %d; want %d", res.TotalChars, tt.total)
			}
			if n := utf8.RuneCountInString(res.Output); n > max {
				t.Errorf("Output has %d runes; cap is %d", n, max)
			}
			if !tt.truncated && res.Output != in+tt.marker {
				t.Errorf("untruncated Output differs from input+marker")
			}
			if tt.truncated != (res.TruncationNote != "") {
				t.Errorf("TruncationNote = %q with Truncated = %v", res.TruncationNote, res.Truncated)
			}
		})
	}
}

func TestNoticeExactWithThousandsSeparators(t *testing.T) {
	const total = 1_234_567
	c := NewCapture(Options{}) // default cap 50,000
	feed(c, strings.Repeat("x", total), 64<<10)
	res := c.Finish("")
	// notice(total,total) is 79 runes, so the budget is 49,921: head 19,968,
	// tail 29,953, omitted 1,184,646.
	want := strings.Repeat("x", 19_968) +
		"\n\n... [OUTPUT TRUNCATED - 1,184,646 chars omitted out of 1,234,567 total] ...\n\n" +
		strings.Repeat("x", 29_953)
	if res.Output != want {
		t.Errorf("Output mismatch: got %d runes starting the notice at %d", utf8.RuneCountInString(res.Output), strings.Index(res.Output, "\n\n..."))
	}
	if res.TotalChars != total {
		t.Errorf("TotalChars = %d; want %d", res.TotalChars, total)
	}
	if want := "Output truncated: showing the first 19,968 and last 29,953 of 1,234,567 chars."; res.TruncationNote != want {
		t.Errorf("TruncationNote = %q; want %q", res.TruncationNote, want)
	}
}

func TestCommafy(t *testing.T) {
	for n, want := range map[int]string{0: "0", 7: "7", 999: "999", 1000: "1,000", 12345: "12,345",
		123456: "123,456", 1234567: "1,234,567", 1000000000: "1,000,000,000", -1234: "-1,234"} {
		if got := commafy(n); got != want {
			t.Errorf("commafy(%d) = %q; want %q", n, got, want)
		}
	}
}

func TestHeadTailSplitFortySixty(t *testing.T) {
	for _, max := range []int{300, 1000, 50_000} {
		for _, total := range []int{max + 1, 3 * max, 40 * max} {
			for _, marker := range []string{"", "\n[Command timed out after 5s]", "\n[Command interrupted] ✗"} {
				in := runes(total)
				c := NewCapture(Options{MaxChars: max})
				feed(c, in, 4093)
				res := c.Finish(marker)

				budget := max - utf8.RuneCountInString(notice(total, total)) - utf8.RuneCountInString(marker)
				headN := budget * 4 / 10
				tailN := budget - headN
				want := firstN(in, headN) + notice(total-headN-tailN, total) + lastN(in, tailN) + marker
				if diff := cmp.Diff(want, res.Output); diff != "" {
					t.Errorf("max %d total %d marker %q: (-want +got):\n%s", max, total, marker, diff)
				}
				if n := utf8.RuneCountInString(res.Output); n > max {
					t.Errorf("max %d total %d: Output has %d runes", max, total, n)
				}
				if !res.Truncated || res.TotalChars != total {
					t.Errorf("max %d total %d: Truncated %v TotalChars %d", max, total, res.Truncated, res.TotalChars)
				}
				if !utf8.ValidString(res.Output) {
					t.Errorf("max %d total %d: Output is not valid UTF-8", max, total)
				}
			}
		}
	}
}

func TestTinyCapStillFits(t *testing.T) {
	for _, max := range []int{1, 10, 50, 80} {
		c := NewCapture(Options{MaxChars: max})
		feed(c, runes(500), 64)
		res := c.Finish("\n[Command timed out after 180s]")
		if n := utf8.RuneCountInString(res.Output); n > max || !res.Truncated {
			t.Errorf("max %d: %d runes, truncated %v", max, n, res.Truncated)
		}
	}
}

func TestTrailingWhitespaceTrimmedBeforeMarker(t *testing.T) {
	c := NewCapture(Options{MaxChars: 100})
	c.Write([]byte("line one  \n\tline two"))
	c.Write([]byte(" \t\r\n"))
	c.Write([]byte("\n\n" + strings.Repeat(" ", 500))) // trailing whitespace beyond the cap
	res := c.Finish("\n[Command interrupted]")
	if want := "line one  \n\tline two\n[Command interrupted]"; res.Output != want || res.Truncated {
		t.Errorf("Output = %q (truncated %v); want %q", res.Output, res.Truncated, want)
	}
	if res.TotalChars != 20 {
		t.Errorf("TotalChars = %d; want 20", res.TotalChars)
	}
}

func TestFinishTwiceAndWriteAfterFinish(t *testing.T) {
	c := NewCapture(Options{})
	c.Write([]byte("hello"))
	first := c.Finish("")
	if n, err := c.Write([]byte(" more")); n != 5 || err != nil {
		t.Errorf("Write after Finish = %d, %v", n, err)
	}
	if second := c.Finish("x"); second != first || first.Output != "hello" {
		t.Errorf("Finish results %+v then %+v", first, second)
	}
}

func TestConcurrentWritersKeepEveryLine(t *testing.T) {
	c := NewCapture(Options{MaxChars: 1 << 20})
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			for range 1000 {
				c.Write([]byte(strings.Repeat(string(rune('a'+g)), 9) + "\n"))
			}
		})
	}
	wg.Wait()
	res := c.Finish("")
	if got := strings.Count(res.Output, "aaaaaaaaa\n") + strings.Count(res.Output, "bbbbbbbbb\n"); got != 1999 {
		t.Errorf("found %d whole lines; want 1999 (+1 unterminated)", got)
	}
}

func spillFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSpillFileHoldsProcessedOutputPrivately(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spill") // missing: created 0700
	var in strings.Builder
	for i := range 2000 {
		in.WriteString("\x1b[32mok\x1b[0m line é中 \xff ")
		if i == 1000 {
			in.WriteString("token " + ghpToken + " ")
		}
		in.WriteString("\n")
	}
	c := NewCapture(Options{MaxChars: 5000, SpillDir: dir})
	feed(c, in.String(), 1000)
	res := c.Finish("\n[Command timed out after 5s]")
	if !res.Truncated || res.FullOutputPath == "" || res.SpillError != nil {
		t.Fatalf("result %+v", res)
	}
	if filepath.Dir(res.FullOutputPath) != dir {
		t.Errorf("spill file %s not in %s", res.FullOutputPath, dir)
	}
	data, err := os.ReadFile(res.FullOutputPath)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Clean(in.String()), string(data)); diff != "" {
		t.Errorf("spill content (-want +got):\n%s", diff)
	}
	if strings.Contains(string(data), ghpToken) {
		t.Error("spill file holds an unredacted secret")
	}
	if fi, err := os.Stat(res.FullOutputPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("spill file mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("spill dir mode %v, %v; want 0700", fi.Mode().Perm(), err)
	}
	if !strings.Contains(res.TruncationNote, "full output in "+res.FullOutputPath) {
		t.Errorf("TruncationNote %q does not name the spill file", res.TruncationNote)
	}
}

func TestSpillIsLazy(t *testing.T) {
	dir := t.TempDir()
	c := NewCapture(Options{MaxChars: 1000, SpillDir: dir})
	feed(c, runes(1000), 100)
	if got := spillFiles(t, dir); len(got) != 0 {
		t.Fatalf("files written before Finish under the cap: %v", got)
	}
	res := c.Finish("")
	if res.Truncated || res.FullOutputPath != "" || len(spillFiles(t, dir)) != 0 {
		t.Errorf("untruncated output spilled: %+v", res)
	}
}

func TestSpillWhenOnlyTheMarkerOverflows(t *testing.T) {
	dir := t.TempDir()
	in := runes(995)
	c := NewCapture(Options{MaxChars: 1000, SpillDir: dir})
	feed(c, in, 100)
	res := c.Finish("\n[Command interrupted]")
	if !res.Truncated || res.FullOutputPath == "" {
		t.Fatalf("result %+v", res)
	}
	if data, err := os.ReadFile(res.FullOutputPath); err != nil || string(data) != in {
		t.Errorf("spill content mismatch (err %v, %d bytes)", err, len(data))
	}
}

func TestSpillCapCutsFile(t *testing.T) {
	in := runes(20_000)
	c := NewCapture(Options{MaxChars: 1000, SpillDir: t.TempDir(), SpillMaxChars: 3000})
	feed(c, in, 777)
	res := c.Finish("")
	data, err := os.ReadFile(res.FullOutputPath)
	if err != nil {
		t.Fatal(err)
	}
	want := firstN(in, 3000) + "\n\n... [FULL OUTPUT CUT - this file holds the first 3,000 of 20,000 chars] ...\n"
	if diff := cmp.Diff(want, string(data)); diff != "" {
		t.Errorf("spill content (-want +got):\n%s", diff)
	}
	if !strings.Contains(res.TruncationNote, "full output (first 3,000 chars) in "+res.FullOutputPath) {
		t.Errorf("TruncationNote = %q", res.TruncationNote)
	}
}

func TestSpillErrorIsReportedNotReturned(t *testing.T) {
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c := NewCapture(Options{MaxChars: 100, SpillDir: filepath.Join(blocker, "sub")})
	for range 100 {
		if n, err := c.Write([]byte("0123456789\n")); n != 11 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	res := c.Finish("")
	if res.SpillError == nil || res.FullOutputPath != "" || !res.Truncated {
		t.Errorf("result %+v; want SpillError and no path", res)
	}
	if !strings.Contains(res.TruncationNote, "could not be saved") {
		t.Errorf("TruncationNote = %q", res.TruncationNote)
	}
}

func TestNoSpillDirNoPath(t *testing.T) {
	c := NewCapture(Options{MaxChars: 100})
	feed(c, runes(1000), 100)
	if res := c.Finish(""); !res.Truncated || res.FullOutputPath != "" || res.SpillError != nil {
		t.Errorf("result %+v", res)
	}
}

func TestPruneSpillsRemovesOldSpillFilesOnly(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-8 * 24 * time.Hour)
	mk := func(name string, mtime time.Time) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return p
	}
	oldSpill := mk("berth-output-111.txt", old)
	newSpill := mk("berth-output-222.txt", time.Now().Add(-time.Hour))
	oldOther := mk("notes.txt", old)
	if err := os.Mkdir(filepath.Join(dir, "berth-output-dir.txt"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := PruneSpills(dir, 7*24*time.Hour); err != nil {
		t.Fatal(err)
	}
	for p, wantExists := range map[string]bool{oldSpill: false, newSpill: true, oldOther: true, filepath.Join(dir, "berth-output-dir.txt"): true} {
		if _, err := os.Stat(p); (err == nil) != wantExists {
			t.Errorf("%s exists=%v; want %v", filepath.Base(p), err == nil, wantExists)
		}
	}
	if err := PruneSpills(filepath.Join(dir, "missing"), time.Hour); err != nil {
		t.Errorf("missing dir: %v", err)
	}
}

// TestStreamingMemoryIsBounded writes hundreds of MB and checks that the
// heap does not grow with it and that TotalChars counts every rune.
func TestStreamingMemoryIsBounded(t *testing.T) {
	total := 300 << 20
	if raceEnabled || testing.Short() {
		total = 64 << 20
	}
	var b strings.Builder
	for b.Len() < 64<<10-200 {
		b.WriteString("\x1b[1;34mINFO\x1b[0m building target é中 ok=1 key_x-y: " + ghpToken + " done\n")
	}
	chunk := []byte(b.String())
	perChunk := utf8.RuneCountInString(Clean(b.String())) + 1 // + the trimmed final newline

	c := NewCapture(Options{SpillDir: t.TempDir()})
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapInuse, ms.HeapInuse
	n := 0
	for written := 0; written < total; written += len(chunk) {
		c.Write(chunk)
		n++
		if n%256 == 0 {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
		}
	}
	res := c.Finish("")
	runtime.ReadMemStats(&ms)
	peak = max(peak, ms.HeapInuse)
	grow := int64(peak) - int64(base)
	if grow > 32<<20 {
		t.Errorf("heap grew by %d MB while streaming %d MB", grow>>20, total>>20)
	}
	t.Logf("streamed %d MB; peak heap growth %d KB", total>>20, grow>>10)
	if want := n*perChunk - 1; res.TotalChars != want {
		t.Errorf("TotalChars = %d; want %d", res.TotalChars, want)
	}
	if !res.Truncated || res.SpillError != nil {
		t.Errorf("result: truncated %v spill error %v", res.Truncated, res.SpillError)
	}
	if fi, err := os.Stat(res.FullOutputPath); err != nil || fi.Size() > 6*DefaultSpillMaxChars {
		t.Errorf("spill file: %v, %v", fi, err)
	}
}

// TestStreamingMatchesCleanRandomSplits checks, on random mixes of text,
// escape sequences, invalid bytes, secrets and key blocks, that feeding a
// Capture in random pieces gives exactly what Process gives on the whole
// input, and that the result is valid UTF-8 without escape characters.
func TestStreamingMatchesCleanRandomSplits(t *testing.T) {
	parts := []string{
		"plain text ", "\n", "\r\n", "\t", "é", "中", "😀", "\xff", "\xe2\x82", "\xc3",
		"\x1b[1;31m", "\x1b[0m", "\x1b]0;title\x07", "\x1b]8;;http://x\x1b\\", "\x1bP1$r0m\x1b\\",
		"\x1b_apc\x1b\\", "\x1b(B", "\u009b2J", "\x07", "\x1b7",
		"task-1 ", " " + openAIKey + " ", " " + ghpToken + " ", " " + awsKeyID + " ", " " + jwt + " ",
		" Authorization: Bearer tok123 ",
		"-----BEGIN RSA PRIVATE KEY-----\n", fakePEMBody, "-----END RSA PRIVATE KEY-----\n",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 300 {
		var in strings.Builder
		for range rng.IntN(60) {
			in.WriteString(parts[rng.IntN(len(parts))])
		}
		s := in.String()
		want := Clean(s)
		c := NewCapture(Options{MaxChars: 1 << 20})
		for i := 0; i < len(s); {
			n := min(len(s)-i, 1+rng.IntN(20))
			c.Write([]byte(s[i : i+n]))
			i += n
		}
		got := c.Finish("").Output
		if got != want {
			t.Fatalf("iteration %d, input %q:\nstreamed %q\nProcess  %q", iter, s, got, want)
		}

		// The same input under a small cap, with a marker.
		const max, marker = 200, "\n[Command interrupted]"
		c = NewCapture(Options{MaxChars: max})
		for i := 0; i < len(s); {
			n := min(len(s)-i, 1+rng.IntN(50))
			c.Write([]byte(s[i : i+n]))
			i += n
		}
		res := c.Finish(marker)
		total := utf8.RuneCountInString(want)
		wantCut := want + marker
		if total+utf8.RuneCountInString(marker) > max {
			budget := max - utf8.RuneCountInString(notice(total, total)+marker)
			headN := budget * 4 / 10
			wantCut = firstN(want, headN) + notice(total-budget, total) + lastN(want, budget-headN) + marker
		}
		if res.Output != wantCut || res.TotalChars != total {
			t.Fatalf("iteration %d, cap %d: got %q (total %d)\nwant %q (total %d)", iter, max, res.Output, res.TotalChars, wantCut, total)
		}
		if !utf8.ValidString(got) || strings.ContainsAny(got, "\x1b\u009b") {
			t.Fatalf("iteration %d: output %q has invalid UTF-8 or escapes", iter, got)
		}
		for _, secret := range []string{openAIKey, ghpToken, awsKeyID, jwt, "tok123"} {
			if strings.Contains(got, secret) {
				t.Fatalf("iteration %d: %q leaked in %q", iter, secret, got)
			}
		}
	}
}
