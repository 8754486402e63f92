package floor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/kubernetes"
	"github.com/a55dbaac/berth/bench"
)

// kubeClient is a core/v1 REST client over the cluster berth uses; it
// knows pods only (client-go's clientset stays out of the engine, as the
// binary budget requires).
type kubeClient struct {
	cfg    *rest.Config
	core   *rest.RESTClient
	params runtime.ParameterCodec
	ns     string
}

// kubernetesFloors talk to the cluster berth talks to (its kubeconfig,
// context and namespace), in berth's pod and with its image: one
// pods/exec stream kept open (WebSocket, as berth's first choice), and a
// bare pod created, running and exec'd into.
func kubernetesFloors(ctx context.Context, b *kubernetes.Backend, opts backend.Options) (*Floors, error) {
	cfg, err := kubeConfig(opts)
	if err != nil {
		return nil, err
	}
	kc, err := newKubeClient(cfg, b.Namespace())
	if err != nil {
		return nil, err
	}
	pod := &corev1.Pod{}
	if err := kc.core.Get().UseProtobufAsDefault().Namespace(kc.ns).Resource("pods").Name(b.PodName()).Do(ctx).Into(pod); err != nil {
		return nil, fmt.Errorf("floor: kubernetes: read berth's pod %s/%s: %w", kc.ns, b.PodName(), err)
	}
	if len(pod.Spec.Containers) == 0 {
		return nil, fmt.Errorf("floor: kubernetes: berth's pod %s has no container", b.PodName())
	}
	main := pod.Spec.Containers[0]
	return &Floors{
		Stream:    "one pods/exec stream (sh, WebSocket) opened once, kept open",
		StreamMax: 1.5,
		BareMax:   1.2,
		Shell: func(ctx context.Context) (*bench.Shell, error) {
			return kc.execShell(ctx, b.PodName(), main.Name)
		},
		Bare:      "a bare pod of " + main.Image + " created, Running, one exec of true",
		BareStart: func(ctx context.Context) (Phases, error) { return kc.barePod(ctx, main.Image, false) },
		Ready:     "a bare pod created, Running, an exec stream of sh opened, its first answer",
		ReadyStart: func(ctx context.Context) (Phases, error) {
			return kc.barePod(ctx, main.Image, true)
		},
		Close: func() error { return nil },
	}, nil
}

// kubeConfig loads the client configuration as berth does: the
// kubernetes_kubeconfig key, else $KUBECONFIG (a list), else
// ~/.kube/config, else the in-cluster account, with kubernetes_context.
func kubeConfig(opts backend.Options) (*rest.Config, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	rules := &clientcmd.ClientConfigLoadingRules{}
	switch {
	case opts.Config.String("kubernetes_kubeconfig") != "":
		rules.ExplicitPath = expandHome(opts.Config.String("kubernetes_kubeconfig"), getenv)
	case getenv("KUBECONFIG") != "":
		for _, f := range filepath.SplitList(getenv("KUBECONFIG")) {
			if f != "" {
				rules.Precedence = append(rules.Precedence, expandHome(f, getenv))
			}
		}
	default:
		if home := getenv("HOME"); home != "" {
			rules.Precedence = []string{filepath.Join(home, ".kube", "config")}
		}
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: opts.Config.String("kubernetes_context")}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("floor: kubernetes: client configuration: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 50, 100 // as berth's
	return cfg, nil
}

func expandHome(p string, getenv func(string) string) string {
	if p == "~" || len(p) > 1 && p[:2] == "~/" {
		return filepath.Join(getenv("HOME"), p[1:])
	}
	return p
}

func newKubeClient(cfg *rest.Config, ns string) (*kubeClient, error) {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	if err := corev1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("floor: kubernetes: scheme: %w", err)
	}
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.APIPath = "/api"
	c.NegotiatedSerializer = rest.CodecFactoryForGeneratedClient(s, serializer.NewCodecFactory(s)).WithoutConversion()
	core, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("floor: kubernetes: REST client for %s: %w", cfg.Host, err)
	}
	return &kubeClient{cfg: cfg, core: core, params: runtime.NewParameterCodec(s), ns: ns}, nil
}

// exec opens a pods/exec stream of argv in container of pod; the stream
// runs until ctx ends or the process exits.
func (k *kubeClient) exec(ctx context.Context, pod, container string, argv []string, opts remotecommand.StreamOptions) error {
	req := k.core.Post().Namespace(k.ns).Resource("pods").Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: argv,
			Stdin: opts.Stdin != nil, Stdout: opts.Stdout != nil, Stderr: opts.Stderr != nil}, k.params)
	ex, err := remotecommand.NewWebSocketExecutor(k.cfg, "GET", req.URL().String())
	if err != nil {
		return fmt.Errorf("floor: kubernetes: exec transport: %w", err)
	}
	return ex.StreamWithContext(ctx, opts)
}

// execShell opens one exec stream of sh in pod and keeps it open: commands
// are written to its stdin, replies read from its stdout through a pipe
// (the transport writes from its own goroutine).
func (k *kubeClient) execShell(ctx context.Context, pod, container string) (*bench.Shell, error) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ended := make(chan error, 1)
	go func() {
		err := k.exec(sctx, pod, container, []string{"sh"}, remotecommand.StreamOptions{Stdin: inR, Stdout: outW, Stderr: io.Discard})
		if err == nil {
			err = io.EOF
		}
		outW.CloseWithError(err)
		ended <- err
	}()
	sh := bench.NewShell(inW, outR, func() error {
		inW.Close()
		cancel()
		<-ended
		return nil
	})
	if err := sh.RoundTrip(); err != nil {
		sh.Close()
		return nil, fmt.Errorf("floor: kubernetes: exec shell in %s: %w", pod, err)
	}
	return sh, nil
}

// barePod creates a pod of image (sleep infinity, nothing else), waits
// until it runs, then runs one exec of true (shell false) or opens an exec
// stream of sh and reads its first answer (shell true). The pod is deleted
// afterwards, untimed.
func (k *kubeClient) barePod(ctx context.Context, image string, shell bool) (Phases, error) {
	var nonce [4]byte
	rand.Read(nonce[:])
	name := "berth-floor-" + hex.EncodeToString(nonce[:])
	grace := int64(0)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{Label: "1"}},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{{Name: "main", Image: image, Command: []string{"sleep", "infinity"}}},
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
		},
	}
	c := newClock()
	created := &corev1.Pod{}
	err := k.core.Post().UseProtobufAsDefault().Namespace(k.ns).Resource("pods").Body(pod).Do(ctx).Into(created)
	if err != nil {
		return nil, fmt.Errorf("floor: kubernetes: create pod: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		k.core.Delete().Namespace(k.ns).Resource("pods").Name(name).Body(&metav1.DeleteOptions{GracePeriodSeconds: &grace}).Do(dctx)
	}()
	c.mark("create")
	if err := k.waitRunning(ctx, created); err != nil {
		return nil, err
	}
	c.mark("running")
	if shell {
		sh, err := k.execShell(ctx, name, "main")
		if err != nil {
			return nil, err
		}
		c.mark("exec stream, first answer")
		sh.Close()
		return c.ph, nil
	}
	if err := k.exec(ctx, name, "main", []string{"true"}, remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard}); err != nil {
		return nil, fmt.Errorf("floor: kubernetes: exec true in %s: %w", name, err)
	}
	c.mark("exec true")
	return c.ph, nil
}

// waitRunning watches pod until its container runs.
func (k *kubeClient) waitRunning(ctx context.Context, pod *corev1.Pod) error {
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	opts := &metav1.ListOptions{FieldSelector: "metadata.name=" + pod.Name, ResourceVersion: pod.ResourceVersion, Watch: true}
	w, err := k.core.Get().UseProtobufAsDefault().Namespace(k.ns).Resource("pods").VersionedParams(opts, k.params).Watch(wctx)
	if err != nil {
		return fmt.Errorf("floor: kubernetes: watch pod %s: %w", pod.Name, err)
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			return fmt.Errorf("floor: kubernetes: watch pod %s: %v", pod.Name, ev.Object)
		}
		p, ok := ev.Object.(*corev1.Pod)
		if !ok {
			continue
		}
		switch p.Status.Phase {
		case corev1.PodRunning:
			for _, cs := range p.Status.ContainerStatuses {
				if cs.State.Running != nil {
					return nil
				}
			}
		case corev1.PodFailed, corev1.PodSucceeded:
			return fmt.Errorf("floor: kubernetes: pod %s ended (%s) before it ran", pod.Name, p.Status.Phase)
		}
	}
	if err := wctx.Err(); err != nil {
		return fmt.Errorf("floor: kubernetes: pod %s not running: %w", pod.Name, err)
	}
	return errors.New("floor: kubernetes: watch of pod " + pod.Name + " ended before it ran")
}
