package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// bindSpec is one --bind entry.
type bindSpec struct {
	Src string `json:"src"`
	Dst string `json:"dst"`
	RO  bool   `json:"ro"`
}

// containerSpec is everything the host side decided about a container; it
// travels as JSON to the process that sets up the mounts.
type containerSpec struct {
	Name          string     `json:"name,omitempty"` // instance name; "" for a one-shot exec
	Image         string     `json:"image"`          // absolute image path, as reported
	Rootfs        string     `json:"rootfs"`         // directory holding the image's root
	Overlays      []string   `json:"overlays,omitempty"`
	WritableTmpfs bool       `json:"writableTmpfs,omitempty"`
	Contain       bool       `json:"contain,omitempty"`
	NoHome        bool       `json:"noHome,omitempty"`
	HostHome      string     `json:"hostHome"`
	Home          string     `json:"home"`
	Binds         []bindSpec `json:"binds,omitempty"`
	NetNone       bool       `json:"netNone,omitempty"`
	Limits        limits     `json:"limits"`
	Scratch       string     `json:"scratch"`           // where the session directory is made
	Session       string     `json:"session,omitempty"` // made by the caller, else in Scratch

	// Instance only.
	Env       []string `json:"env,omitempty"` // of the instance's processes (appinit)
	StateFile string   `json:"stateFile,omitempty"`
	LogOut    string   `json:"logOut,omitempty"`
	LogErr    string   `json:"logErr,omitempty"`
}

// parseBinds parses --bind values: src[:dst[:ro|rw]], comma-separated lists
// already split by the flag parser.
func parseBinds(vals []string) ([]bindSpec, error) {
	var out []bindSpec
	for _, v := range vals {
		if v == "" {
			continue
		}
		parts := strings.Split(v, ":")
		b := bindSpec{Src: parts[0], Dst: parts[0]}
		if len(parts) > 1 && parts[1] != "" {
			b.Dst = parts[1]
		}
		if len(parts) > 2 {
			switch parts[2] {
			case "ro":
				b.RO = true
			case "rw":
			default:
				return nil, fmt.Errorf("while parsing bind path %s: %s is not a valid mount option", v, parts[2])
			}
		}
		if len(parts) > 3 {
			return nil, fmt.Errorf("while parsing bind path %s: too many colons", v)
		}
		abs, err := filepath.Abs(b.Src)
		if err != nil {
			return nil, err
		}
		b.Src = abs
		if !filepath.IsAbs(b.Dst) {
			return nil, fmt.Errorf("while parsing bind path %s: destination %s must be an absolute path", v, b.Dst)
		}
		b.Dst = filepath.Clean(b.Dst)
		out = append(out, b)
	}
	return out, nil
}

// checkBinds reports a missing bind source the way Apptainer does.
func checkBinds(binds []bindSpec) error {
	for _, b := range binds {
		if _, err := os.Stat(b.Src); err != nil {
			return fatalf("container creation failed: mount hook function failure: mount %s->%s error: while mounting %s: mount source %s doesn't exist", b.Src, b.Dst, b.Src, b.Src)
		}
	}
	return nil
}

// hostFileBinds are the files Apptainer's default configuration binds from
// the host ("bind path" entries and the generated resolv.conf).
var hostFileBinds = []string{"/etc/hosts", "/etc/resolv.conf", "/etc/localtime"}

// mountedRoot is a container root made by setupRoot.
type mountedRoot struct {
	session string     // tmpfs session directory (host path)
	root    string     // the merged root
	locks   []*os.File // held for the life of the container
}

func (m *mountedRoot) release() {
	if m == nil {
		return
	}
	syscall.Unmount(m.root, syscall.MNT_DETACH)
	syscall.Unmount(filepath.Join(m.session, "ovimg"), syscall.MNT_DETACH)
	syscall.Unmount(m.session, syscall.MNT_DETACH)
	os.Remove(m.session)
	for _, f := range m.locks {
		f.Close()
	}
}

// setupRoot builds the container's root in the calling process's (private)
// mount namespace: a tmpfs session directory holding a layer with every
// mount point the container needs, and a kernel overlay mount whose lower
// layers are that layer and the image root, and whose upper layer is the
// writable overlay (directory or ext3 image) or a tmpfs (--writable-tmpfs).
// Without either the root is read-only.
func setupRoot(spec *containerSpec) (*mountedRoot, error) {
	m := &mountedRoot{}
	sess := spec.Session
	if sess == "" {
		var err error
		if sess, err = os.MkdirTemp(spec.Scratch, "apptainer-standin-session-"); err != nil {
			return nil, fmt.Errorf("while creating session directory: %w", err)
		}
	}
	m.session = sess
	if err := syscall.Mount("tmpfs", sess, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0755"); err != nil {
		os.Remove(sess)
		return nil, fmt.Errorf("while mounting session directory: %w", err)
	}
	fail := func(err error) (*mountedRoot, error) {
		m.release()
		return nil, err
	}
	layer := filepath.Join(sess, "layer")
	m.root = filepath.Join(sess, "root")
	for _, d := range []string{layer, m.root} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fail(err)
		}
	}
	// Mount points, made in the session layer so nothing is written into
	// the image or a persistent overlay.
	dirs := []string{"/proc", "/sys", "/dev", "/tmp", "/var/tmp", spec.Home}
	var files []string
	for _, f := range hostFileBinds {
		if _, err := os.Stat(f); err == nil {
			files = append(files, f)
		}
	}
	for _, b := range spec.Binds {
		st, err := os.Stat(b.Src)
		if err != nil {
			return fail(fmt.Errorf("mount source %s doesn't exist", b.Src))
		}
		if st.IsDir() {
			dirs = append(dirs, b.Dst)
		} else {
			files = append(files, b.Dst)
		}
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(layer, d), 0o755); err != nil {
			return fail(err)
		}
	}
	for _, f := range files {
		p := filepath.Join(layer, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fail(err)
		}
		if st, err := os.Lstat(filepath.Join(spec.Rootfs, f)); err == nil && st.Mode().IsRegular() {
			continue // the image has it; bwrap binds over it
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			return fail(err)
		}
	}

	var upper, work string
	if len(spec.Overlays) > 0 {
		ov := spec.Overlays[0]
		st, err := os.Stat(ov)
		if err != nil {
			return fail(fmt.Errorf("while loading overlay images: failed to open overlay image %s: %w", ov, err))
		}
		if st.IsDir() {
			upper, work = filepath.Join(ov, "upper"), filepath.Join(ov, "work")
			for _, d := range []string{upper, work} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					return fail(fmt.Errorf("while loading overlay images: %w", err))
				}
			}
		} else {
			lock, err := flock(ov, true)
			if err != nil {
				return fail(fmt.Errorf("while loading overlay images: failed to open overlay image %s: while locking ext3 partition from %s: can't open %s for writing, currently in use by another process", ov, ov, ov))
			}
			m.locks = append(m.locks, lock)
			mnt := filepath.Join(sess, "ovimg")
			if err := os.Mkdir(mnt, 0o755); err != nil {
				return fail(err)
			}
			if out, err := exec.Command("mount", "-t", "ext3", "-o", "loop", ov, mnt).CombinedOutput(); err != nil {
				return fail(fmt.Errorf("while loading overlay images: while mounting %s: %v: %s", ov, err, strings.TrimSpace(string(out))))
			}
			upper, work = filepath.Join(mnt, "upper"), filepath.Join(mnt, "work")
			for _, d := range []string{upper, work} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					return fail(err)
				}
			}
		}
	} else if spec.WritableTmpfs {
		upper, work = filepath.Join(sess, "upper"), filepath.Join(sess, "work")
		for _, d := range []string{upper, work} {
			if err := os.Mkdir(d, 0o755); err != nil {
				return fail(err)
			}
		}
	}
	for _, p := range []string{layer, spec.Rootfs, upper, work} {
		if strings.ContainsAny(p, ",:") {
			return fail(fmt.Errorf("path %s contains ',' or ':', which an overlay mount cannot take", p))
		}
	}
	opts := "lowerdir=" + layer + ":" + spec.Rootfs
	if upper != "" {
		opts += ",upperdir=" + upper + ",workdir=" + work
	}
	if err := syscall.Mount("overlay", m.root, "overlay", 0, opts); err != nil {
		return fail(fmt.Errorf("while mounting overlay: %s: %w", opts, err))
	}
	return m, nil
}

// bwrapArgs is the bubblewrap command line for a container rooted at root.
// cmd is what bwrap runs inside (argv, looked up by bwrap).
func bwrapArgs(spec *containerSpec, root string, asInit bool, infoFD int, cmd []string) []string {
	a := []string{"--bind", root, "/", "--proc", "/proc", "--dev", "/dev", "--dev-bind-try", "/dev/pts", "/dev/pts", "--ro-bind", "/sys", "/sys"}
	if spec.Contain {
		a = append(a, "--tmpfs", "/tmp", "--tmpfs", "/var/tmp")
	} else {
		a = append(a, "--bind", "/tmp", "/tmp", "--bind-try", "/var/tmp", "/var/tmp")
	}
	if !spec.NoHome {
		if spec.Contain {
			a = append(a, "--tmpfs", spec.Home)
		} else if spec.HostHome != "" {
			a = append(a, "--bind-try", spec.HostHome, spec.Home)
		}
	}
	for _, f := range hostFileBinds {
		a = append(a, "--ro-bind-try", f, f)
	}
	for _, b := range spec.Binds {
		if b.RO {
			a = append(a, "--ro-bind", b.Src, b.Dst)
		} else {
			a = append(a, "--bind", b.Src, b.Dst)
		}
	}
	a = append(a, "--unshare-pid", "--unshare-ipc")
	if spec.NetNone {
		a = append(a, "--unshare-net")
	}
	if asInit {
		a = append(a, "--as-pid-1")
	} else {
		a = append(a, "--die-with-parent")
	}
	a = append(a, "--chdir", "/")
	if infoFD > 0 {
		a = append(a, "--info-fd", fmt.Sprint(infoFD))
	}
	a = append(a, "--")
	return append(a, cmd...)
}

// needRoot refuses to run without root: the stand-in mounts overlays with
// the kernel, which Apptainer does through its setuid starter or a user
// namespace.
func needRoot() error {
	if os.Geteuid() != 0 {
		return errors.New("berth's apptainer stand-in must run as root (it mounts the container root with the kernel's overlayfs)")
	}
	return nil
}
