package manager

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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
// A berth that runs under another berth (see Nested) is at least as
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
// berth's environment. Every process berth starts on this machine carries
// the owner mark (procmark.OwnerVar), and so does every process below it;
// a berth is nested when its configuration's environment has the mark, or
// when this process or one of its ancestors does (procmark.UnderBerth):
// removing the variable from the nested berth's own environment (`env -u
// BERTH_OWNER berth …`) does not hide the shell it was started from. The
// daemon answers the variable for each caller from the caller's own
// ancestry, as seen through its socket.
func Nested(cfg *config.Config) bool {
	return cfg.Getenv(procmark.OwnerVar) != "" || underBerth()
}

// underBerth reports whether this process runs below a process berth
// started. It is read once: a process only ever leaves a tree.
var underBerth = sync.OnceValue(func() bool { return procmark.UnderBerth(os.Getpid()) != "" })

// newGate builds the approval gate of cfg. config.Load has validated the
// approval keys, so a policy error means a hand-built configuration: the
// gate then falls back to the safe default (manual mode, no patterns) and
// says so. "always" answers are saved into command_allowlist in the config
// file (cfg.Path, else config.yaml in the berth home), in place, as
// `berth config set` does, and raise floor's allowlist (the user gave
// them). The gate's first policy sets the floor.
func newGate(cfg *config.Config, log *slog.Logger, floor *approvalFloor) *approval.Gate {
	pol, err := Policy(cfg)
	if err != nil {
		log.Warn("manager: approvals configuration rejected; asking before every dangerous command", "err", err)
		pol = approval.DefaultPolicy()
	}
	floor.hold(pol)
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
			floor.add(list)
			log.Info("approval saved", "key", approval.KeyAllowlist, "file", file, "patterns", list)
			return nil
		},
	})
}

// SetApprovals re-reads the approval settings of cfg (approvals.mode,
// approvals.deny, command_allowlist) into the gate, for a long-lived
// manager whose configuration file may have changed since it was built:
// the daemon calls it on every request.
//
// A change that raises the gate applies at once: an allowlist entry the
// user revoked ends, a deny pattern added blocks. A change that lowers it
// below what the manager started with (its floor: mode off where it was
// manual, an allowlist entry it did not have, a deny pattern it had
// removed) is held: the gate keeps the stricter setting, and held names
// each one, for the caller to show. Lowered settings apply to a manager
// made anew (a restarted daemon). A command the agent runs can rewrite
// the configuration file in many spellings no gate reads (a script, an
// interpreter), or start a berth of its own that escapes Nested; the
// settings the user started the environment with hold all the same. The
// user's own "always" answers raise the floor, as they are saved.
//
// The gate's "this session" answers stay. A bad policy is an error and
// leaves the gate as it was.
func (m *Manager) SetApprovals(cfg *config.Config) (held []string, err error) {
	pol, err := Policy(cfg)
	if err != nil {
		return nil, err
	}
	pol, held, err = m.floor.hold(pol)
	if err != nil {
		return nil, err
	}
	m.gate.SetPolicy(pol)
	return held, nil
}

// KeepApprovalFloor gives m the approval floor of from, the manager m
// replaces (the daemon makes a new manager when the settings that make an
// environment change): the settings m's environments get are never lower
// than those the user started from's with, as SetApprovals says. Call it
// before m's first environment; then SetApprovals.
func (m *Manager) KeepApprovalFloor(from *Manager) {
	if from == nil || from == m {
		return
	}
	m.floor.copyFrom(&from.floor)
}

// approvalFloor is the loosest a manager's approval settings may become:
// those it was made with, plus the allowlist entries the user saved since
// by answering "always".
type approvalFloor struct {
	mu    sync.Mutex
	set   bool
	mode  approval.Mode
	allow map[string]bool
	deny  []string
}

// hold returns pol with every setting that is lower than the floor's
// raised back to it, and names the settings it raised. The first policy a
// floor sees sets it.
func (f *approvalFloor) hold(pol *approval.Policy) (*approval.Policy, []string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.set {
		f.set, f.mode, f.deny = true, pol.Mode(), pol.Deny()
		f.allow = map[string]bool{}
		for _, a := range pol.Allowlist() {
			f.allow[a] = true
		}
		return pol, nil, nil
	}
	var held []string
	mode := pol.Mode()
	if mode == approval.ModeOff && f.mode != approval.ModeOff {
		held = append(held, fmt.Sprintf("%s %s (kept %s)", approval.KeyMode, mode, f.mode))
		mode = f.mode
	}
	var allow []string
	for _, a := range pol.Allowlist() {
		if f.allow[a] {
			allow = append(allow, a)
		} else {
			held = append(held, fmt.Sprintf("%s entry %q (not applied)", approval.KeyAllowlist, a))
		}
	}
	deny := pol.Deny()
	for _, d := range f.deny {
		if !slices.Contains(deny, d) {
			deny = append(deny, d)
			held = append(held, fmt.Sprintf("%s entry %q removed (still applied)", approval.KeyDeny, d))
		}
	}
	if len(held) == 0 {
		return pol, nil, nil
	}
	kept, err := approval.NewPolicy(string(mode), deny, allow)
	if err != nil {
		return nil, nil, err
	}
	return kept, held, nil
}

// add adds entries the user saved to the floor's allowlist.
func (f *approvalFloor) add(list []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.allow == nil {
		f.allow = map[string]bool{}
	}
	for _, a := range list {
		f.allow[a] = true
	}
}

// copyFrom makes f a copy of o.
func (f *approvalFloor) copyFrom(o *approvalFloor) {
	o.mu.Lock()
	set, mode, deny, allow := o.set, o.mode, slices.Clone(o.deny), maps.Clone(o.allow)
	o.mu.Unlock()
	f.mu.Lock()
	f.set, f.mode, f.deny, f.allow = set, mode, deny, allow
	f.mu.Unlock()
}
