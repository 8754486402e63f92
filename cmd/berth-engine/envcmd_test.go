package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
)

// runBerth runs the built berth with env added to a private home and
// returns stdout, stderr and the exit status.
func runBerth(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(berthBin, args...)
	cmd.Env = append(os.Environ(), append([]string{"BERTH_CONFIG=", "TERMINAL_ENV=", "BERTH_NO_DAEMON=1"}, env...)...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("berth %v: %v", args, err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// berth env rm removes a key where berth env ls found it, whatever
// backend is configured; a backend that could not be asked is one line on
// stderr, once, and not an error unless it is the configured one.
func TestEnvRmFindsTheKeyWhereLsFoundIt(t *testing.T) {
	dockerenv.Require(t)
	home := t.TempDir()
	key := "ux-" + strings.ReplaceAll(strings.ToLower(t.Name()), "/", "-")[:12]
	env := []string{"BERTH_HOME=" + home, "TERMINAL_DOCKER_IMAGE=" + dockerenv.Image(t), "TERMINAL_CONTAINER_PERSISTENT=true",
		// Unconfigured cloud backends: asked, and refused for want of
		// credentials.
		"DAYTONA_API_KEY=", "MODAL_TOKEN_ID=", "MODAL_TOKEN_SECRET="}
	if _, errs, code := runBerth(t, env, "exec", "--backend", "docker", "--task", key, "--", "true"); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errs)
	}
	t.Cleanup(func() { runBerth(t, env, "env", "rm", "--backend", "docker", key) })
	out, errs, code := runBerth(t, env, "env", "ls")
	if code != 0 || !strings.Contains(out, "docker") || !strings.Contains(out, key) {
		t.Fatalf("env ls: exit %d\n%s\n%s", code, out, errs)
	}
	for _, l := range strings.Split(strings.TrimSpace(errs), "\n") {
		if l == "" {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(l, "berth: "), " ")
		if strings.Count(errs, "berth: "+name+" ") != 1 || strings.Contains(l, name+": "+name) || strings.Contains(l, name+" backend:") {
			t.Errorf("env ls stderr repeats %s:\n%s", name, errs)
		}
	}
	// The configured backend is local, which keeps nothing: rm finds the
	// key on docker.
	out, errs, code = runBerth(t, env, "env", "rm", key)
	if code != 0 || !strings.Contains(out, `removed docker environment "`+key+`"`) {
		t.Fatalf("env rm: exit %d\n%s\n%s", code, out, errs)
	}
	if out, _, _ = runBerth(t, env, "env", "ls"); strings.Contains(out, key) {
		t.Errorf("still listed after rm:\n%s", out)
	}
	if _, errs, code = runBerth(t, env, "env", "rm", key); code == 0 || !strings.Contains(errs, `no environment "`+key+`"`) {
		t.Errorf("rm of a key that is gone: exit %d: %s", code, errs)
	}
}

// TestEnvLsIDs: berth env ls shows a pod's namespace/name, a sandbox's and
// an instance's id whole (a cut one is no id at all: "default/bert"), and a
// container's digest cut as docker shows it, longer where two listed
// digests share their first 12 digits.
func TestEnvLsIDs(t *testing.T) {
	hexA := "0123456789ab" + strings.Repeat("c", 52)
	hexB := "0123456789ab" + "d" + strings.Repeat("e", 51)
	hexC := "fedcba987654" + strings.Repeat("0", 52)
	envs := []backend.EnvInfo{
		{Backend: "kubernetes", ID: "default/berth-build-1a2b3c4d"},
		{Backend: "kubernetes", ID: "berth-tests-namespace/berth-default-deadbeef"},
		{Backend: "modal", ID: "sb-AbCdEfGhIjKlMnOpQrStUv"},
		{Backend: "modal", ID: "im-AbCdEfGhIjKlMnOpQrStUv"},
		{Backend: "daytona", ID: "6f1c2a9e-3b7d-4e0a-9c51-2d8f4b6a7e10"},
		{Backend: "singularity", ID: "berth-0123456789abcdef"},
		{Backend: "docker", ID: hexA},
		{Backend: "docker", ID: hexB},
		{Backend: "docker", ID: hexC},
	}
	want := []string{
		"default/berth-build-1a2b3c4d",
		"berth-tests-namespace/berth-default-deadbeef",
		"sb-AbCdEfGhIjKlMnOpQrStUv",
		"im-AbCdEfGhIjKlMnOpQrStUv",
		"6f1c2a9e-3b7d-4e0a-9c51-2d8f4b6a7e10",
		"berth-0123456789abcdef",
		"0123456789abc",
		"0123456789abd",
		"fedcba987654",
	}
	got := shortIDs(envs)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s id %q shown as %q, want %q", envs[i].Backend, envs[i].ID, got[i], want[i])
		}
	}
	// Every shown id is the whole id or a prefix no other listed id shares.
	for i, id := range got {
		for j, e := range envs {
			if i != j && strings.HasPrefix(e.ID, id) {
				t.Errorf("shown id %q of %s is also a prefix of %s", id, envs[i].ID, e.ID)
			}
		}
	}
}

// TestEnvLsPoolKey: an unclaimed pooled environment has no key; berth env
// ls names its pool instead, and a claimed one shows its key.
func TestEnvLsPoolKey(t *testing.T) {
	for _, c := range []struct {
		e    backend.EnvInfo
		want string
	}{
		{backend.EnvInfo{Key: "build"}, "build"},
		{backend.EnvInfo{Pool: "0123456789abcdef0123"}, "(pool 0123456789ab)"},
		{backend.EnvInfo{Pool: "short"}, "(pool short)"},
	} {
		if got := keyColumn(c.e); got != c.want {
			t.Errorf("keyColumn(%+v) = %q, want %q", c.e, got, c.want)
		}
	}
}
