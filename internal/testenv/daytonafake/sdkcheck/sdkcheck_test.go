// Package sdkcheck holds the fake Daytona to a client berth did not write:
// Daytona's own TypeScript SDK (@daytonaio/sdk, pinned with its whole
// dependency tree by package.json and package-lock.json) runs check.mjs —
// create, execute, home directory, upload and download, stop and start,
// delete — against the fake.
//
// The SDK is installed with the machine's npm (npm ci, scripts off) into a
// cache directory named for the lock file's hash, under the user's cache
// directory (or $BERTH_SDKCHECK_CACHE), once: later runs reuse it. The test
// skips unless BERTH_TEST_ENGINES selects node (and docker, for the fake's
// sandboxes), and fails when node is selected and node, npm or the install
// is missing (see package testenv).
package sdkcheck

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/internal/randhex"
	"github.com/a55dbaac/berth/internal/testenv"
	"github.com/a55dbaac/berth/internal/testenv/daytonafake"
	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
)

// sdkVersion is the @daytonaio/sdk version package.json pins.
const sdkVersion = "0.218.0"

// install returns a directory holding check.mjs beside node_modules with
// the pinned SDK, installing it into the cache the first time. It skips
// the test unless node is selected, and fails it when node is selected and
// node, npm or the SDK's install is missing.
func install(t *testing.T) (dir, node string) {
	t.Helper()
	testenv.Need(t, testenv.Node, func() (err error) {
		dir, node, err = installSDK(t)
		return err
	})
	return dir, node
}

// installSDK is install, reporting what is missing as an error.
func installSDK(t *testing.T) (dir, node string, err error) {
	t.Helper()
	node, err = exec.LookPath("node")
	if err != nil {
		return "", "", errors.New("sdkcheck: no node on PATH to run Daytona's TypeScript SDK (Debian: apt-get install nodejs npm)")
	}
	if v, err := exec.Command(node, "--version").Output(); err != nil || !nodeAtLeast20(strings.TrimSpace(string(v))) {
		return "", "", fmt.Errorf("sdkcheck: Daytona's TypeScript SDK needs Node.js 20 or later; %s is %q (%v)", node, strings.TrimSpace(string(v)), err)
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", "", errors.New("sdkcheck: no npm on PATH to install Daytona's TypeScript SDK (Debian: apt-get install npm)")
	}
	pkg, err := os.ReadFile("package.json")
	if err != nil {
		t.Fatal(err)
	}
	lock, err := os.ReadFile("package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(append(append([]byte(nil), pkg...), lock...))
	cache := os.Getenv("BERTH_SDKCHECK_CACHE")
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		cache = filepath.Join(base, "berth")
	}
	dir = filepath.Join(cache, "daytona-sdk-"+sdkVersion+"-"+hex.EncodeToString(sum[:6]))
	marker := filepath.Join(dir, "node_modules", "@daytonaio", "sdk", "package.json")
	if _, err := os.Stat(marker); err != nil {
		if err := os.MkdirAll(cache, 0o755); err != nil {
			t.Fatal(err)
		}
		tmp := dir + ".tmp-" + randhex.String(4)
		defer os.RemoveAll(tmp)
		if err := os.MkdirAll(tmp, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range map[string][]byte{"package.json": pkg, "package-lock.json": lock} {
			if err := os.WriteFile(filepath.Join(tmp, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error")
		cmd.Dir = tmp
		cmd.Env = append(os.Environ(), "npm_config_update_notifier=false")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		if err := cmd.Run(); err != nil {
			return "", "", fmt.Errorf("sdkcheck: npm ci of @daytonaio/sdk@%s failed: %v\n%s", sdkVersion, err, out.String())
		}
		t.Logf("installed @daytonaio/sdk@%s into %s in %s", sdkVersion, dir, time.Since(start).Round(time.Second))
		if err := os.Rename(tmp, dir); err != nil {
			// Another test process installed it meanwhile: use that one.
			if _, serr := os.Stat(marker); serr != nil {
				t.Fatalf("sdkcheck: move the installed SDK into %s: %v", dir, err)
			}
		}
	}
	return dir, node, nil
}

// nodeAtLeast20 reports whether a `node --version` answer (v20.1.0) is
// 20 or later: the SDK's dependencies (the AWS SDK) ask for it.
func nodeAtLeast20(v string) bool {
	major, _, _ := strings.Cut(strings.TrimPrefix(v, "v"), ".")
	n, err := strconv.Atoi(major)
	return err == nil && n >= 20
}

// runCheck runs check.mjs against fake and fails the test unless every
// step passed.
func runCheck(t *testing.T, dir, node string, fake *daytonafake.Server) {
	t.Helper()
	script := filepath.Join(dir, "check-"+randhex.String(4)+".mjs")
	body, err := os.ReadFile("check.mjs")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, body, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(script)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "DAYTONA_API_URL="+fake.APIURL(), "DAYTONA_API_KEY="+fake.APIKey(),
		"DAYTONA_JWT_TOKEN=", "DAYTONA_ORGANIZATION_ID=", "SDKCHECK_IMAGE="+dockerenv.Image(t),
		"OTEL_SDK_DISABLED=true", "DAYTONA_DISABLE_TELEMETRY=true")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("check.mjs:\n%s", out.String())
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run node: %v", err)
	}
	if err != nil || !strings.Contains(out.String(), "ok all\n") {
		t.Fatalf("Daytona's SDK did not get through check.mjs against the fake: %v", err)
	}
}

// TestDaytonaSDK runs check.mjs against the kind fake and against the
// realistic one less its 429s and 5xx: the SDK itself does not retry an
// answer it got (its RetryAdapter retries connection failures only), so
// against those it would fail as it fails against Daytona, which is no
// finding about the fake.
func TestDaytonaSDK(t *testing.T) {
	dockerenv.Require(t) // the fake's sandboxes: before the SDK's install
	dir, node := install(t)
	t.Run("kind", func(t *testing.T) {
		runCheck(t, dir, node, daytonafake.Start(t))
	})
	t.Run("realistic-without-429-and-5xx", func(t *testing.T) {
		u := daytonafake.Realistic()
		u.RateLimitEvery, u.TransientEvery = 0, 0
		runCheck(t, dir, node, daytonafake.StartUnkind(t, u))
	})
}
