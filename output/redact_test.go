package output

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Fake credentials with the real shapes (never valid keys).
const (
	openAIKey    = "sk-abcdefghijklmnopqrstuvwxyzABCDEF0123456789"
	openAIProj   = "sk-proj-Ab3dEf6hIj9kLmN0pQrStUvWxYz_12-3456789"
	anthropicKey = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_AbCdEf"
	ghpToken     = "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
	ghoToken     = "gho_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
	ghuToken     = "ghu_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
	ghsToken     = "ghs_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
	ghrToken     = "ghr_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
	githubPAT    = "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123"
	slackBot     = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
	slackUser    = "xoxp-123456789012-1234567890123-1234567890123-abcdef0123456789abcdef0123456789"
	slackApp     = "xoxa-2-123456789012-abcdefghijklmnopqrstuvwx"
	slackRefresh = "xoxr-123456789012-abcdefghijklmnopqrstuvwxyz"
	awsKeyID     = "AKIAIOSFODNN7EXAMPLE"
	awsTempID    = "ASIAY34FZKBOKMUTVV7A"
	googleKey    = "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW"
	jwt          = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
	bearerToken  = "abc123.DEF-456_ghi~jkl+mno/pqr="
)

func TestRedactShapes(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"OpenAI sk-", "key=" + openAIKey + " end", "key=sk-[REDACTED] end"},
		{"OpenAI sk-proj-", "OPENAI_API_KEY=" + openAIProj, "OPENAI_API_KEY=sk-proj-[REDACTED]"},
		{"Anthropic sk-ant-", "\"" + anthropicKey + "\"", "\"sk-ant-[REDACTED]\""},
		{"GitHub ghp_", "token " + ghpToken, "token ghp_[REDACTED]"},
		{"GitHub gho_", ghoToken, "gho_[REDACTED]"},
		{"GitHub ghu_", ghuToken, "ghu_[REDACTED]"},
		{"GitHub ghs_", ghsToken, "ghs_[REDACTED]"},
		{"GitHub ghr_", ghrToken, "ghr_[REDACTED]"},
		{"GitHub fine-grained PAT", "GH=" + githubPAT + ";", "GH=github_pat_[REDACTED];"},
		{"Slack bot", slackBot, "xoxb-[REDACTED]"},
		{"Slack user", "'" + slackUser + "'", "'xoxp-[REDACTED]'"},
		{"Slack app", slackApp, "xoxa-[REDACTED]"},
		{"Slack refresh", slackRefresh, "xoxr-[REDACTED]"},
		{"AWS access key id", "aws_access_key_id = " + awsKeyID, "aws_access_key_id = AKIA[REDACTED]"},
		{"AWS temporary key id", awsTempID + ",", "ASIA[REDACTED],"},
		{"Google API key", "?key=" + googleKey + "&x=1", "?key=AIza[REDACTED]&x=1"},
		{"JWT", "token: " + jwt + " ok", "token: [REDACTED] ok"},
		{"Authorization header", "> Authorization: Bearer " + bearerToken + "\r\n", "> Authorization: Bearer [REDACTED]\r\n"},
		{"Authorization any case", "authorization: bearer " + bearerToken, "authorization: bearer [REDACTED]"},
		{"Authorization in curl -H", "curl -H 'Authorization: Bearer " + bearerToken + "' url", "curl -H 'Authorization: Bearer [REDACTED]' url"},
		{"Authorization in JSON", `{"Authorization": "Bearer ` + bearerToken + `"}`, `{"Authorization": "Bearer [REDACTED]"}`},
		{"Bearer JWT", "Authorization: Bearer " + jwt, "Authorization: Bearer [REDACTED]"},
		{"two secrets on a line", ghpToken + " " + awsKeyID, "ghp_[REDACTED] AKIA[REDACTED]"},
		{"secret after unicode", "clé: " + openAIKey, "clé: sk-[REDACTED]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Redact(tt.in)); diff != "" {
				t.Errorf("Redact(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestRedactLeavesLookAlikes(t *testing.T) {
	for _, in := range []string{
		"task-1 finished; disk-usage 40%",
		"task-abcdefghijklmnopqrstuvwxyz0123",     // "sk-" glued to a word
		"sk-short",                                // too short
		"sk-abcdefghijklmnopqrs",                  // 19 chars after sk-
		"ghp_short and gh_AbCdEfGhIjKlMnOpQrStUv", // too short / no type letter
		"github_pat_short",
		"xoxb-short xoxz-123456789012345678901234",
		"AKIAIOSFODNN7EXAMPL",   // 15 after AKIA
		"AKIAIOSFODNN7EXAMPLE1", // 17 after AKIA
		"XAKIAIOSFODNN7EXAMPLE", // glued
		"AIzaShort",
		"eyJhbGciOiJIUzI1NiJ9 alone",        // one segment
		"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOjF9", // two segments
		"Bearer authentication is described in RFC 6750",
		"Authorization: required for every call",
		"https://example.com:8443/path?q=1 ftp://user@host/",
		"PWD=/root OLDPWD=/tmp TOKENIZERS_PARALLELISM=false KEY_ID=x GPG_TTY=/dev/pts/0",
		"if [ \"$PASSWORD\" == x ]; then PASSWORD==x; fi",
		"-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----",
		"-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYI\n-----END PUBLIC KEY-----",
		"2024-05-01T12:00:00Z INFO a_b=c-d key: value ASIA AKIA",
	} {
		if got := Redact(in); got != in {
			t.Errorf("Redact(%q) = %q; want unchanged", in, got)
		}
	}
}

const fakePEMBody = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n" +
	"VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n" +
	"LxoS2tFczGkPLPgizskuemMghRniWaoLcyehkd3qqGElvW/VDL5AaWTg0nLVkjRo\n"

func TestRedactPEM(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{
			"RSA block",
			"before\n-----BEGIN RSA PRIVATE KEY-----\n" + fakePEMBody + "-----END RSA PRIVATE KEY-----\nafter\n",
			"before\n-----BEGIN RSA PRIVATE KEY-----\n[REDACTED]\n-----END RSA PRIVATE KEY-----\nafter\n",
		},
		{
			"PKCS8 block with CRLF",
			"-----BEGIN PRIVATE KEY-----\r\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\r\n-----END PRIVATE KEY-----\r\n",
			"-----BEGIN PRIVATE KEY-----\r\n[REDACTED]\n-----END PRIVATE KEY-----\r\n",
		},
		{
			"encrypted block with headers",
			"-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,0123456789ABCDEF\n\n" + fakePEMBody + "-----END RSA PRIVATE KEY-----",
			"-----BEGIN RSA PRIVATE KEY-----\n[REDACTED]\n-----END RSA PRIVATE KEY-----",
		},
		{
			"OpenSSH block, indented",
			"  -----BEGIN OPENSSH PRIVATE KEY-----\n  b3BlbnNzaC1rZXktdjEAAAAABG5vbmU=\n  -----END OPENSSH PRIVATE KEY-----\n",
			"  -----BEGIN OPENSSH PRIVATE KEY-----\n[REDACTED]\n-----END OPENSSH PRIVATE KEY-----\n",
		},
		{
			"escaped on one line (JSON)",
			`{"private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADAN\nBgkqhkiG9w0B\n-----END PRIVATE KEY-----\n", "id": 1}`,
			`{"private_key": "-----BEGIN PRIVATE KEY-----[REDACTED]-----END PRIVATE KEY-----\n", "id": 1}`,
		},
		{
			"unterminated at end of stream",
			"-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIIrYSSNQFaA2Hwf1duRSxKtLYX5CB04fSeQ6tF1aY/PuoAoGCCqGSM49\n",
			"-----BEGIN EC PRIVATE KEY-----\n[REDACTED]",
		},
		{
			"block ended by ordinary text",
			"-----BEGIN PRIVATE KEY-----\nMIIEvQIBADAN\nError: file truncated\nnext\n",
			"-----BEGIN PRIVATE KEY-----\n[REDACTED]\nError: file truncated\nnext\n",
		},
		{
			"token after block still redacted",
			"-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n" + ghpToken + "\n",
			"-----BEGIN PRIVATE KEY-----\n[REDACTED]\n-----END PRIVATE KEY-----\nghp_[REDACTED]\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Redact(tt.in)); diff != "" {
				t.Errorf("Redact mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// redactCapture runs the full pipeline with redaction on, no truncation.
func redactCapture(writes ...string) string {
	c := NewCapture(Options{MaxChars: 1 << 22})
	for _, w := range writes {
		c.Write([]byte(w))
	}
	return c.Finish("").Output
}

func TestRedactWhileStreamingSplitWrites(t *testing.T) {
	ins := []string{
		"export OPENAI_API_KEY=" + openAIKey + "\necho done",
		"\x1b[33m" + ghpToken + "\x1b[0m\n", // coloured: stripped first, then redacted
		"a\n-----BEGIN RSA PRIVATE KEY-----\n" + fakePEMBody + "-----END RSA PRIVATE KEY-----\nb",
		"> Authorization: Bearer " + bearerToken + "\n< HTTP/1.1 200 OK",
	}
	for _, in := range ins {
		want := Clean(in)
		if strings.Contains(want, "AbCdEf") || strings.Contains(want, "MIIE") || strings.Contains(want, bearerToken) {
			t.Fatalf("Clean(%q) leaked a secret: %q", in, want)
		}
		for cut := 1; cut < len(in); cut++ {
			if got := redactCapture(in[:cut], in[cut:]); got != want {
				t.Errorf("split at %d of %q: got %q, want %q", cut, in, got, want)
			}
		}
		if got := redactCapture(bytewise(in)...); got != want {
			t.Errorf("byte-by-byte %q: got %q, want %q", in, got, want)
		}
	}
}

func TestRedactLongLineIsBoundedAndRedacted(t *testing.T) {
	// A 1 MiB line with no newline and blanks every 100 bytes: the redactor
	// passes it on in pieces and still finds a token in the middle.
	word := strings.Repeat("x", 99) + " "
	in := strings.Repeat(word, 5000) + openAIKey + " " + strings.Repeat(word, 5000)
	c := NewCapture(Options{MaxChars: 1 << 22})
	for i := 0; i < len(in); i += 4096 {
		c.Write([]byte(in[i:min(i+4096, len(in))]))
		if got := cap(c.pipe.stages[1].(*redactor).pending); got > 2*lineLimit {
			t.Fatalf("partial line buffer grew to %d bytes", got)
		}
	}
	got := c.Finish("").Output
	want := strings.TrimRight(strings.Replace(in, openAIKey, "sk-[REDACTED]", 1), " ")
	if got != want {
		t.Errorf("long line: output differs (len %d, want %d); secret leaked: %v", len(got), len(want), strings.Contains(got, openAIKey))
	}
}

func TestNoRedactOption(t *testing.T) {
	c := NewCapture(Options{NoRedact: true})
	c.Write([]byte("key " + openAIKey))
	if got, want := c.Finish("").Output, "key "+openAIKey; got != want {
		t.Errorf("NoRedact output = %q; want %q", got, want)
	}
}

func TestCleanRunsWholePipeline(t *testing.T) {
	in := "\x1b[31merror:\x1b[0m bad \xff byte, token " + ghpToken + " \r\n\n\t  "
	want := "error: bad \uFFFD byte, token ghp_[REDACTED]"
	if got := Clean(in); got != want {
		t.Errorf("Process = %q; want %q", got, want)
	}
}

// TestRedactCommand: in a command line, a secret variable's unquoted value
// ends at the blank, so the command stays readable.
func TestRedactCommand(t *testing.T) {
	in := "PGPASSWORD=hunter2hunter2 psql -h db; API_TOKEN='a b c' ./run --password=x1 " + ghpToken
	want := "PGPASSWORD=[REDACTED] psql -h db; API_TOKEN='[REDACTED]' ./run --password=[REDACTED] ghp_[REDACTED]"
	if got := RedactCommand(in); got != want {
		t.Errorf("RedactCommand = %q; want %q", got, want)
	}
}
