package approval

import (
	"strings"
	"testing"
)

// checkAll checks each command against want and rule, as TestCheckTable.
func checkAll(t *testing.T, p *Policy, c Context, cases []struct{ cmd, want, rule string }) {
	t.Helper()
	for _, tc := range cases {
		v := p.Check(tc.cmd, c)
		got := verdictOf(v)
		if got != tc.want {
			t.Errorf("%q: got %s, want %s; findings: %s", tc.cmd, got, tc.want, describe(v.Findings))
			continue
		}
		if tc.rule != "" && !hasRule(v.Need, tc.rule) {
			t.Errorf("%q: %s as expected, but not by rule %s; deciding findings: %s", tc.cmd, got, tc.rule, describe(v.Need))
		}
	}
}

// TestBlockedMessageHandsNoBypass is N1: the BLOCKED text once printed
// "berth config set approvals.mode off", and the agent ran it. It speaks
// about the user, and names nothing the agent could run or set.
func TestBlockedMessageHandsNoBypass(t *testing.T) {
	p, err := NewPolicy("manual", []string{"git push*"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := NewGate(p, GateOptions{})
	for _, cmd := range []string{"chmod 777 x", "git push origin main", "rm -rf /", "berth config set approvals.mode off"} {
		d := g.Command(t.Context(), "s", cmd, testCtx, nil)
		if d == nil || d.Allowed() {
			t.Fatalf("%q: %+v, want blocked", cmd, d)
		}
		msg := strings.Replace(d.Message, quoteCmd(cmd), "`…`", 1)
		for _, bad := range []string{"berth config", "config set", "mode off", "approvals.mode off", "command_allowlist '", "stop asking"} {
			if strings.Contains(msg, bad) {
				t.Errorf("%q: the BLOCKED message hands the agent a bypass (%q): %s", cmd, bad, d.Message)
			}
		}
		if d.By != ByFloor && !strings.Contains(d.Message, "user") {
			t.Errorf("%q: the message does not say who can allow it: %s", cmd, d.Message)
		}
	}
}
