package config

// Checkpoints is the checkpoints: section of the file (berth's own keys):
// the bounds on the checkpoints berth keeps of an environment (berth env
// checkpoint, the MCP environment tool), and whether agents get the
// environment tool at all. See docs/fork.md.
type Checkpoints struct {
	// MaxPerEnvironment is checkpoints.max_per_environment: how many
	// named checkpoints one environment key may keep (default 10).
	MaxPerEnvironment int
	// MaxTotalMB is checkpoints.max_total_mb: the size, in MB, that one
	// environment key's checkpoints may take together, as their backends
	// report it (default 4096).
	MaxTotalMB int
	// EnvironmentTool is checkpoints.environment_tool: berth mcp and
	// berth serve offer agents the environment tool (checkpoint,
	// restore and list of their own environment). Off by default.
	EnvironmentTool bool
}

// The defaults of the checkpoints: section.
const (
	DefaultMaxCheckpoints       = 10
	DefaultMaxCheckpointTotalMB = 4096
)

// defaultCheckpoints returns the checkpoints: section at its defaults.
func defaultCheckpoints() Checkpoints {
	return Checkpoints{MaxPerEnvironment: DefaultMaxCheckpoints, MaxTotalMB: DefaultMaxCheckpointTotalMB}
}

// checkpointKeys are the keys of the checkpoints: section, fields of
// Config. They are read on every call (a long-lived daemon takes the
// caller's), so a change of one needs no new environment.
func checkpointKeys() []*keyInfo {
	perEnv := &keyInfo{
		section: "checkpoints", name: "max_per_environment", env: "BERTH_CHECKPOINTS_MAX_PER_ENVIRONMENT", kind: kindInt, field: fieldConfig,
		help:  "named checkpoints one environment may keep; past it, berth env checkpoint fails and keeps the others",
		rule:  "checkpoints.max_per_environment must be a whole number >= 1",
		check: intMin(1), def: DefaultMaxCheckpoints, perCall: true,
		getc: func(c *Config) any { return c.Checkpoints.MaxPerEnvironment },
		setc: func(c *Config, v any) { c.Checkpoints.MaxPerEnvironment = v.(int) },
	}
	total := &keyInfo{
		section: "checkpoints", name: "max_total_mb", env: "BERTH_CHECKPOINTS_MAX_TOTAL_MB", kind: kindInt, field: fieldConfig,
		help:  "MB one environment's checkpoints may take together (as the backends report their size); past it, a new checkpoint is removed again and the others kept",
		rule:  "checkpoints.max_total_mb must be a whole number of MB >= 1",
		check: intMin(1), def: DefaultMaxCheckpointTotalMB, perCall: true,
		getc: func(c *Config) any { return c.Checkpoints.MaxTotalMB },
		setc: func(c *Config, v any) { c.Checkpoints.MaxTotalMB = v.(int) },
	}
	tool := &keyInfo{
		section: "checkpoints", name: "environment_tool", env: "BERTH_CHECKPOINTS_ENVIRONMENT_TOOL", kind: kindBool, field: fieldConfig,
		help: "berth mcp and serve offer agents the environment tool: checkpoint, restore and list their own environment",
		rule: kindRule("checkpoints.environment_tool", kindBool, ""),
		def:  false, perCall: true,
		getc: func(c *Config) any { return c.Checkpoints.EnvironmentTool },
		setc: func(c *Config, v any) { c.Checkpoints.EnvironmentTool = v.(bool) },
	}
	return []*keyInfo{perEnv, total, tool}
}
