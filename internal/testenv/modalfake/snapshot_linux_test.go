package modalfake_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
	"github.com/a55dbaac/berth/internal/testenv/modalfake"
)

// A snapshot does not freeze the sandbox, as a real Modal snapshot does
// not stop it: while the commit is in progress, a long exec's process runs
// on (its state is not the freezer's, its CPU time grows), and an exec
// started meanwhile runs to its end. The commit is held in progress by
// making the daemon's read of one file of the container's layer wait for
// the test (a fanotify permission event), so the checks fall inside it by
// construction, not by timing. A commit that pauses the container (Docker's
// default) fails the first check.
func TestSnapshotDoesNotFreeze(t *testing.T) {
	srv := modalfake.Start(t)
	c := mustClient(t, srv)
	sb := newSandbox(t, c, nil)
	cli := dockerenv.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The file the commit's tar opens; nothing in the container opens it
	// again.
	if _, errs, code := run(t, sb, "", "sh", "-c", "echo gate >/tmp/commit-gate"); code != 0 {
		t.Fatalf("write the gate file: exit %d %s", code, errs)
	}
	const loop = "modalfake-busy-loop"
	if _, err := sb.Exec(ctx, []string{"sh", "-c", "while :; do :; done", loop}, nil); err != nil {
		t.Fatal(err)
	}
	var cid string
	for _, info := range srv.Sandboxes() {
		if info.ID == sb.SandboxID {
			cid = info.ContainerID
		}
	}
	pid := hostPID(ctx, t, cli, cid, loop)
	gate := holdOpens(t, filepath.Join(upperDir(ctx, t, cli, cid), "tmp", "commit-gate"))

	snap := make(chan error, 1)
	go func() {
		_, err := sb.SnapshotFilesystem(ctx, 2*time.Minute)
		snap <- err
	}()
	select {
	case <-gate.opened:
	case err := <-snap:
		t.Fatalf("the snapshot ended (%v) without reading the gate file: nothing held it", err)
	case <-ctx.Done():
		t.Fatal("the commit never read the gate file")
	}

	// The commit is in progress, waiting for the gate.
	st := readStat(t, pid)
	if st.state == 'D' {
		t.Fatalf("while the commit runs the exec's process is in state %c: the container is frozen", st.state)
	}
	for cpu := st.cpu; readStat(t, pid).cpu == cpu; {
		if ctx.Err() != nil {
			t.Fatal("the exec's process used no CPU while the commit ran: the container is frozen")
		}
		time.Sleep(10 * time.Millisecond)
	}
	started := make(chan string, 1)
	go func() {
		p, err := sb.Exec(ctx, []string{"echo", "started during the commit"}, nil)
		if err != nil {
			started <- err.Error()
			return
		}
		out, err := io.ReadAll(p.Stdout)
		code, werr := p.Wait(ctx)
		started <- fmt.Sprintf("%d %q %v %v", code, out, err, werr)
	}()
	select {
	case got := <-started:
		if want := fmt.Sprintf("0 %q <nil> <nil>", "started during the commit\n"); got != want {
			t.Fatalf("an exec started during the commit: %s, want %s", got, want)
		}
	case <-ctx.Done():
		t.Fatal("an exec started during the commit did not finish while the commit ran")
	}

	gate.release()
	if err := <-snap; err != nil {
		t.Fatalf("snapshot: %v", err)
	}
}

// A file cut shorter while the commit copies it breaks that commit; the
// snapshot of a running sandbox commits again and succeeds, as Modal's
// does not fail on a file being written. The cut is made while the
// daemon's open of the file is held, after the commit took its size.
func TestSnapshotRetriesATornCommit(t *testing.T) {
	srv := modalfake.Start(t)
	c := mustClient(t, srv)
	sb := newSandbox(t, c, nil)
	cli := dockerenv.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, errs, code := run(t, sb, "", "sh", "-c", "head -c 1048576 /dev/zero >/tmp/torn"); code != 0 {
		t.Fatalf("write the file: exit %d %s", code, errs)
	}
	cid := ""
	for _, info := range srv.Sandboxes() {
		if info.ID == sb.SandboxID {
			cid = info.ContainerID
		}
	}
	torn := filepath.Join(upperDir(ctx, t, cli, cid), "tmp", "torn")
	gate := holdOpens(t, torn)
	snap := make(chan error, 1)
	go func() {
		_, err := sb.SnapshotFilesystem(ctx, 2*time.Minute)
		snap <- err
	}()
	select {
	case <-gate.opened:
	case err := <-snap:
		t.Fatalf("the snapshot ended (%v) without reading the file", err)
	case <-ctx.Done():
		t.Fatal("the commit never read the file")
	}
	if err := os.Truncate(torn, 0); err != nil {
		t.Fatal(err)
	}
	gate.release()
	if err := <-snap; err != nil {
		t.Fatalf("a snapshot whose first commit met a file cut short: %v", err)
	}
}

// upperDir is the host directory holding what container cid wrote.
func upperDir(ctx context.Context, t *testing.T, cli *client.Client, cid string) string {
	t.Helper()
	ins, err := cli.ContainerInspect(ctx, cid, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
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
		if err != nil {
			t.Fatalf("top: %v", err)
		}
		for _, p := range top.Processes {
			if len(p) == 2 && strings.Contains(p[1], name) {
				pid, err := strconv.Atoi(strings.TrimSpace(p[0]))
				if err != nil {
					t.Fatalf("top: pid %q", p[0])
				}
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
	if err != nil {
		t.Fatal(err)
	}
	// pid (comm) state ppid ... utime(14) stime(15): comm may hold spaces.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	utime, _ := strconv.ParseUint(f[11], 10, 64)
	stime, _ := strconv.ParseUint(f[12], 10, 64)
	return procStat{state: f[0][0], cpu: utime + stime}
}

// gate holds every open of one file until released: the first open is
// reported on opened, and waits.
type gate struct {
	f        *os.File // the fanotify group
	opened   chan struct{}
	released chan struct{}
	once     sync.Once
	done     chan struct{}
}

func (g *gate) release() { g.once.Do(func() { close(g.released) }) }

// holdOpens sets a gate on path with a fanotify permission event. Closing
// the group (at cleanup, or when the test process dies) lets every held
// open go.
func holdOpens(t *testing.T, path string) *gate {
	t.Helper()
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_CONTENT|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK, unix.O_RDONLY|unix.O_LARGEFILE)
	if err != nil {
		t.Fatalf("fanotify: %v (the test needs CAP_SYS_ADMIN)", err)
	}
	if err := unix.FanotifyMark(fd, unix.FAN_MARK_ADD, unix.FAN_OPEN_PERM, unix.AT_FDCWD, path); err != nil {
		unix.Close(fd)
		t.Fatalf("fanotify mark %s: %v", path, err)
	}
	g := &gate{f: os.NewFile(uintptr(fd), "fanotify"), opened: make(chan struct{}), released: make(chan struct{}), done: make(chan struct{})}
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
				close(g.opened)
				<-g.released
			}
			var resp bytes.Buffer
			binary.Write(&resp, binary.NativeEndian, unix.FanotifyResponse{Fd: ev.Fd, Response: unix.FAN_ALLOW})
			g.f.Write(resp.Bytes())
			unix.Close(int(ev.Fd))
		}
	}
}
