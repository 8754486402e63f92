package kubernetes

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports keeps client-go's clientset out of the package's build. Its
// typed clients import k8s.io/client-go/kubernetes/scheme, whose init
// registers all of k8s.io/api's groups, and every berth-engine links this
// package (backend/all): with the clientset the engine's binary, its
// resident memory and its start time about double, whatever backend it
// runs. The package talks to the API server through its own small client
// (rest.go), over only the groups it uses. Tests may use the clientset:
// go list -deps without -test does not see them.
func TestImports(t *testing.T) {
	// go test puts its own go command first on the tests' PATH.
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal("no go command to list the package's imports (go test puts its own on PATH; run this test with go test):", err)
	}
	const pkg = "github.com/a55dbaac/berth/backend/kubernetes"
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
		if dep == "k8s.io/client-go/kubernetes" || strings.HasPrefix(dep, "k8s.io/client-go/kubernetes/") {
			bad = append(bad, dep)
		}
	}
	if len(bad) > 0 {
		t.Errorf("%s links client-go's clientset (%d packages: %s ...): its scheme registers every API group at init, "+
			"in every berth-engine; use the package's own client (rest.go) and register the group there",
			pkg, len(bad), strings.Join(bad[:min(3, len(bad))], ", "))
	}
}
