package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/a55dbaac/berth/backend"

	"github.com/spf13/cobra"

	"github.com/a55dbaac/berth/config"
	"github.com/a55dbaac/berth/internal/randhex"
	"github.com/a55dbaac/berth/manager"
	"github.com/a55dbaac/berth/mcpserver"
)

// addMCPFlags adds the flags berth mcp and berth serve share with the
// commands that run things.
func (c *common) addMCPFlags(cmd *cobra.Command) {
	c.addConfigFlag(cmd)
	cmd.Flags().StringVar(&c.Backend, "backend", "", "backend: "+backend.Choices()+" (overrides TERMINAL_ENV and the file)")
	cmd.Flags().StringVar(&c.Task, "task", manager.DefaultKey, "environment key (the prefix of per-session keys over HTTP)")
	cmd.Flags().IntVar(&c.Timeout, "timeout", 0, "default seconds before a command is killed (default terminal.timeout)")
}

func newMCPCmd() *cobra.Command {
	var c common
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the terminal and file tools to an agent over MCP on stdio",
		Long: `Serve berth's tools (terminal, process, read_file, write_file, patch, search_files) over
the Model Context Protocol on stdin/stdout, as desktop agents launch MCP
servers. Every call runs in the configured environment (terminal.backend);
the session keeps one persistent shell for the whole conversation. Logs go to
stderr. A malformed message is answered with a JSON-RPC error and skipped.

On SIGTERM, SIGINT or SIGHUP running commands are interrupted (exit 130),
every environment is closed and berth exits within
terminal.daemon_term_grace_seconds plus 3 s; a second signal exits at once.`,
		Example: `  claude mcp add berth -- berth mcp
  claude mcp add berth-docker -- berth mcp --backend docker`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.load()
			if err != nil {
				return err
			}
			return withManager(cmd.Context(), cfg, func(ctx context.Context, m *manager.Manager) error {
				m.StartSweeper(ctx)
				// Tool calls end with ctx: on a shutdown signal their
				// commands are interrupted, their results sent, and Run
				// returns once they have.
				srv := mcpserver.New(m, mcpserver.Options{Key: c.Task, Logger: slog.Default(), Context: ctx})
				err := srv.Run(ctx, &mcpserver.StdioTransport{Logger: slog.Default()}, drainTime(cfg))
				if err != nil && ctx.Err() != nil {
					return nil // stopped by a signal
				}
				return err
			})
		},
	}
	c.addMCPFlags(cmd)
	return cmd
}

func newServeCmd() *cobra.Command {
	var c common
	var listen, token string
	var maxSessions int
	var idleTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the terminal and file tools over MCP streamable HTTP",
		Long: `Serve berth's MCP tools over streamable HTTP at http://ADDR/mcp.

Every request must carry "Authorization: Bearer TOKEN"; others get 401 and
touch nothing. The token comes from --token or BERTH_TOKEN. On a loopback
address without one, berth makes up a random token and prints it to stderr;
on any other address it refuses to start without one. Each MCP session gets
its own environment (closed when the session ends) unless
terminal.share_environment is set. At most --max-sessions sessions are open
at once (64 by default); a client over the cap gets an error saying so.
A session idle for an hour is closed.

On SIGTERM, SIGINT or SIGHUP running commands are interrupted (exit 130),
every environment is closed and berth exits within
terminal.daemon_term_grace_seconds plus 3 s; a second signal exits at once.`,
		Example: `  BERTH_TOKEN=$(openssl rand -hex 32) berth serve
  berth serve --listen 0.0.0.0:8765 --token "$BERTH_TOKEN" --backend docker`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if token == "" {
				token = os.Getenv("BERTH_TOKEN")
			}
			if maxSessions < 1 {
				return fmt.Errorf("--max-sessions %d: must be at least 1", maxSessions)
			}
			if idleTimeout <= 0 {
				return fmt.Errorf("--idle-timeout %s: must be positive (e.g. 60s)", idleTimeout)
			}
			loopback, err := isLoopback(listen)
			if err != nil {
				return err
			}
			if token == "" {
				if !loopback {
					return fmt.Errorf("refusing to serve on %s without a token: anyone who can reach it could run commands here; set --token or BERTH_TOKEN (or listen on 127.0.0.1)", listen)
				}
				token = randhex.String(24)
				fmt.Fprintf(os.Stderr, "berth serve: no --token or BERTH_TOKEN given; use this one: %s\n", token)
			}
			cfg, err := c.load()
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", listen, err)
			}
			return withManager(cmd.Context(), cfg, func(ctx context.Context, m *manager.Manager) error {
				m.StartSweeper(ctx)
				srv := mcpserver.New(m, mcpserver.Options{Key: c.Task, Logger: slog.Default(), Context: ctx})
				mux := http.NewServeMux()
				mux.Handle("/mcp", mcpserver.Handler(srv, token, &mcpserver.HTTPOptions{MaxSessions: maxSessions}))
				mux.Handle("/ps", mcpserver.RequireToken(token, psHandler(m)))
				mux.Handle("/", mcpserver.RequireToken(token, http.NotFoundHandler()))
				hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: idleTimeout}
				fmt.Fprintf(os.Stderr, "berth serve: listening on http://%s/mcp\n", ln.Addr())
				errc := make(chan error, 1)
				go func() { errc <- hs.Serve(ln) }()
				select {
				case err := <-errc:
					return fmt.Errorf("serve: %w", err)
				case <-ctx.Done():
				}
				// The tool calls were cancelled with ctx; end every session
				// once its calls have returned their (interrupted) results,
				// which also ends the streams Shutdown would wait for.
				sctx, cancel := context.WithTimeout(context.Background(), drainTime(cfg))
				defer cancel()
				srv.Shutdown(sctx)
				if err := hs.Shutdown(sctx); err != nil {
					hs.Close()
				}
				if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
					return err
				}
				return nil
			})
		},
	}
	c.addMCPFlags(cmd)
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8765", "address to listen on (host:port)")
	cmd.Flags().StringVar(&token, "token", "", "bearer token clients must send (default $BERTH_TOKEN)")
	cmd.Flags().IntVar(&maxSessions, "max-sessions", mcpserver.DefaultMaxSessions, "most MCP sessions open at once (each has its own environment); more are refused with an error")
	cmd.Flags().DurationVar(&idleTimeout, "idle-timeout", 60*time.Second, "close a kept-alive HTTP connection idle for this long")
	return cmd
}

// drainTime bounds the wait, after a shutdown signal, for the interrupted
// tool calls to return their results: the grace their commands get between
// SIGTERM and SIGKILL, plus a second.
func drainTime(cfg *config.Config) time.Duration {
	return time.Duration(cfg.Terminal.DaemonTermGraceSeconds*float64(time.Second)) + time.Second
}

// isLoopback reports whether a listen address only accepts connections
// from this machine. An empty host (":8765") means every interface.
func isLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("--listen %q: want host:port: %w", addr, err)
	}
	if strings.EqualFold(host, "localhost") {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}
