package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/a55dbaac/berth/internal/berthhome"
)

// LoadOptions are the inputs of Load besides the config file itself.
type LoadOptions struct {
	// ConfigPath is the value of the --config flag, "" if not given.
	ConfigPath string
	// Flags maps a key to the raw value given on the command line, e.g.
	// {"backend": "docker", "timeout": "5", "cwd": "/tmp"}. Keys are terminal
	// keys, bare or dotted ("terminal.timeout"), or "tool_output.max_bytes";
	// values are parsed like the environment variables.
	Flags map[string]string
	// Getenv reads the process environment; nil means os.Getenv. Tests
	// inject their own.
	Getenv func(string) string
}

// Config is the merged configuration: defaults, then the config file, then
// TERMINAL_* environment variables (the process environment, else .env),
// then command-line flags.
type Config struct {
	// Path is the config file that was read, absolute; "" if there was none
	// at the default location.
	Path string
	// Home is the berth home directory (BERTH_HOME, else ~/.berth), absolute.
	// Load does not create it.
	Home string
	// Terminal is the merged terminal configuration.
	Terminal Terminal
	// MaxOutputChars is tool_output.max_bytes: the size at which a command's
	// output is cut to its head and tail.
	MaxOutputChars int
	// Sources maps every dotted key ("terminal.backend",
	// "tool_output.max_bytes") to where its value came from: "default",
	// "file", "env:TERMINAL_X" (process environment or .env) or "flag".
	Sources map[string]string
	// Warnings are problems that did not stop loading: unknown or duplicate
	// keys in the file, unreadable .env lines.
	Warnings []string
	// DotEnv holds the values of the .env file beside the config file.
	DotEnv map[string]string
	// Approvals is the approvals: section (mode, timeout, deny).
	Approvals Approvals
	// CommandAllowlist is the top-level command_allowlist (Hermes' key):
	// patterns of commands that run without asking. "always" answers are
	// added to it in the file (see Set).
	CommandAllowlist []string
	// Checkpoints is the checkpoints: section: bounds on the checkpoints
	// kept of an environment, and the MCP environment tool.
	Checkpoints Checkpoints

	getenv func(string) string
}

// Getenv returns the variable name from the process environment or, when it
// is unset or empty there, from the .env file.
func (c *Config) Getenv(name string) string {
	get := c.getenv
	if get == nil {
		get = os.Getenv
	}
	if v := get(name); v != "" {
		return v
	}
	return c.DotEnv[name]
}

// HomeDir returns the berth home: $BERTH_HOME if set (a leading ~ expanded),
// else ~/.berth; always absolute. getenv nil means os.Getenv.
func HomeDir(getenv func(string) string) (string, error) {
	return berthhome.Dir(getenv)
}

// ResolvePath returns the config file to use: configFlag (the --config
// value) if not empty, else $BERTH_CONFIG, else $BERTH_HOME/config.yaml
// (BERTH_HOME defaults to ~/.berth). explicit is true for the first two,
// where a missing file is an error. A leading ~ is expanded and the path
// made absolute. getenv nil means os.Getenv.
func ResolvePath(configFlag string, getenv func(string) string) (path string, explicit bool, err error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	for _, c := range []struct{ val, from string }{{configFlag, "--config"}, {getenv("BERTH_CONFIG"), "BERTH_CONFIG"}} {
		if c.val == "" {
			continue
		}
		p, err := berthhome.Expand(c.val, getenv)
		if err != nil {
			return "", true, fmt.Errorf("%s %q: %w", c.from, c.val, err)
		}
		p, err = filepath.Abs(p)
		return p, true, err
	}
	home, err := HomeDir(getenv)
	if err != nil {
		return "", false, err
	}
	return filepath.Join(home, "config.yaml"), false, nil
}

// Load reads the configuration: the file chosen by ResolvePath, the .env
// file beside it, TERMINAL_*, BERTH_APPROVALS_* and BERTH_CHECKPOINTS_*
// variables and
// opts.Flags, in increasing order of precedence. Every malformed value is
// reported, each error naming the key or variable, the value and what is
// accepted; approvals.mode, approvals.deny and command_allowlist must pass
// the checks the approval engine registered (AddCheck). Sections of the file other than terminal:,
// tool_output:, approvals: and checkpoints: (and keys other than
// command_allowlist at the top level) are ignored, so a Hermes config
// file works as is; unknown keys inside those sections become Warnings.
func Load(opts LoadOptions) (*Config, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	home, err := HomeDir(getenv)
	if err != nil {
		return nil, err
	}
	path, explicit, err := ResolvePath(opts.ConfigPath, getenv)
	if err != nil {
		return nil, err
	}
	keys := allKeys()
	c := newConfig(home, keys)
	c.getenv = getenv

	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		c.Path = path
	case errors.Is(err, fs.ErrNotExist) && explicit:
		from := "--config"
		if opts.ConfigPath == "" {
			from = "BERTH_CONFIG"
		}
		return nil, fmt.Errorf("config file %s (from %s) does not exist", path, from)
	case errors.Is(err, fs.ErrNotExist):
		data = nil
	default:
		return nil, fmt.Errorf("read config file: %w", err)
	}

	dot, warns, err := readDotEnv(filepath.Join(filepath.Dir(path), ".env"))
	if err != nil {
		return nil, err
	}
	c.DotEnv = dot
	c.Warnings = append(c.Warnings, warns...)

	var errs []error
	if c.Path != "" {
		errs = append(errs, c.applyFile(data, keys)...)
	}
	for _, k := range keys {
		if k.env == "" {
			continue
		}
		raw := c.Getenv(k.env)
		if raw == "" {
			continue
		}
		v, p := k.parse(raw)
		if p != "" {
			from := ""
			if getenv(k.env) == "" {
				from = " (from " + filepath.Join(filepath.Dir(path), ".env") + ")"
			}
			errs = append(errs, fmt.Errorf("%s=%s%s: %s", k.env, k.shown(raw), from, p))
			continue
		}
		c.assign(k, v)
		c.Sources[k.full()] = "env:" + k.env
	}
	flagNames := make([]string, 0, len(opts.Flags))
	for name := range opts.Flags {
		flagNames = append(flagNames, name)
	}
	sort.Strings(flagNames)
	for _, name := range flagNames {
		raw := opts.Flags[name]
		k, err := lookupKey(name)
		if err != nil {
			errs = append(errs, fmt.Errorf("flag: %w", err))
			continue
		}
		v, p := k.parse(raw)
		if p != "" {
			errs = append(errs, fmt.Errorf("flag %s %s: %s", k.full(), k.shown(raw), p))
			continue
		}
		c.assign(k, v)
		c.Sources[k.full()] = "flag"
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if b, src := c.Terminal.Backend, c.Sources["terminal.backend"]; src != "default" && !isBuiltIn(b) {
		c.Warnings = append(c.Warnings, fmt.Sprintf("terminal.backend %q (from %s): backend %s is not built into this berth (%s); commands will fail until you choose a built-in one",
			b, src, b, backendChoices()))
	}
	return c, nil
}

// newConfig returns a configuration with every default and home as its
// home directory.
func newConfig(home string, keys []*keyInfo) *Config {
	c := &Config{
		Home:             home,
		Terminal:         defaultTerminal(),
		MaxOutputChars:   DefaultMaxOutputChars,
		Sources:          make(map[string]string, len(keys)),
		Approvals:        defaultApprovals(),
		CommandAllowlist: []string{},
		Checkpoints:      defaultCheckpoints(),
	}
	for _, k := range keys {
		c.Sources[k.full()] = "default"
	}
	return c
}

// Default returns the configuration with every default and nothing read:
// no config file, no .env, no TERMINAL_* variable. Home is the berth home
// (BERTH_HOME, else ~/.berth), or "" when neither BERTH_HOME nor a home
// directory can be found. It is the front door for Go programs: adjust the
// result with Terminal.Set or its fields, then hand it to manager.New.
//
// Config.Getenv of the result reads the process environment (credentials
// such as DOCKER_HOST or MODAL_TOKEN_ID), with no .env.
func Default() *Config {
	home, err := HomeDir(nil)
	if err != nil {
		home = ""
	}
	return newConfig(home, allKeys())
}

// applyFile merges the terminal:, tool_output:, approvals: and checkpoints:
// sections and the top-level command_allowlist of the YAML text data into
// c.
func (c *Config) applyFile(data []byte, keys []*keyInfo) []error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return []error{fmt.Errorf("config file %s: %w", c.Path, err)}
	}
	root := docRoot(&doc)
	if isNull(root) {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		return []error{fmt.Errorf("config file %s: the top level must be a mapping of sections (terminal:, ...)", c.Path)}
	}
	var errs []error
	for _, k := range keys {
		if k.section != "" {
			continue
		}
		// A top-level key: only the keys berth knows are read there, the
		// rest of the file belongs to other programs (Hermes).
		if _, vn := lookupNode(root, k.name); vn != nil {
			errs = append(errs, c.applyValue(k, vn)...)
		}
	}
	for _, section := range []string{"terminal", "tool_output", "approvals", "checkpoints"} {
		_, sec := lookupNode(root, section)
		sec = deref(sec)
		if isNull(sec) {
			continue
		}
		if sec.Kind != yaml.MappingNode {
			errs = append(errs, fmt.Errorf("%s in %s (line %d): must be a mapping of keys", section, c.Path, sec.Line))
			continue
		}
		seen := map[string]bool{}
		var names []string
		for _, k := range keys {
			if k.section == section {
				names = append(names, k.name)
			}
		}
		for i := 0; i+1 < len(sec.Content); i += 2 {
			kn, vn := deref(sec.Content[i]), sec.Content[i+1]
			name := kn.Value
			var k *keyInfo
			if kn.Kind == yaml.ScalarNode && !strings.Contains(name, ".") {
				k = findKey(section + "." + name)
			}
			if k == nil {
				w := fmt.Sprintf("%s.%s in %s (line %d): unknown key, ignored", section, name, c.Path, kn.Line)
				if b := missingBackendOf(name); b != "" && section == "terminal" {
					w = fmt.Sprintf("%s.%s in %s (line %d): a key of backend %s, which is not built into this berth; ignored", section, name, c.Path, kn.Line, b)
				} else if s := suggest(name, names, ""); s != "" {
					w += " (did you mean " + s + "?)"
				}
				c.Warnings = append(c.Warnings, w)
				continue
			}
			if seen[name] {
				c.Warnings = append(c.Warnings, fmt.Sprintf("%s in %s (line %d): key given more than once; the last one wins", k.full(), c.Path, kn.Line))
			}
			seen[name] = true
			errs = append(errs, c.applyValue(k, vn)...)
		}
	}
	return errs
}

// applyValue merges the value node vn of key k from the file into c.
func (c *Config) applyValue(k *keyInfo, vn *yaml.Node) []error {
	v, set, raw, p := k.fromNode(vn)
	if p != "" {
		if raw != "" || deref(vn).Kind == yaml.ScalarNode {
			return []error{fmt.Errorf("%s %s in %s: %s", k.full(), k.shown(raw), c.Path, p)}
		}
		return []error{fmt.Errorf("%s in %s (line %d): %s", k.full(), c.Path, vn.Line, p)}
	}
	if set {
		c.assign(k, v)
		c.Sources[k.full()] = "file"
	}
	return nil
}

// docRoot returns the top node of a parsed document, nil if it is empty.
func docRoot(doc *yaml.Node) *yaml.Node {
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return nil
		}
		return doc.Content[0]
	}
	if doc.Kind == 0 {
		return nil
	}
	return doc
}

// lookupNode returns the last key node named name in mapping m and its value.
func lookupNode(m *yaml.Node, name string) (key, val *yaml.Node) {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := deref(m.Content[i]); k.Kind == yaml.ScalarNode && k.Value == name {
			key, val = m.Content[i], m.Content[i+1]
		}
	}
	return key, val
}

// assign stores the typed value v of key k.
func (c *Config) assign(k *keyInfo, v any) {
	switch k.field {
	case fieldMaxBytes:
		c.MaxOutputChars = v.(int)
	case fieldConfig:
		k.setc(c, v)
	default:
		c.Terminal.put(k, v)
	}
}

// value returns the effective value of key k.
func (c *Config) value(k *keyInfo) any {
	switch k.field {
	case fieldMaxBytes:
		return c.MaxOutputChars
	case fieldConfig:
		return k.getc(c)
	}
	return c.Terminal.get(k)
}

// fieldValue returns the value of a Terminal field as the Go type of kind.
func fieldValue(f reflect.Value, kind valueKind) any {
	switch kind {
	case kindString:
		return f.String()
	case kindInt:
		return int(f.Int())
	case kindFloat:
		return f.Float()
	case kindBool:
		return f.Bool()
	case kindList:
		return f.Convert(reflect.TypeFor[[]string]()).Interface()
	default:
		return f.Convert(reflect.TypeFor[map[string]string]()).Interface()
	}
}

// Get returns the effective value of a dotted key ("terminal.backend",
// "terminal.docker_volumes", "tool_output.max_bytes", "approvals.mode",
// "command_allowlist"; a bare terminal key such as "backend" also works)
// formatted for printing: scalars plain, lists and maps as JSON.
func (c *Config) Get(key string) (string, error) {
	k, err := lookupKey(key)
	if err != nil {
		return "", err
	}
	return formatValue(c.value(k)), nil
}

// Source returns where the value of key came from ("default", "file",
// "env:TERMINAL_X" or "flag"); key is resolved like in Get.
func (c *Config) Source(key string) (string, error) {
	k, err := lookupKey(key)
	if err != nil {
		return "", err
	}
	return c.Sources[k.full()], nil
}
