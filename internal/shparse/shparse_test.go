package shparse

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mvdan.cc/sh/v3/syntax"
)

// deepForms are constructs the parser recurses on once per level, each
// nested 2*MaxNesting deep.
func deepForms(n int) map[string]string {
	r := strings.Repeat
	return map[string]string{
		"parens":        r("(", n) + "true" + r(")", n),
		"spaced":        r("( ", n) + "true" + r(" )", n),
		"braces":        r("{ ", n) + "true" + r("; }", n),
		"if":            r("if true; then ", n) + "true" + r("; fi", n),
		"while":         r("while true; do ", n) + "true" + r("; done", n),
		"case":          r("case x in x) ", n) + "true" + r(";; esac", n),
		"case arms":     r("case x in a) ;; b) ;; x) ", n) + "true" + r(";; esac", n),
		"andand":        r("true && ", n) + "true",
		"pipe":          r("true | ", n) + "true",
		"bang":          r("! ", n) + "true",
		"subst":         r("$(", n) + "true" + r(")", n),
		"arith":         "echo $((" + r("(", n) + "1" + r(")", n) + "))",
		"arith command": r("((", n) + "1" + r("))", n),
		"arith subst":   "echo $((" + r("$((", n) + "1" + r("))", n) + "))",
		"array index":   "echo $((" + r("a[", n) + "1" + r("]", n) + "))",
		"param index":   "echo ${a[" + r("a[", n) + "1" + r("]", n) + "]}",
		"paramexp":      r("${x:-", n) + "y" + r("}", n),
		"quoted subst":  r("\"$(echo ", n) + "y" + r(")\"", n),
		"quoted arith":  "echo \"$((" + r("(", n) + "1" + r(")", n) + "))\"",
		"test":          "[[ " + r("( ", n) + "a" + r(" )", n) + " ]]",
		"process subst": "cat " + r("<(", n) + "x" + r(")", n),
		"extglob":       "echo " + r("@(", n) + "a" + r(")", n),
		// A shift is not a here-document: the text after it is code.
		"shift then parens": "echo $((1<<2))\n" + r("(", n) + "true" + r(")", n),
		"<< in quotes":      "echo \"<<EOF\"\n" + r("(", n) + "true" + r(")", n),
		"<< in ${}":         "echo \"${x#<<EOF}\"\n" + r("(", n) + "true" + r(")", n),
		"quote in ${}":      "echo \"${x#'}\" " + r("(", n) + "true" + r(")", n) + " \"'\"",
		// The body of a here-document with a bare delimiter is expanded.
		"heredoc arith":           "cat <<EOF\n$((" + r("(", n) + "1" + r(")", n) + "))\nEOF\n",
		"heredoc index":           "cat <<EOF\n${a[" + r("a[", n) + "1" + r("]", n) + "]}\nEOF\n",
		"heredoc subst":           "cat <<EOF\n" + r("$(", n) + "x" + r(")", n) + "\nEOF\n",
		"second heredoc":          "cat <<'A' <<B\n((((\nA\n$((" + r("(", n) + "1" + r(")", n) + "))\nB\n",
		"unterminated heredoc":    "cat <<EOF\n$((" + r("(", n) + "1" + r(")", n) + "))\n",
		"heredoc in subst":        r("$(cat <<E\n", n) + "x\n",
		"heredoc in heredoc":      r("cat <<E\n$(cat <<E\n", n) + "x\n",
		"deep after flat heredoc": "cat <<'EOF'\nflat\nEOF\n" + r("(", n) + "true" + r(")", n),
		// The 2026-11-28 review (F4 regressed, R3): prefixes and operators
		// the parser recurses on, which no bracket shows.
		"time":           r("time ", n) + "true",
		"time -p":        r("time -p ", n) + "true",
		"coproc":         r("coproc ", n) + "true",
		"coproc a":       r("coproc a ", n) + "true",
		"ternary":        "echo $((" + r("1?", n) + "1" + r(":1", n) + "))",
		"assign":         "echo $((" + r("a=", n) + "1))",
		"power":          "echo $((" + r("2**", n) + "2))",
		"plus":           "echo $((" + r("1+", n) + "1))",
		"minus":          "echo $((" + r("- ", n) + "1))",
		"bitneg":         "echo $((" + r("~", n) + "1))",
		"not":            "echo $((" + r("!", n) + "1))",
		"let":            "let " + r("a=", n) + "1",
		"let ops":        "let a=" + r("1+", n) + "1",
		"index":          r("a[", n) + "1" + r("]", n) + "=x",
		"index op":       "a[" + r("1?", n) + "1" + r(":1", n) + "]=x",
		"slice":          "echo ${a:" + r("1+", n) + "1}",
		"dollar[":        "echo $[" + r("1?", n) + "1" + r(":1", n) + "]",
		"arith cmd ops":  "((" + r("a=", n) + "1))",
		"subshell arith": "( ((" + r("a=", n) + "1)) )",
		"for arith":      "for ((" + r("a=", n) + "1;;)); do :; done",
		"test and":       "[[ " + r("a && ", n) + "a ]]",
		"test or":        "[[ " + r("a ||\n", n) + "a ]]",
		"test not":       "[[ " + r("! ", n) + "a ]]",
		"func headers":   r("f() ", n) + "{ :; }",
		"func lines":     r("f()\n", n) + "{ :; }",
		"function kw":    r("function f ", n) + "{ :; }",
		"function lines": r("function f\n", n) + "{ :; }",
		"andand lines":   r("true &&\n", n) + "true",
		"pipe lines":     r("true |\n", n) + "true",
		"braces exp":     "echo " + r("{a,", n) + "b" + r("}", n),
		// Text the earlier estimate took for a comment or a quote.
		"after ${#x}":  "echo ${#x} " + r("(", n) + "1" + r(")", n),
		"after $'\\''": "echo $'\\'' " + r("(", n) + "1" + r(")", n) + " '",
		"after \\;#":   "echo \\;#x " + r("(", n) + "1" + r(")", n),
		// Closers that are only words: they close nothing.
		"fi as argument":   r("if :; then echo $x fi; ", n),
		"} as argument":    r("{ echo }; ", n),
		"done as argument": r("while :; do echo done; ", n),
		"esac after subst": r("if :; then $(a) fi; ", n),
	}
}

// TestDepth: the estimate never falls under the depth the parser recurses
// to for any construct that recurses, and stays low for large but flat
// text (scripts in heredocs and quotes).
func TestDepth(t *testing.T) {
	for name, c := range deepForms(2 * MaxNesting) {
		if d := Depth(c); d <= MaxNesting {
			t.Errorf("%s: estimated %d, want more than %d", name, d, MaxNesting)
		}
	}
	var py strings.Builder
	py.WriteString("cat > mod.py <<'EOF'\n")
	for i := 0; i < 5000; i++ {
		py.WriteString("if x(1) and y[2]:\n    for i in range(3): print('(')\n")
	}
	py.WriteString("EOF\npython3 mod.py")
	var md strings.Builder
	md.WriteString("cat > notes.md <<EOF\n")
	for i := 0; i < 5000; i++ {
		md.WriteString("- item (see [1]) costs $5 :( and {x} 'quoted' \"q\"\n")
	}
	md.WriteString("EOF\nwc -l notes.md")
	flat := map[string]string{
		"plain":          "ls -la | grep x && echo ok; for f in *; do echo \"$f\"; done",
		"heredoc":        py.String(),
		"bare heredoc":   md.String(),
		"quoted script":  "python3 -c '" + strings.Repeat("if (x): pass\n", 5000) + "'",
		"many commands":  strings.Repeat("echo $(date) | tr a b; (cd /tmp && ls)\n", 20000),
		"balanced lines": strings.Repeat("f() { [ -n \"${x:-}\" ] && echo $((1+2)); }\n", 20000),
		"many heredocs":  strings.Repeat("cat <<EOF\n$(date) ${HOME}\nEOF\n", 20000),
	}
	for name, c := range flat {
		if d := Depth(c); d > 10 {
			t.Errorf("%s: estimated %d, want a handful", name, d)
		}
	}
}

// TestParseRefusesDeepText is F4 (regressed in the 2026-11-25 review): a
// few hundred kilobytes of nesting crashed berth with a stack overflow in
// the parser, which recover cannot catch. Parse refuses them before the
// parser runs; without the bound this test dies with the process.
func TestParseRefusesDeepText(t *testing.T) {
	for name, c := range deepForms(250000) {
		f, err := Parse(c)
		var ne *NestingError
		if !errors.As(err, &ne) || f != nil {
			t.Errorf("%s: Parse = %v, %v; want a *NestingError", name, f, err)
			continue
		}
		if !strings.Contains(err.Error(), "1000") || !strings.Contains(err.Error(), "did not run") {
			t.Errorf("%s: the error does not name the bound or say nothing ran: %s", name, err)
		}
	}
}

// TestParse: text within the bound parses as bash; a syntax error is the
// parser's own, with its position.
func TestParse(t *testing.T) {
	f, err := Parse(strings.Repeat("( ", 50) + "echo [[ x ]] $((1+2)) <(ls)" + strings.Repeat(" )", 50))
	if err != nil || f == nil || len(f.Stmts) != 1 {
		t.Fatalf("Parse of 50 levels: %v, %v", f, err)
	}
	_, err = Parse("sed -i 's/a/b/ file")
	var pe syntax.ParseError
	if !errors.As(err, &pe) || pe.Pos.Line() != 1 {
		t.Fatalf("unterminated quote: %v, want a syntax.ParseError at line 1", err)
	}
}

// TestOf: a Script is reused for its own text and never for another.
func TestOf(t *testing.T) {
	sc := New("echo a")
	if Of(sc, "echo a") != sc {
		t.Error("Of did not reuse the Script of the same text")
	}
	if o := Of(sc, "echo b"); o == sc || o.Text != "echo b" || o.File == nil {
		t.Errorf("Of for another text: %+v", o)
	}
	if o := Of(nil, "(("); o.Err == nil || o.File != nil {
		t.Errorf("Of(nil) of bad text: %+v", o)
	}
}

func BenchmarkDepth(b *testing.B) {
	text := strings.Repeat("echo $(date) | tr a b; (cd /tmp && ls)\ncat <<EOF\n${HOME} $(pwd)\nEOF\n", 10000)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		Depth(text)
	}
}

// TestOnlyDoor: no other package of the module calls the parser directly,
// so no parse can skip the bound (the design review's "one parser entry").
func TestOnlyDoor(t *testing.T) {
	root := "../.."
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && p != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasPrefix(p, filepath.Join(root, "internal", "shparse")) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte("syntax.NewParser(")) {
			t.Errorf("%s calls syntax.NewParser: parse through shparse.Parse, which bounds the nesting first", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// treeBound is how deep a tree may be for text Measure puts at depth d: a
// few nodes per level it counts (a Stmt and its command, a word and its
// part), and a few at the top.
func treeBound(d int) int { return 4*d + 12 }

// FuzzMeasure ties the estimate to the parser: whatever parses, its tree
// (and so the parser's recursion, and any walk of the tree) is no deeper
// than a few nodes per level the estimate counts. A production the
// estimate misses shows here as a tree deeper than the bound, long before
// it could overflow a stack.
func FuzzMeasure(f *testing.F) {
	for _, c := range deepForms(30) {
		f.Add(c)
	}
	for _, c := range []string{"echo hi", "a | b && c || ! d", "f() { g; }", "cat <<EOF\n$(x)\nEOF\n", "echo \"$(a \"$(b)\")\""} {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, text string) {
		m := Measure(text)
		if m.Depth > MaxNesting || m.Elements > MaxElements {
			return
		}
		tree, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(text), "")
		if err != nil {
			return
		}
		if d := TreeDepth(tree, 1<<20); d > treeBound(m.Depth) {
			t.Errorf("%q: tree %d deep, estimated %d (bound %d)", text, d, m.Depth, treeBound(m.Depth))
		}
	})
}

// TestTreeDepthStops: TreeDepth measures a tree and stops descending past
// its limit.
func TestTreeDepthStops(t *testing.T) {
	f, err := Parse("( ( ( true ) ) )")
	if err != nil {
		t.Fatal(err)
	}
	full := TreeDepth(f, 1000)
	if full < 7 {
		t.Fatalf("depth of three subshells: %d", full)
	}
	if d := TreeDepth(f, 3); d != 4 {
		t.Errorf("TreeDepth with limit 3: %d, want 4 (past the limit)", d)
	}
}
