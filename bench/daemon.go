package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Daemon times whole berth calls, each a new process, against a berth
// daemon of its own: a private berth home (the configuration file is the
// caller's), non-persistent environments, the daemon stopped by Close.
type Daemon struct {
	// Engine is the berth-engine binary; Front the berth front next to it,
	// "" when there is none.
	Engine, Front string
	home          string
	env           []string
	backend       string
}

// NewDaemon prepares calls of engine (and the front next to it) with the
// configuration file configPath ("" for none) and, when backendFlag is not
// "", --backend backendFlag. The daemon starts with the first call.
func NewDaemon(engine, configPath, backendFlag string) (*Daemon, error) {
	d := &Daemon{Engine: engine, backend: backendFlag}
	if p := filepath.Join(filepath.Dir(engine), "berth"); p != engine {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			d.Front = p
		}
	}
	home, err := os.MkdirTemp("", "berth-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: private home: %w", err)
	}
	d.home = home
	d.env = append(os.Environ(), "BERTH_HOME="+home, "BERTH_CONFIG="+configPath, "BERTH_NO_DAEMON=",
		"TERMINAL_DAEMON=true", "TERMINAL_CONTAINER_PERSISTENT=false")
	return d, nil
}

// Warm is the binary a warm call goes through: the front, else the
// engine.
func (d *Daemon) Warm() string {
	if d.Front != "" {
		return d.Front
	}
	return d.Engine
}

// Exec returns a call of `bin exec --task key [extra...] -- true`; it
// fails unless the call exits 0.
func (d *Daemon) Exec(bin, key string, extra ...string) func() error {
	args := []string{"exec", "--task", key}
	if d.backend != "" {
		args = append(args, "--backend", d.backend)
	}
	args = append(append(args, extra...), "--", TrivialCommand)
	return func() error { return d.run(context.Background(), bin, args...) }
}

// run runs bin with args in the daemon's environment.
func (d *Daemon) run(ctx context.Context, bin string, args ...string) error {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = d.env
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("bench: %s %s: %w: %s", filepath.Base(bin), strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return nil
}

// Pid is the running daemon's pid, from berth daemon status --json.
func (d *Daemon) Pid(ctx context.Context) (int, error) {
	cmd := exec.CommandContext(ctx, d.Engine, "daemon", "status", "--json")
	cmd.Env = d.env
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("bench: berth daemon status: %w", err)
	}
	var st struct {
		Running bool `json:"running"`
		PID     int  `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return 0, fmt.Errorf("bench: read berth daemon status --json: %w (%s)", err, bytes.TrimSpace(out))
	}
	if !st.Running || st.PID <= 0 {
		return 0, fmt.Errorf("bench: no daemon of this build in berth daemon status --json: %s", bytes.TrimSpace(out))
	}
	return st.PID, nil
}

// Close stops the daemon and removes the private home.
func (d *Daemon) Close() error {
	err := d.run(context.Background(), d.Engine, "daemon", "stop")
	os.RemoveAll(d.home)
	return err
}

// ProcMem reads a process's resident memory (VmRSS) and its anonymous
// part (RssAnon), in bytes.
func ProcMem(pid int) (rss, anon int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("bench: memory of %d: %w", pid, err)
	}
	for line := range strings.Lines(string(b)) {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			continue
		}
		v, _ := strconv.ParseInt(f[0], 10, 64)
		switch name {
		case "VmRSS":
			rss = v * 1024
		case "RssAnon":
			anon = v * 1024
		}
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("bench: no VmRSS in /proc/%d/status", pid)
	}
	return rss, anon, nil
}

// IdleMem is the daemon's resident memory before and after N idle
// environments were added to it, in bytes.
type IdleMem struct {
	N                     int
	BeforeRSS, AfterRSS   int64
	BeforeAnon, AfterAnon int64
}

// PerEnvRSS is the growth of the daemon's resident memory per environment.
func (m IdleMem) PerEnvRSS() float64 { return float64(m.AfterRSS-m.BeforeRSS) / float64(m.N) }

// PerEnvAnon is the growth of its anonymous memory per environment.
func (m IdleMem) PerEnvAnon() float64 { return float64(m.AfterAnon-m.BeforeAnon) / float64(m.N) }

// IdleMemory adds n idle environments to the running daemon (one call of
// the engine each, under key(i)) and reads its memory before and after,
// each time after settle has passed (the daemon's collector and its
// environments' set-up run on for a moment after a call).
func (d *Daemon) IdleMemory(ctx context.Context, n int, key func(int) string, settle time.Duration) (IdleMem, error) {
	pid, err := d.Pid(ctx)
	if err != nil {
		return IdleMem{}, err
	}
	m := IdleMem{N: n}
	time.Sleep(settle)
	if m.BeforeRSS, m.BeforeAnon, err = ProcMem(pid); err != nil {
		return m, err
	}
	for i := range n {
		if err := d.Exec(d.Engine, key(i))(); err != nil {
			return m, err
		}
	}
	time.Sleep(settle)
	m.AfterRSS, m.AfterAnon, err = ProcMem(pid)
	return m, err
}
