package all_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/a55dbaac/berth/backend"
	_ "github.com/a55dbaac/berth/backend/all"
)

// aboveTheSeam are the packages written once for every backend: none of
// them may decide anything by a backend's name. They ask a backend for a
// capability instead (backend.Capabilities, ...).
var aboveTheSeam = []string{
	"approval", "manager", "daemon", "daemon/wire", "terminal", "session",
	"files", "mcpserver", "process", "output",
}

// No package above the seam compares anything with a backend's name or
// switches on one: the README's claim, kept true.
func TestNoBackendNameAboveTheSeam(t *testing.T) {
	names := map[string]bool{"apptainer": true}
	for _, n := range backend.Names() {
		names[n] = true
	}
	root := filepath.Join("..", "..")
	for _, pkg := range aboveTheSeam {
		dir := filepath.Join(root, pkg)
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			path := filepath.Join(dir, e.Name())
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			isName := func(x ast.Expr) bool {
				lit, ok := x.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return false
				}
				v, err := strconv.Unquote(lit.Value)
				return err == nil && names[v]
			}
			// A comparison or switch whose other side names a backend
			// (t.Backend, backend, reg.Name ...) with a backend's name.
			aboutBackend := func(x ast.Expr) bool {
				var b strings.Builder
				ast.Inspect(x, func(n ast.Node) bool {
					if id, ok := n.(*ast.Ident); ok {
						b.WriteString(id.Name + " ")
					}
					return true
				})
				return strings.Contains(strings.ToLower(b.String()), "backend")
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.BinaryExpr:
					if (n.Op == token.EQL || n.Op == token.NEQ) &&
						(isName(n.X) && aboutBackend(n.Y) || isName(n.Y) && aboutBackend(n.X)) {
						t.Errorf("%s: compares a backend with a backend's name", fset.Position(n.Pos()))
					}
				case *ast.SwitchStmt:
					if n.Tag == nil || !aboutBackend(n.Tag) {
						return true
					}
					for _, st := range n.Body.List {
						for _, x := range st.(*ast.CaseClause).List {
							if isName(x) {
								t.Errorf("%s: switches on a backend's name", fset.Position(x.Pos()))
							}
						}
					}
				}
				return true
			})
		}
	}
}
