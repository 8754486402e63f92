package daytonafake

import (
	"log/slog"
	"os"
	"testing"

	apiclient "github.com/daytona/clients/api-client-go"
	toolbox "github.com/daytona/clients/toolbox-api-client-go"

	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
	"github.com/a55dbaac/berth/internal/testenv/fault"
)

// Start starts a fake for a test on the real Docker daemon, with the test
// image (dockerenv.Image) as the image of sandboxes created without one.
// It keeps a warm pool of one container per sandbox shape. It is closed, and everything it created removed, when the test ends. Like
// dockerenv.Require it skips unless BERTH_TEST_ENGINES selects docker, and
// fails when docker is selected and no daemon answers.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartUnkind(t, Unkind{})
}

// StartRealistic is Start with every unkind switch on (Realistic).
func StartRealistic(t testing.TB) *Server {
	t.Helper()
	return StartUnkind(t, Realistic())
}

// StartUnkind is Start with the given switches. What they draw at random
// comes from the seed BERTH_FAKE_SEED gives, or a random one; the test's
// log names it when the fake starts and again when the test fails.
func StartUnkind(t testing.TB, u Unkind) *Server {
	t.Helper()
	return start(t, Options{Unkind: u})
}

// start runs a fake with opts, the tests' Docker daemon, the test image
// as the default and a warm pool of one, for the test.
func start(t testing.TB, opts Options) *Server {
	t.Helper()
	opts.Docker = dockerenv.Require(t)
	opts.DefaultImage = dockerenv.Image(t)
	opts.Logger = testLogger(t)
	opts.WarmPool = 1
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("daytonafake: serving %s; unkind: %s; %s", s.APIURL(), opts.Unkind, s.faults)
	// Registered first, so run last: a failure to close counts too.
	fault.Report(t, "daytonafake", s.faults)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("daytonafake: close: %v", err)
		}
	})
	return s
}

// APIClient returns Daytona's generated control-plane client pointed at
// the fake and authenticating with key.
func (s *Server) APIClient(key string) *apiclient.APIClient {
	cfg := apiclient.NewConfiguration()
	cfg.Servers = apiclient.ServerConfigurations{{URL: s.APIURL()}}
	cfg.AddDefaultHeader("Authorization", "Bearer "+key)
	return apiclient.NewAPIClient(cfg)
}

// ToolboxClient returns Daytona's generated toolbox client for a sandbox of
// the fake, authenticating with key.
func (s *Server) ToolboxClient(sandboxID, key string) *toolbox.APIClient {
	cfg := toolbox.NewConfiguration()
	cfg.Servers = toolbox.ServerConfigurations{{URL: s.ToolboxProxyURL() + "/" + sandboxID}}
	cfg.AddDefaultHeader("Authorization", "Bearer "+key)
	return toolbox.NewAPIClient(cfg)
}

// testLogger logs the fake's diagnostics to stderr when DAYTONAFAKE_DEBUG
// is set, and discards them otherwise (goroutines of the fake may outlive
// a test, so they never log through t).
func testLogger(testing.TB) *slog.Logger {
	if os.Getenv("DAYTONAFAKE_DEBUG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
