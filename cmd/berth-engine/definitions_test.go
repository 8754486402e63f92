package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestFunctionsPersistWithNobodyToAsk is the "done when" of item 4 of
// issue 28, as the issue gives it: printf 'f() { echo fn-$1; }\nf one\n' |
// berth shell --json answered the second line with exit 126 (the call of a
// function an earlier line defined was dynamic-command, and a piped berth
// shell cannot ask). An alias too; a forwarder still reaches the floor
// (with --version, rm would only print its version, were the gate to fail).
func TestFunctionsPersistWithNobodyToAsk(t *testing.T) {
	in := "f() { echo fn-$1; }\nalias hi='echo hi-alias'\ndel() { \"$@\"; }\nf one\nhi\ndel rm -rf / --version\n"
	out, errs, _, _ := berth(t, in, "shell", "--json")
	var results []map[string]any
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var r map[string]any
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("decoding %q: %v (stderr %s)", out, err, errs)
		}
		results = append(results, r)
	}
	if len(results) != 6 {
		t.Fatalf("%d results for 6 lines: %s (stderr %s)", len(results), out, errs)
	}
	for i, r := range results[:3] {
		if r["exit_code"] != float64(0) || r["approval"] != nil {
			t.Errorf("definition %d: %v, want it run with nothing to approve", i+1, r)
		}
	}
	for i, want := range []string{"fn-one", "hi-alias"} {
		r := results[i+3]
		if r["output"] != want || r["exit_code"] != float64(0) || r["approval"] != nil {
			t.Errorf("line %d: %v, want %q run with nothing to approve", i+4, r, want)
		}
	}
	r := results[5]
	a, _ := r["approval"].(map[string]any)
	if r["exit_code"] != float64(126) || a["by"] != "floor" || a["rule"] != "rm-system-dir" {
		t.Errorf("del rm -rf /: %v, want it blocked by the floor", r)
	}
}
