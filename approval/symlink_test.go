package approval

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSymlinks is N2 of the 2026-11-25 review: path rules were purely
// lexical, so a link to berth's home let the agent switch approvals off
// with write_file, and a link to the home made rm -rf LINK/ empty it as a
// "routine" removal. On a machine whose files berth sees (NativeResolve),
// writes and recursive removals are checked where they land too.
func TestSymlinks(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "home")
	bh := filepath.Join(home, ".berth")
	proj := filepath.Join(home, "proj")
	for _, d := range []string{bh, proj, filepath.Join(proj, "build"), filepath.Join(home, ".ssh")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(bh, "config.yaml"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		filepath.Join(proj, "h"):            bh,
		filepath.Join(proj, "node_modules"): home,
		filepath.Join(proj, "sys"):          "/usr",
		filepath.Join(proj, "dotenv"):       filepath.Join(proj, ".env"),
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	c := Context{Backend: "local", Cwd: proj, Home: home, BerthHome: bh, ConfigPath: filepath.Join(bh, "config.yaml"), Resolve: NativeResolve}
	p := DefaultPolicy()
	for _, w := range []string{"h/config.yaml", filepath.Join(proj, "h", "config.yaml"), "h/.env", "dotenv"} {
		v := p.CheckWrite(w, c)
		if v.Action != Ask {
			t.Errorf("write_file %s: %s, want ask; findings %s", w, v.Action, describe(v.Findings))
		}
	}
	checkAll(t, p, c, []struct{ cmd, want, rule string }{
		{`printf 'approvals:\n  mode: "off"\n' >> h/config.yaml`, ask, "write-berth-config"},
		{`cp evil.yaml h/config.yaml`, ask, "write-berth-config"},
		{`tee h/config.yaml < x`, ask, "write-berth-config"},
		{`sed -i 's/manual/off/' h/config.yaml`, ask, "write-berth-config"},
		{`rm -rf node_modules/`, floor, "rm-system-dir"},
		{`rm -rf node_modules/.`, floor, "rm-system-dir"},
		{`rm -rf sys/`, floor, "rm-system-dir"},
		{`rm -rf sys/../../etc`, floor, "rm-system-dir"}, // /usr/../../etc is /etc
		{`echo x >> sys/../../etc/hosts`, ask, "write-etc"},
		{`rm -rf node_modules`, ask, "rm-recursive"}, // removes the link only, but is no routine removal
		{`rm -rf node_modules/cache`, ask, "rm-recursive"},
		{`ln -sfn ~ node_modules2; rm -rf node_modules2/`, floor, "rm-system-dir"},
		{`ln -sfn /usr /tmp/u; rm -rf /tmp/u/`, floor, "rm-system-dir"},
		{`ln -s ~ /tmp/h; rm -rf /tmp/h/`, floor, "rm-system-dir"},
		{`ln -s ` + bh + ` hh; echo 'approvals: {mode: off}' > hh/config.yaml`, ask, "write-berth-config"},
		{`ln -s ~/.ssh keys`, ask, "link-sensitive"},
		{`ln -s "$BERTH_HOME" h2`, ask, "link-sensitive"},
		{`ln -s ~/.berth/config.yaml c.yaml`, ask, "link-sensitive"},
		{`ln ~/.bashrc rc`, ask, "link-sensitive"},
		{`ln -s /etc etc-link`, ask, "link-sensitive"},
		{`ln -s / root-link`, ask, "link-sensitive"},
		{`ln -sf ~ .`, ask, "link-sensitive"},
		// Look-alikes.
		{`rm -rf build/`, ok, ""},
		{`rm -rf build`, ok, ""},
		{`ln -s ../shared/lib lib`, ok, ""},
		{`ln -sf $(pwd)/bin/tool /usr/local/bin/tool`, ok, ""},
		{`ln -s build/app current`, ok, ""},
		{`echo x > notes.txt`, ok, ""},
	})
	// A berth home that is itself a link: a write to the real place is a
	// write to berth's configuration.
	linked := c
	linked.BerthHome, linked.ConfigPath = filepath.Join(proj, "h"), filepath.Join(proj, "h", "config.yaml")
	if v := p.CheckWrite(filepath.Join(bh, "config.yaml"), linked); v.Action != Ask || !hasRule(v.Need, "write-berth-config") {
		t.Errorf("write to the real berth home behind a linked BERTH_HOME: %s %s", v.Action, describe(v.Findings))
	}
	// Where links cannot be seen (a remote backend), a trailing slash may
	// hide one: no routine removal.
	remote := Context{Backend: "ssh", Cwd: "/home/dev/proj", Home: "/home/dev"}
	checkAll(t, p, remote, []struct{ cmd, want, rule string }{
		{`rm -rf node_modules/`, ask, "rm-recursive"},
		{`rm -rf node_modules`, ok, ""},
		{`ln -sfn ~ nm; rm -rf nm/`, floor, "rm-system-dir"},
	})
}

// TestNativeResolve follows links through the longest existing prefix.
func TestNativeResolve(t *testing.T) {
	root := t.TempDir()
	real, _ := filepath.EvalSymlinks(root)
	if err := os.Mkdir(filepath.Join(root, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"l": filepath.Join(root, "a"), "rel": "a/sub", "dangling": "a/.env", "loop": "loop"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	for in, want := range map[string]string{
		filepath.Join(root, "l"):             filepath.Join(real, "a"),
		filepath.Join(root, "l", "new", "x"): filepath.Join(real, "a", "new", "x"),
		filepath.Join(root, "a", "f"):        filepath.Join(real, "a", "f"),
		filepath.Join(root, "rel", "x"):      filepath.Join(real, "a", "sub", "x"),
		filepath.Join(root, "dangling"):      filepath.Join(real, "a", ".env"),
		filepath.Join(root, "l", "..", "a"):  filepath.Join(real, "a"),
		filepath.Join(root, "loop"):          filepath.Join(root, "loop"),
		"relative/l":                         "relative/l",
	} {
		if got := NativeResolve(in); got != want {
			t.Errorf("NativeResolve(%s) = %s, want %s", in, got, want)
		}
	}
}
