package daytona

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// Daytona's API answers 429 when a throttler bucket is exhausted (its
// throttlers are named, so the wait comes in Retry-After-<bucket>, e.g.
// Retry-After-sandbox-create, in seconds), and its proxy and load
// balancer answer 502, 503 and 504 while an upstream restarts. berth
// retries both, on every call of both clients (control plane and
// toolbox) and on the PTY websocket's handshake, within a budget:
//
//   - a 429 is retried after the wait it asks for (at least retryMin);
//     one asking for more than the budget has left is given up at once;
//   - a 5xx is retried after an exponential backoff with jitter, from
//     retryMin up to retryMaxStep;
//   - at most retryAttempts attempts, and at most retryBudget spent
//     waiting, per call; a cancelled context ends the wait.
//
// Every call berth makes may be repeated: reads and label replacements
// are idempotent, a create that did happen answers 409 the second time
// (which ensure handles), start, stop, delete and recover are judged by
// the sandbox's state, PTY sessions have berth's own ids, uploads replace
// the file, and the execute calls are written to be run twice.
//
// What was given up is reported: the error carries the status, what the
// API said, how many attempts were made over how long, and the wait the
// API asked for.
var (
	retryAttempts = 8
	retryBudget   = 2 * time.Minute
	retryMin      = 200 * time.Millisecond
	retryMaxStep  = 5 * time.Second
)

// retryable reports whether an answer with this status is retried.
func retryable(status int) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// retryAfter is the longest wait an answer's Retry-After or
// Retry-After-<bucket> headers ask for (seconds or an HTTP date), and
// whether any asked.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	var longest time.Duration
	found := false
	for k, vs := range h {
		if k != "Retry-After" && !strings.HasPrefix(k, "Retry-After-") {
			continue
		}
		for _, v := range vs {
			v = strings.TrimSpace(v)
			var d time.Duration
			if n, err := strconv.ParseFloat(v, 64); err == nil && n >= 0 {
				d = time.Duration(n * float64(time.Second))
			} else if t, err := http.ParseTime(v); err == nil {
				d = max(0, t.Sub(now))
			} else {
				continue
			}
			found = true
			longest = max(longest, d)
		}
	}
	return longest, found
}

// retryPlan decides the wait before attempt number attempt+1 (attempt
// counts from 1) after an answer with status and headers h, given how long
// was already spent waiting. ok is false when the call is to be given up;
// why then says why.
func retryPlan(status int, h http.Header, attempt int, waited time.Duration) (wait time.Duration, ok bool, why string) {
	if attempt >= retryAttempts {
		return 0, false, fmt.Sprintf("after %d attempts", attempt)
	}
	backoff := min(retryMin<<(attempt-1), retryMaxStep)
	wait = backoff/2 + rand.N(backoff/2+1)
	if asked, found := retryAfter(h, time.Now()); found {
		wait = max(asked, retryMin)
		if waited+wait > retryBudget {
			return 0, false, fmt.Sprintf("the API asked to wait %.0f s (Retry-After), more than berth's budget of %.0f s", asked.Seconds(), retryBudget.Seconds())
		}
	}
	if waited+wait > retryBudget {
		return 0, false, fmt.Sprintf("after %d attempts over %s", attempt, roundSecond(waited))
	}
	return wait, true, ""
}

func roundSecond(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(10 * time.Millisecond)
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// gaveUpHeader carries, on the answer given back to a client, why berth
// stopped retrying it; apiErr and toolboxErr put it into the error.
const gaveUpHeader = "X-Berth-Gave-Up"

// retryTransport retries answers 429, 502, 503 and 504 (see above).
type retryTransport struct {
	base http.RoundTripper
	log  logger
}

// RoundTrip implements http.RoundTripper. A request whose body cannot be
// produced again (no GetBody) is not retried.
func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var waited time.Duration
	for attempt := 1; ; attempt++ {
		resp, err := t.base.RoundTrip(req)
		if err != nil || !retryable(resp.StatusCode) {
			return resp, err
		}
		if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
			return resp, nil
		}
		wait, ok, why := retryPlan(resp.StatusCode, resp.Header, attempt, waited)
		if !ok {
			resp.Header.Set(gaveUpHeader, "berth gave up "+why)
			return resp, nil
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if t.log != nil {
			t.log.Debug("daytona: retrying", "method", req.Method, "path", req.URL.Path, "status", resp.StatusCode, "attempt", attempt, "wait", wait)
		}
		if err := sleepCtx(req.Context(), wait); err != nil {
			return nil, err
		}
		waited += wait
		next := req.Clone(req.Context())
		if req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			next.Body = body
		}
		req = next
	}
}

// gaveUp returns the why of a given-up answer, prefixed for an error
// message, or "".
func gaveUp(resp *http.Response) string {
	if resp == nil {
		return ""
	}
	if w := resp.Header.Get(gaveUpHeader); w != "" {
		return " (" + w + ")"
	}
	return ""
}

// replayableBody returns a request body for size bytes of r from where r
// is now, and a GetBody that produces them again, when r can be read at an
// offset (io.ReaderAt: strings.Reader, bytes.Reader, os.File) and knows
// where it is (io.Seeker); ok is false otherwise, and the request is sent
// once, never replayed.
//
// Every attempt gets a reader of its own over those bytes (an
// io.SectionReader, which reads with ReadAt and keeps its own offset), the
// first one included; r itself is never read or moved. net/http's
// writeLoop may still be sending one attempt's body after the answer to it
// arrived (a server answers 429 before it read a large body), so the next
// attempt must not rewind a reader the previous one is still reading.
func replayableBody(r io.Reader, size int64) (body io.ReadCloser, getBody func() (io.ReadCloser, error), ok bool) {
	ra, isAt := r.(io.ReaderAt)
	s, isSeeker := r.(io.Seeker)
	if !isAt || !isSeeker {
		return nil, nil, false
	}
	start, err := s.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, nil, false
	}
	getBody = func() (io.ReadCloser, error) {
		return io.NopCloser(io.NewSectionReader(ra, start, size)), nil
	}
	body, _ = getBody()
	return body, getBody, true
}

// dialRetrying opens a websocket, retrying a handshake answered 429 or
// 5xx as retryTransport retries calls. op names the call in errors.
func dialRetrying(ctx context.Context, d *websocket.Dialer, u string, hdr http.Header, op string) (*websocket.Conn, error) {
	var waited time.Duration
	for attempt := 1; ; attempt++ {
		ws, resp, err := d.DialContext(ctx, u, hdr)
		if err == nil {
			return ws, nil
		}
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		if !retryable(status) || ctx.Err() != nil {
			return nil, &APIError{Op: op, Status: status, Msg: err.Error()}
		}
		wait, ok, why := retryPlan(status, resp.Header, attempt, waited)
		if !ok {
			return nil, &APIError{Op: op, Status: status, Msg: err.Error(), GaveUp: " (berth gave up " + why + ")"}
		}
		if err := sleepCtx(ctx, wait); err != nil {
			return nil, err
		}
		waited += wait
	}
}
