package modalfake

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	pb "github.com/modal-labs/libmodal/modal-go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Lifetimes of the tokens the fake mints. The SDK refreshes its auth token
// five minutes before expiry and a command router token 30 s before, so both
// must be comfortably longer than that.
const (
	authTokenTTL   = time.Hour
	routerTokenTTL = time.Hour
)

// claims is the payload of the JWTs the fake mints: the control-plane auth
// token (Subject = token id) and the command router token (TaskID set).
type claims struct {
	Subject string `json:"sub"`
	TaskID  string `json:"task_id,omitempty"`
	Expiry  int64  `json:"exp"`
	Issued  int64  `json:"iat"`
}

var jwtHeader = base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))

// mint signs c as an HS256 JWT with the server's key.
func (s *Server) mint(c claims) string {
	payload, _ := json.Marshal(c)
	signing := jwtHeader + "." + base64.RawURLEncoding.EncodeToString(payload)
	mac := hmac.New(sha256.New, s.jwtKey)
	mac.Write([]byte(signing))
	return signing + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// verify checks a JWT's signature and expiry and returns its claims.
func (s *Server) verify(tok string) (claims, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return claims{}, errors.New("malformed token")
	}
	mac := hmac.New(sha256.New, s.jwtKey)
	mac.Write([]byte(parts[0] + "." + parts[1]))
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || !hmac.Equal(sig, mac.Sum(nil)) {
		return claims{}, errors.New("bad token signature")
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return claims{}, errors.New("malformed token payload")
	}
	var c claims
	if err := json.Unmarshal(raw, &c); err != nil {
		return claims{}, errors.New("malformed token payload")
	}
	if time.Now().Unix() >= c.Expiry {
		return claims{}, errors.New("token expired")
	}
	return c, nil
}

const (
	controlService = "/modal.client.ModalClient/"
	routerService  = "/modal.task_command_router.TaskCommandRouter/"
)

// authorize enforces what Modal's servers require of a call:
//
//   - every control-plane call carries the token id and secret headers
//     (x-modal-token-id, x-modal-token-secret) of a known credential;
//   - every unary control-plane call except AuthTokenGet also carries a
//     valid, unexpired auth token (x-modal-auth-token) minted by
//     AuthTokenGet for that token id (the SDK's streams do not send it);
//   - every command router call carries "authorization: Bearer <jwt>" with a
//     valid token from TaskGetCommandRouterAccess; the handlers check that
//     its task is the one addressed.
//
// Anything else is codes.Unauthenticated.
func (s *Server) authorize(ctx context.Context, method string, unary bool) (context.Context, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	first := func(k string) string {
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	switch {
	case strings.HasPrefix(method, controlService):
		id, secret := first("x-modal-token-id"), first("x-modal-token-secret")
		if id == "" || secret == "" {
			return nil, status.Error(codes.Unauthenticated, "missing token id or token secret")
		}
		if subtle.ConstantTimeCompare([]byte(id), []byte(s.tokenID)) != 1 ||
			subtle.ConstantTimeCompare([]byte(secret), []byte(s.tokenSecret)) != 1 {
			s.log.Info("modalfake: rejected credentials", "method", method, "token_id", id)
			return nil, status.Errorf(codes.Unauthenticated, "token id %q or its secret is not valid", id)
		}
		if unary && method != pb.ModalClient_AuthTokenGet_FullMethodName {
			c, err := s.verify(first("x-modal-auth-token"))
			if err != nil || c.Subject != id || c.TaskID != "" {
				if err == nil {
					err = errors.New("token not issued for this credential")
				}
				return nil, status.Errorf(codes.Unauthenticated, "invalid auth token: %v", err)
			}
		}
		return ctx, nil
	case strings.HasPrefix(method, routerService):
		bearer, ok := strings.CutPrefix(first("authorization"), "Bearer ")
		if !ok {
			return nil, status.Error(codes.Unauthenticated, "missing bearer token")
		}
		c, err := s.verify(bearer)
		if err != nil || c.TaskID == "" {
			if err == nil {
				err = errors.New("not a command router token")
			}
			return nil, status.Errorf(codes.Unauthenticated, "invalid command router token: %v", err)
		}
		return context.WithValue(ctx, routerTaskKey{}, c.TaskID), nil
	default:
		return nil, status.Errorf(codes.Unimplemented, "unknown service in %s", method)
	}
}

type routerTaskKey struct{}

// checkRouterTask verifies that the router token of the call was issued for
// taskID.
func checkRouterTask(ctx context.Context, taskID string) error {
	got, _ := ctx.Value(routerTaskKey{}).(string)
	if got == "" || got != taskID {
		return status.Errorf(codes.Unauthenticated, "command router token is not valid for task %q", taskID)
	}
	return nil
}

func (s *Server) unaryAuth(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, err := s.authorize(ctx, info.FullMethod, true)
	if err != nil {
		return nil, err
	}
	s.countCall(info.FullMethod)
	if err := s.admit(info.FullMethod, s.subject(req)); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (s *Server) streamAuth(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, err := s.authorize(ss.Context(), info.FullMethod, false)
	if err != nil {
		return err
	}
	s.countCall(info.FullMethod)
	// The faults are decided once the request is read: what it names is
	// the subject of its fault stream.
	admit := func(req any) error { return s.admit(info.FullMethod, s.subject(req)) }
	return handler(srv, &authedStream{ServerStream: ss, ctx: ctx, admit: admit})
}

// authedStream is a server stream that passed authentication: its context
// carries the caller's router task, and its first message is admitted
// (Server.admit) as it is received.
type authedStream struct {
	grpc.ServerStream
	ctx   context.Context
	admit func(req any) error // nil once the first message was admitted
}

func (a *authedStream) Context() context.Context { return a.ctx }

func (a *authedStream) RecvMsg(m any) error {
	if err := a.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if admit := a.admit; admit != nil {
		a.admit = nil
		return admit(m)
	}
	return nil
}

// AuthTokenGet exchanges a valid token id and secret (checked by the
// interceptor) for a short-lived JWT, as Modal's server does.
func (c *control) AuthTokenGet(ctx context.Context, _ *pb.AuthTokenGetRequest) (*pb.AuthTokenGetResponse, error) {
	now := time.Now()
	tok := c.s.mint(claims{Subject: c.s.tokenID, Issued: now.Unix(), Expiry: now.Add(authTokenTTL).Unix()})
	return pb.AuthTokenGetResponse_builder{Token: tok}.Build(), nil
}

// TaskGetCommandRouterAccess hands out the command router's URL and a JWT
// valid for that one task.
func (c *control) TaskGetCommandRouterAccess(ctx context.Context, req *pb.TaskGetCommandRouterAccessRequest) (*pb.TaskGetCommandRouterAccessResponse, error) {
	sb, err := c.s.sandboxByTask(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	if res := sb.finished(); res != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "task %s has already finished (%s)", sb.taskID, res.GetStatus())
	}
	now := time.Now()
	tok := c.s.mint(claims{Subject: c.s.tokenID, TaskID: sb.taskID, Issued: now.Unix(), Expiry: now.Add(routerTokenTTL).Unix()})
	return pb.TaskGetCommandRouterAccessResponse_builder{
		Jwt: tok,
		Url: fmt.Sprintf("https://%s", c.s.addr),
	}.Build(), nil
}
