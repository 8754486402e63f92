package mcpserver

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/a55dbaac/berth/approval"
)

// approvalInput is the id of berth's question among a call's input
// requests (multi round-trip).
const approvalInput = "berth_approval"

// multiRoundTripVersion is the first MCP protocol version in which a
// server may not send elicitation/create during a call: it returns the
// question as an input request and the client calls the tool again with
// the answer (SEP-2322).
const multiRoundTripVersion = "2026-07-28"

// answerSchema is the form the client shows: one required choice.
var answerSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"answer": map[string]any{
			"type":        "string",
			"title":       "Your answer",
			"description": "once: run it this time. session: allow this command for the rest of the session. always: add it to command_allowlist. deny: refuse.",
			"enum":        []string{"once", "session", "always", "deny"},
			"enumNames":   []string{"Run once", "Allow for this session", "Always allow (add to command_allowlist)", "Deny"},
		},
	},
	"required": []string{"answer"},
}

// Elicitor asks the human, through the MCP client's elicitation (form
// mode), whether a command that needs approval may run. One Elicitor
// serves a whole server; Asker gives the approval.Asker of one tool call.
//
// On protocol versions before 2026-07-28 the question is an
// elicitation/create request sent while the call waits (bounded by the
// approval timeout: silence is a denial). From 2026-07-28 on, servers may
// not send that request during a call: the call returns the question as an
// input request with a signed request state, the client asks the human and
// calls the tool again with the answer; an answer is accepted once, only
// for the same question, and only before the timeout has passed since the
// question was asked.
type Elicitor struct {
	key []byte
	now func() time.Time

	mu    sync.Mutex
	used  map[string]time.Time // answered question nonces, until they expire
	ended <-chan struct{}      // closed when the client's input ended; nil if unknown
}

// inputEnded reports whether the client can no longer answer anything.
func (e *Elicitor) inputEnded() bool {
	e.mu.Lock()
	ch := e.ended
	e.mu.Unlock()
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// NewElicitor returns an Elicitor with a fresh signing key.
func NewElicitor() *Elicitor {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		panic("mcpserver: no randomness for the approval signing key: " + err.Error())
	}
	return &Elicitor{key: key, now: time.Now, used: map[string]time.Time{}}
}

// Asker returns the approval.Asker of the tool call req, for the call's
// options (manager.WithAsker); the handler must return its Pending result
// when that is not nil.
func (e *Elicitor) Asker(req *mcp.CallToolRequest) *ElicitAsker {
	return &ElicitAsker{e: e, req: req}
}

// ElicitAsker asks the human about one tool call's command through MCP
// elicitation. It implements approval.Asker.
type ElicitAsker struct {
	e   *Elicitor
	req *mcp.CallToolRequest

	mu      sync.Mutex
	pending *mcp.CallToolResult
}

// Pending returns the input-required result the tool handler must return
// when the question was handed to the client (protocol 2026-07-28 and
// later); nil otherwise.
func (a *ElicitAsker) Pending() *mcp.CallToolResult {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pending
}

// Ask asks the human. Without the client's elicitation capability it
// returns an error wrapping approval.ErrCannotAsk.
func (a *ElicitAsker) Ask(ctx context.Context, q approval.Question) (approval.Answer, error) {
	if a.req == nil || a.req.Session == nil {
		return "", fmt.Errorf("%w: no MCP session", approval.ErrCannotAsk)
	}
	caps := a.req.ClientCapabilities()
	if caps == nil || caps.Elicitation == nil {
		return "", fmt.Errorf("%w: the MCP client does not support elicitation (it did not declare the capability), so berth cannot show the user the question", approval.ErrCannotAsk)
	}
	if caps.Elicitation.Form == nil && caps.Elicitation.URL != nil {
		return "", fmt.Errorf("%w: the MCP client supports only URL elicitation, not the form berth asks with", approval.ErrCannotAsk)
	}
	params := &mcp.ElicitParams{Mode: "form", Message: q.Text(), RequestedSchema: answerSchema}
	if a.req.ProtocolVersion() >= multiRoundTripVersion {
		return a.askRoundTrip(q, params)
	}
	if a.e.inputEnded() {
		return "", fmt.Errorf("%w: the MCP client closed its input, so no answer can come", approval.ErrCannotAsk)
	}
	a.e.mu.Lock()
	ended := a.e.ended
	a.e.mu.Unlock()
	if ended != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-ended:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	res, err := a.req.Session.Elicit(ctx, params)
	if err != nil && a.e.inputEnded() {
		return "", fmt.Errorf("%w: the MCP client closed its input before answering", approval.ErrCannotAsk)
	}
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", fmt.Errorf("elicitation: %w", err)
	}
	return answerOf(res), nil
}

// askRoundTrip answers from the retried call's input response when it
// answers this very question in time; otherwise it makes the call return
// the question.
func (a *ElicitAsker) askRoundTrip(q approval.Question, params *mcp.ElicitParams) (approval.Answer, error) {
	qh := a.questionHash(q)
	p := a.req.Params
	if resp, ok := p.InputResponses[approvalInput]; ok && p.RequestState != "" {
		st, err := a.e.verify(p.RequestState)
		if err == nil && st.Question == qh {
			if a.e.now().UnixMilli() > st.Expires {
				return "", fmt.Errorf("the answer came after the %s approval timeout: %w", q.Timeout, context.DeadlineExceeded)
			}
			if a.e.consume(st.Nonce, time.UnixMilli(st.Expires)) {
				if res, ok := resp.(*mcp.ElicitResult); ok {
					return answerOf(res), nil
				}
				return approval.AnswerDeny, nil
			}
		}
		// A forged, replayed or stale answer, or one to another question:
		// ask again.
	}
	state, err := a.e.sign(askState{Nonce: nonce(), Question: qh, Expires: a.e.now().Add(q.Timeout).UnixMilli()})
	if err != nil {
		return "", fmt.Errorf("elicitation: %w", err)
	}
	a.mu.Lock()
	a.pending = &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{approvalInput: params}, RequestState: state}
	a.mu.Unlock()
	return "", approval.ErrAskPending
}

// questionHash binds an answer to the question, the tool call's arguments
// and the MCP session.
func (a *ElicitAsker) questionHash(q approval.Question) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%s\x00", a.req.Session.ID(), q.Kind, q.Subject, q.Cwd, q.Backend)
	for _, f := range q.Findings {
		fmt.Fprintf(h, "%s\x00%s\x00", f.Rule.ID, f.Command)
	}
	if a.req.Params != nil {
		h.Write([]byte(a.req.Params.Name))
		h.Write(a.req.Params.Arguments)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// answerOf maps an elicitation result to an answer: accept with a choice
// is that choice (accept without content is "once": the user confirmed);
// decline, cancel and anything unclear deny.
func answerOf(res *mcp.ElicitResult) approval.Answer {
	if res == nil || res.Action != "accept" {
		return approval.AnswerDeny
	}
	if res.Content == nil {
		return approval.AnswerOnce
	}
	s, _ := res.Content["answer"].(string)
	switch approval.Answer(strings.ToLower(s)) {
	case approval.AnswerOnce:
		return approval.AnswerOnce
	case approval.AnswerSession:
		return approval.AnswerSession
	case approval.AnswerAlways:
		return approval.AnswerAlways
	}
	return approval.AnswerDeny
}

// askState is the signed request state of a question in flight.
type askState struct {
	Nonce    string `json:"n"`
	Question string `json:"q"`
	Expires  int64  `json:"e"` // unix milliseconds
}

func nonce() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// sign encodes st and its HMAC.
func (e *Elicitor) sign(st askState) (string, error) {
	body, err := json.Marshal(st)
	if err != nil {
		return "", err
	}
	m := hmac.New(sha256.New, e.key)
	m.Write(body)
	return base64.RawURLEncoding.EncodeToString(body) + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil)), nil
}

// verify decodes a request state and checks its HMAC.
func (e *Elicitor) verify(s string) (askState, error) {
	var st askState
	b64, sig64, ok := strings.Cut(s, ".")
	if !ok {
		return st, errors.New("malformed request state")
	}
	body, err1 := base64.RawURLEncoding.DecodeString(b64)
	sig, err2 := base64.RawURLEncoding.DecodeString(sig64)
	if err1 != nil || err2 != nil {
		return st, errors.New("malformed request state")
	}
	m := hmac.New(sha256.New, e.key)
	m.Write(body)
	if !hmac.Equal(sig, m.Sum(nil)) {
		return st, errors.New("request state not signed by this server")
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, fmt.Errorf("request state: %w", err)
	}
	return st, nil
}

// consume marks a question's nonce answered; false if it already was.
func (e *Elicitor) consume(n string, expires time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	for k, exp := range e.used {
		if now.After(exp) {
			delete(e.used, k)
		}
	}
	if _, done := e.used[n]; done {
		return false
	}
	e.used[n] = expires
	return true
}
