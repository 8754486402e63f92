package mcpserver

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/a55dbaac/berth/approval"
)

// approvalRig is an MCP server whose "run" tool passes its command through
// an approval.Gate with an Elicitor, the way the terminal tool does, and
// counts the commands that were allowed to run.
type approvalRig struct {
	gate    *approval.Gate
	el      *Elicitor
	ran     atomic.Int32
	pending atomic.Int32 // calls that returned the question to the client
	saved   [][]string
	version atomic.Value // protocol version of the last call

	clockMu sync.Mutex
	skew    time.Duration // added to the Elicitor's clock
}

type runArgs struct {
	Command string `json:"command"`
}

func newApprovalRig(t *testing.T, timeout time.Duration) *approvalRig {
	t.Helper()
	r := &approvalRig{el: NewElicitor()}
	r.el.now = func() time.Time {
		r.clockMu.Lock()
		defer r.clockMu.Unlock()
		return time.Now().Add(r.skew)
	}
	r.gate = approval.NewGate(nil, approval.GateOptions{Timeout: timeout, Persist: func(l []string) error {
		r.saved = append(r.saved, l)
		return nil
	}})
	return r
}

func (r *approvalRig) advance(d time.Duration) {
	r.clockMu.Lock()
	r.skew += d
	r.clockMu.Unlock()
}

// connect starts the rig's server and a go-sdk client over in-memory
// transports; version "" is the SDK's latest protocol.
func (r *approvalRig) connect(t *testing.T, version string, copts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "berth-test", Version: "test"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "run", Description: "run a command"}, func(ctx context.Context, req *mcp.CallToolRequest, in runArgs) (*mcp.CallToolResult, any, error) {
		r.version.Store(req.ProtocolVersion())
		ask := r.el.Asker(req)
		d := r.gate.Command(ctx, "session-1", in.Command, approval.Context{Backend: "local", Cwd: "/repo"}, ask)
		if p := ask.Pending(); p != nil {
			r.pending.Add(1)
			return p, nil, nil
		}
		if !d.Allowed() {
			return &mcp.CallToolResult{IsError: true}, map[string]any{"output": "", "exit_code": 126, "error": d.Message, "approval": d}, nil
		}
		r.ran.Add(1)
		return nil, map[string]any{"output": "ran", "exit_code": 0, "error": nil, "approval": d}, nil
	})
	st, ct := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "test"}, copts).Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call runs the tool and returns IsError and the structured result.
func runTool(t *testing.T, cs *mcp.ClientSession, command string) (bool, map[string]any) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run", Arguments: map[string]any{"command": command}})
	if err != nil {
		t.Fatalf("call %q: %v", command, err)
	}
	m, _ := res.StructuredContent.(map[string]any)
	return res.IsError, m
}

func approvalOf(m map[string]any) map[string]any {
	a, _ := m["approval"].(map[string]any)
	return a
}

// human answers elicitations with a fixed reply and records the messages.
type human struct {
	mu       sync.Mutex
	messages []string
	reply    func(ctx context.Context) (*mcp.ElicitResult, error)
}

func (h *human) handler(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	h.mu.Lock()
	h.messages = append(h.messages, req.Params.Message)
	h.mu.Unlock()
	return h.reply(ctx)
}

func (h *human) asked() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.messages)
}

func choose(answer string) func(context.Context) (*mcp.ElicitResult, error) {
	return func(context.Context) (*mcp.ElicitResult, error) {
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": answer}}, nil
	}
}

// protocols are the two ways a question reaches the client: a server
// request during the call (before 2026-07-28) and an input request in the
// result, answered on the retried call (2026-07-28, the SDK's default).
var protocols = []struct{ name, version, negotiated string }{
	{"elicitation-request", "2025-11-25", "2025-11-25"},
	{"multi-round-trip", "", "2026-07-28"},
}

func TestElicitAcceptOnce(t *testing.T) {
	for _, pr := range protocols {
		t.Run(pr.name, func(t *testing.T) {
			r := newApprovalRig(t, time.Minute)
			h := &human{reply: choose("once")}
			cs := r.connect(t, pr.version, &mcp.ClientOptions{ElicitationHandler: h.handler})
			isErr, m := runTool(t, cs, "git push --force")
			if isErr || m["output"] != "ran" || r.ran.Load() != 1 {
				t.Fatalf("not run: %v", m)
			}
			if a := approvalOf(m); a["decision"] != "approved_once" || a["by"] != "user" || a["rule"] != "git-push-force" {
				t.Fatalf("approval %v", a)
			}
			if h.asked() != 1 || !strings.Contains(h.messages[0], "git push --force") || !strings.Contains(h.messages[0], "/repo") {
				t.Fatalf("asked %d: %q", h.asked(), h.messages)
			}
			// The question took the protocol's own path.
			wantPending := int32(0)
			if pr.version == "" {
				wantPending = 1
			}
			if v := r.version.Load(); v != pr.negotiated || r.pending.Load() != wantPending {
				t.Fatalf("protocol %v, %d input-required results; want %s, %d", v, r.pending.Load(), pr.negotiated, wantPending)
			}
			// once is once: the next call asks again.
			runTool(t, cs, "git push --force")
			if h.asked() != 2 || r.ran.Load() != 2 {
				t.Fatalf("second call: asked %d, ran %d", h.asked(), r.ran.Load())
			}
			// A harmless command asks nothing and carries no approval.
			if _, m := runTool(t, cs, "ls -la"); approvalOf(m) != nil || h.asked() != 2 {
				t.Fatalf("harmless: %v, asked %d", m, h.asked())
			}
		})
	}
}

func TestElicitSessionIsNotAskedAgain(t *testing.T) {
	for _, pr := range protocols {
		t.Run(pr.name, func(t *testing.T) {
			r := newApprovalRig(t, time.Minute)
			h := &human{reply: choose("session")}
			cs := r.connect(t, pr.version, &mcp.ClientOptions{ElicitationHandler: h.handler})
			for i := range 3 {
				isErr, m := runTool(t, cs, "git reset --hard")
				if isErr || approvalOf(m)["decision"] != "approved_session" {
					t.Fatalf("call %d: %v", i, m)
				}
			}
			if h.asked() != 1 || r.ran.Load() != 3 {
				t.Fatalf("asked %d times, ran %d; want asked once, ran 3", h.asked(), r.ran.Load())
			}
		})
	}
}

func TestElicitAlwaysPersists(t *testing.T) {
	for _, pr := range protocols {
		t.Run(pr.name, func(t *testing.T) {
			r := newApprovalRig(t, time.Minute)
			h := &human{reply: choose("always")}
			cs := r.connect(t, pr.version, &mcp.ClientOptions{ElicitationHandler: h.handler})
			_, m := runTool(t, cs, "cd /repo && git push --force origin main")
			// As in Hermes, always saves the pattern's key (item 11).
			const key = "git force push (rewrites remote history)"
			if a := approvalOf(m); a["decision"] != "approved_always" || a["pattern"] != key {
				t.Fatalf("approval %v", a)
			}
			if len(r.saved) != 1 || len(r.saved[0]) != 1 || r.saved[0][0] != key {
				t.Fatalf("persisted %q", r.saved)
			}
			_, m = runTool(t, cs, "git push --force origin main")
			if a := approvalOf(m); a["decision"] != "allowed" || a["by"] != "allowlist" || h.asked() != 1 {
				t.Fatalf("after always: %v, asked %d", a, h.asked())
			}
		})
	}
}

func TestElicitDeclineAndCancelDeny(t *testing.T) {
	for _, pr := range protocols {
		for _, action := range []string{"decline", "cancel"} {
			t.Run(pr.name+"/"+action, func(t *testing.T) {
				r := newApprovalRig(t, time.Minute)
				h := &human{reply: func(context.Context) (*mcp.ElicitResult, error) { return &mcp.ElicitResult{Action: action}, nil }}
				cs := r.connect(t, pr.version, &mcp.ClientOptions{ElicitationHandler: h.handler})
				isErr, m := runTool(t, cs, "chmod -R 777 ./shared")
				if !isErr || r.ran.Load() != 0 {
					t.Fatalf("ran after %s: %v", action, m)
				}
				if a := approvalOf(m); a["decision"] != "denied" || a["by"] != "user" {
					t.Fatalf("approval %v", a)
				}
				if msg, _ := m["error"].(string); !strings.HasPrefix(msg, "BLOCKED: the user denied") {
					t.Fatalf("error %q", msg)
				}
			})
		}
	}
	// Accepting with the answer "deny" is a denial too.
	r := newApprovalRig(t, time.Minute)
	cs := r.connect(t, "", &mcp.ClientOptions{ElicitationHandler: (&human{reply: choose("deny")}).handler})
	if isErr, m := runTool(t, cs, "git clean -fdx"); !isErr || approvalOf(m)["decision"] != "denied" || r.ran.Load() != 0 {
		t.Fatalf("accept+deny: %v", m)
	}
}

func TestElicitTimeoutDenies(t *testing.T) {
	t.Run("elicitation-request", func(t *testing.T) {
		r := newApprovalRig(t, 100*time.Millisecond)
		release := make(chan struct{})
		h := &human{reply: func(ctx context.Context) (*mcp.ElicitResult, error) {
			select { // the human never answers
			case <-ctx.Done():
			case <-release:
			}
			return &mcp.ElicitResult{Action: "cancel"}, nil
		}}
		cs := r.connect(t, "2025-11-25", &mcp.ClientOptions{ElicitationHandler: h.handler})
		t.Cleanup(func() { close(release) })
		isErr, m := runTool(t, cs, "git push --force")
		if a := approvalOf(m); !isErr || a["decision"] != "denied" || a["by"] != "timeout" || r.ran.Load() != 0 {
			t.Fatalf("after silence: %v", m)
		}
	})
	t.Run("multi-round-trip", func(t *testing.T) {
		r := newApprovalRig(t, time.Minute)
		h := &human{reply: func(context.Context) (*mcp.ElicitResult, error) {
			r.advance(2 * time.Minute) // the human answers long after the timeout
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "once"}}, nil
		}}
		cs := r.connect(t, "", &mcp.ClientOptions{ElicitationHandler: h.handler})
		isErr, m := runTool(t, cs, "git push --force")
		if a := approvalOf(m); !isErr || a["decision"] != "denied" || a["by"] != "timeout" || r.ran.Load() != 0 {
			t.Fatalf("late answer: %v", m)
		}
	})
}

func TestElicitWithoutCapabilityIsBlocked(t *testing.T) {
	for _, pr := range protocols {
		t.Run(pr.name, func(t *testing.T) {
			r := newApprovalRig(t, time.Minute)
			cs := r.connect(t, pr.version, nil)
			isErr, m := runTool(t, cs, "git push --force")
			if !isErr || r.ran.Load() != 0 {
				t.Fatalf("ran without a way to ask: %v", m)
			}
			a := approvalOf(m)
			msg, _ := m["error"].(string)
			if a["decision"] != "blocked" || a["by"] != "rule" || !strings.HasPrefix(msg, "BLOCKED: ") ||
				!strings.Contains(msg, "does not support elicitation") ||
				!strings.Contains(msg, "Only the user can allow it") ||
				strings.Contains(msg, "berth config set") {
				t.Fatalf("approval %v\nerror %s", a, msg)
			}
			// The floor never reaches the question, with or without a client.
			if isErr, m := runTool(t, cs, "rm -rf --no-preserve-root /"); !isErr || approvalOf(m)["by"] != "floor" {
				t.Fatalf("floor: %v", m)
			}
		})
	}
}

// A client answering by hand (multi round-trip handling disabled) cannot
// reuse an answer, forge the request state, or apply an answer to another
// command: each of those is asked again.
func TestElicitRoundTripAnswerIsBoundAndSingleUse(t *testing.T) {
	r := newApprovalRig(t, time.Minute)
	cs := r.connect(t, "", &mcp.ClientOptions{
		ElicitationHandler: (&human{reply: choose("once")}).handler,
		MultiRoundTrip:     &mcp.MultiRoundTripOptions{Disabled: true},
	})
	ctx := context.Background()
	ask := func(cmd string) *mcp.CallToolResult {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run", Arguments: map[string]any{"command": cmd}})
		if err != nil {
			t.Fatal(err)
		}
		if !res.NeedsInput() || res.InputRequests[approvalInput] == nil || res.RequestState == "" {
			t.Fatalf("%q: no question in the result: %+v", cmd, res)
		}
		return res
	}
	answer := func(cmd, state string) *mcp.CallToolResult {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{
			Name: "run", Arguments: map[string]any{"command": cmd}, RequestState: state,
			InputResponses: mcp.InputResponseMap{approvalInput: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "once"}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	q := ask("git push --force")
	if ep, ok := q.InputRequests[approvalInput].(*mcp.ElicitParams); !ok || !strings.Contains(ep.Message, "git push --force") {
		t.Fatalf("question %+v", q.InputRequests[approvalInput])
	}
	if res := answer("git push --force", q.RequestState); res.NeedsInput() || res.IsError || r.ran.Load() != 1 {
		t.Fatalf("answered call did not run: %+v", res)
	}
	if res := answer("git push --force", q.RequestState); !res.NeedsInput() || r.ran.Load() != 1 {
		t.Fatalf("a replayed answer ran the command again")
	}
	if res := answer("git reset --hard", q.RequestState); !res.NeedsInput() || r.ran.Load() != 1 {
		t.Fatalf("an answer to another command was accepted")
	}
	forged := q.RequestState[:len(q.RequestState)-2] + "AA"
	if res := answer("git push --force", forged); !res.NeedsInput() || r.ran.Load() != 1 {
		t.Fatalf("a forged request state was accepted")
	}
}
