package daytona

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/testenv/daytonafake"
	"github.com/a55dbaac/berth/terminal"
)

// The tests of berth against each unkind switch of the fake alone: each
// names the switch, and fails on a berth that does not survive it.

// TestSlowConsumerNeverDropped: a command whose output outruns the link
// between Daytona's daemon and berth. The daemon drops a client whose
// 256-message queue is full, so berth paces the output; the command's
// whole output arrives and the shell (with a variable that only it holds)
// is still there.
func TestSlowConsumerNeverDropped(t *testing.T) {
	fake := daytonafake.StartUnkind(t, daytonafake.Unkind{DropSlowConsumer: true, LinkBytesPerSec: 1 << 20})
	e := termEnv(t, newBackend(t, testOptions(t, fake, nil, nil)))
	must(t, e, "only_in_this_shell=kept", "")
	const n = 3000000
	r := e.Run(context.Background(), terminal.Request{Command: "head -c " + strconv.Itoa(n) + " /dev/zero | tr '\\000' a; echo; echo the-end", Timeout: 120})
	if r.Error != nil || r.ExitCode != 0 || !strings.HasSuffix(r.Output, "the-end") || r.OutputTotalChars != n+1+7 {
		t.Fatalf("big output: exit %d err %s, %d chars, ends %q", r.ExitCode, errText(r.Error), r.OutputTotalChars, r.Output[max(0, len(r.Output)-40):])
	}
	must(t, e, "echo $only_in_this_shell", "kept")
	if d := fake.Unkindness().SlowConsumersDropped; d != 0 {
		t.Fatalf("the daemon dropped berth %d times as a slow consumer", d)
	}
}

// TestCloseFirstKeepsTTYTail: the daemon writes a PTY session's close
// message as soon as its shell exits, ahead of output still queued. A TTY
// process's last output must arrive all the same.
func TestCloseFirstKeepsTTYTail(t *testing.T) {
	fake := daytonafake.StartUnkind(t, daytonafake.Unkind{CloseFirst: true, LinkBytesPerSec: 512 << 10})
	b := newBackend(t, testOptions(t, fake, nil, nil))
	ctx := ctxT(t)
	const n = 400000
	p, err := b.Start(ctx, backend.ProcSpec{Argv: []string{"/bin/sh", "-c", "head -c " + strconv.Itoa(n) + " /dev/zero | tr '\\000' b; echo; echo tty-tail; exit 7"}, TTY: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	out, rerr := io.ReadAll(p.Stdout())
	code, werr := p.Wait()
	if rerr != nil || werr != nil || code != 7 {
		t.Fatalf("exit %d, read %v, wait %v", code, rerr, werr)
	}
	if got := strings.Count(string(out), "b"); got != n || !strings.Contains(string(out), "tty-tail") {
		t.Fatalf("%d of %d bytes, tail present %v: the close message overtook the output", got, n, strings.Contains(string(out), "tty-tail"))
	}
}

// TestListLagRemoveFindsNewSandbox: berth env rm right after a create,
// while Daytona's list does not show the sandbox yet, still deletes it.
func TestListLagRemoveFindsNewSandbox(t *testing.T) {
	fake := daytonafake.StartUnkind(t, daytonafake.Unkind{ListLag: time.Hour})
	opts := testOptions(t, fake, func(c *config.Terminal) { c.ContainerPersistent = true }, nil)
	ctx := ctxT(t)
	b, err := New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	id := b.SandboxID()
	if err := (envAdmin{}).Remove(ctx, opts, opts.Key); err != nil {
		t.Fatal(err)
	}
	if info, ok := fake.Sandbox(id); ok && info.State != "destroying" && info.State != "destroyed" {
		b.Close(ctx)
		t.Fatalf("berth env rm left sandbox %s %s running (the list did not show it yet)", id, info.State)
	}
	b.Close(ctx)
}

// TestRateLimitedCallsRetried: every third call of each of Daytona's
// throttler buckets answered 429; berth waits as told and carries on.
func TestRateLimitedCallsRetried(t *testing.T) {
	fake := daytonafake.StartUnkind(t, daytonafake.Unkind{RateLimitEvery: 3, RetryAfter: 1})
	opts := testOptions(t, fake, func(c *config.Terminal) { c.ContainerPersistent = true }, nil)
	t.Cleanup(func() { envAdmin{}.Remove(context.Background(), opts, opts.Key) })
	b := newBackend(t, opts)
	must(t, termEnv(t, b), "echo ok", "ok")
	if err := b.Close(ctxT(t)); err != nil {
		t.Fatalf("close: %v", err)
	}
	if n := fake.Unkindness().RateLimited; n == 0 {
		t.Fatal("the fake rate-limited nothing: the test tested nothing")
	}
}

// TestRateLimitGivingUpIsReported: a 429 asking for a longer wait than
// berth's retry budget fails at once, with an error that says so.
func TestRateLimitGivingUpIsReported(t *testing.T) {
	fake := daytonafake.StartUnkind(t, daytonafake.Unkind{RateLimitEvery: 1, RetryAfter: 3600})
	_, err := New(ctxT(t), testOptions(t, fake, nil, nil))
	if err == nil {
		t.Fatal("New succeeded against an API that refuses every call")
	}
	for _, want := range []string{"429", "rate", "3600", "gave up"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// TestTransientErrorsRetried: every fourth request, toolbox and websocket
// upgrades included, answered 502 or 503; everything berth does succeeds.
func TestTransientErrorsRetried(t *testing.T) {
	fake := daytonafake.StartUnkind(t, daytonafake.Unkind{TransientEvery: 4})
	b := newBackend(t, testOptions(t, fake, nil, nil))
	e := termEnv(t, b)
	for i := 0; i < 5; i++ {
		must(t, e, "echo "+strconv.Itoa(i), strconv.Itoa(i))
		if err := b.WriteFile(ctxT(t), "/tmp/w"+strconv.Itoa(i), strings.NewReader("data"), 4, 0o600); err != nil {
			t.Fatalf("write file: %v", err)
		}
		if out, _ := run(t, b, "cat /tmp/w"+strconv.Itoa(i), ""); out != "data" {
			t.Fatalf("file %d holds %q", i, out)
		}
	}
	if n := fake.Unkindness().Transient; n == 0 {
		t.Fatal("the fake sent no transient error: the test tested nothing")
	}
}

// TestDisruptedMidCommand: the sandbox stopped, archived, deleted or put
// in state error from outside while a command runs. The command fails with
// a clear error; the next command runs, in the same shell state; the files
// are kept unless the sandbox itself is gone (then environment_recreated
// says so). A recoverable error is recovered, not deleted.
func TestDisruptedMidCommand(t *testing.T) {
	fake := daytonafake.Start(t)
	for _, c := range []struct {
		d    daytonafake.Disruption
		kept bool
	}{
		{daytonafake.Stop, true},
		{daytonafake.Archive, true},
		{daytonafake.ErrorRecoverable, true},
		{daytonafake.Delete, false},
		{daytonafake.ErrorFatal, false},
	} {
		t.Run(strings.ReplaceAll(c.d.String(), " ", "_"), func(t *testing.T) {
			// Each disrupts its own sandbox and waits (on the fake, on a
			// retried sleep): side by side.
			t.Parallel()
			b := newBackend(t, testOptions(t, fake, nil, nil))
			e := termEnv(t, b)
			must(t, e, "cd /tmp && export KEPT=yes && echo data >/tmp/kept", "")
			done, err := fake.DisruptOnOutput(b.SandboxID(), "MID-2-CMD", c.d)
			if err != nil {
				t.Fatal(err)
			}
			// The fake disrupts the sandbox the moment the marker leaves the
			// terminal, so berth may or may not have got the shell's
			// acknowledgement of the command before the connection died:
			// the command fails (its shell died under it), or, if berth
			// never saw it start, it is run again in a fresh shell and
			// ends normally. Either way it ends, within a minute of its
			// sleep, however long the fake took to disrupt under load.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			res := make(chan terminal.Result, 1)
			go func() {
				res <- e.Run(ctx, terminal.Request{Command: "echo MID-$((1+1))-CMD; sleep 20", Timeout: 600})
			}()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			var r terminal.Result
			select {
			case r = <-res:
			case <-time.After(80 * time.Second):
				cancel()
				<-res
				info, _ := fake.Sandbox(b.SandboxID())
				t.Fatalf("the command still ran 80 s after the sandbox went %s (%s)", c.d, info.State)
			}
			failed := r.Error != nil || r.ExitCode >= 128
			retried := r.Error == nil && r.ExitCode == 0 && strings.Contains(r.Output, "MID-2-CMD")
			if !failed && !retried {
				t.Fatalf("the disrupted command: exit %d err %s output %q", r.ExitCode, errText(r.Error), r.Output)
			}
			want := "yes\n/tmp\ndata"
			if !c.kept {
				want = "yes\n/tmp\ngone"
			}
			// The first result after the new sandbox says so: the retried
			// command's, or else the next one's.
			next := must(t, e, "echo $KEPT; pwd; cat /tmp/kept 2>/dev/null || echo gone", want)
			if recreated := r.EnvironmentRecreated || next.EnvironmentRecreated; recreated == c.kept {
				t.Errorf("environment_recreated %v after %s (disrupted command's result: %v, next: %v)", recreated, c.d, r.EnvironmentRecreated, next.EnvironmentRecreated)
			}
		})
	}
}

// TestExecuteThroughUserShell: Daytona's current daemon runs the toolbox's
// execute call through the user's shell, where a double-quoted argument
// would expand $ and backquotes. A file whose path holds both quote kinds
// and a $ is written exactly there.
func TestExecuteThroughUserShell(t *testing.T) {
	fake := daytonafake.StartUnkind(t, daytonafake.Unkind{ExecShell: true})
	b := newBackend(t, testOptions(t, fake, nil, nil))
	dir := `/tmp/it's "$HOME" ` + "`x`"
	lit := `d='/tmp/it'"'"'s "$HOME" ` + "`x`'; " // the same path as a shell literal
	if out, code := run(t, b, lit+`mkdir -p "$d" && printf '%s' "$d"`, ""); code != 0 || out != dir {
		t.Fatalf("mkdir: %q %d", out, code)
	}
	if err := b.WriteFile(ctxT(t), dir+"/f", strings.NewReader("exact"), 5, 0o640); err != nil {
		t.Fatalf("write: %v", err)
	}
	if out, _ := run(t, b, lit+`cat "$d/f"`, ""); out != "exact" {
		t.Fatalf("file at the exact path: %q", out)
	}
	if code, err := b.RunOneShot(ctxT(t), `x='a b'; case "$x" in "a b") exit 4;; esac`); err != nil || code != 4 {
		t.Fatalf("one-shot through the shell: %d %v", code, err)
	}
}

// TestNonRootUser: Daytona's sandboxes run as a non-root user by default;
// berth starts in that user's home and keeps files there.
func TestNonRootUser(t *testing.T) {
	fake := daytonafake.StartUnkind(t, daytonafake.Unkind{NonRootUser: true})
	e := termEnv(t, newBackend(t, testOptions(t, fake, nil, nil)))
	must(t, e, "pwd; id -u; echo x >here && cat here", "/home/daytona\n1000\nx")
}

// TestIdleConnectionsPinged: a load balancer cuts websockets idle for a
// while; berth pings them, so the shell (and a variable only it holds)
// outlives a pause longer than the cut.
func TestIdleConnectionsPinged(t *testing.T) {
	old := pingInterval.Swap(int64(100 * time.Millisecond))
	t.Cleanup(func() { pingInterval.Store(old) })
	fake := daytonafake.StartUnkind(t, daytonafake.Unkind{IdleCut: 3 * time.Second}) // 30 pings: no hiccup under load reaches it
	e := termEnv(t, newBackend(t, testOptions(t, fake, nil, nil)))
	must(t, e, "only_in_this_shell=kept", "")
	time.Sleep(7 * time.Second) // idle, longer than twice the cut
	must(t, e, "echo $only_in_this_shell", "kept")
	if n := fake.Unkindness().IdleCut; n != 0 {
		t.Fatalf("%d idle connections cut", n)
	}
}

// TestAPIURLPasswordNeverShown is the regression test of the security
// review's N15: a DAYTONA_API_URL with a password in it never appears
// with the password in an error or in doctor's report.
func TestAPIURLPasswordNeverShown(t *testing.T) {
	fake := daytonafake.Start(t)
	const secret = "pw-5ecret-N15"
	withPW := strings.Replace(fake.APIURL(), "http://", "http://berth:"+secret+"@", 1)
	ctx := ctxT(t)
	for name, env := range map[string]map[string]string{
		"unreachable": {EnvAPIURL: "http://berth:" + secret + "@127.0.0.1:1/api", EnvAPIKey: "k"},
		"rejected":    {EnvAPIURL: withPW, EnvAPIKey: "wrong-key"},
		"malformed":   {EnvAPIURL: "ftp://berth:" + secret + "@host/api", EnvAPIKey: "k"},
		"unparsable":  {EnvAPIURL: "http://berth:" + secret + "@[::1/api", EnvAPIKey: "k"},
	} {
		opts := testOptions(t, fake, nil, nil)
		opts.Getenv = func(k string) string { return env[k] }
		b, err := New(ctx, opts)
		if err == nil {
			b.Close(ctx)
			t.Errorf("%s: New succeeded", name)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: error shows the password: %v", name, err)
		}
		fp := Doctor(ctx, opts)
		if strings.Contains(fp.Summary+strings.Join(fp.Details, "\n")+fp.Fix, secret) {
			t.Errorf("%s: doctor shows the password: %+v", name, fp)
		}
		if _, err := (envAdmin{}).List(ctx, opts); err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("%s: berth env ls shows the password: %v", name, err)
		}
	}
	var ae *AuthError
	opts := testOptions(t, fake, nil, nil)
	opts.Getenv = func(k string) string { return map[string]string{EnvAPIURL: withPW, EnvAPIKey: "wrong"}[k] }
	if _, err := New(ctx, opts); !errors.As(err, &ae) {
		t.Fatalf("a wrong key with a password URL: %v, want an AuthError", err)
	}
}

// TestPacingEndsWhenBerthLetsGo: a process berth closed while it still
// prints (Close does not kill), and whose output berth had stopped (XOFF)
// because nobody read it, runs to its end: the output is started again
// and the pacing that holds it back until berth acknowledged it stops once
// berth is gone. Without the XON on Close, or without the pacer's "u", it
// blocked for ever. Berth lets go while another write holds the socket
// (as the flow loop does sending credits for output still on its way):
// Close that gave up on a held lock left the output stopped for good.
func TestPacingEndsWhenBerthLetsGo(t *testing.T) {
	fake := daytonafake.Start(t)
	b := newBackend(t, testOptions(t, fake, nil, nil))
	ctx := ctxT(t)
	p, err := b.Start(ctx, backend.ProcSpec{Argv: []string{"/bin/sh", "-c", "head -c 4000000 /dev/zero; echo done >/tmp/let-go"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(p.Stdout(), make([]byte, 100000)); err != nil {
		t.Fatal(err)
	}
	// Nobody reads on: berth's buffer fills and it stops the terminal.
	for pp := p.(*ptyProc); ; {
		pp.wmu.Lock()
		stopped := pp.xoffSent
		pp.wmu.Unlock()
		if stopped {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("berth never stopped the output of a process nobody read")
		}
		time.Sleep(10 * time.Millisecond)
	}
	pp := p.(*ptyProc)
	pp.wmu.Lock() // a credit is being sent as berth lets go
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	time.Sleep(100 * time.Millisecond)
	pp.wmu.Unlock()
	<-closed
	if out, code := run(t, b, "for i in $(seq 300); do [ -e /tmp/let-go ] && break; sleep 0.1; done; cat /tmp/let-go", ""); code != 0 || out != "done\n" {
		t.Fatalf("the process did not run to its end after berth let go: %q exit %d", out, code)
	}
}
