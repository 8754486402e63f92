package manager

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports keeps the manager above the backend seam: it links the
// backend contract (package backend) and no backend, nor a backend's
// helpers such as backend/hostproc. What it needs of them (the owner
// mark's name) lives in internal packages both sides may import.
func TestImports(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		// go test puts its own go command on PATH: there is always one.
		t.Fatal("no go command to list the package's imports:", err)
	}
	const pkg = "github.com/a55dbaac/berth/manager"
	out, err := exec.Command(gobin, "list", "-deps", pkg).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr)
	}
	var bad []string
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/a55dbaac/berth/backend/") {
			bad = append(bad, dep)
		}
	}
	if len(bad) > 0 {
		t.Errorf("%s links %s: the manager sits above the backend seam and may import only package backend itself", pkg, strings.Join(bad, ", "))
	}
}
