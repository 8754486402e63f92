package manager_test

import (
	"context"
	"strings"
	"testing"

	"github.com/a55dbaac/berth/approval"
	"github.com/a55dbaac/berth/terminal"
)

// TestDynamicNamesAgainstTheFloorInModeOff is issue 19's last gap end to
// end: in mode off (only the floor holds) a function or alias defined in
// one call and called in the next ran, whatever its arguments. Now the
// session's snapshot of its shell carries their definitions (issue 28,
// item 4), and a call is checked by what its definition runs, with its
// arguments: forwarders to rm, kill or "$@" reach the floor, a harmless
// function runs with nothing to approve. Were the gate to let a call
// through, the guard refuses the markers.
func TestDynamicNamesAgainstTheFloorInModeOff(t *testing.T) {
	m, g, _ := setup(t, "approvals:\n  mode: off\n", nil)
	g.forbidden = append(g.forbidden, "-MARK")
	ctx := context.Background()
	for _, def := range []string{
		`shopt -s expand_aliases; alias x=rm`,
		`g() { rm "$@"; }`,
		`h() { "$@"; }`,
		`k() { kill "$@"; }`,
		`build() { echo "build:$*"; }`,
	} {
		if r := m.Run(ctx, "k", terminal.Request{Command: def}); r.Error != nil {
			t.Fatalf("%s: %s", def, *r.Error)
		}
	}
	for cmd, rule := range map[string]string{
		"x -rf / X-MARK":    "rm-system-dir",
		"g -rf ~ G-MARK":    "rm-system-dir",
		"h rm -rf / H-MARK": "rm-system-dir",
		"k -9 -1 K-MARK":    "kill-all",
		"read -r d <<< /; echo \"$d\" R-MARK && rm -rf \"$d\"": "rm-system-dir",
	} {
		r := m.Run(ctx, "k", terminal.Request{Command: cmd})
		if r.Approval == nil || r.Approval.Allowed() || r.Approval.By != approval.ByFloor ||
			r.Approval.Rule != rule {
			t.Errorf("%q in mode off: %+v, want blocked by the floor (%s)", cmd, r.Approval, rule)
		}
	}
	if sent := g.Sent(); strings.Contains(sent, "-MARK") {
		t.Errorf("a blocked call reached the environment: %q", sent)
	}
	if hits := g.Hits(); len(hits) > 0 {
		t.Errorf("the gate let through what the guard refused: %q", hits)
	}
	// A session function with ordinary arguments runs: its definition is
	// an echo.
	r := m.Run(ctx, "k", terminal.Request{Command: "build -rf dist"})
	if r.Error != nil || r.Output != "build:-rf dist" || r.Approval != nil {
		t.Errorf("build -rf dist: %q %v %+v, want it run with nothing to approve", r.Output, r.Error, r.Approval)
	}
}
