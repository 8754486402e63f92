package confine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// mountTarget is a path the Domain's mount namespace binds onto itself:
// read-only, or writable (a pin: a mount point cannot be renamed or
// removed, so nothing else can be put in its place).
type mountTarget struct {
	path     string
	readOnly bool
}

// protection is how a Policy's ReadOnly and Pinned paths are kept.
type protection struct {
	targets  []mountTarget // shallowest first
	readOnly []string      // Enforced.ReadOnly
}

// planMounts checks ro and pinned against the writable trees and returns
// the mounts that keep them: each path inside a tree, and each directory
// between the tree and the path (pinned, so that no directory above the
// path can be renamed away and replaced). Paths must be absolute, exist
// and be named without symbolic links (what is bound is the file, not a
// name that a command could point elsewhere). A path outside every tree
// is read-only already and needs nothing.
func planMounts(writable, ro, pinned []string) (protection, error) {
	var trees []string
	names := map[string][]string{} // real tree → its names as given and resolved
	for _, w := range writable {
		w = filepath.Clean(w)
		real, err := filepath.EvalSymlinks(w)
		if err != nil {
			return protection{}, fmt.Errorf("confine: writable path: %w", err)
		}
		if !slices.Contains(trees, real) {
			trees = append(trees, real)
		}
		for _, n := range []string{w, real} {
			if !slices.Contains(names[real], n) {
				names[real] = append(names[real], n)
			}
		}
	}
	var pr protection
	want := map[string]bool{} // path → read-only
	add := func(p string, readOnly bool) error {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("confine: protected path %q is not absolute", p)
		}
		p = filepath.Clean(p)
		if _, err := os.Lstat(p); err != nil {
			return fmt.Errorf("confine: protected path: %w", err)
		}
		if real, err := filepath.EvalSymlinks(p); err != nil || real != p {
			return fmt.Errorf("confine: protected path %s is reached through a symbolic link (it is %s): a command could point the link elsewhere; name the path itself", p, real)
		}
		for _, t := range trees {
			rel, ok := strings.CutPrefix(p, t+"/")
			if t == "/" {
				rel, ok = strings.TrimPrefix(p, "/"), true
			}
			if p == t {
				return fmt.Errorf("confine: protected path %s is a whole writable tree", p)
			}
			if !ok {
				continue
			}
			want[p] = want[p] || readOnly
			parts := strings.Split(rel, "/")
			for i := 1; i < len(parts); i++ {
				d := filepath.Join(t, filepath.Join(parts[:i]...))
				if _, seen := want[d]; !seen {
					want[d] = false
				}
			}
			if readOnly {
				for _, n := range names[t] {
					pr.readOnly = append(pr.readOnly, filepath.Join(n, rel))
				}
			}
		}
		return nil
	}
	for _, p := range ro {
		if err := add(p, true); err != nil {
			return protection{}, err
		}
	}
	for _, p := range pinned {
		if err := add(p, false); err != nil {
			return protection{}, err
		}
	}
	for p, readOnly := range want {
		pr.targets = append(pr.targets, mountTarget{path: p, readOnly: readOnly})
	}
	// Shallowest first: a bind made later over a directory above one
	// already made would otherwise be cloned without it.
	slices.SortFunc(pr.targets, func(a, b mountTarget) int {
		if d := strings.Count(a.path, "/") - strings.Count(b.path, "/"); d != 0 {
			return d
		}
		return strings.Compare(a.path, b.path)
	})
	slices.Sort(pr.readOnly)
	pr.readOnly = slices.Compact(pr.readOnly)
	return pr, nil
}

// enterMountNamespace gives the calling (locked) thread a mount namespace
// of its own, in which the targets are bound onto themselves, read-only
// where asked. It must run before the thread drops its capabilities, and
// the processes forked from the thread live in that namespace; berth's
// other threads do not see it.
//
// The namespace receives the host's later mounts (it is a slave) and
// sends none back. Each target is opened once, refusing symbolic links,
// and the bind is made onto that very directory or file, so a command of
// another environment renaming things meanwhile cannot redirect it.
func enterMountNamespace(targets []mountTarget) error {
	// CLONE_FS: a thread shares its root and working directory with the
	// other threads, and a mount namespace of its own needs them unshared.
	if err := unix.Unshare(unix.CLONE_FS | unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("confine: a mount namespace for the domain: unshare: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("confine: a mount namespace for the domain: make / a slave: %w", err)
	}
	for _, t := range targets {
		if err := bindOnto(t); err != nil {
			return err
		}
	}
	return nil
}

// bindOnto binds t.path onto itself, read-only when asked.
func bindOnto(t mountTarget) error {
	at, err := unix.Openat2(unix.AT_FDCWD, t.path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return fmt.Errorf("confine: protect %s: %w", t.path, err)
	}
	defer unix.Close(at)
	tree, err := unix.OpenTree(at, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("confine: protect %s: open_tree: %w", t.path, err)
	}
	defer unix.Close(tree)
	if t.readOnly {
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
		if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
			return fmt.Errorf("confine: protect %s: make it read-only: %w", t.path, err)
		}
	}
	if err := unix.MoveMount(tree, "", at, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("confine: protect %s: move_mount: %w", t.path, err)
	}
	return nil
}

// probeMountNS reports why a Domain's thread cannot have a mount
// namespace of its own here, "" when it can: it tries, on a thread that
// is thrown away afterwards.
func probeMountNS() string {
	var why string
	onThrowawayThread(func() {
		if err := unix.Unshare(unix.CLONE_FS | unix.CLONE_NEWNS); err != nil {
			why = fmt.Sprintf("unshare(CLONE_NEWNS): %v", err)
			if errors.Is(err, unix.EPERM) {
				why = "a mount namespace needs CAP_SYS_ADMIN (berth running as root), and one thread of a multi-threaded process cannot make the user namespace that would give it"
			}
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
			why = fmt.Sprintf("mount(MS_SLAVE) in a new mount namespace: %v", err)
			return
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			why = fmt.Sprintf("open_tree(OPEN_TREE_CLONE) needs Linux 5.2: %v", err)
			return
		}
		defer unix.Close(fd)
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
			why = fmt.Sprintf("mount_setattr needs Linux 5.12: %v", err)
		}
	})
	return why
}

// onThrowawayThread runs fn on a locked OS thread other than the main
// one and lets the runtime end that thread afterwards (the goroutine
// returns without unlocking it), so whatever fn changed in the thread
// dies with it.
func onThrowawayThread(fn func()) {
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			defer close(done)
			fn()
			return
		}
		// The main thread: start over on another (this one stays
		// locked until then, so the new goroutine cannot land here).
		moved := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(moved)
			defer close(done)
			fn()
		}()
		<-moved
		runtime.UnlockOSThread()
	}()
	<-done
}
