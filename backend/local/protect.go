package local

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/a55dbaac/berth/internal/berthhome"
)

// The search for repositories in the writable trees is bounded, so that a
// workspace as large as a home directory costs an environment start
// milliseconds, not a walk of the disk: .git is looked for in each tree's
// root and in directories up to gitSearchDepth levels below it, breadth
// first; at most gitSearchReads directories are listed and gitSearchLooks
// looked into, and at most gitMaxRepos repositories protected. Symbolic
// links are not followed, caches that hold no one's work are not entered
// (gitSkip), and no .git directory is entered (its submodules and linked
// worktrees are read from its modules/ and worktrees/ directories). A
// repository past the bound is not protected, and so not listed in
// Confinement.Protected: the approvals gate keeps asking about writes to
// its .git.
const (
	gitSearchDepth = 3
	gitSearchReads = 512
	gitSearchLooks = 4096
	gitMaxRepos    = 64
)

// gitSkip are directory names the search does not enter: package and
// build caches, large and never a project of the user's.
var gitSkip = map[string]bool{
	"node_modules": true, ".cache": true, ".npm": true, ".cargo": true, ".rustup": true,
	".venv": true, "venv": true, "__pycache__": true, ".tox": true, ".gradle": true,
	".m2": true, "target": true, ".terraform": true,
}

// gitProtected are the names in a git directory whose content git runs or
// follows: hooks it executes, config (core.fsmonitor, core.hooksPath,
// aliases, filters), config.worktree (with extensions.worktreeConfig) and
// commondir (which moves config and hooks elsewhere).
var gitProtected = []string{"hooks", "config", "config.worktree", "commondir"}

// guard is what the kernel keeps read-only inside the writable trees.
type guard struct {
	readOnly []string // real paths, for confine.Policy.ReadOnly
	pinned   []string // real paths of git directories, for Policy.Pinned
	// unprotected says what could not be protected (a name that does not
	// exist yet, a repository past the search bound); the gate asks.
	unprotected []string
	// home and config are berth's home and config file when a tree
	// holds them (and they are kept read-only), "" otherwise.
	home, config string
}

// realTrees returns the writable trees by their real names.
func realTrees(trees []string) []string {
	var out []string
	for _, t := range trees {
		if r, err := filepath.EvalSymlinks(t); err == nil {
			t = r
		}
		out = append(out, filepath.Clean(t))
	}
	return out
}

// treeOf returns the tree holding p (p itself or an ancestor), "".
func treeOf(p string, trees []string) string {
	for _, t := range trees {
		if berthhome.Within(p, t) {
			return t
		}
	}
	return ""
}

// linkInTrees returns the first symbolic link on the way to p that a
// command could replace (it lies in a writable tree), "" when none.
func linkInTrees(p string, trees []string) string {
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
		if treeOf(berthhome.RealPath(cur), trees) != "" {
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

// cannotProtect is the error of a workspace that holds berth's own state
// where the kernel cannot keep it read-only.
func cannotProtect(what, path, tree, why string) error {
	return fmt.Errorf("local: terminal.%s=workspace: %s %s lies inside the writable tree %s, so a command could change berth's settings (approvals, local_sandbox) and the next call would run unconfined; %s. "+
		"Set terminal.cwd to a narrower directory (the project's), or move berth's home out of the workspace (BERTH_HOME=/some/other/dir)",
		keySandbox, what, path, tree, why)
}

// berthState adds berth's own state that lies in a writable tree to g,
// or refuses: when the kernel cannot keep it read-only here (canMount
// false), and when no mount could keep it (a symbolic link a command
// could re-point, the state being a whole tree, a .env that does not
// exist yet beside a config file in the workspace). A missing home inside
// a tree is made, so that what berth writes there later is protected too.
func (g *guard) berthState(st berthhome.Files, trees []string, canMount bool, why string, make bool) error {
	real := realTrees(trees)
	if link := linkInTrees(st.Home, real); link != "" {
		return fmt.Errorf("local: terminal.%s=workspace: berth's home %s is reached through the symbolic link %s, which lies in a writable tree: a command could point it elsewhere and put its own settings there; set BERTH_HOME to the directory itself (%s)",
			keySandbox, st.Home, link, berthhome.RealPath(st.Home))
	}
	home := berthhome.RealPath(st.Home)
	if t := treeOf(home, real); t != "" {
		switch {
		case home == t:
			return cannotProtect("berth's home", st.Home, t, "the whole tree cannot be kept read-only")
		case !canMount:
			return cannotProtect("berth's home", st.Home, t, why)
		}
		if make {
			if err := os.MkdirAll(home, 0o700); err != nil {
				return fmt.Errorf("local: make berth's home %s (to keep it read-only to commands): %w", home, err)
			}
		}
		g.home = home
		g.readOnly = append(g.readOnly, home)
	}
	if st.Config == "" {
		return nil
	}
	if link := linkInTrees(st.Config, real); link != "" {
		return fmt.Errorf("local: terminal.%s=workspace: berth's config file %s is reached through the symbolic link %s, which lies in a writable tree: a command could point it elsewhere; name the file itself (%s)",
			keySandbox, st.Config, link, berthhome.RealPath(st.Config))
	}
	cfg := berthhome.RealPath(st.Config)
	t := treeOf(cfg, real)
	if t == "" {
		return nil
	}
	if !canMount {
		return cannotProtect("berth's config file", st.Config, t, why)
	}
	dotenv := filepath.Join(filepath.Dir(cfg), ".env")
	fi, err := os.Lstat(dotenv)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("local: terminal.%s=workspace: berth's config file %s lies inside the writable tree %s, and the .env beside it (%s) does not exist: a command could create it and set TERMINAL_* and BERTH_APPROVALS_* there; create an empty %s (berth then keeps it read-only), or move the config out of the workspace",
			keySandbox, st.Config, t, dotenv, dotenv)
	case err != nil:
		return fmt.Errorf("local: %s: %w", dotenv, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("local: terminal.%s=workspace: %s (the .env beside berth's config file) is a symbolic link in a writable tree: a command could point it elsewhere; replace it with the file itself", keySandbox, dotenv)
	}
	if _, err := os.Stat(cfg); err != nil {
		return fmt.Errorf("local: berth's config file: %w", err)
	}
	g.config = cfg
	g.readOnly = append(g.readOnly, cfg, dotenv)
	return nil
}

// repositories adds the git directories found in the writable trees
// (bounded: see gitSearchDepth) to g: each is pinned, and its hooks,
// config, config.worktree and commondir, where they exist, are kept
// read-only; so are those of its submodules and linked worktrees, and a
// .git file (which names the git directory).
func (g *guard) repositories(trees []string) {
	real := realTrees(trees)
	reads, looks := 0, 0
	repos := 0
	seen := map[string]bool{}
	var gitdir func(dir string, depth int)
	gitdir = func(dir string, depth int) {
		if seen[dir] || depth > 4 || treeOf(dir, real) == "" {
			return
		}
		seen[dir] = true
		if repos++; repos > gitMaxRepos {
			g.unprotected = append(g.unprotected, fmt.Sprintf("%s: more than %d repositories in the workspace", dir, gitMaxRepos))
			return
		}
		g.pinned = append(g.pinned, dir)
		for _, name := range gitProtected {
			p := filepath.Join(dir, name)
			fi, err := os.Lstat(p)
			switch {
			case err != nil:
				g.unprotected = append(g.unprotected, p+" (does not exist)")
			case fi.Mode()&fs.ModeSymlink != 0:
				g.unprotected = append(g.unprotected, p+" (a symbolic link)")
			default:
				g.readOnly = append(g.readOnly, p)
			}
		}
		// Submodules' git directories (modules/NAME, NAME may hold
		// slashes) and linked worktrees' (worktrees/NAME).
		var modules func(d string, level int)
		modules = func(d string, level int) {
			ents, err := os.ReadDir(d)
			if err != nil || level > 3 {
				return
			}
			for _, e := range ents {
				if !e.IsDir() {
					continue
				}
				sub := filepath.Join(d, e.Name())
				if _, err := os.Lstat(filepath.Join(sub, "HEAD")); err == nil {
					gitdir(sub, depth+1)
				} else {
					modules(sub, level+1)
				}
			}
		}
		modules(filepath.Join(dir, "modules"), 0)
		if ents, err := os.ReadDir(filepath.Join(dir, "worktrees")); err == nil {
			for _, e := range ents {
				wt := filepath.Join(dir, "worktrees", e.Name())
				for _, name := range []string{"commondir", "config.worktree"} {
					p := filepath.Join(wt, name)
					if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
						g.readOnly = append(g.readOnly, p)
					}
				}
			}
		}
	}
	dotgit := func(p string) {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
		case fi.IsDir():
			gitdir(p, 0)
		case fi.Mode().IsRegular():
			// "gitdir: PATH": a submodule's or linked worktree's
			// checkout. The file is kept; so is the directory it
			// names when a tree holds it.
			g.readOnly = append(g.readOnly, p)
			b, err := os.ReadFile(p)
			if err != nil {
				return
			}
			target, ok := bytes.CutPrefix(bytes.TrimSpace(b), []byte("gitdir:"))
			if !ok {
				return
			}
			d := strings.TrimSpace(string(target))
			if !filepath.IsAbs(d) {
				d = filepath.Join(filepath.Dir(p), d)
			}
			if r, err := filepath.EvalSymlinks(d); err == nil && r == filepath.Clean(d) {
				gitdir(r, 0)
			}
		default:
			g.unprotected = append(g.unprotected, p+" (a symbolic link)")
		}
	}
	type queued struct {
		dir   string
		depth int
	}
	var queue []queued
	for _, t := range real {
		queue = append(queue, queued{t, 0})
	}
	for len(queue) > 0 {
		q := queue[0]
		queue = queue[1:]
		if looks >= gitSearchLooks || q.depth < gitSearchDepth && reads >= gitSearchReads {
			g.unprotected = append(g.unprotected, fmt.Sprintf("repositories in or below %s and %d more directories (the search stops after listing %d directories or looking into %d)",
				q.dir, len(queue), gitSearchReads, gitSearchLooks))
			break
		}
		looks++
		dotgit(filepath.Join(q.dir, ".git"))
		if q.depth == gitSearchDepth {
			continue
		}
		reads++
		f, err := os.Open(q.dir)
		if err != nil {
			continue
		}
		ents, _ := f.ReadDir(-1)
		f.Close()
		for _, e := range ents {
			if name := e.Name(); e.IsDir() && name != ".git" && !gitSkip[name] {
				queue = append(queue, queued{filepath.Join(q.dir, name), q.depth + 1})
			}
		}
	}
	slices.Sort(g.readOnly)
	g.readOnly = slices.Compact(g.readOnly)
	slices.Sort(g.pinned)
	g.pinned = slices.Compact(g.pinned)
}
