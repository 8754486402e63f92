package confine

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkNew is the cost of confining an environment: the thread, the
// Landlock ruleset, the seccomp filter and the supervisor, then Close;
// "protected" adds the mount namespace keeping berth's home and a
// repository's hooks and config read-only (five mounts: the home, .git
// pinned, hooks, config, and the directory between), where one can be had.
func BenchmarkNew(b *testing.B) {
	requireKernelB(b)
	ws := b.TempDir()
	home, git := filepath.Join(ws, ".berth"), filepath.Join(ws, "src", "project", ".git")
	for _, d := range []string{home, filepath.Join(git, "hooks")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(git, "config"), nil, 0o644); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		p    Policy
	}{
		{"plain", Policy{Writable: []string{ws}, Network: NetworkLoopback}},
		{"protected", Policy{Writable: []string{ws}, Network: NetworkLoopback,
			ReadOnly: []string{home, filepath.Join(git, "hooks"), filepath.Join(git, "config")}, Pinned: []string{git}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			if len(c.p.ReadOnly) > 0 && !Probe().MountNS {
				b.Skip(Probe().NoMountNS)
			}
			for b.Loop() {
				d, err := New(c.p)
				if err != nil {
					b.Fatal(err)
				}
				d.Close()
			}
		})
	}
}

// BenchmarkStart compares starting /bin/true and waiting for it: plain
// fork/exec, forked from a Domain's thread, and under bubblewrap with the
// namespaces it needs to confine writes and signals (a read-only root, the
// workspace bound writable, its own PID namespace).
func BenchmarkStart(b *testing.B) {
	requireKernelB(b)
	ws := b.TempDir()
	run := func(b *testing.B, c *exec.Cmd) {
		if err := c.Run(); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			run(b, exec.Command("/bin/true"))
		}
	})
	b.Run("domain", func(b *testing.B) {
		d, err := New(Policy{Writable: []string{ws}})
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		for b.Loop() {
			var err error
			d.Do(func() { err = exec.Command("/bin/true").Run() })
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("protected", func(b *testing.B) {
		if !Probe().MountNS {
			b.Skip(Probe().NoMountNS)
		}
		ro := filepath.Join(ws, "ro")
		if err := os.MkdirAll(ro, 0o755); err != nil {
			b.Fatal(err)
		}
		d, err := New(Policy{Writable: []string{ws}, ReadOnly: []string{ro}})
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		for b.Loop() {
			var err error
			d.Do(func() { err = exec.Command("/bin/true").Run() })
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("bwrap", func(b *testing.B) {
		bw, err := exec.LookPath("bwrap")
		if err != nil {
			b.Skip("no bwrap")
		}
		for b.Loop() {
			run(b, exec.Command(bw, "--ro-bind", "/", "/", "--bind", ws, ws, "--dev", "/dev", "--proc", "/proc",
				"--unshare-pid", "--die-with-parent", "/bin/true"))
		}
	})
}

// BenchmarkChmod is one chmod(2) in the workspace: directly, and made by
// the supervisor for a confined caller (the Domain's own thread, which the
// filter covers too).
func BenchmarkChmod(b *testing.B) {
	requireKernelB(b)
	if os.Geteuid() != 0 {
		// The supervisor reads the caller's memory; berth's own
		// thread is not dumpable, which only root may read.
		b.Skip("needs root to read the calling thread's memory")
	}
	ws := b.TempDir()
	f := filepath.Join(ws, "f")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		b.Fatal(err)
	}
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			if err := unix.Chmod(f, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("supervised", func(b *testing.B) {
		d, err := New(Policy{Writable: []string{ws}})
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		var err2 error
		b.ResetTimer()
		d.Do(func() {
			for i := 0; i < b.N && err2 == nil; i++ {
				err2 = unix.Chmod(f, 0o644)
			}
		})
		if err2 != nil {
			b.Fatal(err2)
		}
	})
}

func requireKernelB(b *testing.B) {
	if m := Probe().Missing(Policy{Network: NetworkLoopback}); len(m) > 0 {
		b.Skipf("this kernel cannot confine: %v", m)
	}
}
