package approval

import (
	"strings"
	"testing"
)

// dynamicNames are the functions and aliases the session defined in
// earlier calls, in the tests below: berth knows their names only.
var dynamicNames = []string{"x", "g", "h", "f", "build", "myfn", "ll"}

// TestDynamicFloorMessageNamesWhatCouldRun: the BLOCKED text of a session
// name says what it could run, not only the name as called.
func TestDynamicFloorMessageNamesWhatCouldRun(t *testing.T) {
	c := testCtx
	c.Names = dynamicNames
	p := mustPolicy(t, "off", nil, nil)
	for cmd, want := range map[string]string{
		`x -rf /`:       "rm -rf /",
		`f -9 -1`:       "kill -9 -1",
		`h rm -rf /`:    "rm -rf /",
		`$CMD -rf /`:    "rm -rf /",
		`x of=/dev/sda`: "of=/dev/sda",
	} {
		d := p.Check(cmd, c).Decision(p)
		if d == nil || d.Allowed() || d.By != ByFloor {
			t.Errorf("%q: %+v, want blocked by the floor", cmd, d)
			continue
		}
		if !strings.Contains(d.Message, want) {
			t.Errorf("%q: the message does not name what it could run (%q): %s", cmd, want, d.Message)
		}
	}
}

// TestDynamicUnchecked: a dynamic command with more arguments than the
// candidates are given is blocked, not let through unchecked; the check
// stays quick.
func TestDynamicUnchecked(t *testing.T) {
	c := testCtx
	c.Names = dynamicNames
	off := mustPolicy(t, "off", nil, nil)
	for _, cmd := range []string{
		"x " + strings.Repeat("/tmp/a ", 20000) + "-rf /",
		"x " + strings.Repeat("/tmp/a ", 20000),
	} {
		v := off.Check(cmd, c)
		if v.Action != Block || v.By != ByFloor || !hasRule(v.Need, "dynamic-unchecked") {
			t.Errorf("%.40q…: %s by %q, want blocked by the floor; %s", cmd, v.Action, v.By, describe(v.Need))
		}
	}
	if v := off.Check(strings.Repeat("myfn a; ", 100), c); v.Action != Allow {
		t.Errorf("100 ordinary calls: %s by %q", v.Action, v.By)
	}
}
