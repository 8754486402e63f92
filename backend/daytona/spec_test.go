package daytona

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
)

// TestSpecResources checks how container_cpu, container_memory and
// container_disk become Daytona's whole cores and GiB: rounded up, at least
// 1, the disk capped at Daytona's 10 GiB with a warning naming the key.
func TestSpecResources(t *testing.T) {
	for _, c := range []struct {
		cpu             float64
		memMB, diskMB   int
		cpu2, mem, disk int
		warned          bool
	}{
		{cpu: 0.25, memMB: 100, diskMB: 500, cpu2: 1, mem: 1, disk: 1},
		{cpu: 0, memMB: 0, diskMB: 0, cpu2: 1, mem: 1, disk: 1},
		{cpu: 1, memMB: 1024, diskMB: 1024, cpu2: 1, mem: 1, disk: 1},
		{cpu: 1.5, memMB: 1025, diskMB: 3000, cpu2: 2, mem: 2, disk: 3},
		{cpu: 4, memMB: 5000, diskMB: 10 * 1024, cpu2: 4, mem: 5, disk: 10},
		{cpu: 4, memMB: 5000, diskMB: 10*1024 + 1, cpu2: 4, mem: 5, disk: 10, warned: true},
		{cpu: 4, memMB: 5000, diskMB: 51200, cpu2: 4, mem: 5, disk: 10, warned: true},
	} {
		cfg := config.Default().Terminal
		cfg.ContainerCPU, cfg.ContainerMemory, cfg.ContainerDisk = c.cpu, c.memMB, c.diskMB
		logs := &recordLogs{}
		sp, err := buildSpec(backend.Options{Key: "k", Config: cfg}, "", slog.New(logs))
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if sp.CPU != c.cpu2 || sp.MemoryGiB != c.mem || sp.DiskGiB != c.disk {
			t.Errorf("cpu %v memory %d MB disk %d MB: got %d cores, %d GiB, %d GiB; want %d, %d, %d",
				c.cpu, c.memMB, c.diskMB, sp.CPU, sp.MemoryGiB, sp.DiskGiB, c.cpu2, c.mem, c.disk)
		}
		warned := false
		for _, l := range logs.all() {
			warned = warned || strings.HasPrefix(l, "WARN") && strings.Contains(l, "container_disk")
		}
		if warned != c.warned {
			t.Errorf("disk %d MB: warned %v, want %v (%q)", c.diskMB, warned, c.warned, logs.all())
		}
		req := sp.createRequest()
		if req.GetMemory() != int32(c.mem) || req.GetDisk() != int32(c.disk) || req.GetCpu() != int32(c.cpu2) {
			t.Errorf("create request %d cores %d GiB %d GiB", req.GetCpu(), req.GetMemory(), req.GetDisk())
		}
	}
	cfg := config.Default().Terminal
	cfg.ContainerMemory = -1
	if _, err := buildSpec(backend.Options{Key: "k", Config: cfg}, "", slog.Default()); err == nil || !strings.Contains(err.Error(), "container_memory") {
		t.Errorf("negative memory: %v", err)
	}
}

// TestSandboxDir checks how the configured cwd maps into the sandbox.
func TestSandboxDir(t *testing.T) {
	for in, want := range map[string]string{
		"": "/root", "~": "/root", ".": "/root", "src": "/root", "~/src": "/root/src",
		"/home/me/proj": "/root", "/Users/me": "/root", "/workspace": "/workspace", "/tmp/../srv/": "/srv",
	} {
		if got := sandboxDir(in, "/root"); got != want {
			t.Errorf("sandboxDir(%q, /root) = %q, want %q", in, got, want)
		}
		// Another user's home, as in Daytona's own snapshots.
		want = strings.Replace(want, "/root", "/home/daytona", 1)
		if got := sandboxDir(in, "/home/daytona"); got != want {
			t.Errorf("sandboxDir(%q, /home/daytona) = %q, want %q", in, got, want)
		}
	}
	// The home unknown: the daemon's own directory, unless a sandbox
	// path is configured.
	for in, want := range map[string]string{"": "", "~/src": "", "/workspace": "/workspace", "src": ""} {
		if got := sandboxDir(in, ""); got != want {
			t.Errorf("sandboxDir(%q, unknown home) = %q, want %q", in, got, want)
		}
	}
}
