package docgen

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "write the pages into docs/ (go generate ./docs runs this)")

// The committed reference pages are what the code says: a key or rule
// changed without `go generate ./docs` fails here.
func TestPagesAreUpToDate(t *testing.T) {
	for name, want := range Pages() {
		path := filepath.Join("..", "..", "..", "docs", name)
		if *update {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v (run go generate ./docs)", name, err)
		}
		if string(got) != want {
			t.Errorf("docs/%s is out of date: run go generate ./docs", name)
		}
	}
}
