package session_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/session"
)

// TestHoldCapturesAndReplayRestores: the state a command left in one
// shell (cwd, exports set, changed and unset, umask, a function, an
// alias, shell options) is captured from the live shell and replayed in a
// new session on another backend, where the next command sees it all;
// what the session itself exports (a forwarded secret, the pager
// settings) and the session's mark are not part of the state, unless a
// command changed them.
func TestHoldCapturesAndReplayRestores(t *testing.T) {
	t.Setenv("BERTH_STATE_INITIAL", "from-the-start")
	t.Setenv("BERTH_STATE_KEPT", "unchanged")
	dir := t.TempDir()
	src := session.New(newLocal(t, dir), session.Options{Grace: 500 * time.Millisecond, Env: map[string]string{"BERTH_STATE_SECRET": "s3cret"}})
	t.Cleanup(func() { src.Close() })
	ctx := context.Background()
	runOut(t, src, session.Request{Command: `mkdir -p sub && cd sub && export BERTH_STATE_X='a b'"'"'c' && unset BERTH_STATE_INITIAL && export GIT_PAGER=less && export BERTH_STATE_NAKED && umask 027 && shopt -s extglob && set -o pipefail && export BERTH_STATE_PATH=` + dir + `/sub/bin:/usr/bin
greet() { echo "hi $1"; }
alias ll='echo aliased'`})
	var st session.State
	if err := src.Hold(ctx, time.Second, func(s session.State) error { st = s; return nil }); err != nil {
		t.Fatal(err)
	}
	if st.Shell != "bash" || st.Cwd != filepath.Join(dir, "sub") || st.Umask != "0027" {
		t.Fatalf("state: shell %q cwd %q umask %q", st.Shell, st.Cwd, st.Umask)
	}
	if st.Env["BERTH_STATE_X"] != "a b'c" || st.Env["GIT_PAGER"] != "less" {
		t.Errorf("exports: %v", st.Env)
	}
	for _, k := range []string{"BERTH_STATE_SECRET", "BERTH_STATE_KEPT", "PAGER", "BERTH_TREE", "PATH", "HOME", "PWD", "SHLVL"} {
		if _, ok := st.Env[k]; ok {
			t.Errorf("state carries %s, which the command did not change", k)
		}
	}
	if !slices.Contains(st.Unset, "BERTH_STATE_INITIAL") || !slices.Contains(st.Exported, "BERTH_STATE_NAKED") {
		t.Errorf("unset %v exported %v", st.Unset, st.Exported)
	}
	if !slices.Equal(st.FunctionNames(), []string{"greet"}) || !slices.Equal(st.AliasNames(), []string{"ll"}) {
		t.Errorf("functions %v aliases %v", st.FunctionNames(), st.AliasNames())
	}
	if !strings.Contains(st.Options, "shopt -s extglob") || !strings.Contains(st.Options, "set -o pipefail") {
		t.Errorf("options:\n%s", st.Options)
	}

	// Replayed elsewhere, the old directory mapped to a new one.
	dir2 := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir2, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	dst := session.New(newLocal(t, dir2), session.Options{Grace: 500 * time.Millisecond})
	t.Cleanup(func() { dst.Close() })
	relocate := func(p string) string {
		if rel, ok := strings.CutPrefix(p, dir); ok && (rel == "" || rel[0] == '/') {
			return dir2 + rel
		}
		return p
	}
	if err := dst.Replay(ctx, st, relocate); err != nil {
		t.Fatal(err)
	}
	out, _ := runOut(t, dst, session.Request{Command: `pwd; echo "$BERTH_STATE_X|${BERTH_STATE_INITIAL-unset}|$GIT_PAGER|$BERTH_STATE_PATH"; umask; greet you; ll; shopt -q extglob && echo extglob; shopt -qo pipefail && echo pipefail; export -p | grep -c 'BERTH_STATE_NAKED$'`})
	want := strings.Join([]string{filepath.Join(dir2, "sub"), "a b'c|unset|less|" + dir2 + "/sub/bin:/usr/bin", "0027", "hi you", "aliased", "extglob", "pipefail", "1"}, "\n") + "\n"
	if out != want {
		t.Fatalf("after replay:\n got %q\nwant %q", out, want)
	}
	if d := dst.Definitions(); !strings.Contains(d, "greet") || !strings.Contains(d, "alias ll=") {
		t.Errorf("the replayed session's definitions (for the approval gate) lack greet and ll:\n%s", d)
	}
}

// TestHoldWaitsForTheRunningCommand: Hold never captures under a running
// command: it fails with ErrBusy when the command outlasts the wait, and
// captures once the command has ended when the wait is long enough.
func TestHoldWaitsForTheRunningCommand(t *testing.T) {
	dir := t.TempDir()
	s := session.New(newLocal(t, dir), session.Options{Grace: 500 * time.Millisecond})
	t.Cleanup(func() { s.Close() })
	marker := filepath.Join(dir, "started")
	release := filepath.Join(dir, "release")
	done := make(chan struct{})
	go func() {
		defer close(done)
		runOut(t, s, session.Request{Command: "touch " + marker + "; while [ ! -e " + release + " ]; do sleep 0.05; done; cd " + dir + " && export BERTH_HOLD_AFTER=1"})
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the command never started")
		}
	}
	called := false
	err := s.Hold(context.Background(), 50*time.Millisecond, func(session.State) error { called = true; return nil })
	if !errors.Is(err, session.ErrBusy) || called {
		t.Fatalf("Hold under a running command: err %v, fn called %v; want ErrBusy and no call", err, called)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Hold(ctx, time.Minute, func(session.State) error { called = true; return nil }); !errors.Is(err, session.ErrBusy) || called {
		t.Fatalf("Hold with an ended context: err %v, fn called %v; want ErrBusy and no call", err, called)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		os.WriteFile(release, nil, 0o644)
	}()
	var st session.State
	if err := s.Hold(context.Background(), time.Minute, func(got session.State) error { st = got; return nil }); err != nil {
		t.Fatal(err)
	}
	<-done
	if st.Env["BERTH_HOLD_AFTER"] != "1" {
		t.Fatalf("Hold captured before the command ended: %v", st.Env)
	}
}

// TestStateOfPlainSh: on a POSIX sh the state is the cwd, exported
// variables and the umask; replayed in sh, they come back.
func TestStateOfPlainSh(t *testing.T) {
	dir := t.TempDir()
	src := session.New(noBash{newLocal(t, dir)}, session.Options{Grace: 300 * time.Millisecond})
	t.Cleanup(func() { src.Close() })
	runOut(t, src, session.Request{Command: "mkdir -p d && cd d && export BERTH_SH_X='it'\\''s' && umask 077"})
	var st session.State
	if err := src.Hold(context.Background(), time.Second, func(s session.State) error { st = s; return nil }); err != nil {
		t.Fatal(err)
	}
	if st.Shell != "sh" || st.Cwd != filepath.Join(dir, "d") || st.Env["BERTH_SH_X"] != "it's" || st.Umask != "0077" || st.Functions != "" {
		t.Fatalf("sh state: %+v", st)
	}
	dst := session.New(noBash{newLocal(t, dir)}, session.Options{Grace: 300 * time.Millisecond})
	t.Cleanup(func() { dst.Close() })
	if err := dst.Replay(context.Background(), st, nil); err != nil {
		t.Fatal(err)
	}
	if out, _ := runOut(t, dst, session.Request{Command: `pwd; echo "$BERTH_SH_X"; umask`}); out != filepath.Join(dir, "d")+"\nit's\n0077\n" {
		t.Fatalf("after replay in sh: %q", out)
	}
}
