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

	// N3: what the checker cannot resolve, it does not allow. Every form
	// the review ran end to end with a fake rm, then the harness's.
	{`f() { rm "$@"; }; f -rf /`, floor, "rm-system-dir"},
	{"g() { rm \"$@\"; }\ng -rf ~", floor, "rm-system-dir"},
	{`f() { local d=$1; rm -rf "$d"; }; f /usr`, floor, "rm-system-dir"},
	{`wipe() { sudo rm -rf "$1"/*; }; wipe /`, floor, "rm-system-dir"},
	{`outer() { inner "$@"; }; inner() { rm "$@"; }; outer -rf /`, floor, "rm-system-dir"},
	{`set -- -rf /; rm "$@"`, floor, "rm-system-dir"},
	{`set -- x -rf /; shift; rm "$@"`, floor, "rm-system-dir"},
	{`set -- -rf /; rm $1 $2`, floor, "rm-system-dir"},
	{`bash <(echo rm -rf /)`, floor, "rm-system-dir"},
	{`printf '\x72m -rf /\n' | bash`, floor, "rm-system-dir"},
	{`printf '\162m -rf /\n' | sh`, floor, "rm-system-dir"},
	{`printf '%b\n' '\x72m -rf /' | bash`, floor, "rm-system-dir"},
	{`echo -e '\x72m -rf /' | bash`, floor, "rm-system-dir"},
	{`echo '\0162m -rf /' | sh`, floor, "rm-system-dir"},
	{`$(printf '\x72m') -rf /`, floor, "rm-system-dir"},
	{`source /dev/stdin <<< 'rm -rf /'`, floor, "rm-system-dir"},
	{`bash /dev/stdin <<< 'rm -rf /'`, floor, "rm-system-dir"},
	{`bash - <<< 'rm -rf /'`, floor, "rm-system-dir"},
	{`bash < <(echo rm -rf /)`, floor, "rm-system-dir"},
	{`. <(echo 'rm -rf /')`, floor, "rm-system-dir"},
	{`source <(printf 'rm -rf /\n')`, floor, "rm-system-dir"},
	{`exec 3<<<'rm -rf /'; bash <&3`, floor, "rm-system-dir"},
	{`exec 3<<<'rm -rf /'; bash /dev/fd/3`, floor, "rm-system-dir"},
	{`exec 4< <(echo rm -rf /); sh <&4`, floor, "rm-system-dir"},
	{"shopt -s expand_aliases; alias x=rm\nx -rf /", floor, "rm-system-dir"},
	{"alias nuke='rm -rf'\nnuke /", floor, "rm-system-dir"},
	{`kill -9 -0001`, floor, "kill-all"},
	{`kill -9 -01`, floor, "kill-all"},
	{`kill -9 $((-1))`, floor, "kill-all"},
	{`kill -9 $((0-1))`, floor, "kill-all"},
	{`kill -KILL -- -0x1`, floor, "kill-all"},
	{`IFS=,; X=rm,-rf,/; $X; IFS=$' \t\n'`, floor, "rm-system-dir"},
	{`X="-rf /"; rm $X`, floor, "rm-system-dir"},
	{`X="rm -rf /"; $X`, floor, "rm-system-dir"},
	{`trap -- 'rm -rf / FROM-EXIT-TRAP' EXIT`, floor, "rm-system-dir"},
	{`trap -- 'rm -rf /' DEBUG`, floor, "rm-system-dir"},
	{`trap 'rm -rf ~' ERR`, floor, "rm-system-dir"},
	{`trap "$CLEANUP" EXIT`, ask, "dynamic-command"},
	{"command_not_found_handle() { rm \"$@\"; }\n-rf /", ask, "dynamic-command"},
	{`script -qc 'rm -rf /' /dev/null`, floor, "rm-system-dir"},
	{`script -q -c 'rm -rf /' /dev/null`, floor, "rm-system-dir"},
	{`script -q /dev/null <<< 'rm -rf /'`, floor, "rm-system-dir"},
	{`systemd-run rm -rf /`, floor, "rm-system-dir"},
	{`systemd-run --user -p MemoryMax=1G --unit=x rm -rf /`, floor, "rm-system-dir"},
	{`at now <<< 'rm -rf /'`, floor, "rm-system-dir"},
	{`echo 'rm -rf /' | at now + 1 minute`, floor, "rm-system-dir"},
	{`batch <<EOF` + "\nrm -rf /\nEOF", floor, "rm-system-dir"},
	{`parallel rm -rf ::: /`, floor, "rm-system-dir"},
	{`parallel 'rm -rf {}' ::: /usr`, floor, "rm-system-dir"},
	{`parallel -j4 rm -rf {} ::: /etc`, floor, "rm-system-dir"},
	{`flock /tmp/l -c 'rm -rf /'`, floor, "rm-system-dir"},
	{`flock -w 5 /tmp/l rm -rf /`, floor, "rm-system-dir"},
	{`ssh -p 22 host -- rm -rf /`, floor, "rm-system-dir"},
	{`chrt 10 rm -rf /`, floor, "rm-system-dir"},
	{`chrt -f 99 rm -rf /`, floor, "rm-system-dir"},
	{`nsenter -t 1 -m -u -n rm -rf /`, floor, "rm-system-dir"},
	{`unshare -r rm -rf /`, floor, "rm-system-dir"},
	{`unshare --map-root-user --mount rm -rf /`, floor, "rm-system-dir"},
	{`strace -f -o /dev/null rm -rf /`, floor, "rm-system-dir"},
	{`ltrace -f rm -rf /`, floor, "rm-system-dir"},
	{`fakeroot rm -rf /`, floor, "rm-system-dir"},
	{`fakeroot -- rm -rf /`, floor, "rm-system-dir"},
	{`toybox rm -rf /`, floor, "rm-system-dir"},
	{`setpriv --reuid=1000 --regid=1000 --init-groups rm -rf /`, floor, "rm-system-dir"},
	{`bwrap --bind / / rm -rf /`, floor, "rm-system-dir"},
	{`capsh -- -c 'rm -rf /'`, floor, "rm-system-dir"},
	{`sg wheel -c 'rm -rf /'`, floor, "rm-system-dir"},
	{`eatmydata rm -rf /`, floor, "rm-system-dir"},
	{`awk 'BEGIN{system("rm -rf /")}'`, floor, "rm-system-dir"},
	{`gawk 'BEGIN { while (("rm -rf /" | getline line) > 0) print line }'`, floor, "rm-system-dir"},
	{`awk 'BEGIN { print "rm -rf /" | "sh" }'`, ask, "shell-from-pipe"},
	{`awk -v c="$CMD" 'BEGIN { system(c) }'`, ask, "dynamic-command"},
	{`git -c alias.x='!rm -rf /' x`, floor, "rm-system-dir"},
	{`git -c core.pager='rm -rf ~' log`, floor, "rm-system-dir"},
	{`git config --global alias.up '!rm -rf /'`, floor, "rm-system-dir"},
	{`git -c core.sshCommand="$X" fetch`, ask, "dynamic-command"},
	// N3 look-alikes: ordinary shell that must stay unasked.
	{`f() { echo "$@"; }; f a b`, ok, ""},
	{`build() { make -j4 "$@"; }; build all`, ok, ""},
	{`set -- a b c; echo "$# $@"`, ok, ""},
	{`set -euo pipefail; make`, ok, ""},
	{`bash <(echo echo hi)`, ok, ""},
	{`printf '%s\n' hello world | bash`, ok, ""},
	{`echo -e 'a\tb'`, ok, ""},
	{`printf '\x68\x69\n'`, ok, ""},
	{`kill -9 12345`, ok, ""},
	{`kill -TERM -- -12345`, ok, ""},
	{`kill -0 $PID`, ok, ""},
	{`kill $(pgrep -f my-server)`, ok, ""},
	{`trap 'rm -f /tmp/lock' EXIT`, ok, ""},
	{`trap -p`, ok, ""},
	{`trap - EXIT`, ok, ""},
	{`trap -- '' INT`, ok, ""},
	{`script -q -c 'make test' /dev/null`, ok, ""},
	{`at now -f job.sh`, ok, ""},
	{`atq; at -l`, ok, ""},
	{`parallel gzip ::: *.log`, ok, ""},
	{`flock /tmp/l -c 'make build'`, ok, ""},
	{`ssh -p 22 host -- uptime`, ok, ""},
	{`strace -f -o trace.txt ./app --port 8080`, ok, ""},
	{`unshare -r id`, ok, ""},
	{`awk '{print $1}' access.log`, ok, ""},
	{`awk '/error|warn/ {print}' app.log`, ok, ""},
	{`awk -F: '$3 >= 1000 || $1 == "root" {print $1}' /etc/passwd`, ok, ""},
	{`awk 'BEGIN{system("date")}'`, ok, ""},
	{`git -c user.name=x -c user.email=y commit -m msg`, ok, ""},
	{`git -c core.pager=cat log -5`, ok, ""},
	{`git config --global alias.st status`, ok, ""},
	{`IFS=: read -r user rest <<< "$line"`, ok, ""},
	{`IFS=,; for x in $LIST; do echo "$x"; done`, ok, ""},
	{`X="ls -la"; $X`, ok, ""},
	{`echo $((1+2)) $((-1))`, ok, ""},
	{`alias ll='ls -la'; ll`, ok, ""},

	// N14: ordinary equivalents of floor commands.
	{`rsync -a --delete /tmp/empty/ /`, floor, "rm-system-dir"},
	{`rsync -a --delete empty/ /usr/`, floor, "rm-system-dir"},
	{`rsync -av --delete-after ./empty/ ~/`, floor, "rm-system-dir"},
	{`tar --remove-files -cf /dev/null /`, floor, "rm-system-dir"},
	{`tar -czf /tmp/etc.tgz --remove-files /etc`, floor, "rm-system-dir"},
	{`cryptsetup luksFormat /dev/sda`, floor, "disk-wipe"},
	{`cryptsetup -q luksFormat --type luks2 /dev/nvme0n1p2`, floor, "disk-wipe"},
	{`nvme format /dev/nvme0n1`, floor, "disk-wipe"},
	{`nvme sanitize /dev/nvme0 -a 2`, floor, "disk-wipe"},
	{`hdparm --security-erase x /dev/sda`, floor, "disk-wipe"},
	{`loginctl poweroff`, floor, "power"},
	{`loginctl reboot`, floor, "power"},
	{`kexec -e`, floor, "power"},
	{`busctl call org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager PowerOff b false`, floor, "power"},
	{`dbus-send --system --print-reply --dest=org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager.Reboot boolean:true`, floor, "power"},
	{`chattr -R +i /`, floor, "chmod-system-dir"},
	{`setfacl -R -m u:nobody:rwx /`, floor, "chmod-system-dir"},
	{`find / -type f -exec chmod 000 {} +`, floor, "chmod-system-dir"},
	{`g(){ h & h; }; h(){ g & g; }; g`, floor, "fork-bomb"},
	{`a(){ b | b & }; b(){ a; a; }; a`, floor, "fork-bomb"},
	{`while :; do sh & done`, floor, "fork-bomb"},
	{`while true; do bash -c : & done`, floor, "fork-bomb"},
	{`until false; do sleep 1 & done`, floor, "fork-bomb"},
	{`kill -9 $(ps -eo pid)`, floor, "kill-all"},
	{`kill -9 $(ps ax -o pid= | tail -n +2)`, floor, "kill-all"},
	{`find / -delete`, floor, "rm-system-dir"},
	{`find ~ -delete`, floor, "rm-system-dir"},
	{`find / -exec rm -rf {} +`, floor, "rm-system-dir"},
	{`find /usr -name '*' -delete`, floor, "rm-system-dir"},
	{`rm -rf /usr/lib/x86_64-linux-gnu`, floor, "rm-system-dir"},
	{`rm -rf /lib/x86_64-linux-gnu`, floor, "rm-system-dir"},
	{`rm -rf /var/lib/dpkg`, floor, "rm-system-dir"},
	{`rm -rf "${HOME%/*}"`, floor, "rm-system-dir"},
	{`rm -rf "${HOME%%/dev}"`, floor, "rm-system-dir"},
	// N14 look-alikes.
	{`rsync -a --delete build/ deploy/`, ask, "rm-recursive"},
	{`rsync -a src/ /srv/backup/`, ok, ""},
	{`rsync -a --delete src/ user@host:/`, ok, ""},
	{`tar -czf backup.tgz ./data`, ok, ""},
	{`cryptsetup status cryptroot`, ok, ""},
	{`nvme list`, ok, ""},
	{`hdparm -I /dev/sda`, ok, ""},
	{`loginctl list-sessions`, ok, ""},
	{`kexec -l /boot/vmlinuz --initrd=/boot/initrd.img`, ok, ""},
	{`busctl list`, ok, ""},
	{`chattr +i important.txt`, ok, ""},
	{`setfacl -m u:www-data:rx public`, ok, ""},
	{`find . -type f -exec chmod 644 {} +`, ok, ""},
	{`while true; do make test; sleep 5; done`, ok, ""},
	{`while :; do ./worker & sleep 1; done`, ok, ""},
	{`kill $(pgrep -f myserver)`, ok, ""},
	{`rm -rf /usr/lib/x86_64-linux-gnu/libfoo.so.1`, ask, "rm-recursive"},
	{`echo "${HOME%/*}"`, ok, ""},
	{`rm -rf "${BUILD_DIR%/}/out"`, ask, "rm-recursive"},
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

// TestSessionNames is N3: a function or alias the session defined in an
// earlier call runs what its definition says, which berth cannot see.
func TestSessionNames(t *testing.T) {
	c := testCtx
	c.Names = []string{"f", "x", "ll"}
	checkAll(t, DefaultPolicy(), c, []struct{ cmd, want, rule string }{
		{`f -rf /`, floor, "rm-system-dir"}, // checked by what it could run: rm -rf /
		{`x -rf /`, floor, "rm-system-dir"},
		{`x -rf dist`, ask, "dynamic-command"},
		{`echo hi && f`, ask, "dynamic-command"},
		{`f() { echo "$@"; }; f -rf /`, ok, ""}, // redefined in this text: checked as written
		{`ls -la`, ok, ""},
		{`/usr/bin/f -rf /x`, ok, ""}, // a path is never a function
	})
	checkAll(t, DefaultPolicy(), testCtx, []struct{ cmd, want, rule string }{
		{`f -rf /`, ok, ""}, // without the session's names: an unknown program
		{`rm "$@"`, ask, "dynamic-command"},
	})
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
