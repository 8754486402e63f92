package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/a55dbaac/berth/backend"
)

// ErrNoCluster is returned (wrapped) when no client configuration exists:
// no kubeconfig file and not running in a pod.
var ErrNoCluster = errors.New("kubernetes: no cluster configured")

// noClusterError is ErrNoCluster with where berth looked.
type noClusterError struct{ files []string }

// reason says where berth looked.
func (e *noClusterError) reason() string {
	if len(e.files) == 0 {
		return "no kubeconfig and not running in a pod"
	}
	return "no kubeconfig at " + strings.Join(e.files, ", ") + " and not running in a pod"
}

func (e *noClusterError) Error() string {
	return fmt.Sprintf("%v: %s; set KUBECONFIG or terminal.%s to a kubeconfig file", ErrNoCluster, e.reason(), keyKubeconfig)
}

func (e *noClusterError) Unwrap() error { return ErrNoCluster }

// cluster is a connection to one cluster as one user: the REST
// configuration (for exec streams), berth's API client (rest.go), the
// namespace berth works in, and where the configuration came from (for
// messages).
type cluster struct {
	cfg       *rest.Config
	api       *apiClient
	namespace string
	source    string // "kubeconfig /path (context c)" or "in-cluster service account"
	host      string // the API server's URL
}

// klogOnce sends client-go's own logging (klog: stream copy errors,
// throttling notes) to slog at debug level instead of stderr, where it
// would interleave with a command's output on a terminal.
var klogOnce sync.Once

func quietKlog() {
	klogOnce.Do(func() {
		klog.SetLogger(logr.FromSlogHandler(debugHandler{slog.Default().Handler()}))
		klog.LogToStderr(false)
		klog.SetOutput(io.Discard)
	})
}

// debugHandler lowers every record to debug level.
type debugHandler struct{ slog.Handler }

func (h debugHandler) Enabled(ctx context.Context, _ slog.Level) bool {
	return h.Handler.Enabled(ctx, slog.LevelDebug)
}

func (h debugHandler) Handle(ctx context.Context, r slog.Record) error {
	if !h.Handler.Enabled(ctx, slog.LevelDebug) {
		return nil // logr passes errors on without asking Enabled
	}
	r.Level = slog.LevelDebug
	return h.Handler.Handle(ctx, r)
}

// connect loads the client configuration as kubectl does — the
// kubernetes_kubeconfig key, else $KUBECONFIG (from berth's environment or
// .env, a list of files merged), else ~/.kube/config, else the in-cluster
// service account — with kubernetes_context, and resolves the namespace:
// kubernetes_namespace, else the context's, else "default".
func connect(s *settings, getenv func(string) string) (*cluster, error) {
	quietKlog()
	if getenv == nil {
		getenv = os.Getenv
	}
	rules := &clientcmd.ClientConfigLoadingRules{}
	var files []string
	switch {
	case s.Kubeconfig != "":
		rules.ExplicitPath = expandHome(s.Kubeconfig, getenv)
		files = []string{rules.ExplicitPath}
	case getenv("KUBECONFIG") != "":
		for _, f := range filepath.SplitList(getenv("KUBECONFIG")) {
			if f != "" {
				files = append(files, expandHome(f, getenv))
			}
		}
		rules.Precedence = files
	default:
		home := getenv("HOME")
		if home == "" {
			home, _ = os.UserHomeDir()
		}
		if home != "" {
			files = []string{filepath.Join(home, ".kube", "config")}
			rules.Precedence = files
		}
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: s.Context}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, &noClusterError{files: files}
		}
		return nil, fmt.Errorf("kubernetes: load the client configuration (%s): %w", strings.Join(files, ", "), err)
	}
	source := "in-cluster service account"
	if raw, rerr := cc.RawConfig(); rerr == nil && len(raw.Contexts) > 0 {
		ctxName := raw.CurrentContext
		if s.Context != "" {
			ctxName = s.Context
		}
		source = "kubeconfig " + strings.Join(files, string(filepath.ListSeparator)) + " (context " + ctxName + ")"
	}
	ns := s.Namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil || ns == "" {
			ns = "default"
		}
	}
	cfg = rest.CopyConfig(cfg)
	// One berth runs few requests, but a burst of them at start (find the
	// pod, claim it, create it, watch it): do not throttle those.
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = "berth"
	api, err := newAPIClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: client for %s: %w", cfg.Host, err)
	}
	return &cluster{cfg: cfg, api: api, namespace: ns, source: source, host: cfg.Host}, nil
}

func expandHome(p string, getenv func(string) string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		home := getenv("HOME")
		if home == "" {
			home, _ = os.UserHomeDir()
		}
		return filepath.Join(home, strings.TrimPrefix(p, "~"))
	}
	return p
}

// wrap adds context to an API error and classifies it: a cluster that
// cannot be reached becomes a *backend.UnreachableError, a refused
// identity or a missing permission a message that says which.
func (c *cluster) wrap(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	what := fmt.Sprintf(format, args...)
	switch {
	case isConnErr(err):
		return &backend.UnreachableError{Backend: Name, Target: c.host,
			Hint: "is the cluster up? berth uses " + c.source, Err: fmt.Errorf("%s: %w", what, err)}
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("kubernetes: %s: the API server at %s does not accept the credentials of %s (expired token or certificate?): %w",
			what, c.host, c.source, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("kubernetes: %s: not allowed in namespace %s (berth doctor lists the permissions berth needs): %w",
			what, c.namespace, err)
	}
	return fmt.Errorf("kubernetes: %s: %w", what, err)
}

// isConnErr reports an error that says the API server could not be
// reached (refused, reset, unreachable, timed out at the network level,
// the connection dropped mid-request, or the server answering that it is
// not ready yet).
func isConnErr(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	var oe *net.OpError
	switch {
	case errors.As(err, &oe), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	case errors.As(err, &ne) && ne.Timeout():
		return true
	case apierrors.IsServiceUnavailable(err):
		return true
	}
	m := err.Error()
	return strings.Contains(m, "connection refused") || strings.Contains(m, "connection reset") ||
		strings.Contains(m, "no such host") || strings.HasSuffix(m, ": EOF") || strings.Contains(m, "http2: client connection lost") ||
		strings.Contains(m, "use of closed network connection")
}
