package manager_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/a55dbaac/berth/approval"
	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/terminal"
)

// TestFunctionsAndAliasesAcrossCalls is item 4 of issue 28: a function or
// alias defined in one call and used in the next was dynamic-command, so
// in manual mode with nobody to ask (a piped berth shell, an MCP client
// without elicitation) every such call was BLOCKED, breaking the
// contract's promise that they persist. The session's snapshot carries
// their definitions now, and the gate checks a call by what it runs:
// ordinary ones run with nothing to approve, forwarders still reach the
// floor (the guard refuses the markers, were the gate to let them by).
func TestFunctionsAndAliasesAcrossCalls(t *testing.T) {
	m, g, _ := setup(t, "", nil) // manual mode; nobody to ask: no asker in ctx
	g.forbidden = append(g.forbidden, "-MARK")
	ctx := context.Background()
	run := func(cmd string) terminal.Result {
		t.Helper()
		return m.Run(ctx, "k", terminal.Request{Command: cmd})
	}
	for _, def := range []string{
		`f() { echo fn-$1; }; alias hi='echo hi-alias'`,
		`del() { "$@"; }`,
		`alias zap='rm -rf'`,
	} {
		if r := run(def); r.Error != nil || r.Approval != nil {
			t.Fatalf("%s: %+v", def, r)
		}
	}
	if r := run("f one; hi"); r.Error != nil || r.Output != "fn-one\nhi-alias" || r.Approval != nil {
		t.Errorf("f one; hi: output %q, error %v, approval %+v; want both run with nothing to approve", r.Output, errText(r), r.Approval)
	}
	if r := run("del echo forwarded"); r.Error != nil || r.Output != "forwarded" || r.Approval != nil {
		t.Errorf("del echo forwarded: %q %v %+v", r.Output, errText(r), r.Approval)
	}
	for _, cmd := range []string{"del rm -rf / DEL-MARK", "zap / ZAP-MARK"} {
		r := run(cmd)
		if r.Approval == nil || r.Approval.Allowed() || r.Approval.By != approval.ByFloor || r.Approval.Rule != "rm-system-dir" {
			t.Errorf("%s: %+v, want blocked by the floor", cmd, r.Approval)
		}
	}
	if sent := g.Sent(); strings.Contains(sent, "-MARK") {
		t.Errorf("a blocked call reached the environment: %q", sent)
	}
	// A function a sourced file defines is in the snapshot too.
	defs := filepath.Join(t.TempDir(), "defs.sh")
	if r := run(`printf 'sneaky() { echo s; }\n' > ` + defs + `; source ` + defs); r.Error != nil {
		t.Fatalf("source: %v", errText(r))
	}
	if r := run("sneaky"); r.Error != nil || r.Output != "s" {
		t.Errorf("sneaky (defined by source, its definition in the snapshot): %q %v %+v", r.Output, errText(r), r.Approval)
	}
}

// TestKillBerthAsked is R7 of the 2026-11-28 review through the manager,
// on the local backend itself (so that berth's pid and the shell's $PPID
// reach the gate): a signal to berth's own processes is asked, and
// blocked here, where nobody can be asked. The signal is SIGCONT, which
// does nothing to a running berth, should the gate fail.
func TestKillBerthAsked(t *testing.T) {
	dir := t.TempDir()
	vars := map[string]string{"HOME": dir, "BERTH_HOME": filepath.Join(dir, "berth")}
	cfg, err := config.Load(config.LoadOptions{Getenv: func(k string) string { return vars[k] }})
	if err != nil {
		t.Fatal(err)
	}
	m := manager.NewWithFactory(cfg, nil, func(ctx context.Context, opts backend.Options) (backend.Backend, error) {
		reg, _ := backend.Lookup("local")
		return reg.New(ctx, opts)
	})
	t.Cleanup(func() { _ = m.CloseAll(context.Background()) })
	ctx := context.Background()
	if r := m.Run(ctx, "k", terminal.Request{Command: "echo warm"}); r.Error != nil {
		t.Fatal(errText(r))
	}
	for _, cmd := range []string{"kill -CONT $PPID", "kill -s CONT " + strconv.Itoa(os.Getpid()), "pkill -CONT -x berth-engine"} {
		r := m.Run(ctx, "k", terminal.Request{Command: cmd})
		if r.Approval == nil || r.Approval.Allowed() || r.Approval.Rule != "kill-berth" {
			t.Errorf("%s: %+v, want it blocked as kill-berth", cmd, r.Approval)
		}
	}
	if r := m.Run(ctx, "k", terminal.Request{Command: "kill -0 $PPID && echo probed"}); r.Output != "probed" || r.Approval != nil {
		t.Errorf("kill -0 $PPID: %q %+v, want the probe run", r.Output, r.Approval)
	}
}
