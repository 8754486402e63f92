// Command docgen writes berth's generated reference pages into a
// directory (docs/): `go generate ./docs` runs it.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/a55dbaac/berth/internal/docgen"
)

func main() {
	out := flag.String("out", ".", "directory to write the pages into")
	flag.Parse()
	for name, text := range docgen.Pages() {
		if err := os.WriteFile(filepath.Join(*out, name), []byte(text), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "docgen:", err)
			os.Exit(1)
		}
	}
}
