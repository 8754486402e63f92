package backend

import (
	"path"
	"strings"
)

// ContainerDir maps the configured terminal.cwd to a directory inside a
// container or sandbox, whose filesystem is not this machine's: "", "~",
// ".", relative paths and paths that name this machine's home directories
// (/home/..., /Users/..., macOS's /private and /Volumes, Windows paths)
// fall back to def; "~/x" is x under home; any other absolute path is used
// as is, cleaned.
func ContainerDir(cwd, home, def string) string {
	cwd = strings.TrimSpace(cwd)
	switch {
	case cwd == "", cwd == "~", cwd == ".":
		return def
	case strings.HasPrefix(cwd, "~/"):
		return path.Join(home, cwd[2:])
	case !strings.HasPrefix(cwd, "/"):
		return def
	case cwd == "/home" || strings.HasPrefix(cwd, "/home/"),
		cwd == "/Users" || strings.HasPrefix(cwd, "/Users/"),
		strings.HasPrefix(cwd, "/private/"), strings.HasPrefix(cwd, "/Volumes/"),
		strings.Contains(cwd, `\`):
		return def
	}
	return path.Clean(cwd)
}
