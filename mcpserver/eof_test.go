package mcpserver

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// runPiped serves input (whole, then end of input, as `printf … | berth
// mcp` does) and returns every reply line by id.
func runPiped(t *testing.T, srv *Server, input string) map[float64]map[string]any {
	t.Helper()
	var out strings.Builder
	tr := &StdioTransport{Reader: strings.NewReader(input), Writer: &lockedWriter{w: &out}, Logger: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := srv.Run(ctx, tr, 5*time.Second); err != nil {
		t.Fatalf("Run: %v", err)
	}
	replies := map[float64]map[string]any{}
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var v map[string]any
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("reply %q: %v", sc.Text(), err)
		}
		if id, ok := v["id"].(float64); ok {
			replies[id] = v
		}
	}
	return replies
}

const (
	eofInit = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":%s,"clientInfo":{"name":"t","version":"0"}}}` + "\n" +
		`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n"
	eofCall = `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"terminal","arguments":{"command":%q}}}` + "\n"
)

// Requests written and the input closed at once, as any pipeline does,
// are all answered before berth mcp exits.
func TestEndOfInputAnswersWhatWasRead(t *testing.T) {
	srv := New(newManager(t, false), Options{Logger: slog.New(slog.DiscardHandler)})
	in := fmt.Sprintf(eofInit, "{}") + fmt.Sprintf(eofCall, 2, "sleep 0.3; echo first") + fmt.Sprintf(eofCall, 3, "echo second")
	replies := runPiped(t, srv, in)
	for id, want := range map[float64]string{2: "first", 3: "second"} {
		if r := replies[id]; !strings.Contains(fmt.Sprint(r["result"]), want) {
			t.Errorf("call %v: %v", id, r)
		}
	}
}

// A question for a client whose input has ended cannot be answered: the
// command is blocked at once instead of waiting for the approval timeout.
func TestEndOfInputBlocksWhatNeedsAnAnswer(t *testing.T) {
	srv := New(newManager(t, false), Options{Logger: slog.New(slog.DiscardHandler)})
	dir := t.TempDir()
	in := fmt.Sprintf(eofInit, `{"elicitation":{"form":{}}}`) + fmt.Sprintf(eofCall, 2, "chmod -R u+rw "+dir)
	replies := runPiped(t, srv, in)
	r := replies[2]
	res, _ := r["result"].(map[string]any)
	sc, _ := res["structuredContent"].(map[string]any)
	if res["isError"] != true || !strings.Contains(fmt.Sprint(sc["error"]), "closed its input") {
		t.Errorf("call 2: %v", r)
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
