package floor

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/docker"
	"github.com/a55dbaac/berth/bench"
)

// dockerFloors talk to the daemon berth talks to (DOCKER_HOST through the
// same lookups, else the default socket), in berth's container and with
// its image, through the Engine API client berth uses.
func dockerFloors(ctx context.Context, b *docker.Backend, opts backend.Options) (*Floors, error) {
	host := dockerHost(opts.Getenv)
	cli, err := client.New(client.FromEnv, client.WithHost(host))
	if err != nil {
		return nil, fmt.Errorf("floor: docker client for %s: %w", host, err)
	}
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		cli.Close()
		return nil, fmt.Errorf("floor: docker: ping %s: %w", host, err)
	}
	id := b.ContainerID()
	in, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("floor: docker: inspect berth's container %s: %w", id, err)
	}
	image := in.Container.Config.Image
	// The bare starts get the network berth's container has (none unless
	// docker_network): a bridge's veth pair alone costs more than the
	// rest of a start here.
	var network container.NetworkMode
	if in.Container.HostConfig != nil {
		network = in.Container.HostConfig.NetworkMode
	}
	netFlag := ""
	if network != "" && network != "default" && network != "bridge" {
		netFlag = "--network " + string(network) + " "
	}
	return &Floors{
		Stream:    "one exec (sh) attached once through the Engine API, kept open",
		StreamMax: 1.5,
		BareMax:   1.2,
		Shell: func(ctx context.Context) (*bench.Shell, error) {
			return dockerExecShell(ctx, cli, b.ContainerID())
		},
		Bare:      "docker run --rm " + netFlag + image + " true (the CLI's Engine API calls)",
		BareStart: func(ctx context.Context) (Phases, error) { return dockerRun(ctx, cli, image, network) },
		Ready:     "create, start, exec sh attached, its first answer (" + netFlag + image + ", sleep infinity)",
		ReadyStart: func(ctx context.Context) (Phases, error) {
			return dockerReady(ctx, cli, image, network)
		},
		Trace: func(ctx context.Context, key string, since time.Time) (func() Phases, error) {
			return dockerTrace(ctx, cli, key, since)
		},
		Close: cli.Close,
	}, nil
}

// dockerHost is the daemon address berth uses: DOCKER_HOST through
// getenv, then the process environment, else the default socket.
func dockerHost(getenv func(string) string) string {
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

// dockerExecShell attaches one exec of sh in container id and keeps it
// open: commands go to the hijacked connection, replies are read from its
// multiplexed stream in the reader's own goroutine (no copy, no pipe).
func dockerExecShell(ctx context.Context, cli *client.Client, id string) (*bench.Shell, error) {
	cr, err := cli.ExecCreate(ctx, id, client.ExecCreateOptions{
		AttachStdin: true, AttachStdout: true, AttachStderr: true, Cmd: []string{"sh"},
	})
	if err != nil {
		return nil, fmt.Errorf("floor: docker: exec create in %.12s: %w", id, err)
	}
	att, err := cli.ExecAttach(ctx, cr.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, fmt.Errorf("floor: docker: exec attach in %.12s: %w", id, err)
	}
	sh := bench.NewShell(att.Conn, &demux{r: att.Reader}, func() error {
		att.CloseWrite()
		att.Close()
		return nil
	})
	if err := sh.RoundTrip(); err != nil {
		sh.Close()
		return nil, fmt.Errorf("floor: docker: exec shell in %.12s: %w", id, err)
	}
	return sh, nil
}

// demux reads the payload of the Engine API's multiplexed stream (an
// 8-byte header: stream, 0, 0, 0, big-endian length; then the payload),
// stdout and stderr alike, in the caller's goroutine.
type demux struct {
	r    *bufio.Reader
	left int
	hdr  [8]byte
}

func (d *demux) Read(p []byte) (int, error) {
	for d.left == 0 {
		if _, err := io.ReadFull(d.r, d.hdr[:]); err != nil {
			return 0, err
		}
		d.left = int(binary.BigEndian.Uint32(d.hdr[4:]))
	}
	n, err := d.r.Read(p[:min(len(p), d.left)])
	d.left -= n
	return n, err
}

// dockerRun does what `docker run --rm [--network N] IMAGE true` asks of
// the daemon:
// create the container (removed by the daemon when it exits), attach to
// its output, wait for its removal, start it, read its output to the end
// and the wait's result.
func dockerRun(ctx context.Context, cli *client.Client, image string, network container.NetworkMode) (Phases, error) {
	c := newClock()
	cr, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{Image: image, Cmd: []string{"true"}, AttachStdout: true, AttachStderr: true,
			Labels: map[string]string{Label: "1"}},
		HostConfig: &container.HostConfig{AutoRemove: true, NetworkMode: network},
	})
	if err != nil {
		return nil, fmt.Errorf("floor: docker run: create: %w", err)
	}
	c.mark("create")
	att, err := cli.ContainerAttach(ctx, cr.ID, client.ContainerAttachOptions{Stream: true, Stdout: true, Stderr: true})
	if err != nil {
		cli.ContainerRemove(context.WithoutCancel(ctx), cr.ID, client.ContainerRemoveOptions{Force: true})
		return nil, fmt.Errorf("floor: docker run: attach: %w", err)
	}
	defer att.Close()
	wait := cli.ContainerWait(ctx, cr.ID, client.ContainerWaitOptions{Condition: container.WaitConditionRemoved})
	c.mark("attach, wait")
	if _, err := cli.ContainerStart(ctx, cr.ID, client.ContainerStartOptions{}); err != nil {
		cli.ContainerRemove(context.WithoutCancel(ctx), cr.ID, client.ContainerRemoveOptions{Force: true})
		return nil, fmt.Errorf("floor: docker run: start: %w", err)
	}
	c.mark("start")
	if _, err := io.Copy(io.Discard, att.Reader); err != nil {
		return nil, fmt.Errorf("floor: docker run: output: %w", err)
	}
	c.mark("exited")
	select {
	case r := <-wait.Result:
		if r.StatusCode != 0 {
			return nil, fmt.Errorf("floor: docker run: %s true exited %d", image, r.StatusCode)
		}
	case err := <-wait.Error:
		return nil, fmt.Errorf("floor: docker run: wait: %w", err)
	}
	c.mark("removed")
	return c.ph, nil
}

// dockerReady is the least a persistent shell in a new container needs:
// the container created and started (sleep infinity), one exec of sh
// attached, its first answer. The container is removed afterwards,
// untimed.
func dockerReady(ctx context.Context, cli *client.Client, image string, network container.NetworkMode) (Phases, error) {
	c := newClock()
	cr, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{Image: image, Entrypoint: []string{"sleep", "infinity"}, Cmd: []string{},
			Labels: map[string]string{Label: "1"}},
		HostConfig: &container.HostConfig{NetworkMode: network},
	})
	if err != nil {
		return nil, fmt.Errorf("floor: docker ready: create: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		cli.ContainerRemove(rctx, cr.ID, client.ContainerRemoveOptions{Force: true})
	}()
	c.mark("create")
	if _, err := cli.ContainerStart(ctx, cr.ID, client.ContainerStartOptions{}); err != nil {
		return nil, fmt.Errorf("floor: docker ready: start: %w", err)
	}
	c.mark("start")
	ex, err := cli.ExecCreate(ctx, cr.ID, client.ExecCreateOptions{
		AttachStdin: true, AttachStdout: true, AttachStderr: true, Cmd: []string{"sh"},
	})
	if err != nil {
		return nil, fmt.Errorf("floor: docker ready: exec create: %w", err)
	}
	att, err := cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, fmt.Errorf("floor: docker ready: exec attach: %w", err)
	}
	defer att.Close()
	c.mark("exec open")
	sh := bench.NewShell(att.Conn, &demux{r: att.Reader}, nil)
	if err := sh.RoundTrip(); err != nil {
		return nil, fmt.Errorf("floor: docker ready: %w", err)
	}
	c.mark("first answer")
	return c.ph, nil
}

// dockerTrace records, from the daemon's events, when the steps of
// berth's own start of key's container happened: create, start, the
// first exec created and started (what berth does between them is its
// own: its API calls, the claim, the session's start script). Call it
// before the start; stop waits (a second at most) for the first exec's
// start to come through, ends the recording and returns the steps
// relative to since, in order.
func dockerTrace(ctx context.Context, cli *client.Client, key string, since time.Time) (stop func() Phases, err error) {
	ectx, cancel := context.WithCancel(ctx)
	res := cli.Events(ectx, client.EventsListOptions{
		Since:   fmt.Sprintf("%d.%09d", since.Unix(), since.Nanosecond()),
		Filters: make(client.Filters).Add("type", "container").Add("container", docker.ContainerName(key)),
	})
	var ph Phases
	done := make(chan struct{})
	execStarted := make(chan struct{})
	go func() {
		defer close(done)
		seen := map[string]bool{}
		for {
			select {
			case m := <-res.Messages:
				act, _, _ := strings.Cut(string(m.Action), ":") // exec_create: sh -c ...
				if seen[act] {
					continue
				}
				seen[act] = true
				ph = append(ph, Phase{act, time.Unix(0, m.TimeNano).Sub(since)})
				if act == "exec_start" {
					close(execStarted)
				}
			case <-res.Err:
				return
			case <-ectx.Done():
				return
			}
		}
	}()
	return func() Phases {
		select {
		case <-execStarted:
		case <-time.After(time.Second):
		case <-done:
		}
		cancel()
		<-done
		return ph
	}, nil
}
