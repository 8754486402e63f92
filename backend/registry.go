package backend

import (
	"context"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/a55dbaac/berth/config"
)

// Options carries what a backend constructor receives.
type Options struct {
	// Key is the environment key (the task id); backends use it to name and
	// label what they create.
	Key string
	// Config is the merged terminal configuration (file, environment, flags).
	Config config.Terminal
	// Home is the berth home directory (default ~/.berth) where backends may
	// keep state such as caches or known hosts.
	Home string
	// ConfigFile is the configuration file berth read (absolute), "" when
	// it read none. Backends that let commands write on this machine keep
	// it, the .env beside it and Home out of their reach.
	ConfigFile string
	// Logger receives the backend's diagnostics; nil means slog.Default().
	Logger *slog.Logger
	// Getenv looks up a variable in the environment berth was started with,
	// including the .env file beside the config. Nil means os.Getenv.
	Getenv func(string) string
	// Progress, when not nil, hears about long set-up steps (Begin); the
	// CLI shows them on a terminal. Nil means no one is watching.
	Progress func(Event)
	// From, when not nil, asks for a new environment that starts with the
	// files of this checkpoint (a fork, or a restore) instead of the
	// image's or the workspace's own. Only a backend that implements
	// Checkpointer is given one, and only a checkpoint it made.
	From *Checkpoint
}

// Log is the logger the backend reports to: Logger, or slog.Default()
// when none was given.
func (o Options) Log() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.Default()
}

// Factory creates a backend for one environment key.
type Factory func(ctx context.Context, opts Options) (Backend, error)

// Fingerprint reports whether a backend is usable on this machine and, if
// not, what to do about it. It is what `berth doctor` prints.
type Fingerprint struct {
	Usable  bool
	Summary string   // one line: version, daemon, host
	Details []string // extra facts (enforced limits, ...)
	Fix     string   // what to do when not usable
}

// Registration describes a backend to the registry.
type Registration struct {
	Name        string
	Description string
	New         Factory
	// Doctor checks whether the backend can work here. It may be nil.
	Doctor func(ctx context.Context, opts Options) Fingerprint
	// Envs administers the environments the backend keeps beyond one berth
	// process (containers, sandboxes). Nil for backends that keep none.
	Envs EnvAdmin
	// ListLags says the service's listing may not show an environment
	// created a moment ago (an eventually consistent API): berth env rm
	// of a key the listing lacks asks this backend by key when it is the
	// configured one. Where a listing is exact, a key it lacks is no
	// environment, and rm says so.
	ListLags bool
	// Keys are the configuration keys only this backend reads (e.g.
	// docker_image, ssh_host), under their Hermes names. Register declares
	// them to package config, so they work in the file, as TERMINAL_*
	// variables, as flags and with `berth config`; the backend reads them
	// with opts.Config.String(name), Int, Float, Bool, List or Map. Keys
	// every backend shares (container_cpu, ...) are fields of
	// config.Terminal and need no declaration.
	Keys []config.Key
	// HostFS says the backend's environments live in this machine's
	// filesystem, so a relative terminal.cwd means the caller's working
	// directory joined with it (the daemon resolves it so before any
	// environment exists). Container and remote backends leave it false.
	HostFS bool
	// Checkpoints removes the checkpoints the backend keeps (berth env rm
	// of a checkpoint, a bound past which the oldest goes). Nil for
	// backends that cannot checkpoint.
	Checkpoints CheckpointAdmin
}

// EnvInfo describes an environment a backend keeps (berth env ls).
type EnvInfo struct {
	Backend string
	Key     string
	State   string // running, exited, ...
	ID      string // container or sandbox id
	Image   string
	Created time.Time
	// Persistent reports an environment kept across Close on purpose
	// (container_persistent), as opposed to a leftover.
	Persistent bool
}

// EnvAdmin lists and removes a backend's kept environments.
type EnvAdmin interface {
	List(ctx context.Context, opts Options) ([]EnvInfo, error)
	// Remove deletes key's environment and its volumes; a key with nothing
	// is not an error.
	Remove(ctx context.Context, opts Options, key string) error
	// Prune removes environments not running for longer than maxAge and
	// returns their keys.
	Prune(ctx context.Context, opts Options, maxAge time.Duration) ([]string, error)
}

var (
	regMu    sync.RWMutex
	registry = map[string]Registration{}
)

// Register adds a backend and declares its keys to package config. It
// panics, like database/sql.Register, on what is a programming error: a
// duplicate name, or a key whose declaration conflicts with another
// backend's or a shared key (another kind or variable). Call it from the
// backend package's init.
func Register(r Registration) {
	regMu.Lock()
	defer regMu.Unlock()
	if r.Name == "" || r.New == nil {
		panic("backend: Register needs a name and a constructor")
	}
	if _, dup := registry[r.Name]; dup {
		panic("backend: Register called twice for " + r.Name)
	}
	if err := config.Declare(r.Name, r.Keys); err != nil {
		panic("backend: Register " + r.Name + ": " + err.Error())
	}
	r.Keys = slices.Clone(r.Keys)
	registry[r.Name] = r
}

// Lookup returns the registration for name.
func Lookup(name string) (Registration, bool) {
	regMu.RLock()
	defer regMu.RUnlock()
	r, ok := registry[name]
	return r, ok
}

// Choices describes the backend names for flag help and messages: the
// registered ones, then the contract's names this build lacks, e.g.
// "docker, local, ssh (not in this build: singularity, modal, daytona)".
func Choices() string {
	builtIn, missing := config.BackendNames()
	s := strings.Join(builtIn, ", ")
	if len(missing) > 0 {
		s += " (not in this build: " + strings.Join(missing, ", ") + ")"
	}
	return s
}

// Names lists the registered backends in sorted order.
func Names() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
