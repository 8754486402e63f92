package approval

import (
	"path"
	"strings"

	"github.com/a55dbaac/berth/approval/internal/scan"
)

// Under workspace confinement (Context.Writable set) the kernel refuses
// every write outside the writable trees and, with SignalsConfined, every
// signal to a process outside the environment. The rules that protect
// what the kernel now protects need no question there:
//
//   - a finding whose every target (a written file, a removed, moved or
//     changed tree, a device, links followed) lies outside the writable
//     trees, and is not an ancestor of one: the kernel refuses the action.
//     This covers recursive removal, chmod and chown, writes to /etc,
//     ~/.ssh, shell startup files, berth's configuration, devices and
//     /proc/sysrq-trigger, and the floor's system trees, when they are
//     outside;
//   - a recursive removal whose every target lies strictly inside a
//     writable tree: the agent's own scratch and build trees. Removing a
//     writable tree itself (the workspace root), everything in it, or a
//     directory above one still asks: that takes all the user gave the
//     agent to work on;
//   - a finding whose every target lies in a path the kernel keeps
//     read-only inside the writable trees (Context.Protected: berth's home
//     and configuration, a repository's .git/hooks and .git/config): the
//     kernel refuses the write. The same write where the kernel does not
//     keep the path read-only (berth not able to have a mount namespace)
//     still asks: write-berth-config, write-git-hooks, write-git-config;
//   - kill -9 -1 (kill-all), pkill -9 (kill-9-by-name) and signals to
//     berth's own processes (kill-berth) when the kernel confines signals:
//     they reach the environment's own processes only.
//
// Everything else still asks (or is the floor): what a command runs on
// another host or in a container (ssh, scp, rsync to HOST:PATH, docker
// exec, kubectl exec, docker run -v /:/h: Finding.Remote), whatever it
// targets; what the kernel does not cover — git push --force, SQL, a fetched script run, dynamic commands
// that may reach the network, fork bombs, power, a nested berth (its
// daemon may run outside the confinement), BERTH_* variables — and a
// finding with a target berth cannot place (a variable only known at run
// time, a relative path with no known cwd).

// place is where a path lies with respect to the writable trees.
type place int

const (
	outside  place = iota // in no writable tree, above none
	inside                // strictly inside a writable tree
	root                  // a writable tree itself, or everything in one
	ancestor              // a directory above a writable tree
)

// confinedFindings returns the findings the kernel does not already
// enforce (see above).
func confinedFindings(c Context, fs []Finding) []Finding {
	if c.Writable == nil {
		return fs
	}
	roots := make([]string, 0, 2*len(c.Writable))
	for _, w := range c.Writable {
		if w = path.Clean(w); path.IsAbs(w) {
			roots = append(roots, w)
			if c.Resolve != nil {
				if r := path.Clean(c.Resolve(w)); r != w && path.IsAbs(r) {
					roots = append(roots, r)
				}
			}
		}
	}
	var out []Finding
	for _, f := range fs {
		if f.Remote != "" {
			out = append(out, f) // another host: this kernel does not confine it
			continue
		}
		if c.SignalsConfined && (f.Rule.ID == "kill-all" || f.Rule.ID == "kill-9-by-name" || f.Rule.ID == "kill-berth") {
			continue
		}
		if f.Located && len(f.Targets) > 0 && allProtected(c, f.Targets) {
			continue // the kernel keeps them read-only
		}
		if f.Located && len(f.Targets) > 0 {
			all := map[place]bool{}
			for _, t := range f.Targets {
				all[placeOf(roots, t)] = true
			}
			if len(all) == 1 && all[outside] {
				continue // the kernel refuses it
			}
			if f.Rule.ID == "rm-recursive" && len(all) == 1 && all[inside] {
				continue // the agent's own scratch
			}
		}
		out = append(out, f)
	}
	return out
}

// allProtected reports whether every target (absolute, without globs)
// lies in one of the paths the kernel keeps read-only, as spelled or as
// its links resolve.
func allProtected(c Context, targets []string) bool {
	if len(c.Protected) == 0 {
		return false
	}
	in := func(p string) bool {
		for _, r := range c.Protected {
			if r = path.Clean(r); p == r || strings.HasPrefix(p, r+"/") {
				return true
			}
		}
		return false
	}
	for _, t := range targets {
		if scan.HasGlob(t) || !path.IsAbs(t) {
			return false
		}
		t = path.Clean(t)
		if in(t) {
			continue
		}
		if c.Resolve != nil && in(path.Clean(c.Resolve(t))) {
			continue
		}
		return false
	}
	return true
}

// placeOf says where p (absolute, possibly a glob) lies.
func placeOf(roots []string, p string) place {
	if scan.HasGlob(p) {
		dir := p
		for scan.HasGlob(dir) {
			dir = path.Dir(dir)
		}
		pl := placeOf(roots, dir)
		if pl == root && (dir != path.Dir(p) || !scan.MatchesAnything(path.Base(p))) {
			return inside // some files in the tree, not all of it
		}
		return pl
	}
	best := outside
	for _, r := range roots {
		switch {
		case p == r:
			return root
		case r == "/" || strings.HasPrefix(p, r+"/"):
			best = inside
		case p == "/" || strings.HasPrefix(r, p+"/"):
			if best == outside {
				best = ancestor
			}
		}
	}
	return best
}
