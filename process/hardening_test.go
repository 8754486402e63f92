package process

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/output"
	"github.com/a55dbaac/berth/terminal"
)

// Fake secrets with real shapes (never valid).
const (
	antKey  = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefghij"
	pemLine = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun"
)

// pemKey is a private key block of 24 body lines.
var pemKey = "-----BEGIN RSA PRIVATE KEY-----\n" + strings.Repeat(pemLine+"\n", 24) + "-----END RSA PRIVATE KEY-----\n"

// secretFragments are pieces of the two secrets that must never show.
var secretFragments = []string{"MIIEowIBAAKCAQEA", "LfVLPHCozMxH2Mo4", "ant-api03", "AbCdEfGhIjKl", "OpQrStUvWxYz012"}

func showsSecret(s string) string {
	for _, f := range secretFragments {
		if strings.Contains(s, f) {
			return f
		}
	}
	return ""
}

// allOutputs answers wait, log (every line), poll and list for id and
// returns the text each shows.
func allOutputs(t *testing.T, r *Registry, key, id string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	w := r.Do(ctx, key, Request{Action: "wait", SessionID: id, Timeout: 60})
	if w["status"] != Exited {
		t.Fatalf("wait: %v", w)
	}
	out["wait"], _ = w["output"].(string)
	off, lim := 0, 1_000_000
	l := r.Do(ctx, key, Request{Action: "log", SessionID: id, Offset: &off, Limit: &lim})
	out["log"], _ = l["output"].(string)
	p := r.Do(ctx, key, Request{Action: "poll", SessionID: id})
	out["poll"], _ = p["output_preview"].(string)
	for _, it := range r.Do(ctx, key, Request{Action: "list"})["processes"].([]map[string]any) {
		if it["session_id"] == id {
			out["list"], _ = it["output_preview"].(string)
		}
	}
	return out
}

// TestBackgroundSecretsStayRedacted: a private key and an sk-ant key
// printed by a background job stay redacted in wait, log, poll and list
// after 400 KB more output, here colour codes that clean to nothing, with
// the amount chosen so that a 400 000-byte raw window would start inside
// the key block, or inside the sk-ant key (issue 9 defect 3, L3).
func TestBackgroundSecretsStayRedacted(t *testing.T) {
	r := NewRegistry(time.Minute)
	env := localEnv(t)
	keyLine := "key " + antKey + "\n"
	cases := map[string]struct {
		prefix string
		codes  int // number of "\e[m" (3 bytes each) after the secrets
	}{
		// Output: prefix, codes, "done\n"; the last 400 000 bytes start
		// halfway through the key block, or 6 bytes into the sk-ant key.
		"cut in key block":  {pemKey + keyLine, (400_000 - len(pemKey)/2 - len(keyLine) - 5) / 3},
		"cut in sk-ant key": {keyLine, (400_000 - len(keyLine) + 10 - 5) / 3},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cmd := fmt.Sprintf("printf '%%s' '%s'; yes $'\\e[m' | head -n %d | tr -d '\\n'; echo done", c.prefix, c.codes)
			st := r.Start(context.Background(), env, "k", terminal.Request{Command: cmd, Background: true})
			if st.Error != nil {
				t.Fatal(*st.Error)
			}
			outs := allOutputs(t, r, "k", st.SessionID)
			for action, text := range outs {
				if f := showsSecret(text); f != "" {
					t.Errorf("%s shows %q of a secret:\n%.400s", action, f, text)
				}
			}
			if !strings.HasSuffix(outs["log"], "done") || !strings.Contains(outs["log"], "key sk-ant-[REDACTED]") {
				t.Errorf("log lost the redacted key or the last line: %.300q", outs["log"])
			}
			if name == "cut in key block" && !strings.Contains(outs["log"], "-----BEGIN RSA PRIVATE KEY-----\n[REDACTED]\n-----END RSA PRIVATE KEY-----") {
				t.Errorf("log does not show the key block redacted: %.300q", outs["log"])
			}
		})
	}
}

// TestProcessBelongsToItsKey: a process started by one environment key
// (an MCP session) is invisible to another: list omits it, every other
// action answers not_found by full id or prefix, and it keeps running
// (L7). The owner still reaches it, and list of every key shows it.
func TestProcessBelongsToItsKey(t *testing.T) {
	r := NewRegistry(time.Minute)
	env := localEnv(t)
	ctx := context.Background()
	st := r.Start(ctx, env, "session-a", terminal.Request{Command: "cat; echo end", Background: true})
	if st.Error != nil {
		t.Fatal(*st.Error)
	}
	t.Cleanup(func() { r.Do(ctx, "session-a", Request{Action: "kill", SessionID: st.SessionID}) })
	if items := r.Do(ctx, "session-b", Request{Action: "list"})["processes"].([]map[string]any); len(items) != 0 {
		t.Errorf("list of session-b shows %d processes of session-a", len(items))
	}
	hex := strings.TrimPrefix(st.SessionID, "proc_")
	for _, id := range []string{st.SessionID, hex, hex[:4], hex[3:9]} {
		for _, action := range []string{"poll", "log", "wait", "kill", "write", "submit", "close"} {
			res := r.Do(ctx, "session-b", Request{Action: action, SessionID: id, Data: "x", Timeout: 1})
			if res["status"] != "not_found" {
				t.Errorf("session-b %s %q: %v; want not_found", action, id, res)
			}
		}
	}
	if p := r.Do(ctx, "session-a", Request{Action: "poll", SessionID: hex[:4]}); p["status"] != Running {
		t.Fatalf("owner's poll after the other session's attempts: %v", p)
	}
	if res := r.Do(ctx, "session-a", Request{Action: "submit", SessionID: st.SessionID, Data: "mine"}); res["status"] != "ok" {
		t.Fatalf("owner's submit: %v", res)
	}
	r.Do(ctx, "session-a", Request{Action: "close", SessionID: st.SessionID})
	if w := r.Do(ctx, "session-a", Request{Action: "wait", SessionID: st.SessionID, Timeout: 20}); w["output"] != "mine\nend" {
		t.Errorf("owner's wait: %v; want output \"mine\\nend\" (no \"x\" from session-b)", w)
	}
	if items := r.Do(ctx, "", Request{Action: "list"})["processes"].([]map[string]any); len(items) != 1 {
		t.Errorf("list of every key shows %d processes; want 1", len(items))
	}
}

// TestFinishedProcessSurvivesReadsAtCap: with MaxTracked processes
// tracked, reading (poll, log, wait, list) never evicts a finished one;
// only a new start takes its slot (L2).
func TestFinishedProcessSurvivesReadsAtCap(t *testing.T) {
	r := NewRegistry(time.Minute)
	env := localEnv(t)
	ctx := context.Background()
	for i := 0; i < MaxTracked-1; i++ {
		id := fmt.Sprintf("proc_fill%08d", i)
		r.procs[id] = &Proc{ID: id, Key: "k", done: make(chan struct{}), out: output.NewRolling(1)} // running
	}
	st := r.Start(ctx, env, "k", terminal.Request{Command: "echo quick-result", Background: true})
	if st.Error != nil {
		t.Fatal(*st.Error)
	}
	if w := r.Do(ctx, "k", Request{Action: "wait", SessionID: st.SessionID, Timeout: 20}); w["output"] != "quick-result" {
		t.Fatalf("wait: %v", w)
	}
	for range 3 {
		for _, action := range []string{"poll", "log", "wait"} {
			if res := r.Do(ctx, "k", Request{Action: action, SessionID: st.SessionID}); res["status"] != Exited {
				t.Fatalf("%s of the finished process at the cap: %v", action, res)
			}
		}
		if n := len(r.Do(ctx, "k", Request{Action: "list"})["processes"].([]map[string]any)); n != MaxTracked {
			t.Fatalf("list shows %d processes; want %d", n, MaxTracked)
		}
	}
	// A new start needs the slot: the finished process gives it up.
	st2 := r.Start(ctx, env, "k", terminal.Request{Command: "true", Background: true})
	if st2.Error != nil {
		t.Fatalf("start at the cap with a finished process tracked: %s", *st2.Error)
	}
	if res := r.Do(ctx, "k", Request{Action: "poll", SessionID: st.SessionID}); res["status"] != "not_found" {
		t.Errorf("the finished process kept its slot after a new start: %v", res)
	}
}

// TestListRedactsCommand: the command field of list hides secrets the
// command line holds (L5), as the output does.
func TestListRedactsCommand(t *testing.T) {
	r := NewRegistry(time.Minute)
	env := localEnv(t)
	ctx := context.Background()
	cmd := "OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz0123456789 PGPASSWORD=hunter2hunter2 psql " +
		"postgres://app:Pa55w0rd@db/app -c 'select 1'; curl -H 'Authorization: Basic dXNlcjpwYXNzd29yZA==' x"
	st := r.Start(ctx, env, "k", terminal.Request{Command: cmd, Background: true})
	if st.Error != nil {
		t.Fatal(*st.Error)
	}
	r.Do(ctx, "k", Request{Action: "wait", SessionID: st.SessionID, Timeout: 20})
	items := r.Do(ctx, "k", Request{Action: "list"})["processes"].([]map[string]any)
	if len(items) != 1 {
		t.Fatalf("list: %v", items)
	}
	got, _ := items[0]["command"].(string)
	for _, secret := range []string{"abcdefghijklmnop", "hunter2", "Pa55w0rd", "dXNlcjpwYXNzd29yZA"} {
		if strings.Contains(got, secret) {
			t.Errorf("list command shows %q: %q", secret, got)
		}
	}
	if !strings.HasPrefix(got, "OPENAI_API_KEY=sk-proj-[REDACTED] PGPASSWORD=[REDACTED] psql postgres://app:[REDACTED]@db/app") {
		t.Errorf("list command = %q", got)
	}
}
