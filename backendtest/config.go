package backendtest

import (
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
)

// Config is one configuration of a backend the suite runs on, a row of the
// backend's table (rclone's test_all config: "TestS3" and
// "TestS3,directory_markers"). The primary configuration (Name "") runs the
// whole suite; a secondary one (another transport, another mode, another
// fake) runs the groups it can change, named in Groups.
type Config struct {
	// Name names a secondary configuration ("workspace", "jump", "spdy",
	// "kind"); "" is the backend's primary configuration.
	Name string
	// Groups lists what a secondary configuration can change: groups
	// ("Process", "Terminal", "Background", "Hardening", "Fork", "Files",
	// "FileWriter", "Persistence", "Internal") or single cases
	// ("Hardening/BackgroundKillKillsEscapedProcesses"). Only those run.
	// The primary configuration runs everything and lists nothing.
	Groups []string
	// Full runs the configuration only in the full tier
	// (BERTH_TEST_TIER=all, what `make test-all` sets); elsewhere it skips
	// with one line naming the variable.
	Full bool
	// ShellTests also runs, in a secondary configuration, the cases about
	// berth's own shell code (shell options, hijacked names, the gate's
	// nesting bound), which the primary configuration runs anyway: for a
	// configuration that changes what the shell itself runs under (the
	// local backend's kernel confinement), not one that only carries its
	// bytes another way.
	ShellTests bool
	// Setup prepares the configuration (its fake, its namespace, its jump
	// host) when the configuration runs, and returns its factory and
	// options.
	Setup func(t *testing.T) Target
}

// Target is what a configuration's Setup returns: the factory of its
// environments and the suite's options for it.
type Target struct {
	// New builds a backend for a fresh environment (a container, a pod, a
	// sandbox, a connection) and registers its cleanup with t. The suite
	// calls it once per group and once per case that must own its
	// environment, and counts the calls.
	New func(t testing.TB) backend.Backend
	// NewFrom, for a backend that implements backend.Checkpointer, builds
	// a backend for a new environment as the backend's registered
	// constructor builds one from opts, with the configuration's own
	// settings (its image, host, namespace, berth home) added: the Fork
	// group's manager gives opts.Key, opts.From (a checkpoint this backend
	// made, for a fork or a restore; nil for the group's source), Home and
	// Progress, and ignores nothing else it passes the constructor. It
	// registers the environment's cleanup with t, as New does, and the
	// suite counts its calls with New's. Nil: the Fork group only checks
	// that the backend refuses to fork, clearly (its environments must then
	// report Capabilities.Checkpoint "").
	NewFrom func(t testing.TB, opts backend.Options) backend.Backend
	// Checkpoints removes the checkpoints the backend keeps, as its
	// Registration.Checkpoints does, with the configuration's settings
	// (the options it is given are the Fork group's manager's); needed
	// with NewFrom.
	Checkpoints backend.CheckpointAdmin
	Options
}

// MaxEnvironments bounds the environments one configuration's run of the
// suite may create (issue 29): one per group, and one for each of the few
// cases that must own theirs. A run that creates more fails: some case
// has gone back to building an environment of its own.
const MaxEnvironments = 15

// MaxFromCheckpoints bounds, apart, the environments the Fork group makes
// from checkpoints (a fork and a restore of it: what it tests, which no
// group's environment can stand in for); its source environment counts
// with MaxEnvironments, as every group's does.
const MaxFromCheckpoints = 2

// TierVar is the environment variable that selects the test tier: unset
// (or "default") runs every backend's primary configuration and its
// secondary configurations not marked Full; "all" (what `make test-all`
// sets) runs those marked Full too.
const TierVar = "BERTH_TEST_TIER"

// fullTier reports whether TierVar asks for the full tier; a value it does
// not know fails t.
func fullTier(t *testing.T) bool {
	switch v := os.Getenv(TierVar); v {
	case "", "default":
		return false
	case "all":
		return true
	default:
		t.Fatalf("%s=%q: want all (the full tier, as make test-all sets it), default, or nothing", TierVar, v)
		return false
	}
}

// Run runs the conformance suite on each configuration of the backend
// named name: the primary one (Name "") in t itself, each secondary one in
// a subtest of its name, one after another in the order given. Each
// configuration's run logs one line, "backendtest: name[/config]: N
// environments created", and fails when N exceeds MaxEnvironments.
func Run(t *testing.T, name string, configs ...Config) {
	checkSuite(t)
	full := fullTier(t) // a value it does not know fails every backend's run
	seen := map[string]bool{}
	for _, c := range configs {
		if seen[c.Name] {
			t.Fatalf("backendtest: %s: configuration %q given twice", name, c.Name)
		}
		seen[c.Name] = true
		if c.Setup == nil {
			t.Fatalf("backendtest: %s: configuration %q has no Setup", name, c.Name)
		}
		if c.Name == "" && (len(c.Groups) > 0 || c.Full || c.ShellTests) {
			t.Fatalf("backendtest: %s: the primary configuration runs the whole suite in every tier; Groups, Full and ShellTests are for secondary ones", name)
		}
		if c.Name != "" && len(c.Groups) == 0 {
			t.Fatalf("backendtest: %s/%s: a secondary configuration names the groups it can change (Config.Groups)", name, c.Name)
		}
		for _, g := range c.Groups {
			if !knownName(g) {
				t.Fatalf("backendtest: %s/%s: Groups names %q, which the suite does not have (a group such as \"Process\", or \"Group/Case\")", name, c.Name, g)
			}
		}
	}
	for _, c := range configs {
		if c.Name == "" {
			runConfig(t, name, c)
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			if c.Full && !full {
				t.Skipf("backendtest: %s/%s runs in the full tier only: set %s=all (make test-all)", name, c.Name, TierVar)
			}
			runConfig(t, name, c)
		})
	}
}

// runConfig runs one configuration, counting the environments it creates.
func runConfig(t *testing.T, name string, c Config) {
	label := name
	if c.Name != "" {
		label += "/" + c.Name
	}
	tgt := c.Setup(t)
	if tgt.New == nil {
		t.Fatalf("backendtest: %s: Setup returned no factory (Target.New)", label)
	}
	opts := tgt.Options
	if opts.Grace <= 0 {
		opts.Grace = time.Second
	}
	if opts.Scratch == "" {
		opts.Scratch = "/tmp"
	}
	if opts.KeptDir == "" {
		opts.KeptDir = "$HOME"
	}
	// Environments created: a factory call builds one; Reopen builds one
	// for a key it has not seen, and reattaches to it after that.
	var created atomic.Int32
	var keysMu sync.Mutex
	keys := map[string]bool{}
	newBackend := func(tb testing.TB) backend.Backend {
		created.Add(1)
		be := tgt.New(tb)
		if be.Name() != name {
			tb.Fatalf("backendtest: %s: the factory built a %q backend", label, be.Name())
		}
		return be
	}
	var fromCheckpoint atomic.Int32
	var newFrom func(testing.TB, backend.Options) backend.Backend
	if tgt.NewFrom != nil {
		newFrom = func(tb testing.TB, o backend.Options) backend.Backend {
			if o.From != nil {
				fromCheckpoint.Add(1)
			} else {
				created.Add(1)
			}
			be := tgt.NewFrom(tb, o)
			if be.Name() != name {
				tb.Fatalf("backendtest: %s: NewFrom built a %q backend", label, be.Name())
			}
			return be
		}
	}
	if reopen := opts.Reopen; reopen != nil {
		opts.Reopen = func(tb testing.TB, key string) backend.Backend {
			keysMu.Lock()
			if !keys[key] {
				keys[key] = true
				created.Add(1)
			}
			keysMu.Unlock()
			return reopen(tb, key)
		}
	}
	defer func() {
		n, f := created.Load(), fromCheckpoint.Load()
		t.Logf("backendtest: %s: %d environments created, and %d from checkpoints", label, n, f)
		if n > MaxEnvironments {
			t.Errorf("backendtest: %s: %d environments created, more than %d: a case builds an environment of its own where its group's would do (mark only those that must own one fresh)", label, n, MaxEnvironments)
		}
		if f > MaxFromCheckpoints {
			t.Errorf("backendtest: %s: %d environments made from checkpoints, more than %d: the Fork group makes one fork and one restore", label, f, MaxFromCheckpoints)
		}
	}()
	sel := func(n string) bool { return true }
	if c.Name != "" {
		sel = func(n string) bool {
			if shellOnly[n] && !c.ShellTests {
				return false
			}
			group, _, _ := strings.Cut(n, "/")
			return slices.Contains(c.Groups, group) || slices.Contains(c.Groups, n)
		}
	}
	s := &Suite{opts: opts, newBackend: newBackend, newFrom: newFrom, admin: tgt.Checkpoints, name: name}
	s.run(t, sel)
}

// extraGroups are the groups run outside suiteGroups.
var extraGroups = []string{"Files", "FileWriter", "Persistence", "Internal"}

// knownName reports whether n names a group or a case of the suite.
func knownName(n string) bool {
	if slices.Contains(extraGroups, n) {
		return true
	}
	for _, c := range persistenceTests() {
		if n == "Persistence/"+c.name {
			return true
		}
	}
	for _, g := range suiteGroups() {
		if n == g.name {
			return true
		}
		for _, c := range g.tests {
			if n == g.name+"/"+c.name {
				return true
			}
		}
	}
	return false
}

// checkSuite fails t when shellOnly names a case the suite does not have.
func checkSuite(t *testing.T) {
	for n := range shellOnly {
		if !knownName(n) || !strings.Contains(n, "/") {
			t.Fatalf("backendtest: shellOnly names %s, which the suite does not have", n)
		}
	}
}
