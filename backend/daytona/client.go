package daytona

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"syscall"
	"time"

	apiclient "github.com/daytona/clients/api-client-go"
	toolbox "github.com/daytona/clients/toolbox-api-client-go"

	"github.com/a55dbaac/berth/backend"
)

// Environment variables the backend reads (from berth's environment or the
// .env file beside the config, through backend.Options.Getenv).
const (
	EnvAPIKey = "DAYTONA_API_KEY"
	EnvJWT    = "DAYTONA_JWT_TOKEN"
	EnvOrg    = "DAYTONA_ORGANIZATION_ID"
	EnvAPIURL = "DAYTONA_API_URL"
	EnvTarget = "DAYTONA_TARGET"
)

// DefaultAPIURL is Daytona's API when DAYTONA_API_URL is not set.
const DefaultAPIURL = "https://app.daytona.io/api"

// credentials are what the backend authenticates with.
type credentials struct {
	apiURL string // as configured: used for requests, never shown
	shown  string // apiURL with any password replaced, for messages
	key    string // the API key or the JWT
	keyVar string // the variable key came from, for error messages
	org    string // with a JWT only
	target string
}

// ErrNoCredentials is returned (wrapped) when neither an API key nor a JWT
// with its organization is configured.
var ErrNoCredentials = errors.New("daytona: no credentials: set " + EnvAPIKey +
	" (or " + EnvJWT + " and " + EnvOrg + ") in the environment or in the .env file beside the config")

// AuthError reports that the Daytona API rejected the configured
// credential (401 or 403).
type AuthError struct {
	Var    string // the variable holding the rejected credential
	URL    string
	Status int
	Msg    string // what the API said
}

func (e *AuthError) Error() string {
	return fmt.Sprintf("daytona: the API at %s rejected %s (%d %s: %s); check the key, and %s if the API is not Daytona's cloud",
		e.URL, e.Var, e.Status, http.StatusText(e.Status), e.Msg, EnvAPIURL)
}

// loadCredentials reads the credential variables through getenv.
func loadCredentials(getenv func(string) string) (credentials, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	c := credentials{apiURL: strings.TrimRight(strings.TrimSpace(getenv(EnvAPIURL)), "/"), target: strings.TrimSpace(getenv(EnvTarget))}
	if c.apiURL == "" {
		c.apiURL = DefaultAPIURL
	}
	c.shown = redactURL(c.apiURL)
	u, err := url.Parse(c.apiURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return c, fmt.Errorf("daytona: %s=%q is not an http(s) URL (Daytona's cloud is %s)", EnvAPIURL, c.shown, DefaultAPIURL)
	}
	switch key, jwt, org := strings.TrimSpace(getenv(EnvAPIKey)), strings.TrimSpace(getenv(EnvJWT)), strings.TrimSpace(getenv(EnvOrg)); {
	case key != "":
		c.key, c.keyVar = key, EnvAPIKey
	case jwt != "" && org == "":
		return c, fmt.Errorf("daytona: %s is set but %s is not: a JWT needs its organization id", EnvJWT, EnvOrg)
	case jwt != "":
		c.key, c.keyVar, c.org = jwt, EnvJWT, org
	default:
		return c, ErrNoCredentials
	}
	return c, nil
}

// userinfo matches the user and password part of a URL that url.Parse
// may not accept.
var userinfo = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@`)

// redactURL returns raw with any password in it replaced by "xxxxx", as
// url.URL.Redacted does, also when raw does not parse: error messages and
// doctor's report show this, never raw (DAYTONA_API_URL may carry a
// proxy's credentials).
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return userinfo.ReplaceAllString(raw, "${1}xxxxx@")
}

// httpClient is the client of both generated API clients and of uploads:
// no overall timeout (uploads and websockets may last), bounded dials and
// handshakes, and 429 and 5xx answers retried (see retry.go).
func httpClient(log *slog.Logger) *http.Client {
	rt := &retryTransport{base: baseTransport()}
	if log != nil {
		rt.log = log
	}
	return &http.Client{Transport: rt}
}

// baseTransport is httpClient's transport without the retries; the PTY
// websocket dialer takes its dialer and TLS settings.
func baseTransport() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	tr.TLSHandshakeTimeout = 10 * time.Second
	tr.ResponseHeaderTimeout = 2 * time.Minute
	tr.MaxIdleConnsPerHost = 16
	return tr
}

// transportOf returns the *http.Transport under hc's retries.
func transportOf(hc *http.Client) *http.Transport {
	switch tr := hc.Transport.(type) {
	case *retryTransport:
		t, _ := tr.base.(*http.Transport)
		return t
	case *http.Transport:
		return tr
	}
	return nil
}

// headers are the default headers of every call.
func (c credentials) headers() map[string]string {
	h := map[string]string{
		"Authorization":    "Bearer " + c.key,
		"X-Daytona-Source": "berth",
	}
	if c.org != "" {
		h["X-Daytona-Organization-ID"] = c.org
	}
	return h
}

// apiClient returns Daytona's generated control-plane client.
func (c credentials) apiClient(hc *http.Client) *apiclient.APIClient {
	cfg := apiclient.NewConfiguration()
	cfg.Servers = apiclient.ServerConfigurations{{URL: c.apiURL}}
	cfg.HTTPClient = hc
	cfg.UserAgent = "berth"
	for k, v := range c.headers() {
		cfg.AddDefaultHeader(k, v)
	}
	return apiclient.NewAPIClient(cfg)
}

// toolboxClient returns Daytona's generated toolbox client for a sandbox,
// at {toolboxProxyUrl}/{sandboxId} as the toolbox API defines.
func (c credentials) toolboxClient(hc *http.Client, proxyURL, sandboxID string) *toolbox.APIClient {
	cfg := toolbox.NewConfiguration()
	cfg.Servers = toolbox.ServerConfigurations{{URL: strings.TrimRight(proxyURL, "/") + "/" + sandboxID}}
	cfg.HTTPClient = hc
	cfg.UserAgent = "berth"
	for k, v := range c.headers() {
		cfg.AddDefaultHeader(k, v)
	}
	return toolbox.NewAPIClient(cfg)
}

// apiErr turns a generated client's error into berth's: a connection
// failure is a *backend.UnreachableError, a rejected credential an
// *AuthError, anything else an *APIError with the status and the API's
// message.
func (c credentials) apiErr(err error, resp *http.Response, format string, args ...any) error {
	if err == nil {
		return nil
	}
	what := fmt.Sprintf(format, args...)
	status := 0
	if resp != nil {
		status = resp.StatusCode
	}
	if status == 0 {
		if isConnErr(err) {
			return &backend.UnreachableError{Backend: Name, Target: c.shown, Err: err,
				Hint: "check " + EnvAPIURL + " and the network; Daytona's cloud is " + DefaultAPIURL}
		}
		return fmt.Errorf("daytona: %s: %w", what, err)
	}
	msg := errorMessage(err)
	if status == http.StatusUnauthorized || status == http.StatusForbidden {
		return &AuthError{Var: c.keyVar, URL: c.shown, Status: status, Msg: msg}
	}
	return &APIError{Op: what, Status: status, Msg: msg, GaveUp: gaveUp(resp)}
}

// APIError is an error answer of the Daytona API or toolbox.
type APIError struct {
	Op     string // what berth was doing
	Status int
	Msg    string
	// GaveUp, for an answer berth retries (429, 502, 503, 504), says why
	// it stopped retrying (see retry.go).
	GaveUp string
}

func (e *APIError) Error() string {
	what := http.StatusText(e.Status)
	if e.Status == http.StatusTooManyRequests {
		what += " (Daytona's rate limit)"
	}
	return fmt.Sprintf("daytona: %s: %d %s: %s%s", e.Op, e.Status, what, e.Msg, e.GaveUp)
}

// statusOf returns the HTTP status of an *APIError in err's chain, or 0.
func statusOf(err error) int {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// errorMessage extracts the "message" of an error body kept by either
// generated client.
func errorMessage(err error) string {
	var body []byte
	var a *apiclient.GenericOpenAPIError
	var t *toolbox.GenericOpenAPIError
	switch {
	case errors.As(err, &a):
		body = a.Body()
	case errors.As(err, &t):
		body = t.Body()
	}
	if m := jsonField(body, "message"); m != "" {
		return m
	}
	if len(body) > 0 {
		return strings.TrimSpace(string(body))
	}
	return err.Error()
}

// isConnErr reports whether err means the server could not be reached.
func isConnErr(err error) bool {
	var ne *net.OpError
	var de *net.DNSError
	return errors.As(err, &ne) || errors.As(err, &de) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

// jsonField returns the string field name of a JSON object, or "".
func jsonField(body []byte, name string) string {
	var m map[string]any
	if json.Unmarshal(body, &m) != nil {
		return ""
	}
	s, _ := m[name].(string)
	return s
}
