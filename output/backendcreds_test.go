package output

import (
	"strings"
	"testing"
)

// Credentials of the backends berth supports, as their own tools write
// them (fake values). R9: the redactor missed the TOML pairs of
// ~/.modal.toml, kubeconfig's inline key, certificate and token, and
// docker's config.json "auth".
const (
	modalTokenID     = "ak-4Tq8ZpLm2Rv9Xs1Ny6Kb3Wd"
	modalTokenSecret = "as-Jh7Gf5Ds3Aq1Zx9Cv8Bn6Mk4Lp2"
	daytonaKey       = "dtn_7f3a9c1e5b2d8f4a6c0e9b1d3f5a7c2e4b6d8f0a1c3e5b7d9f2a4c6e8b0d1f3a"
	kubeClientKey    = "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpNSUlFb3dJQkFBS0NBUUVBdTFTVTFMZlZMUEhDb3pNeEgyTW80bGdPRWVQek5tMHRSZ2VMZXpWNmZmQXQwZ3VuClZUTHc3"
	kubeClientCert   = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSURJVENDQWdtZ0F3SUJBZ0lJWnJ6NmZZQ0VuNDh3RFFZSktvWklodmNOQVFFTEJRQXdGVEVUTUJFR0ExVUUKQXhNS2EzVmlaWEp1WlhSbGN6"
	kubeCAData       = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUMvakNDQWVhZ0F3SUJBZ0lCQURBTkJna3Foa2lHOXcwQkFRc0ZBREFWTVJNd0VRWURWUVFERXdwcmRXSmwKY201bGRHVnpNQjRY"
	kubeToken        = "k8s-static-token-0123456789abcdefABCDEF"
	kubeOIDCRefresh  = "rt-0123456789abcdefghijklmnop"
	dockerAuth       = "dXNlcm5hbWU6cGFzc3dvcmQtZmFrZS0wMTIz"
	dockerIdentity   = "idt-9f8e7d6c5b4a3928170fedcba"
)

// ModalTOML is ~/.modal.toml as `modal token new` writes it.
const ModalTOML = `[default]
token_id = "` + modalTokenID + `"
token_secret = "` + modalTokenSecret + `"
active = true

[work]
token_id = '` + modalTokenID + `'
token_secret = ` + modalTokenSecret + `
`

// Kubeconfig is a kubeconfig with an inline client key and certificate,
// a static token and an OIDC auth provider.
const Kubeconfig = `apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: ` + kubeCAData + `
    server: https://127.0.0.1:6443
  name: local
users:
- name: admin
  user:
    client-certificate-data: ` + kubeClientCert + `
    client-key-data: ` + kubeClientKey + `
- name: bot
  user:
    token: ` + kubeToken + `
- name: oidc
  user:
    auth-provider:
      config:
        client-id: kubernetes
        client-secret: "` + kubeOIDCRefresh + `-cs"
        id-token: ` + kubeOIDCRefresh + `-id
        refresh-token: ` + kubeOIDCRefresh + `
      name: oidc
- name: files
  user:
    client-certificate: /home/dev/.minikube/profiles/minikube/client.crt
    client-key: /home/dev/.minikube/profiles/minikube/client.key
contexts:
- context: {cluster: local, user: admin}
  name: local
current-context: local
`

// DockerConfig is ~/.docker/config.json after docker login to two
// registries (one with an identity token), pretty-printed as docker does.
const DockerConfig = `{
	"auths": {
		"https://index.docker.io/v1/": {
			"auth": "` + dockerAuth + `"
		},
		"registry.example.com": {
			"auth": "` + dockerAuth + `",
			"identitytoken": "` + dockerIdentity + `"
		}
	},
	"credsStore": "desktop"
}`

// DockerConfigCompact is the same on one line, as jq -c prints it.
const DockerConfigCompact = `{"auths":{"registry.example.com":{"auth":"` + dockerAuth + `","identitytoken":"` + dockerIdentity + `"}},"credsStore":"desktop"}`

// EnvForms are the backends' variables and CLI flags.
const EnvForms = `MODAL_TOKEN_ID=` + modalTokenID + `
MODAL_TOKEN_SECRET=` + modalTokenSecret + `
DAYTONA_API_KEY=` + daytonaKey + `
DAYTONA_API_URL=https://app.daytona.io/api
$ modal token set --token-id ` + modalTokenID + ` --token-secret ` + modalTokenSecret + `
$ curl -H "Authorization: Bearer ` + daytonaKey + `" https://app.daytona.io/api/sandbox
key ` + daytonaKey + ` printed bare
`

// backendSecrets are the values none of the texts above may show.
var backendSecrets = []string{modalTokenID, modalTokenSecret, daytonaKey, kubeClientKey, kubeClientCert, kubeToken,
	kubeOIDCRefresh, dockerAuth, dockerIdentity}

// TestRedactBackendCredentialFiles (R9): every credential format of a
// backend berth supports is redacted in the files that hold it, and what
// is not a secret there stays readable (the CA certificate, paths, the
// server, the credential store's name).
func TestRedactBackendCredentialFiles(t *testing.T) {
	for name, text := range map[string]string{
		"modal.toml": ModalTOML, "kubeconfig": Kubeconfig, "docker config.json": DockerConfig,
		"docker config.json, compact": DockerConfigCompact, "variables and flags": EnvForms,
	} {
		t.Run(name, func(t *testing.T) {
			got := Redact(text)
			for _, s := range backendSecrets {
				if strings.Contains(got, s) {
					t.Errorf("%s shows %q:\n%s", name, s, got)
				}
			}
			if strings.Count(got, Placeholder) == 0 {
				t.Errorf("nothing redacted in %s", name)
			}
			for _, keep := range []string{kubeCAData, "server: https://127.0.0.1:6443", "client-key: /home/dev/.minikube/profiles/minikube/client.key",
				"client-id: kubernetes", `"credsStore": "desktop"`, `"credsStore":"desktop"`, "active = true", "DAYTONA_API_URL=https://app.daytona.io/api"} {
				if strings.Contains(text, keep) && !strings.Contains(got, keep) {
					t.Errorf("%s: %q was redacted; it is no secret:\n%s", name, keep, got)
				}
			}
		})
	}
	// The public prefixes stay, as for the other shapes.
	for in, want := range map[string]string{
		`token_secret = "` + modalTokenSecret + `"`: `token_secret = "as-[REDACTED]"`,
		"token_id = " + modalTokenID:                "token_id = ak-[REDACTED]",
		"    client-key-data: " + kubeClientKey:     "    client-key-data: [REDACTED]",
		`"auth":"` + dockerAuth + `"`:               `"auth":"[REDACTED]"`,
		"DAYTONA_API_KEY=" + daytonaKey:             "DAYTONA_API_KEY=dtn_[REDACTED]",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q; want %q", in, got, want)
		}
	}
}

// TestRedactLeavesConfigLookAlikes: keys and words that look like the
// credential forms but hold none stay as they are.
func TestRedactLeavesConfigLookAlikes(t *testing.T) {
	for _, in := range []string{
		"image: python:3.12-slim\nkey: value\nname = \"berth\"\nauth: true\ntoken: null\npassword: ~\n",
		"Token: the one you made yesterday",
		"auth: see the docs for details",
		"    client-certificate: /home/dev/.kube/client.crt",
		"    certificate-authority-data: " + kubeCAData,
		`{"auths": {}, "credsStore": "osxkeychain"}`,
		`"auth": {"type": "oauth"}`,
		"keep the file as-is; ak-47 and as-of-today are words",
		"alias-0123456789abcdefghijkl task-ak-0123456789abcdefghij",
		"as-0123456789abcdef-0123 is a uuid-like id",
		"dtn_short",
		"x = 1\ny = 2 # a = b\ncount = 3",
		"12:30:45 INFO file.go:12: done",
		"token_count: 1234\ntokens: 12",
	} {
		if got := Redact(in); got != in {
			t.Errorf("Redact(%q) = %q; want unchanged", in, got)
		}
	}
}
