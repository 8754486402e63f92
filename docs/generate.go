// Package docs holds berth's documentation. Its reference pages
// (configuration.md, approval-rules.md) are generated from the code:
// run `go generate ./docs` after changing a key or a rule.
package docs

//go:generate go test ../cmd/internal/docgen -run TestPagesAreUpToDate -count=1 -update
