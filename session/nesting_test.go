package session

import (
	"strings"
	"testing"
)

// TestNestingDepth checks the estimate never falls under the depth the
// parser recurses to for any construct that recurses, and stays low for
// large but flat text (scripts in heredocs and quotes).
func TestNestingDepth(t *testing.T) {
	n := 2 * MaxNesting
	deep := map[string]string{
		"parens":        strings.Repeat("(", n) + "true" + strings.Repeat(")", n),
		"spaced":        strings.Repeat("( ", n) + "true" + strings.Repeat(" )", n),
		"braces":        strings.Repeat("{ ", n) + "true" + strings.Repeat("; }", n),
		"if":            strings.Repeat("if true; then ", n) + "true" + strings.Repeat("; fi", n),
		"while":         strings.Repeat("while true; do ", n) + "true" + strings.Repeat("; done", n),
		"case":          strings.Repeat("case x in x) ", n) + "true" + strings.Repeat(";; esac", n),
		"case arms":     strings.Repeat("case x in a) ;; b) ;; x) ", n) + "true" + strings.Repeat(";; esac", n),
		"andand":        strings.Repeat("true && ", n) + "true",
		"pipe":          strings.Repeat("true | ", n) + "true",
		"bang":          strings.Repeat("! ", n) + "true",
		"subst":         strings.Repeat("$(", n) + "true" + strings.Repeat(")", n),
		"arith":         "echo $((" + strings.Repeat("(", n) + "1" + strings.Repeat(")", n) + "))",
		"paramexp":      strings.Repeat("${x:-", n) + "y" + strings.Repeat("}", n),
		"quoted subst":  strings.Repeat("\"$(echo ", n) + "y" + strings.Repeat(")\"", n),
		"test":          "[[ " + strings.Repeat("( ", n) + "a" + strings.Repeat(" )", n) + " ]]",
		"process subst": "cat " + strings.Repeat("<(", n) + "x" + strings.Repeat(")", n),
		// A shift is not a here-document: the text after it is code.
		"shift then parens": "echo $((1<<2))\n" + strings.Repeat("(", n) + "true" + strings.Repeat(")", n),
		"<< in quotes":      "echo \"<<EOF\"\n" + strings.Repeat("(", n) + "true" + strings.Repeat(")", n),
		"<< in ${}":         "echo \"${x#<<EOF}\"\n" + strings.Repeat("(", n) + "true" + strings.Repeat(")", n),
		"quote in ${}":      "echo \"${x#'}\" " + strings.Repeat("(", n) + "true" + strings.Repeat(")", n) + " \"'\"",
	}
	for name, c := range deep {
		if d := nestingDepth(c); d <= MaxNesting {
			t.Errorf("%s: estimated %d, want more than %d", name, d, MaxNesting)
		}
	}
	var py strings.Builder
	py.WriteString("cat > mod.py <<'EOF'\n")
	for i := 0; i < 5000; i++ {
		py.WriteString("if x(1) and y[2]:\n    for i in range(3): print('(')\n")
	}
	py.WriteString("EOF\npython3 mod.py")
	flat := map[string]string{
		"plain":          "ls -la | grep x && echo ok; for f in *; do echo \"$f\"; done",
		"heredoc":        py.String(),
		"quoted script":  "python3 -c '" + strings.Repeat("if (x): pass\n", 5000) + "'",
		"many commands":  strings.Repeat("echo $(date) | tr a b; (cd /tmp && ls)\n", 20000),
		"balanced lines": strings.Repeat("f() { [ -n \"${x:-}\" ] && echo $((1+2)); }\n", 20000),
	}
	for name, c := range flat {
		if d := nestingDepth(c); d > 10 {
			t.Errorf("%s: estimated %d, want a handful", name, d)
		}
	}
}

// TestDeepCommandRefusedBeforeParsing is F4: the review's 500 KB command
// crashed berth with a stack overflow in the parser.
func TestDeepCommandRefusedBeforeParsing(t *testing.T) {
	n := 250000
	cmd := strings.Repeat("(", n) + "true" + strings.Repeat(")", n)
	d := nestingDepth(cmd)
	if d <= MaxNesting {
		t.Fatalf("estimated %d", d)
	}
	msg := (&NestingError{Depth: d}).Error()
	if !strings.Contains(msg, "1000") {
		t.Fatalf("error does not name the bound: %s", msg)
	}
}
