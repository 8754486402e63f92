package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// Labels berth puts on every object it creates (pod, volume claim,
// network policy), and annotations for what labels cannot hold.
const (
	LabelManaged    = "app.kubernetes.io/managed-by" // always "berth"
	LabelEnv        = "berth/env"                    // envHash of the environment key
	LabelPersistent = "berth/persistent"             // "1" when container_persistent was on
	LabelRole       = "berth/role"                   // "sandbox", "home", "deny-all", "checkpoint" or "checkpoint-io"

	AnnKey    = "berth/key"    // the environment key, as given
	AnnOwner  = "berth/owner"  // procmark of the berth that created the pod
	AnnConfig = "berth/config" // hash of the settings that shape the pod
	// AnnHolderPrefix + a random nonce: the procmark of another berth that
	// reattached to the pod and uses it (see hold).
	AnnHolderPrefix = "berth/holder-"
	// AnnReleased is on a persistent environment's volume claim: when its
	// pod was last removed (RFC 3339); berth env prune ages it from there.
	AnnReleased = "berth/released-at"

	managedBy = "berth"
)

// containerName is the name of the pod's one container.
const containerName = "main"

// capsKept are the only capabilities a root process in the pod keeps:
// those the docker backend keeps, which package managers need (chown,
// setuid to a build user) and Pod Security's "baseline" level allows.
var capsKept = []corev1.Capability{"CHOWN", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID"}

// shmSize is the size of /dev/shm (a memory-backed emptyDir), as docker's.
var shmSize = resource.MustParse("1Gi")

func boolLabel(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// labels are the labels of every object of the environment.
func (s *settings) labels(role string) map[string]string {
	return map[string]string{
		LabelManaged:    managedBy,
		LabelEnv:        envHash(s.Key),
		LabelPersistent: boolLabel(s.Persistent),
		LabelRole:       role,
	}
}

// selector selects the objects of the environment of key (not its
// checkpoints, which outlive it, nor their helper pods).
func selector(key string) string {
	return LabelManaged + "=" + managedBy + "," + LabelEnv + "=" + envHash(key) + "," + notCheckpoint
}

// allSelector selects every environment's objects berth made (not the
// checkpoints, see checkpoint.go).
const allSelector = LabelManaged + "=" + managedBy + "," + notCheckpoint

// notCheckpoint leaves out checkpoints' objects and helper pods.
const notCheckpoint = "!" + LabelCheckpoint

// resources are the container's requests and limits, equal (a pod whose
// cpu and memory are both set is then in the Guaranteed QoS class).
func (s *settings) resources() corev1.ResourceRequirements {
	rl := corev1.ResourceList{}
	if s.CPU > 0 {
		rl[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(s.CPU*1000+0.5), resource.DecimalSI)
	}
	if s.MemoryMB > 0 {
		rl[corev1.ResourceMemory] = *resource.NewQuantity(int64(s.MemoryMB)<<20, resource.BinarySI)
	}
	if s.DiskMB > 0 {
		rl[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(int64(s.DiskMB)<<20, resource.BinarySI)
	}
	if len(rl) == 0 {
		return corev1.ResourceRequirements{}
	}
	return corev1.ResourceRequirements{Requests: rl.DeepCopy(), Limits: rl}
}

// podObject is the environment's pod: one container running `sleep
// infinity` in the image, hardened as the docker backend's containers are.
func (b *Backend) podObject() *corev1.Pod {
	s := b.set
	name := PodName(s.Key)
	f, t := false, true
	grace := int64(2)
	c := corev1.Container{
		Name:            containerName,
		Image:           s.Image,
		ImagePullPolicy: corev1.PullPolicy(s.PullPolicy),
		Command:         []string{"sleep", "infinity"},
		WorkingDir:      s.Workdir,
		Resources:       s.resources(),
		SecurityContext: &corev1.SecurityContext{
			Privileged:               &f,
			AllowPrivilegeEscalation: &f,
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
		VolumeMounts: []corev1.VolumeMount{{Name: "shm", MountPath: "/dev/shm"}},
	}
	podSC := &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	switch {
	case s.RunAsUser > 0:
		uid := int64(s.RunAsUser)
		podSC.RunAsUser, podSC.RunAsGroup, podSC.FSGroup, podSC.RunAsNonRoot = &uid, &uid, &uid, &t
		c.Env = append(c.Env, corev1.EnvVar{Name: "HOME", Value: homeDir})
	case s.RunAsUser == 0:
		root := int64(0)
		podSC.RunAsUser = &root
		c.SecurityContext.Capabilities.Add = capsKept
	default:
		c.SecurityContext.Capabilities.Add = capsKept
	}
	volumes := []corev1.Volume{{Name: "shm", VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &shmSize}}}}
	switch {
	case s.Persistent:
		volumes = append(volumes, corev1.Volume{Name: "home", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName(name)}}})
		c.VolumeMounts = append(c.VolumeMounts,
			corev1.VolumeMount{Name: "home", MountPath: homeDir, SubPath: "root"},
			corev1.VolumeMount{Name: "home", MountPath: workspaceDir, SubPath: "workspace"})
	default:
		volumes = append(volumes, corev1.Volume{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "workspace", MountPath: workspaceDir})
		if s.RunAsUser > 0 {
			// The image's /root belongs to root: give the user a home.
			volumes = append(volumes, corev1.Volume{Name: "home", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "home", MountPath: homeDir})
		}
	}
	ann := map[string]string{AnnKey: s.Key, AnnConfig: s.hash}
	if o := currentOwner(); o != "" {
		ann[AnnOwner] = o
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   b.c.namespace,
			Labels:      s.labels("sandbox"),
			Annotations: ann,
		},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{c},
			Volumes:                       volumes,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			// The sandbox's pause process is then PID 1 and reaps the
			// orphans the session's kill leaves, as docker's init does.
			ShareProcessNamespace:        &t,
			AutomountServiceAccountToken: &f,
			EnableServiceLinks:           &f,
			SecurityContext:              podSC,
			NodeSelector:                 s.NodeSelector,
			Tolerations:                  s.tolerations,
		},
	}
	if s.ServiceAccount != "" {
		pod.Spec.ServiceAccountName = s.ServiceAccount
		pod.Spec.AutomountServiceAccountToken = &t
	}
	if s.RuntimeClass != "" {
		rc := s.RuntimeClass
		pod.Spec.RuntimeClassName = &rc
	}
	return pod
}

// claimObject is the volume claim of a persistent environment.
func (b *Backend) claimObject() *corev1.PersistentVolumeClaim {
	s := b.set
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:        claimName(PodName(s.Key)),
			Namespace:   b.c.namespace,
			Labels:      s.labels("home"),
			Annotations: map[string]string{AnnKey: s.Key},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: s.VolumeSize}},
		},
	}
	if s.StorageClass != "" {
		sc := s.StorageClass
		pvc.Spec.StorageClassName = &sc
	}
	b.claimSource(pvc)
	return pvc
}

// policyObject denies the environment's pod every connection in and out
// (docker_network: false). Only a network plugin that enforces
// NetworkPolicy makes it so; berth doctor says as much.
func (b *Backend) policyObject() *networkingv1.NetworkPolicy {
	s := b.set
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name:        policyName(PodName(s.Key)),
			Namespace:   b.c.namespace,
			Labels:      s.labels("deny-all"),
			Annotations: map[string]string{AnnKey: s.Key},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelManaged: managedBy, LabelEnv: envHash(s.Key)}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
}

// ensure finds the environment's pod and makes sure it runs, or creates it
// (with its volume claim and network policy), and returns its UID. A pod
// whose settings differ, or that ended (deleted, evicted, failed), is
// replaced; its volume claim is kept. Called with b.mu held or before b is
// shared.
func (b *Backend) ensure(ctx context.Context) (types.UID, error) {
	ctx, cancel := context.WithTimeout(ctx, b.set.StartTimeout)
	defer cancel()
	pods := b.c.api.pods(b.c.namespace)
	name := PodName(b.set.Key)
	for attempt := 0; ; attempt++ {
		if attempt > 20 {
			return "", fmt.Errorf("kubernetes: pod %s keeps changing under berth (deleted or replaced by another process); giving up", name)
		}
		pod, err := pods.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			// A pooled pod another berth claimed for the key keeps its
			// pool name (pool.go): it is the key's environment.
			if claimed := b.findClaimed(ctx); claimed != nil {
				b.setPod(claimed.Name)
				b.hold(ctx, claimed)
				ready, err := b.waitReady(ctx, claimed)
				if err == nil {
					return ready.UID, nil
				}
				b.setPod(name)
				if !errors.Is(err, errPodGone) {
					return "", err
				}
				continue
			}
		}
		switch {
		case apierrors.IsNotFound(err):
			pod, err = b.create(ctx)
			if apierrors.IsAlreadyExists(err) {
				continue // another berth created it a moment ago
			}
			if err != nil {
				return "", err
			}
			b.hold(ctx, pod)
		case err != nil:
			return "", b.startErr(ctx, b.c.wrap(err, "get pod %s", name))
		case pod.DeletionTimestamp != nil:
			if err := b.waitGone(ctx, pod); err != nil {
				return "", err
			}
			continue
		case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
			b.log.Warn("kubernetes: the pod ended; replacing it", "pod", name, "phase", pod.Status.Phase,
				"reason", pod.Status.Reason, "message", pod.Status.Message)
			if err := b.deletePod(ctx, pod, 0); err != nil {
				return "", err
			}
			continue
		case pod.Annotations[AnnConfig] != b.set.hash:
			b.log.Info("kubernetes: replacing the pod, whose settings changed", "pod", name)
			if err := b.deletePod(ctx, pod, 1); err != nil {
				return "", err
			}
			continue
		default:
			b.hold(ctx, pod)
		}
		ready, err := b.waitReady(ctx, pod)
		if errors.Is(err, errPodGone) {
			continue
		}
		if err != nil {
			return "", err
		}
		b.checkLimits(ready)
		return ready.UID, nil
	}
}

// startErr turns a context error in ensure into one that says what was
// waited for.
func (b *Backend) startErr(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("kubernetes: pod %s did not start within terminal.%s (%v): %w",
			PodName(b.set.Key), keyStartTimeout, b.set.StartTimeout, err)
	}
	return err
}

// create makes the network policy (first, so the pod never runs without
// it), the volume claim when persistent (or finds the existing one), and
// the pod.
func (b *Backend) create(ctx context.Context) (*corev1.Pod, error) {
	if !b.set.Network {
		_, err := b.c.api.networkPolicies(b.c.namespace).Create(ctx, b.policyObject(), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, b.c.wrap(err, "create network policy %s (docker_network: false)", policyName(PodName(b.set.Key)))
		}
	}
	if b.set.Persistent {
		if err := b.ensureClaim(ctx); err != nil {
			return nil, err
		}
	}
	pod, err := b.c.api.pods(b.c.namespace).Create(ctx, b.podObject(), metav1.CreateOptions{})
	if err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, err
		}
		return nil, b.createErr(err)
	}
	b.log.Debug("kubernetes: pod created", "pod", pod.Name, "image", b.set.Image)
	return pod, nil
}

// createErr explains why the API server refused the pod.
func (b *Backend) createErr(err error) error {
	name := PodName(b.set.Key)
	m := err.Error()
	switch {
	case strings.Contains(m, "RuntimeClass") && apierrors.IsForbidden(err):
		return fmt.Errorf("kubernetes: create pod %s: runtime class %q: %w (berth doctor lists the cluster's runtime classes; set terminal.%s to one of them, or to \"\")",
			name, b.set.RuntimeClass, err, keyRuntimeClass)
	case strings.Contains(m, "violates PodSecurity"):
		return fmt.Errorf("kubernetes: create pod %s: namespace %s enforces a Pod Security level berth's pod does not meet (%w); "+
			"for \"restricted\", set terminal.%s to a non-root uid the image can run as", name, b.c.namespace, err, keyRunAsUser)
	case strings.Contains(m, "exceeded quota"):
		return fmt.Errorf("kubernetes: create pod %s: a ResourceQuota of namespace %s refuses it: %w "+
			"(lower container_cpu, container_memory or container_disk, or remove unused environments: berth env ls)", name, b.c.namespace, err)
	}
	return b.c.wrap(err, "create pod %s", name)
}

// ensureClaim creates the volume claim of a persistent environment, or
// finds it (reattach: the files are kept).
func (b *Backend) ensureClaim(ctx context.Context) error {
	claims := b.c.api.claims(b.c.namespace)
	name := claimName(PodName(b.set.Key))
	pvc, err := claims.Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		if pvc.DeletionTimestamp != nil {
			return fmt.Errorf("kubernetes: volume claim %s is being deleted (berth env rm?); try again once it is gone", name)
		}
		if want := b.set.StorageClass; want != "" && pvc.Spec.StorageClassName != nil && *pvc.Spec.StorageClassName != want {
			b.log.Warn("kubernetes: the environment's volume was made with another storage class; it is kept as it is",
				"claim", name, "class", *pvc.Spec.StorageClassName, "kubernetes_storage_class", want)
		}
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return b.c.wrap(err, "get volume claim %s", name)
	}
	_, err = claims.Create(ctx, b.claimObject(), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return b.c.wrap(err, "create volume claim %s (%s, storage class %s)", name, b.set.VolumeSize.String(), orDefault(b.set.StorageClass))
	}
	return nil
}

func orDefault(class string) string {
	if class == "" {
		return "the cluster's default"
	}
	return class
}

// errPodGone says the pod went away while berth waited for it.
var errPodGone = errors.New("kubernetes: the pod went away while starting")

// waitReady watches pod until its container runs. It fails at once, with
// the pod removed, on what will not heal by waiting (an image that cannot
// be pulled, a container that cannot be created or ended); on the start
// timeout it says what the pod was waiting for (unschedulable, an unbound
// volume claim) and removes it.
func (b *Backend) waitReady(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	pods := b.c.api.pods(b.c.namespace)
	last := pod
	for {
		if done, err := b.podReady(last); done || err != nil {
			if err != nil {
				b.discard(last)
			}
			return last, err
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", pod.Name).String(),
			ResourceVersion: last.ResourceVersion,
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil, b.notReady(last, ctx.Err())
			}
			if isConnErr(err) {
				return nil, b.c.wrap(err, "watch pod %s", pod.Name)
			}
			// A too old resource version: read it afresh.
			if last, err = pods.Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
				if apierrors.IsNotFound(err) {
					return nil, errPodGone
				}
				return nil, b.c.wrap(err, "get pod %s", pod.Name)
			}
			continue
		}
		last, err = b.follow(ctx, w, last)
		w.Stop()
		if err != nil {
			return nil, err
		}
	}
}

// follow reads watch events until the pod is ready, fails, goes away, or
// the watch ends (returned with the last state seen, to watch again).
func (b *Backend) follow(ctx context.Context, w watch.Interface, last *corev1.Pod) (*corev1.Pod, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, b.notReady(last, ctx.Err())
		case ev, ok := <-w.ResultChan():
			if !ok {
				return last, nil
			}
			switch ev.Type {
			case watch.Deleted:
				return nil, errPodGone
			case watch.Error:
				return last, nil
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || p.UID != last.UID {
				if ok {
					return nil, errPodGone
				}
				continue
			}
			last = p
			done, err := b.podReady(p)
			if err != nil {
				b.discard(p)
				return nil, err
			}
			if done {
				return p, nil
			}
		}
	}
}

// podReady says whether the pod's container runs, or why it never will.
func (b *Backend) podReady(p *corev1.Pod) (bool, error) {
	if p.DeletionTimestamp != nil {
		return false, errPodGone
	}
	switch p.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed:
		return false, fmt.Errorf("kubernetes: pod %s ended while starting (%s: %s %s)", p.Name, p.Status.Phase, p.Status.Reason, p.Status.Message)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != containerName {
			continue
		}
		if cs.State.Running != nil {
			return true, nil
		}
		if t := cs.State.Terminated; t != nil {
			return false, fmt.Errorf("kubernetes: the container of pod %s ended at start (exit %d, %s: %s); the image must have /bin/sh and sleep (berth runs `sleep infinity` in it)",
				p.Name, t.ExitCode, t.Reason, t.Message)
		}
		if wt := cs.State.Waiting; wt != nil {
			switch wt.Reason {
			case "ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName", "ImageInspectError":
				return false, &ImageError{Image: b.set.Image, Reason: wt.Reason, Message: wt.Message, Pod: p.Name}
			case "CreateContainerConfigError", "CreateContainerError", "RunContainerError", "StartError", "PreCreateHookError", "PreStartHookError":
				return false, fmt.Errorf("kubernetes: the container of pod %s cannot start (%s): %s", p.Name, wt.Reason, wt.Message)
			}
		}
	}
	return false, nil
}

// ImageError says the pod's image cannot be had.
type ImageError struct {
	Image   string
	Reason  string // the kubelet's: ErrImagePull, ImagePullBackOff, ErrImageNeverPull, InvalidImageName
	Message string
	Pod     string
}

func (e *ImageError) Error() string {
	return fmt.Sprintf("kubernetes: image %q cannot be pulled for pod %s (%s: %s); check terminal.%s, "+
		"and that the cluster's nodes can pull it (a registry they reach, an imagePullSecret of the service account, "+
		"or the image imported into their container runtime)", e.Image, e.Pod, e.Reason, e.Message, keyImage)
}

// notReady explains a start timeout by what the pod still waited for, and
// removes the pod.
func (b *Backend) notReady(p *corev1.Pod, cause error) error {
	b.discard(p)
	why := "it was still " + strings.ToLower(string(p.Status.Phase))
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			why = "it could not be scheduled: " + c.Message
			if strings.Contains(c.Message, "PersistentVolumeClaim") {
				why += fmt.Sprintf(" (is there a provisioner for storage class %s? berth doctor checks)", orDefault(b.set.StorageClass))
			}
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			why = "its container was waiting: " + w.Reason
			if w.Message != "" {
				why += ": " + w.Message
			}
		}
	}
	return fmt.Errorf("kubernetes: pod %s did not start within terminal.%s (%v): %s: %w",
		p.Name, keyStartTimeout, b.set.StartTimeout, why, cause)
}

// discard removes a pod that will not start, so nothing is left behind.
func (b *Backend) discard(p *corev1.Pod) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	zero := int64(0)
	uid := p.UID
	err := b.c.api.pods(b.c.namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		b.log.Warn("kubernetes: removing a pod that did not start failed", "pod", p.Name, "err", err)
	}
}

// deletePod deletes pod (this very one: its UID is a precondition) with
// the given grace and waits until it is gone.
func (b *Backend) deletePod(ctx context.Context, p *corev1.Pod, grace int64) error {
	uid := p.UID
	err := b.c.api.pods(b.c.namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return b.c.wrap(err, "delete pod %s", p.Name)
	}
	return b.waitGone(ctx, p)
}

// waitGone waits until the pod with p's UID no longer exists.
func (b *Backend) waitGone(ctx context.Context, p *corev1.Pod) error {
	pods := b.c.api.pods(b.c.namespace)
	for {
		cur, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && cur.UID != p.UID {
			return nil
		}
		if err != nil {
			return b.startErr(ctx, b.c.wrap(err, "get pod %s", p.Name))
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", p.Name).String(),
			ResourceVersion: cur.ResourceVersion,
		})
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("kubernetes: pod %s is still terminating: %w", p.Name, ctx.Err())
			}
			if isConnErr(err) || apierrors.IsForbidden(err) {
				return b.c.wrap(err, "watch pod %s", p.Name)
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		gone := false
	events:
		for {
			select {
			case <-ctx.Done():
				w.Stop()
				return fmt.Errorf("kubernetes: pod %s is still terminating: %w", p.Name, ctx.Err())
			case ev, ok := <-w.ResultChan():
				if !ok || ev.Type == watch.Error {
					break events
				}
				if ev.Type == watch.Deleted {
					gone = true
					break events
				}
			}
		}
		w.Stop()
		if gone {
			return nil
		}
	}
}
