package berthhome

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Files names what berth reads its settings from: a command that could
// write one of them could turn the approvals gate or a sandbox off for the
// next call. Backends that hand a command part of this machine's
// filesystem keep them out of its reach.
type Files struct {
	// Home is berth's home: config.yaml and the .env beside it, the
	// allowlist (in config.yaml), the daemon's directory.
	Home string
	// Config is the config file when it lies outside Home (--config,
	// BERTH_CONFIG), "" otherwise.
	Config string
	// DotEnv is the .env beside Config, "" when Config is "".
	DotEnv string
}

// Settings returns the Files of a berth whose home is home ("" for the
// default: $BERTH_HOME, else ~/.berth) and whose config file is
// configFile ("" for $BERTH_CONFIG, else the home's config.yaml). Paths
// are absolute and clean; getenv nil means os.Getenv.
func Settings(home, configFile string, getenv func(string) string) (Files, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var f Files
	if home == "" {
		h, err := Dir(getenv)
		if err != nil {
			return f, err
		}
		home = h
	}
	h, err := filepath.Abs(home)
	if err != nil {
		return f, fmt.Errorf("berth's home %q: %w", home, err)
	}
	f.Home = h
	if configFile == "" {
		if v := getenv("BERTH_CONFIG"); v != "" {
			p, err := Expand(v, getenv)
			if err != nil {
				return f, fmt.Errorf("BERTH_CONFIG %q: %w", v, err)
			}
			configFile = p
		}
	}
	if configFile != "" {
		c, err := filepath.Abs(configFile)
		if err != nil {
			return f, fmt.Errorf("config file %q: %w", configFile, err)
		}
		if !Within(c, f.Home) {
			f.Config, f.DotEnv = c, filepath.Join(filepath.Dir(c), ".env")
		}
	}
	return f, nil
}

// Within reports whether the clean path p is dir or lies under it.
func Within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// RealPath resolves p's symbolic links as far as p exists; the missing
// rest is appended as named.
func RealPath(p string) string {
	p = filepath.Clean(p)
	var rest []string
	for {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(append([]string{r}, rest...)...)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return filepath.Join(append([]string{p}, rest...)...)
		}
		rest = append([]string{filepath.Base(p)}, rest...)
		p = parent
	}
}

// Mount is a path of this machine to bind onto itself where a host
// directory is bound into a sandbox: read-only (berth's file), or
// writable (a directory between the bound directory and berth's file,
// bound so that it is a mount point, which cannot be renamed or removed
// to put another directory in its place).
type Mount struct {
	Path     string // real, absolute
	Rel      string // Path below the bound directory
	ReadOnly bool
}

// InBind returns what keeps f read-only where the host directory dir is
// bound writable into a sandbox: nothing when dir does not hold them;
// otherwise berth's home (made first when it does not exist yet, so that
// nothing can be created in it either), the config file and its .env,
// read-only, and each directory between dir and them, writable; parents
// come first. It refuses what no bind can keep: dir being berth's home, a
// symbolic link on the way that a command could re-point, a .env that does
// not exist yet beside a config file (a command could create it).
//
// With make false nothing is made (berth doctor): a missing home is
// reported as kept, as it would be.
func InBind(f Files, dir string, make bool) ([]Mount, error) {
	root := RealPath(dir)
	var out []Mount
	seen := map[string]bool{}
	add := func(p string, readOnly bool) {
		if seen[p] {
			return
		}
		seen[p] = true
		rel, _ := filepath.Rel(root, p)
		out = append(out, Mount{Path: p, Rel: rel, ReadOnly: readOnly})
	}
	keep := func(what, p string, dirOK bool) error {
		if link := linkBelow(root, p); link != "" {
			return fmt.Errorf("%s %s is reached through the symbolic link %s inside %s: a command could point it elsewhere; name the real path (%s)", what, p, link, dir, RealPath(p))
		}
		real := RealPath(p)
		if !Within(real, root) {
			return nil
		}
		if real == root {
			return fmt.Errorf("%s %s is the directory %s itself; bind it read-only (:ro) or not at all", what, p, dir)
		}
		if _, err := os.Lstat(real); errors.Is(err, fs.ErrNotExist) {
			if !dirOK {
				return fmt.Errorf("%s %s does not exist, and it lies inside %s, so a command could create it; create it (empty) or bind a narrower directory", what, p, dir)
			}
			if make {
				if err := os.MkdirAll(real, 0o700); err != nil {
					return fmt.Errorf("make %s %s: %w", what, real, err)
				}
			}
		}
		parts := strings.Split(strings.TrimPrefix(real, root+"/"), "/")
		if root == "/" {
			parts = strings.Split(strings.TrimPrefix(real, "/"), "/")
		}
		for i := 1; i < len(parts); i++ {
			add(filepath.Join(root, filepath.Join(parts[:i]...)), false)
		}
		add(real, true)
		return nil
	}
	if err := keep("berth's home", f.Home, true); err != nil {
		return nil, err
	}
	if f.Config != "" {
		if err := keep("berth's config file", f.Config, false); err != nil {
			return nil, err
		}
		if Within(RealPath(f.Config), root) {
			if err := keep("the .env beside berth's config file", f.DotEnv, false); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// linkBelow returns the first symbolic link on the way to p that lies in
// root (where a command with root bound writable could replace it), "".
func linkBelow(root, p string) string {
	cur := "/"
	for _, part := range strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/") {
		if part == "" {
			continue
		}
		next := filepath.Join(cur, part)
		fi, err := os.Lstat(next)
		if err != nil {
			return ""
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if Within(RealPath(cur), RealPath(root)) {
			return next
		}
		r, err := filepath.EvalSymlinks(next)
		if err != nil {
			return ""
		}
		cur = r
	}
	return ""
}
