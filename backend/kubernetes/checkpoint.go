package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/procmark"
)

// A checkpoint of a kubernetes environment is one object that outlives
// it, in the environment's namespace:
//
//   - a CSI VolumeSnapshot of the environment's volume claim, where the
//     claim's storage class has a VolumeSnapshotClass for its driver
//     (method "snapshot");
//   - else a volume claim cloned from it (dataSource), where the class's
//     provisioner is a CSI driver that clones (method "clone"; a driver
//     that refuses is remembered for the process and the copy is used);
//   - else, and always for a throwaway pod (whose files are in no claim),
//     a new volume claim that /root and /workspace are copied into through
//     exec streams (method "copy", see copy.go).
//
// Each carries berth's labels (managed-by, the environment key's hash,
// role "checkpoint", the object's own name under LabelCheckpoint) and
// annotations (the key, the checkpoint's name, the owner mark of the berth
// that made it, and its state: "copying" until the copy is whole, then
// "complete"). The crash sweep and berth env prune remove what a berth
// that died left "copying", with its helper pods; a complete checkpoint is
// removed only through Registration.Checkpoints, as berth's records say.
//
// A new environment made from one (Options.From) gets a volume claim
// cloned from it (dataSource: the checkpoint's claim or snapshot) when it
// is persistent and the storage allows; else its pod is started together
// with a helper that mounts the checkpoint read-only, and the files are
// copied through exec into the new pod.

// Labels and annotations of checkpoints and their helper pods.
const (
	// LabelCheckpoint is on a checkpoint's claim or snapshot and on its
	// helper pods: the name of the checkpoint's object.
	LabelCheckpoint = "berth/checkpoint"
	// AnnCheckpointName is the name the checkpoint was given (berth env
	// checkpoint KEY NAME); "" for a fork's.
	AnnCheckpointName = "berth/checkpoint-name"
	// AnnCheckpointState is "copying" while the checkpoint is taken, then
	// "complete".
	AnnCheckpointState = "berth/checkpoint-state"

	roleCheckpoint   = "checkpoint"    // a checkpoint's claim or snapshot
	roleCheckpointIO = "checkpoint-io" // a helper pod copying into or out of one

	stateCopying  = "copying"
	stateComplete = "complete"
)

// Checkpoint methods (Checkpoint.Meta["method"]).
const (
	methodSnapshot = "snapshot"
	methodClone    = "clone"
	methodCopy     = "copy"
)

// Keys of Checkpoint.Meta.
const (
	metaMethod    = "method"    // methodSnapshot, methodClone or methodCopy
	metaNamespace = "namespace" // where the object is
	metaClass     = "class"     // storage class of the claim (or of the claim the snapshot was taken of)
	metaCapacity  = "capacity"  // size of that claim: a restored claim is at least as big
	metaDriver    = "driver"    // the CSI driver (snapshot, clone)
)

// Interface checks.
var (
	_ backend.Checkpointer    = (*Backend)(nil)
	_ backend.CheckpointAdmin = checkpointAdmin{}
)

// checkpointHow is Capabilities.Checkpoint for the environment's settings.
func checkpointHow(s *settings) string {
	if s.Persistent {
		return "/root and /workspace: the volume claim snapshotted or cloned where its CSI driver can, else copied through exec into a new claim"
	}
	return "/root and /workspace copied through exec into a volume claim"
}

// checkpointLabels are the labels of a checkpoint's object (role
// roleCheckpoint) or helper pod (roleCheckpointIO).
func checkpointLabels(key, role, object string) map[string]string {
	return map[string]string{
		LabelManaged:    managedBy,
		LabelEnv:        envHash(key),
		LabelRole:       role,
		LabelCheckpoint: object,
	}
}

// checkpointAnnotations name the key, the checkpoint and the berth that
// made the object.
func checkpointAnnotations(key, name string) map[string]string {
	ann := map[string]string{AnnKey: key, AnnCheckpointName: name}
	if o := currentOwner(); o != "" {
		ann[AnnOwner] = o
	}
	return ann
}

// checkpointObjectName is a fresh name for a checkpoint's object of key:
// the key's hash (the key itself is in an annotation) and a random part,
// so that any number of checkpoints of one key, named or not, coexist.
func checkpointObjectName(key string) string {
	return "berth-ck-" + envHash(key)[:8] + "-" + newNonce()
}

// noNative remembers, for this process, the storage classes whose driver
// refused to clone or snapshot: the next checkpoint copies at once instead
// of trying again.
var noNative sync.Map // class + "|" + method -> reason

// Checkpoint copies the environment's /root and /workspace, as they are
// now, into an object that outlives the environment (see the top of this
// file for which), without stopping the pod. The name is recorded on it.
func (b *Backend) Checkpoint(ctx context.Context, name string) (backend.Checkpoint, error) {
	b.mu.Lock()
	closed, uid := b.closed, b.uid
	b.mu.Unlock()
	if closed {
		return backend.Checkpoint{}, ErrClosed
	}
	// A pod deleted or evicted from outside is replaced first, as Start
	// does (Recreated then says so): the checkpoint is of the environment
	// the next command would see.
	if ok, err := b.alive(ctx, uid); err != nil {
		return backend.Checkpoint{}, err
	} else if !ok {
		if _, err := b.recover(ctx, uid); err != nil {
			return backend.Checkpoint{}, err
		}
	}
	cp := backend.Checkpoint{Backend: Name, Key: b.set.Key, Name: name, Created: time.Now().UTC(),
		Meta: map[string]string{metaNamespace: b.c.namespace}}
	if b.set.Persistent {
		src, err := b.c.api.claims(b.c.namespace).Get(ctx, claimName(b.PodName()), metav1.GetOptions{})
		if err != nil {
			return backend.Checkpoint{}, b.c.wrap(err, "checkpoint: get volume claim %s", claimName(b.PodName()))
		}
		nat, err := b.nativeSupport(ctx, src)
		if err != nil {
			return backend.Checkpoint{}, err
		}
		done, err := b.nativeCheckpoint(ctx, &cp, src, nat)
		if err != nil || done {
			return cp, err
		}
	}
	if err := b.copyCheckpoint(ctx, &cp); err != nil {
		return backend.Checkpoint{}, err
	}
	return cp, nil
}

// copyCheckpoint takes a checkpoint by copy: a new claim (the
// environment's class and volume size), a helper pod mounting it, and
// /root and /workspace copied from the environment's pod into it. On
// failure nothing is left.
func (b *Backend) copyCheckpoint(ctx context.Context, cp *backend.Checkpoint) error {
	object := checkpointObjectName(b.set.Key)
	class, size := b.set.StorageClass, b.set.VolumeSize
	if b.set.Persistent {
		// The environment's own claim may have been made bigger, or in
		// another class, than the settings now say.
		if src, err := b.c.api.claims(b.c.namespace).Get(ctx, claimName(b.PodName()), metav1.GetOptions{}); err == nil {
			if q, ok := src.Spec.Resources.Requests[corev1.ResourceStorage]; ok && q.Cmp(size) > 0 {
				size = q
			}
			if src.Spec.StorageClassName != nil && *src.Spec.StorageClassName != "" {
				class = *src.Spec.StorageClassName
			}
		}
	}
	immediate, err := b.classBinding(ctx, class)
	if err != nil {
		return fmt.Errorf("kubernetes: checkpoint: %w", err)
	}
	pvc := b.checkpointClaimObject(object, cp.Name, class, size, nil)
	if _, err := b.c.api.claims(b.c.namespace).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		return b.c.wrap(err, "checkpoint: create volume claim %s (%s, storage class %s)", object, size.String(), orDefault(class))
	}
	ok := false
	defer func() {
		if !ok {
			b.deleteCheckpointObject(methodCopy, object)
		}
	}()
	if immediate {
		if err := b.awaitBound(ctx, object, class); err != nil {
			return fmt.Errorf("kubernetes: checkpoint: %w", err)
		}
	}
	// The archive is read out of the environment's pod while the helper
	// that mounts the claim starts.
	helper := b.helperObject(object+"-w", object, cp.Name,
		corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: object}}, false)
	defer b.removeHelper(helper.Name)
	n, err := b.copyTree(ctx, endpoint{pod: b.PodName(), base: "/"}, endpoint{pod: helper.Name, base: checkpointDir,
		ready: func(ctx context.Context) error { return b.startHelper(ctx, helper) }}, false)
	if err != nil {
		return fmt.Errorf("kubernetes: checkpoint of %s: %w", b.set.Key, err)
	}
	if err := b.markComplete(ctx, methodCopy, object, n); err != nil {
		return err
	}
	ok = true
	cp.ID, cp.Size = object, n
	cp.Meta[metaMethod] = methodCopy
	cp.Meta[metaClass] = class
	cp.Meta[metaCapacity] = size.String()
	return nil
}

// checkpointClaimObject is the claim of a checkpoint: copied into (source
// nil) or cloned from source.
func (b *Backend) checkpointClaimObject(object, name, class string, size resource.Quantity, source *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
	ann := checkpointAnnotations(b.set.Key, name)
	ann[AnnCheckpointState] = stateCopying
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:        object,
			Namespace:   b.c.namespace,
			Labels:      checkpointLabels(b.set.Key, roleCheckpoint, object),
			Annotations: ann,
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
	if class != "" {
		pvc.Spec.StorageClassName = &class
	}
	if source != nil {
		pvc.Spec.AccessModes = source.Spec.AccessModes
		pvc.Spec.VolumeMode = source.Spec.VolumeMode
		pvc.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: source.Name}
	}
	return pvc
}

// classBinding reports whether claims of class ("" = the cluster's
// default) are bound as soon as they are made (volumeBindingMode
// Immediate) rather than once a pod uses them. It fails at once, rather
// than after the start timeout, when class is "" and the cluster has no
// default class: such a claim would stay pending. A user who may not list
// classes is not stopped (false: berth does not wait for the binding).
func (b *Backend) classBinding(ctx context.Context, class string) (bool, error) {
	list, err := b.c.api.storageClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, nil
	}
	for _, sc := range list.Items {
		if class == sc.Name || class == "" && sc.Annotations["storageclass.kubernetes.io/is-default-class"] == "true" {
			return sc.VolumeBindingMode == nil || *sc.VolumeBindingMode == storagev1.VolumeBindingImmediate, nil
		}
	}
	if class == "" {
		return false, fmt.Errorf("kubernetes: the cluster has no default storage class for the volume claim; set terminal.%s to one (berth doctor lists them)", keyStorageClass)
	}
	return false, nil
}

// awaitBound waits until the claim name is bound. A pod whose claim is not
// bound yet when it is made is refused by the scheduler, and tried again
// only after a back-off of a second or more: waiting for the binding
// first (a class that binds at once: classBinding) starts the pod sooner.
func (b *Backend) awaitBound(ctx context.Context, name, class string) error {
	ctx, cancel := context.WithTimeout(ctx, b.set.StartTimeout)
	defer cancel()
	for delay := 20 * time.Millisecond; ; delay = min(2*delay, 250*time.Millisecond) {
		pvc, err := b.c.api.claims(b.c.namespace).Get(ctx, name, metav1.GetOptions{})
		if err == nil && pvc.Status.Phase == corev1.ClaimBound {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			return b.c.wrap(err, "get volume claim %s", name)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubernetes: volume claim %s was not bound within terminal.%s (%v): is there a provisioner for storage class %s? (berth doctor checks)",
				name, keyStartTimeout, b.set.StartTimeout, orDefault(class))
		case <-time.After(delay):
		}
	}
}

// markComplete records on a checkpoint's object that it is whole, with
// its size.
func (b *Backend) markComplete(ctx context.Context, method, object string, size int64) error {
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		AnnCheckpointState: stateComplete, annCheckpointSize: strconv.FormatInt(size, 10)}}})
	var err error
	if method == methodSnapshot {
		err = b.snapshots(b.c.namespace).patch(ctx, object, body)
	} else {
		_, err = b.c.api.claims(b.c.namespace).Patch(ctx, object, types.MergePatchType, body, metav1.PatchOptions{})
	}
	if err != nil {
		return b.c.wrap(err, "checkpoint: mark %s complete", object)
	}
	return nil
}

// annCheckpointSize is the checkpoint's size in bytes, as Checkpoint.Size.
const annCheckpointSize = "berth/checkpoint-size"

// deleteCheckpointObject deletes a checkpoint's claim or snapshot (on a
// failure, with a context of its own: the caller's may be done).
func (b *Backend) deleteCheckpointObject(method, object string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := deleteCheckpointObject(ctx, b.c, method, object); err != nil {
		b.log.Warn("kubernetes: removing an unfinished checkpoint failed; berth env prune removes it once this berth has ended",
			"object", object, "err", err)
	}
}

func deleteCheckpointObject(ctx context.Context, c *cluster, method, object string) error {
	var err error
	if method == methodSnapshot {
		err = snapshotClient{c: c, namespace: c.namespace}.delete(ctx, object)
	} else {
		err = c.api.claims(c.namespace).Delete(ctx, object, metav1.DeleteOptions{})
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return c.wrap(err, "delete checkpoint %s", object)
	}
	return nil
}

// ensureFrom is ensure for a new environment: with Options.From, one that
// starts with the checkpoint's files. Whatever the key had (its pod, and
// when persistent its claim) is replaced, once the checkpoint is known to
// be there. A restore that fails leaves nothing of the new environment.
func (b *Backend) ensureFrom(ctx context.Context, cp *backend.Checkpoint) (types.UID, error) {
	if cp == nil {
		return b.ensure(ctx)
	}
	src, err := b.openCheckpoint(ctx, cp)
	if err != nil {
		return "", err
	}
	if err := b.clearKey(ctx); err != nil {
		return "", err
	}
	native := b.set.Persistent && src.native(b.set.StorageClass)
	if native {
		uid, err := b.ensureRestored(ctx, src, true)
		if err != nil {
			b.removeFailed()
		}
		return uid, err
	}
	// A copy: a helper that mounts the checkpoint starts while the
	// environment's pod does; the archive is read out of the helper as
	// soon as it has started, and extracted as soon as the environment's
	// container has, while the pod's status catches up.
	cctx, cancelCopy := context.WithCancel(ctx)
	defer cancelCopy()
	helper := b.helperObject(src.object+"-r-"+newNonce()[:6], src.object, cp.Name, src.volume(), true)
	defer b.removeHelper(helper.Name)
	type copied struct {
		uid types.UID
		err error
	}
	copyDone := make(chan copied, 1)
	go func() {
		var podUID types.UID
		err := b.startHelper(cctx, helper)
		if err == nil {
			_, err = b.copyTree(cctx, endpoint{pod: helper.Name, base: checkpointDir}, endpoint{pod: PodName(b.set.Key), base: "/",
				ready: func(ctx context.Context) (err error) {
					podUID, err = b.waitStarted(ctx, PodName(b.set.Key), "")
					return err
				}}, true)
		}
		if err != nil {
			err = fmt.Errorf("kubernetes: restore checkpoint %s into %s: %w", src.object, b.set.Key, err)
		}
		copyDone <- copied{podUID, err}
	}()
	uid, err := b.ensureRestored(ctx, src, false)
	if err != nil {
		cancelCopy()
	}
	c := <-copyDone
	switch {
	case err != nil:
	case c.err != nil:
		err = c.err
	case c.uid != uid:
		err = fmt.Errorf("kubernetes: restore checkpoint %s: pod %s was replaced while the files were copied into it", src.object, PodName(b.set.Key))
	}
	if err != nil {
		b.removeFailed()
		return "", err
	}
	return uid, nil
}

// ensureRestored makes the new environment's pod, and first, when it is
// persistent, its claim — from the checkpoint when native (claimSource),
// else empty — bound (awaitClaim) before the pod is made.
func (b *Backend) ensureRestored(ctx context.Context, src *restoreSource, native bool) (types.UID, error) {
	if b.set.Persistent {
		if native {
			b.restoring = src
		}
		err := b.ensureClaim(ctx)
		b.restoring = nil
		if err == nil {
			err = b.awaitClaim(ctx)
		}
		if err != nil {
			return "", err
		}
	}
	return b.ensure(ctx)
}

// awaitClaim waits until the environment's new claim is bound, when its
// class binds claims as soon as they are made.
func (b *Backend) awaitClaim(ctx context.Context) error {
	pvc, err := b.c.api.claims(b.c.namespace).Get(ctx, claimName(PodName(b.set.Key)), metav1.GetOptions{})
	if err != nil {
		return b.c.wrap(err, "get volume claim %s", claimName(PodName(b.set.Key)))
	}
	class := ""
	if pvc.Spec.StorageClassName != nil {
		class = *pvc.Spec.StorageClassName
	}
	if immediate, err := b.classBinding(ctx, class); err != nil || !immediate {
		return err
	}
	return b.awaitBound(ctx, pvc.Name, class)
}

// removeFailed removes what a restore that failed made of the key.
func (b *Backend) removeFailed() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := removeEnv(ctx, b.c, b.set.Key, !b.set.Network, b.set.Persistent); err != nil {
		b.log.Warn("kubernetes: removing a failed restore's environment failed", "key", b.set.Key, "err", err)
	}
}

// clearKey removes the key's pod, and its claim when persistent, and waits
// until they are gone: the environment is replaced by the checkpoint's.
func (b *Backend) clearKey(ctx context.Context) error {
	if err := removeEnv(ctx, b.c, b.set.Key, false, b.set.Persistent); err != nil {
		return err
	}
	if !b.set.Persistent {
		return nil
	}
	name := claimName(PodName(b.set.Key))
	ctx, cancel := context.WithTimeout(ctx, b.set.StartTimeout)
	defer cancel()
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
		_, err := b.c.api.claims(b.c.namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return b.c.wrap(err, "restore: wait for the old volume claim %s to go", name)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubernetes: restore: the old volume claim %s is still being deleted: %w", name, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// restoreSource is a checkpoint found in the cluster, to restore from.
type restoreSource struct {
	method   string
	object   string
	class    string
	capacity resource.Quantity
}

// native reports whether a persistent environment of storage class
// (kubernetes_storage_class, "" = the default) can have its claim made
// from the checkpoint directly: a clone or snapshot, whose class it shares.
func (s *restoreSource) native(class string) bool {
	return (s.method == methodClone || s.method == methodSnapshot) && (class == "" || class == s.class)
}

// volume is the source as a helper pod mounts it: the checkpoint's claim,
// or a claim made from its snapshot for the helper's life (a generic
// ephemeral volume: it goes with the pod).
func (s *restoreSource) volume() corev1.VolumeSource {
	if s.method != methodSnapshot {
		return corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: s.object, ReadOnly: true}}
	}
	group := snapshotGroup
	spec := corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: s.capacity}},
		DataSource:  &corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "VolumeSnapshot", Name: s.object},
	}
	if s.class != "" {
		class := s.class
		spec.StorageClassName = &class
	}
	return corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
		VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelManaged: managedBy, LabelRole: roleCheckpointIO, LabelCheckpoint: s.object}},
			Spec:       spec,
		}}}
}

// claimSource makes a new environment's claim from the checkpoint being
// restored, when there is one: its dataSource, its storage class, and at
// least its size (a clone or a restored snapshot is never smaller).
func (b *Backend) claimSource(pvc *corev1.PersistentVolumeClaim) {
	src := b.restoring
	if src == nil {
		return
	}
	switch src.method {
	case methodClone:
		pvc.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: src.object}
	case methodSnapshot:
		group := snapshotGroup
		pvc.Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "VolumeSnapshot", Name: src.object}
	default:
		return
	}
	if src.class != "" {
		class := src.class
		pvc.Spec.StorageClassName = &class
	}
	if q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; src.capacity.Cmp(q) > 0 {
		pvc.Spec.Resources.Requests[corev1.ResourceStorage] = src.capacity
	}
}

// openCheckpoint checks that cp is this backend's, in the environment's
// namespace, and whole.
func (b *Backend) openCheckpoint(ctx context.Context, cp *backend.Checkpoint) (*restoreSource, error) {
	if cp.Backend != Name {
		return nil, fmt.Errorf("kubernetes: checkpoint %q was made by backend %q, not %s", cp.Name, cp.Backend, Name)
	}
	src := &restoreSource{method: cp.Meta[metaMethod], object: cp.ID, class: cp.Meta[metaClass]}
	if ns := cp.Meta[metaNamespace]; ns != b.c.namespace {
		return nil, fmt.Errorf("kubernetes: checkpoint %q is in namespace %s, the environment in %s: restore it in its own namespace (terminal.%s)",
			cp.Name, ns, b.c.namespace, keyNamespace)
	}
	if q, err := resource.ParseQuantity(cp.Meta[metaCapacity]); err == nil {
		src.capacity = q
	} else {
		src.capacity = b.set.VolumeSize
	}
	var ann map[string]string
	var deleting bool
	switch src.method {
	case methodCopy, methodClone:
		pvc, err := b.c.api.claims(b.c.namespace).Get(ctx, src.object, metav1.GetOptions{})
		if err != nil {
			return nil, checkpointGone(b.c, cp, err)
		}
		ann, deleting = pvc.Annotations, pvc.DeletionTimestamp != nil
	case methodSnapshot:
		vs, err := b.snapshots(b.c.namespace).get(ctx, src.object)
		if err != nil {
			return nil, checkpointGone(b.c, cp, err)
		}
		ann, deleting = vs.Metadata.Annotations, vs.Metadata.DeletionTimestamp != nil
	default:
		return nil, fmt.Errorf("kubernetes: checkpoint %q: unknown method %q (made by a newer berth?)", cp.Name, src.method)
	}
	if deleting || ann[AnnCheckpointState] != stateComplete {
		return nil, fmt.Errorf("kubernetes: checkpoint %q (%s in namespace %s) is being removed or was never completed; it cannot be restored",
			cp.Name, src.object, b.c.namespace)
	}
	return src, nil
}

func checkpointGone(c *cluster, cp *backend.Checkpoint, err error) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("kubernetes: checkpoint %q (%s) is gone from namespace %s; it cannot be restored", cp.Name, cp.ID, c.namespace)
	}
	return c.wrap(err, "get checkpoint %s", cp.ID)
}

// checkpointAdmin removes checkpoints (Registration.Checkpoints).
type checkpointAdmin struct{}

// Remove deletes the checkpoint's claim or snapshot and any helper pod
// still copying from it. It does not wait for them to go: a claim goes
// once no pod uses it (the pvc-protection finalizer), seconds after its
// helper pod, and a fork (which removes its transient checkpoint) need not
// wait for that. One already gone is not an error.
func (checkpointAdmin) Remove(ctx context.Context, opts backend.Options, cp backend.Checkpoint) error {
	if cp.Backend != "" && cp.Backend != Name {
		return fmt.Errorf("kubernetes: checkpoint %q was made by backend %q, not %s", cp.Name, cp.Backend, Name)
	}
	if cp.ID == "" || !strings.HasPrefix(cp.ID, "berth-ck-") {
		return fmt.Errorf("kubernetes: checkpoint %q: %q is not the name of a checkpoint berth made", cp.Name, cp.ID)
	}
	s, err := readSettings(opts)
	if err != nil {
		return err
	}
	if ns := cp.Meta[metaNamespace]; ns != "" {
		s.Namespace = ns
	}
	c, err := connect(s, opts.Getenv)
	if err != nil {
		return err
	}
	pods, err := c.api.pods(c.namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelCheckpoint + "=" + cp.ID})
	if err != nil {
		return c.wrap(err, "list the helper pods of checkpoint %s", cp.ID)
	}
	grace := int64(1)
	for _, p := range pods.Items {
		if err := c.api.pods(c.namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil && !apierrors.IsNotFound(err) {
			return c.wrap(err, "delete helper pod %s", p.Name)
		}
	}
	return deleteCheckpointObject(ctx, c, cp.Meta[metaMethod], cp.ID)
}

// sweepCheckpoints removes what berths that died left of checkpoints: the
// helper pods they made, and the checkpoints they were still taking
// (state "copying"). Complete checkpoints stay: berth's records name
// them. Marks from other machines are never judged dead (procmark).
func sweepCheckpoints(ctx context.Context, c *cluster) error {
	sel := metav1.ListOptions{LabelSelector: LabelManaged + "=" + managedBy + "," + LabelCheckpoint}
	var errs []error
	pods, err := c.api.pods(c.namespace).List(ctx, sel)
	if err != nil {
		errs = append(errs, c.wrap(err, "list checkpoint helper pods"))
	} else {
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.DeletionTimestamp == nil && orphaned(p) {
				if err := removePod(ctx, c, p); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	leftover := func(ann map[string]string, deleting bool) bool {
		return !deleting && ann[AnnCheckpointState] != stateComplete && ann[AnnOwner] != "" && procmark.Gone(ann[AnnOwner])
	}
	pvcs, err := c.api.claims(c.namespace).List(ctx, sel)
	if err != nil {
		errs = append(errs, c.wrap(err, "list checkpoint claims"))
	} else {
		for _, pvc := range pvcs.Items {
			if leftover(pvc.Annotations, pvc.DeletionTimestamp != nil) {
				if err := deleteCheckpointObject(ctx, c, methodCopy, pvc.Name); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	snaps, err := snapshotClient{c: c, namespace: c.namespace}.list(ctx, sel.LabelSelector)
	if err != nil && !errors.Is(err, errNoSnapshotAPI) && !apierrors.IsForbidden(err) {
		errs = append(errs, c.wrap(err, "list checkpoint snapshots"))
	}
	for _, vs := range snaps {
		if leftover(vs.Metadata.Annotations, vs.Metadata.DeletionTimestamp != nil) {
			if err := deleteCheckpointObject(ctx, c, methodSnapshot, vs.Metadata.Name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
