package output

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// Secret values of environment dumps (fake).
const (
	pgPass  = "hunter2-Pg-Passw0rd"
	dbPass  = "S3cr3t-db-pass"
	jwtPriv = "jwt-private-material-0123456789"
)

// TestRedactEnvDump: the values of variables whose names say they hold a
// secret are redacted in env, printenv, export -p and set output (L5),
// whatever their shape, and other variables are left alone.
func TestRedactEnvDump(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"env", "HOME=/root\nPGPASSWORD=" + pgPass + "\nMYSQL_PWD=" + dbPass + "\nR2_SECRET_ACCESS_KEY=abc/def+ghi\n" +
			"JWT_PRIVATE_KEY=" + jwtPriv + " with spaces\nDB_PASS=x\napi_key=k1\nGITHUB_PAT=p1\nMY_SERVICE_TOKEN=t1\n" +
			"OPENAI_API_KEY=" + openAIProj + "\nPWD=/root\nTOKENIZERS_PARALLELISM=false\nTERM=xterm\n",
			"HOME=/root\nPGPASSWORD=[REDACTED]\nMYSQL_PWD=[REDACTED]\nR2_SECRET_ACCESS_KEY=[REDACTED]\n" +
				"JWT_PRIVATE_KEY=[REDACTED]\nDB_PASS=[REDACTED]\napi_key=[REDACTED]\nGITHUB_PAT=[REDACTED]\nMY_SERVICE_TOKEN=[REDACTED]\n" +
				"OPENAI_API_KEY=sk-proj-[REDACTED]\nPWD=/root\nTOKENIZERS_PARALLELISM=false\nTERM=xterm\n"},
		{"export -p", "declare -x HOME=\"/root\"\ndeclare -x PGPASSWORD=\"" + pgPass + "\"\ndeclare -x AWS_SECRET_ACCESS_KEY=\"a\\\"b c\"\n",
			"declare -x HOME=\"/root\"\ndeclare -x PGPASSWORD=\"[REDACTED]\"\ndeclare -x AWS_SECRET_ACCESS_KEY=\"[REDACTED]\"\n"},
		{"posix export -p", "export DB_PASSWORD='" + dbPass + "'\n", "export DB_PASSWORD='[REDACTED]'\n"},
		{"script line", "export API_TOKEN=" + dbPass + " && make\n", "export API_TOKEN=[REDACTED]\n"},
		{"flag", "run --password=" + dbPass + " --user=bob", "run --password=[REDACTED] --user=bob"},
		{"query", "GET /cb?state=1&access_token=" + dbPass + "&x=1", "GET /cb?state=1&access_token=[REDACTED]&x=1"},
		{"docker inspect", `"Env": ["PGPASSWORD=` + pgPass + `", "PATH=/bin"]`, `"Env": ["PGPASSWORD=[REDACTED]", "PATH=/bin"]`},
		{"database url", "DATABASE_URL=postgres://app:" + dbPass + "@db:5432/app\n", "DATABASE_URL=postgres://app:[REDACTED]@db:5432/app\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Redact(tt.in)); diff != "" {
				t.Errorf("Redact(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestSecretName(t *testing.T) {
	for _, name := range []string{"PGPASSWORD", "MYSQL_PWD", "R2_SECRET_ACCESS_KEY", "JWT_PRIVATE_KEY", "DB_PASS", "api_key",
		"API_KEY", "GITHUB_PAT", "HF_TOKEN", "OPENAI_API_KEY", "SECRET_KEY_BASE", "AZURE_CLIENT_SECRET", "SSH_PASSPHRASE",
		"GOOGLE_APPLICATION_CREDENTIALS", "db_password"} {
		if !SecretName(name) {
			t.Errorf("SecretName(%q) = false; want true", name)
		}
	}
	for _, name := range []string{"PWD", "OLDPWD", "PATH", "HOME", "TOKENIZERS_PARALLELISM", "SSH_AUTH_SOCK", "KEY",
		"AWS_ACCESS_KEY_ID", "PASSWORDLESS_LOGIN_URL", "TERM", ""} {
		if SecretName(name) {
			t.Errorf("SecretName(%q) = true; want false", name)
		}
	}
}

// TestRedactCredentials: Authorization credentials of any usual scheme
// and URL passwords are redacted (L5).
func TestRedactCredentials(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Authorization: Basic dXNlcjpwYXNz", "Authorization: Basic [REDACTED]"},
		{"> authorization: token 0123456789abcdef0123456789abcdef01234567\r\n", "> authorization: token [REDACTED]\r\n"},
		{"curl -H 'Authorization: token " + ghpToken + "'", "curl -H 'Authorization: token [REDACTED]'"},
		{`{"authorization":"0123456789abcdef0123"}`, `{"authorization":"[REDACTED]"}`},
		{"git clone https://x-access-token:" + dbPass + "@github.com/o/r.git", "git clone https://x-access-token:[REDACTED]@github.com/o/r.git"},
		{"mysql://root:p@ss:w0rd@[::1]:3306/db", "mysql://root:[REDACTED]@[::1]:3306/db"},
		{"redis://:" + dbPass + "@cache:6379", "redis://:[REDACTED]@cache:6379"},
	}
	for _, tt := range tests {
		if got := Redact(tt.in); got != tt.want {
			t.Errorf("Redact(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

// TestSecretAcrossForcedLineCut: a secret that straddles the forced cut of
// a long line with no blanks is redacted, in the output and in the spill
// file, whatever the pad before it and however the stream is split (L4).
func TestSecretAcrossForcedLineCut(t *testing.T) {
	secrets := map[string]string{
		"sk-ant": anthropicKey, "jwt": jwt, "ghp": ghpToken,
		"bearer": "Authorization: Bearer " + bearerToken + "x",
		"url":    "postgres://u:" + dbPass + "@h/d",
	}
	hidden := map[string]string{"sk-ant": "AbCdEfGh", "jwt": "SflKxwRJ", "ghp": "AbCdEfGh", "bearer": bearerToken, "url": dbPass}
	for name, secret := range secrets {
		for _, pad := range []int{65520, 65530, 65536 - 40, lineLimit - cutOverlap - 10, lineLimit - cutOverlap + 3, 131066, 3 * lineLimit} {
			in := strings.Repeat(".", pad) + secret + "\n" + strings.Repeat(".", 100)
			for _, chunk := range []int{1 << 20, 4096, 1000} {
				dir := t.TempDir()
				c := NewCapture(Options{MaxChars: 1000, SpillDir: dir})
				feed(c, in, chunk)
				res := c.Finish("")
				data, err := os.ReadFile(res.FullOutputPath)
				if err != nil {
					t.Fatalf("%s pad %d: spill file: %v", name, pad, err)
				}
				if strings.Contains(string(data), hidden[name]) || strings.Contains(res.Output, hidden[name]) {
					t.Fatalf("%s pad %d chunk %d: secret leaked across the forced cut", name, pad, chunk)
				}
				if !strings.Contains(string(data), Placeholder) || utf8.RuneCount(data) != res.TotalChars {
					t.Fatalf("%s pad %d chunk %d: spill holds %d chars, no placeholder? want %d chars", name, pad, chunk, utf8.RuneCount(data), res.TotalChars)
				}
				if want := Clean(in); string(data) != want {
					t.Fatalf("%s pad %d chunk %d: spill differs from Clean of the same input", name, pad, chunk)
				}
			}
		}
	}
}

// TestSecretLongerThanLineBuffer: a token longer than the line buffer is
// redacted whole, even though it must be passed on in pieces.
func TestSecretLongerThanLineBuffer(t *testing.T) {
	long := "sk-" + strings.Repeat("Ab3", 3*lineLimit/3)
	in := "x " + long + " tail\n"
	got := Clean(in)
	if got != "x sk-[REDACTED] tail" {
		t.Errorf("Clean of a %d-byte token = %q...", len(long), got[:min(len(got), 80)])
	}
}

// TestUnterminatedControlStringEndsAtNewline: an unterminated DCS, SOS, PM
// or APC string (7- or 8-bit) hides at most the rest of its line, and an
// over-long one without a newline is abandoned (L6).
func TestUnterminatedControlStringEndsAtNewline(t *testing.T) {
	for _, intro := range []string{"\x1bP", "\x1bX", "\x1b^", "\x1b_", "\x1b]", "\u0090", "\u0098", "\u009e", "\u009f", "\x1bP1;2|"} {
		in := "before\n" + intro + "hidden; echo\nAFTER line 1\nls: cannot access '/nonexistent-file'\nAFTER line 3\n"
		want := "before\n\nAFTER line 1\nls: cannot access '/nonexistent-file'\nAFTER line 3"
		if got := Clean(in); got != want {
			t.Errorf("intro %q: Clean = %q; want %q", intro, got, want)
		}
		for cut := 1; cut < len(in); cut++ {
			if got := capture(t, in[:cut], in[cut:]); got != want {
				t.Fatalf("intro %q split at %d: got %q", intro, cut, got)
			}
		}
		long := "a\n" + intro + strings.Repeat("z", maxControlString+10) + "VISIBLE"
		if got := Clean(long); !strings.HasSuffix(got, "VISIBLE") || !strings.HasPrefix(got, "a\n") {
			t.Errorf("intro %q: an over-long string with no newline hid the text after it", intro)
		}
	}
}

// TestSpillFileByteCap: a spill file is capped in bytes as well as in
// characters: 6 M four-byte characters make a file of at most
// SpillMaxBytes plus its closing note (L16).
func TestSpillFileByteCap(t *testing.T) {
	dir := t.TempDir()
	c := NewCapture(Options{MaxChars: 1000, SpillDir: dir})
	chunk := []byte(strings.Repeat("\U0001F600", 16<<10))
	for n := 0; n < 6_000_000; n += 16 << 10 {
		c.Write(chunk)
	}
	res := c.Finish("")
	fi, err := os.Stat(res.FullOutputPath)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > DefaultSpillMaxBytes+200 {
		t.Errorf("spill file holds %d bytes; want at most %d plus the note", fi.Size(), DefaultSpillMaxBytes)
	}
	data, _ := os.ReadFile(res.FullOutputPath)
	if !utf8.Valid(data) || !strings.Contains(string(data), "[FULL OUTPUT CUT - this file holds the first 2,097,152 of") {
		t.Errorf("spill file is not whole characters plus the cut note: ...%q", data[max(0, len(data)-120):])
	}
}

// TestSpillDirBudget: the spill files of one directory are kept within a
// total budget, the oldest removed first and the newest always kept, and
// files that are not spill files are never touched (L16).
func TestSpillDirBudget(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(other, make([]byte, 50_000), 0o600); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for i := range 12 {
		c := NewCapture(Options{MaxChars: 100, SpillDir: dir, SpillDirMaxBytes: 100_000})
		feed(c, strings.Repeat(fmt.Sprintf("%d", i%10), 20_000), 4096)
		res := c.Finish("")
		if res.FullOutputPath == "" {
			t.Fatalf("spill %d: %+v", i, res)
		}
		// Distinct, increasing modification times, as if written apart.
		mt := time.Now().Add(time.Duration(i-20) * time.Minute)
		if err := os.Chtimes(res.FullOutputPath, mt, mt); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, res.FullOutputPath)
	}
	var total int64
	for _, p := range spillFiles(t, dir) {
		if p == other {
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		total += fi.Size()
	}
	if total > 100_000 {
		t.Errorf("spill files hold %d bytes; budget 100000", total)
	}
	for i, p := range paths {
		_, err := os.Stat(p)
		if exists, want := err == nil, i >= len(paths)-5; exists != want {
			t.Errorf("spill %d of %d: exists=%v; want %v (oldest evicted first)", i, len(paths), exists, want)
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("a file that is not a spill file was removed: %v", err)
	}
}

// TestSpillPruneIsPerDirectory: every directory is pruned when a spill
// file is finished in it, not only the first one a process uses.
func TestSpillPruneIsPerDirectory(t *testing.T) {
	old := time.Now().Add(-8 * 24 * time.Hour)
	for range 2 {
		dir := t.TempDir()
		stale := filepath.Join(dir, "berth-output-stale.txt")
		if err := os.WriteFile(stale, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(stale, old, old); err != nil {
			t.Fatal(err)
		}
		c := NewCapture(Options{MaxChars: 100, SpillDir: dir})
		feed(c, runes(1000), 100)
		c.Finish("")
		if _, err := os.Stat(stale); err == nil {
			t.Errorf("a week-old spill file in %s was not pruned", dir)
		}
	}
}
