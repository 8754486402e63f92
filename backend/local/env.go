package local

import (
	"strings"
)

// secretPrefixes are name prefixes of provider keys, base URLs and tokens
// that must not reach commands the agent runs.
var secretPrefixes = []string{
	"OPENAI_", "ANTHROPIC_", "OPENROUTER_", "GEMINI_", "GROQ_", "MISTRAL_",
	"DEEPSEEK_", "TOGETHER_", "XAI_", "COHERE_", "FIREWORKS_", "PERPLEXITY_",
	"AZURE_OPENAI_", "HUGGINGFACE_", "MODAL_TOKEN_", "NOUS_", "KIMI_", "MOONSHOT_",
}

// secretNames are exact names that are secrets without a telling shape:
// database clients' password variables (PGPASSWORD, MYSQL_PWD), connection
// URLs that embed a password (DATABASE_URL), and SSH_AUTH_SOCK, which
// hands whoever can reach the socket the use of the user's SSH keys.
//
// AWS follows Hermes' policy and is unchanged: the secret access key and
// the session token are withheld, AWS_ACCESS_KEY_ID, AWS_PROFILE and
// AWS_REGION (which are not secrets by themselves) reach commands.
var secretNames = map[string]bool{
	"GOOGLE_API_KEY": true, "GH_TOKEN": true, "GITHUB_TOKEN": true,
	"DAYTONA_API_KEY": true, "DAYTONA_API_URL": true, "SUDO_PASSWORD": true,
	"HF_TOKEN": true, "AWS_SECRET_ACCESS_KEY": true, "AWS_SESSION_TOKEN": true,
	"TELEGRAM_BOT_TOKEN": true, "DISCORD_BOT_TOKEN": true, "SLACK_BOT_TOKEN": true,
	"SLACK_APP_TOKEN": true, "BERTH_TOKEN": true,
	"API_KEY": true, "PGPASSWORD": true, "MYSQL_PWD": true, "DATABASE_URL": true,
	"SSH_AUTH_SOCK": true,
}

// secretSuffixes catch the common naming conventions for credentials:
// *_ACCESS_KEY (R2_SECRET_ACCESS_KEY, ...), *_PRIVATE_KEY, *_PASS (DB_PASS)
// and *_PAT (GITHUB_PAT and other personal access tokens) besides the usual
// ones.
var secretSuffixes = []string{"_API_KEY", "_SECRET", "_TOKEN", "_SECRET_KEY", "_PASSWORD",
	"_ACCESS_KEY", "_PRIVATE_KEY", "_PASS", "_PASSWD", "_PAT"}

// IsSecret reports whether an environment variable name looks like a
// credential that the local backend withholds from commands.
func IsSecret(name string) bool {
	up := strings.ToUpper(name)
	if secretNames[up] {
		return true
	}
	for _, p := range secretPrefixes {
		if strings.HasPrefix(up, p) {
			return true
		}
	}
	for _, s := range secretSuffixes {
		if strings.HasSuffix(up, s) {
			return true
		}
	}
	return false
}

// IsBerthControl reports whether a variable steers berth itself: where its
// configuration and home are (BERTH_CONFIG, BERTH_HOME) and what its
// approval gate does (BERTH_APPROVALS_*). Commands never get them, so a
// berth the agent starts inside the environment finds neither the parent's
// home and daemon through them nor a lower approval level the parent
// passed on; env_passthrough cannot re-allow them.
func IsBerthControl(name string) bool {
	return name == "BERTH_CONFIG" || name == "BERTH_HOME" || strings.HasPrefix(name, "BERTH_APPROVALS_")
}

// FilterEnv returns environ without secrets, except the names listed in
// passthrough, which the user explicitly re-allowed, and without the
// variables that steer berth itself (IsBerthControl).
func FilterEnv(environ []string, passthrough []string) []string {
	allow := make(map[string]bool, len(passthrough))
	for _, n := range passthrough {
		allow[n] = true
	}
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if IsBerthControl(name) || IsSecret(name) && !allow[name] {
			continue
		}
		out = append(out, kv)
	}
	return out
}
