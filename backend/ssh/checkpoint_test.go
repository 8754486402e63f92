package ssh

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/testenv/sshenv"
)

// checkpointWorkspace makes a workspace on the host (the test's sshd runs
// on this machine) whose name has a space and a quote, and returns it.
func checkpointWorkspace(t *testing.T) string {
	t.Helper()
	ws := filepath.Join(t.TempDir(), `my 'proj"`)
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	return ws
}

// wsOptions are the options of an environment key working in ws.
func wsOptions(t *testing.T, s *sshenv.Server, key, ws string) backend.Options {
	t.Helper()
	opts := testOptions(s, nil)
	opts.Key = key
	opts.Config.Cwd = ws
	return opts
}

// out runs script in b's default directory and fails the test unless it
// succeeds.
func out(t testing.TB, b backend.Backend, script string) string {
	t.Helper()
	r := run(t, b, sh(script))
	if r.err != nil || r.code != 0 {
		t.Fatalf("%q: status %d, %v: %s", script, r.code, r.err, r.out)
	}
	return r.out
}

func checkpoint(t testing.TB, b *Backend, name string) backend.Checkpoint {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp, err := b.Checkpoint(ctx, name)
	if err != nil {
		t.Fatalf("Checkpoint(%q): %v", name, err)
	}
	return cp
}

func fromCheckpoint(t *testing.T, opts backend.Options, cp backend.Checkpoint) *Backend {
	t.Helper()
	opts.From = &cp
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := New(ctx, opts)
	if err != nil {
		t.Fatalf("New from checkpoint %s: %v", cp.ID, err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	return b
}

// leftovers lists what dir holds but the checkpoints/ and env/
// directories, and what those hold (one level down).
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	var left []string
	for _, d := range []string{dir, filepath.Join(dir, "checkpoints"), filepath.Join(dir, "env")} {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if d == dir && (e.Name() == "checkpoints" || e.Name() == "env") {
				continue
			}
			left = append(left, filepath.Join(d, e.Name()))
		}
	}
	return left
}

// testCheckpointCarriesFiles: a file and a subdirectory reach the fork,
// which is independent of its source both ways; a checkpoint restores
// twice (into two keys, and into one key again, replacing it); a later
// environment of the fork's key works in its copy; Relocate maps the
// source's paths.
func testCheckpointCarriesFiles(t *testing.T) {
	s := sshenv.Start(t)
	ws := checkpointWorkspace(t)
	src := newTestBackend(t, wsOptions(t, s, "src", ws))
	if c := src.Capabilities(); c.Checkpoint == "" || c.NoCheckpoint != "" {
		t.Fatalf("Capabilities = %+v, want Checkpoint said and no NoCheckpoint", c)
	}
	out(t, src, `echo one >f && mkdir -p sub/deeper && echo two >sub/deeper/g && chmod 0640 sub/deeper/g && ln -s sub/deeper/g link`)
	cp := checkpoint(t, src, "first")
	if cp.Backend != Name || cp.Key != "src" || cp.Name != "first" || cp.Size <= 0 || cp.Meta["workspace"] != ws || cp.Meta["host"] != src.t.String() {
		t.Fatalf("checkpoint = %+v", cp)
	}
	if !strings.HasPrefix(cp.ID, ws+".berth/checkpoints/src.first.") {
		t.Fatalf("checkpoint ID %q, want under %s.berth/checkpoints", cp.ID, ws)
	}
	if !strings.Contains(cp.Meta["copy"], "cp -a") {
		t.Errorf("Meta copy = %q, want how it copied", cp.Meta["copy"])
	}
	out(t, src, `echo changed >f && rm sub/deeper/g && echo new >only-src`)

	fork := fromCheckpoint(t, wsOptions(t, s, "fork", ws), cp)
	if fork.Workspace() == "" || fork.Workspace() == ws || !strings.HasPrefix(fork.Workspace(), ws+".berth/env/fork-") {
		t.Fatalf("fork workspace %q, want a copy under %s.berth/env", fork.Workspace(), ws)
	}
	if got := out(t, fork, `pwd; cat f sub/deeper/g link; stat -c %a sub/deeper/g; test -L link && echo symlink; test -e only-src || echo no-only-src`); got != fork.Workspace()+"\none\ntwo\ntwo\n640\nsymlink\nno-only-src\n" {
		t.Fatalf("fork sees %q", got)
	}
	// Independence: the fork's writes reach neither its source nor the
	// checkpoint.
	out(t, fork, `echo fork >f && echo fork-only >fork-file`)
	if got := out(t, src, `cat f; test -e fork-file || echo no-fork-file`); got != "changed\nno-fork-file\n" {
		t.Fatalf("source sees %q after the fork wrote", got)
	}
	// Relocate maps the source's workspace and what is under it, nothing
	// else.
	for in, want := range map[string]string{
		ws:                         fork.Workspace(),
		ws + "/sub/deeper":         fork.Workspace() + "/sub/deeper",
		ws + "x/sub":               ws + "x/sub",
		"/tmp":                     "/tmp",
		filepath.Dir(ws) + "/else": filepath.Dir(ws) + "/else",
	} {
		if got := fork.Relocate(in); got != want {
			t.Errorf("Relocate(%q) = %q, want %q", in, got, want)
		}
	}
	if got := src.Relocate(ws + "/sub"); got != ws+"/sub" {
		t.Errorf("source's Relocate changed a path: %q", got)
	}

	// The same checkpoint again, into another key: the checkpoint's files,
	// not the fork's.
	second := fromCheckpoint(t, wsOptions(t, s, "second", ws), cp)
	if got := out(t, second, `cat f sub/deeper/g; test -e fork-file || echo no-fork-file`); got != "one\ntwo\nno-fork-file\n" {
		t.Fatalf("second restore sees %q", got)
	}
	// And into the fork's key again (a restore): its changes are gone.
	fork.Close(context.Background())
	again := fromCheckpoint(t, wsOptions(t, s, "fork", ws), cp)
	if again.Workspace() != fork.Workspace() {
		t.Errorf("restore into the same key works in %q, the key's workspace is %q", again.Workspace(), fork.Workspace())
	}
	if got := out(t, again, `cat f; test -e fork-file || echo no-fork-file`); got != "one\nno-fork-file\n" {
		t.Fatalf("restore into the fork's key sees %q", got)
	}
	// A later environment of the key, not made from a checkpoint, works in
	// the key's copy, not in terminal.cwd; another key in terminal.cwd.
	// Relocate maps terminal.cwd there (the session starts in what it
	// maps terminal.cwd to).
	later := newTestBackend(t, wsOptions(t, s, "fork", ws))
	if got := out(t, later, `pwd; cat f`); got != fork.Workspace()+"\none\n" {
		t.Fatalf("a later environment of the fork's key sees %q", got)
	}
	if later.Workspace() != fork.Workspace() || later.Relocate(ws) != fork.Workspace() || later.Relocate(ws+"/a b") != fork.Workspace()+"/a b" {
		t.Errorf("a later environment of the fork's key: Workspace %q, Relocate(cwd) %q", later.Workspace(), later.Relocate(ws))
	}
	other := newTestBackend(t, wsOptions(t, s, "other", ws))
	if got := out(t, other, `pwd; cat f`); got != ws+"\nchanged\n" {
		t.Fatalf("an environment of another key sees %q", got)
	}
	if other.Workspace() != "" || other.Relocate(ws) != ws {
		t.Errorf("an environment of another key: Workspace %q, Relocate(cwd) %q", other.Workspace(), other.Relocate(ws))
	}
	// A fork of the fork: checkpointed from the fork's copy, mapped from it.
	out(t, again, `echo gen2 >gen`)
	cp2 := checkpoint(t, again, "")
	if cp2.Meta["workspace"] != fork.Workspace() {
		t.Fatalf("a fork's checkpoint copies %q, want its own workspace %q", cp2.Meta["workspace"], fork.Workspace())
	}
	grand := fromCheckpoint(t, wsOptions(t, s, "grand", ws), cp2)
	if got := out(t, grand, `cat f gen`); got != "one\ngen2\n" {
		t.Fatalf("a fork of a fork sees %q", got)
	}
	if got := grand.Relocate(fork.Workspace() + "/sub"); got != grand.Workspace()+"/sub" {
		t.Errorf("fork of a fork: Relocate(its source's dir) = %q", got)
	}
	if got := grand.Relocate(ws); got != grand.Workspace() {
		t.Errorf("fork of a fork: Relocate(terminal.cwd) = %q", got)
	}
	// berth env ls finds the forks' workspaces by key.
	envs, err := envAdmin{}.List(context.Background(), wsOptions(t, s, "", ws))
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, e := range envs {
		keys[e.Key] = e.ID
	}
	if len(keys) != 3 || keys["fork"] != fork.Workspace() || keys["second"] != second.Workspace() || keys["grand"] != grand.Workspace() {
		t.Errorf("env ls = %+v, want fork, second and grand", envs)
	}
}

// testCheckpointHomeRelativeCwd: a terminal.cwd under the remote home
// ("~/x") is a workspace like any other; Relocate maps it, as configured
// and as resolved, into the fork's copy.
func testCheckpointHomeRelativeCwd(t *testing.T) {
	s := sshenv.Start(t)
	probe := newTestBackend(t, testOptions(s, nil))
	sub := "berth-ckpt-test-" + strconv.Itoa(os.Getpid()) + " x"
	home := strings.TrimSpace(out(t, probe, `cd && pwd`))
	out(t, probe, `mkdir -p ~/"`+sub+`"`)
	t.Cleanup(func() { run(t, probe, sh(`rm -rf ~/"`+sub+`" ~/"`+sub+`.berth"`)) })
	cfg := "~/" + sub
	src := newTestBackend(t, wsOptions(t, s, "src", cfg))
	out(t, src, `echo tilde >f`)
	cp := checkpoint(t, src, "t")
	if cp.Meta["workspace"] != home+"/"+sub {
		t.Fatalf("checkpoint of %q copied %q", cfg, cp.Meta["workspace"])
	}
	fork := fromCheckpoint(t, wsOptions(t, s, "fork", cfg), cp)
	if fork.Workspace() != home+"/"+sub+".berth/env/"+keyID("fork") {
		t.Fatalf("fork workspace %q", fork.Workspace())
	}
	for in, want := range map[string]string{
		cfg: fork.Workspace(), cfg + "/d": fork.Workspace() + "/d", home + "/" + sub + "/d": fork.Workspace() + "/d", "~": "~", home: home,
	} {
		if got := fork.Relocate(in); got != want {
			t.Errorf("Relocate(%q) = %q, want %q", in, got, want)
		}
	}
	if got := out(t, fork, `pwd; cat f`); got != fork.Workspace()+"\ntilde\n" {
		t.Fatalf("fork sees %q", got)
	}
}

// testCheckpointRemovalLeavesNothing: removing the checkpoints and the
// forks' workspaces leaves only the empty directories that held them; a
// checkpoint already gone is no error, and a fork made from a removed
// checkpoint fails with a clear error.
func testCheckpointRemovalLeavesNothing(t *testing.T) {
	s := sshenv.Start(t)
	ws := checkpointWorkspace(t)
	opts := wsOptions(t, s, "src", ws)
	src := newTestBackend(t, opts)
	out(t, src, `mkdir d && echo x >d/x`)
	cp := checkpoint(t, src, "a")
	cpFork := checkpoint(t, src, "")
	fork := fromCheckpoint(t, wsOptions(t, s, "f", ws), cp)
	out(t, fork, `echo y >d/y`)
	fork.Close(context.Background())

	ctx := context.Background()
	for _, c := range []backend.Checkpoint{cp, cpFork} {
		if err := (checkpointAdmin{}).Remove(ctx, opts, c); err != nil {
			t.Fatalf("Remove %s: %v", c.ID, err)
		}
		if _, err := os.Lstat(c.ID); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("checkpoint %s still there after Remove (%v)", c.ID, err)
		}
		if err := (checkpointAdmin{}).Remove(ctx, opts, c); err != nil {
			t.Fatalf("Remove of a checkpoint already gone: %v", err)
		}
	}
	if err := (envAdmin{}).Remove(ctx, opts, "f"); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, ws+".berth"); len(left) != 0 {
		t.Fatalf("left after removal: %q", left)
	}
	if got := out(t, src, `cat d/x; ls`); got != "x\nd\n" {
		t.Errorf("the workspace itself changed: %q", got)
	}
	o := wsOptions(t, s, "late", ws)
	o.From = &cp
	if b, err := New(ctx, o); err == nil || !strings.Contains(err.Error(), "is gone") {
		if b != nil {
			b.Close(ctx)
		}
		t.Fatalf("New from a removed checkpoint: %v, want an error saying it is gone", err)
	}
	if left := leftovers(t, ws+".berth"); len(left) != 0 {
		t.Fatalf("a failed restore left %q", left)
	}
}

// testCheckpointHostileNames: quotes, spaces, newlines and shell syntax
// in the key and the checkpoint's name reach no shell (no file is made by
// them, nothing is removed) and are kept exactly in the checkpoint's
// marks; records that name something else than a checkpoint directory are
// refused before any connection.
func testCheckpointHostileNames(t *testing.T) {
	s := sshenv.Start(t)
	ws := checkpointWorkspace(t)
	canary := filepath.Join(t.TempDir(), "pwned")
	key := "k'ey \"x\"\n$(touch " + canary + ")`touch " + canary + "`;../.."
	name := "n a'm\"e\n;touch " + canary + " #/../x"
	src := newTestBackend(t, wsOptions(t, s, key, ws))
	out(t, src, `echo hostile >f`)
	cp := checkpoint(t, src, name)
	if filepath.Dir(cp.ID) != ws+".berth/checkpoints" || strings.ContainsAny(filepath.Base(cp.ID), "'\"\n /;$`") {
		t.Fatalf("checkpoint directory %q: want a safe name under %s.berth/checkpoints", cp.ID, ws)
	}
	data, err := os.ReadFile(filepath.Join(cp.ID, "berth.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m marker
	if err := json.Unmarshal(data, &m); err != nil || m.Key != key || m.Name != name {
		t.Fatalf("berth.json = %s (%v): want the key and name exactly", data, err)
	}
	fkey := "f\n'\"$(touch " + canary + ")"
	fork := fromCheckpoint(t, wsOptions(t, s, fkey, ws), cp)
	if got := out(t, fork, `cat f`); got != "hostile\n" {
		t.Fatalf("fork sees %q", got)
	}
	if filepath.Dir(fork.Workspace()) != ws+".berth/env" || strings.ContainsAny(filepath.Base(fork.Workspace()), "'\"\n /;$`") {
		t.Fatalf("fork workspace %q: want a safe name under %s.berth/env", fork.Workspace(), ws)
	}
	if envs, err := (envAdmin{}).List(context.Background(), wsOptions(t, s, "", ws)); err != nil || len(envs) != 1 || envs[0].Key != fkey {
		t.Fatalf("env ls = %+v, %v: want the fork's key exactly", envs, err)
	}
	if err := (envAdmin{}).Remove(context.Background(), wsOptions(t, s, "", ws), fkey); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fork.Workspace()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("env rm of the hostile key left %s (%v)", fork.Workspace(), err)
	}
	if _, err := os.Stat(canary); err == nil {
		t.Fatal("a name was run by a shell: the canary file exists")
	}

	// Forged records: nothing is removed, nothing is copied.
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("keep"), 0o600)
	for _, id := range []string{
		"/", victim, filepath.Dir(victim), "relative.berth/checkpoints/x",
		ws + ".berth/checkpoints/../../" + filepath.Base(filepath.Dir(victim)),
		ws + ".berth/checkpoints/x/../../..", ws + ".berth/checkpoints/a b", ws + ".berth/checkpoints/.hidden",
		ws + ".berth/checkpoints/x;rm -rf " + filepath.Dir(victim), ws + ".berth/checkpoints/",
	} {
		c := backend.Checkpoint{Backend: Name, ID: id}
		if err := (checkpointAdmin{}).Remove(context.Background(), wsOptions(t, s, "", ws), c); err == nil {
			t.Errorf("Remove(%q) accepted", id)
		}
		o := wsOptions(t, s, "forged", ws)
		o.From = &c
		if b, err := New(context.Background(), o); err == nil {
			b.Close(context.Background())
			t.Errorf("New from %q accepted", id)
		}
	}
	other := cp
	other.Backend = "docker"
	if err := (checkpointAdmin{}).Remove(context.Background(), wsOptions(t, s, "", ws), other); err == nil || !strings.Contains(err.Error(), "docker") {
		t.Errorf("Remove of another backend's checkpoint: %v", err)
	}
	// A directory of the right shape that berth did not make (no
	// berth.json) is left alone.
	fake := ws + ".berth/checkpoints/fake"
	os.MkdirAll(fake, 0o755)
	if err := (checkpointAdmin{}).Remove(context.Background(), wsOptions(t, s, "", ws), backend.Checkpoint{Backend: Name, ID: fake}); err == nil || !strings.Contains(err.Error(), "no berth.json") {
		t.Errorf("Remove of a directory berth did not make: %v", err)
	}
	if _, err := os.Stat(fake); err != nil {
		t.Errorf("a directory berth did not make was removed: %v", err)
	}
	if data, err := os.ReadFile(victim); err != nil || string(data) != "keep" {
		t.Fatalf("victim file: %q %v", data, err)
	}
}

// testCheckpointRefusesHome: the remote home (terminal.cwd unset, "~", the
// home's path, a directory holding it) is never copied; the error says why
// and what to set.
func testCheckpointRefusesHome(t *testing.T) {
	s := sshenv.Start(t)
	for _, cwd := range []string{"", "~", ".", "~/", "/"} {
		o := testOptions(s, nil)
		o.Config.Cwd = cwd
		b := newTestBackend(t, o)
		c := b.Capabilities()
		if c.Checkpoint != "" || !strings.Contains(c.NoCheckpoint, "terminal.cwd") {
			t.Errorf("cwd %q: Capabilities %+v, want NoCheckpoint naming terminal.cwd", cwd, c)
		}
		if _, err := b.Checkpoint(context.Background(), "x"); err == nil || !strings.Contains(err.Error(), "terminal.cwd") {
			t.Errorf("cwd %q: Checkpoint = %v, want a refusal naming terminal.cwd", cwd, err)
		}
	}
	probe := newTestBackend(t, testOptions(s, nil))
	home := strings.TrimSpace(out(t, probe, `cd && pwd -P`))
	// The home, and what holds it (for root, /root's parent is /).
	for _, cwd := range []string{home, filepath.Dir(home), "~/.."} {
		o := testOptions(s, nil)
		o.Config.Cwd = cwd
		b := newTestBackend(t, o)
		want := "home directory"
		if filepath.Dir(home) == "/" && cwd != home {
			want = "root directory"
		}
		if _, err := b.Checkpoint(context.Background(), "x"); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "terminal.cwd") {
			t.Errorf("cwd %q: Checkpoint = %v, want a refusal naming the %s and terminal.cwd", cwd, err, want)
		}
	}
	if _, err := os.Stat(home + ".berth"); err == nil {
		t.Errorf("%s.berth was made", home)
	}
}

// testCheckpointOtherCp: the copy works with the cp the host has. With
// BusyBox's (which takes --reflink and copies plainly where the filesystem
// cannot share blocks) and with one that rejects --reflink, as BSD and
// macOS cp do (played by a wrapper around BusyBox's that refuses the
// option with BSD's words): the fallback to cp -a is taken and said.
func testCheckpointOtherCp(t *testing.T) {
	bb := ""
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		if _, err := os.Stat(p); err == nil {
			bb = p
		}
	}
	if bb == "" {
		t.Fatal("busybox is not installed (scripts/ensure-docker.sh installs busybox-static)")
	}
	bsd := "#!/bin/sh\nfor a; do case $a in --) ;; --*) echo 'cp: illegal option -- -' >&2; echo 'usage: cp [-R [-H | -L | -P]] [-fi | -n] [-aclpSsvXx] source_file target_file' >&2; exit 64 ;; esac; done\nexec " + bb + " cp \"$@\"\n"
	for _, tc := range []struct {
		name, fallback string
		install        func(bin string) error
	}{
		{"busybox", "", func(bin string) error { return os.Symlink(bb, filepath.Join(bin, "cp")) }},
		{"no-reflink", "no --reflink", func(bin string) error { return os.WriteFile(filepath.Join(bin, "cp"), []byte(bsd), 0o755) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := t.TempDir()
			if err := tc.install(bin); err != nil {
				t.Fatal(err)
			}
			s := sshenv.Start(t, sshenv.WithSetEnv("PATH="+bin+":/usr/bin:/bin"))
			ws := checkpointWorkspace(t)
			src := newTestBackend(t, wsOptions(t, s, "src", ws))
			if got := out(t, src, `command -v cp`); got != bin+"/cp\n" {
				t.Fatalf("the host's cp is %q, want %s/cp", got, bin)
			}
			out(t, src, `mkdir sub && echo bb >sub/f && ln -s sub/f link`)
			cp := checkpoint(t, src, "bb")
			if got := cp.Meta["copy"]; tc.fallback != "" && !strings.Contains(got, tc.fallback) || tc.fallback == "" && got != "cp -a --reflink=auto" {
				t.Errorf("Meta copy = %q, want %q said", got, tc.fallback)
			}
			fork := fromCheckpoint(t, wsOptions(t, s, "fork", ws), cp)
			if got := out(t, fork, `cat sub/f link; test -L link && echo symlink`); got != "bb\nbb\nsymlink\n" {
				t.Fatalf("fork sees %q", got)
			}
		})
	}
}

// bigWorkspace writes n MiB of incompressible data into ws.
func bigWorkspace(t testing.TB, ws string, mib int) {
	t.Helper()
	data := make([]byte, 1<<20)
	for i := range mib {
		for j := range data {
			data[j] = byte(i*31 + j*7 + j>>8)
		}
		if err := os.WriteFile(filepath.Join(ws, "blob"+string(rune('a'+i%26))+strings.Repeat("x", i/26)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// tmpDirs lists the temporary copies under dir.
func tmpDirs(dir string) []string {
	m, _ := filepath.Glob(filepath.Join(dir, ".tmp-*"))
	return m
}

// testCheckpointInterrupted: a copy cancelled by the caller stops and
// leaves nothing; one whose shell is killed with the connection (a crash)
// leaves a marked temporary copy that the next checkpoint removes.
func testCheckpointInterrupted(t *testing.T) {
	s := sshenv.Start(t)
	ws := checkpointWorkspace(t)
	bigWorkspace(t, ws, 300)
	src := newTestBackend(t, wsOptions(t, s, "src", ws))
	dir := ws + ".berth/checkpoints"

	// interrupt starts a checkpoint, calls stop once its copy is seen on
	// the host, and returns the checkpoint's error.
	interrupt := func(stop func(cancel context.CancelFunc)) error {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		errc := make(chan error, 1)
		go func() {
			_, err := src.Checkpoint(ctx, "big")
			errc <- err
		}()
		deadline := time.Now().Add(30 * time.Second)
		for len(tmpDirs(dir)) == 0 {
			select {
			case err := <-errc:
				t.Fatalf("the checkpoint ended before its copy was seen: %v", err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatal("no copy started within 30s")
			}
			time.Sleep(5 * time.Millisecond)
		}
		stop(cancel)
		select {
		case err := <-errc:
			return err
		case <-time.After(60 * time.Second):
			t.Fatal("the interrupted checkpoint did not return within 60s")
		}
		return nil
	}

	// Cancelled: the channel closes, the script stops cp and removes the
	// partial copy.
	if err := interrupt(func(cancel context.CancelFunc) { cancel() }); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled checkpoint: %v, want context.Canceled", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(leftovers(t, ws+".berth")) > 0 {
		if l := leftovers(t, ws+".berth"); len(l) > len(tmpDirs(dir)) {
			t.Fatalf("the cancelled copy went on into a checkpoint no one recorded: %q", l)
		}
		if time.Now().After(deadline) {
			t.Fatalf("a cancelled copy left %q", leftovers(t, ws+".berth"))
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A crash: the shell making the copy dies with the connection.
	if err := interrupt(func(context.CancelFunc) { s.DropConnections(t) }); err == nil {
		t.Fatal("the checkpoint succeeded though its connection was cut")
	}
	left := tmpDirs(dir)
	if len(left) == 0 {
		t.Fatal("the killed copy left no marked temporary directory (the test needs one)")
	}
	if _, err := os.Stat(filepath.Join(left[0], "owner")); err != nil {
		t.Fatalf("the temporary copy carries no owner mark: %v", err)
	}
	cp := checkpoint(t, src, "after")
	if got := tmpDirs(dir); len(got) != 0 {
		t.Fatalf("the next checkpoint kept the dead copy %q", got)
	}
	if err := (checkpointAdmin{}).Remove(context.Background(), wsOptions(t, s, "src", ws), cp); err != nil {
		t.Fatal(err)
	}
	if l := leftovers(t, ws+".berth"); len(l) != 0 {
		t.Fatalf("left: %q", l)
	}
}
