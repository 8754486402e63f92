package modal

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// fakeCall is one answer of a fake invoker: whether a connection carried
// the call (grpc then fills the call's Peer option) and its error.
type fakeCall struct {
	reached bool
	err     error
}

// fakeInvoker answers the calls in turn, the last one for ever, and counts
// them.
func fakeInvoker(calls []fakeCall, n *int) grpc.UnaryInvoker {
	return func(_ context.Context, _ string, _, _ any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
		c := calls[min(*n, len(calls)-1)]
		*n++
		if c.reached {
			for _, o := range opts {
				if p, ok := o.(grpc.PeerCallOption); ok {
					*p.PeerAddr = peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 443}}
				}
			}
		}
		return c.err
	}
}

// TestRetryOnlyAfterContact: a call that failed without reaching a server,
// before any call of the client did, is answered at once with a
// NoServerError; one the server answered UNAVAILABLE is retried, and so is
// a connection failure once the client has reached a server (a control
// plane restarting).
func TestRetryOnlyAfterContact(t *testing.T) {
	refused := status.Error(codes.Unavailable, "connection error: connect: connection refused")
	p := retryPolicy{Budget: 300 * time.Millisecond, Base: time.Millisecond, Max: 5 * time.Millisecond}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	const method = "/modal.client.ModalClient/AuthTokenGet"

	// Never reached: one call, then NoServerError.
	n := 0
	err := retryInterceptor(p, log)(ctx, method, nil, nil, nil, fakeInvoker([]fakeCall{{false, refused}}, &n))
	var none *NoServerError
	if !errors.As(err, &none) || n != 1 || none.Method != "AuthTokenGet" || none.Code != codes.Unavailable {
		t.Errorf("refused before contact: %v after %d calls; want a NoServerError after 1", err, n)
	}
	if _, ok := status.FromError(err); ok {
		t.Errorf("the NoServerError %v carries a gRPC status: modal-go would retry it", err)
	}

	// The server answered UNAVAILABLE: retried, then through.
	n = 0
	err = retryInterceptor(p, log)(ctx, method, nil, nil, nil,
		fakeInvoker([]fakeCall{{true, status.Error(codes.Unavailable, "restarting")}, {true, nil}}, &n))
	if err != nil || n != 2 {
		t.Errorf("UNAVAILABLE from the server: %v after %d calls; want success after 2", err, n)
	}

	// Reached once, then refused: retried for the budget, then given up.
	n = 0
	ic := retryInterceptor(p, log)
	if err := ic(ctx, method, nil, nil, nil, fakeInvoker([]fakeCall{{true, nil}}, &n)); err != nil {
		t.Fatal(err)
	}
	n = 0
	err = ic(ctx, method, nil, nil, nil, fakeInvoker([]fakeCall{{false, refused}}, &n))
	if _, ok := gaveUp(err); !ok || errors.As(err, &none) || n < 2 {
		t.Errorf("refused after contact: %v after %d calls; want retries, then a GaveUpError", err, n)
	}
}
