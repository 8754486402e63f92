package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/a55dbaac/berth/backend"
)

// This file takes a persistent environment's checkpoint by the storage's
// own means: a CSI VolumeSnapshot of its claim, or a claim cloned from it
// (dataSource). The API tells honestly whether a snapshot can be taken (a
// VolumeSnapshotClass names the claim's CSI driver); it cannot tell
// whether a CSI driver clones (a controller capability it does not
// publish), so a clone is tried only where the provisioner is a CSI driver
// (a CSIDriver object: a provisioner that is not one may ignore
// dataSource and hand out an empty volume), and a driver that refuses
// (the claim's ProvisioningFailed event) is remembered for the process,
// its claim removed, and the files copied instead.

// snapshotGroup is the API group of CSI volume snapshots (the CRDs of
// kubernetes-csi/external-snapshotter).
const snapshotGroup = "snapshot.storage.k8s.io"

// errNoSnapshotAPI says the cluster does not serve VolumeSnapshots.
var errNoSnapshotAPI = errors.New("the cluster does not serve " + snapshotGroup + "/v1 (no CSI snapshot CRDs)")

// annSelectedNode is the annotation the scheduler puts on a claim of a
// WaitForFirstConsumer class once it picked the node of the pod that uses
// it; the CSI provisioner then provisions for that node. A checkpoint's
// clone has no pod: berth names the node of the claim it clones, where the
// source volume is.
const annSelectedNode = "volume.kubernetes.io/selected-node"

// nativePlan is how a persistent environment's claim can be checkpointed.
type nativePlan struct {
	method        string // methodSnapshot, methodClone, or methodCopy
	why           string // for methodCopy: why not natively (logged)
	class         string
	driver        string
	snapshotClass string
	node          string // for a clone of a WaitForFirstConsumer class
	capacity      resource.Quantity
}

// nativeSupport finds out how the claim src can be checkpointed: a
// snapshot where a VolumeSnapshotClass names its class's CSI driver, a
// clone where the provisioner is a CSI driver, else a copy. What berth may
// not read (classes and CSI drivers are cluster-scoped) counts as
// unsupported.
func (b *Backend) nativeSupport(ctx context.Context, src *corev1.PersistentVolumeClaim) (nativePlan, error) {
	plan := nativePlan{method: methodCopy}
	plan.capacity = src.Spec.Resources.Requests[corev1.ResourceStorage]
	if q, ok := src.Status.Capacity[corev1.ResourceStorage]; ok && q.Cmp(plan.capacity) > 0 {
		plan.capacity = q
	}
	if src.Spec.StorageClassName == nil || *src.Spec.StorageClassName == "" {
		plan.why = "the claim has no storage class"
		return plan, nil
	}
	plan.class = *src.Spec.StorageClassName
	sc, err := b.c.api.storageClasses().Get(ctx, plan.class, metav1.GetOptions{})
	switch {
	case isConnErr(err):
		return plan, b.c.wrap(err, "checkpoint: get storage class %s", plan.class)
	case err != nil:
		plan.why = fmt.Sprintf("storage class %s: %v", plan.class, err)
		return plan, nil
	}
	plan.driver = sc.Provisioner
	if _, refused := noNative.Load(plan.class + "|" + methodSnapshot); !refused {
		classes, err := b.snapshotClasses(ctx)
		if isConnErr(err) {
			return plan, b.c.wrap(err, "checkpoint: list volume snapshot classes")
		}
		for _, vsc := range classes {
			if vsc.Driver != plan.driver {
				continue
			}
			if plan.snapshotClass == "" || vsc.Metadata.Annotations["snapshot.storage.kubernetes.io/is-default-class"] == "true" {
				plan.snapshotClass = vsc.Metadata.Name
			}
		}
		if plan.snapshotClass != "" {
			plan.method = methodSnapshot
			return plan, nil
		}
	}
	if reason, refused := noNative.Load(plan.class + "|" + methodClone); refused {
		plan.why = reason.(string)
		return plan, nil
	}
	if _, err := b.csiDrivers().Get(ctx, plan.driver, metav1.GetOptions{}); err != nil {
		if isConnErr(err) {
			return plan, b.c.wrap(err, "checkpoint: get CSI driver %s", plan.driver)
		}
		plan.why = fmt.Sprintf("provisioner %s of storage class %s is not a CSI driver that berth may see (%v)", plan.driver, plan.class, err)
		return plan, nil
	}
	plan.method = methodClone
	if sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer {
		if p, err := b.c.api.pods(b.c.namespace).Get(ctx, b.PodName(), metav1.GetOptions{}); err == nil {
			plan.node = p.Spec.NodeName
		}
	}
	return plan, nil
}

// nativeCheckpoint takes the checkpoint of claim src by plan, and reports
// whether it did. A driver that refuses is remembered (noNative) and
// false returned with nothing left: the caller copies.
func (b *Backend) nativeCheckpoint(ctx context.Context, cp *backend.Checkpoint, src *corev1.PersistentVolumeClaim, plan nativePlan) (bool, error) {
	if plan.method == methodCopy {
		b.log.Debug("kubernetes: checkpoint by copy", "claim", src.Name, "why", plan.why)
		return false, nil
	}
	object := checkpointObjectName(b.set.Key)
	wctx, cancel := context.WithTimeout(ctx, b.set.StartTimeout)
	defer cancel()
	var refused string
	var err error
	switch plan.method {
	case methodSnapshot:
		vs := b.snapshotObject(object, cp.Name, src.Name, plan.snapshotClass)
		if err := b.snapshots(b.c.namespace).create(ctx, vs); err != nil {
			return false, b.c.wrap(err, "checkpoint: create volume snapshot %s of claim %s", object, src.Name)
		}
		refused, err = b.waitSnapshotCut(wctx, object)
	case methodClone:
		pvc := b.checkpointClaimObject(object, cp.Name, plan.class, plan.capacity, src)
		if plan.node != "" {
			pvc.Annotations[annSelectedNode] = plan.node
		}
		if _, err := b.c.api.claims(b.c.namespace).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			return false, b.c.wrap(err, "checkpoint: create volume claim %s cloned from %s", object, src.Name)
		}
		refused, err = b.waitCloneBound(wctx, object)
	}
	if err != nil || refused != "" {
		b.deleteCheckpointObject(plan.method, object)
		if err != nil {
			if ctx.Err() == nil && wctx.Err() != nil {
				return false, fmt.Errorf("kubernetes: checkpoint: the %s %s of claim %s was not done within terminal.%s (%v)",
					plan.method, object, src.Name, keyStartTimeout, b.set.StartTimeout)
			}
			return false, err
		}
		noNative.Store(plan.class+"|"+plan.method, refused)
		b.log.Warn("kubernetes: the storage refused a "+plan.method+"; copying the files instead (for this class, from now on)",
			"class", plan.class, "driver", plan.driver, "reason", refused)
		return false, nil
	}
	size := b.usedBytes(ctx)
	if err := b.markComplete(ctx, plan.method, object, size); err != nil {
		b.deleteCheckpointObject(plan.method, object)
		return false, err
	}
	cp.ID, cp.Size = object, size
	cp.Meta[metaMethod] = plan.method
	cp.Meta[metaClass] = plan.class
	cp.Meta[metaCapacity] = plan.capacity.String()
	cp.Meta[metaDriver] = plan.driver
	return true, nil
}

// usedBytes is what the environment's volume holds (df of /root, which is
// on it), or 0 when that cannot be read.
func (b *Backend) usedBytes(ctx context.Context) int64 {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, code, err := backend.Output(ctx, b, backend.ProcSpec{Argv: []string{"df", "-P", "-k", homeDir}}, nil, 4096)
	if err != nil || code != 0 {
		return 0
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if f := strings.Fields(lines[len(lines)-1]); len(f) >= 3 {
		if kb, err := strconv.ParseInt(f[2], 10, 64); err == nil {
			return kb << 10
		}
	}
	return 0
}

// pollDelay is the next delay of a poll that started at d.
func pollDelay(d time.Duration) time.Duration { return min(2*d, time.Second) }

// waitCloneBound waits until the cloned claim is bound, and returns the
// provisioner's reason when it refuses it (a ProvisioningFailed event).
func (b *Backend) waitCloneBound(ctx context.Context, name string) (string, error) {
	claims := b.c.api.claims(b.c.namespace)
	for delay := 100 * time.Millisecond; ; delay = pollDelay(delay) {
		pvc, err := claims.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", b.c.wrap(err, "checkpoint: get cloned claim %s", name)
		}
		if pvc.Status.Phase == corev1.ClaimBound {
			return "", nil
		}
		evs, err := b.events(b.c.namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.AndSelectors(
			fields.OneTermEqualSelector("involvedObject.uid", string(pvc.UID)),
			fields.OneTermEqualSelector("reason", "ProvisioningFailed")).String()})
		if err == nil && len(evs.Items) > 0 {
			return evs.Items[0].Message, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(delay):
		}
	}
}

// waitSnapshotCut waits until the snapshot is taken (its creationTime is
// set: the moment it holds; it may become ready to use later, which a
// claim restored from it waits for), and returns the snapshot
// controller's error when it failed.
func (b *Backend) waitSnapshotCut(ctx context.Context, name string) (string, error) {
	for delay := 100 * time.Millisecond; ; delay = pollDelay(delay) {
		vs, err := b.snapshots(b.c.namespace).get(ctx, name)
		if err != nil {
			return "", b.c.wrap(err, "checkpoint: get volume snapshot %s", name)
		}
		if st := vs.Status; st != nil {
			if st.Error != nil && st.Error.Message != nil && *st.Error.Message != "" {
				return *st.Error.Message, nil
			}
			if st.CreationTime != nil || st.ReadyToUse != nil && *st.ReadyToUse {
				return "", nil
			}
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(delay):
		}
	}
}

// events are the events of namespace.
func (b *Backend) events(namespace string) apiCollection[*corev1.Event, *corev1.EventList] {
	return newCollection[corev1.Event, corev1.EventList](b.c.api.core, "events", namespace)
}

// csiDrivers are the cluster's CSI drivers.
func (b *Backend) csiDrivers() apiCollection[*storagev1.CSIDriver, *storagev1.CSIDriverList] {
	return newCollection[storagev1.CSIDriver, storagev1.CSIDriverList](b.c.api.storage, "csidrivers", "")
}

// volumeSnapshot is the part of a snapshot.storage.k8s.io/v1 VolumeSnapshot
// berth reads and writes. berth does not link the external-snapshotter's
// client for these few fields: the objects go as JSON through the core REST
// client (rest.go), whose errors are the API server's Status as for every
// other request.
type volumeSnapshot struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		VolumeSnapshotClassName *string `json:"volumeSnapshotClassName,omitempty"`
		Source                  struct {
			PersistentVolumeClaimName *string `json:"persistentVolumeClaimName,omitempty"`
		} `json:"source"`
	} `json:"spec"`
	Status *struct {
		CreationTime *metav1.Time       `json:"creationTime,omitempty"`
		ReadyToUse   *bool              `json:"readyToUse,omitempty"`
		RestoreSize  *resource.Quantity `json:"restoreSize,omitempty"`
		Error        *struct {
			Message *string `json:"message,omitempty"`
		} `json:"error,omitempty"`
	} `json:"status,omitempty"`
}

// volumeSnapshotClass is the part of a VolumeSnapshotClass berth reads.
type volumeSnapshotClass struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Driver   string            `json:"driver"`
}

// snapshotObject is a checkpoint's snapshot of claim.
func (b *Backend) snapshotObject(object, name, claim, class string) *volumeSnapshot {
	vs := &volumeSnapshot{APIVersion: snapshotGroup + "/v1", Kind: "VolumeSnapshot"}
	ann := checkpointAnnotations(b.set.Key, name)
	ann[AnnCheckpointState] = stateCopying
	vs.Metadata = metav1.ObjectMeta{Name: object, Namespace: b.c.namespace,
		Labels: checkpointLabels(b.set.Key, roleCheckpoint, object), Annotations: ann}
	vs.Spec.VolumeSnapshotClassName = &class
	vs.Spec.Source.PersistentVolumeClaimName = &claim
	return vs
}

// snapshotClasses lists the cluster's VolumeSnapshotClasses (none when
// the cluster does not serve them or berth may not list them).
func (b *Backend) snapshotClasses(ctx context.Context) ([]volumeSnapshotClass, error) {
	raw, err := b.c.api.core.Get().AbsPath("/apis", snapshotGroup, "v1", "volumesnapshotclasses").Do(ctx).Raw()
	if err != nil {
		if isConnErr(err) {
			return nil, err
		}
		return nil, nil
	}
	var list struct {
		Items []volumeSnapshotClass `json:"items"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, nil
	}
	return list.Items, nil
}

// snapshotClient makes the requests of the VolumeSnapshots of a namespace.
type snapshotClient struct {
	c         *cluster
	namespace string
}

func (b *Backend) snapshots(namespace string) snapshotClient {
	return snapshotClient{c: b.c, namespace: namespace}
}

func (s snapshotClient) path(name ...string) string {
	p := "/apis/" + snapshotGroup + "/v1/namespaces/" + s.namespace + "/volumesnapshots"
	for _, n := range name {
		p += "/" + n
	}
	return p
}

func (s snapshotClient) create(ctx context.Context, vs *volumeSnapshot) error {
	body, err := json.Marshal(vs)
	if err != nil {
		return err
	}
	return s.c.api.core.Post().AbsPath(s.path()).SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Error()
}

func (s snapshotClient) get(ctx context.Context, name string) (*volumeSnapshot, error) {
	raw, err := s.c.api.core.Get().AbsPath(s.path(name)).Do(ctx).Raw()
	if err != nil {
		return nil, err
	}
	var vs volumeSnapshot
	if err := json.Unmarshal(raw, &vs); err != nil {
		return nil, fmt.Errorf("decode volume snapshot %s: %w", name, err)
	}
	return &vs, nil
}

func (s snapshotClient) patch(ctx context.Context, name string, mergePatch []byte) error {
	return s.c.api.core.Patch("application/merge-patch+json").AbsPath(s.path(name)).Body(mergePatch).Do(ctx).Error()
}

func (s snapshotClient) delete(ctx context.Context, name string) error {
	return s.c.api.core.Delete().AbsPath(s.path(name)).Do(ctx).Error()
}

// list lists the snapshots selector selects; errNoSnapshotAPI when the
// cluster does not serve them.
func (s snapshotClient) list(ctx context.Context, selector string) ([]volumeSnapshot, error) {
	raw, err := s.c.api.core.Get().AbsPath(s.path()).Param("labelSelector", selector).Do(ctx).Raw()
	if apierrors.IsNotFound(err) {
		return nil, errNoSnapshotAPI
	}
	if err != nil {
		return nil, err
	}
	var list struct {
		Items []volumeSnapshot `json:"items"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("decode volume snapshots: %w", err)
	}
	return list.Items, nil
}
