package manager_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/a55dbaac/berth/terminal"
)

// TestBackendCredentialFilesRedacted (R9): the credential files of the
// backends berth supports — ~/.modal.toml, a kubeconfig with an inline
// key, docker's config.json — show no secret through read_file or a cat
// in the terminal, as the review found them shown verbatim.
func TestBackendCredentialFilesRedacted(t *testing.T) {
	const (
		tokenID     = "ak-4Tq8ZpLm2Rv9Xs1Ny6Kb3Wd"
		tokenSecret = "as-Jh7Gf5Ds3Aq1Zx9Cv8Bn6Mk4Lp2"
		clientKey   = "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpNSUlFb3dJQkFBS0NBUUVBdTFTVTFMZlZMUEhD"
		clientCert  = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSURJVENDQWdtZ0F3SUJBZ0lJWnJ6NmZZQ0VuNDh3"
		kubeToken   = "k8s-static-token-0123456789abcdefABCDEF"
		dockerAuth  = "dXNlcm5hbWU6cGFzc3dvcmQtZmFrZS0wMTIz"
		identity    = "idt-9f8e7d6c5b4a3928170fedcba"
	)
	files := map[string]string{
		".modal.toml": "[default]\ntoken_id = \"" + tokenID + "\"\ntoken_secret = \"" + tokenSecret + "\"\nactive = true\n",
		"kubeconfig": "apiVersion: v1\nclusters:\n- cluster:\n    server: https://127.0.0.1:6443\n  name: local\nusers:\n- name: admin\n  user:\n" +
			"    client-certificate-data: " + clientCert + "\n    client-key-data: " + clientKey + "\n- name: bot\n  user:\n    token: " + kubeToken + "\n",
		"config.json": "{\n\t\"auths\": {\n\t\t\"registry.example.com\": {\n\t\t\t\"auth\": \"" + dockerAuth + "\",\n\t\t\t\"identitytoken\": \"" + identity + "\"\n\t\t}\n\t}\n}\n",
	}
	secrets := []string{tokenID, tokenSecret, clientKey, clientCert, kubeToken, dockerAuth, identity}
	m, _, _ := setup(t, "", nil)
	dir := t.TempDir()
	var names []string
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		names = append(names, p)
		res, err := m.ReadFile(context.Background(), "k", p, 0, 0)
		if err != nil {
			t.Fatalf("read_file %s: %v", name, err)
		}
		for _, s := range secrets {
			if strings.Contains(res.Content, s) {
				t.Errorf("read_file %s shows %q:\n%s", name, s, res.Content)
			}
		}
		if !strings.Contains(res.Content, "[REDACTED]") {
			t.Errorf("read_file %s redacted nothing:\n%s", name, res.Content)
		}
	}
	r := m.Run(context.Background(), "k", terminal.Request{Command: "cat " + strings.Join(names, " ")})
	if r.Error != nil || !strings.Contains(r.Output, "server: https://127.0.0.1:6443") {
		t.Fatalf("cat: %+v", r)
	}
	for _, s := range secrets {
		if strings.Contains(r.Output, s) {
			t.Errorf("cat shows %q:\n%s", s, r.Output)
		}
	}
}
