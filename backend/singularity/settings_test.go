package singularity

import (
	"strings"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
)

func TestInstanceName(t *testing.T) {
	a, b := InstanceName("task-1"), InstanceName("task-2")
	if !strings.HasPrefix(a, "berth_") || len(a) != len("berth_")+12 || a == b || a != InstanceName("task-1") {
		t.Errorf("InstanceName: %q %q", a, b)
	}
}

func TestSettingsRejectBadValues(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		cfg  func(*config.Terminal)
		want string
	}{
		{env: map[string]string{"TERMINAL_SINGULARITY_BINDS": `/a:/b`}, want: `TERMINAL_SINGULARITY_BINDS="/a:/b": want a JSON list`},
		{env: map[string]string{"TERMINAL_SINGULARITY_BINDS": `["/a"]`}, want: `bind "/a": use host:container`},
		{env: map[string]string{"TERMINAL_SINGULARITY_BINDS": `["/a:/b:rx"]`}, want: `bind "/a:/b:rx"`},
		{env: map[string]string{"TERMINAL_SINGULARITY_BINDS": `["/a,b:/b"]`}, want: "splits --bind values at commas"},
		{cfg: func(c *config.Terminal) { c.DockerVolumes = []string{"rel"} }, want: "(from docker_volumes)"},
		{env: map[string]string{"TERMINAL_SINGULARITY_OVERLAY": "tmp"}, want: `TERMINAL_SINGULARITY_OVERLAY "tmp": use dir, image or auto`},
		{cfg: func(c *config.Terminal) { c.SingularityImage = "" }, want: "singularity_image is empty"},
		{cfg: func(c *config.Terminal) { c.Cwd = "work" }, want: `terminal.cwd "work" must be an absolute path`},
	} {
		cfg := config.Defaults()
		if c.cfg != nil {
			c.cfg(&cfg)
		}
		env := map[string]string{ScratchEnv: t.TempDir()}
		for k, v := range c.env {
			env[k] = v
		}
		_, err := settingsFrom(backend.Options{Key: "k", Config: cfg, Getenv: func(k string) string { return env[k] }})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want it to mention %q", c.env, err, c.want)
		}
	}
}

func TestSettingsDefaults(t *testing.T) {
	scratch := t.TempDir()
	cfg := config.Defaults()
	cfg.EnvPassthrough = []string{"A"}
	cfg.DockerVolumes = []string{"/data:/data:ro"}
	env := map[string]string{ScratchEnv: scratch, "TERMINAL_SINGULARITY_FORWARD_ENV": `["B"]`, "TERMINAL_SINGULARITY_BINDS": `["/x:/y"]`}
	s, err := settingsFrom(backend.Options{Key: "k", Config: cfg, Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatal(err)
	}
	if s.cwd != "/root" || s.scratch != scratch || s.overlay != overlayAuto || !s.persistent ||
		strings.Join(s.forward, ",") != "A,B" || strings.Join(s.binds, ",") != "/x:/y,/data:/data:ro" {
		t.Errorf("settings: %+v", s)
	}
}

func TestScratchFallsBackToBerthHome(t *testing.T) {
	home := t.TempDir()
	d, err := scratchDir(func(k string) string {
		if k == "USER" {
			return "berth-test-user-without-scratch"
		}
		return ""
	}, home)
	if err != nil || (d != home+"/singularity" && !strings.HasPrefix(d, "/scratch/")) {
		t.Errorf("scratch = %q, %v", d, err)
	}
}

func TestFatalLines(t *testing.T) {
	ce := &cliError{stderr: "INFO:    Instance stats will not be available - cannot use systemd cgroups manager\n" +
		"\x1b[91mERROR  : Requesting capability set 0x1 while permitted capability set is 0x0\n\x1b[0m" +
		"FATAL:   while executing starter: failed to start instance: while running /x/starter: exit status 1\n"}
	if got := ce.fatal(); got != "Requesting capability set 0x1 while permitted capability set is 0x0" {
		t.Errorf("fatal() = %q", got)
	}
	if isCgroupRefusal(ce) {
		t.Error("an INFO line about cgroups was taken for a refused limit")
	}
}
