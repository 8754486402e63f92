package manager

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/a55dbaac/berth/approval"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/procmark"
)

// The approval keys mean something only to the approval engine, which
// config does not link: the manager, which builds policies from them,
// gives config their checks, so Load and `berth config set` refuse a bad
// mode or pattern with the engine's own words.
func init() {
	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	must(config.AddCheck(approval.KeyMode, func(v any) error {
		if _, err := approval.ParseMode(v.(string)); err != nil {
			// ParseMode names the key and value; the caller does too.
			_, why, _ := strings.Cut(err.Error(), ": ")
			return fmt.Errorf("%s", why)
		}
		return nil
	}))
	must(config.AddCheck(approval.KeyDeny, checkPatterns(approval.KeyDeny)))
	must(config.AddCheck(approval.KeyAllowlist, checkPatterns(approval.KeyAllowlist)))
}

// checkPatterns validates every entry of a pattern list, naming the entry
// by its index.
func checkPatterns(key string) func(any) error {
	return func(v any) error {
		var errs []string
		for i, s := range v.([]string) {
			if _, err := approval.ParsePattern(s); err != nil {
				errs = append(errs, fmt.Sprintf("%s[%d]: %v", key, i, err))
			}
		}
		if len(errs) > 0 {
			return fmt.Errorf("%s", strings.Join(errs, "; "))
		}
		return nil
	}
}

// Policy builds the approval policy of cfg: approvals.mode, approvals.deny
// and command_allowlist. Load has checked them, so an error means a
// hand-built Config with a bad value; it names the key, the index and the
// pattern.
//
// A berth that runs under another berth (the caller's environment has the
// owner mark every command of a local environment carries) is at least as
// strict as its parent, whatever its own configuration says: it asks
// (manual mode) and takes no allowlist. Its parent's gate has checked the
// nested berth's command line against the parent's patterns already; what
// the nested berth then runs is asked again, here, and blocked when nobody
// can answer. So an agent cannot lower the gate by starting a berth of its
// own with another home, configuration or variables.
func Policy(cfg *config.Config) (*approval.Policy, error) {
	if Nested(cfg) {
		return approval.NewPolicy(string(approval.ModeManual), cfg.Approvals.Deny, nil)
	}
	return approval.NewPolicy(cfg.Approvals.Mode, cfg.Approvals.Deny, cfg.CommandAllowlist)
}

// Nested reports whether cfg belongs to a berth started inside another
// berth's environment: its environment carries the owner mark
// (procmark.OwnerVar) the parent gives every command it runs.
func Nested(cfg *config.Config) bool {
	return cfg.Getenv(procmark.OwnerVar) != ""
}

// newGate builds the approval gate of cfg. config.Load has validated the
// approval keys, so a policy error means a hand-built configuration: the
// gate then falls back to the safe default (manual mode, no patterns) and
// says so. "always" answers are saved into command_allowlist in the config
// file (cfg.Path, else config.yaml in the berth home), in place, as
// `berth config set` does.
func newGate(cfg *config.Config, log *slog.Logger) *approval.Gate {
	pol, err := Policy(cfg)
	if err != nil {
		log.Warn("manager: approvals configuration rejected; asking before every dangerous command", "err", err)
		pol = approval.DefaultPolicy()
	}
	file := cfg.Path
	if file == "" {
		file = filepath.Join(cfg.Home, "config.yaml")
	}
	return approval.NewGate(pol, approval.GateOptions{
		Timeout: time.Duration(cfg.Approvals.Timeout) * time.Second,
		Logger:  log,
		Persist: func(list []string) error {
			b, err := json.Marshal(list)
			if err != nil {
				return err
			}
			if err := config.Set(file, approval.KeyAllowlist, string(b)); err != nil {
				return fmt.Errorf("save %s in %s: %w", approval.KeyAllowlist, file, err)
			}
			log.Info("approval saved", "key", approval.KeyAllowlist, "file", file, "patterns", list)
			return nil
		},
	})
}

// SetApprovals re-reads the approval settings of cfg (approvals.mode,
// approvals.deny, command_allowlist) into the gate, for a long-lived
// manager whose configuration file may have changed since it was built:
// the daemon calls it on every request, so an allowlist entry the user
// revoked ends at once. The gate's "this session" answers stay. A bad
// policy is an error and leaves the gate as it was.
func (m *Manager) SetApprovals(cfg *config.Config) error {
	pol, err := Policy(cfg)
	if err != nil {
		return err
	}
	m.gate.SetPolicy(pol)
	return nil
}
