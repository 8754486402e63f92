package daemon

import (
	"context"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/local"
	"github.com/a55dbaac/berth/daemon/wire"
)

// probe is a backend for these tests: the local one, built after reading
// a credential, PROBE_TOKEN, through Options.Getenv as a remote backend
// reads its API key.
var probe struct {
	mu    sync.Mutex
	token []string
}

func init() {
	backend.Register(backend.Registration{
		Name: "envprobe", Description: "local, after reading PROBE_TOKEN (tests)",
		New: func(ctx context.Context, opts backend.Options) (backend.Backend, error) {
			probe.mu.Lock()
			probe.token = append(probe.token, opts.Getenv("PROBE_TOKEN"))
			probe.mu.Unlock()
			return local.New(opts)
		},
	})
}

// TestCallerSendsOnlyWhatIsRead: a caller sends only what configuration
// loading reads; the daemon asks for a variable it reads while the call
// runs (a backend's credential, an env_passthrough name), and never gets
// the ones nobody reads, such as a provider key in the caller's
// environment.
func TestCallerSendsOnlyWhatIsRead(t *testing.T) {
	home, _ := serve(t, 0)
	environ := []string{
		"BERTH_HOME=" + home, "HOME=" + os.Getenv("HOME"), "PATH=" + os.Getenv("PATH"),
		"TERMINAL_ENV=envprobe", "TERMINAL_ENV_PASSTHROUGH=[\"MY_TOOL_VAR\"]",
		"PROBE_TOKEN=probe-secret", "MY_TOOL_VAR=tool", "OPENAI_API_KEY=sk-proj-NOBODYREADSTHIS",
	}
	env, names := wire.CallerEnv(environ)
	for _, kv := range env {
		if strings.Contains(kv, "secret") || strings.Contains(kv, "NOBODYREADS") || strings.HasPrefix(kv, "PATH=") {
			t.Errorf("sent with the request: %s", kv)
		}
	}
	if !slices.Contains(env, "TERMINAL_ENV=envprobe") || !slices.Contains(env, "BERTH_HOME="+home) {
		t.Fatalf("request env %q lacks what configuration loading reads", env)
	}
	values := map[string]string{}
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		values[k] = v
	}
	var asked []string
	getenv := func(ns []string) []string {
		asked = append(asked, ns...)
		var out []string
		for _, n := range ns {
			if v, ok := values[n]; ok {
				out = append(out, n+"="+v)
			}
		}
		return out
	}
	c, err := wire.Dial(context.Background(), wire.DialOptions{Home: home, NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wd, _ := os.Getwd()
	r, err := c.Run(context.Background(), wire.Request{Op: wire.OpRun, Inputs: wire.Inputs{Env: env, Names: names, Cwd: wd}, Key: "p", Command: "echo ok"}, wire.RunOptions{Getenv: getenv})
	if err != nil || r.Exit != 0 {
		t.Fatalf("run: %+v, %v", r, err)
	}
	probe.mu.Lock()
	got := slices.Clone(probe.token)
	probe.mu.Unlock()
	if len(got) != 1 || got[0] != "probe-secret" {
		t.Fatalf("the backend read PROBE_TOKEN as %q; want the caller's value, asked for while the call ran", got)
	}
	if !slices.Contains(asked, "PROBE_TOKEN") {
		t.Errorf("asked for %q; want PROBE_TOKEN among them", asked)
	}
	for _, n := range asked {
		if n == "OPENAI_API_KEY" || n == "PATH" {
			t.Errorf("the daemon asked for %s, which nothing it runs reads", n)
		}
	}
}
