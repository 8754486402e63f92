package config

import (
	"strings"
	"testing"
)

// The checkpoints: keys default to their documented values, and a bad
// value names the variable, the value and what is accepted.
func TestCheckpointKeys(t *testing.T) {
	c := mustLoad(t, LoadOptions{Getenv: envOf(map[string]string{"BERTH_HOME": t.TempDir()})})
	if want := (Checkpoints{MaxPerEnvironment: 10, MaxTotalMB: 4096}); c.Checkpoints != want {
		t.Errorf("defaults: %+v, want %+v", c.Checkpoints, want)
	}
	c = mustLoad(t, LoadOptions{Getenv: envOf(map[string]string{"BERTH_HOME": t.TempDir(), "BERTH_CHECKPOINTS_MAX_PER_ENVIRONMENT": "3", "BERTH_CHECKPOINTS_ENVIRONMENT_TOOL": "yes"})})
	if c.Checkpoints.MaxPerEnvironment != 3 || !c.Checkpoints.EnvironmentTool {
		t.Errorf("from variables: %+v", c.Checkpoints)
	}
	_, err := Load(LoadOptions{Getenv: envOf(map[string]string{"BERTH_HOME": t.TempDir(), "BERTH_CHECKPOINTS_MAX_TOTAL_MB": "0"})})
	if err == nil || !strings.Contains(err.Error(), "BERTH_CHECKPOINTS_MAX_TOTAL_MB") || !strings.Contains(err.Error(), `"0"`) || !strings.Contains(err.Error(), "checkpoints.max_total_mb must be") {
		t.Errorf("bad value: %v", err)
	}
}
