package docker

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"
)

// A checkpoint does not freeze the environment: while the commit is in
// progress a busy process of the container runs on (its state is not the
// freezer's, its CPU time grows), and a command started meanwhile runs to
// its end. The commit is held in progress by making the daemon's read of
// one file of the container's layer wait for the test (a fanotify
// permission event), so the checks fall inside it by construction, not by
// timing. A commit that pauses the container (Docker's default) fails the
// first check.
func TestCheckpointDoesNotFreeze(t *testing.T) {
	cli := dockerenv.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	src := newBackend(t, testOptions(t, nil))
	// The file the commit's tar opens; nothing in the container opens it
	// again.
	mustRun(t, src, "mkdir -p /opt && echo gate >/opt/commit-gate")
	const loop = "berth-busy-loop"
	p, err := src.Start(ctx, backend.ProcSpec{Argv: []string{"sh", "-c", "while :; do :; done", loop}})
	must(t, err)
	defer p.Close()
	pid := hostPID(ctx, t, cli, src.ContainerID(), loop)
	g := holdOpens(t, filepath.Join(upperDir(ctx, t, cli, src.ContainerID()), "opt", "commit-gate"), false)

	done := make(chan error, 1)
	go func() {
		cp, err := src.Checkpoint(ctx, "busy")
		if err == nil {
			t.Cleanup(func() { _ = (checkpointAdmin{}).Remove(context.Background(), backend.Options{}, cp) })
		}
		done <- err
	}()
	select {
	case <-g.opened:
	case err := <-done:
		t.Fatalf("the checkpoint ended (%v) without reading the gate file: nothing held it", err)
	case <-ctx.Done():
		t.Fatal("the commit never read the gate file")
	}

	// The commit is in progress, waiting for the gate.
	st := readStat(t, pid)
	if st.state == 'D' {
		t.Fatalf("while the commit runs the busy process is in state %c: the container is frozen", st.state)
	}
	for cpu := st.cpu; readStat(t, pid).cpu == cpu; {
		if ctx.Err() != nil {
			t.Fatal("the busy process used no CPU while the commit ran: the container is frozen")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if out, code := run(t, src, "echo started during the commit"); code != 0 || out != "started during the commit\n" {
		t.Fatalf("a command started during the commit: exit %d, %q", code, out)
	}

	g.release()
	if err := <-done; err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
}

// A file cut shorter while the daemon copies it breaks that commit; the
// checkpoint of a running environment commits again and succeeds. The cut
// is made while the daemon's open of the file is held, after the commit
// took its size.
func TestCheckpointRetriesATornCommit(t *testing.T) {
	cli := dockerenv.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	src := newBackend(t, testOptions(t, nil))
	mustRun(t, src, "mkdir -p /opt && head -c 1048576 /dev/zero >/opt/torn")
	torn := filepath.Join(upperDir(ctx, t, cli, src.ContainerID()), "opt", "torn")
	g := holdOpens(t, torn, false)
	type result struct {
		cp  backend.Checkpoint
		err error
	}
	done := make(chan result, 1)
	go func() {
		cp, err := src.Checkpoint(ctx, "torn")
		done <- result{cp, err}
	}()
	select {
	case <-g.opened:
	case r := <-done:
		t.Fatalf("the checkpoint ended (%v) without reading the file", r.err)
	case <-ctx.Done():
		t.Fatal("the commit never read the file")
	}
	must(t, os.Truncate(torn, 0))
	g.release()
	r := <-done
	if r.err != nil {
		t.Fatalf("a checkpoint whose first commit met a file cut short: %v", r.err)
	}
	t.Cleanup(func() { _ = (checkpointAdmin{}).Remove(context.Background(), backend.Options{}, r.cp) })
	fork := newBackend(t, fromCheckpoint(t, r.cp, nil))
	if out := mustRun(t, fork, "wc -c </opt/torn"); strings.TrimSpace(out) != "0" {
		t.Errorf("the file cut short has %s bytes in the fork, want 0 (the state the retried commit saw)", out)
	}
}

// Files removed while the helper copies a volume fail that copy (cp cannot
// stat what it listed); the helper empties the copy and copies again, and
// the checkpoint holds the directory as it is after the removal. The
// removal is made while the helper's open of the first file of the
// directory is held, so the rest are listed and gone.
func TestCheckpointRetriesAVolumeCopy(t *testing.T) {
	cli := dockerenv.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	src := newBackend(t, testOptions(t, nil))
	mustRun(t, src, "mkdir /root/d && for i in 0 1 2 3 4 5 6 7 8 9; do echo $i >/root/d/f$i; done")
	vol, err := cli.VolumeInspect(ctx, src.spec.Volumes[rootDir], client.VolumeInspectOptions{})
	must(t, err)
	dir := filepath.Join(vol.Volume.Mountpoint, "d")
	g := holdOpens(t, dir, true)
	type result struct {
		cp  backend.Checkpoint
		err error
	}
	done := make(chan result, 1)
	go func() {
		cp, err := src.Checkpoint(ctx, "vanishing")
		done <- result{cp, err}
	}()
	var held string
	select {
	case held = <-g.opened:
	case r := <-done:
		t.Fatalf("the checkpoint ended (%v) without reading the directory", r.err)
	case <-ctx.Done():
		t.Fatal("the helper never read the directory")
	}
	ents, err := os.ReadDir(dir)
	must(t, err)
	for _, e := range ents {
		if e.Name() != filepath.Base(held) {
			must(t, os.Remove(filepath.Join(dir, e.Name())))
		}
	}
	g.release()
	r := <-done
	if r.err != nil {
		t.Fatalf("a checkpoint whose first copy met files removed: %v", r.err)
	}
	t.Cleanup(func() { _ = (checkpointAdmin{}).Remove(context.Background(), backend.Options{}, r.cp) })
	fork := newBackend(t, fromCheckpoint(t, r.cp, nil))
	if out := mustRun(t, fork, "ls /root/d"); out != filepath.Base(held)+"\n" {
		t.Errorf("the fork's /root/d holds %q, want only %s (the state the second copy saw)", out, filepath.Base(held))
	}
}

// upperDir is the host directory holding what container cid wrote.
func upperDir(ctx context.Context, t *testing.T, cli *client.Client, cid string) string {
	t.Helper()
	ins, err := cli.ContainerInspect(ctx, cid, client.ContainerInspectOptions{})
	must(t, err)
	if ins.Container.GraphDriver == nil || ins.Container.GraphDriver.Data["UpperDir"] == "" {
		t.Fatalf("container %s has no upper directory (storage driver %v): the test needs overlay2 to hold a commit open", cid, ins.Container.GraphDriver)
	}
	return ins.Container.GraphDriver.Data["UpperDir"]
}

// hostPID finds, on the host, the process of container cid whose command
// line contains name.
func hostPID(ctx context.Context, t *testing.T, cli *client.Client, cid, name string) int {
	t.Helper()
	for ctx.Err() == nil {
		top, err := cli.ContainerTop(ctx, cid, client.ContainerTopOptions{Arguments: []string{"-eo", "pid,args"}})
		must(t, err)
		for _, p := range top.Processes {
			if len(p) == 2 && strings.Contains(p[1], name) {
				pid, err := strconv.Atoi(strings.TrimSpace(p[0]))
				must(t, err)
				return pid
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no process %q in container %s", name, cid)
	return 0
}

type procStat struct {
	state byte
	cpu   uint64 // user and system time, in clock ticks
}

// readStat reads a process's state and CPU time from /proc/PID/stat.
func readStat(t *testing.T, pid int) procStat {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	must(t, err)
	// pid (comm) state ppid ... utime(14) stime(15): comm may hold spaces.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	utime, _ := strconv.ParseUint(f[11], 10, 64)
	stime, _ := strconv.ParseUint(f[12], 10, 64)
	return procStat{state: f[0][0], cpu: utime + stime}
}

// gate holds every open of one file (or of the files in one directory)
// until released: the first open is reported on opened, with the path
// opened, and waits.
type gate struct {
	f        *os.File // the fanotify group
	opened   chan string
	released chan struct{}
	once     sync.Once
	done     chan struct{}
}

func (g *gate) release() { g.once.Do(func() { close(g.released) }) }

// holdOpens sets a gate on path (children: on the files in the directory
// path) with a fanotify permission event. Closing the group (at cleanup,
// or when the test process dies) lets every held open go.
func holdOpens(t *testing.T, path string, children bool) *gate {
	t.Helper()
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_CONTENT|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK, unix.O_RDONLY|unix.O_LARGEFILE)
	if err != nil {
		t.Fatalf("fanotify: %v (the test needs CAP_SYS_ADMIN)", err)
	}
	mask := uint64(unix.FAN_OPEN_PERM)
	if children {
		mask |= unix.FAN_EVENT_ON_CHILD
	}
	if err := unix.FanotifyMark(fd, unix.FAN_MARK_ADD, mask, unix.AT_FDCWD, path); err != nil {
		unix.Close(fd)
		t.Fatalf("fanotify mark %s: %v", path, err)
	}
	g := &gate{f: os.NewFile(uintptr(fd), "fanotify"), opened: make(chan string, 1), released: make(chan struct{}), done: make(chan struct{})}
	go g.serve()
	t.Cleanup(func() {
		g.release()
		g.f.Close()
		<-g.done
	})
	return g
}

func (g *gate) serve() {
	defer close(g.done)
	buf := make([]byte, 4096)
	first := true
	for {
		n, err := g.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				fmt.Fprintln(os.Stderr, "fanotify read:", err)
			}
			return
		}
		for b := buf[:n]; len(b) >= int(unsafe.Sizeof(unix.FanotifyEventMetadata{})); {
			var ev unix.FanotifyEventMetadata
			binary.Read(bytes.NewReader(b), binary.NativeEndian, &ev)
			b = b[ev.Event_len:]
			if ev.Fd < 0 {
				continue
			}
			if first {
				first = false
				name, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(ev.Fd)))
				g.opened <- name
				<-g.released
			}
			var resp bytes.Buffer
			binary.Write(&resp, binary.NativeEndian, unix.FanotifyResponse{Fd: ev.Fd, Response: unix.FAN_ALLOW})
			g.f.Write(resp.Bytes())
			unix.Close(int(ev.Fd))
		}
	}
}
