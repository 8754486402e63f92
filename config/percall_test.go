package config

import "testing"

// TestPerCall: the keys that do not make an environment are the ones read
// on every call (or by the daemon itself), the approval keys a long-lived
// berth re-reads on every call, the checkpoint keys (read when a
// checkpoint is made or a server starts), and declared keys marked
// PerCall; every
// other key, approvals.timeout included, makes one.
func TestPerCall(t *testing.T) {
	perCall := map[string]bool{
		"terminal.timeout": true, "terminal.on_timeout": true, "terminal.max_foreground_timeout": true,
		"terminal.lifetime_seconds": true, "terminal.daemon": true,
		"approvals.mode": true, "approvals.deny": true, "command_allowlist": true,
		"terminal.fake_ratio":             true,
		"checkpoints.max_per_environment": true, "checkpoints.max_total_mb": true, "checkpoints.environment_tool": true,
	}
	for _, k := range Keys() {
		if got := PerCall(k); got != perCall[k] {
			t.Errorf("PerCall(%s) = %v, want %v", k, got, perCall[k])
		}
	}
	for _, name := range []string{"timeout", "fake_ratio"} {
		if !PerCall(name) {
			t.Errorf("PerCall(%s) by its bare name = false", name)
		}
	}
	if PerCall("no_such_key") {
		t.Error("an unknown key is per call")
	}
}
