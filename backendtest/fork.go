package backendtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/process"
	"github.com/a55dbaac/berth/terminal"
)

// The Fork group: fork, checkpoint and restore (issue 31, docs/fork.md),
// driven through a manager built with manager.NewWithFactory over the
// configuration's Target.NewFrom, as berth drives them. Its cases share
// one fixture, built by the first case that needs it and closed when the
// group ends: a source environment with files and shell state (a file, a
// cwd, an export, a function, an alias, a shell option) and a fork of it.
// Where the backend can checkpoint (Capabilities.Checkpoint), it makes
// three environments: the source (counted with MaxEnvironments, as every
// group's environment is), its fork and a restore of the fork (counted
// with MaxFromCheckpoints): the restore is an environment from a
// checkpoint of an environment that was itself made from one (a fork of a
// fork, in what the backend does), so the source's files pass through two
// generations. Where it cannot, it makes one, and checks only that
// forking and checkpointing it fail clearly.

// forkTests are the Fork group's cases, in the order they build on each
// other.
func forkTests() []namedTest {
	return []namedTest{
		{"StateCarried", (*Suite).testForkStateCarried, freshEnv},
		{"IndependentBothWays", (*Suite).testForkIndependent, freshEnv},
		{"RestoreOfAFork", (*Suite).testForkRestore, freshEnv},
		{"Bounds", (*Suite).testForkBounds, freshEnv},
		{"RefusedClearly", (*Suite).testForkRefused, freshEnv},
	}
}

// The environment keys of the fixture.
const (
	forkSrc = "fork-src"
	forkDst = "fork-dst"
)

// forkFixture is what the Fork group's cases share: one per run of the
// group, built lazily by the first case that asks (forkFixture.get).
type forkFixture struct {
	mu    sync.Mutex
	gt    *testing.T // the group's: cleanups run when the group ends
	cur   testing.TB // the case running now: failures go there
	built bool
	err   error

	m       *manager.Manager
	cfg     *config.Config
	can     bool   // the source's backend can checkpoint
	why     string // its NoCheckpoint
	name    string // its Name
	dir     string // the directory with the source's files, in the source
	bash    bool   // the source's shell is bash
	bgID    string // a background process of the source
	forked  bool   // forkDst was made
	forkRes manager.ForkResult
}

// caseTB is the testing.TB a factory called during a Fork case gets: its
// cleanups are the group's (the environment outlives the case), its
// failures and logs the case's.
type caseTB struct {
	testing.TB // the group's
	fx         *forkFixture
}

func (c caseTB) Error(args ...any) { c.fx.cur.Helper(); c.fx.cur.Error(args...) }
func (c caseTB) Errorf(format string, args ...any) {
	c.fx.cur.Helper()
	c.fx.cur.Errorf(format, args...)
}
func (c caseTB) Fail()             { c.fx.cur.Fail() }
func (c caseTB) FailNow()          { c.fx.cur.FailNow() }
func (c caseTB) Failed() bool      { return c.fx.cur.Failed() }
func (c caseTB) Fatal(args ...any) { c.fx.cur.Helper(); c.fx.cur.Fatal(args...) }
func (c caseTB) Fatalf(format string, args ...any) {
	c.fx.cur.Helper()
	c.fx.cur.Fatalf(format, args...)
}
func (c caseTB) Log(args ...any)                  { c.fx.cur.Log(args...) }
func (c caseTB) Logf(format string, args ...any)  { c.fx.cur.Logf(format, args...) }
func (c caseTB) Skip(args ...any)                 { c.fx.cur.Skip(args...) }
func (c caseTB) SkipNow()                         { c.fx.cur.SkipNow() }
func (c caseTB) Skipf(format string, args ...any) { c.fx.cur.Skipf(format, args...) }

// fork returns the group's fixture with its source made (and, when the
// backend can checkpoint, its fork: want "fork"), for the case t.
func (s *Suite) fork(t *testing.T, wantFork bool) *forkFixture {
	t.Helper()
	fx := s.forks
	fx.mu.Lock()
	fx.cur = t
	fx.mu.Unlock()
	if !fx.built {
		fx.built = true
		fx.err = s.buildForkSource(t, fx)
	}
	if fx.err != nil {
		t.Fatalf("the Fork group's source environment could not be made: %v", fx.err)
	}
	if wantFork && fx.can && !fx.forked {
		fx.forked = true
		res, err := fx.m.Fork(ctx(t), forkSrc, forkDst)
		if err != nil {
			fx.err = err
			t.Fatalf("fork %s into %s: %v", forkSrc, forkDst, err)
		}
		fx.forkRes = res
	}
	if wantFork && fx.can && fx.forkRes.To == "" {
		t.Fatal("the fork the group's cases build on failed in an earlier case")
	}
	return fx
}

// ctx is a context for one operation of the group: long enough for a
// busy machine to copy an environment, never a hang.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return c
}

// buildForkSource makes the group's manager and its source environment,
// and leaves files and shell state in it.
func (s *Suite) buildForkSource(t *testing.T, fx *forkFixture) error {
	gt := fx.gt
	tb := caseTB{TB: gt, fx: fx}
	cfg := &config.Config{Home: gt.TempDir(), Terminal: config.Default().Terminal, MaxOutputChars: 50000, Checkpoints: config.Default().Checkpoints}
	cfg.Terminal.Backend = s.name
	cfg.Terminal.Cwd = s.opts.Cwd
	cfg.Terminal.DaemonTermGraceSeconds = s.opts.Grace.Seconds()
	cfg.Terminal.Timeout = 120
	fx.cfg = cfg
	var m *manager.Manager
	var closeOnce sync.Once
	closeAll := func() {
		closeOnce.Do(func() {
			c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for _, key := range []string{forkSrc, forkDst} {
				cps, _ := m.Checkpoints(c, key)
				for _, cp := range cps {
					if err := m.RemoveCheckpoint(c, key, cp.Name); err != nil {
						gt.Errorf("remove checkpoint %s of %s at the group's end: %v", cp.Name, key, err)
					}
				}
			}
			m.CloseAll(c)
		})
	}
	m = manager.NewWithFactory(cfg, slog.New(slog.DiscardHandler), func(c context.Context, opts backend.Options) (backend.Backend, error) {
		var be backend.Backend
		if s.newFrom != nil {
			be = s.newFrom(tb, opts)
		} else {
			if opts.From != nil {
				return nil, errors.New("backendtest: the configuration gives no Target.NewFrom, so no environment can be made from a checkpoint")
			}
			be = s.newBackend(tb)
		}
		// Cleanups run last-registered first: the manager closes (and
		// removes the checkpoints) while the backend still reaches the
		// target.
		gt.Cleanup(closeAll)
		return be, nil
	})
	m.SetCheckpointAdmin(s.admin)
	gt.Cleanup(closeAll)
	fx.m = m
	env, err := m.Env(ctx(t), forkSrc)
	if err != nil {
		return err
	}
	caps := backend.CapabilitiesOf(env.Backend())
	fx.name, fx.can, fx.why = env.Backend().Name(), caps.Checkpoint != "", caps.NoCheckpoint
	if fx.can && s.newFrom == nil {
		return fmt.Errorf("%s reports it can checkpoint (%q), but the configuration gives no Target.NewFrom to make environments from a checkpoint", fx.name, caps.Checkpoint)
	}
	if _, ok := env.Backend().(backend.Checkpointer); fx.can && !ok {
		return fmt.Errorf("%s reports it can checkpoint (%q) but does not implement backend.Checkpointer", fx.name, caps.Checkpoint)
	}
	if fx.can && s.admin == nil {
		return fmt.Errorf("%s can checkpoint, but the configuration gives no Target.Checkpoints to remove checkpoints", fx.name)
	}
	if !fx.can {
		return nil
	}
	root := s.opts.CheckpointDir
	if root == "" {
		root = s.opts.Scratch
	}
	fx.dir = path.Join(root, "berth-fork-"+s.tag, "sub")
	r := m.Run(ctx(t), forkSrc, terminal.Request{Command: "[ -n \"${BASH_VERSION-}\" ] && echo bash; mkdir -p " + fx.dir + " && cd " + fx.dir +
		" && printf 'from-source\\n' > carried.txt && printf 'generation-1\\n' > gen1.txt && export BERTH_FORK_VAR='v 1' && umask 027"})
	if r.Error != nil || r.ExitCode != 0 {
		return fmt.Errorf("setting up the source: %+v", r)
	}
	fx.bash = strings.HasPrefix(r.Output, "bash")
	if fx.bash {
		r = m.Run(ctx(t), forkSrc, terminal.Request{Command: "berth_fork_fn() { echo \"fn $1\"; }\nalias berth_fork_alias='echo aliased'\nset -o pipefail"})
		if r.Error != nil || r.ExitCode != 0 {
			return fmt.Errorf("setting up the source's functions: %+v", r)
		}
	}
	st := m.Background(ctx(t), forkSrc, terminal.Request{Command: "sleep 1001" + s.tag})
	if st.Error != nil {
		return fmt.Errorf("a background process in the source: %s", *st.Error)
	}
	fx.bgID = st.SessionID
	gt.Cleanup(func() {
		m.Process(context.Background(), forkSrc, process.Request{Action: "kill", SessionID: fx.bgID})
	})
	return nil
}

// in runs command in key's environment and returns its output, failing t
// when it could not run.
func (fx *forkFixture) in(t *testing.T, key, command string) terminal.Result {
	t.Helper()
	r := fx.m.Run(ctx(t), key, terminal.Request{Command: command})
	if r.Error != nil {
		t.Fatalf("%s: %q: %s", key, command, *r.Error)
	}
	return r
}

// relocated is where the source's directory dir is in key's environment:
// the same path, unless its backend keeps the copy elsewhere (Relocator).
func (fx *forkFixture) relocated(t *testing.T, key, dir string) string {
	t.Helper()
	env, err := fx.m.Env(ctx(t), key)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := env.Backend().(backend.Relocator); ok {
		return r.Relocate(dir)
	}
	return dir
}

// checkState checks that key's shell and files hold the source's state:
// cwd want, the carried file with content file, the export, the umask and,
// on bash, the function, the alias and pipefail.
func (fx *forkFixture) checkState(t *testing.T, key, want, file string) {
	t.Helper()
	r := fx.in(t, key, "pwd; cat carried.txt gen1.txt; echo \"$BERTH_FORK_VAR\"; umask")
	lines := []string{want, file, "generation-1", "v 1", "0027"}
	if got := strings.Split(r.Output, "\n"); !slices.Equal(got, lines) {
		t.Errorf("%s: cwd, files, export and umask:\n got %q\nwant %q", key, got, lines)
	}
	if !fx.bash {
		return
	}
	r = fx.in(t, key, "berth_fork_fn x; berth_fork_alias; shopt -qo pipefail && echo pipefail")
	if r.Output != "fn x\naliased\npipefail" {
		t.Errorf("%s: function, alias and shell option: got %q, want %q", key, r.Output, "fn x\naliased\npipefail")
	}
}

// testForkStateCarried: a fork has the source's files and shell state —
// a file, the cwd (where the backend keeps the copy: Relocator), an
// export, the umask, and on bash a function, an alias and a shell option
// — and not its background processes, which go on in the source; the
// result says what was carried and that they were not.
func (s *Suite) testForkStateCarried(t *testing.T) {
	fx := s.fork(t, true)
	if !fx.can {
		t.Skipf("%s cannot checkpoint: %s (RefusedClearly checks the error)", fx.name, fx.why)
	}
	res := fx.forkRes
	want := fx.relocated(t, forkDst, fx.dir)
	fx.checkState(t, forkDst, want, "from-source")
	if res.From != forkSrc || res.To != forkDst || res.Files == "" || res.Cwd != want || !slices.Contains(res.Variables, "BERTH_FORK_VAR") {
		t.Errorf("fork result: %+v", res)
	}
	if fx.bash && (!slices.Contains(res.Functions, "berth_fork_fn") || !slices.Contains(res.Aliases, "berth_fork_alias") || !res.ShellOptions) {
		t.Errorf("fork result lacks the function, alias or options: %+v", res)
	}
	if len(res.NotCarried) == 0 || !strings.HasPrefix(res.NotCarried[0], "background processes") {
		t.Errorf("the fork result does not say background processes were not carried: %q", res.NotCarried)
	}
	if l := fx.m.Process(ctx(t), forkDst, process.Request{Action: "list"}); len(l["processes"].([]map[string]any)) != 0 {
		t.Errorf("the fork has background processes: %v", l)
	}
	if p := fx.m.Process(ctx(t), forkSrc, process.Request{Action: "poll", SessionID: fx.bgID}); p["status"] != process.Running {
		t.Errorf("the source's background process after the fork: %v", p)
	}
}

// testForkIndependent: after a fork, a write in the fork is not in the
// source, and a write in the source is not in the fork.
func (s *Suite) testForkIndependent(t *testing.T) {
	fx := s.fork(t, true)
	if !fx.can {
		t.Skipf("%s cannot checkpoint: %s", fx.name, fx.why)
	}
	fx.in(t, forkDst, "printf 'fork-only\\n' > only-in-fork.txt && printf 'changed-in-fork\\n' > carried.txt")
	fx.in(t, forkSrc, "printf 'source-only\\n' > only-in-source.txt")
	if r := fx.in(t, forkSrc, "cat carried.txt; test -e only-in-fork.txt && echo LEAKED || echo absent"); r.Output != "from-source\nabsent" {
		t.Errorf("the source after writes in the fork: %q", r.Output)
	}
	if r := fx.in(t, forkDst, "cat carried.txt only-in-fork.txt; test -e only-in-source.txt && echo LEAKED || echo absent"); r.Output != "changed-in-fork\nfork-only\nabsent" {
		t.Errorf("the fork after writes in the source: %q", r.Output)
	}
	// Shell state too: an export in one is not in the other.
	fx.in(t, forkDst, "export BERTH_FORK_ONLY=1")
	if r := fx.in(t, forkSrc, "echo \"${BERTH_FORK_ONLY-unset}\""); r.Output != "unset" {
		t.Errorf("an export in the fork reached the source: %q", r.Output)
	}
}

// testForkRestore: a checkpoint of the fork (itself made from a
// checkpoint), then changes to files and state, then a restore: the
// environment is replaced by one with the checkpoint's files (the
// source's first generation included) and shell state; its background
// processes were stopped; the checkpoint is listed before and after.
func (s *Suite) testForkRestore(t *testing.T) {
	fx := s.fork(t, true)
	if !fx.can {
		t.Skipf("%s cannot checkpoint: %s", fx.name, fx.why)
	}
	// The independence case may not have run (-run): the fork's files are
	// set here as that case leaves them.
	fx.in(t, forkDst, "printf 'fork-only\\n' > only-in-fork.txt && printf 'changed-in-fork\\n' > carried.txt")
	cwd := fx.in(t, forkDst, "pwd").Output
	info, err := fx.m.Checkpoint(ctx(t), forkDst, "cp1")
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "cp1" || info.Key != forkDst || info.Backend != s.name || info.Files == "" || info.Cwd != cwd || !slices.Contains(info.Variables, "BERTH_FORK_VAR") {
		t.Errorf("checkpoint: %+v", info)
	}
	bg := fx.m.Background(ctx(t), forkDst, terminal.Request{Command: "sleep 1002" + s.tag})
	if bg.Error != nil {
		t.Fatal(*bg.Error)
	}
	change := "printf 'after\\n' > carried.txt && rm only-in-fork.txt gen1.txt && printf 'new\\n' > new.txt && unset BERTH_FORK_VAR && umask 022 && cd /"
	if fx.bash {
		change += " && unset -f berth_fork_fn && unalias berth_fork_alias && set +o pipefail"
	}
	fx.in(t, forkDst, change)
	res, err := fx.m.Restore(ctx(t), forkDst, "cp1")
	if err != nil {
		t.Fatal(err)
	}
	if !res.Replaced || res.Name != "cp1" || res.Key != forkDst {
		t.Errorf("restore: %+v", res)
	}
	want := fx.relocated(t, forkDst, cwd)
	if res.Cwd != want {
		t.Errorf("restore result cwd %q, want %q", res.Cwd, want)
	}
	fx.checkState(t, forkDst, want, "changed-in-fork")
	if r := fx.in(t, forkDst, "cat only-in-fork.txt; test -e new.txt && echo NEW || echo absent; test -e only-in-source.txt && echo LEAKED || echo absent"); r.Output != "fork-only\nabsent\nabsent" {
		t.Errorf("files after the restore: %q", r.Output)
	}
	if p := fx.m.Process(ctx(t), forkDst, process.Request{Action: "poll", SessionID: bg.SessionID}); p["status"] == process.Running {
		t.Errorf("the replaced environment's background process still runs after the restore: %v", p)
	}
	cps, err := fx.m.Checkpoints(ctx(t), forkDst)
	if err != nil || len(cps) != 1 || cps[0].Name != "cp1" {
		t.Errorf("checkpoints of %s after the restore: %+v, %v", forkDst, cps, err)
	}
	// The source is untouched by all of it.
	if r := fx.in(t, forkSrc, "cat carried.txt"); r.Output != "from-source" {
		t.Errorf("the source after the fork's restore: %q", r.Output)
	}
}

// testForkBounds: checkpoints past checkpoints.max_per_environment, or
// past checkpoints.max_total_mb (where the backend reports sizes), fail
// with an error naming the key and its value, and every checkpoint kept
// before stays listed and removable; a name of a kept one replaces it; a
// bad name, an unknown checkpoint and a fork onto a live key fail
// clearly.
func (s *Suite) testForkBounds(t *testing.T) {
	fx := s.fork(t, false)
	if !fx.can {
		t.Skipf("%s cannot checkpoint: %s", fx.name, fx.why)
	}
	m := fx.m
	two := manager.WithCheckpointBounds(config.Checkpoints{MaxPerEnvironment: 2, MaxTotalMB: 4096})
	for _, n := range []string{"b1", "b2"} {
		if _, err := m.Checkpoint(ctx(t), forkSrc, n, two); err != nil {
			t.Fatalf("checkpoint %s: %v", n, err)
		}
	}
	_, err := m.Checkpoint(ctx(t), forkSrc, "b3", two)
	if !errors.Is(err, manager.ErrBound) || !strings.Contains(err.Error(), "checkpoints.max_per_environment (2)") || !strings.Contains(err.Error(), forkSrc) {
		t.Errorf("a third checkpoint with max_per_environment 2: %v", err)
	}
	info, err := m.Checkpoint(ctx(t), forkSrc, "b1", two)
	if err != nil || !info.Replaced {
		t.Errorf("a checkpoint replacing b1 under the bound: %+v, %v", info, err)
	}
	names := func() []string {
		cps, err := m.Checkpoints(ctx(t), forkSrc)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range cps {
			out = append(out, c.Name)
		}
		slices.Sort(out)
		return out
	}
	if got := names(); !slices.Equal(got, []string{"b1", "b2"}) {
		t.Errorf("checkpoints after the refused one: %v", got)
	}
	// The size bound: a checkpoint of more than 1 MB with 1 MB allowed.
	fx.in(t, forkSrc, "head -c 2097152 /dev/zero | tr '\\0' x > big.bin")
	_, err = m.Checkpoint(ctx(t), forkSrc, "big", manager.WithCheckpointBounds(config.Checkpoints{MaxPerEnvironment: 10, MaxTotalMB: 1}))
	fx.in(t, forkSrc, "rm -f big.bin")
	switch {
	case err == nil:
		if cps, _ := m.Checkpoints(ctx(t), forkSrc); len(cps) > 0 && cps[len(cps)-1].Size == 0 {
			t.Logf("%s reports no checkpoint sizes (Checkpoint.Size 0): checkpoints.max_total_mb cannot hold it", fx.name)
			m.RemoveCheckpoint(ctx(t), forkSrc, "big")
		} else {
			t.Errorf("a 2 MB checkpoint with max_total_mb 1 was kept: %+v", cps)
		}
	case !errors.Is(err, manager.ErrBound) || !strings.Contains(err.Error(), "checkpoints.max_total_mb (1)"):
		t.Errorf("a 2 MB checkpoint with max_total_mb 1: %v", err)
	}
	if got := names(); !slices.Equal(got, []string{"b1", "b2"}) {
		t.Errorf("checkpoints after the one past the size bound: %v", got)
	}
	// Bad input.
	if _, err := m.Checkpoint(ctx(t), forkSrc, "a/b"); err == nil || !strings.Contains(err.Error(), `"a/b"`) || !strings.Contains(err.Error(), "slash") {
		t.Errorf("a name with a slash: %v", err)
	}
	if _, err := m.Restore(ctx(t), forkSrc, "nope"); !errors.Is(err, manager.ErrNoCheckpoint) || !strings.Contains(err.Error(), `"nope"`) || !strings.Contains(err.Error(), "b1, b2") {
		t.Errorf("restore of an unknown checkpoint: %v", err)
	}
	if _, err := m.Fork(ctx(t), forkSrc, forkSrc); err == nil || !strings.Contains(err.Error(), forkSrc) {
		t.Errorf("a fork onto itself: %v", err)
	}
	if _, err := m.Fork(ctx(t), "fork-none", "fork-x"); !errors.Is(err, manager.ErrNoEnvironment) || !strings.Contains(err.Error(), `"fork-none"`) {
		t.Errorf("a fork of a key with no environment: %v", err)
	}
	for _, n := range []string{"b1", "b2"} {
		if err := m.RemoveCheckpoint(ctx(t), forkSrc, n); err != nil {
			t.Errorf("remove %s: %v", n, err)
		}
	}
	if got := names(); len(got) != 0 {
		t.Errorf("checkpoints after removing them: %v", got)
	}
	if err := m.RemoveCheckpoint(ctx(t), forkSrc, "b1"); !errors.Is(err, manager.ErrNoCheckpoint) {
		t.Errorf("removing a removed checkpoint: %v", err)
	}
}

// testForkRefused: a backend that cannot checkpoint (Capabilities.
// Checkpoint "") refuses a fork and a checkpoint with an error that names
// the backend and says why (Capabilities.NoCheckpoint), and nothing was
// made.
func (s *Suite) testForkRefused(t *testing.T) {
	fx := s.fork(t, false)
	if fx.can {
		t.Skipf("%s can checkpoint (the other cases check it)", fx.name)
	}
	if fx.why == "" {
		t.Errorf("%s cannot checkpoint but does not say why (Capabilities.NoCheckpoint)", fx.name)
	}
	_, err := fx.m.Fork(ctx(t), forkSrc, forkDst)
	if !errors.Is(err, manager.ErrCannotCheckpoint) || !strings.Contains(err.Error(), fx.name) || !strings.Contains(err.Error(), fx.why) {
		t.Errorf("fork: got %v, want an error naming %s and saying %q", err, fx.name, fx.why)
	}
	if slices.Contains(fx.m.Keys(), forkDst) {
		t.Errorf("a refused fork left environment %s", forkDst)
	}
	_, err = fx.m.Checkpoint(ctx(t), forkSrc, "c1")
	if !errors.Is(err, manager.ErrCannotCheckpoint) || !strings.Contains(err.Error(), fx.why) {
		t.Errorf("checkpoint: got %v, want an error saying %q", err, fx.why)
	}
	if cps, _ := fx.m.Checkpoints(ctx(t), forkSrc); len(cps) != 0 {
		t.Errorf("a refused checkpoint was recorded: %+v", cps)
	}
}
