package modal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"github.com/a55dbaac/berth/backend"
	modal "github.com/modal-labs/libmodal/modal-go"
	"github.com/pelletier/go-toml/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultServerURL is Modal's API, used unless MODAL_SERVER_URL or the
// profile's server_url says otherwise.
const DefaultServerURL = "https://api.modal.com:443"

// fixHint is what a user without working credentials should do.
const fixHint = "run `modal token new` (it writes ~/.modal.toml), or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET in the environment or the .env file beside berth's config"

// credentials are a resolved Modal profile, with where each part came from.
type credentials struct {
	TokenID     string
	TokenSecret string
	Environment string // "" = the workspace's default environment
	ServerURL   string
	// Source says where the token came from, for messages: "MODAL_TOKEN_ID
	// and MODAL_TOKEN_SECRET (environment or .env)" or "profile "p" of
	// /home/u/.modal.toml".
	Source string
}

// CredentialsError reports missing, unreadable or rejected Modal
// credentials. It names where berth looked (Source) and how to fix it; berth
// never falls back to another backend on it.
type CredentialsError struct {
	Source string // where the credentials were read, or looked for
	Reason string // what is wrong
	Err    error  // the underlying error, if any
	// Missing is true when no Modal credential is configured at all (as
	// opposed to one that is incomplete, unreadable or rejected).
	Missing bool
}

func (e *CredentialsError) Error() string {
	msg := "modal: " + e.Reason
	if e.Source != "" {
		msg += " (credentials from " + e.Source + ")"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg + "; " + fixHint
}

func (e *CredentialsError) Unwrap() error { return e.Err }

// profileFile mirrors one profile of ~/.modal.toml.
type profileFile struct {
	ServerURL   string `toml:"server_url"`
	TokenID     string `toml:"token_id"`
	TokenSecret string `toml:"token_secret"`
	Environment string `toml:"environment"`
	Active      bool   `toml:"active"`
}

// resolveCredentials finds the Modal credentials the way Modal's own
// clients do: MODAL_TOKEN_ID and MODAL_TOKEN_SECRET (here read through
// getenv, so berth's .env counts), else the profile of the config file
// (MODAL_CONFIG_PATH, default ~/.modal.toml) named by MODAL_PROFILE or marked
// active; MODAL_ENVIRONMENT and MODAL_SERVER_URL override the profile's
// environment and server_url.
func resolveCredentials(getenv func(string) string) (credentials, error) {
	path := getenv("MODAL_CONFIG_PATH")
	if path == "" {
		home := getenv("HOME")
		if home == "" {
			home, _ = os.UserHomeDir()
		}
		if home != "" {
			path = filepath.Join(home, ".modal.toml")
		}
	}
	var prof profileFile
	profName := ""
	fileSource := ""
	if path != "" {
		data, err := os.ReadFile(path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if getenv("MODAL_CONFIG_PATH") != "" {
				return credentials{}, &CredentialsError{Source: path, Reason: "MODAL_CONFIG_PATH names a file that does not exist", Err: err}
			}
		case err != nil:
			return credentials{}, &CredentialsError{Source: path, Reason: "cannot read the Modal config file", Err: err}
		default:
			var profiles map[string]profileFile
			if err := toml.Unmarshal(data, &profiles); err != nil {
				return credentials{}, &CredentialsError{Source: path, Reason: "cannot parse the Modal config file", Err: err}
			}
			profName = getenv("MODAL_PROFILE")
			if profName != "" {
				p, ok := profiles[profName]
				if !ok {
					return credentials{}, &CredentialsError{Source: path,
						Reason: fmt.Sprintf("MODAL_PROFILE=%s names no profile of the config file (it has %s)", profName, profileNames(profiles))}
				}
				prof = p
			} else {
				for _, n := range sortedNames(profiles) {
					if profiles[n].Active {
						profName, prof = n, profiles[n]
						break
					}
				}
			}
			if profName != "" {
				fileSource = fmt.Sprintf("profile %q of %s", profName, path)
			}
		}
	}

	c := credentials{
		TokenID:     first(getenv("MODAL_TOKEN_ID"), prof.TokenID),
		TokenSecret: first(getenv("MODAL_TOKEN_SECRET"), prof.TokenSecret),
		Environment: first(getenv("MODAL_ENVIRONMENT"), prof.Environment),
		ServerURL:   first(getenv("MODAL_SERVER_URL"), prof.ServerURL, DefaultServerURL),
	}
	idEnv, secretEnv := getenv("MODAL_TOKEN_ID") != "", getenv("MODAL_TOKEN_SECRET") != ""
	switch {
	case idEnv && secretEnv:
		c.Source = "MODAL_TOKEN_ID and MODAL_TOKEN_SECRET (environment or .env)"
	case !idEnv && !secretEnv && fileSource != "":
		c.Source = fileSource
	case idEnv || secretEnv:
		set, unset := "MODAL_TOKEN_ID", "token_secret"
		if secretEnv {
			set, unset = "MODAL_TOKEN_SECRET", "token_id"
		}
		if fileSource != "" {
			c.Source = fmt.Sprintf("%s (environment or .env) with the %s of %s", set, unset, fileSource)
		} else {
			c.Source = set + " (environment or .env)"
		}
	default:
		c.Source = fileSource
	}
	if c.TokenID == "" || c.TokenSecret == "" {
		looked := "MODAL_TOKEN_ID/MODAL_TOKEN_SECRET (environment or .env)"
		switch {
		case fileSource != "":
			looked += " and " + fileSource
		case path != "":
			looked += " and " + path
		}
		missing := "no token id or secret"
		if c.TokenID != "" {
			missing = "a token id but no token secret"
		} else if c.TokenSecret != "" {
			missing = "a token secret but no token id"
		}
		return c, &CredentialsError{Source: looked, Reason: "no usable Modal credentials: found " + missing, Missing: c.TokenID == "" && c.TokenSecret == ""}
	}
	if !strings.HasPrefix(c.ServerURL, "https://") && !strings.HasPrefix(c.ServerURL, "http://") {
		return c, &CredentialsError{Source: c.Source, Reason: fmt.Sprintf("server URL %q (MODAL_SERVER_URL or server_url) must start with https:// or http://", c.ServerURL)}
	}
	return c, nil
}

func first(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}

func sortedNames(m map[string]profileFile) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func profileNames(m map[string]profileFile) string {
	if len(m) == 0 {
		return "no profiles"
	}
	return "profiles " + strings.Join(sortedNames(m), ", ")
}

// newClient connects the Modal SDK with exactly the resolved credentials
// and server, and checks them with one authenticated call (the SDK fetches
// its auth token, AuthTokenGet, before the first call and not before), so a
// rejected credential or an unreachable server shows here.
//
// Every unary control-plane call goes through berth's retries (retry):
// throttled and transiently failed calls are retried with backoff for the
// retry budget, then given up with a *GaveUpError.
func newClient(ctx context.Context, c credentials, log *slog.Logger, retry retryPolicy) (*modal.Client, error) {
	params := &modal.ClientParams{
		TokenID:               c.TokenID,
		TokenSecret:           c.TokenSecret,
		Environment:           c.Environment,
		Logger:                log,
		GRPCUnaryInterceptors: []grpc.UnaryClientInterceptor{retryInterceptor(retry, log)},
	}
	if err := setProfile(params, c); err != nil {
		return nil, err
	}
	type res struct {
		c   *modal.Client
		err error
	}
	done := make(chan res, 1)
	go func() {
		cl, err := modal.NewClientWithOptions(params)
		if err == nil {
			// A lookup without creation: NotFound is a fine answer, it
			// came after the token was accepted.
			if _, perr := cl.Apps.FromName(ctx, probeApp, nil); perr != nil && !isNotFound(perr) {
				cl.Close()
				cl, err = nil, perr
			}
		}
		done <- res{cl, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, clientError(c, r.err)
		}
		return r.c, nil
	case <-ctx.Done():
		go func() {
			if r := <-done; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, &backend.UnreachableError{Backend: Name, Target: c.ServerURL, Hint: "check the network, or MODAL_SERVER_URL", Err: ctx.Err()}
	}
}

// probeApp is the app newClient looks up to check the credentials; it need
// not exist.
const probeApp = "berth-credentials-check"

// clientError classifies a failure to build the client.
func clientError(c credentials, err error) error {
	var none *NoServerError
	if errors.As(err, &none) {
		return &backend.UnreachableError{Backend: Name, Target: c.ServerURL,
			Hint: "nothing answered there: check MODAL_SERVER_URL (or the profile's server_url) and the network", Err: err}
	}
	if g, ok := gaveUp(err); ok {
		if g.Throttled() {
			return fmt.Errorf("modal: connect to %s: %w", c.ServerURL, err)
		}
		return &backend.UnreachableError{Backend: Name, Target: c.ServerURL, Hint: "check the network, or MODAL_SERVER_URL", Err: err}
	}
	switch status.Code(unwrapAll(err)) {
	case codes.Unauthenticated, codes.PermissionDenied:
		return &CredentialsError{Source: c.Source, Reason: "Modal at " + c.ServerURL + " rejected the token " + c.TokenID, Err: err}
	case codes.Unavailable, codes.DeadlineExceeded:
		return &backend.UnreachableError{Backend: Name, Target: c.ServerURL, Hint: "check the network, or MODAL_SERVER_URL", Err: err}
	}
	return fmt.Errorf("modal: connect to %s: %w", c.ServerURL, err)
}

// unwrapAll returns the innermost error of a chain (the SDK wraps the gRPC
// status with %w).
func unwrapAll(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

// setProfile gives the SDK one profile with the resolved server URL and
// credentials. SDK v0.7 takes the server URL only from MODAL_SERVER_URL in
// the process environment or from its config file, and its ClientParams
// field for an in-memory config has an unexported type; it is filled here
// by reflection so that a MODAL_SERVER_URL or profile read through berth's
// .env or MODAL_CONFIG_PATH is the one the SDK uses. The profile carries the
// name the SDK will look up (MODAL_PROFILE of the process, else the active
// one). The process environment still overrides it inside the SDK, as it
// overrides any profile.
func setProfile(p *modal.ClientParams, c credentials) error {
	shapeErr := errors.New("modal: the Modal SDK's ClientParams.Config is not the map of profiles of modal-go v0.7; this berth needs modal-go v0.7.3")
	f := reflect.ValueOf(p).Elem().FieldByName("Config")
	if !f.IsValid() || !f.CanSet() || f.Kind() != reflect.Pointer || f.Type().Elem().Kind() != reflect.Map {
		return shapeErr
	}
	mt := f.Type().Elem()
	if mt.Key().Kind() != reflect.String || mt.Elem().Kind() != reflect.Struct {
		return shapeErr
	}
	prof := reflect.New(mt.Elem()).Elem()
	for field, v := range map[string]string{"ServerURL": c.ServerURL, "TokenID": c.TokenID, "TokenSecret": c.TokenSecret, "Environment": c.Environment} {
		fv := prof.FieldByName(field)
		if !fv.IsValid() || fv.Kind() != reflect.String || !fv.CanSet() {
			return shapeErr
		}
		fv.SetString(v)
	}
	active := prof.FieldByName("Active")
	if !active.IsValid() || active.Kind() != reflect.Bool || !active.CanSet() {
		return shapeErr
	}
	active.SetBool(true)
	name := os.Getenv("MODAL_PROFILE")
	if name == "" {
		name = "berth"
	}
	m := reflect.MakeMap(mt)
	m.SetMapIndex(reflect.ValueOf(name).Convert(mt.Key()), prof)
	ptr := reflect.New(mt)
	ptr.Elem().Set(m)
	f.Set(ptr)
	return nil
}
