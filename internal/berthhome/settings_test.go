package berthhome

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSettings(t *testing.T) {
	env := map[string]string{"HOME": "/home/u", "BERTH_CONFIG": "~/proj/berth.yaml"}
	f, err := Settings("", "", func(k string) string { return env[k] })
	if err != nil || f.Home != "/home/u/.berth" || f.Config != "/home/u/proj/berth.yaml" || f.DotEnv != "/home/u/proj/.env" {
		t.Fatalf("%+v %v", f, err)
	}
	// A config file in the home is the home's.
	f, err = Settings("/b", "/b/config.yaml", func(string) string { return "" })
	if err != nil || f.Home != "/b" || f.Config != "" || f.DotEnv != "" {
		t.Fatalf("%+v %v", f, err)
	}
}

func TestInBind(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "a", "b", ".berth")
	f := Files{Home: home}
	// A home that does not exist is made when make is set, not otherwise.
	ms, err := InBind(f, dir, false)
	if err != nil || len(ms) != 3 {
		t.Fatalf("%+v %v", ms, err)
	}
	if _, err := os.Stat(home); err == nil {
		t.Fatal("made without make")
	}
	ms, err = InBind(f, dir, true)
	want := []Mount{{filepath.Join(dir, "a"), "a", false}, {filepath.Join(dir, "a", "b"), "a/b", false}, {home, "a/b/.berth", true}}
	if err != nil || !slices.Equal(ms, want) {
		t.Fatalf("InBind = %+v, %v; want %+v", ms, err, want)
	}
	if _, err := os.Stat(home); err != nil {
		t.Fatal(err)
	}
	// Not in the bound directory: nothing.
	if ms, err := InBind(f, t.TempDir(), true); err != nil || len(ms) != 0 {
		t.Fatalf("outside: %+v %v", ms, err)
	}
	// The home itself bound writable: refused.
	if ms, err := InBind(f, home, true); err == nil || !strings.Contains(err.Error(), "bind it read-only") {
		t.Fatalf("the home itself bound: %+v %v", ms, err)
	}
	// A directory inside the home: berth's settings are not in it.
	os.Mkdir(filepath.Join(home, "spill"), 0o700)
	if ms, err := InBind(f, filepath.Join(home, "spill"), true); err != nil || len(ms) != 0 {
		t.Fatalf("a directory inside the home: %+v %v", ms, err)
	}
	// A config file beside its .env; without the .env, a refusal.
	cfg := filepath.Join(dir, "berth.yaml")
	os.WriteFile(cfg, nil, 0o600)
	f = Files{Home: "/elsewhere/.berth", Config: cfg, DotEnv: filepath.Join(dir, ".env")}
	if _, err := InBind(f, dir, true); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, ".env")+" does not exist") {
		t.Fatalf("no .env: %v", err)
	}
	os.WriteFile(f.DotEnv, nil, 0o600)
	ms, err = InBind(f, dir, true)
	if err != nil || !slices.Equal(ms, []Mount{{cfg, "berth.yaml", true}, {f.DotEnv, ".env", true}}) {
		t.Fatalf("config and .env: %+v %v", ms, err)
	}
	// A link in the bound directory could be re-pointed.
	real := t.TempDir()
	link := filepath.Join(dir, "link")
	os.Symlink(real, link)
	if _, err := InBind(Files{Home: filepath.Join(link, ".berth")}, dir, true); err == nil || !strings.Contains(err.Error(), "symbolic link "+link) {
		t.Fatalf("home through a link: %v", err)
	}
}
