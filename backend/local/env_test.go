package local

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
)

func TestIsSecret(t *testing.T) {
	for name, want := range map[string]bool{
		"OPENAI_API_KEY": true, "OPENAI_BASE_URL": true, "ANTHROPIC_API_KEY": true,
		"OPENROUTER_API_KEY": true, "GOOGLE_API_KEY": true, "GEMINI_API_KEY": true,
		"GROQ_API_KEY": true, "MISTRAL_API_KEY": true, "DEEPSEEK_API_KEY": true,
		"TOGETHER_API_KEY": true, "XAI_API_KEY": true, "GH_TOKEN": true, "GITHUB_TOKEN": true,
		"MODAL_TOKEN_ID": true, "MODAL_TOKEN_SECRET": true, "DAYTONA_API_KEY": true,
		"SUDO_PASSWORD": true, "TELEGRAM_BOT_TOKEN": true, "MY_SERVICE_API_KEY": true,
		"SOMETHING_SECRET": true, "ANY_TOKEN": true, "AWS_SECRET_ACCESS_KEY": true,
		"PATH": false, "HOME": false, "LANG": false, "TERM": false, "GOPATH": false,
		"TOKENIZERS_PARALLELISM": false, "SECRETARY": false, "KEY": false,
		// L10 of the 2026-11 review.
		"PGPASSWORD": true, "MYSQL_PWD": true, "R2_SECRET_ACCESS_KEY": true, "JWT_PRIVATE_KEY": true,
		"DB_PASS": true, "api_key": true, "API_KEY": true, "DATABASE_URL": true, "SSH_AUTH_SOCK": true,
		"GITHUB_PAT": true, "GITLAB_PAT": true, "DB_PASSWD": true,
		"PWD": false, "OLDPWD": false, "AWS_ACCESS_KEY_ID": false, "AWS_REGION": false, "AWS_PROFILE": false,
		"SSH_AGENT_PID": false, "COMPASS": false, "MYSQL_HOST": false,
	} {
		if got := IsSecret(name); got != want {
			t.Errorf("IsSecret(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestFilterEnvKeepsPassthrough(t *testing.T) {
	in := []string{"PATH=/bin", "OPENAI_API_KEY=sk-x", "GITHUB_TOKEN=ghp", "HOME=/root", "MY_API_KEY=k"}
	got := strings.Join(FilterEnv(in, []string{"MY_API_KEY"}), " ")
	if got != "PATH=/bin HOME=/root MY_API_KEY=k" {
		t.Fatalf("FilterEnv = %q", got)
	}
}

// TestCommandsDoNotSeeSecrets starts a real process through the backend and
// checks what its environment holds.
func TestCommandsDoNotSeeSecrets(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-leak")
	t.Setenv("BERTH_TEST_TOKEN", "tok-leak")
	t.Setenv("ALLOWED_API_KEY", "allowed")
	t.Setenv("PLAIN_SETTING", "plain")
	// The names of finding L10 in the 2026-11 review, which reached commands.
	l10 := []string{"PGPASSWORD", "MYSQL_PWD", "R2_SECRET_ACCESS_KEY", "JWT_PRIVATE_KEY", "DB_PASS", "API_KEY", "DATABASE_URL", "SSH_AUTH_SOCK", "GITHUB_PAT"}
	for _, n := range l10 {
		t.Setenv(n, "l10-leak-"+n)
	}
	cfg := config.Default().Terminal
	cfg.EnvPassthrough = []string{"ALLOWED_API_KEY"}
	be, err := New(backend.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	p, err := be.Start(context.Background(), backend.ProcSpec{Argv: []string{"env"}})
	if err != nil {
		t.Fatal(err)
	}
	p.Stdin().Close()
	out, _ := io.ReadAll(p.Stdout())
	p.Wait()
	p.Close()
	env := string(out)
	for _, n := range l10 {
		if strings.Contains(env, "l10-leak-"+n) {
			t.Errorf("child environment holds %s", n)
		}
	}
	for _, leak := range []string{"sk-ant-leak", "tok-leak"} {
		if strings.Contains(env, leak) {
			t.Errorf("child environment holds %q", leak)
		}
	}
	for _, keep := range []string{"ALLOWED_API_KEY=allowed", "PLAIN_SETTING=plain"} {
		if !strings.Contains(env, keep) {
			t.Errorf("child environment lacks %q", keep)
		}
	}
}

// The variables that steer berth (its home, its config, its approvals)
// never reach commands, not even through env_passthrough: a nested berth
// cannot be pointed at a lower approval level through them (N1).
func TestFilterEnvDropsBerthControl(t *testing.T) {
	in := []string{"PATH=/bin", "BERTH_HOME=/h", "BERTH_CONFIG=/h/c.yaml", "BERTH_APPROVALS_MODE=off",
		"BERTH_APPROVALS_TIMEOUT=9", "BERTH_OWNER=x", "BERTH_NO_DAEMON=1"}
	got := strings.Join(FilterEnv(in, []string{"BERTH_HOME", "BERTH_APPROVALS_MODE"}), " ")
	if got != "PATH=/bin BERTH_OWNER=x BERTH_NO_DAEMON=1" {
		t.Errorf("FilterEnv = %q", got)
	}
}
