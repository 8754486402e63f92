package mcpserver

// Serving over streamable HTTP: Handler and its middleware (the bearer
// token, the body limit, the session cap and the count of POSTs being
// answered).

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// HTTPOptions configures Handler.
type HTTPOptions struct {
	// MaxSessions caps the MCP sessions open at once (each has its own
	// environment unless they share one). A new session over the cap is
	// refused with HTTP 503 and a JSON-RPC error saying so; 0 means
	// DefaultMaxSessions, a negative value no cap.
	MaxSessions int
	// SessionTimeout closes a session idle for that long (its environment
	// with it); 0 means an hour.
	SessionTimeout time.Duration
	// MaxMessageBytes bounds a request body; 0 means MaxMessageBytes. A
	// larger body is answered with an error naming the limit (a tool error
	// result for tools/call), never a bare 413.
	MaxMessageBytes int
}

// DefaultMaxSessions is the default cap on concurrent MCP sessions over
// HTTP.
const DefaultMaxSessions = 64

// Handler returns an http.Handler serving srv over streamable HTTP, behind a
// bearer-token check: a request without "Authorization: Bearer <token>"
// matching token gets 401 and never reaches the server. The comparison is
// constant-time. token must not be empty. opts may be nil.
func Handler(srv *Server, token string, opts *HTTPOptions) http.Handler {
	var o HTTPOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxSessions == 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.SessionTimeout <= 0 {
		o.SessionTimeout = time.Hour
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = MaxMessageBytes
	}
	// The body is bounded (and buffered) by limitBody before the SDK reads
	// it, so the SDK's own limit only has to let it through.
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv.Server },
		&mcp.StreamableHTTPOptions{SessionTimeout: o.SessionTimeout, MaxRequestBodyBytes: int64(o.MaxMessageBytes) + 1})
	return RequireToken(token, limitBody(o.MaxMessageBytes, capSessions(srv.Server, o.MaxSessions, countPosts(&srv.s.posts, mcpHandler))))
}

// countPosts counts the POST requests being answered, so that a shutdown
// can wait for the answers of interrupted calls to go out before it closes
// the sessions (the SDK drops answers written after that).
func countPosts(c *callCounter, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			c.add()
			defer c.done()
		}
		next.ServeHTTP(w, r)
	})
}

// limitBody reads a POST body of up to limit bytes into memory before next
// sees it. A larger body is not read further: it is answered from its first
// bytes (a tools/call gets a tool error result naming the limit, another
// request a JSON-RPC error with HTTP 413) and the connection is closed.
func limitBody(limit int, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		var body []byte
		var err error
		if r.ContentLength > int64(limit) {
			body, err = io.ReadAll(io.LimitReader(r.Body, headBytes))
		} else {
			body, err = io.ReadAll(io.LimitReader(r.Body, int64(limit)+1))
		}
		if err != nil {
			writeRPCError(w, http.StatusBadRequest, nil, jsonrpc.CodeParseError, fmt.Sprintf("read request body: %v", err))
			return
		}
		if r.ContentLength > int64(limit) || len(body) > limit {
			w.Header().Set("Connection", "close")
			c := peekCall(body[:min(len(body), headBytes)])
			tooBig := tooLargeError(c.tool, limit)
			if c.method == "tools/call" && c.id != nil {
				writeJSON(w, http.StatusOK, replyMsg{JSONRPC: "2.0", ID: c.id, Result: mustJSON(toolErrorResult(tooBig))})
				return
			}
			writeRPCError(w, http.StatusRequestEntityTooLarge, c.id, jsonrpc.CodeInvalidRequest, tooBig.Error())
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// capSessions refuses an initialize request that would open a session (a
// POST without Mcp-Session-Id) while max sessions are open or being
// opened. Other requests without a session id (a server/discover probe)
// get a session the SDK closes when they end, and are not counted.
func capSessions(srv *mcp.Server, max int, next http.Handler) http.Handler {
	if max < 0 {
		return next
	}
	var mu sync.Mutex
	opening := 0
	open := map[string]bool{} // ids of the sessions initialize opened
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get("Mcp-Session-Id") != "" {
			next.ServeHTTP(w, r)
			return
		}
		// limitBody has buffered the body: peek at it and put it back.
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		head := peekCall(body[:min(len(body), headBytes)])
		if head.method != "initialize" {
			next.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		live := map[string]bool{}
		for ss := range srv.Sessions() {
			live[ss.ID()] = true
		}
		for id := range open {
			if !live[id] {
				delete(open, id)
			}
		}
		if len(open)+opening >= max {
			mu.Unlock()
			w.Header().Set("Retry-After", "10")
			writeRPCError(w, http.StatusServiceUnavailable, head.id, -32000,
				fmt.Sprintf("berth serve: %d MCP sessions are open, the most it allows (berth serve --max-sessions); end a session you no longer use (HTTP DELETE, or close the client) or raise the cap", max))
			return
		}
		opening++
		mu.Unlock()
		next.ServeHTTP(w, r)
		mu.Lock()
		opening--
		if id := w.Header().Get("Mcp-Session-Id"); id != "" {
			open[id] = true
		}
		mu.Unlock()
	})
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only values of this package, which always encode
	}
	return b
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// writeRPCError answers with a JSON-RPC error response (id nil is null).
func writeRPCError(w http.ResponseWriter, status int, id json.RawMessage, code int64, msg string) {
	if id == nil {
		id = json.RawMessage("null")
	}
	writeJSON(w, status, replyMsg{JSONRPC: "2.0", ID: id, Error: &jsonrpc.Error{Code: code, Message: msg}})
}

// RequireToken wraps next so that only requests carrying
// "Authorization: Bearer <token>" reach it; others get 401 and their
// connection is closed. The scheme is matched case-insensitively (RFC
// 9110), so "bearer" and "BEARER" work too. The tokens are compared as
// SHA-256 digests in constant time, so neither their content nor their
// length leaks through timing.
func RequireToken(token string, next http.Handler) http.Handler {
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := bearerToken(r.Header.Get("Authorization"))
		gotSum := sha256.Sum256([]byte(got))
		if subtle.ConstantTimeCompare(gotSum[:], want[:]) != 1 || !ok || token == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="berth"`)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(w).Encode(map[string]string{"error": "unauthorized: send Authorization: Bearer <token> (berth serve --token / BERTH_TOKEN)"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bearerToken returns the credentials of an "Authorization: Bearer ..."
// header value, the scheme in any case.
func bearerToken(h string) (string, bool) {
	scheme, cred, ok := strings.Cut(strings.TrimLeft(h, " \t"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(cred), true
}
