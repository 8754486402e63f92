package approval

import (
	"strings"
	"testing"
)

// reviewCases are the forms of the 2026-11-25 security review, by
// finding, with the verdict each must get under the default policy on a
// local backend (testCtx) and a rule that must decide it; and the harmless
// look-alikes of each, which must stay unasked.
var reviewCases = []struct {
	cmd, want, rule string
}{
	// N1: the agent must not lower the gate it runs behind.
	{`berth config set approvals.mode off`, ask, "write-berth-config"},
	{`berth config set command_allowlist '["*"]'`, ask, "write-berth-config"},
	{`berth config set terminal.backend local`, ask, "write-berth-config"},
	{`berth -v config set approvals.deny '[]'`, ask, "write-berth-config"},
	{`/usr/local/bin/berth config unset approvals.mode`, ask, "write-berth-config"},
	{`sudo berth-engine config set approvals.mode off`, ask, "write-berth-config"},
	{`hermes config set approvals.mode off`, ask, "write-berth-config"},
	{`hermes config edit`, ask, "write-berth-config"},
	{`yq -i '.approvals.mode = "off"' ~/.berth/config.yaml`, ask, "write-berth-config"},
	{`yq eval --inplace '.command_allowlist = ["*"]' /home/dev/.berth/config.yaml`, ask, "write-berth-config"},
	{`sed -i 's/manual/off/' ~/.berth/config.yaml`, ask, "write-berth-config"},
	{`python3 -c 'open("/home/dev/.berth/config.yaml","a").write("approvals: {mode: off}")'`, ask, "write-berth-config"},
	{`node -e 'require("fs").writeFileSync(process.env.HOME+"/.berth/config.yaml","")'`, ask, "write-berth-config"},
	{`printf 'approvals:\n  mode: off\n' | sponge ~/.berth/config.yaml`, ask, "write-berth-config"},
	{`berth exec -- chmod 777 x`, ask, "nested-berth"},
	{`berth exec --no-daemon -- 'git push --force'`, ask, "nested-berth"},
	{`BERTH_APPROVALS_MODE=off berth exec --no-daemon -- 'git push --force'`, ask, "berth-env"},
	{`berth shell`, ask, "nested-berth"},
	{`berth mcp`, ask, "nested-berth"},
	{`berth serve --listen 127.0.0.1:9000`, ask, "nested-berth"},
	{`berth-engine exec -- ls`, ask, "nested-berth"},
	{`berth daemon stop`, ask, "nested-berth"},
	{`berth env rm default`, ask, "nested-berth"},
	{`B=berth; $B exec -- ls`, ask, "nested-berth"},
	{`berth "$SUB" -- ls`, ask, "nested-berth"},
	{`export BERTH_APPROVALS_MODE=off`, ask, "berth-env"},
	{`BERTH_APPROVALS_MODE=off`, ask, "berth-env"},
	{`declare -x BERTH_CONFIG=/tmp/c.yaml`, ask, "berth-env"},
	{`export BERTH_HOME=/tmp/h`, ask, "berth-env"},
	{`unset BERTH_OWNER`, ask, "berth-env"},
	{`env -u BERTH_PARENT_POLICY make`, ask, "berth-env"},
	{`env --unset=BERTH_APPROVALS_DENY make`, ask, "berth-env"},
	{`env BERTH_NO_DAEMON=1 make test`, ask, "berth-env"},
	{`sudo BERTH_HOME=/tmp/h make`, ask, "berth-env"},
	{`read BERTH_APPROVALS_MODE < mode.txt`, ask, "berth-env"},
	{`printf -v BERTH_APPROVALS_MODE off`, ask, "berth-env"},
	{`for BERTH_HOME in /tmp/a; do :; done`, ask, "berth-env"},
	{`: ${BERTH_APPROVALS_MODE:=off}`, ask, "berth-env"},
	{`n=BERTH_APPROVALS_MODE; export $n=off`, ask, "berth-env"},
	{`export "$NAME=off"`, ask, "berth-env"},
	// N1 look-alikes.
	{`berth --version`, ok, ""},
	{`berth help`, ok, ""},
	{`berth doctor`, ok, ""},
	{`berth ps`, ok, ""},
	{`berth config get approvals.mode`, ok, ""},
	{`berth config path`, ok, ""},
	{`berth config keys`, ok, ""},
	{`berth daemon status`, ok, ""},
	{`berth env ls`, ok, ""},
	{`hermes config`, ok, ""},
	{`echo BERTH_HOME=/tmp/h`, ok, ""},
	{`grep -rn BERTH_APPROVALS_MODE README.md`, ok, ""},
	{`export BERTHA=1 BERTH_TOKEN_FILE=x`, ok, ""},
	{`echo "$BERTH_HOME"`, ok, ""},
	{`yq '.approvals.mode' ~/.berth/config.yaml`, ok, ""},
	{`yq -i '.version = 2' chart/values.yaml`, ok, ""},
	{`python3 -c 'print(1+1)'`, ok, ""},
	{`git config user.name dev`, ok, ""},
}

func TestReviewCases(t *testing.T) {
	checkAll(t, DefaultPolicy(), testCtx, reviewCases)
}

// checkAll checks each command against want and rule, as TestCheckTable.
func checkAll(t *testing.T, p *Policy, c Context, cases []struct{ cmd, want, rule string }) {
	t.Helper()
	for _, tc := range cases {
		v := p.Check(tc.cmd, c)
		got := ok
		switch {
		case v.Action == Block && v.By == ByFloor:
			got = floor
		case v.Action == Ask:
			got = ask
		case v.Action == Allow && len(v.Findings) == 0:
			got = ok
		default:
			got = v.Action.String() + "/" + string(v.By)
		}
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
		d := g.Command(t.Context(), "s", cmd, testCtx)
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
