package kubernetes

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/a55dbaac/berth/backend"
)

// cleaned records the cluster namespaces (API server + namespace) whose
// leftovers this berth process already swept: the crash sweep runs once
// per namespace per process, not on every environment creation.
var (
	cleanedMu sync.Mutex
	cleaned   = map[string]bool{}
)

// sweepTimeout bounds the crash sweep at backend construction.
const sweepTimeout = 20 * time.Second

// cleanUpOnce removes, the first time this process works in a namespace,
// what crashed berths left there: running pods whose creator and holders
// are all dead (a throwaway one is removed with its network policy, a
// persistent one loses only its pod, its volume claim is kept), and
// throwaway pods that ended more than twice the idle lifetime ago.
func (b *Backend) cleanUpOnce(ctx context.Context, lifetimeSeconds int) {
	id := b.c.host + "|" + b.c.namespace
	cleanedMu.Lock()
	defer cleanedMu.Unlock()
	if cleaned[id] {
		return
	}
	cleaned[id] = true
	ctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	lifetime := time.Duration(max(60, lifetimeSeconds)) * time.Second
	removed, err := sweep(ctx, b.c, 2*lifetime, false)
	if err != nil {
		b.log.Warn("kubernetes: cleaning up after crashed berths failed", "namespace", b.c.namespace, "err", err)
	}
	if len(removed) > 0 {
		b.log.Info("kubernetes: cleaned up after crashed berths", "namespace", b.c.namespace, "environments", removed)
	}
}

// sweep removes the pods of dead berths (running or not), and pods that
// ended more than maxAge ago; with claimsToo (berth env prune) also the
// volume claims and network policies of persistent environments whose pod
// has been gone for more than maxAge. It returns the keys it removed.
func sweep(ctx context.Context, c *cluster, maxAge time.Duration, claimsToo bool) ([]string, error) {
	pods, err := c.api.pods(c.namespace).List(ctx, metav1.ListOptions{LabelSelector: allSelector})
	if err != nil {
		return nil, c.wrap(err, "list berth's pods in namespace %s", c.namespace)
	}
	now := time.Now()
	var removed []string
	var errs []error
	live := map[string]bool{}       // LabelEnv values of pods kept
	liveMember := map[string]bool{} // LabelPoolMember values of pods kept
	for i := range pods.Items {
		p := &pods.Items[i]
		ended := p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
		remove := p.DeletionTimestamp == nil && (orphaned(p) || ended && now.Sub(endedAt(p)) >= maxAge ||
			claimsToo && pooled(p)) // berth env prune: every unclaimed pooled pod (a live pool refills)
		if !remove {
			live[p.Labels[LabelEnv]] = true
			liveMember[p.Labels[LabelPoolMember]] = true
			continue
		}
		if err := removePod(ctx, c, p); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, p.Annotations[AnnKey])
	}
	// What a removed throwaway environment leaves: its network policy.
	pols, err := c.api.networkPolicies(c.namespace).List(ctx, metav1.ListOptions{LabelSelector: allSelector})
	if err != nil {
		if !apierrors.IsForbidden(err) { // docker_network: true needs no policies
			errs = append(errs, c.wrap(err, "list berth's network policies"))
		}
	} else {
		for _, np := range pols.Items {
			if m := np.Labels[LabelPoolMember]; m != "" {
				// A pooled pod's policy selects it by its member label,
				// claimed or not: it goes with the pod.
				if liveMember[m] {
					continue
				}
			} else if live[np.Labels[LabelEnv]] || np.Labels[LabelPersistent] == "1" && !claimsToo {
				continue
			}
			err := c.api.networkPolicies(c.namespace).Delete(ctx, np.Name, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, c.wrap(err, "delete network policy %s", np.Name))
			}
		}
	}
	if claimsToo {
		pvcs, err := c.api.claims(c.namespace).List(ctx, metav1.ListOptions{LabelSelector: allSelector})
		if err != nil {
			errs = append(errs, c.wrap(err, "list berth's volume claims"))
		} else {
			for _, pvc := range pvcs.Items {
				if live[pvc.Labels[LabelEnv]] || pvc.DeletionTimestamp != nil || now.Sub(releasedAt(&pvc)) < maxAge {
					continue
				}
				err := c.api.claims(c.namespace).Delete(ctx, pvc.Name, metav1.DeleteOptions{})
				if err != nil && !apierrors.IsNotFound(err) {
					errs = append(errs, c.wrap(err, "delete volume claim %s", pvc.Name))
					continue
				}
				removed = append(removed, pvc.Annotations[AnnKey])
			}
		}
	}
	// What crashed berths left of checkpoints (checkpoint.go).
	if err := sweepCheckpoints(ctx, c); err != nil {
		errs = append(errs, err)
	}
	return dedupe(removed), errors.Join(errs...)
}

// removePod deletes a pod of the sweep (this very pod: its UID is a
// precondition, so a pod a live berth just recreated is never hit).
func removePod(ctx context.Context, c *cluster, p *corev1.Pod) error {
	grace := int64(1)
	uid := p.UID
	err := c.api.pods(c.namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return c.wrap(err, "delete pod %s", p.Name)
	}
	if p.Labels[LabelPersistent] == "1" {
		markReleased(ctx, c, claimName(p.Name))
	}
	return nil
}

// markReleased notes on a volume claim when its pod went away.
func markReleased(ctx context.Context, c *cluster, claim string) {
	body := []byte(`{"metadata":{"annotations":{"` + AnnReleased + `":"` + time.Now().UTC().Format(time.RFC3339) + `"}}}`)
	_, _ = c.api.claims(c.namespace).Patch(ctx, claim, "application/merge-patch+json", body, metav1.PatchOptions{})
}

// endedAt is when a pod's container ended (else when the pod was made).
func endedAt(p *corev1.Pod) time.Time {
	t := p.CreationTimestamp.Time
	for _, cs := range p.Status.ContainerStatuses {
		if term := cs.State.Terminated; term != nil && term.FinishedAt.After(t) {
			t = term.FinishedAt.Time
		}
	}
	return t
}

// releasedAt is when a claim's pod was last removed (else when it was
// made).
func releasedAt(pvc *corev1.PersistentVolumeClaim) time.Time {
	if t, err := time.Parse(time.RFC3339, pvc.Annotations[AnnReleased]); err == nil {
		return t
	}
	return pvc.CreationTimestamp.Time
}

func dedupe(keys []string) []string {
	sort.Strings(keys)
	out := keys[:0]
	for i, k := range keys {
		if i == 0 || k != keys[i-1] {
			out = append(out, k)
		}
	}
	return out
}

// removeEnv deletes key's pods (waiting until they are gone, so nothing
// runs when it returns), with policyToo its network policy and with
// claimToo its volume claim.
func removeEnv(ctx context.Context, c *cluster, key string, policyToo, claimToo bool) error {
	sel := metav1.ListOptions{LabelSelector: selector(key)}
	pods, err := c.api.pods(c.namespace).List(ctx, sel)
	if err != nil {
		return c.wrap(err, "list the pods of %s", key)
	}
	var errs []error
	grace := int64(1)
	for _, p := range pods.Items {
		err := c.api.pods(c.namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, c.wrap(err, "delete pod %s", p.Name))
		}
		if policyToo && p.Labels[LabelPoolMember] != "" {
			// A claimed pooled pod's policy is its own (pool.go).
			err := c.api.networkPolicies(c.namespace).Delete(ctx, policyName(p.Name), metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, c.wrap(err, "delete network policy %s", policyName(p.Name)))
			}
		}
	}
	if policyToo {
		pols, err := c.api.networkPolicies(c.namespace).List(ctx, sel)
		if err != nil {
			errs = append(errs, c.wrap(err, "list the network policy of %s", key))
		} else {
			for _, np := range pols.Items {
				err := c.api.networkPolicies(c.namespace).Delete(ctx, np.Name, metav1.DeleteOptions{})
				if err != nil && !apierrors.IsNotFound(err) {
					errs = append(errs, c.wrap(err, "delete network policy %s", np.Name))
				}
			}
		}
	}
	if claimToo {
		pvcs, err := c.api.claims(c.namespace).List(ctx, sel)
		if err != nil {
			errs = append(errs, c.wrap(err, "list the volume claim of %s", key))
		} else {
			for _, pvc := range pvcs.Items {
				err := c.api.claims(c.namespace).Delete(ctx, pvc.Name, metav1.DeleteOptions{})
				if err != nil && !apierrors.IsNotFound(err) {
					errs = append(errs, c.wrap(err, "delete volume claim %s", pvc.Name))
				}
			}
		}
	}
	for _, p := range pods.Items {
		if err := waitPodGone(ctx, c, &p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// waitPodGone polls until the pod with p's UID is gone (pods terminate in
// about a second with berth's grace period).
func waitPodGone(ctx context.Context, c *cluster, p *corev1.Pod) error {
	delay := 50 * time.Millisecond
	for {
		cur, err := c.api.pods(c.namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && cur.UID != p.UID {
			return nil
		}
		if err != nil {
			return c.wrap(err, "get pod %s", p.Name)
		}
		select {
		case <-ctx.Done():
			return c.wrap(ctx.Err(), "wait for pod %s to terminate", p.Name)
		case <-time.After(delay):
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// envAdmin lists, removes and prunes berth's environments for `berth env`,
// in the cluster and namespace the options name.
type envAdmin struct{}

func adminCluster(opts backend.Options) (*cluster, error) {
	s, err := readSettings(opts)
	if err != nil {
		return nil, err
	}
	return connect(s, opts.Getenv)
}

// List returns one entry per environment (none when no cluster is
// configured): its pod (state: the pod's phase,
// lower case), or, for a persistent environment without a pod, its volume
// claim (state "stopped").
func (envAdmin) List(ctx context.Context, opts backend.Options) ([]backend.EnvInfo, error) {
	c, err := adminCluster(opts)
	if errors.Is(err, ErrNoCluster) {
		return nil, nil // nothing configured: nothing kept
	}
	if err != nil {
		return nil, err
	}
	pods, err := c.api.pods(c.namespace).List(ctx, metav1.ListOptions{LabelSelector: allSelector})
	if err != nil {
		return nil, c.wrap(err, "list berth's pods in namespace %s", c.namespace)
	}
	var out []backend.EnvInfo
	seen := map[string]bool{}
	for _, p := range pods.Items {
		state := string(p.Status.Phase)
		if p.DeletionTimestamp != nil {
			state = "Terminating"
		}
		image := ""
		if len(p.Spec.Containers) > 0 {
			image = p.Spec.Containers[0].Image
		}
		seen[p.Labels[LabelEnv]] = true
		e := backend.EnvInfo{
			Backend: Name, Key: p.Annotations[AnnKey], State: lower(state), ID: c.namespace + "/" + p.Name,
			Image: image, Created: p.CreationTimestamp.Time, Persistent: p.Labels[LabelPersistent] == "1",
		}
		if pooled(&p) {
			e.Key, e.Pool = "", p.Labels[LabelPool]
		}
		out = append(out, e)
	}
	pvcs, err := c.api.claims(c.namespace).List(ctx, metav1.ListOptions{LabelSelector: allSelector})
	if err != nil {
		return nil, c.wrap(err, "list berth's volume claims in namespace %s", c.namespace)
	}
	for _, pvc := range pvcs.Items {
		if seen[pvc.Labels[LabelEnv]] {
			continue
		}
		out = append(out, backend.EnvInfo{
			Backend: Name, Key: pvc.Annotations[AnnKey], State: "stopped", ID: c.namespace + "/" + pvc.Name,
			Created: pvc.CreationTimestamp.Time, Persistent: true,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// Remove deletes key's environment: its pod, network policy and volume
// claim. A key with nothing is not an error.
func (envAdmin) Remove(ctx context.Context, opts backend.Options, key string) error {
	c, err := adminCluster(opts)
	if err != nil {
		return err
	}
	return removeEnv(ctx, c, key, true, true)
}

// Prune removes pods of dead berths, pods that ended more than maxAge ago,
// every unclaimed pooled pod, and the volume claims of persistent
// environments whose pod has been gone for more than maxAge, and returns
// their keys ("" for a pooled pod).
func (envAdmin) Prune(ctx context.Context, opts backend.Options, maxAge time.Duration) ([]string, error) {
	c, err := adminCluster(opts)
	if errors.Is(err, ErrNoCluster) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return sweep(ctx, c, maxAge, true)
}
