package modal

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func writeTOML(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "modal.toml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const twoProfiles = `
[work]
token_id = "ak-work"
token_secret = "as-work"
environment = "dev"

[personal]
token_id = "ak-personal"
token_secret = "as-personal"
server_url = "http://127.0.0.1:1"
active = true
`

func TestResolveCredentials(t *testing.T) {
	home := t.TempDir()
	cases := []struct {
		name    string
		env     map[string]string
		wantID  string
		wantEnv string
		wantURL string
		source  string // substring of Source, or of the error
		wantErr bool
	}{
		{name: "variables", env: map[string]string{"HOME": home, "MODAL_TOKEN_ID": "ak-1", "MODAL_TOKEN_SECRET": "as-1"},
			wantID: "ak-1", wantURL: DefaultServerURL, source: "MODAL_TOKEN_ID and MODAL_TOKEN_SECRET"},
		{name: "active profile", env: map[string]string{"MODAL_CONFIG_PATH": "@toml"},
			wantID: "ak-personal", wantURL: "http://127.0.0.1:1", source: `profile "personal" of `},
		{name: "MODAL_PROFILE", env: map[string]string{"MODAL_CONFIG_PATH": "@toml", "MODAL_PROFILE": "work", "MODAL_ENVIRONMENT": "prod"},
			wantID: "ak-work", wantEnv: "prod", wantURL: DefaultServerURL, source: `profile "work" of `},
		{name: "variable over profile", env: map[string]string{"MODAL_CONFIG_PATH": "@toml", "MODAL_TOKEN_ID": "ak-env", "MODAL_SERVER_URL": "https://example.invalid"},
			wantID: "ak-env", wantURL: "https://example.invalid", source: `MODAL_TOKEN_ID (environment or .env) with the token_secret of profile "personal"`},
		{name: "unknown profile", env: map[string]string{"MODAL_CONFIG_PATH": "@toml", "MODAL_PROFILE": "nope"},
			source: "MODAL_PROFILE=nope names no profile of the config file (it has profiles personal, work)", wantErr: true},
		{name: "nothing", env: map[string]string{"HOME": home},
			source: filepath.Join(home, ".modal.toml"), wantErr: true},
		{name: "only a secret", env: map[string]string{"HOME": home, "MODAL_TOKEN_SECRET": "as-1"},
			source: "a token secret but no token id", wantErr: true},
		{name: "missing config path", env: map[string]string{"MODAL_CONFIG_PATH": "/nonexistent/modal.toml"},
			source: "MODAL_CONFIG_PATH names a file that does not exist", wantErr: true},
		{name: "bad toml", env: map[string]string{"MODAL_CONFIG_PATH": "@bad"},
			source: "cannot parse the Modal config file", wantErr: true},
		{name: "bad server url", env: map[string]string{"HOME": home, "MODAL_TOKEN_ID": "ak-1", "MODAL_TOKEN_SECRET": "as-1", "MODAL_SERVER_URL": "api.modal.com"},
			source: `server URL "api.modal.com"`, wantErr: true},
	}
	good, bad := writeTOML(t, twoProfiles), writeTOML(t, "[x\ntoken_id=")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				switch v {
				case "@toml":
					c.env[k] = good
				case "@bad":
					c.env[k] = bad
				}
			}
			cred, err := resolveCredentials(envOf(c.env))
			if c.wantErr {
				var ce *CredentialsError
				if !errors.As(err, &ce) || !strings.Contains(err.Error(), c.source) || !strings.Contains(err.Error(), "modal token new") {
					t.Fatalf("error %v; want a CredentialsError mentioning %q and `modal token new`", err, c.source)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cred.TokenID != c.wantID || cred.Environment != c.wantEnv || cred.ServerURL != c.wantURL || !strings.Contains(cred.Source, c.source) {
				t.Fatalf("got %+v; want id %s env %q url %s source ~%q", cred, c.wantID, c.wantEnv, c.wantURL, c.source)
			}
		})
	}
}

// TestCredentialsAgainstTheFake connects the real SDK with credentials from
// each source: a profile's server_url and token reach the fake, and a
// wrong secret is the clear CredentialsError. None falls back to anything.
func TestCredentialsAgainstTheFake(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	toml := writeTOML(t, fmt.Sprintf("[fake]\nserver_url = %q\ntoken_id = %q\ntoken_secret = %q\nactive = true\n",
		f.srv.URL(), f.srv.TokenID(), f.srv.TokenSecret()))
	opts := f.options(t, "", nil)
	opts.Getenv = envOf(map[string]string{"MODAL_CONFIG_PATH": toml})
	b, err := New(ctx, opts)
	if err != nil {
		t.Fatalf("credentials and server from a profile: %v", err)
	}
	if out, _ := sh(t, b, "echo via-profile"); out != "via-profile\n" {
		t.Fatalf("exec: %q", out)
	}
	b.Close(ctx)

	opts = f.options(t, "", nil)
	opts.Getenv = envOf(map[string]string{"MODAL_SERVER_URL": f.srv.URL(), "MODAL_TOKEN_ID": f.srv.TokenID(), "MODAL_TOKEN_SECRET": "as-wrong", "HOME": t.TempDir()})
	_, err = New(ctx, opts)
	var ce *CredentialsError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "rejected the token "+f.srv.TokenID()) ||
		!strings.Contains(err.Error(), "MODAL_TOKEN_ID and MODAL_TOKEN_SECRET") || !strings.Contains(err.Error(), "modal token new") {
		t.Fatalf("wrong secret: %v; want a CredentialsError naming the source and `modal token new`", err)
	}
}

// TestNoServerAtFirstContact: a MODAL_SERVER_URL where nothing listens (a
// closed port on 127.0.0.1) fails at the first call, not after the
// two-minute retry budget: an UnreachableError naming the URL, saying no
// server answered. (With the retries, it would be a GaveUpError, and the
// hang guard would end it first.)
func TestNoServerAtFirstContact(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	cfg := config.Default().Terminal
	cfg.Backend = Name
	opts := backend.Options{Key: "t-noserver", Config: cfg, Home: t.TempDir(),
		Getenv: envOf(map[string]string{"MODAL_SERVER_URL": dead, "MODAL_TOKEN_ID": "ak-x", "MODAL_TOKEN_SECRET": "as-x", "HOME": t.TempDir()})}
	if got := opts.Config.Int(keyRetryTimeout); got != DefaultRetryTimeoutSecs {
		t.Fatalf("%s = %d, want the default %d", keyRetryTimeout, got, DefaultRetryTimeoutSecs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute) // a hang guard
	defer cancel()
	_, err = New(ctx, opts)
	var ue *backend.UnreachableError
	var none *NoServerError
	if !errors.As(err, &ue) || ue.Target != dead || !errors.As(err, &none) || !strings.Contains(err.Error(), "cannot reach "+dead) ||
		!strings.Contains(err.Error(), "no server answered") || !strings.Contains(err.Error(), "MODAL_SERVER_URL") {
		t.Fatalf("no server at %s: %v; want an UnreachableError naming the URL and saying no server answered", dead, err)
	}
	if _, retried := gaveUp(err); retried {
		t.Fatalf("no server at %s: %v; the call was retried for the budget", dead, err)
	}
}

// The modal keys, declared by this package's registration, travel from the
// file and the TERMINAL_MODAL_* variables into the settings, keep their
// range checks, and default to the documented values.
func TestSettings(t *testing.T) {
	home := t.TempDir()
	path := filepath.Join(home, "config.yaml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("terminal:\n  backend: modal\n  modal_image: python:3.12-slim\n  modal_sandbox_timeout: 7200\n  docker_env: {\"A\": \"1\"}\n")
	env := map[string]string{"HOME": home, "BERTH_HOME": home, "TERMINAL_MODAL_APP": "agents", "TERMINAL_MODAL_IDLE_TIMEOUT": "300"}
	getenv := func(k string) string { return env[k] }
	cfg, err := config.Load(config.LoadOptions{Getenv: getenv})
	if err != nil {
		t.Fatal(err)
	}
	s, err := readSettings(backend.Options{Config: cfg.Terminal, Getenv: getenv})
	if err != nil || s.App != "agents" || s.Image != "python:3.12-slim" || s.Timeout != 2*time.Hour ||
		s.IdleTimeout != 5*time.Minute || s.SessionEnv["A"] != "1" {
		t.Fatalf("settings %+v, %v", s, err)
	}

	s, err = readSettings(backend.Options{Config: config.Default().Terminal})
	if err != nil || s.App != DefaultApp || s.Image != config.DefaultImage || s.Timeout != time.Hour || s.IdleTimeout != 0 || len(s.SessionEnv) != 0 {
		t.Fatalf("default settings %+v, %v", s, err)
	}

	for _, bad := range []struct{ env, val, want string }{
		{"TERMINAL_MODAL_APP", "bad app!", `TERMINAL_MODAL_APP="bad app!": an app name is 1 to 64 letters`},
		{"TERMINAL_MODAL_SANDBOX_TIMEOUT", "0", `TERMINAL_MODAL_SANDBOX_TIMEOUT="0": must be whole seconds from 1 to 86400`},
		{"TERMINAL_MODAL_SANDBOX_TIMEOUT", "90000", `TERMINAL_MODAL_SANDBOX_TIMEOUT="90000": must be whole seconds from 1 to 86400`},
		{"TERMINAL_MODAL_IDLE_TIMEOUT", "ten", `TERMINAL_MODAL_IDLE_TIMEOUT="ten": not an integer`},
		{"TERMINAL_MODAL_IDLE_TIMEOUT", "-1", `TERMINAL_MODAL_IDLE_TIMEOUT="-1": must be whole seconds from 0 (never)`},
	} {
		env := map[string]string{"HOME": home, "BERTH_HOME": home, bad.env: bad.val}
		_, err := config.Load(config.LoadOptions{Getenv: func(k string) string { return env[k] }})
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s=%q: %v, want an error containing %q", bad.env, bad.val, err, bad.want)
		}
	}
	write("terminal:\n  modal_sandbox_timeout: 0\n")
	if _, err := config.Load(config.LoadOptions{Getenv: envOf(map[string]string{"HOME": home, "BERTH_HOME": home})}); err == nil ||
		!strings.Contains(err.Error(), `terminal.modal_sandbox_timeout "0" in `+path) {
		t.Errorf("modal_sandbox_timeout 0 in the file: %v", err)
	}
	var term config.Terminal
	for name, v := range map[string]any{keyApp: "", keySandboxTimeout: 86401, keyIdleTimeout: -5} {
		if err := term.Set(name, v); err == nil || !strings.Contains(err.Error(), "terminal."+name) {
			t.Errorf("Set(%s, %v) = %v, want an error naming the key", name, v, err)
		}
	}

	empty := config.Default().Terminal
	mustSet(&empty, keyImage, " ")
	if _, err := readSettings(backend.Options{Config: empty}); err == nil || !strings.Contains(err.Error(), "modal_image is empty") {
		t.Errorf("empty modal_image: %v", err)
	}
}

func TestSandboxDir(t *testing.T) {
	for cwd, want := range map[string]string{
		"": "/root", "~": "/root", ".": "/root", "src": "/root", "~/src": "/root/src",
		"/workspace/": "/workspace", "/home/me/project": "/root", "/Users/me": "/root", "/tmp": "/tmp",
	} {
		if got := sandboxDir(cwd); got != want {
			t.Errorf("sandboxDir(%q) = %q, want %q", cwd, got, want)
		}
	}
}

func TestSandboxName(t *testing.T) {
	a, b := sandboxName("u@h:/a", "build/x y"), sandboxName("u@h:/b", "build/x y")
	if a == b || len(a) >= 64 || !strings.HasPrefix(a, "berth-build-x-y-") {
		t.Fatalf("names %q %q", a, b)
	}
	long := sandboxName("o", strings.Repeat("k", 200))
	if len(long) >= 64 {
		t.Fatalf("name of a long key is %d chars", len(long))
	}
}
