package testenv

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
)

// fakeTB records how Need ended a test: skipped, failed, or neither.
// Skipf and Fatalf end the calling goroutine, as testing's do.
type fakeTB struct {
	testing.TB // nil: calling anything not overridden panics
	skipped    string
	failed     string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Skipf(format string, args ...any) {
	f.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls fn with a fake TB on a goroutine of its own, so that Skipf
// and Fatalf can end it, and returns the TB once fn has ended.
func run(fn func(t testing.TB)) *fakeTB {
	f := &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f
}

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestNeed(t *testing.T) {
	here := func() error { return nil }
	gone := func() error { return errors.New("dial unix /var/run/docker.sock: no such file") }
	const skipDocker = "docker tests skipped: set BERTH_TEST_ENGINES=docker (or all) to run them"
	for _, c := range []struct {
		name    string
		env     map[string]string
		engine  Engine
		missing bool     // the probe reports the engine missing
		skip    string   // want a skip with exactly this line
		fail    []string // want a failure whose message holds these
		probed  bool     // want the probe called
	}{
		{name: "default, present", engine: Docker, skip: skipDocker},
		{name: "default, missing", engine: Docker, missing: true, skip: skipDocker},
		{name: "CI, present", env: map[string]string{"CI": "true"}, engine: Docker, probed: true},
		{name: "CI, missing", env: map[string]string{"CI": "true"}, engine: Docker, missing: true, probed: true,
			fail: []string{"docker is selected (CI is set", "no such file", "a Docker daemon", "scripts/ensure-docker.sh", "leave docker out of BERTH_TEST_ENGINES"}},
		{name: "all, present", env: map[string]string{Var: "all"}, engine: Kubernetes, probed: true},
		{name: "all, missing", env: map[string]string{Var: "all"}, engine: Kubernetes, missing: true, probed: true,
			fail: []string{"kubernetes is selected (BERTH_TEST_ENGINES=all)", "scripts/ensure-k8s.sh"}},
		{name: "none", env: map[string]string{Var: "none"}, engine: Docker, skip: skipDocker},
		{name: "none beats CI", env: map[string]string{Var: "none", "CI": "true"}, engine: Docker, skip: skipDocker},
		{name: "a list beats CI", env: map[string]string{Var: "ssh", "CI": "true"}, engine: Docker, skip: skipDocker},
		{name: "listed", env: map[string]string{Var: "docker"}, engine: Docker, probed: true},
		{name: "listed among others, spaces", env: map[string]string{Var: " docker , ssh "}, engine: SSH, probed: true},
		{name: "listed, missing", env: map[string]string{Var: "landlock,ssh"}, engine: Landlock, missing: true, probed: true,
			fail: []string{"landlock is selected (BERTH_TEST_ENGINES=landlock,ssh)", "Landlock"}},
		{name: "not listed", env: map[string]string{Var: "ssh,kubernetes"}, engine: Docker, skip: skipDocker},
		{name: "unknown name", env: map[string]string{Var: "docker,dokcer"}, engine: Docker,
			fail: []string{`unknown engine "dokcer"`, "docker, ssh, kubernetes"}},
		{name: "all with others", env: map[string]string{Var: "all,docker"}, engine: Docker,
			fail: []string{`"all" cannot be combined`}},
		{name: "empty name", env: map[string]string{Var: "docker,,ssh"}, engine: Docker, fail: []string{"an empty name"}},
		{name: "unknown engine asked", env: map[string]string{Var: "all"}, engine: "k8s",
			fail: []string{`unknown engine "k8s"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			probed := false
			probe := func() error {
				probed = true
				if c.missing {
					return gone()
				}
				return here()
			}
			f := run(func(tb testing.TB) { need(tb, c.engine, probe, env(c.env)) })
			if probed != c.probed {
				t.Errorf("probe called: %v, want %v", probed, c.probed)
			}
			switch {
			case c.skip != "":
				if f.skipped != c.skip || f.failed != "" {
					t.Errorf("skipped %q, failed %q; want skipped %q", f.skipped, f.failed, c.skip)
				}
			case c.fail != nil:
				if f.failed == "" || f.skipped != "" {
					t.Fatalf("failed %q, skipped %q; want a failure", f.failed, f.skipped)
				}
				for _, w := range c.fail {
					if !strings.Contains(f.failed, w) {
						t.Errorf("failure %q does not say %q", f.failed, w)
					}
				}
			default:
				if f.failed != "" || f.skipped != "" {
					t.Errorf("failed %q, skipped %q; want the test to run", f.failed, f.skipped)
				}
			}
		})
	}
}

// A selected engine without a probe is a mistake in the test, not an
// engine that is here.
func TestNeedWithoutProbe(t *testing.T) {
	f := run(func(tb testing.TB) { need(tb, Docker, nil, env(map[string]string{Var: "docker"})) })
	if !strings.Contains(f.failed, "without a probe") {
		t.Fatalf("failed %q, skipped %q", f.failed, f.skipped)
	}
}

// Need reads the process's environment.
func TestNeedReadsTheEnvironment(t *testing.T) {
	t.Setenv("CI", "true")
	t.Setenv(Var, "")
	f := run(func(tb testing.TB) { Need(tb, SSH, func() error { return errors.New("gone") }) })
	if !strings.Contains(f.failed, "ssh is selected (CI is set") {
		t.Errorf("with CI set: failed %q, skipped %q", f.failed, f.skipped)
	}
	t.Setenv(Var, "none")
	f = run(func(tb testing.TB) { Need(tb, SSH, func() error { return errors.New("gone") }) })
	if f.skipped == "" {
		t.Errorf("with %s=none: failed %q, not skipped", Var, f.failed)
	}
}

func TestProbes(t *testing.T) {
	if err := Programs("sh")(); err != nil {
		t.Errorf("Programs(sh): %v", err)
	}
	err := Programs("sh", "berth-no-such-program-1", "berth-no-such-program-2")()
	if err == nil || !strings.Contains(err.Error(), "berth-no-such-program-1, berth-no-such-program-2") || strings.Contains(err.Error(), "sh,") {
		t.Errorf("Programs with two missing: %v", err)
	}
	a, b := errors.New("a missing"), errors.New("b missing")
	err = All(func() error { return a }, func() error { return nil }, func() error { return b })()
	if !errors.Is(err, a) || !errors.Is(err, b) {
		t.Errorf("All: %v", err)
	}
	if err := All(func() error { return nil })(); err != nil {
		t.Errorf("All of one present: %v", err)
	}
	if (IsRoot() == nil) != (os.Geteuid() == 0) {
		t.Errorf("IsRoot() = %v as uid %d", IsRoot(), os.Geteuid())
	}
}

// docs/testing.md names every engine in its table, as the variable takes
// it, so a newcomer can find what to install for each.
func TestEnginesDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/testing.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range Engines() {
		if !strings.Contains(string(b), "| `"+string(e)+"` |") {
			t.Errorf("docs/testing.md has no table row for the engine %s (| `%s` | ...)", e, e)
		}
	}
}
