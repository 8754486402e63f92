package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"

	"github.com/a55dbaac/berth/backend"
)

// permission is one RBAC verb on one resource that the backend uses.
type permission struct {
	group, resource, subresource, verb string
	why                                string
	when                               func(*settings) bool // nil: always needed
	// forkOnly: only berth fork and checkpoints need it. Its lack does
	// not make the backend unusable: doctor names it on a line of its own.
	forkOnly bool
}

// permissions lists what berth does in its namespace, and why.
var permissions = []permission{
	{resource: "pods", verb: "create", why: "create the environment's pod"},
	{resource: "pods", verb: "get", why: "find and check the pod"},
	{resource: "pods", verb: "list", why: "find berth's pods (crash sweep, berth env)"},
	{resource: "pods", verb: "watch", why: "wait for the pod to start or go away"},
	{resource: "pods", verb: "delete", why: "remove the pod on close"},
	{resource: "pods", verb: "patch", why: "mark a reattached pod as held"},
	{resource: "pods", subresource: "exec", verb: "create", why: "run the shell (pods/exec)"},
	{resource: "persistentvolumeclaims", verb: "create", why: "container_persistent: create the volume claim",
		when: func(s *settings) bool { return s.Persistent }},
	{resource: "persistentvolumeclaims", verb: "get", why: "container_persistent: find the volume claim",
		when: func(s *settings) bool { return s.Persistent }},
	{resource: "persistentvolumeclaims", verb: "list", why: "berth env ls/prune: list volume claims"},
	{resource: "persistentvolumeclaims", verb: "patch", why: "container_persistent: note when the pod went",
		when: func(s *settings) bool { return s.Persistent }},
	{resource: "persistentvolumeclaims", verb: "delete", why: "berth env rm/prune: remove the volume claim"},
	{group: "networking.k8s.io", resource: "networkpolicies", verb: "create", why: "docker_network: false: create the deny-all policy",
		when: func(s *settings) bool { return !s.Network }},
	{group: "networking.k8s.io", resource: "networkpolicies", verb: "list", why: "find the policy to remove on close, and those left behind",
		when: func(s *settings) bool { return !s.Network }},
	{group: "networking.k8s.io", resource: "networkpolicies", verb: "delete", why: "remove the policy on close",
		when: func(s *settings) bool { return !s.Network }},
	// berth fork and checkpoints: a claim to copy into, made and marked
	// complete (with container_persistent, the verbs above are these).
	{resource: "persistentvolumeclaims", verb: "create", why: "berth fork: create the checkpoint's volume claim",
		when: func(s *settings) bool { return !s.Persistent }, forkOnly: true},
	{resource: "persistentvolumeclaims", verb: "get", why: "berth fork: wait for the checkpoint's claim",
		when: func(s *settings) bool { return !s.Persistent }, forkOnly: true},
	{resource: "persistentvolumeclaims", verb: "patch", why: "berth fork: mark the checkpoint complete",
		when: func(s *settings) bool { return !s.Persistent }, forkOnly: true},
}

// Doctor reports whether the kubernetes backend can work here: which
// client configuration it uses, whether the cluster answers (and its
// version), which of the permissions berth needs in the namespace are
// missing, the runtime classes, the storage class for container_persistent,
// the nodes' limits that berth cannot set itself (the kubelet's pod PID
// limit, ephemeral-storage enforcement), and that a deny-all NetworkPolicy
// (docker_network: false) needs a network plugin that enforces it.
func Doctor(ctx context.Context, opts backend.Options) backend.Fingerprint {
	s, err := readSettings(opts)
	if err != nil {
		return backend.Fingerprint{Summary: "configuration", Details: []string{err.Error()}, Fix: "fix the terminal.kubernetes_* settings"}
	}
	c, err := connect(s, opts.Getenv)
	var none *noClusterError
	switch {
	case errors.As(err, &none):
		// One line for what is missing, one for what to do.
		return backend.Fingerprint{Summary: "no cluster configured: " + none.reason(),
			Fix: "set KUBECONFIG (or terminal." + keyKubeconfig + ") to a kubeconfig file, or run berth in a pod"}
	case err != nil:
		return backend.Fingerprint{Summary: "the client configuration does not load", Details: []string{err.Error()},
			Fix: "fix the kubeconfig named above, or set KUBECONFIG (or terminal." + keyKubeconfig + ") to another"}
	}
	var ver version.Info
	raw, err := c.api.serverVersion(ctx)
	if err == nil {
		err = json.Unmarshal(raw, &ver)
	}
	if err != nil {
		return backend.Fingerprint{
			Summary: "the cluster at " + c.host + " does not answer",
			Details: []string{"using " + c.source, c.wrap(err, "server version").Error()},
			Fix:     "check that the cluster is up and that the kubeconfig's server address is reachable from here",
		}
	}
	fp := backend.Fingerprint{Usable: true,
		Summary: fmt.Sprintf("Kubernetes %s at %s, namespace %s (%s)", ver.GitVersion, c.host, c.namespace, c.source)}
	add := func(format string, args ...any) { fp.Details = append(fp.Details, fmt.Sprintf(format, args...)) }

	if _, err := c.api.namespaces().Get(ctx, c.namespace, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		fp.Usable = false
		add("namespace %s: does not exist", c.namespace)
		fp.Fix = "create the namespace (kubectl create namespace " + c.namespace + ") or set terminal." + keyNamespace
	}

	var missing, forkMissing []string
	for _, p := range permissions {
		if p.when != nil && !p.when(s) {
			continue
		}
		ok, err := allowed(ctx, c, p)
		switch {
		case err != nil:
			add("permission check %s: %v", p.describe(), err)
		case ok:
		case p.forkOnly:
			forkMissing = append(forkMissing, p.describe()+" ("+p.why+")")
		default:
			missing = append(missing, p.describe()+" ("+p.why+")")
		}
	}
	if len(missing) > 0 {
		fp.Usable = false
		add("missing permissions in namespace %s: %s", c.namespace, strings.Join(missing, "; "))
		if fp.Fix == "" {
			fp.Fix = "grant them with a Role and RoleBinding (see backend/kubernetes/README.md)"
		}
	} else {
		add("permissions: every verb berth needs in namespace %s is allowed", c.namespace)
	}
	if len(forkMissing) > 0 {
		add("berth fork and checkpoints will fail: missing in namespace %s: %s", c.namespace, strings.Join(forkMissing, "; "))
	}

	rcs, err := c.api.runtimeClasses().List(ctx, metav1.ListOptions{})
	switch {
	case err != nil:
		add("runtime classes: cannot list them (%v)", shortErr(err))
	default:
		var names []string
		found := false
		for _, rc := range rcs.Items {
			names = append(names, rc.Name+" (handler "+rc.Handler+")")
			found = found || rc.Name == s.RuntimeClass
		}
		sort.Strings(names)
		if len(names) == 0 {
			add("runtime classes: none (pods use the nodes' default runtime)")
		} else {
			add("runtime classes: %s", strings.Join(names, ", "))
		}
		if s.RuntimeClass != "" && !found {
			fp.Usable = false
			add("runtime class %q (terminal.%s): not in the cluster", s.RuntimeClass, keyRuntimeClass)
			if fp.Fix == "" {
				fp.Fix = "install it (gVisor, Kata Containers) or set terminal." + keyRuntimeClass + " to one listed"
			}
		}
	}

	if s.Persistent {
		add("%s", storageClassFact(ctx, c, s))
	}
	nodeFacts(ctx, c, add)
	if !s.Network {
		add("docker_network: false: berth creates a deny-all NetworkPolicy for each pod; only a network plugin that enforces NetworkPolicy (Calico, Cilium, Antrea, ...) makes it so — berth cannot tell whether this cluster's does")
	}
	add("image %s: pulled by the nodes (berth cannot check a registry from here)", s.Image)
	return fp
}

func (p permission) describe() string {
	r := p.resource
	if p.subresource != "" {
		r += "/" + p.subresource
	}
	if p.group != "" {
		r += "." + p.group
	}
	return p.verb + " " + r
}

// allowed asks the API server whether this user may do p in the namespace
// (SelfSubjectAccessReview, which every authenticated user may create).
func allowed(ctx context.Context, c *cluster, p permission) (bool, error) {
	r, err := c.api.selfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: c.namespace, Verb: p.verb, Group: p.group, Resource: p.resource, Subresource: p.subresource,
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return r.Status.Allowed, nil
}

// storageClassFact says which class a persistent environment's claim gets.
func storageClassFact(ctx context.Context, c *cluster, s *settings) string {
	scs, err := c.api.storageClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "storage class for container_persistent: cannot list storage classes (" + shortErr(err) + ")"
	}
	def := ""
	for _, sc := range scs.Items {
		if sc.Name == s.StorageClass && s.StorageClass != "" {
			return fmt.Sprintf("storage class %s (provisioner %s): present; claims of %s", sc.Name, sc.Provisioner, s.VolumeSize.String())
		}
		if sc.Annotations["storageclass.kubernetes.io/is-default-class"] == "true" {
			def = sc.Name + " (provisioner " + sc.Provisioner + ")"
		}
	}
	if s.StorageClass != "" {
		return fmt.Sprintf("storage class %s (terminal.%s): NOT in the cluster: the volume claim of a persistent environment would stay Pending", s.StorageClass, keyStorageClass)
	}
	if def == "" {
		return "storage class for container_persistent: the cluster has no default class: set terminal." + keyStorageClass + " or the volume claim stays Pending"
	}
	return "storage class for container_persistent: the default, " + def + "; claims of " + s.VolumeSize.String()
}

// nodeFacts reports what berth cannot set on a pod and the nodes decide:
// the kubelet's pod PID limit, and whether ephemeral-storage limits
// (container_disk) are enforced.
func nodeFacts(ctx context.Context, c *cluster, add func(string, ...any)) {
	nodes, err := c.api.nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		add("nodes: cannot list them (%s): berth cannot tell the pod PID limit (the kubelet's podPidsLimit) or whether container_disk is enforced", shortErr(err))
		return
	}
	var noEphemeral []string
	pids := map[string][]string{}
	for _, n := range nodes.Items {
		if _, ok := n.Status.Allocatable[corev1.ResourceEphemeralStorage]; !ok {
			noEphemeral = append(noEphemeral, n.Name)
		}
		l := podPidsLimit(ctx, c, n.Name)
		pids[l] = append(pids[l], n.Name)
	}
	add("nodes: %d", len(nodes.Items))
	if len(noEphemeral) > 0 {
		add("container_disk: NOT enforced on %s (no allocatable ephemeral-storage)", strings.Join(noEphemeral, ", "))
	} else {
		add("container_disk: enforced by the kubelet as an ephemeral-storage limit (a pod past it is evicted, not refused a write)")
	}
	keys := make([]string, 0, len(pids))
	for k := range pids {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		add("pod PID limit (the kubelet's podPidsLimit; berth cannot set it per pod): %s on %s", k, strings.Join(pids[k], ", "))
	}
}

// podPidsLimit reads a node's kubelet configuration through the API
// server's node proxy (configz), which needs get nodes/proxy.
func podPidsLimit(ctx context.Context, c *cluster, node string) string {
	raw, err := c.api.kubeletConfigz(ctx, node)
	if err != nil {
		return "unknown (" + shortErr(err) + ")"
	}
	var cz struct {
		KubeletConfig struct {
			PodPidsLimit *int64 `json:"podPidsLimit"`
		} `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(raw, &cz); err != nil {
		return "unknown (configz: " + err.Error() + ")"
	}
	if l := cz.KubeletConfig.PodPidsLimit; l != nil && *l > 0 {
		return fmt.Sprintf("%d", *l)
	}
	return "NONE (a fork bomb can exhaust the node's PIDs)"
}

func shortErr(err error) string {
	if apierrors.IsForbidden(err) {
		return "forbidden"
	}
	m := err.Error()
	if len(m) > 120 {
		m = m[:120] + "..."
	}
	return m
}
