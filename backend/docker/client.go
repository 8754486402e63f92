package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/a55dbaac/berth/backend"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// startHint is what an UnreachableError tells the user to do.
const startHint = "start the Docker daemon (`sudo systemctl start docker`, or `sudo dockerd &`; " +
	"scripts/ensure-docker.sh does it here) or point DOCKER_HOST at a running one"

// daemonHost returns the daemon address berth talks to: DOCKER_HOST (looked
// up through getenv, then the process environment) or the default socket.
func daemonHost(getenv func(string) string) string {
	if getenv != nil {
		if h := getenv(client.EnvOverrideHost); h != "" {
			return h
		}
	}
	if h := os.Getenv(client.EnvOverrideHost); h != "" {
		return h
	}
	return client.DefaultDockerHost
}

// socketName is the daemon address as users know it: the socket path for
// unix:// hosts, the URL otherwise.
func socketName(host string) string {
	if p, ok := strings.CutPrefix(host, "unix://"); ok {
		return p
	}
	return host
}

// connect creates an API client for the daemon and checks that it answers,
// negotiating the API version (the client speaks 1.40 and later). A daemon
// that does not answer gives a *backend.UnreachableError.
func connect(ctx context.Context, getenv func(string) string) (*client.Client, error) {
	host := daemonHost(getenv)
	cli, err := client.New(client.FromEnv, client.WithHost(host))
	if err != nil {
		return nil, fmt.Errorf("docker: client for %s: %w", host, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		cli.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("docker: ping %s: %w", host, err)
		}
		return nil, unreachable(host, err)
	}
	return cli, nil
}

func unreachable(host string, err error) error {
	return &backend.UnreachableError{Backend: Name, Target: socketName(host), Hint: startHint, Err: err}
}

// isConnErr reports whether err means the daemon could not be reached at all
// (as opposed to an API error it answered with).
func isConnErr(err error) bool {
	if err == nil {
		return false
	}
	if client.IsErrConnectionFailed(err) {
		return true
	}
	var ne *net.OpError
	if errors.As(err, &ne) {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// wrap adds context to an API error, turning a connection failure into a
// *backend.UnreachableError.
func wrap(host string, err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	if isConnErr(err) {
		return unreachable(host, err)
	}
	return fmt.Errorf("docker: "+format+": %w", append(args, err)...)
}

// isGone reports whether an exec could not be created because the container
// disappeared or is not running.
func isGone(err error) bool {
	return cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err)
}
