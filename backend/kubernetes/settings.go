package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/a55dbaac/berth/backend"
)

// settings is everything the backend takes from the configuration, checked
// once. The fields tagged for JSON shape the pod: their hash is stored on
// it (AnnConfig), so a later berth whose settings differ replaces the pod
// (the volume of a persistent environment is kept).
type settings struct {
	Key            string            `json:"key"`
	Image          string            `json:"image"`
	PullPolicy     string            `json:"pull_policy,omitempty"`
	Workdir        string            `json:"workdir"`
	CPU            float64           `json:"cpu"`
	MemoryMB       int               `json:"memory_mb"`
	DiskMB         int               `json:"disk_mb"`
	Network        bool              `json:"network"`
	Persistent     bool              `json:"persistent"`
	ServiceAccount string            `json:"service_account,omitempty"`
	NodeSelector   map[string]string `json:"node_selector,omitempty"`
	Tolerations    []string          `json:"tolerations,omitempty"`
	RuntimeClass   string            `json:"runtime_class,omitempty"`
	RunAsUser      int               `json:"run_as_user"`

	// Not part of the pod's shape, so left out of its hash: a change of
	// them needs no new pod, and SessionEnv holds secrets (forwarded
	// variables, docker_env values) that must not reach a hash published
	// on the pod (R8); they go to the shell over its stdin.
	Namespace    string            `json:"-"` // "" until the client config resolved it
	Kubeconfig   string            `json:"-"`
	Context      string            `json:"-"`
	StorageClass string            `json:"-"`
	VolumeSize   resource.Quantity `json:"-"`
	StartTimeout time.Duration     `json:"-"`
	SessionEnv   map[string]string `json:"-"`

	tolerations []corev1.Toleration
	hash        string
}

// homeDir is the pods' home and default working directory; workspaceDir is
// the other directory a persistent environment keeps.
const (
	homeDir      = "/root"
	workspaceDir = "/workspace"
)

// readSettings reads and checks the backend's settings. The ranges of the
// kubernetes keys are checked where they are set (file, variable, flag);
// what is left is what only makes sense together.
func readSettings(opts backend.Options) (*settings, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	c := opts.Config
	s := &settings{
		Key:            opts.Key,
		Image:          strings.TrimSpace(c.String(keyImage)),
		PullPolicy:     c.String(keyPullPolicy),
		Workdir:        backend.ContainerDir(c.Cwd, homeDir, homeDir),
		CPU:            c.ContainerCPU,
		MemoryMB:       c.ContainerMemory,
		DiskMB:         c.ContainerDisk,
		Network:        c.DockerNetwork,
		Persistent:     c.ContainerPersistent,
		ServiceAccount: c.String(keyServiceAccount),
		NodeSelector:   c.Map(keyNodeSelector),
		Tolerations:    c.List(keyTolerations),
		RuntimeClass:   c.String(keyRuntimeClass),
		RunAsUser:      c.Int(keyRunAsUser),
		Namespace:      c.String(keyNamespace),
		Kubeconfig:     c.String(keyKubeconfig),
		Context:        c.String(keyContext),
		StorageClass:   c.String(keyStorageClass),
		StartTimeout:   time.Duration(c.Int(keyStartTimeout)) * time.Second,
		SessionEnv:     map[string]string{},
	}
	if s.Key == "" {
		s.Key = "default"
	}
	if s.Image == "" {
		return nil, fmt.Errorf("kubernetes: terminal.%s is empty: set it to an image the cluster's nodes can pull (e.g. python:3.12-slim)", keyImage)
	}
	if s.CPU < 0 {
		return nil, fmt.Errorf("kubernetes: terminal.container_cpu: bad value %v (want >= 0 cores; 0 = no cpu request or limit)", s.CPU)
	}
	if s.MemoryMB < 0 {
		return nil, fmt.Errorf("kubernetes: terminal.container_memory: bad value %d (want >= 0 MB; 0 = no memory request or limit)", s.MemoryMB)
	}
	if s.DiskMB < 0 {
		return nil, fmt.Errorf("kubernetes: terminal.container_disk: bad value %d (want >= 0 MB; 0 = no ephemeral-storage request or limit)", s.DiskMB)
	}
	if s.StartTimeout <= 0 {
		s.StartTimeout = DefaultStartTimeout * time.Second
	}
	size := c.String(keyVolumeSize)
	if size == "" {
		size = DefaultVolumeSize
	}
	q, err := resource.ParseQuantity(size)
	if err != nil || q.Sign() <= 0 {
		return nil, fmt.Errorf("kubernetes: terminal.%s: bad size %q (write it as Kubernetes does, e.g. 10Gi)", keyVolumeSize, size)
	}
	s.VolumeSize = q
	sort.Strings(s.Tolerations)
	for _, t := range s.Tolerations {
		tol, err := parseToleration(t)
		if err != nil {
			return nil, fmt.Errorf("kubernetes: terminal.%s: %w", keyTolerations, err)
		}
		s.tolerations = append(s.tolerations, tol)
	}
	if len(s.NodeSelector) == 0 {
		s.NodeSelector = nil
	}
	if len(s.Tolerations) == 0 {
		s.Tolerations = nil
	}
	for k, v := range c.Map(keyDockerEnv) {
		s.SessionEnv[k] = v
	}
	for _, list := range [][]string{c.EnvPassthrough, c.DockerForwardEnv} {
		for _, n := range list {
			if v := getenv(n); v != "" {
				s.SessionEnv[n] = v
			}
		}
	}
	b, _ := json.Marshal(s)
	sum := sha256.Sum256(b)
	s.hash = hex.EncodeToString(sum[:8])
	return s, nil
}

// parseToleration reads a toleration as kubectl taint writes a taint:
// "key=value:Effect", "key:Effect", "key=value" or "key" (any effect), and
// "*" (every taint).
func parseToleration(s string) (corev1.Toleration, error) {
	bad := func(why string) (corev1.Toleration, error) {
		return corev1.Toleration{}, fmt.Errorf(`toleration %q: %s (want "key=value:Effect", "key:Effect", "key" or "*"; Effect is NoSchedule, PreferNoSchedule or NoExecute)`, s, why)
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return bad("empty")
	}
	if s == "*" {
		return corev1.Toleration{Operator: corev1.TolerationOpExists}, nil
	}
	t := corev1.Toleration{Operator: corev1.TolerationOpExists}
	kv, effect, hasEffect := strings.Cut(s, ":")
	if hasEffect {
		switch e := corev1.TaintEffect(effect); e {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
			t.Effect = e
		default:
			return bad("unknown effect " + effect)
		}
	}
	k, v, hasValue := strings.Cut(kv, "=")
	if k == "" {
		return bad("empty key")
	}
	t.Key = k
	if hasValue {
		t.Operator, t.Value = corev1.TolerationOpEqual, v
	}
	return t, nil
}

// envHash is the value of LabelEnv for an environment key: label values
// are short and plain, keys are anything.
func envHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:10])
}

// PodName returns the name of the pod of an environment key: "berth-", a
// readable form of the key, and a short hash of it, so distinct keys never
// collide. It is a valid DNS label (at most 63 characters), so it also
// serves as the pod's hostname.
func PodName(key string) string {
	sum := sha256.Sum256([]byte(key))
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(key) {
		if b.Len() >= 40 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	readable := strings.TrimSuffix(b.String(), "-")
	if readable != "" {
		readable += "-"
	}
	return "berth-" + readable + hex.EncodeToString(sum[:4])
}

// claimName and policyName name the environment's other objects.
func claimName(pod string) string  { return pod + "-home" }
func policyName(pod string) string { return pod + "-deny-all" }
