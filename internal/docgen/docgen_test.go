package docgen

import (
	"os"
	"path/filepath"
	"testing"
)

// The committed reference pages are what the code says: a key or rule
// changed without `go generate ./docs` fails here.
func TestPagesAreUpToDate(t *testing.T) {
	for name, want := range Pages() {
		got, err := os.ReadFile(filepath.Join("..", "..", "docs", name))
		if err != nil {
			t.Fatalf("%s: %v (run go generate ./docs)", name, err)
		}
		if string(got) != want {
			t.Errorf("docs/%s is out of date: run go generate ./docs", name)
		}
	}
}
