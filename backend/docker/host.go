package docker

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/moby/moby/client"
)

// daemonConn is what one berth process keeps of one Docker daemon for
// all its environments: one API client (its connections, its negotiated
// API version), what the daemon's info says it enforces, and whether it
// refused a per-container disk quota. None of it changes per environment,
// so it is learnt once (a ping, an info) instead of per environment, and
// the environments of a daemon share one client (the Engine API serves
// any number of requests on its connections).
type daemonConn struct {
	cli  *client.Client
	host string

	memoryLimit, cpuCFS, pidsLimit, swapLimit bool
	ncpu                                      int

	// diskRefused is set once the daemon refused StorageOpt size (not
	// overlay2 on xfs with pquota): later creates go without it at once,
	// still reporting the limit as not enforced (logged for each
	// environment, and by Doctor). diskWhy holds the daemon's words.
	diskRefused atomic.Bool
	diskWhy     atomic.Pointer[string]

	// starts bounds the container creates and starts running at once
	// against this daemon (nil: no bound); see startSlots.
	starts chan struct{}
}

var (
	daemonsMu sync.Mutex
	daemons   = map[string]*daemonConn{}
)

// daemonFor returns this process's connection to the daemon the options
// name (DOCKER_HOST, else the default socket), connecting and reading its
// info the first time. A daemon that does not answer gives a
// *backend.UnreachableError and is asked again next time.
func daemonFor(ctx context.Context, getenv func(string) string) (*daemonConn, error) {
	host := daemonHost(getenv)
	daemonsMu.Lock()
	defer daemonsMu.Unlock()
	if d := daemons[host]; d != nil {
		return d, nil
	}
	cli, err := connect(ctx, getenv)
	if err != nil {
		return nil, err
	}
	d := &daemonConn{cli: cli, host: host, memoryLimit: true, cpuCFS: true, pidsLimit: true}
	if info, err := cli.Info(ctx, client.InfoOptions{}); err == nil {
		in := info.Info
		d.memoryLimit, d.cpuCFS, d.pidsLimit, d.swapLimit, d.ncpu = in.MemoryLimit, in.CPUCfsQuota, in.PidsLimit, in.SwapLimit, in.NCPU
	}
	d.starts = startSlots(d.ncpu)
	daemons[host] = d
	return d, nil
}

// refuseDisk records the daemon's refusal of a disk quota.
func (d *daemonConn) refuseDisk(why string) {
	d.diskWhy.Store(&why)
	d.diskRefused.Store(true)
}

// diskRefusal is the daemon's words when it refused a disk quota.
func (d *daemonConn) diskRefusal() string {
	if p := d.diskWhy.Load(); p != nil {
		return *p
	}
	return ""
}

// startSlots sizes the bound on container creates and starts at once.
// dockerd runs each start (runc, the mounts, the network namespace)
// under locks of its own and containerd's, on the daemon host's CPUs:
// past a few starts per CPU more of them at once only queue there, while
// every waiting request holds a connection and the clients' time-outs
// run. So berth lets through four per CPU of the daemon's host, at least
// eight; the rest wait here, in order.
func startSlots(ncpu int) chan struct{} {
	return make(chan struct{}, max(8, 4*ncpu))
}

// acquire waits for a start slot; release gives it back.
func (d *daemonConn) acquire(ctx context.Context) error {
	if d.starts == nil {
		return nil
	}
	select {
	case d.starts <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *daemonConn) release() {
	if d.starts != nil {
		<-d.starts
	}
}
