package config

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

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

// keyInfo describes one configuration key: where it lives in the file, the
// environment variable that overrides it and how its values are checked.
type keyInfo struct {
	section string // "terminal" or "tool_output"
	name    string // key inside the section
	env     string // overriding environment variable, "" if none
	kind    valueKind
	field   int    // index of the Terminal field; -1 for tool_output.max_bytes
	rule    string // what is accepted, shown in error messages
	check   func(any) bool
	badWord string // problem reported when check fails ("out of range" if empty)
}

// full returns the dotted name, e.g. "terminal.timeout".
func (k *keyInfo) full() string { return k.section + "." + k.name }

// problem formats a parse problem with the rule of the key.
func (k *keyInfo) problem(p string) string { return p + " (" + k.rule + ")" }

const maxBytesKey = "tool_output.max_bytes"

// DefaultMaxOutputChars is the default of tool_output.max_bytes.
const DefaultMaxOutputChars = 50000

// MinMaxOutputChars is the smallest accepted tool_output.max_bytes.
const MinMaxOutputChars = 1000

var (
	allKeys   []*keyInfo          // terminal keys in field order, then tool_output.max_bytes
	keyByFull map[string]*keyInfo // dotted name -> key
)

func intMin(min int) func(any) bool { return func(v any) bool { return v.(int) >= min } }

func init() {
	examples := map[string]string{
		"docker_volumes":     `["/host/dir:/container/dir:ro"]`,
		"docker_forward_env": `["GITHUB_TOKEN"]`,
		"env_passthrough":    `["MY_TOOL_HOME"]`,
		"docker_env":         `{"KEY": "value"}`,
	}
	keyByFull = map[string]*keyInfo{}
	t := reflect.TypeFor[Terminal]()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		k := &keyInfo{section: "terminal", name: name, field: i, env: "TERMINAL_" + strings.ToUpper(name)}
		full := k.full()
		switch f.Type.Kind() {
		case reflect.String:
			k.kind = kindString
			k.rule = full + " is a string"
		case reflect.Int:
			k.kind = kindInt
			k.rule = full + " must be a whole number >= 0"
			k.check = intMin(0)
		case reflect.Float64:
			k.kind = kindFloat
			k.rule = full + " must be a number >= 0"
			k.check = func(v any) bool { return v.(float64) >= 0 }
		case reflect.Bool:
			k.kind = kindBool
			k.rule = full + " must be true or false (also accepted: 1/0, yes/no, on/off)"
		case reflect.Slice:
			k.kind = kindList
			k.rule = full + " takes a list of strings; as a variable or with config set, a JSON array such as " + examples[name]
		case reflect.Map:
			k.kind = kindMap
			k.rule = full + " takes a mapping of strings; as a variable or with config set, a JSON object such as " + examples[name]
		default:
			panic("config: unsupported Terminal field type " + f.Type.String())
		}
		switch name {
		case "backend":
			k.env = "TERMINAL_ENV"
			k.rule = "use one of " + strings.Join(Backends, ", ")
			k.badWord = "unknown backend"
			k.check = func(v any) bool { return slices.Contains(Backends, v.(string)) }
		case "timeout", "lifetime_seconds", "max_foreground_timeout":
			k.rule = full + " must be a whole number of seconds >= 1"
			k.check = intMin(1)
		case "container_memory", "container_disk":
			k.rule = full + " must be a whole number of MB > 0"
			k.check = intMin(1)
		case "ssh_port":
			k.rule = full + " must be a whole number from 1 to 65535"
			k.check = func(v any) bool { n := v.(int); return n >= 1 && n <= 65535 }
		case "container_cpu":
			k.rule = full + " must be a number of CPU cores > 0, e.g. 1 or 0.5"
			k.check = func(v any) bool { return v.(float64) > 0 }
		case "daemon_term_grace_seconds":
			k.rule = full + " must be a number of seconds >= 0, e.g. 2 or 0.5"
		}
		allKeys = append(allKeys, k)
		keyByFull[full] = k
	}
	mb := &keyInfo{
		section: "tool_output", name: "max_bytes", kind: kindInt, field: -1,
		rule: fmt.Sprintf("%s must be a whole number >= %d: a smaller limit leaves too little room "+
			"for the head and tail of the output next to the truncation notice", maxBytesKey, MinMaxOutputChars),
		check: intMin(MinMaxOutputChars),
	}
	allKeys = append(allKeys, mb)
	keyByFull[mb.full()] = mb
}

// Keys returns every key accepted by Get and Set, as dotted names
// ("terminal.backend", ..., "tool_output.max_bytes").
func Keys() []string {
	out := make([]string, len(allKeys))
	for i, k := range allKeys {
		out[i] = k.full()
	}
	return out
}

// lookupKey resolves a dotted or bare key name.
func lookupKey(name string) (*keyInfo, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	if k, ok := keyByFull[n]; ok {
		return k, nil
	}
	if !strings.Contains(n, ".") {
		if k, ok := keyByFull["terminal."+n]; ok {
			return k, nil
		}
	}
	if s := suggest(n, Keys(), "terminal."); s != "" {
		return nil, fmt.Errorf("unknown key %q (did you mean %s?)", name, s)
	}
	return nil, fmt.Errorf("unknown key %q (keys: %s)", name, strings.Join(Keys(), ", "))
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
// argument or YAML scalar) to the typed value of k. On failure it returns the
// problem ("not an integer", "unknown backend", ...) without the rule.
func (k *keyInfo) parse(raw string) (any, string) {
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
	if k.check != nil && !k.check(v) {
		if k.badWord != "" {
			return nil, k.badWord
		}
		return nil, "out of range"
	}
	return v, ""
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

// fromNode converts a YAML value node to the typed value of k. set is false
// for a null value (key present but empty), which leaves the key unchanged.
// raw is the scalar text for error messages ("" for collections).
func (k *keyInfo) fromNode(n *yaml.Node) (v any, set bool, raw string, problem string) {
	n = deref(n)
	if isNull(n) {
		return nil, false, "", ""
	}
	switch k.kind {
	case kindList:
		switch n.Kind {
		case yaml.SequenceNode:
			l := make([]string, 0, len(n.Content))
			for _, it := range n.Content {
				it = deref(it)
				if it.Kind != yaml.ScalarNode || isNull(it) {
					return nil, false, "", "list items must be strings"
				}
				l = append(l, it.Value)
			}
			return l, true, "", ""
		case yaml.ScalarNode:
			v, p := k.parse(n.Value)
			return v, p == "", n.Value, p
		}
		return nil, false, "", "not a list"
	case kindMap:
		switch n.Kind {
		case yaml.MappingNode:
			m := make(map[string]string, len(n.Content)/2)
			for i := 0; i+1 < len(n.Content); i += 2 {
				kn, vn := deref(n.Content[i]), deref(n.Content[i+1])
				if kn.Kind != yaml.ScalarNode || vn.Kind != yaml.ScalarNode {
					return nil, false, "", "keys and values must be strings"
				}
				m[kn.Value] = vn.Value
				if isNull(vn) {
					m[kn.Value] = ""
				}
			}
			return m, true, "", ""
		case yaml.ScalarNode:
			v, p := k.parse(n.Value)
			return v, p == "", n.Value, p
		}
		return nil, false, "", "not a mapping"
	}
	if n.Kind != yaml.ScalarNode {
		return nil, false, "", "a list or mapping where a single value belongs"
	}
	v, p := k.parse(n.Value)
	return v, p == "", n.Value, p
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
