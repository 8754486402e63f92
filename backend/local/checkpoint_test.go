package local_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/local"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/terminal"
)

// forkConfig is a workspace-mode configuration whose berth home lies
// outside the workspace, with the forks' workspaces beside it removed with
// t.
func forkConfig(t *testing.T, ws string, settings map[string]any) *config.Config {
	t.Helper()
	cfg := sandboxConfig(t, ws, settings)
	t.Cleanup(func() { os.RemoveAll(cfg.Home + "-workspaces") })
	return cfg
}

func runIn(t *testing.T, m *manager.Manager, key, command string) terminal.Result {
	t.Helper()
	r := m.Run(context.Background(), key, terminal.Request{Command: command})
	if r.Error != nil {
		t.Fatalf("%s: %q: %s", key, command, *r.Error)
	}
	return r
}

// An unconfined local environment refuses to be checkpointed, saying why
// (its files are the whole machine), in its capabilities and when asked;
// and no environment is made from a checkpoint without workspace mode.
func TestUnconfinedRefusesCheckpoints(t *testing.T) {
	be, err := local.New(backend.Options{Home: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close(context.Background())
	c := be.Capabilities()
	if c.Checkpoint != "" || !strings.Contains(c.NoCheckpoint, "its files are the whole machine") {
		t.Errorf("capabilities: %+v", c)
	}
	if _, err := be.Checkpoint(context.Background(), "x"); err == nil || !strings.Contains(err.Error(), "whole machine") {
		t.Errorf("checkpoint: %v", err)
	}
	_, err = local.New(backend.Options{Home: t.TempDir(), Key: "k", From: &backend.Checkpoint{Backend: "local", ID: "/x"}})
	if err == nil || !strings.Contains(err.Error(), "local_sandbox: workspace") {
		t.Errorf("an unconfined environment from a checkpoint: %v", err)
	}
}

// A fork's workspace is a copy that gets the protection of any workspace:
// the repository's hooks and config in it are read-only to the fork's
// commands (the kernel, through the fork's own mount namespace), and the
// source's repository is untouched; ordinary files are writable.
func TestForkKeepsTheCopysHooksReadOnly(t *testing.T) {
	requireMountNS(t)
	ws := repoInWorkspace(t)
	m := newManager(t, forkConfig(t, ws, nil))
	ctx := context.Background()
	runIn(t, m, "src", "echo x > file")
	res, err := m.Fork(ctx, "src", "dst")
	if err != nil {
		t.Fatal(err)
	}
	env, err := m.Env(ctx, "dst")
	if err != nil {
		t.Fatal(err)
	}
	fws := res.Cwd
	if fws == ws || !strings.HasSuffix(fws, "-workspaces/dst") {
		t.Fatalf("the fork works in %s", fws)
	}
	caps := backend.CapabilitiesOf(env.Backend())
	for _, want := range []string{fws + "/.git/hooks", fws + "/.git/config"} {
		if !slices.Contains(caps.Confinement.Protected, want) {
			t.Errorf("the fork does not protect %s: %v", want, caps.Confinement.Protected)
		}
	}
	if !slices.Contains(caps.Confinement.Writable, fws) || slices.Contains(caps.Confinement.Writable, ws) {
		t.Errorf("the fork's writable trees: %v", caps.Confinement.Writable)
	}
	r := runIn(t, m, "dst", "echo '#!/bin/sh' > .git/hooks/pre-commit && echo PLANTED; echo y > file && cat file")
	if strings.Contains(r.Output, "PLANTED") || !strings.HasSuffix(r.Output, "y") {
		t.Errorf("in the fork: %q", r.Output)
	}
	if _, err := os.Stat(filepath.Join(ws, ".git", "hooks", "pre-commit")); err == nil {
		t.Error("a hook appeared in the source's repository")
	}
	// The source cannot write the fork's files either: they are outside
	// its writable trees.
	if r := runIn(t, m, "src", "echo z > "+fws+"/file && echo WROTE"); strings.Contains(r.Output, "WROTE") {
		t.Errorf("the source wrote into the fork: %q", r.Output)
	}
}

// A fork's workspace outlives the berth that made it: berth env ls lists
// it, a later environment of its key works in it again, env rm removes
// it, and prune sweeps what a crash in the middle of a checkpoint left.
func TestForkWorkspaceKeptAndRemoved(t *testing.T) {
	requireConfinement(t)
	ws := t.TempDir()
	cfg := forkConfig(t, ws, nil)
	m := manager.New(cfg, nil)
	ctx := context.Background()
	runIn(t, m, "src", "mkdir -p d && echo kept > d/f")
	res, err := m.Fork(ctx, "src", "dst")
	if err != nil {
		t.Fatal(err)
	}
	m.CloseAll(ctx)
	reg, _ := backend.Lookup("local")
	opts := backend.Options{Config: cfg.Terminal, Home: cfg.Home}
	envs, err := reg.Envs.List(ctx, opts)
	if err != nil || len(envs) != 1 || envs[0].Key != "dst" || envs[0].State != "kept" || !envs[0].Persistent {
		t.Fatalf("env ls: %+v %v", envs, err)
	}
	m2 := newManager(t, cfg)
	if r := runIn(t, m2, "dst", "cat d/f; pwd"); r.Output != "kept\n"+filepath.Dir(res.Cwd)+"/dst" {
		t.Errorf("a later environment of the fork's key: %q", r.Output)
	}
	if envs, _ := reg.Envs.List(ctx, opts); len(envs) != 1 || envs[0].State != "running" {
		t.Errorf("env ls while it runs: %+v", envs)
	}
	if _, err := local.New(backend.Options{Config: cfg.Terminal, Home: cfg.Home, Key: "dst"}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("a second live environment of the fork's workspace: %v", err)
	}
	m2.CloseAll(ctx)
	if err := reg.Envs.Remove(ctx, opts, "dst"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(res.Cwd) + "/dst"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("env rm left the workspace: %v", err)
	}
	if _, err := os.Stat(ws); err != nil {
		t.Errorf("env rm touched the user's own workspace: %v", err)
	}
	// Leftovers: a copy that never finished, and a fork's transient one.
	root := filepath.Join(cfg.Home, "local", "checkpoints")
	for _, d := range []string{"k.half.1", "k.fork.2", "k.kept.3"} {
		os.MkdirAll(filepath.Join(root, d, "tree"), 0o700)
	}
	os.WriteFile(filepath.Join(root, "k.fork.2", "done"), nil, 0o600)
	os.WriteFile(filepath.Join(root, "k.fork.2", "transient"), nil, 0o600)
	os.WriteFile(filepath.Join(root, "k.kept.3", "done"), nil, 0o600)
	time.Sleep(10 * time.Millisecond)
	if _, err := reg.Envs.Prune(ctx, opts, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(root)
	var left []string
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if !slices.Equal(left, []string{"k.kept.3"}) {
		t.Errorf("after prune: %v, want only the finished named checkpoint", left)
	}
}

// An environment whose writable trees hold the forks' workspaces cannot
// be checkpointed (its commands could write other environments' files),
// and says so.
func TestCheckpointRefusedWhereWorkspacesAreWritable(t *testing.T) {
	requireConfinement(t)
	parent := t.TempDir()
	home := filepath.Join(parent, "home")
	os.MkdirAll(home, 0o700)
	cfg := forkConfig(t, filepath.Join(parent), nil)
	be, err := local.New(backend.Options{Config: cfg.Terminal, Home: home, Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close(context.Background())
	c := be.Capabilities()
	if c.Checkpoint != "" || !strings.Contains(c.NoCheckpoint, home+"-workspaces lies in the writable tree "+parent) {
		t.Errorf("capabilities: %+v", c)
	}
}
