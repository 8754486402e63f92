package hostproc

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/a55dbaac/berth/internal/procmark"
	"golang.org/x/sys/unix"
)

var (
	ownerOnce sync.Once
	owner     string
)

// Owner returns this process's owner mark value.
func Owner() string {
	ownerOnce.Do(func() {
		st, _ := procmark.StartTime(os.Getpid())
		owner = strconv.Itoa(os.Getpid()) + "." + st
	})
	return owner
}

// Harden makes this process non-dumpable: its /proc files (environ, mem,
// fd, ...) then belong to root and ptrace is refused, so a process of the
// same non-root user — a command berth runs — cannot read berth's
// environment or memory. Children are dumpable again after their exec. It
// is called before the first process starts; a program may call it earlier
// (at startup) to cover the time before. It is idempotent.
func Harden() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("hostproc: prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	return nil
}

// closeInherited marks every descriptor from 3 up close-on-exec, so a child
// gets only the descriptors os/exec gives it. Go opens its own descriptors
// close-on-exec; this catches those inherited from berth's parent.
func closeInherited() {
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return
	}
	// Kernels before 5.11: one fcntl per open descriptor.
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd >= 3 {
			unix.CloseOnExec(fd)
		}
	}
}

// guardianScript waits for end of file on stdin (berth is gone: it exited
// or was killed), then kills every process whose environment holds the mark
// $1 (NAME=value): TERM, up to a second of grace, then rounds of STOP
// (rescanning until nothing new appears, so a process that keeps forking
// cannot outrun it) and KILL.
const guardianScript = `while IFS= read -r _; do :; done
m=$1
pids() {
  for f in $(grep -l -s -z -x -F -e "$m" /proc/[0-9]*/environ 2>/dev/null); do
    f=${f#/proc/}; printf '%s ' "${f%/environ}"
  done
}
t=$(pids)
[ -n "$t" ] || exit 0
kill -s TERM $t 2>/dev/null
i=0
while [ $i -lt 10 ]; do
  sleep 0.1 2>/dev/null || sleep 1
  t=$(pids)
  [ -n "$t" ] || exit 0
  i=$((i+1))
done
round=0
while [ $round -lt 5 ]; do
  t=$(pids)
  [ -n "$t" ] || exit 0
  all=" $t "
  kill -s STOP $t 2>/dev/null
  n=0
  while [ $n -lt 20 ]; do
    new=
    for c in $(pids); do case $all in *" $c "*) ;; *) new="$new $c" ;; esac; done
    [ -z "$new" ] && break
    kill -s STOP $new 2>/dev/null
    all="$all$new "
    n=$((n+1))
  done
  kill -s KILL $all 2>/dev/null
  round=$((round+1))
done
`

var (
	guardMu   sync.Mutex
	guardPipe *os.File // write end; never written, closed only when berth exits
	guardPID  int
)

// guardianEnv is the guardian's whole environment. It outlives berth's
// commands and, being an ordinary dumpable process of berth's user, its
// /proc/<pid>/environ is readable by every command berth runs: it gets
// nothing of berth's environment (provider keys, tokens; F9), and its mark
// as an argument.
var guardianEnv = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}

// startGuardian starts the guardian once. It is not berth's child in the
// PR_SET_PDEATHSIG sense (no death signal), leads its own process group
// (terminal signals do not reach it) and carries no mark. Failing to start
// it is logged: ReapOrphans at the next start remains.
func startGuardian() {
	guardMu.Lock()
	defer guardMu.Unlock()
	if guardPipe != nil {
		return
	}
	r, w, err := os.Pipe()
	if err != nil {
		slog.Warn("hostproc: no guardian for processes left after berth dies", "err", err)
		return
	}
	cmd := exec.Command("/bin/sh", "-c", guardianScript, "berth-guardian", procmark.OwnerVar+"="+Owner())
	cmd.Stdin = r
	cmd.Dir = "/"
	cmd.Env = guardianEnv
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		slog.Warn("hostproc: no guardian for processes left after berth dies", "err", err)
		return
	}
	r.Close()
	guardPipe, guardPID = w, cmd.Process.Pid
	go cmd.Wait() // reap it if it ends early (killed from outside)
}

// GuardianPID reports the pid of the guardian process, 0 when none runs.
func GuardianPID() int {
	guardMu.Lock()
	defer guardMu.Unlock()
	return guardPID
}

// ReapOrphans kills the processes, in this PID namespace and readable by
// this user, that carry the owner mark of a berth process that no longer
// runs (its pid is gone or belongs to a process started at another time),
// and returns their pids. Processes of live berth processes, this one
// included, are left alone.
func ReapOrphans() ([]int, error) {
	find := func() ([]int, error) {
		ents, err := os.ReadDir("/proc")
		if err != nil {
			return nil, fmt.Errorf("hostproc: list /proc: %w", err)
		}
		ns, _ := os.Readlink("/proc/self/ns/pid")
		alive := map[string]bool{}
		var out []int
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			mark := ownerOf(pid)
			if mark == "" || mark == Owner() {
				continue
			}
			live, seen := alive[mark]
			if !seen {
				live = ownerAlive(mark)
				alive[mark] = live
			}
			if live {
				continue
			}
			if pns, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err != nil || pns != ns {
				continue
			}
			if st, ok := procmark.StartTime(pid); ok && st != "" { // not a zombie either
				out = append(out, pid)
			}
		}
		return out, nil
	}
	found, err := find()
	if err != nil || len(found) == 0 {
		return nil, err
	}
	for _, p := range found {
		syscall.Kill(p, syscall.SIGTERM)
	}
	killed := append([]int(nil), found...)
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		if left, _ := find(); len(left) == 0 {
			return killed, nil
		}
	}
	for round := 0; round < 5; round++ {
		left, _ := find()
		if len(left) == 0 {
			break
		}
		stopped := map[int]bool{}
		for i := 0; i < 20 && len(left) > 0; i++ {
			for _, p := range left {
				if !stopped[p] {
					syscall.Kill(p, syscall.SIGSTOP)
					stopped[p] = true
					killed = append(killed, p)
				}
			}
			again, _ := find()
			left = left[:0]
			for _, p := range again {
				if !stopped[p] {
					left = append(left, p)
				}
			}
		}
		for p := range stopped {
			syscall.Kill(p, syscall.SIGKILL)
		}
	}
	return killed, nil
}

// ownerOf returns the owner mark value in a process's environment, "" when
// it has none or cannot be read.
func ownerOf(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return ""
	}
	var mark string
	for _, kv := range strings.Split(string(b), "\x00") {
		if v, ok := strings.CutPrefix(kv, procmark.OwnerVar+"="); ok {
			mark = v // the last one wins, as in getenv
		}
	}
	return mark
}

// ownerAlive reports whether the berth process named by mark still runs.
// Unreadable marks count as alive: nothing is killed on a guess.
func ownerAlive(mark string) bool {
	pidS, st, ok := strings.Cut(mark, ".")
	pid, err := strconv.Atoi(pidS)
	if !ok || err != nil || pid <= 0 || st == "" {
		return true
	}
	cur, ok := procmark.StartTime(pid)
	return ok && cur == st
}

// prctlGetDumpable reads this process's dumpable flag.
func prctlGetDumpable() (int, error) {
	return unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
}
