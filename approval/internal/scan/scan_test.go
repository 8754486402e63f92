package scan

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/a55dbaac/berth/approval/internal/scan/cases"
	"github.com/a55dbaac/berth/internal/shparse"
)

// testCtx is a local machine: the user dev in a project directory, on a
// file system without symbolic links (the manager gives a local backend
// NativeResolve; these tests must not depend on this machine's files).
var testCtx = Context{Backend: "local", Cwd: "/home/dev/proj", Home: "/home/dev", BerthHome: "/home/dev/.berth", ConfigPath: "/home/dev/.berth/config.yaml",
	Resolve: func(p string) string { return p }}

// verdict is what the default policy makes of findings on a local
// backend: floor when one is on the floor, ask when any matched, else ok;
// need are the findings that decide.
func verdict(fs []Finding) (want string, need []Finding) {
	for _, f := range fs {
		if f.Rule.Level == Floor {
			need = append(need, f)
		}
	}
	switch {
	case len(need) > 0:
		return "floor", need
	case len(fs) > 0:
		return "ask", fs
	}
	return "ok", nil
}

// TestCases checks every case of every family's file (testdata/*.txt).
func TestCases(t *testing.T) {
	all, err := cases.All("testdata")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 611 { // the tables they came from held 611
		t.Fatalf("%d cases; the tables migrated here held 611", len(all))
	}
	for _, c := range all {
		ctx := testCtx
		ctx.Names, ctx.BerthPIDs, ctx.PPID, ctx.Definitions, ctx.IFS = c.Names, c.BerthPIDs, c.PPID, c.Definitions, c.IFS
		fs, _ := Scan(shparse.New(c.Cmd), ctx)
		got, need := verdict(fs)
		if got != c.Want {
			t.Errorf("%s: got %s, want %s; findings: %s", c, got, c.Want, describe(fs))
			continue
		}
		if c.Rule != "" && !hasRule(need, c.Rule) {
			t.Errorf("%s: %s as expected, but not by rule %s; deciding findings: %s", c, got, c.Rule, describe(need))
		}
	}
}

// TestEveryFamilyHasCases: each family of checks, and of what the scanner
// checks itself, has its file of cases, and every file is a family.
func TestEveryFamilyHasCases(t *testing.T) {
	byFamily, err := cases.Load("testdata")
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, f := range families {
		known[f.name] = true
	}
	for _, f := range scannerFamilies {
		known[f] = true
	}
	for f := range known {
		if len(byFamily[f]) == 0 {
			t.Errorf("family %s has no cases: add testdata/%s.txt", f, f)
		}
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "*.txt"))
	for _, p := range files {
		if f := strings.TrimSuffix(filepath.Base(p), ".txt"); !known[f] {
			t.Errorf("%s names no family of checks (families: checks.go)", p)
		}
	}
	if _, err := os.Stat("testdata"); err != nil {
		t.Fatal(err)
	}
}

func hasRule(fs []Finding, id string) bool {
	for _, f := range fs {
		if f.Rule.ID == id {
			return true
		}
	}
	return false
}

func describe(fs []Finding) string {
	if len(fs) == 0 {
		return "none"
	}
	var parts []string
	for _, f := range fs {
		parts = append(parts, f.Rule.ID+" on "+strings.TrimSpace(f.Command)+" ("+f.Detail+")")
	}
	return strings.Join(parts, "; ")
}
