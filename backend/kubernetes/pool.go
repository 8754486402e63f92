package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/a55dbaac/berth/backend"
)

// Warm pools (terminal.warm_pool, backend.Pooler).
//
// A pooled pod is made as any other of its shape — the same image,
// resources, security context, volumes, node selector, tolerations and
// runtime class — before its key is known: it is named
// berth-pool-<shape>-<random>, labelled berth/role=pool and LabelPool
// (the shape) and LabelPoolMember (its random part) instead of LabelEnv,
// and annotated with the owner mark of the berth that made it, so the
// crash sweep removes what a dead berth pooled. With docker_network false
// a deny-all NetworkPolicy of its own (named after the pod, as a fresh
// pod's is) selects it by LabelPoolMember, before the pod exists and for
// as long as it lives. The pod is ready when its container runs and a
// spare exec (spare.go) waits in it, as New leaves a fresh one.
//
// A claim is one merge patch of the pod, with its UID as precondition:
// LabelEnv, the key (AnnKey) and the claimant's settings hash (AnnConfig),
// role sandbox. Labels and annotations of a pod can change, so a claimed
// pod is listed, removed (berth env rm) and swept as the key's. Its name
// cannot: the backend follows the pod by the name it has (PodName), and
// a pod that must be replaced later is replaced by a fresh one of the
// key's own name. The spare becomes the claimant's shell, with its
// working directory and variables (SessionEnv: docker_env,
// env_passthrough, docker_forward_env of the claimant, over the shell's
// stdin); a claimed pod is never pooled again.
const (
	// LabelPool is on a pod a warm pool made: the shape it was made for.
	LabelPool = "berth/pool"
	// LabelPoolMember is on a pod a warm pool made, and on the deny-all
	// policy that selects it: the random part of its name.
	LabelPoolMember = "berth/pool-member"
	poolRole        = "pool"
	poolPrefix      = "berth-pool-"
)

// pooler is the backend's Registration.Pool.
type pooler struct{}

var _ backend.Pooler = pooler{}

// Shape is the hash of the pod's settings without its key, with the
// cluster and namespace. A persistent environment is not pooled: its
// files are its key's volume claim.
func (pooler) Shape(_ context.Context, opts backend.Options) (string, error) {
	s, c, err := poolSettings(opts)
	if err != nil {
		return "", err
	}
	return shapeOf(s, c), nil
}

// poolSettings are the settings and cluster of opts, for a pool.
func poolSettings(opts backend.Options) (*settings, *cluster, error) {
	if opts.Config.ContainerPersistent {
		return nil, nil, fmt.Errorf("kubernetes: a persistent environment (container_persistent) is made with its key's volume claim, which no pod made before its key can mount: %w", backend.ErrUnsupported)
	}
	s, err := readSettings(opts)
	if err != nil {
		return nil, nil, err
	}
	c, err := connect(s, opts.Getenv)
	if err != nil {
		return nil, nil, err
	}
	return s, c, nil
}

// shapeOf hashes what of s a pod is made from, without its key, and where.
func shapeOf(s *settings, c *cluster) string {
	k := *s
	k.Key = ""
	b, _ := json.Marshal(struct {
		Settings  *settings `json:"settings"`
		Host      string    `json:"host"`
		Namespace string    `json:"namespace"`
	}{&k, c.host, c.namespace})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

// Room is what the namespace's ResourceQuotas leave for pods of the
// shape, less one: a task that finds the pool empty can still start a
// pod of its own. -1 when no quota limits them, or berth may not read the
// quotas (then the API server's refusal of a create says it).
func (pooler) Room(ctx context.Context, opts backend.Options) (int, error) {
	s, c, err := poolSettings(opts)
	if err != nil {
		return 0, err
	}
	qs, err := c.api.resourceQuotas(c.namespace).List(ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
		return -1, nil
	}
	if err != nil {
		return 0, c.wrap(err, "list the resource quotas of namespace %s", c.namespace)
	}
	room := quotaRoom(qs.Items, s.resources())
	if room < 0 {
		return -1, nil
	}
	return max(room-1, 0), nil
}

// quotaRoom is how many more pods with the requests and limits of res the
// quotas admit, -1 when none limits them.
func quotaRoom(quotas []corev1.ResourceQuota, res corev1.ResourceRequirements) int {
	need := corev1.ResourceList{corev1.ResourcePods: *newQuantity(1), "count/pods": *newQuantity(1)}
	for r, q := range res.Requests {
		need["requests."+r] = q
		need[r] = q // cpu, memory, ephemeral-storage count requests
	}
	for r, q := range res.Limits {
		need["limits."+r] = q
	}
	room := -1
	for _, quota := range quotas {
		for r, hard := range quota.Status.Hard {
			per, ok := need[r]
			if !ok || per.IsZero() {
				continue
			}
			used := quota.Status.Used[r]
			free := hard.MilliValue() - used.MilliValue()
			n := 0
			if free > 0 {
				n = int(min(free/per.MilliValue(), math.MaxInt32))
			}
			if room < 0 || n < room {
				room = n
			}
		}
	}
	return room
}

// Make creates one pooled pod, waits until it runs and its spare is open.
func (pooler) Make(ctx context.Context, opts backend.Options) (backend.Pooled, error) {
	return makeMember(ctx, opts, currentOwner())
}

// makeMember is Make with the owner mark the pod carries (a test stands
// in for a berth that has died with another).
func makeMember(ctx context.Context, opts backend.Options, owner string) (*member, error) {
	s, c, err := poolSettings(opts)
	if err != nil {
		return nil, err
	}
	shape := shapeOf(s, c)
	s.Key, s.SessionEnv = "", map[string]string{}
	nonce := newNonce()
	name := poolPrefix + shape[:16] + "-" + nonce
	b := &Backend{set: s, c: c, log: opts.Log().With("backend", Name, "pool", shape[:12]), nonce: newNonce()}
	b.setPod(name)
	b.cleanUpOnce(ctx, opts.Config.LifetimeSeconds)
	ctx, cancel := context.WithTimeout(ctx, s.StartTimeout)
	defer cancel()

	m := &member{b: b, shape: shape}
	fail := func(err error) (*member, error) {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer dcancel()
		_ = m.remove(dctx)
		return nil, err
	}
	pods := c.api.pods(c.namespace)
	if !s.Network {
		pol := &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{
				Name:   policyName(name),
				Labels: map[string]string{LabelManaged: managedBy, LabelRole: "deny-all", LabelPersistent: "0", LabelPool: shape, LabelPoolMember: nonce},
			},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelManaged: managedBy, LabelPoolMember: nonce}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			},
		}
		if _, err := c.api.networkPolicies(c.namespace).Create(ctx, pol, metav1.CreateOptions{}); err != nil {
			return fail(c.wrap(err, "create network policy %s (docker_network: false)", pol.Name))
		}
	}
	pod := b.podObject()
	pod.Name = name
	delete(pod.Labels, LabelEnv)
	pod.Labels[LabelRole] = poolRole
	pod.Labels[LabelPool] = shape
	pod.Labels[LabelPoolMember] = nonce
	delete(pod.Annotations, AnnKey)
	delete(pod.Annotations, AnnOwner)
	if owner != "" {
		pod.Annotations[AnnOwner] = owner
	}
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return fail(b.createErr(err))
	}
	m.uid = created.UID
	ready, err := b.waitReady(ctx, created)
	if err != nil {
		return fail(err)
	}
	b.checkLimits(ready)
	b.uid = ready.UID
	b.refill()
	b.awaitSpare(ctx)
	if ctx.Err() != nil {
		return fail(fmt.Errorf("kubernetes: pooled pod %s: its first exec did not open: %w", name, ctx.Err()))
	}
	b.log.Debug("kubernetes: pooled pod made", "pod", name)
	return m, nil
}

// member is one pooled pod.
type member struct {
	b     *Backend
	shape string
	uid   types.UID
}

func (m *member) ID() string { return m.b.c.namespace + "/" + m.b.PodName() }

// Claim binds the pod to opts.Key (see the comment at the top) and returns
// its backend with the claimant's settings.
func (m *member) Claim(ctx context.Context, opts backend.Options) (backend.Backend, error) {
	b := m.b
	fail := func(err error) (backend.Backend, error) {
		_ = m.Discard(context.WithoutCancel(ctx))
		return nil, err
	}
	s, err := readSettings(opts)
	if err != nil {
		return fail(err)
	}
	if sh := shapeOf(s, b.c); sh != m.shape {
		return fail(fmt.Errorf("kubernetes: pooled pod %s is of shape %s, the claim's settings of %s", b.PodName(), m.shape[:12], sh[:12]))
	}
	patch := map[string]any{"metadata": map[string]any{
		"uid":         m.uid,
		"labels":      map[string]any{LabelEnv: envHash(s.Key), LabelRole: "sandbox"},
		"annotations": map[string]any{AnnKey: s.Key, AnnConfig: s.hash},
	}}
	body, _ := json.Marshal(patch)
	p, err := b.c.api.pods(b.c.namespace).Patch(ctx, b.PodName(), types.MergePatchType, body, metav1.PatchOptions{})
	if err != nil {
		return fail(b.c.wrap(err, "claim pooled pod %s for %s", b.PodName(), s.Key))
	}
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return fail(fmt.Errorf("kubernetes: pooled pod %s is no longer running (%s)", b.PodName(), p.Status.Phase))
	}
	b.mu.Lock()
	b.set = s
	b.log = opts.Log().With("backend", Name, "key", s.Key)
	b.mu.Unlock()
	b.log.Debug("kubernetes: claimed a pooled pod", "pod", b.PodName())
	return b, nil
}

// Discard removes the unclaimed pod and its network policy.
func (m *member) Discard(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, closeTimeout)
		defer cancel()
	}
	return m.remove(ctx)
}

// remove deletes what makeMember made (the pod when it exists: its UID is
// a precondition once known).
func (m *member) remove(ctx context.Context) error {
	b := m.b
	b.mu.Lock()
	b.closed = true
	b.dropSpare()
	b.mu.Unlock()
	name := b.PodName()
	var errs []error
	grace := int64(1)
	opts := metav1.DeleteOptions{GracePeriodSeconds: &grace}
	if m.uid != "" {
		uid := m.uid
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	err := b.c.api.pods(b.c.namespace).Delete(ctx, name, opts)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		errs = append(errs, b.c.wrap(err, "delete pooled pod %s", name))
	}
	if !b.set.Network {
		err := b.c.api.networkPolicies(b.c.namespace).Delete(ctx, policyName(name), metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, b.c.wrap(err, "delete network policy %s", policyName(name)))
		}
	}
	return errors.Join(errs...)
}

// findClaimed is a running pooled pod claimed for the backend's key, nil
// when there is none.
func (b *Backend) findClaimed(ctx context.Context) *corev1.Pod {
	if b.set.Persistent {
		return nil // never pooled
	}
	list, err := b.c.api.pods(b.c.namespace).List(ctx, metav1.ListOptions{LabelSelector: selector(b.set.Key) + "," + LabelPoolMember})
	if err != nil {
		return nil
	}
	for i := range list.Items {
		p := &list.Items[i]
		if p.Annotations[AnnKey] == b.set.Key && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && running(p) {
			return p
		}
	}
	return nil
}

// pooled reports whether p is an unclaimed pooled pod.
func pooled(p *corev1.Pod) bool {
	return p.Labels[LabelRole] == poolRole && strings.HasPrefix(p.Name, poolPrefix)
}

func newQuantity(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.DecimalSI) }
