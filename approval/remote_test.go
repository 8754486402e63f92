package approval

import "testing"

// TestRemoteUnderConfinement is R2 of the 2026-11-28 review: under
// workspace confinement the gate dropped every finding whose targets lay
// outside the writable trees, those of commands sent to another host
// included, so ssh prod rm -rf /usr ran unasked there while an unconfined
// berth blocked it. The local kernel confines this environment, not that
// host: what a command runs elsewhere is checked against the floor as if
// it ran there, confined or not.
func TestRemoteUnderConfinement(t *testing.T) {
	ws := testCtx // the review's harness: workspace confinement
	ws.Writable = []string{"/home/dev/proj", "/tmp/berth-sandbox-1"}
	ws.SignalsConfined = true
	remote := []struct{ cmd, want, rule string }{
		{`ssh prod-db rm -rf /var/lib/postgresql; ssh prod-db "rm -rf /usr"`, floor, "rm-system-dir"},
		{`ssh prod rm -rf /usr`, floor, "rm-system-dir"},
		{`ssh prod mkfs.ext4 /dev/sda1`, floor, "mkfs-device"},
		{`ssh prod 'chmod -R 000 /etc'`, floor, "chmod-system-dir"},
		{`ssh prod 'kill -9 -1'`, floor, "kill-all"},
		{`rsync -a --delete empty/ prod:/`, floor, "rm-system-dir"},
		{`docker run -v /:/h alpine rm -rf /h`, floor, "rm-system-dir"},
		{`docker exec web rm -rf /`, floor, "rm-system-dir"},
		{`kubectl exec api-0 -- rm -rf /`, floor, "rm-system-dir"},
		{`ssh prod rm -rf /srv/app/old`, ask, "rm-recursive"},
	}
	for _, mode := range []string{"manual", "off"} {
		p := mustPolicy(t, mode, nil, nil)
		var cases []struct{ cmd, want, rule string }
		for _, c := range remote {
			if c.want == ask && mode == "off" {
				c.want = "allow/mode"
			}
			cases = append(cases, c)
		}
		checkAll(t, p, ws, cases)
	}
	// The same commands run here are the kernel's to refuse.
	checkAll(t, DefaultPolicy(), ws, []struct{ cmd, want, rule string }{
		{`rm -rf /usr`, ok, ""},
		{`mkfs.ext4 /dev/sda1`, ok, ""},
		{`kill -9 -1`, ok, ""},
		{`chmod -R 000 /etc`, ok, ""},
	})
}
