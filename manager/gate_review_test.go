package manager_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/a55dbaac/berth/approval"
	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/terminal"
)

// nativeGuard is the guard of a backend whose files are this machine's,
// as the local backend's are (backend.Capabilities.NativeFS).
type nativeGuard struct{ *guard }

func (nativeGuard) Capabilities() backend.Capabilities { return backend.Capabilities{NativeFS: true} }

// setupNative is setup for a guarded local environment that says its
// files are this machine's; it returns the config file's path.
func setupNative(t *testing.T, env ...string) (*manager.Manager, string) {
	t.Helper()
	dir := t.TempDir()
	home := filepath.Join(dir, "berth")
	path := filepath.Join(home, "config.yaml")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"HOME": dir, "BERTH_HOME": home}
	for i := 0; i+1 < len(env); i += 2 {
		vars[env[i]] = env[i+1]
	}
	cfg, err := config.Load(config.LoadOptions{Getenv: func(k string) string { return vars[k] }})
	if err != nil {
		t.Fatal(err)
	}
	g := &guard{forbidden: floorMarkers}
	m := manager.NewWithFactory(cfg, nil, func(ctx context.Context, opts backend.Options) (backend.Backend, error) {
		reg, _ := backend.Lookup("local")
		be, err := reg.New(ctx, opts)
		if err != nil {
			return nil, err
		}
		g.Backend = be
		return nativeGuard{g}, nil
	})
	t.Cleanup(func() { _ = m.CloseAll(context.Background()) })
	return m, path
}

// TestWriteThroughLinkToBerthHome is N2 end to end: write_file of
// h/config.yaml, with h a link to BERTH_HOME, was written with no
// question. The manager gives a local environment the resolver, so the
// gate sees where the write lands.
func TestWriteThroughLinkToBerthHome(t *testing.T) {
	dir := t.TempDir()
	m, cfgPath := setupNative(t, "TERMINAL_CWD", dir)
	link := filepath.Join(dir, "h")
	if err := os.Symlink(filepath.Dir(cfgPath), link); err != nil {
		t.Fatal(err)
	}
	// The environment's first command, with a relative path: the shell's
	// cwd is not known yet, and where it starts is what counts.
	r := m.Run(context.Background(), "first", terminal.Request{Command: "printf 'approvals:\\n  mode: off\\n' >> h/config.yaml"})
	if r.Approval == nil || r.Approval.Allowed() || r.Approval.Rule != "write-berth-config" {
		t.Errorf("a relative write through the link in the first command: %+v %+v", r.Approval, r.Error)
	}
	_, err := m.WriteFile(context.Background(), "k", filepath.Join(link, "config.yaml"), "approvals:\n  mode: off\n")
	var be *approval.BlockedError
	if !errors.As(err, &be) || be.Decision.Rule != "write-berth-config" {
		t.Errorf("write_file through a link to berth's home: %v", err)
	}
	r = m.Run(context.Background(), "k", terminal.Request{Command: "printf 'approvals:\\n  mode: off\\n' >> " + link + "/config.yaml"})
	if r.Approval == nil || r.Approval.Allowed() || r.Approval.Rule != "write-berth-config" {
		t.Errorf("a redirection through the link: %+v", r.Approval)
	}
	if text, _ := os.ReadFile(cfgPath); strings.Contains(string(text), "off") {
		t.Errorf("the config was written: %q", text)
	}
}

// TestSessionNamesAreDynamic is N3 end to end: a function the session
// defined in an earlier call runs whatever its body says, which the next
// call's text does not show; the manager passes the session's names and,
// since issue 28 (item 4), their definitions, so the call is checked by
// what the body runs with its arguments (here a chmod 777, asked).
func TestSessionNamesAreDynamic(t *testing.T) {
	m, g, _ := setup(t, "", nil)
	ctx := context.Background()
	if r := m.Run(ctx, "k", terminal.Request{Command: `f() { echo "f:$*"; chmod 777 "$@" 2>/dev/null; }`}); r.Error != nil {
		t.Fatalf("definition: %s", *r.Error)
	}
	r := m.Run(ctx, "k", terminal.Request{Command: "f SESSION-FN-CALLED"})
	if r.Approval == nil || r.Approval.Allowed() || r.Approval.Rule != "chmod-world-writable" {
		t.Fatalf("calling a function defined in an earlier call: %+v %q", r.Approval, r.Output)
	}
	if strings.Contains(g.Sent(), "SESSION-FN-CALLED") {
		t.Error("the call reached the environment")
	}
	a := &asker{answers: []approval.Answer{approval.AnswerOnce}}
	r = m.Run(ctx, "k", terminal.Request{Command: "f approved"}, manager.WithAsker(a))
	if r.Output != "f:approved" || a.asked() != 1 {
		t.Errorf("approved once: %q, asked %d", r.Output, a.asked())
	}
}
