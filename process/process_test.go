package process

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/local"
	"github.com/a55dbaac/berth/output"
	"github.com/a55dbaac/berth/terminal"
)

func localEnv(tb testing.TB) *terminal.Environment {
	be, err := local.New(backend.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	env := terminal.New(be, terminal.Options{SpillDir: tb.TempDir()})
	tb.Cleanup(func() { env.Close(context.Background()) })
	return env
}

// exitToWait starts a job that prints the wall-clock time (ns, GNU date)
// as its last act and returns how long after that wait returned.
func exitToWait(tb testing.TB, r *Registry, env *terminal.Environment) time.Duration {
	st := r.Start(context.Background(), env, "k", terminal.Request{Command: "sleep 0.2; date +%s%N", Background: true})
	if st.Error != nil {
		tb.Fatal(*st.Error)
	}
	res := r.Do(context.Background(), "k", Request{Action: "wait", SessionID: st.SessionID, Timeout: 30})
	returned := time.Now()
	out, _ := res["output"].(string)
	ns, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil || res["status"] != Exited {
		tb.Fatalf("wait: %v", res)
	}
	return returned.Sub(time.Unix(0, ns))
}

// TestWaitReturnsAtExit: wait returns when the job exits, not at its own
// 30 s timeout (exitToWait fails on a "timeout" status). How soon after
// the exit is the benchmark's figure below, not an assertion here: a
// loaded machine may delay it by any amount.
func TestWaitReturnsAtExit(t *testing.T) {
	r := NewRegistry(time.Minute)
	env := localEnv(t)
	for i := 0; i < 3; i++ {
		t.Logf("wait returned %v after the job's last output", exitToWait(t, r, env))
	}
}

// BenchmarkWaitAfterExit reports the time from a background job's exit to
// the return of a wait on it (exit-to-wait-ms).
func BenchmarkWaitAfterExit(b *testing.B) {
	r := NewRegistry(time.Minute)
	env := localEnv(b)
	var total time.Duration
	n := 0
	for b.Loop() {
		total += exitToWait(b, r, env)
		n++
	}
	b.ReportMetric(float64(total)/float64(n)/1e6, "exit-to-wait-ms")
}

func TestFindByPrefix(t *testing.T) {
	r := NewRegistry(time.Minute)
	r.procs["proc_abcdef123456"] = &Proc{ID: "proc_abcdef123456", done: make(chan struct{})}
	r.procs["proc_abcd00000000"] = &Proc{ID: "proc_abcd00000000", done: make(chan struct{})}
	for id, want := range map[string]string{
		"proc_abcdef123456": "proc_abcdef123456",
		"abcdef123456":      "proc_abcdef123456",
		"abcde":             "proc_abcdef123456",
		"proc_abcd0":        "proc_abcd00000000",
	} {
		p, err := r.Find("", id)
		if err != nil || p.ID != want {
			t.Errorf("Find(%q) = %v, %v; want %s", id, p, err, want)
		}
	}
	for _, bad := range []string{"abcd", "abc", "ffff", ""} {
		if _, err := r.Find("", bad); err == nil {
			t.Errorf("Find(%q) resolved; want not found (ambiguous, short or unknown)", bad)
		}
	}
}

// TestTrackedLimitHoldsUnderConcurrentStarts: with room for two more
// processes, five concurrent starts give exactly two processes.
func TestTrackedLimitHoldsUnderConcurrentStarts(t *testing.T) {
	r := NewRegistry(time.Minute)
	env := localEnv(t)
	for i := 0; i < MaxTracked-2; i++ {
		id := fmt.Sprintf("proc_fill%08d", i)
		r.procs[id] = &Proc{ID: id, done: make(chan struct{})} // running
	}
	var wg sync.WaitGroup
	results := make([]StartResult, 5)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = r.Start(context.Background(), env, "k", terminal.Request{Command: "sleep 5", Background: true})
		}()
	}
	wg.Wait()
	started := 0
	for _, res := range results {
		if res.Error == nil {
			started++
			defer r.Do(context.Background(), "k", Request{Action: "kill", SessionID: res.SessionID})
		}
	}
	if started != 2 || len(r.procs) != MaxTracked {
		t.Fatalf("%d of 5 concurrent starts succeeded, %d tracked; want 2 and %d", started, len(r.procs), MaxTracked)
	}
}

// BenchmarkReadAfter400KB measures a poll of a process that has printed
// 400 KB: the cost of reading the kept output, which is already cleaned.
func BenchmarkReadAfter400KB(b *testing.B) {
	p := &Proc{out: output.NewRolling(BufferChars)}
	line := "\x1b[32mok\x1b[0m step " + strings.Repeat("x", 60) + "\n"
	chunk := []byte(strings.Repeat(line, 32<<10/len(line)))
	for n := 0; n < 400<<10; n += len(chunk) {
		p.out.Write(chunk)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = p.Output(previewPoll)
	}
}

// slowLink is a backend whose processes' output trickles in (16 bytes a
// read, a millisecond apart) while their end is reported at once, as
// docker reports an exec's end while its stream still delivers.
type slowLink struct{ backend.Backend }

func (s slowLink) Start(ctx context.Context, spec backend.ProcSpec) (backend.Process, error) {
	p, err := s.Backend.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	return slowProc{p}, nil
}

type slowProc struct{ backend.Process }

func (p slowProc) Stdout() io.Reader { return trickle{p.Process.Stdout()} }

type trickle struct{ r io.Reader }

func (t trickle) Read(b []byte) (int, error) {
	time.Sleep(time.Millisecond)
	return t.r.Read(b[:min(len(b), 16)])
}

// TestWaitHasAllOutputWhenTheEndComesFirst: a background job whose end
// the backend reports before its output has come through is reported
// exited with all of its output. Wait gave the output 100 ms after the
// end and cut the rest (a docker job under load kept 219 of 300 lines).
func TestWaitHasAllOutputWhenTheEndComesFirst(t *testing.T) {
	be, err := local.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	env := terminal.New(slowLink{be}, terminal.Options{SpillDir: t.TempDir()})
	t.Cleanup(func() { env.Close(context.Background()) })
	r := NewRegistry(time.Minute)
	st := r.Start(context.Background(), env, "k", terminal.Request{Command: `i=0; while [ $i -lt 300 ]; do echo "line $i"; i=$((i+1)); done`, Background: true})
	if st.Error != nil {
		t.Fatal(*st.Error)
	}
	w := r.Do(context.Background(), "k", Request{Action: "wait", SessionID: st.SessionID, Timeout: 60})
	if w["status"] != Exited || w["exit_code"] != 0 {
		t.Fatalf("wait: %v", w)
	}
	l := r.Do(context.Background(), "k", Request{Action: "log", SessionID: st.SessionID})
	if l["total_lines"] != 300 {
		t.Fatalf("log after exit: %v lines, want all 300", l["total_lines"])
	}
}
