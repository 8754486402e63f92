package config

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/a55dbaac/berth/output"

	"github.com/a55dbaac/berth/internal/textdist"
)

// valueKind is the type of a configuration value.
type valueKind int

const (
	kindString valueKind = iota
	kindInt
	kindFloat
	kindBool
	kindList // []string
	kindMap  // map[string]string
)

// kindOf returns the kind of a declared default, false for any other type.
func kindOf(v any) (valueKind, bool) {
	switch v.(type) {
	case string:
		return kindString, true
	case int:
		return kindInt, true
	case float64:
		return kindFloat, true
	case bool:
		return kindBool, true
	case []string:
		return kindList, true
	case map[string]string:
		return kindMap, true
	}
	return 0, false
}

// noun names the kind in messages.
func (k valueKind) noun() string {
	return [...]string{"a string", "a whole number (int)", "a number (float64)", "true or false (bool)",
		"a list of strings ([]string)", "a mapping of strings (map[string]string)"}[k]
}

// accessor is the Terminal method that reads the kind.
func (k valueKind) accessor() string {
	return [...]string{"String", "Int", "Float", "Bool", "List", "Map"}[k]
}

// convert returns v as the Go type of the kind (an int is accepted for a
// number), copying lists and maps; false if v has another type.
func (k valueKind) convert(v any) (any, bool) {
	switch k {
	case kindString:
		s, ok := v.(string)
		return s, ok
	case kindInt:
		n, ok := v.(int)
		return n, ok
	case kindFloat:
		switch x := v.(type) {
		case float64:
			return x, !math.IsNaN(x) && !math.IsInf(x, 0)
		case int:
			return float64(x), true
		}
	case kindBool:
		b, ok := v.(bool)
		return b, ok
	case kindList:
		l, ok := v.([]string)
		if ok && l == nil {
			l = []string{}
		}
		return slices.Clone(l), ok
	case kindMap:
		m, ok := v.(map[string]string)
		if ok && m == nil {
			m = map[string]string{}
		}
		return maps.Clone(m), ok
	}
	return nil, false
}

// keyInfo describes one configuration key: where it lives in the file, the
// environment variable that overrides it and how its values are checked.
type keyInfo struct {
	section string // "terminal" or "tool_output"
	name    string // key inside the section
	env     string // overriding environment variable, "" if none
	kind    valueKind
	field   int    // index of the Terminal field; fieldMaxBytes or fieldDeclared
	rule    string // what is accepted, shown in error messages
	help    string // one line for listings
	check   func(any) bool
	badWord string // problem reported when check fails ("out of range" if empty)

	// checks are further validations whose error text is the whole
	// explanation (a backend's Key.Check; the backend name check).
	checks []func(any) error
	// Declared keys only: the default and the backends declaring the key.
	// Keys of fieldConfig also have a default.
	def    any
	owners []string

	// Keys of fieldConfig only: read and write their Config field.
	getc func(*Config) any
	setc func(*Config, any)

	// perCall: read on every call (or by the daemon), not when an
	// environment is made (PerCall).
	perCall bool
}

// Field values for keys that are not Terminal fields.
const (
	fieldMaxBytes = -1 // tool_output.max_bytes, Config.MaxOutputChars
	fieldDeclared = -2 // declared by a backend, kept in Terminal.values
	fieldConfig   = -3 // another field of Config (approvals), with getc and setc
)

// shown is how an error message shows a raw value of k that was refused:
// quoted, with secret shapes redacted (an API key pasted into the wrong
// variable, a URL's password); a map's value (docker_env and the like,
// whose values are often credentials) only by its length. Agents read
// berth's stderr, so a refused value must not hand them a secret (N15).
func (k *keyInfo) shown(raw string) string {
	if k.kind == kindMap {
		return fmt.Sprintf("(%d characters, not shown: it may hold secrets)", len(raw))
	}
	return strconv.Quote(output.Redact(raw))
}

// full returns the dotted name, e.g. "terminal.timeout"; a top-level key
// (command_allowlist, section "") is its bare name.
func (k *keyInfo) full() string {
	if k.section == "" {
		return k.name
	}
	return k.section + "." + k.name
}

// problem formats a parse problem with the rule of the key.
func (k *keyInfo) problem(p string) string { return p + " (" + k.rule + ")" }

const maxBytesKey = "tool_output.max_bytes"

// DefaultMaxOutputChars is the default of tool_output.max_bytes.
const DefaultMaxOutputChars = 50000

// MinMaxOutputChars is the smallest accepted tool_output.max_bytes.
const MinMaxOutputChars = 1000

func intMin(min int) func(any) bool { return func(v any) bool { return v.(int) >= min } }

// kindRule is the generic rule of a key of kind kind named full.
func kindRule(full string, kind valueKind, example string) string {
	switch kind {
	case kindString:
		return full + " is a string"
	case kindInt:
		return full + " must be a whole number"
	case kindFloat:
		return full + " must be a number"
	case kindBool:
		return full + " must be true or false (also accepted: 1/0, yes/no, on/off)"
	case kindList:
		if example == "" {
			example = `["a", "b"]`
		}
		return full + " takes a list of strings; as a variable or with config set, a JSON array such as " + example
	default:
		if example == "" {
			example = `{"KEY": "value"}`
		}
		return full + " takes a mapping of strings; as a variable or with config set, a JSON object such as " + example
	}
}

// sharedHelp is the one-line description of each shared key.
var sharedHelp = map[string]string{
	"backend":                   "where commands run: a registered backend name",
	"cwd":                       `starting directory ("" = backend default: "." local, "~" ssh, "/root" containers)`,
	"timeout":                   "seconds before a foreground command is killed",
	"lifetime_seconds":          "seconds an idle environment is kept before cleanup",
	"container_cpu":             "CPU cores for a container or sandbox",
	"container_memory":          "memory limit of a container or sandbox, MB",
	"container_disk":            "disk limit of a container or sandbox, MB",
	"container_persistent":      "keep a container's or sandbox's filesystem across berth restarts",
	"docker_forward_env":        "names of host variables forwarded into containers and sandboxes",
	"docker_network":            "false: containers and sandboxes get no network",
	"persistent_shell":          "keep one shell per environment (cd and exports carry over)",
	"daemon_term_grace_seconds": "seconds between SIGTERM and SIGKILL when stopping a command",
	"env_passthrough":           "secret-looking variables the local backend passes through anyway",
	"max_foreground_timeout":    "largest timeout a single tool call may ask for, seconds",
	"share_environment":         "one environment for every MCP session instead of one each",
	"on_timeout":                "kill: stop a foreground command at its timeout; background: keep it running as a background process",
	"daemon":                    "berth exec and berth shell keep environments warm in a background berth (false: one process per call)",
	"max_bytes":                 "output size at which a command's output is cut to its head and tail",
}

// sharedKeys builds the keys of the Terminal fields and
// tool_output.max_bytes.
func sharedKeys() []*keyInfo {
	examples := map[string]string{
		"docker_forward_env": `["GITHUB_TOKEN"]`,
		"env_passthrough":    `["MY_TOOL_HOME"]`,
	}
	var out []*keyInfo
	t := reflect.TypeFor[Terminal]()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		k := &keyInfo{section: "terminal", name: name, field: i, env: "TERMINAL_" + strings.ToUpper(name), help: sharedHelp[name]}
		full := k.full()
		switch f.Type.Kind() {
		case reflect.String:
			k.kind = kindString
		case reflect.Int:
			k.kind = kindInt
		case reflect.Float64:
			k.kind = kindFloat
		case reflect.Bool:
			k.kind = kindBool
		case reflect.Slice:
			k.kind = kindList
		case reflect.Map:
			k.kind = kindMap
		default:
			panic("config: unsupported Terminal field type " + f.Type.String())
		}
		k.rule = kindRule(full, k.kind, examples[name])
		switch k.kind {
		case kindInt:
			k.rule = full + " must be a whole number >= 0"
			k.check = intMin(0)
		case kindFloat:
			k.rule = full + " must be a number >= 0"
			k.check = func(v any) bool { return v.(float64) >= 0 }
		}
		switch name {
		case "backend":
			k.env = "TERMINAL_ENV"
			k.rule = "use one of " + strings.Join(ContractBackends(), ", ")
			k.checks = []func(any) error{checkBackend}
		case "timeout", "lifetime_seconds", "max_foreground_timeout":
			k.rule = full + " must be a whole number of seconds >= 1"
			k.check = intMin(1)
			k.perCall = true // per call, or read by the daemon itself
		case "container_memory", "container_disk":
			k.rule = full + " must be a whole number of MB > 0"
			k.check = intMin(1)
		case "container_cpu":
			k.rule = full + " must be a number of CPU cores > 0, e.g. 1 or 0.5"
			k.check = func(v any) bool { return v.(float64) > 0 }
		case "daemon_term_grace_seconds":
			k.rule = full + " must be a number of seconds >= 0, e.g. 2 or 0.5"
		case "daemon":
			k.perCall = true // read by each caller before it reaches the daemon
		case "on_timeout":
			k.perCall = true
			k.rule = full + " is kill (stop a foreground command at its timeout, the default) or background (keep it running as a background process, followed with the process tool)"
			k.check = func(v any) bool { return v.(string) == "kill" || v.(string) == "background" }
			k.badWord = "unknown value"
		}
		out = append(out, k)
	}
	out = append(out, &keyInfo{
		section: "tool_output", name: "max_bytes", kind: kindInt, field: fieldMaxBytes, help: sharedHelp["max_bytes"],
		rule: fmt.Sprintf("%s must be a whole number >= %d: a smaller limit leaves too little room "+
			"for the head and tail of the output next to the truncation notice", maxBytesKey, MinMaxOutputChars),
		check: intMin(MinMaxOutputChars),
	})
	out = append(out, approvalKeys()...)
	return append(out, checkpointKeys()...)
}

// Keys returns every key accepted by Get and Set, as dotted names: the
// shared terminal keys, the keys declared by registered backends (grouped
// by backend, sorted by backend name), tool_output.max_bytes, then the
// approval keys (approvals.mode, approvals.timeout, approvals.deny and the
// top-level command_allowlist).
func Keys() []string {
	ks := allKeys()
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = k.full()
	}
	return out
}

// lookupKey resolves a dotted or bare key name. The error of an unknown
// key suggests the closest known one, or says which backend the key
// belongs to when that backend is in the contract but not in this build.
func lookupKey(name string) (*keyInfo, error) {
	if k := findKey(name); k != nil {
		return k, nil
	}
	n := strings.ToLower(strings.TrimSpace(name))
	if b := missingBackendOf(strings.TrimPrefix(n, "terminal.")); b != "" {
		return nil, fmt.Errorf("unknown key %q: it belongs to backend %s, which is not built into this berth", name, b)
	}
	keys := Keys()
	if s := suggest(n, keys, "terminal."); s != "" {
		return nil, fmt.Errorf("unknown key %q (did you mean %s?)", name, s)
	}
	return nil, fmt.Errorf("unknown key %q (keys: %s)", name, strings.Join(keys, ", "))
}

// suggest returns the candidate closest to name, or "" if none is close.
// Candidates are also compared with prefix stripped, so a bare "dokcer_image"
// finds "terminal.docker_image".
func suggest(name string, candidates []string, prefix string) string {
	best, bestD := "", math.MaxInt
	for _, c := range candidates {
		d := textdist.Levenshtein(name, c)
		if short, ok := strings.CutPrefix(c, prefix); ok {
			d = min(d, textdist.Levenshtein(strings.TrimPrefix(name, prefix), short))
		}
		if d < bestD {
			best, bestD = c, d
		}
	}
	limit := 2
	if len(name) > 8 {
		limit = 3
	}
	if bestD <= limit {
		return best
	}
	if len(name) >= 4 {
		for _, c := range candidates {
			if strings.Contains(c, name) {
				return c
			}
		}
	}
	return ""
}

// parseBool accepts true/false/1/0/yes/no/on/off in any case.
func parseBool(s string) (bool, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "1", "yes", "on":
		return true, true
	case "false", "0", "no", "off":
		return false, true
	}
	return false, false
}

// parse converts a raw string (flag, environment variable, config set
// argument or YAML scalar) to the typed value of k and validates it. On
// failure it returns the problem with what is accepted, e.g. "not an
// integer (terminal.timeout must be ...)".
func (k *keyInfo) parse(raw string) (any, string) {
	v, p := k.parseKind(raw)
	if p != "" {
		return nil, k.problem(p)
	}
	if p := k.validate(v); p != "" {
		return nil, p
	}
	return v, ""
}

// parseKind converts raw to the typed value of k without validating it; on
// failure it returns the problem without the rule.
func (k *keyInfo) parseKind(raw string) (any, string) {
	var v any
	switch k.kind {
	case kindString:
		if k.name == "backend" {
			v = strings.ToLower(strings.TrimSpace(raw))
		} else {
			v = raw
		}
	case kindInt:
		n, err := strconv.Atoi(strings.TrimSpace(raw))
		if err != nil {
			return nil, "not an integer"
		}
		v = n
	case kindFloat:
		f, err := strconv.ParseFloat(strings.TrimSpace(raw), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, "not a number"
		}
		v = f
	case kindBool:
		b, ok := parseBool(raw)
		if !ok {
			return nil, "not a boolean"
		}
		v = b
	case kindList:
		var l []string
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			return nil, "not a JSON array of strings"
		}
		if l == nil {
			l = []string{}
		}
		v = l
	case kindMap:
		m, ok := parseJSONObject(raw)
		if !ok {
			return nil, "not a JSON object of strings"
		}
		v = m
	}
	return v, ""
}

// validate checks a typed value of k against its rules; it returns "" or
// the problem with what is accepted.
func (k *keyInfo) validate(v any) string {
	if k.check != nil && !k.check(v) {
		if k.badWord != "" {
			return k.problem(k.badWord)
		}
		return k.problem("out of range")
	}
	for _, check := range k.checks {
		if err := check(v); err != nil {
			return err.Error()
		}
	}
	return ""
}

// parseJSONObject decodes a JSON object whose values are strings, numbers or
// booleans (numbers and booleans are kept as written).
func parseJSONObject(raw string) (map[string]string, bool) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return nil, false
	}
	out := make(map[string]string, len(m))
	for key, r := range m {
		var s string
		if err := json.Unmarshal(r, &s); err == nil {
			out[key] = s
			continue
		}
		t := strings.TrimSpace(string(r))
		if t == "true" || t == "false" {
			out[key] = t
			continue
		}
		var n json.Number
		if err := json.Unmarshal(r, &n); err == nil {
			out[key] = n.String()
			continue
		}
		return nil, false
	}
	return out, true
}

// fromNode converts a YAML value node to the typed value of k and
// validates it. set is false for a null value (key present but empty),
// which leaves the key unchanged. raw is the scalar text for error messages
// ("" for collections); problem, if any, includes what is accepted.
func (k *keyInfo) fromNode(n *yaml.Node) (v any, set bool, raw string, problem string) {
	n = deref(n)
	if isNull(n) {
		return nil, false, "", ""
	}
	if n.Kind == yaml.ScalarNode {
		v, p := k.parse(n.Value)
		return v, p == "", n.Value, p
	}
	switch {
	case k.kind == kindList && n.Kind == yaml.SequenceNode:
		l := make([]string, 0, len(n.Content))
		for _, it := range n.Content {
			it = deref(it)
			if it.Kind != yaml.ScalarNode || isNull(it) {
				return nil, false, "", k.problem("list items must be strings")
			}
			l = append(l, it.Value)
		}
		v = l
	case k.kind == kindMap && n.Kind == yaml.MappingNode:
		m := make(map[string]string, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			kn, vn := deref(n.Content[i]), deref(n.Content[i+1])
			if kn.Kind != yaml.ScalarNode || vn.Kind != yaml.ScalarNode {
				return nil, false, "", k.problem("keys and values must be strings")
			}
			m[kn.Value] = vn.Value
			if isNull(vn) {
				m[kn.Value] = ""
			}
		}
		v = m
	case k.kind == kindList:
		return nil, false, "", k.problem("not a list")
	case k.kind == kindMap:
		return nil, false, "", k.problem("not a mapping")
	default:
		return nil, false, "", k.problem("a list or mapping where a single value belongs")
	}
	if p := k.validate(v); p != "" {
		return nil, false, "", p
	}
	return v, true, "", ""
}

// deref follows YAML aliases.
func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// isNull reports whether n is a YAML null (empty, ~ or null).
func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

// formatValue formats a typed value for printing: scalars plain, lists and
// maps as JSON.
func formatValue(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int:
		return strconv.Itoa(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	case []string:
		if x == nil {
			x = []string{}
		}
		b, _ := marshalJSON(x)
		return b
	case map[string]string:
		if x == nil {
			x = map[string]string{}
		}
		b, _ := marshalJSON(x)
		return b
	}
	return fmt.Sprint(v)
}

func marshalJSON(v any) (string, error) {
	var sb strings.Builder
	enc := json.NewEncoder(&sb)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(sb.String(), "\n"), nil
}

// yamlText formats a typed value as YAML text that fits on one line:
// plain or quoted scalars, flow-style lists and maps.
func yamlText(v any) string {
	switch x := v.(type) {
	case string:
		return yamlString(x)
	case []string:
		parts := make([]string, len(x))
		for i, s := range x {
			parts[i] = jsonQuote(s)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]string:
		names := make([]string, 0, len(x))
		for name := range x {
			names = append(names, name)
		}
		sort.Strings(names)
		parts := make([]string, len(names))
		for i, name := range names {
			parts[i] = jsonQuote(name) + ": " + jsonQuote(x[name])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return formatValue(v)
}

// yamlString returns s as a one-line YAML scalar, quoted only when needed.
func yamlString(s string) string {
	if out, err := yaml.Marshal(s); err == nil {
		t := strings.TrimSuffix(string(out), "\n")
		if !strings.Contains(t, "\n") && t != "" {
			return t
		}
	}
	return jsonQuote(s)
}

// jsonQuote returns s as a JSON string, which is also a valid YAML
// double-quoted scalar.
func jsonQuote(s string) string {
	q, _ := marshalJSON(s)
	return q
}
