package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
)

// doctor lists every registered backend, including one it has never heard
// of, runs its check, and shows the configured backend's declared keys.
func TestDoctorListsRegisteredBackend(t *testing.T) {
	backend.Register(backend.Registration{
		Name:        "doctortest",
		Description: "a backend only this test registers",
		New: func(context.Context, backend.Options) (backend.Backend, error) {
			return nil, errors.New("not for running")
		},
		Doctor: func(_ context.Context, opts backend.Options) backend.Fingerprint {
			return backend.Fingerprint{Usable: opts.Config.Int("doctortest_level") > 0, Summary: "doctortest answers",
				Details: []string{"level " + opts.Config.String("doctortest_name")}}
		},
		Keys: []config.Key{
			{Name: "doctortest_level", Default: 1, Help: "how hard to try"},
			{Name: "doctortest_name", Default: "plain", Help: "a name"},
		},
	})
	env := map[string]string{"BERTH_HOME": t.TempDir(), "TERMINAL_DOCTORTEST_LEVEL": "5"}
	cfg, err := config.Load(config.LoadOptions{Getenv: func(k string) string { return env[k] }, Flags: map[string]string{"backend": "doctortest"}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if ok := doctor(context.Background(), &out, cfg); !ok {
		t.Errorf("doctor reported the configured backend unusable:\n%s", out.String())
	}
	text := out.String()
	for _, want := range []string{
		"backend: doctortest (from flag)",
		"* ✓ doctortest   doctortest answers",
		"level plain",
		"doctortest settings:\n  doctortest_level = 5 (env:TERMINAL_DOCTORTEST_LEVEL)\n      how hard to try\n  doctortest_name = plain (default)\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, text)
		}
	}
	_, missing := config.BackendNames()
	for _, name := range append(backend.Names(), missing...) {
		if !strings.Contains(text, " "+name+" ") {
			t.Errorf("doctor output lacks backend %s:\n%s", name, text)
		}
	}
	for _, name := range missing {
		if !strings.Contains(text, "✗ "+name+strings.Repeat(" ", 13-len(name))+"not built into this berth") {
			t.Errorf("doctor does not say %s is not built in:\n%s", name, text)
		}
	}

	// An unusable configured backend makes doctor fail.
	env["TERMINAL_DOCTORTEST_LEVEL"] = "0"
	cfg, err = config.Load(config.LoadOptions{Getenv: func(k string) string { return env[k] }, Flags: map[string]string{"backend": "doctortest"}})
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if doctor(context.Background(), &out, cfg) {
		t.Errorf("doctor passed with an unusable backend:\n%s", out.String())
	}
}

// The berth binary: declared keys are listed, set in the file and read back
// like shared ones, and the --backend help comes from the registry.
func TestConfigDeclaredKeys(t *testing.T) {
	out, _, code, _ := berth(t, "", "config", "keys")
	for _, want := range []string{
		"terminal.timeout  [shared]  TERMINAL_TIMEOUT  default 180\n",
		"terminal.docker_image  [docker]  TERMINAL_DOCKER_IMAGE  default " + config.DefaultImage + "\n",
		"terminal.ssh_port  [ssh]  TERMINAL_SSH_PORT  default 22\n",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("config keys: exit %d, lacks %q:\n%s", code, want, out)
		}
	}

	cfg := t.TempDir() + "/config.yaml"
	_, errs, code, _ := berth(t, "", "config", "--config", cfg, "set", "docker_volumes", `["/a:/b"]`)
	if code != 0 {
		t.Fatalf("set: exit %d %s", code, errs)
	}
	if out, _, _, _ := berth(t, "", "config", "--config", cfg, "get", "terminal.docker_volumes"); out != `["/a:/b"]`+"\n" {
		t.Errorf("get: %q", out)
	}
	_, errs, code, _ = berth(t, "", "config", "--config", cfg, "set", "ssh_port", "0")
	if code == 0 || !strings.Contains(errs, `terminal.ssh_port "0": must be a whole number from 1 to 65535`) {
		t.Errorf("bad ssh_port accepted: exit %d %q", code, errs)
	}

	// The --backend help names every backend of the registry (the binary
	// lacks the one this test process registered) and the missing ones.
	out, _, _, _ = berth(t, "", "doctor", "--help")
	_, flagLine, _ := strings.Cut(out, "--backend string")
	flagLine, _, _ = strings.Cut(flagLine, "\n")
	builtIn, missing := config.BackendNames()
	for _, name := range builtIn {
		if name != "doctortest" && !strings.Contains(flagLine, name) {
			t.Errorf("--backend help lacks %s: %q", name, flagLine)
		}
	}
	if len(missing) > 0 && !strings.Contains(flagLine, "(not in this build: "+strings.Join(missing, ", ")+")") {
		t.Errorf("--backend help lacks the missing backends %v: %q", missing, flagLine)
	}
}

// Each thing a backend's check says is one line, once: no line of berth
// doctor repeats a long run of another's words (a summary that holds its
// own fix, a detail that restates the summary), no detail or fix says its
// backend's summary again, however short (kubernetes once printed "no
// cluster configured" as its summary and again at the start of its
// detail), no line restates the backend's name before its message, and the
// report ends with a newline.
// Here with no credentials for the cloud backends and no Apptainer, where
// each has something to say.
func TestDoctorSaysEachThingOnce(t *testing.T) {
	tmp := t.TempDir()
	env := map[string]string{"BERTH_HOME": tmp + "/berth", "HOME": tmp, "PATH": "/nonexistent"}
	cfg, err := config.Load(config.LoadOptions{Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	doctor(context.Background(), &out, cfg)
	text := strings.ReplaceAll(out.String(), tmp, "~")
	if !strings.HasSuffix(text, "\n") {
		t.Errorf("doctor output does not end with a newline: %q", text[max(0, len(text)-80):])
	}
	// The backends' reports, not the settings' help that follows them.
	report, _, _ := strings.Cut(text, " settings:\n")
	lines := strings.Split(strings.TrimSpace(report), "\n")
	for i, a := range lines {
		a = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(a), "fix:"))
		for _, name := range backend.Names() {
			if strings.Contains(a, " "+name+" ") && (strings.Contains(a, name+": ") || strings.Contains(a, name+" backend: ")) {
				t.Errorf("line %d restates the backend's name: %q", i, a)
			}
		}
		for j := i + 1; j < len(lines); j++ {
			b := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(lines[j]), "fix:"))
			if common := longestCommon(a, b); len(common) >= 40 {
				t.Errorf("lines %d and %d both say %q:\n%s\n%s", i, j, common, lines[i], lines[j])
			}
		}
	}
	head := regexp.MustCompile(`^[* ] [✓✗?] (\S+) +(.*)$`) // "* ✓ name   summary"
	name, summary, heads := "", "", 0
	for _, line := range lines {
		if m := head.FindStringSubmatch(line); m != nil {
			name, summary = m[1], m[2]
			heads++
			continue
		}
		if said := strings.TrimSpace(line); summary != "" && strings.Contains(said, summary) {
			t.Errorf("%s: a line says its summary %q again: %q", name, summary, said)
		}
	}
	if heads < len(backend.Names()) {
		t.Errorf("found %d backend lines for %d backends in:\n%s", heads, len(backend.Names()), report)
	}
}

// TestTidyFingerprintMergesTheSummary: a detail that starts with the
// summary and says more takes the summary's place.
func TestTidyFingerprintMergesTheSummary(t *testing.T) {
	s, fix, details := tidyFingerprint("kubernetes", backend.Fingerprint{Summary: "no cluster configured",
		Details: []string{"kubernetes: no cluster configured: no kubeconfig at ~/.kube/config", "another fact"}, Fix: "set KUBECONFIG"})
	if s != "no cluster configured: no kubeconfig at ~/.kube/config" || fix != "set KUBECONFIG" || strings.Join(details, "|") != "another fact" {
		t.Errorf("tidyFingerprint: summary %q, fix %q, details %q; want the detail that starts with the summary in its place", s, fix, details)
	}
}

// longestCommon returns the longest substring a and b share.
func longestCommon(a, b string) string {
	best := ""
	prev := make([]int, len(b)+1)
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		for j := 1; j <= len(b); j++ {
			if a[i-1] == b[j-1] {
				cur[j] = prev[j-1] + 1
				if cur[j] > len(best) {
					best = a[i-cur[j] : i]
				}
			}
		}
		prev = cur
	}
	return best
}
