package config

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Key declares a configuration key that only one backend (or a few) reads,
// in the backend's registration (backend.Registration.Keys), the way rclone
// backends declare their options. The key then works like a shared one: in
// the terminal: section of the file, as a TERMINAL_* variable, as a flag,
// with `berth config get/set`, in `berth config keys` and `berth doctor`.
// Backends read its value with Terminal.String, Int, Float, Bool, List or
// Map.
type Key struct {
	// Name is the key under terminal:, e.g. "modal_image": lower case
	// letters, digits and underscores. Keep the Hermes name when the
	// contract has one.
	Name string
	// Env is the variable that overrides the file; "" means
	// "TERMINAL_" + upper(Name).
	Env string
	// Default is the value when nothing sets the key. Its type fixes the
	// key's kind: string, int, float64, bool, []string or map[string]string.
	Default any
	// Help is one line describing the key, shown by `berth config keys`,
	// `berth doctor` and in flag help.
	Help string
	// Check, if not nil, validates a value of the key's kind (after it was
	// parsed); its error text is shown after the key and the bad value,
	// e.g. `terminal.ssh_port "0": must be a port from 1 to 65535`.
	Check func(v any) error
	// PerCall says the backend reads the key on every call rather than
	// when it creates an environment: a warm environment (the daemon's)
	// is kept when only per-call keys change. Leave it false for anything
	// the environment is made with.
	PerCall bool
}

// The declared keys are part of the backend registry: backend.Register
// declares them here, and this is the only global state of the package
// besides the fixed table of shared keys.
var (
	regMu      sync.RWMutex
	keyTable   []*keyInfo          // shared terminal keys, declared keys by backend, max_bytes, approval keys
	keyByFull  map[string]*keyInfo // dotted name -> key
	keyByEnv   map[string]*keyInfo // variable -> key
	registered []string            // backends declared, in registration order
)

func init() {
	keyByFull = map[string]*keyInfo{}
	keyByEnv = map[string]*keyInfo{}
	for _, k := range sharedKeys() {
		keyTable = append(keyTable, k)
		keyByFull[k.full()] = k
		if k.env != "" {
			keyByEnv[k.env] = k
		}
	}
}

// contractBackends are the backend names of the terminal contract, in its
// order.
var contractBackends = [...]string{"local", "docker", "ssh", "singularity", "modal", "daytona"}

// ContractBackends returns the backend names the terminal contract defines
// (local, docker, ssh, singularity, modal, daytona). terminal.backend
// accepts them even when one is not built into this program, so a Hermes
// file loads; running a command then fails with a clear error.
func ContractBackends() []string { return slices.Clone(contractBackends[:]) }

var (
	keyNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	envNameRE = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)
)

// Declare records that backend exists and declares its keys. It is called
// by backend.Register, which panics with the error; a backend does not call
// it itself. A key with the name of a shared key (container_cpu, ...) must
// have its kind and then changes nothing: the shared definition applies. A
// key declared by several backends must have the same kind and variable in
// each; the first declaration gives the default and help, and every
// declaration's Check applies.
func Declare(backend string, keys []Key) error {
	regMu.Lock()
	defer regMu.Unlock()
	if backend == "" {
		return errors.New("config: Declare needs a backend name")
	}
	if slices.Contains(registered, backend) {
		return fmt.Errorf("config: backend %s declared twice", backend)
	}
	// Work on copies, so that an error leaves the tables as they were.
	table := slices.Clone(keyTable)
	byFull := maps.Clone(keyByFull)
	byEnv := maps.Clone(keyByEnv)
	seen := map[string]bool{}
	for _, key := range keys {
		k, err := newDeclaredKey(backend, key)
		if err != nil {
			return err
		}
		if seen[k.name] {
			return fmt.Errorf("config: backend %s declares key %s twice", backend, k.name)
		}
		seen[k.name] = true
		old := byFull[k.full()]
		if old == nil {
			if other := byEnv[k.env]; other != nil {
				return fmt.Errorf("config: backend %s: key %s: variable %s already overrides %s", backend, k.name, k.env, other.full())
			}
			// Declared keys are grouped by backend, backends sorted by name,
			// keys in declaration order, after the shared terminal keys and
			// before the keys of other sections (tool_output.max_bytes, the
			// approval keys).
			at := slices.IndexFunc(table, func(o *keyInfo) bool {
				return o.section != "terminal" || (o.field == fieldDeclared && o.owners[0] > backend)
			})
			if at < 0 {
				at = len(table)
			}
			table = slices.Insert(table, at, k)
			byFull[k.full()], byEnv[k.env] = k, k
			continue
		}
		if old.kind != k.kind {
			by := "the shared configuration"
			if old.field == fieldDeclared {
				by = "backend " + strings.Join(old.owners, ", ")
			}
			return fmt.Errorf("config: backend %s: key %s: declared as %s, but %s declares it as %s",
				backend, k.name, k.kind.noun(), by, old.kind.noun())
		}
		if old.field != fieldDeclared {
			continue // a shared key: its own definition applies
		}
		if old.env != k.env {
			return fmt.Errorf("config: backend %s: key %s uses variable %s, but backend %s declares it with %s",
				backend, k.name, k.env, strings.Join(old.owners, ", "), old.env)
		}
		if old.perCall != k.perCall {
			return fmt.Errorf("config: backend %s: key %s: PerCall %v, but backend %s declares it %v",
				backend, k.name, k.perCall, strings.Join(old.owners, ", "), old.perCall)
		}
		merged := *old
		merged.owners = append(slices.Clone(old.owners), backend)
		merged.checks = append(slices.Clone(old.checks), k.checks...)
		table[slices.Index(table, old)] = &merged
		byFull[k.full()], byEnv[k.env] = &merged, &merged
	}
	keyTable, keyByFull, keyByEnv = table, byFull, byEnv
	registered = append(registered, backend)
	return nil
}

// newDeclaredKey checks a declaration and builds its key.
func newDeclaredKey(backend string, key Key) (*keyInfo, error) {
	if !keyNameRE.MatchString(key.Name) {
		return nil, fmt.Errorf("config: backend %s: key name %q must be lower case letters, digits and underscores", backend, key.Name)
	}
	kind, ok := kindOf(key.Default)
	if !ok {
		return nil, fmt.Errorf("config: backend %s: key %s: default %#v must be a string, int, float64, bool, []string or map[string]string",
			backend, key.Name, key.Default)
	}
	def, _ := kind.convert(key.Default)
	env := key.Env
	if env == "" {
		env = "TERMINAL_" + strings.ToUpper(key.Name)
	}
	if !envNameRE.MatchString(env) {
		return nil, fmt.Errorf("config: backend %s: key %s: variable name %q must be upper case letters, digits and underscores", backend, key.Name, env)
	}
	k := &keyInfo{
		section: "terminal", name: key.Name, env: env, kind: kind, field: fieldDeclared,
		help: key.Help, def: def, owners: []string{backend}, perCall: key.PerCall,
	}
	k.rule = kindRule(k.full(), kind, "")
	if key.Help != "" {
		k.rule += ": " + key.Help
	}
	if key.Check != nil {
		check := key.Check
		k.checks = []func(any) error{func(v any) error {
			// A Check sees a copy, so it cannot change the value.
			c, _ := kind.convert(v)
			return check(c)
		}}
	}
	return k, nil
}

// PerCall reports whether the key (dotted or bare name) is read on every
// call, or by the daemon itself, rather than fixed when an environment is
// made, so that a change of it needs no new environment: terminal.timeout,
// on_timeout, max_foreground_timeout, lifetime_seconds and daemon, the
// approval keys re-read on every call (approvals.mode, approvals.deny,
// command_allowlist), and declared keys with Key.PerCall. Unknown keys are
// not.
func PerCall(name string) bool {
	k := findKey(name)
	return k != nil && k.perCall
}

// allKeys returns the current key table (shared, declared, max_bytes,
// approvals).
func allKeys() []*keyInfo {
	regMu.RLock()
	defer regMu.RUnlock()
	return slices.Clone(keyTable)
}

// findKey resolves a dotted or bare name, nil if unknown.
func findKey(name string) *keyInfo {
	n := strings.ToLower(strings.TrimSpace(name))
	regMu.RLock()
	defer regMu.RUnlock()
	if k, ok := keyByFull[n]; ok {
		return k
	}
	if !strings.Contains(n, ".") {
		return keyByFull["terminal."+n]
	}
	return nil
}

// BackendNames returns the backend names terminal.backend accepts: builtIn
// are the registered backends, sorted; missing are the contract's names
// that are not built in, in contract order.
func BackendNames() (builtIn, missing []string) {
	regMu.RLock()
	builtIn = slices.Clone(registered)
	regMu.RUnlock()
	sort.Strings(builtIn)
	for _, n := range contractBackends {
		if !slices.Contains(builtIn, n) {
			missing = append(missing, n)
		}
	}
	return builtIn, missing
}

// isBuiltIn reports whether backend name is registered.
func isBuiltIn(name string) bool {
	regMu.RLock()
	defer regMu.RUnlock()
	return slices.Contains(registered, name)
}

// backendChoices describes the accepted backend names for messages.
func backendChoices() string {
	builtIn, missing := BackendNames()
	s := "built in: none"
	if len(builtIn) > 0 {
		s = "built in: " + strings.Join(builtIn, ", ")
	}
	if len(missing) > 0 {
		s += "; in the contract but not in this build: " + strings.Join(missing, ", ")
	}
	return s
}

// checkBackend accepts a registered backend or a contract name.
func checkBackend(v any) error {
	name := v.(string)
	if isBuiltIn(name) || slices.Contains(contractBackends[:], name) {
		return nil
	}
	builtIn, missing := BackendNames()
	msg := "unknown backend"
	if s := suggest(name, append(builtIn, missing...), ""); s != "" {
		msg += ", did you mean " + s + "?"
	}
	return fmt.Errorf("%s (%s)", msg, backendChoices())
}

// missingBackendOf returns the contract backend a bare key name belongs to
// by its prefix ("modal_image" -> "modal") when that backend is not built
// in, else "".
func missingBackendOf(name string) string {
	_, missing := BackendNames()
	for _, b := range missing {
		if strings.HasPrefix(name, b+"_") {
			return b
		}
	}
	return ""
}

// KeyDoc describes one accepted key, for listings such as
// `berth config keys` and `berth doctor`.
type KeyDoc struct {
	Key      string   // dotted name, e.g. "terminal.ssh_port"
	Env      string   // overriding variable, "" if none
	Default  string   // the default, formatted like Config.Get
	Help     string   // one line
	Backends []string // the backends declaring the key; nil for a shared key
}

// Describe returns every accepted key in the order of Keys.
func Describe() []KeyDoc {
	ks := allKeys()
	def := defaultTerminal()
	out := make([]KeyDoc, len(ks))
	for i, k := range ks {
		d := KeyDoc{Key: k.full(), Env: k.env, Help: k.help, Backends: slices.Clone(k.owners)}
		switch k.field {
		case fieldMaxBytes:
			d.Default = formatValue(DefaultMaxOutputChars)
		case fieldConfig:
			d.Default = formatValue(k.def)
		default:
			d.Default = formatValue(def.get(k))
		}
		out[i] = d
	}
	return out
}
