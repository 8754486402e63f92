package files

import (
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"testing"
)

// applyDiff applies a unified diff produced by UnifiedDiff to old.
func applyDiff(t *testing.T, old, diff string) string {
	t.Helper()
	a := splitLines(old)
	var out []string
	pos := 0
	lines := strings.SplitAfter(diff, "\n")
	for i := 2; i < len(lines); i++ {
		l := lines[i]
		if l == "" {
			continue
		}
		if strings.HasPrefix(l, "@@ ") {
			var start int
			spec := strings.Fields(l)[1][1:]
			start, _ = strconv.Atoi(strings.Split(spec, ",")[0])
			n := 1
			if parts := strings.Split(spec, ","); len(parts) == 2 {
				n, _ = strconv.Atoi(parts[1])
			}
			if n > 0 {
				start--
			}
			out = append(out, a[pos:start]...)
			pos = start
			continue
		}
		body := l[1:]
		if i+1 < len(lines) && strings.HasPrefix(lines[i+1], `\ No newline`) {
			body = strings.TrimSuffix(body, "\n")
			i++
		}
		switch l[0] {
		case ' ':
			if a[pos] != body {
				t.Fatalf("context line %q does not match old line %d %q", body, pos+1, a[pos])
			}
			out = append(out, body)
			pos++
		case '-':
			if a[pos] != body {
				t.Fatalf("removed line %q does not match old line %d %q", body, pos+1, a[pos])
			}
			pos++
		case '+':
			out = append(out, body)
		default:
			t.Fatalf("bad diff line %q", l)
		}
	}
	out = append(out, a[pos:]...)
	return strings.Join(out, "")
}

func TestUnifiedDiffRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	words := []string{"alpha\n", "beta\n", "gamma\n", "delta\n", "}\n", "\n", "return nil\n"}
	for n := 0; n < 500; n++ {
		var a []string
		for i := rng.Intn(40); i > 0; i-- {
			a = append(a, words[rng.Intn(len(words))])
		}
		b := append([]string(nil), a...)
		for e := rng.Intn(6); e > 0; e-- {
			switch i := rng.Intn(len(b) + 1); rng.Intn(3) {
			case 0:
				b = append(b[:i], append([]string{fmt.Sprintf("new %d\n", rng.Intn(100))}, b[i:]...)...)
			case 1:
				if i < len(b) {
					b = append(b[:i], b[i+1:]...)
				}
			case 2:
				if i < len(b) {
					b[i] = "changed\n"
				}
			}
		}
		old, new := strings.Join(a, ""), strings.Join(b, "")
		if rng.Intn(4) == 0 {
			old = strings.TrimSuffix(old, "\n")
		}
		if rng.Intn(4) == 0 {
			new = strings.TrimSuffix(new, "\n")
		}
		d := UnifiedDiff("a", "b", old, new)
		if old == new {
			if d != "" {
				t.Fatalf("diff of equal texts: %q", d)
			}
			continue
		}
		if got := applyDiff(t, old, d); got != new {
			t.Fatalf("case %d: applying the diff gave %q, want %q\ndiff:\n%s", n, got, new, d)
		}
	}
}

func TestUnifiedDiffFormat(t *testing.T) {
	old := "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n"
	new := strings.Replace(strings.Replace(old, "2\n", "two\n", 1), "14\n", "", 1)
	want := "--- a\n+++ b\n@@ -1,5 +1,5 @@\n 1\n-2\n+two\n 3\n 4\n 5\n@@ -11,5 +11,4 @@\n 11\n 12\n 13\n-14\n 15\n"
	if got := UnifiedDiff("a", "b", old, new); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if got := UnifiedDiff("a", "b", "x", "y"); got != "--- a\n+++ b\n@@ -1 +1 @@\n-x\n\\ No newline at end of file\n+y\n\\ No newline at end of file\n" {
		t.Fatalf("no newline: %q", got)
	}
	if got := UnifiedDiff("a", "b", "", "new\n"); got != "--- a\n+++ b\n@@ -0,0 +1 @@\n+new\n" {
		t.Fatalf("from empty: %q", got)
	}
}

func TestUnifiedDiffLargeFallsBack(t *testing.T) {
	var a, b strings.Builder
	for i := 0; i < 20000; i++ {
		fmt.Fprintf(&a, "a%d\n", i)
		fmt.Fprintf(&b, "b%d\n", i)
	}
	d := UnifiedDiff("a", "b", a.String(), b.String())
	if got := applyDiff(t, a.String(), d); got != b.String() {
		t.Fatal("coarse diff does not apply")
	}
}

func TestGlobRegexp(t *testing.T) {
	for _, c := range []struct {
		glob, name string
		want       bool
	}{
		{"*.go", "main.go", true},
		{"*.go", "main.gox", false},
		{"*.{ts,tsx}", "a.tsx", true},
		{"*.{ts,tsx}", "a.js", false},
		{"file?.txt", "file1.txt", true},
		{"[ab]*", "beta", true},
		{"[!ab]*", "beta", false},
		{"src/**/*.go", "src/a/b/c.go", true},
		{"src/**/*.go", "src/c.go", true},
		{"src/*.go", "src/a/c.go", false},
		{"*日本*", "ünïcødé-日本.txt", true},
		{"a.b", "axb", false},
	} {
		re, err := globRegexp(c.glob)
		if err != nil {
			t.Fatalf("%s: %v", c.glob, err)
		}
		if got := re.MatchString(c.name); got != c.want {
			t.Errorf("glob %q on %q: %v, want %v", c.glob, c.name, got, c.want)
		}
	}
	for _, bad := range []string{"[abc", "{a,b", "a}"} {
		if _, err := globRegexp(bad); err == nil {
			t.Errorf("glob %q compiled", bad)
		}
	}
}

func TestBinaryKind(t *testing.T) {
	for data, want := range map[string]string{
		"hello\n":                     "",
		"BMP is a format\n":           "",
		"MZ is a text line":           "",
		"RIFF notes":                  "",
		"%PDF-1.4\n":                  "PDF document",
		"\x89PNG\r\n\x1a\n":           "PNG image",
		"\x7fELF\x02":                 "ELF executable or library",
		"plain\x00nul":                "binary data (contains NUL bytes)",
		"caf\x01\x02\x03\xe9":         "binary data (neither UTF-8 nor Latin-1 text)",
		"MZ\x90\x00\x03":              "Windows executable (PE)",
		"SQLite format 3\x00\x10\x00": "SQLite database",
	} {
		if got := binaryKind([]byte(data), false); got != want {
			t.Errorf("%q: %q, want %q", data, got, want)
		}
	}
	cut := []byte("ab€")[:4] // the euro sign cut after its first two bytes
	if kind, latin1 := textKind(cut, true); kind != "" || latin1 {
		t.Errorf("a UTF-8 character cut by the sample's end: %q latin1=%v, want UTF-8 text", kind, latin1)
	}
	if kind, latin1 := textKind(cut, false); kind != "" || !latin1 {
		t.Errorf("a file ending in a cut UTF-8 character: %q latin1=%v, want Latin-1 text", kind, latin1)
	}
	for data, latin1 := range map[string]bool{"caf\xe9 au lait\n": true, "caf\xc3\xa9\n": false, "Gr\xfc\xdfe\tTab\r\n": true} {
		if kind, l := textKind([]byte(data), false); kind != "" || l != latin1 {
			t.Errorf("%q: kind %q latin1 %v, want text with latin1 %v", data, kind, l, latin1)
		}
	}
}

func TestSimilarNames(t *testing.T) {
	names := []string{"config.yaml", "config.yml", "Config.YAML", "README.md", "main.go", "main_test.go", "zzz"}
	got := similarNames("confg.yaml", names, 5)
	if len(got) == 0 || got[0] != "config.yaml" && got[0] != "Config.YAML" {
		t.Fatalf("similar to confg.yaml: %v", got)
	}
	for _, g := range got {
		if g == "zzz" || g == "README.md" {
			t.Fatalf("unrelated name suggested: %v", got)
		}
	}
	if got := similarNames("main.py", names, 5); len(got) == 0 || got[0] != "main.go" {
		t.Fatalf("similar to main.py: %v", got)
	}
	if got := similarNames("qqqqqqqq", names, 5); len(got) != 0 {
		t.Fatalf("similar to qqqqqqqq: %v", got)
	}
}

func TestParseGrepLine(t *testing.T) {
	for _, c := range []struct {
		line  string
		nul   bool
		path  string
		n     int
		match bool
		text  string
	}{
		{"/a/b.go\x0012:func x() {", true, "/a/b.go", 12, true, "func x() {"},
		{"/a/b-1-c.go\x003-context: x", true, "/a/b-1-c.go", 3, false, "context: x"},
		{"/a/b.go:12:func x() {", false, "/a/b.go", 12, true, "func x() {"},
		{"/a/b.go-11-// comment", false, "/a/b.go", 11, false, "// comment"},
		{"/a/with space.go:7:a:b:c", false, "/a/with space.go", 7, true, "a:b:c"},
	} {
		p, n, m, text, ok := parseGrepLine([]byte(c.line), c.nul)
		if !ok || p != c.path || n != c.n || m != c.match || text != c.text {
			t.Errorf("%q: %q %d %v %q %v", c.line, p, n, m, text, ok)
		}
	}
}

// writeReply only accepts a measured size equal to the one sent.
func TestWriteReplyChecksSize(t *testing.T) {
	tg := target{rel: "/x"}
	if _, err := writeReply(tg, "TAG", []byte("\nTAG short 0 \n"), 12); err == nil || !strings.Contains(err.Error(), "0 of the 12") {
		t.Errorf("short write: %v", err)
	}
	for _, n := range []string{"-", "0", "11", "abc"} {
		out := []byte("\nTAG ok " + n + " 1\n/x")
		if _, err := writeReply(tg, "TAG", out, 12); err == nil {
			t.Errorf("size %q accepted for 12 bytes sent", n)
		}
	}
	if r, err := writeReply(tg, "TAG", []byte("\nTAG ok 12 1\n/x"), 12); err != nil || r.BytesWritten != 12 || !r.Created {
		t.Errorf("exact size: %+v %v", r, err)
	}
}
