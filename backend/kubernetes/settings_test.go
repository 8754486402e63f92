package kubernetes

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
)

// R8: the hash that decides whether a pod is replaced (AnnConfig, on the
// pod) covers what shapes the pod, never a secret: two configurations
// that differ only in a forwarded secret's value, or a docker_env value,
// give the same hash, and no secret value is anywhere in the pod object
// (annotations, labels, env, args).
func TestConfigHashHoldsNoSecret(t *testing.T) {
	const forwarded, inline = "sk-proj-R8FORWARDED0123456789abcdef", "R8INLINEVALUE-s3cr3t"
	opts := func(forwardedValue, inlineValue string) backend.Options {
		cfg := config.Default().Terminal
		cfg.Backend = Name
		mustSet(&cfg, keyImage, "python:3.12-slim")
		mustSet(&cfg, keyNamespace, "ns")
		mustSet(&cfg, keyDockerEnv, map[string]string{"TOKEN": inlineValue})
		cfg.DockerForwardEnv = []string{"OPENAI_API_KEY"}
		cfg.EnvPassthrough = []string{"MY_SERVICE_TOKEN"}
		return backend.Options{Key: "k", Config: cfg, Getenv: func(k string) string {
			switch k {
			case "OPENAI_API_KEY":
				return forwardedValue
			case "MY_SERVICE_TOKEN":
				return forwardedValue + "-2"
			}
			return ""
		}}
	}
	a, err := readSettings(opts(forwarded, inline))
	if err != nil {
		t.Fatal(err)
	}
	if a.SessionEnv["OPENAI_API_KEY"] != forwarded || a.SessionEnv["TOKEN"] != inline {
		t.Fatalf("the session's variables %v do not hold the secrets: the test proves nothing", a.SessionEnv)
	}
	for _, other := range []backend.Options{opts("sk-proj-R8OTHER9876543210fedcba", inline), opts(forwarded, "another-inline-value")} {
		b, err := readSettings(other)
		if err != nil {
			t.Fatal(err)
		}
		if a.hash != b.hash {
			t.Errorf("config hash %s vs %s for configurations that differ only in a secret's value: the hash covers it", a.hash, b.hash)
		}
	}
	shaped, err := readSettings(func() backend.Options {
		o := opts(forwarded, inline)
		mustSet(&o.Config, keyImage, "python:3.13-slim")
		return o
	}())
	if err != nil {
		t.Fatal(err)
	}
	if shaped.hash == a.hash {
		t.Errorf("another image gives the same config hash %s: the hash no longer covers the pod's shape", a.hash)
	}

	pod := (&Backend{set: a, c: &cluster{namespace: "ns"}}).podObject()
	text, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{forwarded, inline, forwarded + "-2"} {
		if strings.Contains(string(text), v) {
			t.Errorf("the pod object holds the secret value %q:\n%s", v, text)
		}
	}
}
