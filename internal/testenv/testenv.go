// Package testenv is the one door through which a test asks for an engine:
// something outside the Go toolchain that the test drives, such as a Docker
// daemon, an sshd, the local Kubernetes cluster or the kernel's
// confinement. Its subpackages (dockerenv, sshenv, k8senv, apptainerenv,
// modalfake, daytonafake) give tests those engines; they all ask here
// first.
//
// Which engines a run uses is chosen, not guessed from what happens to be
// installed. BERTH_TEST_ENGINES lists them: engine names separated by
// commas, or "all", or "none". A test that needs an engine calls Need
// before it touches it, and then
//
//   - an engine not selected skips the test, with one line naming the
//     variable;
//   - a selected engine that is here lets the test run;
//   - a selected engine that is missing fails the test, naming the engine,
//     what is missing and how to install or start it.
//
// Without the variable the selection is "all" when CI is set, so a missing
// engine never passes silently in CI, and "none" otherwise: a plain
// `go test ./...` runs the same tests, in minutes, on every machine,
// whatever it has installed or running. This package is the only one that
// reads CI.
package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Var is the environment variable that selects the engines.
const Var = "BERTH_TEST_ENGINES"

// Engine names an outside dependency of some tests, as Var lists it.
type Engine string

// The engines. Each is a separate thing to install, start or be granted,
// and each says in Need's failure how.
const (
	Docker     Engine = "docker"
	SSH        Engine = "ssh"
	Kubernetes Engine = "kubernetes"
	Apptainer  Engine = "apptainer"
	Node       Engine = "node"
	Landlock   Engine = "landlock"
	Root       Engine = "root"
	Namespaces Engine = "namespaces"
	BusyBox    Engine = "busybox"
)

type about struct {
	what string // what the tests need, in a phrase
	fix  string // how to install or start it
}

// engines lists every engine, in the order Engines returns them.
var engines = []struct {
	e Engine
	about
}{
	{Docker, about{
		"a Docker daemon answering at $DOCKER_HOST (default /var/run/docker.sock); the docker backend, the modal and daytona fakes and the singularity stand-in's images run on it",
		"sudo bash scripts/ensure-docker.sh (Debian: installs docker.io and busybox-static, starts dockerd)"}},
	{SSH, about{
		"OpenSSH's sshd at /usr/sbin/sshd (the tests start private ones on 127.0.0.1)",
		"sudo bash scripts/ensure-sshd.sh (apt-get install openssh-server)"}},
	{Kubernetes, about{
		"the single-node test cluster (/var/lib/berth-k8s/admin.kubeconfig, node berth-node Ready)",
		"sudo bash scripts/ensure-k8s.sh (builds Kubernetes once, minutes; later starts it in seconds)"}},
	{Apptainer, about{
		"root, bubblewrap, squashfs-tools, util-linux and e2fsprogs for the apptainer stand-in, and writable cgroups for its limits",
		"sudo bash scripts/ensure-apptainer-deps.sh, and run the tests as root"}},
	{Node, about{
		"Node.js 20 or later and npm (Daytona's TypeScript SDK is run against the daytona fake; npm ci fetches it once)",
		"sudo sh scripts/ensure-node.sh"}},
	{Landlock, about{
		"a kernel that enforces berth's workspace confinement (Landlock ABI 6, seccomp user notification), and python3 for the attacks",
		"a Linux 6.12 or later kernel with Landlock enabled (CONFIG_SECURITY_LANDLOCK=y, landlock in lsm=); apt-get install python3"}},
	{Root, about{
		"root privileges (tests that run helpers as another user, make their own PID namespace, or lock a directory with chattr +i)",
		"run the tests as root, e.g. sudo env PATH=$PATH go test ./..."}},
	{Namespaces, about{
		"util-linux's unshare and setpriv and bubblewrap's bwrap, with user namespaces allowed (callers put in sandboxes)",
		"apt-get install util-linux bubblewrap (scripts/ensure-apptainer-deps.sh installs bubblewrap)"}},
	{BusyBox, about{
		"busybox-static's busybox (a busybox-only shell; its nc applet relays ssh's ProxyCommand)",
		"apt-get install busybox-static (scripts/ensure-docker.sh installs it)"}},
}

// Engines returns the names of all engines.
func Engines() []Engine {
	out := make([]Engine, len(engines))
	for i, e := range engines {
		out[i] = e.e
	}
	return out
}

func lookup(e Engine) (about, bool) {
	for _, x := range engines {
		if x.e == e {
			return x.about, true
		}
	}
	return about{}, false
}

func names() string {
	var s []string
	for _, e := range engines {
		s = append(s, string(e.e))
	}
	return strings.Join(s, ", ")
}

// Need lets t run only against a selected engine that is here (see the
// package documentation). probe says what is missing, nil when the engine
// is here; it is called only when e is selected, so a run that does not
// select e never waits on it. A probe may keep what it found (a client, a
// path) in the caller's variables.
func Need(t testing.TB, e Engine, probe func() error) {
	t.Helper()
	need(t, e, probe, os.Getenv)
}

func need(t testing.TB, e Engine, probe func() error, getenv func(string) string) {
	t.Helper()
	ab, ok := lookup(e)
	if !ok {
		t.Fatalf("testenv: unknown engine %q; the engines are %s", e, names())
		return
	}
	sel, err := selection(getenv)
	if err != nil {
		t.Fatalf("testenv: %v", err)
		return
	}
	if !sel.has(e) {
		t.Skipf("%s tests skipped: set %s=%s (or all) to run them", e, Var, e)
		return
	}
	if probe == nil {
		t.Fatalf("testenv: Need(%s) without a probe", e)
		return
	}
	if err := probe(); err != nil {
		t.Fatalf("%s is selected (%s) but missing: %v\n%s needs %s.\nTo get it: %s.\nTo skip these tests instead, leave %s out of %s.",
			e, sel.why, err, e, ab.what, ab.fix, e, Var)
	}
}

// selected is a parsed selection.
type selected struct {
	all bool
	set map[Engine]bool
	why string // how it was chosen, for a failure message
}

func (s selected) has(e Engine) bool { return s.all || s.set[e] }

// selection reads Var (and CI when Var is empty).
func selection(getenv func(string) string) (selected, error) {
	v := strings.TrimSpace(getenv(Var))
	if v == "" {
		if getenv("CI") != "" {
			return selected{all: true, why: "CI is set and " + Var + " is not, so all engines are"}, nil
		}
		return selected{}, nil
	}
	sel := selected{set: map[Engine]bool{}, why: Var + "=" + v}
	words := strings.Split(v, ",")
	for _, w := range words {
		w = strings.TrimSpace(w)
		switch {
		case w == "all" || w == "none":
			if len(words) > 1 {
				return selected{}, fmt.Errorf("%s=%q: %q cannot be combined with other names; give %q alone, or a comma-separated list of engines (%s)", Var, v, w, w, names())
			}
			sel.all = w == "all"
		case w == "":
			return selected{}, fmt.Errorf("%s=%q: an empty name; give engine names separated by commas (%s), or all, or none", Var, v, names())
		default:
			if _, ok := lookup(Engine(w)); !ok {
				return selected{}, fmt.Errorf("%s=%q: unknown engine %q; the engines are %s (or all, or none)", Var, v, w, names())
			}
			sel.set[Engine(w)] = true
		}
	}
	return sel, nil
}

// Programs returns a probe that finds every one of progs on PATH and
// names those it cannot find.
func Programs(progs ...string) func() error {
	return func() error {
		var miss []string
		for _, p := range progs {
			if _, err := exec.LookPath(p); err != nil {
				miss = append(miss, p)
			}
		}
		if len(miss) > 0 {
			return fmt.Errorf("not on PATH: %s", strings.Join(miss, ", "))
		}
		return nil
	}
}

// IsRoot is a probe: nil when the test process runs as root.
func IsRoot() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("the tests run as uid %d, not root", os.Geteuid())
	}
	return nil
}

// All returns a probe that runs every one of probes and reports all they
// find missing.
func All(probes ...func() error) func() error {
	return func() error {
		var errs []error
		for _, p := range probes {
			if err := p(); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
}
