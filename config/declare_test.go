package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The fake backends of these tests declare their keys the way a backend's
// registration does (backend.Register calls Declare): "fake" one key of
// every kind, "fake2" a key shared with "fake" plus a shared key.
var fakeKeys = []Key{
	{Name: "fake_image", Default: "img:1", Help: "image of the fake backend",
		Check: func(v any) error {
			if strings.TrimSpace(v.(string)) == "" {
				return errors.New("must name an image, e.g. img:1")
			}
			return nil
		}},
	{Name: "fake_port", Default: 22, Help: "port of the fake host", Check: func(v any) error {
		if n := v.(int); n < 1 || n > 65535 {
			return errors.New("must be a whole number from 1 to 65535")
		}
		return nil
	}},
	{Name: "fake_ratio", Default: 0.5, Help: "a fraction", PerCall: true, Check: func(v any) error {
		if f := v.(float64); f < 0 || f > 1 {
			return fmt.Errorf("must be from 0 to 1, not %v", f)
		}
		return nil
	}},
	{Name: "fake_flag", Default: true, Help: "a switch"},
	{Name: "fake_mounts", Default: []string{"/a:/b"}, Help: `mounts, each "host:container"`, Check: func(v any) error {
		for _, m := range v.([]string) {
			if !strings.Contains(m, ":") {
				return fmt.Errorf("mount %q lacks a colon", m)
			}
		}
		return nil
	}},
	{Name: "fake_env", Env: "FAKE_ENV_JSON", Default: map[string]string(nil), Help: "variables set in the fake"},
}

var fake2Keys = []Key{
	{Name: "fake_image", Default: "other:2", Help: "ignored: fake declared it first", Check: func(v any) error {
		if strings.Contains(v.(string), " ") {
			return errors.New("must not contain spaces")
		}
		return nil
	}},
	{Name: "container_cpu", Default: 4.0, Help: "shared: the shared definition applies"},
}

func init() {
	if err := Declare("fake", fakeKeys); err != nil {
		panic(err)
	}
	if err := Declare("fake2", fake2Keys); err != nil {
		panic(err)
	}
}

func mustSet(t *testing.T, term *Terminal, name string, v any) {
	t.Helper()
	if err := term.Set(name, v); err != nil {
		t.Fatalf("Set(%s): %v", name, err)
	}
}

func TestDeclaredKeysInTable(t *testing.T) {
	keys := Keys()
	idx := func(k string) int {
		for i, x := range keys {
			if x == k {
				return i
			}
		}
		t.Fatalf("Keys() lacks %s: %v", k, keys)
		return -1
	}
	if !(idx("terminal.share_environment") < idx("terminal.fake_image") && idx("terminal.fake_env") < idx("tool_output.max_bytes")) {
		t.Errorf("order: %v", keys)
	}
	if n := strings.Count(strings.Join(keys, " "), "terminal.fake_image "); n != 1 {
		t.Errorf("fake_image listed %d times", n)
	}
	if n := strings.Count(strings.Join(keys, " "), "terminal.container_cpu "); n != 1 {
		t.Errorf("container_cpu listed %d times", n)
	}
	docs := map[string]KeyDoc{}
	for _, d := range Describe() {
		docs[d.Key] = d
	}
	want := map[string]KeyDoc{
		"terminal.fake_image":    {Key: "terminal.fake_image", Env: "TERMINAL_FAKE_IMAGE", Default: "img:1", Help: "image of the fake backend", Backends: []string{"fake", "fake2"}},
		"terminal.fake_port":     {Key: "terminal.fake_port", Env: "TERMINAL_FAKE_PORT", Default: "22", Help: "port of the fake host", Backends: []string{"fake"}},
		"terminal.fake_env":      {Key: "terminal.fake_env", Env: "FAKE_ENV_JSON", Default: "{}", Help: "variables set in the fake", Backends: []string{"fake"}},
		"terminal.fake_mounts":   {Key: "terminal.fake_mounts", Env: "TERMINAL_FAKE_MOUNTS", Default: `["/a:/b"]`, Help: `mounts, each "host:container"`, Backends: []string{"fake"}},
		"terminal.container_cpu": {Key: "terminal.container_cpu", Env: "TERMINAL_CONTAINER_CPU", Default: "1", Help: sharedHelp["container_cpu"]},
		"terminal.backend":       {Key: "terminal.backend", Env: "TERMINAL_ENV", Default: "local", Help: sharedHelp["backend"]},
	}
	for k, w := range want {
		if diff := cmp.Diff(w, docs[k]); diff != "" {
			t.Errorf("Describe %s (-want +got):\n%s", k, diff)
		}
	}
	if len(docs) != len(keys) {
		t.Errorf("Describe has %d keys, Keys %d", len(docs), len(keys))
	}
}

func TestAccessorDefaults(t *testing.T) {
	for _, term := range []Terminal{{}, Default().Terminal} {
		if got := term.String("fake_image"); got != "img:1" {
			t.Errorf("String = %q", got)
		}
		if got := term.Int("terminal.fake_port"); got != 22 {
			t.Errorf("Int = %d", got)
		}
		if got := term.Float("fake_ratio"); got != 0.5 {
			t.Errorf("Float = %v", got)
		}
		if got := term.Bool("FAKE_FLAG"); !got {
			t.Errorf("Bool = %v", got)
		}
		if got := term.List("fake_mounts"); !cmp.Equal(got, []string{"/a:/b"}) {
			t.Errorf("List = %q", got)
		}
		if got := term.Map("fake_env"); got == nil || len(got) != 0 {
			t.Errorf("Map = %#v, want an empty map (a nil default becomes empty)", got)
		}
	}
	// Names nobody declared read as the zero value.
	var term Terminal
	if term.String("nope_image") != "" || term.Int("nope") != 0 || term.Float("nope") != 0 || term.Bool("nope") ||
		term.List("nope") != nil || term.Map("nope") != nil {
		t.Error("undeclared names must read as zero values")
	}
	// Shared keys read through the accessors too.
	d := Default().Terminal
	if d.String("backend") != "local" || d.Int("timeout") != 180 || d.Float("container_cpu") != 1 || !d.Bool("docker_network") || d.List("env_passthrough") == nil {
		t.Errorf("shared keys through accessors: %q %d %v %v", d.String("backend"), d.Int("timeout"), d.Float("container_cpu"), d.Bool("docker_network"))
	}
	// The default is not shared with the caller.
	l := term.List("fake_mounts")
	l[0] = "changed"
	if term.List("fake_mounts")[0] != "/a:/b" {
		t.Error("List returned the default itself")
	}
}

func TestAccessorKindMismatchPanics(t *testing.T) {
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(fmt.Sprint(r), "terminal.fake_port") || !strings.Contains(fmt.Sprint(r), "Terminal.Int") {
			t.Errorf("panic %v, want one naming the key and the right accessor", r)
		}
	}()
	var term Terminal
	term.String("fake_port")
}

func TestTerminalSet(t *testing.T) {
	var a Terminal
	mustSet(t, &a, "fake_image", "x:1")
	mustSet(t, &a, "terminal.fake_port", 2222)
	mustSet(t, &a, "fake_ratio", 1) // an int for a number
	mustSet(t, &a, "fake_flag", false)
	mounts := []string{"/c:/d"}
	mustSet(t, &a, "fake_mounts", mounts)
	mustSet(t, &a, "fake_env", map[string]string{"A": "1"})
	mustSet(t, &a, "timeout", 5)
	mustSet(t, &a, "backend", " Fake ")
	mounts[0] = "changed"
	if a.String("fake_image") != "x:1" || a.Int("fake_port") != 2222 || a.Float("fake_ratio") != 1 || a.Bool("fake_flag") ||
		!cmp.Equal(a.List("fake_mounts"), []string{"/c:/d"}) || a.Map("fake_env")["A"] != "1" || a.Timeout != 5 || a.Backend != "fake" {
		t.Errorf("after Set: %+v", a)
	}

	// Copies are independent.
	b := a
	mustSet(t, &b, "fake_image", "y:2")
	if a.String("fake_image") != "x:1" || b.String("fake_image") != "y:2" {
		t.Errorf("copy shares values: a %q b %q", a.String("fake_image"), b.String("fake_image"))
	}

	for _, tt := range []struct {
		name string
		v    any
		want string
	}{
		{"fake_port", "22", `terminal.fake_port = "22": a string where a whole number (int) belongs`},
		{"fake_port", 0, `terminal.fake_port "0": must be a whole number from 1 to 65535`},
		{"fake_ratio", 1.5, `terminal.fake_ratio "1.5": must be from 0 to 1, not 1.5`},
		{"fake_mounts", []string{"nocolon"}, `terminal.fake_mounts "[\"nocolon\"]": mount "nocolon" lacks a colon`},
		{"fake_image", "has space", `terminal.fake_image "has space": must not contain spaces`}, // fake2's Check
		{"fake_image", " ", `must name an image`},                                               // fake's Check
		{"fake_env", []string{"A=1"}, "where a mapping of strings"},
		{"timeout", 0, `terminal.timeout "0": out of range (terminal.timeout must be a whole number of seconds >= 1)`},
		{"backend", "dokcer", `terminal.backend "dokcer": unknown backend`},
		{"tool_output.max_bytes", 5000, "not a terminal key"},
		{"fake_imgae", "x", `did you mean terminal.fake_image?`},
	} {
		err := a.Set(tt.name, tt.v)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Set(%s, %#v) = %v, want %q", tt.name, tt.v, err, tt.want)
		}
	}
	if a.Int("fake_port") != 2222 || a.Timeout != 5 {
		t.Error("a rejected Set changed the value")
	}
}

func TestDeclareConflicts(t *testing.T) {
	before := Keys()
	for _, tt := range []struct {
		backend string
		keys    []Key
		want    string
	}{
		{"c1", []Key{{Name: "fake_port", Default: "22"}}, "key fake_port: declared as a string, but backend fake declares it as a whole number"},
		{"c2", []Key{{Name: "container_cpu", Default: 1}}, "key container_cpu: declared as a whole number (int), but the shared configuration declares it as a number"},
		{"c3", []Key{{Name: "fake_image", Default: "x", Env: "OTHER_IMAGE"}}, "uses variable OTHER_IMAGE, but backend fake, fake2 declares it with TERMINAL_FAKE_IMAGE"},
		{"c4", []Key{{Name: "c4_a", Default: "x", Env: "TERMINAL_ENV"}}, "variable TERMINAL_ENV already overrides terminal.backend"},
		{"c5", []Key{{Name: "c5_a", Default: "x"}, {Name: "c5_a", Default: "y"}}, "declares key c5_a twice"},
		{"c6", []Key{{Name: "c6_a", Default: 3.0}, {Name: "Bad-Name", Default: "y"}}, `key name "Bad-Name"`},
		{"c7", []Key{{Name: "c7_a", Default: nil}}, "default <nil> must be a string, int, float64"},
		{"c8", []Key{{Name: "c8_a", Default: int64(1)}}, "default 1 must be"},
		{"c9", []Key{{Name: "fake_ratio", Default: 0.2}}, "key fake_ratio: PerCall false, but backend fake declares it true"},
		{"fake", nil, "backend fake declared twice"},
		{"", nil, "needs a backend name"},
	} {
		err := Declare(tt.backend, tt.keys)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Declare(%s) = %v, want %q", tt.backend, err, tt.want)
		}
	}
	if !cmp.Equal(before, Keys()) {
		t.Errorf("a refused declaration changed the keys:\n%v\n%v", before, Keys())
	}
	if b, _ := BackendNames(); strings.Contains(strings.Join(b, ","), "c") {
		t.Errorf("a refused declaration registered its backend: %v", b)
	}
}

func TestBackendValidation(t *testing.T) {
	builtIn, missing := BackendNames()
	if !cmp.Equal(builtIn, []string{"fake", "fake2"}) || !cmp.Equal(missing, ContractBackends()) {
		t.Fatalf("BackendNames = %v, %v", builtIn, missing)
	}
	home, env := homeEnv(t, map[string]string{"TERMINAL_ENV": "modal"})
	_ = home
	c := mustLoad(t, LoadOptions{Getenv: envOf(env)})
	if c.Terminal.Backend != "modal" || len(c.Warnings) != 1 ||
		!strings.Contains(c.Warnings[0], "backend modal is not built into this berth (built in: fake, fake2;") {
		t.Errorf("contract backend not built in: backend %q warnings %q", c.Terminal.Backend, c.Warnings)
	}
	env["TERMINAL_ENV"] = "fake2"
	if c := mustLoad(t, LoadOptions{Getenv: envOf(env)}); c.Terminal.Backend != "fake2" || len(c.Warnings) != 0 {
		t.Errorf("registered backend: %q %q", c.Terminal.Backend, c.Warnings)
	}
	env["TERMINAL_ENV"] = "fkae"
	_, err := Load(LoadOptions{Getenv: envOf(env)})
	want := `TERMINAL_ENV="fkae": unknown backend, did you mean fake? (built in: fake, fake2; in the contract but not in this build: local, docker, ssh, singularity, modal, daytona)`
	if err == nil || err.Error() != want {
		t.Errorf("error:\n got %v\nwant %s", err, want)
	}
}
