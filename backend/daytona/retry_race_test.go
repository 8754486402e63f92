package daytona

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestRetriedUploadReadsItsOwnBytes: an upload answered 429 before the
// server read its body (as a throttler does) is sent again, and the
// retried attempt must not share a reader with the attempt net/http's
// writeLoop may still be sending. The server refuses the first attempts
// at once, without reading a byte of a body far larger than the socket
// buffers, then takes the whole body of the last one: that body must be
// the file's bytes, every one, in order. With the retries rewinding one
// shared reader the race detector flags the rewind against the writeLoop's
// read (go test -race), and an attempt can lose the bytes the previous
// one's writeLoop took after the rewind.
func TestRetriedUploadReadsItsOwnBytes(t *testing.T) {
	const refusals = 3
	content := strings.Repeat("0123456789abcdef", 1<<20) // 16 MiB
	want := sha256.Sum256([]byte(content))
	var calls atomic.Int32
	got := make(chan [32]byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= refusals {
			w.Header().Set("Retry-After-sandbox-lifecycle", "0")
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(`{"statusCode":429,"message":"ThrottlerException: Too Many Requests"}`))
			return
		}
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil || n != int64(len(content)) {
			t.Errorf("the last attempt's body: %d of %d bytes, %v", n, len(content), err)
		}
		var sum [32]byte
		copy(sum[:], h.Sum(nil))
		got <- sum
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()

	creds := credentials{apiURL: srv.URL, shown: srv.URL, key: "k", keyVar: EnvAPIKey}
	hc := httpClient(nil)
	defer hc.CloseIdleConnections()
	b := &Backend{creds: creds, hc: hc}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := strings.NewReader(content)
	if err := b.upload(ctx, creds.toolboxClient(hc, srv.URL, "sb"), "/tmp/f", r, int64(len(content))); err != nil {
		t.Fatalf("upload: %v", err)
	}
	if n := calls.Load(); n != refusals+1 {
		t.Fatalf("%d attempts, want %d", n, refusals+1)
	}
	select {
	case sum := <-got:
		if !bytes.Equal(sum[:], want[:]) {
			t.Fatal("the retried upload sent other bytes than the file's")
		}
	default:
		t.Fatal("the server never received the last attempt's body")
	}
}
