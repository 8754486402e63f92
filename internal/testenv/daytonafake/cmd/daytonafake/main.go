// Command daytonafake runs berth's stand-in for the Daytona API and toolbox
// API on its own, so the daytona backend (or any Daytona client) can be
// tried by hand against real Docker containers:
//
//	go run ./internal/testenv/daytonafake/cmd/daytonafake -addr 127.0.0.1:3986
//	go run ./internal/testenv/daytonafake/cmd/daytonafake -realistic   # as unkind as Daytona
//
// -realistic turns on every way the fake knows the real service is hard on
// its clients (daytonafake.Realistic: slow-consumer drops, close frames
// ahead of output, a lagging list, 429s and transient 5xx, execute through
// the user's shell, a non-root user, idle connections cut, small random
// delays). It prints the DAYTONA_API_URL and DAYTONA_API_KEY to export, serves until
// interrupted, and then removes every sandbox container it created. The
// default image of sandboxes created without one is berth's test image,
// built from the host's busybox and bash when missing (see dockerenv).
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/moby/moby/client"

	"github.com/a55dbaac/berth/internal/testenv/daytonafake"
	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:3986", "listen address")
	key := flag.String("key", "", "API key clients must present (default: random)")
	image := flag.String("image", "", "image of sandboxes created without one (default: berth's test image, built if missing)")
	verbose := flag.Bool("v", false, "log every state change")
	warm := flag.Int("warm-pool", 1, "started containers kept ready per sandbox shape, like Daytona's warm pool (0: none)")
	realistic := flag.Bool("realistic", false, "be as unkind as Daytona: slow-consumer drops, close before output, lagging list, 429/5xx, shell execute, non-root user, idle cuts, random delays")
	flag.Parse()
	var unkind daytonafake.Unkind
	if *realistic {
		unkind = daytonafake.Realistic()
	}
	if err := run(*addr, *key, *image, *verbose, *warm, unkind); err != nil {
		fmt.Fprintln(os.Stderr, "daytonafake:", err)
		os.Exit(1)
	}
}

func run(addr, key, image string, verbose bool, warm int, unkind daytonafake.Unkind) error {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return fmt.Errorf("docker client: %w", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err = cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
	cancel()
	if err != nil {
		return fmt.Errorf("no Docker daemon answers (run scripts/ensure-docker.sh): %w", err)
	}
	if image == "" {
		if image, err = testImage(cli); err != nil {
			return err
		}
	}
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	s, err := daytonafake.New(daytonafake.Options{Docker: cli, APIKey: key, DefaultImage: image, Addr: addr, Logger: log, WarmPool: warm, Unkind: unkind})
	if err != nil {
		return err
	}
	mode := "kind"
	if unkind.On() {
		mode = fmt.Sprintf("realistic (as unkind as Daytona: %s; fault seed %d, BERTH_FAKE_SEED=%d replays it)", unkind, s.Seed(), s.Seed())
	}
	fmt.Printf("export DAYTONA_API_URL=%s\nexport DAYTONA_API_KEY=%s\n# %s fake; sandboxes without an image run %s; Ctrl-C stops the fake and removes its containers\n",
		s.APIURL(), s.APIKey(), mode, image)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	return s.Close()
}

// testImage returns berth's test image, importing it from the host's
// binaries (dockerenv.RootFS) when the daemon does not have it yet.
func testImage(cli *client.Client) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cli.ImageInspect(ctx, dockerenv.ImageRef); err == nil {
		return dockerenv.ImageRef, nil
	}
	rootfs, err := dockerenv.RootFS()
	if err != nil {
		return "", err
	}
	res, err := cli.ImageImport(ctx, client.ImageImportSource{Source: bytes.NewReader(rootfs), SourceName: "-"}, dockerenv.ImageRef,
		client.ImageImportOptions{Changes: []string{`CMD ["/bin/sh"]`, `ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`}})
	if err != nil {
		return "", fmt.Errorf("import %s: %w", dockerenv.ImageRef, err)
	}
	defer res.Close()
	if _, err := io.Copy(io.Discard, res); err != nil {
		return "", fmt.Errorf("import %s: %w", dockerenv.ImageRef, err)
	}
	return dockerenv.ImageRef, nil
}
