package terminal

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/local"
	"github.com/a55dbaac/berth/session"
)

func TestOnTimeoutValidated(t *testing.T) {
	for _, v := range []string{"", "kill", "background"} {
		if err := Validate(Request{Command: "true", OnTimeout: v}); err != nil {
			t.Errorf("on_timeout %q refused: %v", v, err)
		}
	}
	for _, v := range []string{"Background", "detach", " kill"} {
		err := Validate(Request{Command: "true", OnTimeout: v})
		if err == nil || !strings.Contains(err.Error(), "on_timeout") || !strings.Contains(err.Error(), `"kill"`) || !strings.Contains(err.Error(), `"background"`) {
			t.Errorf("on_timeout %q: %v, want an error naming the field and the accepted values", v, err)
		}
	}
}

func TestMovedResultJSON(t *testing.T) {
	b, err := json.Marshal(Result{Output: "x", ExitCode: -1, MovedToBackground: true, SessionID: "proc_0123456789ab", PID: 42})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	if v, ok := m["exit_code"]; !ok || v != nil || m["session_id"] != "proc_0123456789ab" || m["moved_to_background"] != true || m["pid"] != 42.0 {
		t.Fatalf("moved result encodes as %s", b)
	}
	b, _ = json.Marshal(Result{Output: "x", ExitCode: 3})
	if !strings.Contains(string(b), `"exit_code":3`) || strings.Contains(string(b), "moved_to_background") || strings.Contains(string(b), "session_id") {
		t.Fatalf("plain result encodes as %s", b)
	}
}

// A command runs the environment's setting when the request gives none;
// Run (no call id) never moves a command.
func TestOnTimeoutSettingAndRunKills(t *testing.T) {
	ctx := context.Background()
	be, err := local.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := New(be, Options{SpillDir: t.TempDir(), OnTimeout: OnTimeoutBackground, Session: sessionOpts()})
	defer e.Close(ctx)
	r := e.Run(ctx, Request{Command: "echo a; sleep 30", Timeout: 1})
	if r.MovedToBackground || r.ExitCode != 124 {
		t.Fatalf("Run without a call id: %+v, want the timeout kill", r)
	}
	r = e.RunCall(ctx, Request{Command: "echo a; sleep 1; echo b", Timeout: 1}, Call{ID: "proc_000000000001"})
	if !r.MovedToBackground || r.Moved == nil || r.SessionID != "proc_000000000001" || !strings.HasPrefix(r.Output, "a\n[Command still running after 1s") {
		t.Fatalf("setting background: %+v", r)
	}
	rest, _ := io.ReadAll(r.Moved.Handoff.Output)
	if code, err := r.Moved.Handoff.ExitCode(); code != 0 || err != nil || string(r.Moved.Before)+string(rest) != "a\nb\n" {
		t.Fatalf("moved command: before %q rest %q code %d err %v", r.Moved.Before, rest, code, err)
	}
	r = e.RunCall(ctx, Request{Command: "sleep 30", Timeout: 1, OnTimeout: OnTimeoutKill}, Call{ID: "proc_000000000002"})
	if r.MovedToBackground || r.ExitCode != 124 {
		t.Fatalf("request kill overrides the setting: %+v", r)
	}
}

func sessionOpts() (o session.Options) {
	o.Grace = 500 * time.Millisecond
	return o
}
