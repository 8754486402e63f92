package modal

import (
	"errors"

	"github.com/a55dbaac/berth/config"
)

// The configuration keys this backend reads besides the shared fields of
// config.Terminal (container_*, docker_forward_env, docker_network,
// env_passthrough, cwd). Each works in the terminal: section of the file,
// as the TERMINAL_* variable of its upper-cased name, as a flag and with
// `berth config`.
const (
	keyImage          = "modal_image"           // registry name, or an "im-..." image id
	keyApp            = "modal_app"             // the Modal app sandboxes run in
	keySandboxTimeout = "modal_sandbox_timeout" // seconds a sandbox may live
	keyIdleTimeout    = "modal_idle_timeout"    // seconds idle before Modal stops it; 0 = never
	// keySnapshotInterval is how often a persistent environment's
	// filesystem is snapshotted while it runs, so that a crash or a
	// sandbox killed from outside loses at most that much.
	keySnapshotInterval = "modal_snapshot_interval"
	// keyRetryTimeout bounds how long a call Modal rate-limits or fails
	// transiently is retried before berth gives up and says so.
	keyRetryTimeout = "modal_retry_timeout"
	// keyDockerEnv is docker's key, declared here too with the same kind
	// and variable: its variables are exported into the session, as the
	// docker and daytona backends set them in their environments, so a
	// configuration moves between container backends unchanged.
	keyDockerEnv = "docker_env"
)

// Defaults of the modal-only keys.
const (
	DefaultApp                  = "berth"
	DefaultSandboxTimeoutSecs   = 3600
	DefaultSnapshotIntervalSecs = 600
	DefaultRetryTimeoutSecs     = 120
	maxTimeoutSecs              = 24 * 60 * 60 // Modal's limit on both timeouts
	maxRetryTimeoutSecs         = 3600
)

// configKeys are declared through the registration.
var configKeys = []config.Key{
	{Name: keyImage, Default: config.DefaultImage, Help: `image of the sandbox: a registry name, or an image id ("im-...")`},
	{Name: keyApp, Default: DefaultApp, Help: "the Modal app the sandboxes belong to", Check: checkApp},
	{Name: keySandboxTimeout, Default: DefaultSandboxTimeoutSecs, Help: "seconds a sandbox may live before Modal stops it", Check: checkSandboxTimeout},
	{Name: keyIdleTimeout, Default: 0, Help: "seconds without a running exec before Modal stops the sandbox; 0 = never", Check: checkIdleTimeout},
	{Name: keySnapshotInterval, Default: DefaultSnapshotIntervalSecs, Help: "seconds between filesystem snapshots of a persistent sandbox while it runs (a crash loses at most this much); 0 = only when it closes", Check: checkSnapshotInterval},
	{Name: keyRetryTimeout, Default: DefaultRetryTimeoutSecs, Help: "seconds a call that Modal rate-limits or fails transiently is retried, with backoff, before berth gives up", Check: checkRetryTimeout},
	{Name: keyDockerEnv, Default: map[string]string{}, Help: `variables set in the environment, e.g. {"DEBUG": "1"}`},
}

// checkApp accepts a Modal app name.
func checkApp(v any) error {
	if !validAppName(v.(string)) {
		return errors.New("an app name is 1 to 64 letters, digits, '.', '-' or '_'")
	}
	return nil
}

// checkSandboxTimeout accepts 1 s to Modal's 24 hours.
func checkSandboxTimeout(v any) error {
	if n := v.(int); n < 1 || n > maxTimeoutSecs {
		return errors.New("must be whole seconds from 1 to 86400 (Modal's limit is 24 hours)")
	}
	return nil
}

// checkIdleTimeout accepts 0 (no idle timeout) to Modal's 24 hours.
func checkIdleTimeout(v any) error {
	if n := v.(int); n < 0 || n > maxTimeoutSecs {
		return errors.New("must be whole seconds from 0 (never) to 86400 (Modal's limit is 24 hours)")
	}
	return nil
}

// checkSnapshotInterval accepts 0 (snapshot only on close) to 24 hours.
func checkSnapshotInterval(v any) error {
	if n := v.(int); n < 0 || n > maxTimeoutSecs {
		return errors.New("must be whole seconds from 0 (snapshot only when the environment closes) to 86400 (a sandbox lives 24 hours at most)")
	}
	return nil
}

// checkRetryTimeout accepts 1 s to an hour.
func checkRetryTimeout(v any) error {
	if n := v.(int); n < 1 || n > maxRetryTimeoutSecs {
		return errors.New("must be whole seconds from 1 to 3600")
	}
	return nil
}

// validAppName reports whether s is a name Modal accepts for an app.
func validAppName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}
