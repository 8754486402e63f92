package approval

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// scriptedAsker answers from a list and records the questions.
type scriptedAsker struct {
	mu        sync.Mutex
	answers   []Answer
	err       error
	block     bool // wait for ctx to end
	questions []Question
}

func (a *scriptedAsker) Ask(ctx context.Context, q Question) (Answer, error) {
	a.mu.Lock()
	a.questions = append(a.questions, q)
	a.mu.Unlock()
	if a.block {
		<-ctx.Done()
		return "", ctx.Err()
	}
	if a.err != nil {
		return "", a.err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	ans := a.answers[0]
	a.answers = a.answers[1:]
	return ans, nil
}

func (a *scriptedAsker) asked() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.questions)
}

func TestGateAnswers(t *testing.T) {
	ctx := context.Background()
	var saved [][]string
	g := NewGate(nil, GateOptions{Persist: func(l []string) error { saved = append(saved, l); return nil }})

	once := &scriptedAsker{answers: []Answer{AnswerOnce, AnswerOnce}}
	for range 2 {
		d := g.Command(ctx, "s1", "git push --force", testCtx, once)
		if !d.Allowed() || d.Outcome != ApprovedOnce || d.By != ByUser || d.Rule != "git-push-force" {
			t.Fatalf("once: %+v", d)
		}
	}
	if once.asked() != 2 {
		t.Fatalf("once asked %d times, want 2 (once is not remembered)", once.asked())
	}
	q := once.questions[0]
	if q.Kind != "command" || q.Subject != "git push --force" || q.Cwd != testCtx.Cwd || q.Backend != "local" || q.Timeout != DefaultTimeout {
		t.Errorf("question %+v", q)
	}
	if txt := q.Text(); !strings.Contains(txt, "git push --force") || !strings.Contains(txt, "/home/dev/proj") || !strings.Contains(txt, "once") || !strings.Contains(txt, "deny") {
		t.Errorf("question text:\n%s", txt)
	}

	sess := &scriptedAsker{answers: []Answer{AnswerSession}}
	d := g.Command(ctx, "s1", "git reset --hard", testCtx, sess)
	if d.Outcome != ApprovedSession {
		t.Fatalf("session: %+v", d)
	}
	d = g.Command(ctx, "s1", "git reset --hard", testCtx, sess)
	if d.Outcome != ApprovedSession || sess.asked() != 1 {
		t.Fatalf("second call in the session: %+v, asked %d", d, sess.asked())
	}
	// Another session, or the session after it ended, is asked again.
	other := &scriptedAsker{answers: []Answer{AnswerDeny, AnswerDeny}}
	if d := g.Command(ctx, "s2", "git reset --hard", testCtx, other); d.Outcome != Denied || d.Allowed() {
		t.Fatalf("other session: %+v", d)
	}
	g.EndSession("s1")
	if d := g.Command(ctx, "s1", "git reset --hard", testCtx, other); d.Outcome != Denied || d.By != ByUser || !strings.HasPrefix(d.Message, "BLOCKED: the user denied") {
		t.Fatalf("after EndSession: %+v", d)
	}

	// always saves the pattern key, as Hermes does: every recursive
	// removal is allowed from then on (the floor still holds).
	always := &scriptedAsker{answers: []Answer{AnswerAlways}}
	d = g.Command(ctx, "s3", "rm -rf old-data", testCtx, always)
	if d.Outcome != ApprovedAlways || d.Pattern != "recursive delete" {
		t.Fatalf("always: %+v", d)
	}
	if len(saved) != 1 || strings.Join(saved[0], ",") != "recursive delete" {
		t.Fatalf("persisted %q", saved)
	}
	// Now allowlisted, in any session, without asking.
	none := &scriptedAsker{}
	d = g.Command(ctx, "s9", "rm -rf other-data", testCtx, none)
	if d.Outcome != Allowed || d.By != ByAllowlist || none.asked() != 0 {
		t.Fatalf("after always: %+v", d)
	}
}

func TestGateBlockedWithoutAsker(t *testing.T) {
	g := NewGate(mustPolicy(t, "manual", nil, []string{"make deploy"}), GateOptions{})
	d := g.Command(context.Background(), "s", "git push --force origin main", testCtx, nil)
	if d.Allowed() || d.Outcome != Blocked || d.By != ByRule {
		t.Fatalf("%+v", d)
	}
	for _, s := range []string{"BLOCKED: `git push --force origin main` needs the user's approval", "Only the user can allow it"} {
		if !strings.Contains(d.Message, s) {
			t.Errorf("message lacks %q:\n%s", s, d.Message)
		}
	}
	if strings.Contains(d.Message, "berth config set") {
		t.Errorf("message hands the agent a config line:\n%s", d.Message)
	}
	var be *BlockedError
	if err := d.Err(); !errors.As(err, &be) || err.Error() != d.Message {
		t.Errorf("Err() = %v", err)
	}
	// The ErrCannotAsk of an asker says why.
	cant := &scriptedAsker{err: fmt.Errorf("%w: the MCP client did not declare elicitation", ErrCannotAsk)}
	d = g.Command(context.Background(), "s", "git clean -fdx", testCtx, cant)
	if d.Outcome != Blocked || !strings.Contains(d.Message, "did not declare elicitation") {
		t.Fatalf("%+v", d)
	}
}

func TestGateTimeoutDenies(t *testing.T) {
	g := NewGate(nil, GateOptions{Timeout: 50 * time.Millisecond})
	d := g.Command(context.Background(), "s", "chmod 777 x", testCtx, &scriptedAsker{block: true})
	if d.Outcome != Denied || d.By != ByTimeout || !strings.Contains(d.Message, "did not answer") {
		t.Fatalf("%+v", d)
	}
	// The caller's own cancellation is not a timeout.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d = g.Command(ctx, "s", "chmod 777 x", testCtx, &scriptedAsker{block: true})
	if d.Allowed() || d.By == ByTimeout {
		t.Fatalf("cancelled: %+v", d)
	}
}

func TestGateAlwaysThatCannotBeSaved(t *testing.T) {
	g := NewGate(nil, GateOptions{Persist: func([]string) error { return errors.New("disk full") }})
	a := &scriptedAsker{answers: []Answer{AnswerAlways}}
	d := g.Command(context.Background(), "s", "git branch -D x", testCtx, a)
	if d.Outcome != ApprovedSession || !strings.Contains(d.Message, "disk full") {
		t.Fatalf("%+v", d)
	}
	if len(g.Policy().Allowlist()) != 0 {
		t.Errorf("the allowlist grew though saving failed: %q", g.Policy().Allowlist())
	}
	if d := g.Command(context.Background(), "s", "git branch -D x", testCtx, nil); d.Outcome != ApprovedSession {
		t.Errorf("not remembered for the session: %+v", d)
	}
}

func TestGateFloorAndDenyNeverAsk(t *testing.T) {
	a := &scriptedAsker{answers: []Answer{AnswerOnce}}
	g := NewGate(mustPolicy(t, "manual", []string{"git push*"}, nil), GateOptions{})
	ctx := context.Background()
	for _, cmd := range []string{"rm -rf /", "git push -f"} {
		if d := g.Command(ctx, "s", cmd, testCtx, a); d.Allowed() || d.Outcome != Blocked {
			t.Errorf("%q: %+v", cmd, d)
		}
	}
	if a.asked() != 0 {
		t.Errorf("the user was asked about a floor or deny command")
	}
	if d := g.Write(ctx, "s", "~/.ssh/config", testCtx, a); d.Outcome != ApprovedOnce || d.Rule != "write-ssh" {
		t.Errorf("write: %+v", d)
	}
	if q := a.questions[0]; q.Kind != "write" || q.Subject != "/home/dev/.ssh/config" {
		t.Errorf("write question %+v", q)
	}
}

func TestPromptAsker(t *testing.T) {
	inR, inW := io.Pipe()
	defer inW.Close()
	var out strings.Builder
	var mu sync.Mutex
	p := NewPromptAsker(inR, &lockedWriter{w: &out, mu: &mu})
	q := Question{Kind: "command", Subject: "git push --force", Findings: []Finding{{Rule: mustRule("git-push-force"), Command: "git push --force"}}}
	for line, want := range map[string]Answer{"s": AnswerSession, "always": AnswerAlways, "o": AnswerOnce, "": AnswerDeny, "what?": AnswerDeny} {
		go fmt.Fprintln(inW, line)
		got, err := p.Ask(context.Background(), q)
		if err != nil || got != want {
			t.Errorf("typed %q: %q, %v; want %q", line, got, err, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := p.Ask(ctx, q); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("silence: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(out.String(), "git push --force") || !strings.Contains(out.String(), "[o]nce") {
		t.Errorf("prompt output:\n%s", out.String())
	}
	// Sharing the caller's line channel.
	lines := make(chan string, 1)
	lines <- "session"
	if got, err := NewLinePromptAsker(lines, io.Discard).Ask(context.Background(), q); err != nil || got != AnswerSession {
		t.Errorf("line asker: %q, %v", got, err)
	}
	close(lines)
	if _, err := NewLinePromptAsker(lines, io.Discard).Ask(context.Background(), q); !errors.Is(err, ErrCannotAsk) {
		t.Errorf("closed input: %v", err)
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
