package ssh

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

var discardLog = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestWildcardMatch(t *testing.T) {
	for _, tc := range []struct {
		pat, s string
		want   bool
	}{
		{"*", "anything", true}, {"gpu-?", "gpu-1", true}, {"gpu-?", "gpu-12", false},
		{"*.example.com", "a.b.example.com", true}, {"*.example.com", "example.com", false},
		{"a*b*c", "axxbyyc", true}, {"a*b*c", "axxbyy", false}, {"", "", true}, {"?", "", false},
	} {
		if got := wildcardMatch(tc.pat, tc.s); got != tc.want {
			t.Errorf("wildcardMatch(%q, %q) = %v", tc.pat, tc.s, got)
		}
	}
	if !matchHostPatterns("db1", []string{"web*,db?"}) || matchHostPatterns("db1", []string{"db*", "!db1"}) {
		t.Error("matchHostPatterns: lists or negation wrong")
	}
}

func TestReadSSHConfig(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "extra.conf"), "Host box\n  Port 2200\n  IdentityFile ~/.ssh/from-include\n")
	writeFile(t, filepath.Join(dir, "config"), `User first-wins
Include extra.conf
Host BOX
  HostName %h.internal
  User later
  Port 1
  IdentityFile %d/.ssh/id_%r
  UserKnownHostsFile ~/.ssh/kh1 ~/.ssh/kh2
  ProxyJump bastion
Match host box exec "true"
  Port 3
`)
	hs, err := readSSHConfig(filepath.Join(dir, "config"), dir, "box", discardLog)
	if err != nil {
		t.Fatal(err)
	}
	if hs.get("user") != "first-wins" || hs.get("port") != "2200" || hs.get("hostname") != "%h.internal" {
		t.Errorf("values: %v", hs.values)
	}
	if len(hs.identityFiles) != 2 || hs.identityFiles[0] != "~/.ssh/from-include" || len(hs.knownHosts) != 2 {
		t.Errorf("identity files %v, known hosts %v", hs.identityFiles, hs.knownHosts)
	}
	if len(hs.unsupported) != 0 || hs.get("proxyjump") != "bastion" {
		t.Errorf("unsupported: %v, proxyjump %q", hs.unsupported, hs.get("proxyjump"))
	}
	got, err := expandTokens("%d/.ssh/id_%r-%h-%p-%%", map[byte]string{'d': "/home/u", 'r': "root", 'h': "box", 'p': "22"})
	if err != nil || got != "/home/u/.ssh/id_root-box-22-%" {
		t.Errorf("expandTokens = %q, %v", got, err)
	}
	if _, err := expandTokens("%C", nil); err == nil {
		t.Error("unknown token accepted")
	}
}

func TestKnownKeyAlgorithmsPreferPinnedType(t *testing.T) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := gossh.NewPublicKey(&priv.PublicKey)
	kh := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(kh, []byte(knownhosts.Line([]string{"[10.0.0.1]:2222"}, pub)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hk, err := newHostKeyChecker([]string{kh}, false, false, discardLog)
	if err != nil {
		t.Fatal(err)
	}
	algos := hk.knownKeyAlgorithms("10.0.0.1:2222")
	if len(algos) < 2 || algos[0] != gossh.KeyAlgoECDSA256 {
		t.Fatalf("algorithms %v, want %s first", algos, gossh.KeyAlgoECDSA256)
	}
	if got := hk.knownKeyAlgorithms("10.0.0.2:22"); got != nil {
		t.Fatalf("unknown host: %v, want nil", got)
	}
}
