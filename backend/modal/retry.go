package modal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	pb "github.com/modal-labs/libmodal/modal-go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// retryPolicy bounds how berth retries a control-plane call that Modal
// refused for a while: throttled (RESOURCE_EXHAUSTED, after the delay the
// server asks for) or failed transiently (UNAVAILABLE, INTERNAL, UNKNOWN,
// DEADLINE_EXCEEDED, CANCELLED while the caller still waits).
type retryPolicy struct {
	// Budget is the longest a call is retried, waits included.
	Budget time.Duration
	// Base and Max bound the exponential backoff between attempts when
	// the server names no delay (full jitter: a random wait up to the
	// current step).
	Base, Max time.Duration
}

// retryPolicyOf is the policy for modal_retry_timeout secs: the budget,
// with waits from 200 ms doubling to 10 s. The default two minutes cover
// Modal's documented token refill (5 sandboxes a second) and a
// control-plane restart, and are no more than a user waits for a command
// to start.
func retryPolicyOf(secs int) retryPolicy {
	if secs <= 0 {
		secs = DefaultRetryTimeoutSecs
	}
	return retryPolicy{Budget: time.Duration(secs) * time.Second, Base: 200 * time.Millisecond, Max: 10 * time.Second}
}

// transientCodes are the codes modal-go v0.7.3 itself retries (three
// times, within about 1.5 s); berth retries them for the whole budget.
var transientCodes = map[codes.Code]bool{
	codes.Unavailable:      true,
	codes.Internal:         true,
	codes.Unknown:          true,
	codes.DeadlineExceeded: true,
	codes.Canceled:         true,
}

// GaveUpError is what a control-plane call returns when Modal kept
// throttling or failing it for the whole retry budget. It names the call,
// how often and how long berth tried, and Modal's last answer. It carries
// no gRPC status of its own on purpose: modal-go would otherwise retry it
// again.
type GaveUpError struct {
	Method   string        // the RPC, e.g. "SandboxCreate"
	Code     codes.Code    // the last answer's code
	Attempts int           // calls made
	Waited   time.Duration // from the first call to giving up
	Last     string        // the last answer's message
}

func (e *GaveUpError) Error() string {
	what := "kept failing"
	if e.Code == codes.ResourceExhausted {
		what = "kept rate-limiting"
	}
	return fmt.Sprintf("Modal %s %s (%s: %s); berth gave up after %d attempts over %v",
		what, e.Method, e.Code, e.Last, e.Attempts, e.Waited.Round(100*time.Millisecond))
}

// Throttled reports whether the last answer was a rate limit.
func (e *GaveUpError) Throttled() bool { return e.Code == codes.ResourceExhausted }

// NoServerError is what a call returns when no server has answered the
// client yet and this call did not reach one either: the connection was
// refused, or failed before any answer (a wrong MODAL_SERVER_URL, nothing
// listening there). That is not retried: a server that never answered is
// not failing transiently, and retrying it for the whole budget only
// delays naming the URL. Like GaveUpError it carries no gRPC status, so
// modal-go does not retry it either.
type NoServerError struct {
	Method string     // the RPC, e.g. "AuthTokenGet"
	Code   codes.Code // the failed call's code
	Last   string     // its message
}

func (e *NoServerError) Error() string {
	return fmt.Sprintf("no server answered %s (%s: %s)", e.Method, e.Code, e.Last)
}

// retryInterceptor retries unary control-plane calls under p. It runs
// inside modal-go's own interceptors (after its retry interceptor), so it
// sees every attempt the SDK makes and answers it with success, with an
// error the SDK does not retry, or with a *GaveUpError.
//
// Until a call of the client has reached a server (a connection carried
// it, whatever the answer), a call that failed without reaching one is
// answered with a *NoServerError at once instead of being retried: only a
// failure after contact is transient.
func retryInterceptor(p retryPolicy, log *slog.Logger) grpc.UnaryClientInterceptor {
	var reached atomic.Bool // a call of this client reached a server
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		start := time.Now()
		step := p.Base
		for attempt := 1; ; attempt++ {
			var to peer.Peer // set by grpc when a connection carried the call
			err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Peer(&to))...)
			if to.Addr != nil {
				reached.Store(true)
			}
			if err == nil {
				if attempt > 1 {
					log.Info("modal: call went through after retries", "method", shortMethod(method), "attempts", attempt, "waited", time.Since(start).Round(time.Millisecond))
				}
				return nil
			}
			st, ok := status.FromError(err)
			if !ok || ctx.Err() != nil {
				return err
			}
			var wait time.Duration
			switch {
			case st.Code() == codes.ResourceExhausted:
				wait = retryAfter(st)
				if wait <= 0 {
					wait = jitter(step)
					step = min(2*step, p.Max)
				}
			case transientCodes[st.Code()] && to.Addr == nil && !reached.Load():
				return &NoServerError{Method: shortMethod(method), Code: st.Code(), Last: st.Message()}
			case transientCodes[st.Code()]:
				wait = jitter(step)
				step = min(2*step, p.Max)
			default:
				return err
			}
			if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
				wait = max(time.Until(d), 0)
			}
			if time.Since(start)+wait > p.Budget {
				gave := &GaveUpError{Method: shortMethod(method), Code: st.Code(), Attempts: attempt, Waited: time.Since(start), Last: st.Message()}
				log.Warn("modal: giving up on a call", "err", gave)
				return gave
			}
			log.Debug("modal: retrying a call", "method", shortMethod(method), "code", st.Code(), "attempt", attempt, "wait", wait)
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return err
			}
		}
	}
}

// retryAfter is the delay a RESOURCE_EXHAUSTED answer asks for (Modal's
// RPCRetryPolicy detail, its gRPC Retry-After), or 0.
func retryAfter(st *status.Status) time.Duration {
	for _, d := range st.Details() {
		if rp, ok := d.(*pb.RPCRetryPolicy); ok && rp.GetRetryAfterSecs() > 0 {
			return time.Duration(float64(rp.GetRetryAfterSecs()) * float64(time.Second))
		}
	}
	return 0
}

// jitter is a random wait from d/2 to d.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// shortMethod is the RPC's name without its service.
func shortMethod(m string) string { return m[strings.LastIndexByte(m, '/')+1:] }

// gaveUp finds a *GaveUpError in err's chain.
func gaveUp(err error) (*GaveUpError, bool) {
	var g *GaveUpError
	return g, errors.As(err, &g)
}
