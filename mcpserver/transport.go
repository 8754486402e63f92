package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/a55dbaac/berth/manager"
)

// Limits of one MCP message and of the file content carried in it.
const (
	// MaxContentBytes is the most file content write_file accepts in one
	// call (and the most text patch takes in old_string or new_string):
	// the manager's limit, which the tool description advertises.
	MaxContentBytes = manager.MaxContentBytes
	// MaxMessageBytes bounds one JSON-RPC message: a line on stdio, a
	// request body over HTTP. It holds MaxContentBytes of content even when
	// every byte is JSON-escaped as \u00XX (six bytes), plus the envelope,
	// so no call within the content limit is refused by the transport. A
	// larger message is answered with a clear error and skipped; the
	// session goes on.
	MaxMessageBytes = 6*MaxContentBytes + 4<<20
	// headBytes is how much of an over-long message is kept to find its id,
	// method and tool name for the error reply.
	headBytes = 64 << 10
)

// StdioTransport is berth's MCP transport over newline-delimited JSON-RPC
// on a reader and a writer (stdin and stdout for berth mcp). Unlike the
// SDK's, it survives bad input: a line that is not JSON, not UTF-8, or not
// a JSON-RPC message is answered with a -32700 (parse error) or -32600
// (invalid request) reply and skipped; a line longer than MaxMessageBytes
// is answered with an error naming the limit (a tool error for tools/call)
// and skipped. Only the end of the input, or Close, ends the session.
// JSON-RPC batches (arrays) are refused: MCP dropped them in 2025-06-18.
type StdioTransport struct {
	// Reader and Writer carry the messages; nil means os.Stdin and
	// os.Stdout. A Reader that is an io.Closer is closed with the
	// connection, which unblocks a pending read.
	Reader io.Reader
	Writer io.Writer
	// MaxMessageBytes bounds one line; 0 means MaxMessageBytes.
	MaxMessageBytes int
	// Logger receives diagnostics about skipped lines; nil means
	// slog.Default().
	Logger *slog.Logger

	mu      sync.Mutex
	conn    *lineConn
	ended   chan struct{} // closed at the end of the input
	endOnce sync.Once
}

// InputEnded returns a channel closed once the input has ended (EOF or a
// read error): from then on the client can answer no question.
func (t *StdioTransport) InputEnded() <-chan struct{} { return t.endedChan() }

func (t *StdioTransport) endedChan() chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended == nil {
		t.ended = make(chan struct{})
	}
	return t.ended
}

// Connect implements mcp.Transport.
func (t *StdioTransport) Connect(context.Context) (mcp.Connection, error) {
	r, w := t.Reader, t.Writer
	if r == nil {
		r = os.Stdin
	}
	if w == nil {
		w = os.Stdout
	}
	limit := t.MaxMessageBytes
	if limit <= 0 {
		limit = MaxMessageBytes
	}
	log := t.Logger
	if log == nil {
		log = slog.Default()
	}
	c := &lineConn{w: w, log: log, incoming: make(chan jsonrpc.Message), closed: make(chan struct{}), readErr: make(chan error, 1),
		unanswered: map[jsonrpc.ID]bool{}, ended: t.endedChan(), endOnce: &t.endOnce}
	if rc, ok := r.(io.Closer); ok {
		c.rc = rc
	}
	t.mu.Lock()
	t.conn = c
	t.mu.Unlock()
	go c.readLoop(r, limit)
	return c, nil
}

// waitAnswered returns once every request read so far has been answered,
// or when ctx ends.
func (t *StdioTransport) waitAnswered(ctx context.Context) {
	t.mu.Lock()
	c := t.conn
	t.mu.Unlock()
	if c != nil {
		c.pending.wait(ctx)
	}
}

// lineConn is the connection of a StdioTransport.
type lineConn struct {
	w   io.Writer
	wmu sync.Mutex
	log *slog.Logger
	rc  io.Closer

	incoming  chan jsonrpc.Message
	readErr   chan error
	closed    chan struct{}
	closeOnce sync.Once
	ended     chan struct{} // closed by readLoop when the input ends
	endOnce   *sync.Once

	// Requests delivered and not yet answered, so a shutdown can let
	// their answers out before closing.
	umu        sync.Mutex
	unanswered map[jsonrpc.ID]bool
	pending    callCounter
}

// readLoop reads lines until the input ends, delivering the valid messages
// and answering the others.
func (c *lineConn) readLoop(r io.Reader, limit int) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, over, err := readLine(br, limit)
		if over {
			c.tooLarge(line, limit)
		} else if msg := c.parse(line); msg != nil {
			c.track(msg)
			select {
			case c.incoming <- msg:
			case <-c.closed:
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.EOF
			}
			c.endOnce.Do(func() { close(c.ended) })
			c.readErr <- err
			return
		}
	}
}

// readLine returns the next line without its newline. A line longer than
// limit is consumed whole but only its first headBytes are returned, with
// over set.
func readLine(br *bufio.Reader, limit int) (line []byte, over bool, err error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if !over && len(buf)+len(chunk) > limit+1 { // +1: the newline
			over = true
			buf = append(buf, chunk[:min(len(chunk), max(0, headBytes-len(buf)))]...)
			buf = append([]byte(nil), buf[:min(len(buf), headBytes)]...)
		} else if !over {
			buf = append(buf, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if !over {
			buf = bytes.TrimSuffix(buf, []byte("\n"))
		}
		return buf, over, err
	}
}

// parse decodes one line, answering it when it is not a JSON-RPC message.
// It returns nil for a line that was answered or blank.
func (c *lineConn) parse(line []byte) jsonrpc.Message {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return nil
	}
	if !utf8.Valid(line) {
		c.reject(peekID(bytes.ToValidUTF8(line, []byte("\uFFFD"))), jsonrpc.CodeParseError,
			"parse error: the message is not valid UTF-8; JSON-RPC messages must be UTF-8 text")
		return nil
	}
	var raw json.RawMessage
	if err := json.Unmarshal(line, &raw); err != nil {
		c.reject(peekID(line), jsonrpc.CodeParseError, fmt.Sprintf("parse error: %v; send one JSON-RPC message per line", err))
		return nil
	}
	if line[0] == '[' {
		c.reject(nil, jsonrpc.CodeInvalidRequest, "invalid request: JSON-RPC batches (arrays) are not supported; send one message per line")
		return nil
	}
	msg, err := jsonrpc.DecodeMessage(line)
	if err != nil {
		c.reject(peekID(line), jsonrpc.CodeInvalidRequest, fmt.Sprintf("invalid request: %v", err))
		return nil
	}
	return msg
}

// tooLarge answers a line over the limit from what its head tells: a
// tools/call gets a tool error result, any other request an error.
func (c *lineConn) tooLarge(head []byte, limit int) {
	h := peekCall(head)
	c.log.Warn("mcp: message over the size limit skipped", "limit", limit, "method", h.method, "tool", h.tool)
	if h.id == nil && h.method != "" {
		return // a notification: nobody waits for an answer
	}
	if h.method == "tools/call" {
		res, err := json.Marshal(toolErrorResult(tooLargeError(h.tool, limit)))
		if err == nil {
			c.send(replyMsg{JSONRPC: "2.0", ID: h.id, Result: res})
			return
		}
	}
	c.reject(h.id, jsonrpc.CodeInvalidRequest, tooLargeError(h.tool, limit).Error())
}

// tooLargeError is the error for a message over the transport's limit.
func tooLargeError(tool string, limit int) error {
	what := "the request"
	if tool != "" {
		what = tool + ": the request"
	}
	return fmt.Errorf("%s is larger than %s, the most one MCP message may carry; write_file takes at most %s of content per call (write bigger files in parts, or generate them with the terminal)",
		what, manager.SizeText(limit), manager.SizeText(MaxContentBytes))
}

// replyMsg is a JSON-RPC response written by the transport itself.
type replyMsg struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *jsonrpc.Error  `json:"error,omitempty"`
}

// reject answers with a JSON-RPC error; id nil is sent as null.
func (c *lineConn) reject(id json.RawMessage, code int64, msg string) {
	c.log.Warn("mcp: bad message answered and skipped", "code", code, "error", msg)
	c.send(replyMsg{JSONRPC: "2.0", ID: id, Error: &jsonrpc.Error{Code: code, Message: msg}})
}

func (c *lineConn) send(r replyMsg) {
	if r.ID == nil {
		r.ID = json.RawMessage("null")
	}
	data, err := json.Marshal(r)
	if err != nil {
		c.log.Error("mcp: encode reply", "err", err)
		return
	}
	if err := c.writeLine(data); err != nil {
		c.log.Warn("mcp: write reply", "err", err)
	}
}

func (c *lineConn) writeLine(data []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.w.Write(append(data, '\n'))
	return err
}

// Read implements mcp.Connection.
func (c *lineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case msg := <-c.incoming:
		return msg, nil
	case err := <-c.readErr:
		c.readErr <- err // later reads see it too
		// A pipeline writes its requests and closes its end at once: the
		// session ends only after every request read before the end of
		// the input has been answered.
		c.drain()
		return nil, err
	case <-c.closed:
		return nil, io.EOF
	}
}

// drain waits until every request read so far has been answered, or the
// connection is closed.
func (c *lineConn) drain() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-c.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	c.pending.wait(ctx)
}

// track counts a request that expects an answer.
func (c *lineConn) track(msg jsonrpc.Message) {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || !req.IsCall() {
		return
	}
	c.umu.Lock()
	if !c.unanswered[req.ID] {
		c.unanswered[req.ID] = true
		c.pending.add()
	}
	c.umu.Unlock()
}

// answered uncounts the request a response answers.
func (c *lineConn) answered(msg jsonrpc.Message) {
	resp, ok := msg.(*jsonrpc.Response)
	if !ok {
		return
	}
	c.umu.Lock()
	if c.unanswered[resp.ID] {
		delete(c.unanswered, resp.ID)
		c.pending.done()
	}
	c.umu.Unlock()
}

// Write implements mcp.Connection.
func (c *lineConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("mcp: encode message: %w", err)
	}
	select {
	case <-c.closed:
		return errors.New("mcp: connection closed")
	default:
	}
	err = c.writeLine(data)
	c.answered(msg)
	return err
}

// Close implements mcp.Connection.
func (c *lineConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		close(c.closed)
		if c.rc != nil {
			err = c.rc.Close()
		}
	})
	return err
}

// SessionID implements mcp.Connection: a stdio connection has none.
func (c *lineConn) SessionID() string { return "" }

// msgHead is what the head of a message tells about it.
type msgHead struct {
	id     json.RawMessage // nil when absent or unreadable
	method string
	tool   string // params.name of a tools/call
}

// peekID returns the top-level "id" of a possibly broken or truncated
// JSON-RPC message, when it can be read before the damage.
func peekID(b []byte) json.RawMessage { return peekCall(b).id }

// peekCall reads the top-level members of a possibly broken or truncated
// JSON-RPC message in order, stopping at the first it cannot read.
// Clients write id and method before params, so the head of a message is
// enough to answer it.
func peekCall(b []byte) msgHead {
	var c msgHead
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return c
	}
	for dec.More() {
		t, err := dec.Token()
		key, ok := t.(string)
		if err != nil || !ok {
			return c
		}
		switch key {
		case "id":
			var raw json.RawMessage
			if dec.Decode(&raw) != nil {
				return c
			}
			if len(raw) > 0 && (raw[0] == '"' || raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9') {
				c.id = raw
			}
		case "method":
			if dec.Decode(&c.method) != nil {
				return c
			}
		case "params":
			c.tool = peekToolName(dec)
			return c
		default:
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return c
			}
		}
	}
	return c
}

// peekToolName reads the "name" member of the params object dec is at.
func peekToolName(dec *json.Decoder) string {
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	for dec.More() {
		t, err := dec.Token()
		key, ok := t.(string)
		if err != nil || !ok {
			return ""
		}
		if key == "name" {
			var name string
			if dec.Decode(&name) != nil {
				return ""
			}
			return name
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return ""
		}
	}
	return ""
}
