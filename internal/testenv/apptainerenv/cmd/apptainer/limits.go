package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// limits are the --cpus and --memory of a container.
type limits struct {
	CPUs   float64 `json:"cpus,omitempty"`
	Memory int64   `json:"memory,omitempty"` // bytes
}

func (l limits) any() bool { return l.CPUs > 0 || l.Memory > 0 }

// parseLimits reads --cpus (a float) and --memory (bytes with an optional
// k/m/g/t suffix, as Apptainer's units parser takes).
func parseLimits(cpus, memory string) (limits, error) {
	var l limits
	if cpus != "" {
		v, err := strconv.ParseFloat(cpus, 64)
		if err != nil || v <= 0 {
			return l, fmt.Errorf("invalid value %q for --cpus: must be a positive number", cpus)
		}
		l.CPUs = v
	}
	if memory != "" {
		s := strings.ToLower(strings.TrimSpace(memory))
		mult := int64(1)
		s = strings.TrimSuffix(s, "b")
		if n := len(s); n > 0 {
			switch s[n-1] {
			case 'k':
				mult = 1 << 10
			case 'm':
				mult = 1 << 20
			case 'g':
				mult = 1 << 30
			case 't':
				mult = 1 << 40
			}
			if mult > 1 {
				s = s[:n-1]
			}
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v <= 0 {
			return l, fmt.Errorf("invalid value %q for --memory: must be a size like 512M or 2G", memory)
		}
		l.Memory = int64(v * float64(mult))
	}
	return l, nil
}

const cgroupRoot = "/sys/fs/cgroup"

func cgroupV2() bool {
	_, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers"))
	return err == nil
}

// createCgroups makes the cgroup /apptainer/<pid> Apptainer's cgroupfs
// manager makes, applies l and moves pid into it. It returns the
// directories made.
func createCgroups(pid int, l limits) ([]string, error) {
	name := filepath.Join("apptainer", strconv.Itoa(pid))
	var dirs []string
	write := func(dir, file, val string) error {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(val), 0o644); err != nil {
			return fmt.Errorf("while writing %s to %s: %w", val, filepath.Join(dir, file), err)
		}
		return nil
	}
	mk := func(dir string) error {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		dirs = append(dirs, dir)
		return nil
	}
	var err error
	if cgroupV2() {
		parent := filepath.Join(cgroupRoot, "apptainer")
		if err = mk(parent); err == nil {
			_ = write(cgroupRoot, "cgroup.subtree_control", "+cpu +memory")
			_ = write(parent, "cgroup.subtree_control", "+cpu +memory")
			dir := filepath.Join(cgroupRoot, name)
			if err = mk(dir); err == nil {
				if l.Memory > 0 {
					err = write(dir, "memory.max", strconv.FormatInt(l.Memory, 10))
				}
				if err == nil && l.CPUs > 0 {
					err = write(dir, "cpu.max", fmt.Sprintf("%d 100000", int64(l.CPUs*100000)))
				}
				if err == nil {
					err = write(dir, "cgroup.procs", strconv.Itoa(pid))
				}
			}
		}
		dirs = dirs[min(1, len(dirs)):] // keep the shared parent
	} else {
		if l.Memory > 0 {
			dir := filepath.Join(cgroupRoot, "memory", name)
			if err = mk(dir); err == nil {
				if err = write(dir, "memory.limit_in_bytes", strconv.FormatInt(l.Memory, 10)); err == nil {
					err = write(dir, "cgroup.procs", strconv.Itoa(pid))
				}
			}
		}
		if err == nil && l.CPUs > 0 {
			dir := filepath.Join(cgroupRoot, "cpu", name)
			if err = mk(dir); err == nil {
				_ = write(dir, "cpu.cfs_period_us", "100000")
				if err = write(dir, "cpu.cfs_quota_us", strconv.FormatInt(int64(l.CPUs*100000), 10)); err == nil {
					err = write(dir, "cgroup.procs", strconv.Itoa(pid))
				}
			}
		}
	}
	if err != nil {
		removeCgroups(dirs)
		return nil, err
	}
	return dirs, nil
}

// joinCgroups moves pid into the instance's cgroups (exec into an instance
// runs under its limits).
func joinCgroups(dirs []string, pid int) error {
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("while joining cgroup %s: %w", d, err)
		}
	}
	return nil
}

// removeCgroups removes the directories, retrying while the last processes
// leave.
func removeCgroups(dirs []string) {
	for i := len(dirs) - 1; i >= 0; i-- {
		for try := 0; try < 50; try++ {
			err := os.Remove(dirs[i])
			if err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// limitsCheck reproduces what Apptainer does with --cpus/--memory under the
// stock configuration ("systemd cgroups = yes") on a host where systemd is
// not PID 1: the container is not created.
func limitsCheck(c conf, l limits) error {
	if !l.any() {
		return nil
	}
	if c.systemdCgroups && !systemdRunning() {
		return errors.New("container creation failed: while applying cgroups config: cannot use cgroups - cannot use systemd cgroups manager, systemd not running as init on this host")
	}
	return nil
}
