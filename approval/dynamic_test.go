package approval

import (
	"strings"
	"testing"
)

// offByMode is what mode off makes of a command that matched only
// dangerous rules: it runs, allowed by the mode.
const offByMode = "allow/mode"

// dynamicNames are the functions and aliases the session defined in
// earlier calls, in the tests below: berth knows their names only.
var dynamicNames = []string{"x", "g", "h", "f", "build", "myfn", "ll"}

// dynamicCases are the gaps of issue 19's "what the checker cannot
// resolve, it does not allow" in mode off (where only the floor holds),
// with the verdict in mode off and in manual mode, and a rule that must
// decide both; then their harmless look-alikes.
var dynamicCases = []struct {
	cmd, off, manual, rule string
}{
	// 1-3: a function or alias of an earlier call is checked against the
	// floor by what it could run: its arguments given to each program the
	// floor covers, and its arguments as a command line.
	{`x -rf /`, floor, floor, "rm-system-dir"},
	{`g -rf ~`, floor, floor, "rm-system-dir"},
	{`h rm -rf /`, floor, floor, "rm-system-dir"},
	{`h sudo rm -rf /usr`, floor, floor, "rm-system-dir"},
	{`echo hi && x -rf /`, floor, floor, "rm-system-dir"},
	{`cd / && x -rf *`, floor, floor, "rm-system-dir"},
	{`x -rf --no-preserve-root /`, floor, floor, "no-preserve-root"},
	{`f -9 -1`, floor, floor, "kill-all"},
	{`f -KILL -- -1`, floor, floor, "kill-all"},
	{`x -R 777 /`, floor, floor, "chmod-system-dir"},
	{`x if=/dev/zero of=/dev/sda`, floor, floor, "disk-write"},
	{`x /dev/sda`, floor, floor, "mkfs-device"},
	{`x reboot`, floor, floor, "power"},
	{`x / -delete`, floor, floor, "rm-system-dir"},
	{`h h rm -rf /`, floor, floor, "rm-system-dir"},
	{`x -rf $DIR/`, floor, floor, "rm-system-dir"},
	// A program name only known at run time is the same.
	{`$CMD -rf /`, floor, floor, "rm-system-dir"},
	{`"$RM" -rf ~`, floor, floor, "rm-system-dir"},
	{`$SUDO rm -rf /`, floor, floor, "rm-system-dir"},
	{"echo 'rm -rf /' | x", floor, floor, "rm-system-dir"},
	{`x <<< 'kill -9 -1'`, floor, floor, "kill-all"},
	// 4: read, mapfile and readarray fed literal text (a here-string, a
	// heredoc) assign known values.
	{`read -r d <<< /; rm -rf "$d"`, floor, floor, "rm-system-dir"},
	{`read d <<< '  /  '; rm -rf "$d"`, floor, floor, "rm-system-dir"},
	{`mapfile -t a <<< /; rm -rf "${a[@]}"`, floor, floor, "rm-system-dir"},
	{`readarray -t a <<< /; rm -rf "${a[0]}"`, floor, floor, "rm-system-dir"},
	{"mapfile -t a <<'EOF'\n/tmp/x\n/usr\nEOF\nrm -rf \"${a[@]}\"", floor, floor, "rm-system-dir"},
	{"read -r d <<EOF\n/etc\nEOF\nrm -rf \"$d\"", floor, floor, "rm-system-dir"},
	{`read -r a b <<< "x /usr"; rm -rf "$b"`, floor, floor, "rm-system-dir"},
	{`IFS=: read -r a b <<< "x:/"; rm -rf "$b"`, floor, floor, "rm-system-dir"},
	{`read -ra arr <<< "build /"; rm -rf "${arr[@]}"`, floor, floor, "rm-system-dir"},
	{`v=/; read -r d <<< "$v"; rm -rf "$d"`, floor, floor, "rm-system-dir"},
	// 5: a process substitution of a constant command (echo, printf of
	// literal text) feeding them: its output is known, as $(echo /) is.
	{`IFS= read -r d < <(echo /); rm -rf "$d"`, floor, floor, "rm-system-dir"},
	{`mapfile -t a < <(printf '%s\n' /usr); rm -rf "${a[@]}"`, floor, floor, "rm-system-dir"},

	// Look-alikes: a session function's ordinary arguments are no floor.
	{`build -rf dist`, offByMode, ask, "dynamic-command"},
	{`myfn /tmp/x`, offByMode, ask, "dynamic-command"},
	{`ll /`, offByMode, ask, "dynamic-command"},
	{`ll ~`, offByMode, ask, "dynamic-command"},
	{`g -9 1234`, offByMode, ask, "dynamic-command"},
	{`myfn 0`, offByMode, ask, "dynamic-command"},
	{`myfn 1`, offByMode, ask, "dynamic-command"},
	{`myfn -f file`, offByMode, ask, "dynamic-command"},
	{`myfn -ef`, offByMode, ask, "dynamic-command"},
	{`myfn suspend`, offByMode, ask, "dynamic-command"},
	{`myfn`, offByMode, ask, "dynamic-command"},
	{`myfn "$x"`, offByMode, ask, "dynamic-command"},
	{`myfn "$x" "$y" /tmp`, offByMode, ask, "dynamic-command"},
	{`g -rf "$tmp"`, offByMode, ask, "dynamic-command"},
	{`h sleep 5`, offByMode, ask, "dynamic-command"},
	{`h make -j4 all`, offByMode, ask, "dynamic-command"},
	{`h rm -rf build`, offByMode, ask, "dynamic-command"},
	{`h kill -9 1234`, offByMode, ask, "dynamic-command"},
	{`myfn /etc/hosts`, offByMode, ask, "dynamic-command"},
	{`myfn build/ /tmp/out`, offByMode, ask, "dynamic-command"},
	{`$EDITOR notes.txt`, offByMode, ask, "dynamic-command"},
	{`"$PYTHON" -m pytest -x`, offByMode, ask, "dynamic-command"},
	// Look-alikes: values read at run time stay unknown, and an unknown
	// operand is no floor; known values are what they are (rm -rf build is
	// routine).
	{`tmp=$(mktemp -d); rm -rf "$tmp"`, offByMode, ask, "rm-recursive"},
	{`read -r d < list.txt; rm -rf "$d"`, offByMode, ask, "rm-recursive"},
	{`read -r d <<< "$line"; rm -rf "$d"`, offByMode, ask, "rm-recursive"},
	{`IFS= read -r d < <(mktemp -d); rm -rf "$d"`, offByMode, ask, "rm-recursive"},
	{`mapfile -t a < <(find . -name '*.tmp'); rm -rf "${a[@]}"`, offByMode, ask, "rm-recursive"},
	{`echo / | read d; rm -rf "$d"`, offByMode, ask, "rm-recursive"},
	{`read -r d <<< build; rm -rf "$d"`, ok, ok, ""},
	{`read -r d <<< "  /tmp/x  "; rm -rf "$d"`, ok, ok, ""},
	{`IFS=: read -r a b <<< "/:dist"; rm -rf "$b"`, ok, ok, ""},
	{`mapfile -t a <<< "dist"; rm -rf "${a[@]}"`, ok, ok, ""},
	{`mapfile a <<< /; rm -rf "${a[@]}"`, offByMode, ask, "rm-recursive"},
	{`read -n 1 d <<< /usr; rm -rf "$d"`, offByMode, ask, "rm-recursive"},
	{`read -r d <<< /; echo "$d"`, ok, ok, ""},
	{`mapfile -t lines <<< "a b"; printf '%s\n' "${lines[@]}"`, ok, ok, ""},
}

func TestDynamicCommandsAgainstTheFloor(t *testing.T) {
	c := testCtx
	c.Names = dynamicNames
	off := mustPolicy(t, "off", nil, nil)
	var offCases, manualCases []struct{ cmd, want, rule string }
	for _, tc := range dynamicCases {
		offCases = append(offCases, struct{ cmd, want, rule string }{tc.cmd, tc.off, tc.rule})
		manualCases = append(manualCases, struct{ cmd, want, rule string }{tc.cmd, tc.manual, tc.rule})
	}
	t.Run("off", func(t *testing.T) { checkAll(t, off, c, offCases) })
	t.Run("manual", func(t *testing.T) { checkAll(t, DefaultPolicy(), c, manualCases) })
}

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

// TestReadFields: read's field splitting, against what bash 5 gives.
func TestReadFields(t *testing.T) {
	for _, tc := range []struct {
		line, ifs string
		n         int
		want      []string
	}{
		{"x:", ":", 1, []string{"x"}},
		{"x::", ":", 1, []string{"x::"}},
		{"  /  ", " \t\n", 1, []string{"/"}},
		{"  /  ", "", 1, []string{"  /  "}},
		{" x  y  z ", " \t\n", 2, []string{"x", "y  z"}},
		{"x:y:", ":", 2, []string{"x", "y"}},
		{" a b  c ", " \t\n", -1, []string{"a", "b", "c"}},
		{"x : y : z", " :", 2, []string{"x", "y : z"}},
		{"a", " \t\n", 3, []string{"a", "", ""}},
		{"x:/", ":", 2, []string{"x", "/"}},
	} {
		got := readFields(tc.line, tc.ifs, tc.n)
		if strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
			t.Errorf("readFields(%q, %q, %d) = %q, want %q", tc.line, tc.ifs, tc.n, got, tc.want)
		}
	}
}
