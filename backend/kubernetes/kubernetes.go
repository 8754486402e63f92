// Package kubernetes is the backend that runs each environment in one pod
// of a Kubernetes cluster, through client-go (never kubectl).
//
// One pod per environment key, named from the key (PodName) in the
// namespace kubernetes_namespace (else the kubeconfig context's), labelled
// app.kubernetes.io/managed-by=berth and berth/env=<hash of the key>, and
// annotated with the key and with the owner mark of the berth process that
// created it (internal/procmark). Its one container runs `sleep infinity`
// in kubernetes_image with container_cpu, container_memory and
// container_disk as equal requests and limits (cpu, memory,
// ephemeral-storage), hardened as the docker backend's containers are:
// every capability dropped (a root user keeps CHOWN, DAC_OVERRIDE, FOWNER,
// SETGID and SETUID, as docker's), no privilege escalation, the runtime's
// default seccomp profile, no service account token unless
// kubernetes_service_account names one, restartPolicy Never, and the
// pod's PID limit is the kubelet's (podPidsLimit; berth doctor reports it
// when it may read it). kubernetes_run_as_user runs it as another uid
// (then runAsNonRoot). The pause process is PID 1 of the pod's shared
// process namespace and reaps orphans, as docker's init does.
//
// Every process is one pods/exec stream (WebSocket v5.channel.k8s.io,
// SPDY when the server cannot upgrade) whose stdin and output stay
// attached, so the session's persistent shell answers a command without a
// new exec; timeouts run the session's kill script in a second exec. The
// exit status travels on the exec's stderr from a small /bin/sh wrapper
// (see wrapper), because the stream itself reports it only once every
// descendant has closed the output. Files go through the shell's stdin
// (the session's and the file tools' own way), never a command line;
// variables to forward (docker_env, env_passthrough, docker_forward_env)
// reach the session over the shell's stdin too (SessionEnv), never the
// pod's spec.
//
// With container_persistent a PersistentVolumeClaim per environment
// (kubernetes_storage_class, kubernetes_volume_size) holds /root and
// /workspace; closing the environment deletes the pod and keeps the claim,
// and the next berth for the key finds it by its name and labels and
// mounts it again. With docker_network false a deny-all NetworkPolicy
// selects the pod, which only an enforcing network plugin makes real.
//
// A pod deleted, evicted or failed from outside is replaced on the next
// Start and Recreated reports it (with a claim, the files are kept); an
// exec stream that breaks (the API server restarted) ends the process
// with an error, and the session starts a new shell with its state
// restored; Start rides out an API server that is briefly away. A pod
// that cannot start fails with the reason (an image that cannot be
// pulled names the image) and is removed.
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/a55dbaac/berth/backend"
)

// Name is the backend's registered name.
const Name = "kubernetes"

func init() {
	backend.Register(backend.Registration{
		Name:        Name,
		Description: "one hardened pod per environment in a Kubernetes cluster, one exec stream per shell",
		New: func(ctx context.Context, opts backend.Options) (backend.Backend, error) {
			return New(ctx, opts)
		},
		Doctor:      Doctor,
		Envs:        envAdmin{},
		Keys:        configKeys,
		Pool:        pooler{},
		Checkpoints: checkpointAdmin{},
	})
}

// ErrClosed is returned by Start after Close.
var ErrClosed = errors.New("kubernetes: backend closed")

// Backend is one environment: a pod (created or reattached by New) and the
// processes started in it. It is safe for concurrent use.
type Backend struct {
	set   *settings
	c     *cluster
	log   *slog.Logger
	nonce string // random part of this Backend's holder annotation
	// pod is the name of the environment's pod: PodName of its key, or
	// the name of the pooled pod it was claimed from (pool.go).
	pod atomic.Value

	mu sync.Mutex
	// protocol forces one exec transport ("" = WebSocket with the SPDY
	// fallback); tests set it with setProtocol.
	protocol  string
	uid       types.UID // the current pod's
	closed    bool
	recreated backend.Recreation
	held      bool // this Backend's holder annotation is on the pod
	// The spare exec (spare.go): ready, or being started (closed when
	// done), and the pod it runs in.
	spare        *process
	sparePending chan struct{}
	spareUID     types.UID
	// restoring is the checkpoint New is making the environment's claim
	// from (checkpoint.go), while it does.
	restoring *restoreSource
}

// Interface checks.
var (
	_ backend.Backend      = (*Backend)(nil)
	_ backend.Recreator    = (*Backend)(nil)
	_ backend.SessionEnver = (*Backend)(nil)
	_ backend.Capable      = (*Backend)(nil)
)

// Capabilities reports IsolationImage: the pod has nothing of any host mounted
// (berth mounts only its own volumes: an emptyDir, a claim, /dev/shm); and
// how its files are checkpointed (checkpoint.go).
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{Isolation: backend.IsolationImage, Checkpoint: checkpointHow(b.set)}
}

// New loads the client configuration, sweeps what crashed berths left in
// the namespace (once per process), and finds the key's pod — reattaching
// to it — or creates it, waiting until its container runs and a first
// exec stream (the spare, see spare.go) is open in it. With opts.From the
// environment is new and starts with the checkpoint's files (whatever the
// key had is replaced; checkpoint.go).
//
// A cluster that cannot be reached gives a *backend.UnreachableError; an
// image that cannot be pulled an *ImageError.
func New(ctx context.Context, opts backend.Options) (*Backend, error) {
	s, err := readSettings(opts)
	if err != nil {
		return nil, err
	}
	c, err := connect(s, opts.Getenv)
	if err != nil {
		return nil, err
	}
	b := &Backend{set: s, c: c, log: opts.Log().With("backend", Name, "key", s.Key), nonce: newNonce()}
	b.setPod(PodName(s.Key))
	b.cleanUpOnce(ctx, opts.Config.LifetimeSeconds)
	uid, err := b.ensureFrom(ctx, opts.From)
	if err != nil {
		return nil, err
	}
	b.uid = uid
	// The environment is ready once an exec stream runs in the pod: the
	// session's shell starts on that spare without another round trip.
	b.refill()
	b.awaitSpare(ctx)
	return b, nil
}

// Name returns "kubernetes".
func (b *Backend) Name() string { return Name }

// Namespace returns the namespace of the environment's pod.
func (b *Backend) Namespace() string { return b.c.namespace }

// PodName returns the name of the environment's pod.
func (b *Backend) PodName() string { return b.pod.Load().(string) }

// setPod records the name of the environment's pod.
func (b *Backend) setPod(name string) { b.pod.Store(name) }

// PodUID returns the UID of the environment's current pod.
func (b *Backend) PodUID() types.UID {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.uid
}

// SessionEnv returns the variables to export into the session (docker_env,
// env_passthrough, docker_forward_env). They may be secrets: berth sends
// them over the shell's stdin, never in the pod's spec or an exec's
// command.
func (b *Backend) SessionEnv() map[string]string {
	out := make(map[string]string, len(b.set.SessionEnv))
	for k, v := range b.set.SessionEnv {
		out[k] = v
	}
	return out
}

// Recreated reports, once, whether the pod had to be replaced since the
// last call because it was deleted, evicted or ended from outside.
func (b *Backend) Recreated() bool { return b.recreated.Take() }

// apiRetry bounds how long Start waits for an API server that does not
// answer (a restart takes seconds) before it reports the cluster
// unreachable.
const apiRetry = 45 * time.Second

// Start runs spec in the pod as one exec with stdin and output attached.
// A pod that went away or ended is first replaced (Recreated then reports
// it); an API server that does not answer is waited for, up to apiRetry.
func (b *Backend) Start(ctx context.Context, spec backend.ProcSpec) (backend.Process, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("kubernetes: start: empty argv")
	}
	deadline := time.Now().Add(apiRetry)
	delay := 100 * time.Millisecond
	for {
		p, err := b.start(ctx, spec)
		if err == nil || !isConnErr(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return p, err
		}
		b.log.Debug("kubernetes: the API server does not answer; retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

func (b *Backend) start(ctx context.Context, spec backend.ProcSpec) (backend.Process, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, ErrClosed
	}
	uid := b.uid
	b.mu.Unlock()
	name := b.PodName()

	if ok, err := b.alive(ctx, uid); err != nil {
		return nil, err
	} else if !ok {
		if uid, err = b.recover(ctx, uid); err != nil {
			return nil, err
		}
		name = b.PodName()
	}
	p, err := b.startProcess(ctx, name, uid, spec)
	if err == nil {
		return p, nil
	}
	if isConnErr(err) {
		return nil, b.c.wrap(err, "exec %s in pod %s", spec.Argv[0], name)
	}
	// The pod may have gone or ended between the look and the exec. When
	// the error says the container no longer runs, the kubelet reports the
	// pod's new state within a few seconds (its relist period is 1 s):
	// wait for it rather than fail the command.
	wait := containerStopped(err)
	for i := 0; ; i++ {
		ok, aerr := b.alive(ctx, uid)
		if aerr == nil && !ok {
			if _, err := b.recover(ctx, uid); err != nil {
				return nil, err
			}
			if p, err = b.startProcess(ctx, b.PodName(), b.PodUID(), spec); err == nil {
				return p, nil
			}
			break
		}
		if aerr != nil || !wait || i >= 50 || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil, b.c.wrap(err, "exec %s in pod %s", spec.Argv[0], name)
}

// containerStopped reports an exec error that says the container (or the
// pod) no longer runs, as the API server, the kubelet and the runtimes word
// it.
func containerStopped(err error) bool {
	m := strings.ToLower(err.Error())
	for _, s := range []string{"container_exited", "not running", "container not found", "stopped state",
		"completed pod", "is terminated", "no such container", "failed to exec in container", "failed to create exec"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// alive reports whether the pod with the given UID still runs.
func (b *Backend) alive(ctx context.Context, uid types.UID) (bool, error) {
	p, err := b.c.api.pods(b.c.namespace).Get(ctx, b.PodName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, b.c.wrap(err, "get pod %s", b.PodName())
	}
	return p.UID == uid && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && running(p), nil
}

// running reports whether the pod's container runs.
func running(p *corev1.Pod) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == containerName {
			return cs.State.Running != nil
		}
	}
	return false
}

// recover replaces the pod, found gone or ended while its UID was uid, and
// returns the UID of the running one. When another caller recovered it
// meanwhile, that pod is used. Recreated then reports it.
func (b *Backend) recover(ctx context.Context, uid types.UID) (types.UID, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return "", ErrClosed
	}
	if b.uid == uid {
		b.log.Warn("kubernetes: the pod is gone or ended; replacing it", "pod", b.PodName())
		b.held = false
		b.dropSpare()
		b.setPod(PodName(b.set.Key)) // a claimed pooled pod is replaced by the key's own
		nuid, err := b.ensure(ctx)
		if err != nil {
			return "", fmt.Errorf("kubernetes: replace pod %s: %w", b.PodName(), err)
		}
		b.uid = nuid
		b.recreated.Set()
	}
	return b.uid, nil
}

// closeTimeout bounds Close when its context has no deadline.
const closeTimeout = 60 * time.Second

// Close ends the environment: the pod is deleted (its processes get the
// kubelet's SIGTERM at once and SIGKILL a second later; Close does not
// wait for that), with its network policy; a persistent environment's
// volume claim is kept (noted with the time, for berth env prune), and the
// next berth for the key waits for the old pod to be gone before it mounts
// the claim again. When this berth only holds a pod another berth created,
// the pod is deleted all the same, as the docker backend stops a
// container it reattached to. It is idempotent.
func (b *Backend) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.dropSpare()
	b.mu.Unlock()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, closeTimeout)
		defer cancel()
	}
	name := b.PodName()
	grace := int64(1)
	var errs []error
	err := b.c.api.pods(b.c.namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, b.c.wrap(err, "delete pod %s", name))
	}
	if !b.set.Network {
		err := b.c.api.networkPolicies(b.c.namespace).Delete(ctx, policyName(name), metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, b.c.wrap(err, "delete network policy %s", policyName(name)))
		}
	}
	if b.set.Persistent {
		markReleased(ctx, b.c, claimName(name))
	}
	return errors.Join(errs...)
}

// checkLimits warns when the pod that runs does not carry the limits berth
// asked for (a LimitRange or an admission webhook changed them).
func (b *Backend) checkLimits(p *corev1.Pod) {
	want := b.set.resources().Limits
	for _, c := range p.Spec.Containers {
		if c.Name != containerName {
			continue
		}
		var diff []string
		for r, q := range want {
			if got, ok := c.Resources.Limits[r]; !ok || got.Cmp(q) != 0 {
				diff = append(diff, fmt.Sprintf("%s %s (asked %s)", r, got.String(), q.String()))
			}
		}
		if len(diff) > 0 {
			b.log.Warn("kubernetes: the cluster changed the pod's limits (a LimitRange or an admission webhook)",
				"pod", p.Name, "limits", strings.Join(diff, ", "))
		}
	}
}
