// Command modalfake runs berth's fake Modal control plane on its own, so
// that the modal backend can be tried on a machine with Docker and no Modal
// account:
//
//	go run ./internal/testenv/modalfake/cmd/modalfake
//
// It prints the variables to export (MODAL_SERVER_URL, MODAL_TOKEN_ID,
// MODAL_TOKEN_SECRET) and serves until interrupted, then terminates its
// sandboxes and removes their containers and snapshot images. Sandboxes run
// as containers of the Docker daemon named by DOCKER_HOST (default
// /var/run/docker.sock); set modal_image to an image that daemon has (or can
// pull). File access through Sandbox.Open needs the fake to run on the
// Docker host as a user who may enter its containers (root).
//
// With -realistic the fake is as unkind as the real Modal (see
// modalfake.Realistic): new sandboxes stay a moment without a task id
// while they are "scheduled", sandbox and secret creations are
// rate-limited with RESOURCE_EXHAUSTED and a retry delay, a few calls fail
// with UNAVAILABLE and a few output streams break, the command router of
// a finished sandbox stops answering, lifetimes end a little early and
// snapshots take a while.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/a55dbaac/berth/internal/testenv/modalfake"
	"github.com/moby/moby/client"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8790", "address to listen on")
	tokenID := flag.String("token-id", "", "token id to accept (default: random)")
	tokenSecret := flag.String("token-secret", "", "token secret to accept (default: random)")
	verbose := flag.Bool("v", false, "log every sandbox event")
	realistic := flag.Bool("realistic", false, "be as unkind as the real Modal: scheduling delays, rate limits, transient failures, a silent router for finished sandboxes, early expiry, slow snapshots")
	flag.Parse()
	var faults modalfake.Faults
	if *realistic {
		faults = modalfake.Realistic()
	}
	if err := run(*addr, *tokenID, *tokenSecret, *verbose, faults); err != nil {
		fmt.Fprintln(os.Stderr, "modalfake:", err)
		os.Exit(1)
	}
}

func run(addr, tokenID, tokenSecret string, verbose bool, faults modalfake.Faults) error {
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return fmt.Errorf("docker client: %w", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err = cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
	cancel()
	if err != nil {
		return fmt.Errorf("no Docker daemon answers (start one, or set DOCKER_HOST): %w", err)
	}
	srv, err := modalfake.New(context.Background(), modalfake.Options{
		Docker: cli, Addr: addr, TokenID: tokenID, TokenSecret: tokenSecret, Logger: log, Faults: faults,
	})
	if err != nil {
		return err
	}
	fmt.Printf("# fake Modal on %s (faults: %s; fault seed %d, BERTH_FAKE_SEED=%d replays it); to use it:\n", srv.URL(), faults, srv.Seed(), srv.Seed())
	for _, k := range []string{"MODAL_SERVER_URL", "MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET"} {
		fmt.Printf("export %s=%s\n", k, srv.Env()[k])
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	fmt.Fprintln(os.Stderr, "modalfake: shutting down")
	return srv.Close()
}
