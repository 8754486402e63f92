// Package config holds berth's settings: the `terminal:` section of a
// Hermes-compatible YAML file, merged with TERMINAL_* environment variables
// and command-line flags, plus the berth home directory.
//
// Keys come from two places. The keys every backend shares (backend,
// timeout, container_cpu, ...) are typed fields of Terminal. A key only one
// backend reads (docker_image, ssh_host, modal_image, ...) is declared by
// that backend as a Key in its backend.Registration, and read with the
// accessors Terminal.String, Int, Float, Bool, List and Map. Both kinds
// work the same way in the file, in TERMINAL_* variables, in flags, in
// `berth config get/set` and in error messages.
package config

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// Terminal is the merged `terminal:` configuration. The typed fields are
// the keys every backend shares; field names follow the YAML keys. The
// values of keys declared by backends are kept inside and read with the
// accessors (String, Int, ...), written with Set.
//
// A Terminal is a value: copies are independent (Set never changes a
// copy's values).
type Terminal struct {
	Backend                string   `yaml:"backend"`
	Cwd                    string   `yaml:"cwd"` // "" = backend default ("." local, "~" ssh, "/root" containers)
	Timeout                int      `yaml:"timeout"`
	LifetimeSeconds        int      `yaml:"lifetime_seconds"`
	ContainerCPU           float64  `yaml:"container_cpu"`
	ContainerMemory        int      `yaml:"container_memory"` // MB
	ContainerDisk          int      `yaml:"container_disk"`   // MB
	ContainerPersistent    bool     `yaml:"container_persistent"`
	DockerForwardEnv       []string `yaml:"docker_forward_env"` // every container backend forwards these
	DockerNetwork          bool     `yaml:"docker_network"`     // false = no network, on every container backend
	PersistentShell        bool     `yaml:"persistent_shell"`
	DaemonTermGraceSeconds float64  `yaml:"daemon_term_grace_seconds"`
	EnvPassthrough         []string `yaml:"env_passthrough"`
	MaxForegroundTimeout   int      `yaml:"max_foreground_timeout"` // berth: TERMINAL_MAX_FOREGROUND_TIMEOUT, 600
	ShareEnvironment       bool     `yaml:"share_environment"`      // berth: one environment for every MCP session
	OnTimeout              string   `yaml:"on_timeout"`             // berth: kill or background, TERMINAL_ON_TIMEOUT
	Daemon                 bool     `yaml:"daemon"`                 // berth: exec and shell run through a background berth
	WarmPool               int      `yaml:"warm_pool"`              // berth: environments kept started and idle for the next task, TERMINAL_WARM_POOL

	// values holds the keys declared by backends that were set (file,
	// environment, flag or Set); an absent key reads as its declared
	// default. Never written in place: Set replaces the map, so copies of
	// a Terminal do not share changes.
	values map[string]any `yaml:"-"`
}

// DefaultImage is the image the reference uses for every container backend.
const DefaultImage = "nikolaik/python-nodejs:python3.11-nodejs20"

// defaultTerminal returns the shared keys at their contract defaults; the
// declared keys read as their declared defaults.
func defaultTerminal() Terminal {
	return Terminal{
		Backend:                "local",
		Timeout:                180,
		LifetimeSeconds:        300,
		ContainerCPU:           1,
		ContainerMemory:        5120,
		ContainerDisk:          51200,
		ContainerPersistent:    true,
		DockerForwardEnv:       []string{},
		DockerNetwork:          true,
		PersistentShell:        true,
		DaemonTermGraceSeconds: 2,
		EnvPassthrough:         []string{},
		MaxForegroundTimeout:   600,
		OnTimeout:              "kill",
		Daemon:                 true,
	}
}

// String returns the value of the string key name ("modal_image" or
// "terminal.modal_image"): the value set, else the declared default, else
// "" for a name nobody declared. Shared keys (backend, cwd) work too. It
// panics if name is a key of another kind, which is a programming error.
func (t Terminal) String(name string) string {
	v, _ := t.lookup(name, kindString).(string)
	return v
}

// Int returns the value of the whole-number key name, like String.
func (t Terminal) Int(name string) int {
	v, _ := t.lookup(name, kindInt).(int)
	return v
}

// Float returns the value of the number key name, like String.
func (t Terminal) Float(name string) float64 {
	v, _ := t.lookup(name, kindFloat).(float64)
	return v
}

// Bool returns the value of the true/false key name, like String.
func (t Terminal) Bool(name string) bool {
	v, _ := t.lookup(name, kindBool).(bool)
	return v
}

// List returns a copy of the value of the list key name, like String
// (nil for a name nobody declared).
func (t Terminal) List(name string) []string {
	v, _ := t.lookup(name, kindList).([]string)
	return slices.Clone(v)
}

// Map returns a copy of the value of the mapping key name, like String
// (nil for a name nobody declared).
func (t Terminal) Map(name string) map[string]string {
	v, _ := t.lookup(name, kindMap).(map[string]string)
	return maps.Clone(v)
}

// lookup returns the effective value of the terminal key name, nil if no
// such key is declared. It panics when the key is of another kind than
// want.
func (t Terminal) lookup(name string, want valueKind) any {
	k := findKey(name)
	if k == nil || k.section != "terminal" {
		return nil
	}
	if k.kind != want {
		panic(fmt.Sprintf("config: %s holds %s; read it with Terminal.%s, not Terminal.%s",
			k.full(), k.kind.noun(), k.kind.accessor(), want.accessor()))
	}
	return t.get(k)
}

// get returns the effective value of terminal key k.
func (t Terminal) get(k *keyInfo) any {
	if k.field >= 0 {
		return fieldValue(reflect.ValueOf(t).Field(k.field), k.kind)
	}
	if v, ok := t.values[k.name]; ok {
		return v
	}
	return k.def
}

// put stores the typed value v of terminal key k, copying the value map so
// that copies of t keep theirs.
func (t *Terminal) put(k *keyInfo, v any) {
	if k.field >= 0 {
		f := reflect.ValueOf(t).Elem().Field(k.field)
		f.Set(reflect.ValueOf(v).Convert(f.Type()))
		return
	}
	m := make(map[string]any, len(t.values)+1)
	maps.Copy(m, t.values)
	m[k.name] = v
	t.values = m
}

// Set sets the terminal key name (bare or "terminal."-dotted; shared or
// declared by a backend) to v, checked like a value from the file: v must
// be of the key's kind (string, int, float64 — an int is accepted too —,
// bool, []string or map[string]string) and pass its checks. It lets a Go
// caller build a configuration without a file:
//
//	cfg := config.Default()
//	if err := cfg.Terminal.Set("docker_image", "alpine:3.20"); err != nil { ... }
//
// Set copies lists and maps, and never changes other copies of t.
func (t *Terminal) Set(name string, v any) error {
	k, err := lookupKey(name)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if k.section != "terminal" {
		return fmt.Errorf("config: %s is not a terminal key (tool_output.max_bytes is Config.MaxOutputChars; the approval keys are Config.Approvals and Config.CommandAllowlist)", k.full())
	}
	tv, ok := k.kind.convert(v)
	if !ok {
		return fmt.Errorf("config: %s = %#v: a %T where %s belongs", k.full(), v, v, k.kind.noun())
	}
	if k.name == "backend" {
		tv = strings.ToLower(strings.TrimSpace(tv.(string)))
	}
	if p := k.validate(tv); p != "" {
		return fmt.Errorf("config: %s %s: %s", k.full(), k.shown(formatValue(tv)), p)
	}
	t.put(k, tv)
	return nil
}
