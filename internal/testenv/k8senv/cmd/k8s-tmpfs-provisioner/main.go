// Command k8s-tmpfs-provisioner is the dynamic volume provisioner of
// berth's test cluster (scripts/ensure-k8s.sh): the storage class
// "berth-tmpfs" names it (provisioner "berth.test/tmpfs"), as a cloud
// cluster's default class names its CSI driver.
//
// For every PersistentVolumeClaim of such a class that is not bound yet, it
// mounts a tmpfs of exactly the requested size under --dir and creates a
// hostPath PersistentVolume for it, pre-bound to the claim (claimRef); the
// controller-manager's persistentvolume-binder completes the binding, as it
// does for any external provisioner. The size is therefore enforced: a
// write past it fails with ENOSPC, as on a real block volume. When the
// claim is deleted and the volume released, the tmpfs is unmounted and the
// PersistentVolume deleted (reclaim policy Delete; Retain keeps both).
//
// It runs inside the node's mount namespace (ensure-k8s.sh starts it with
// nsenter beside kubelet), so its mounts are where kubelet looks for them
// and nowhere else. Data lives as long as that namespace: a restarted node
// starts with empty volumes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
)

// annProvisionedBy marks the volumes a provisioner made, as Kubernetes'
// own external provisioners do.
const annProvisionedBy = "pv.kubernetes.io/provisioned-by"

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the provisioner's identity")
	dir := flag.String("dir", "", "directory under which each volume's tmpfs is mounted")
	name := flag.String("name", "berth.test/tmpfs", "provisioner name storage classes refer to")
	flag.Parse()
	if *kubeconfig == "" || *dir == "" {
		log.Fatal("k8s-tmpfs-provisioner: --kubeconfig and --dir are required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatalf("k8s-tmpfs-provisioner: %v", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		log.Fatalf("k8s-tmpfs-provisioner: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	p := &provisioner{cs: cs, dir: *dir, name: *name,
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())}
	p.run(ctx)
}

type provisioner struct {
	cs    kubernetes.Interface
	dir   string
	name  string
	queue workqueue.TypedRateLimitingInterface[string]

	claims  cache.Indexer
	volumes cache.Indexer
	classes cache.Indexer
}

// Work items: "pvc/<namespace>/<name>" or "pv/<name>".
func (p *provisioner) run(ctx context.Context) {
	f := informers.NewSharedInformerFactory(p.cs, 5*time.Minute)
	pvcs := f.Core().V1().PersistentVolumeClaims().Informer()
	pvs := f.Core().V1().PersistentVolumes().Informer()
	scs := f.Storage().V1().StorageClasses().Informer()
	p.claims, p.volumes, p.classes = pvcs.GetIndexer(), pvs.GetIndexer(), scs.GetIndexer()
	enqueue := func(prefix string) cache.ResourceEventHandlerFuncs {
		add := func(obj any) {
			if k, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
				p.queue.Add(prefix + k)
			}
		}
		return cache.ResourceEventHandlerFuncs{AddFunc: add, UpdateFunc: func(_, o any) { add(o) }}
	}
	pvcs.AddEventHandler(enqueue("pvc/"))
	pvs.AddEventHandler(enqueue("pv/"))
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pvcs.HasSynced, pvs.HasSynced, scs.HasSynced) {
		return
	}
	log.Printf("k8s-tmpfs-provisioner: serving %s, volumes under %s", p.name, p.dir)
	go func() {
		<-ctx.Done()
		p.queue.ShutDown()
	}()
	for {
		item, quit := p.queue.Get()
		if quit {
			return
		}
		var err error
		if k, ok := strings.CutPrefix(item, "pvc/"); ok {
			err = p.claim(ctx, k)
		} else if k, ok := strings.CutPrefix(item, "pv/"); ok {
			err = p.release(ctx, k)
		}
		if err != nil {
			log.Printf("k8s-tmpfs-provisioner: %s: %v (retrying)", item, err)
			p.queue.AddRateLimited(item)
		} else {
			p.queue.Forget(item)
		}
		p.queue.Done(item)
	}
}

// claim provisions a volume for an unbound claim of one of our classes.
func (p *provisioner) claim(ctx context.Context, key string) error {
	obj, ok, err := p.claims.GetByKey(key)
	if err != nil || !ok {
		return err
	}
	pvc := obj.(*corev1.PersistentVolumeClaim)
	if pvc.Spec.VolumeName != "" || pvc.Status.Phase != corev1.ClaimPending || pvc.DeletionTimestamp != nil {
		return nil
	}
	class := ""
	if pvc.Spec.StorageClassName != nil {
		class = *pvc.Spec.StorageClassName
	}
	sc, err := p.class(class)
	if err != nil || sc == nil {
		return err
	}
	size, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok || size.Value() <= 0 {
		return fmt.Errorf("claim %s requests no storage size", key)
	}
	name := "pvc-" + string(pvc.UID)
	if _, exists, _ := p.volumes.GetByKey(name); exists {
		return nil
	}
	path := filepath.Join(p.dir, name)
	if err := mountTmpfs(path, size.Value()); err != nil {
		return err
	}
	reclaim := corev1.PersistentVolumeReclaimDelete
	if sc.ReclaimPolicy != nil {
		reclaim = *sc.ReclaimPolicy
	}
	dirType := corev1.HostPathDirectory
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annProvisionedBy: p.name}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(size.Value(), resource.BinarySI)},
			AccessModes:                   pvc.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: reclaim,
			StorageClassName:              sc.Name,
			VolumeMode:                    pvc.Spec.VolumeMode,
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID,
			},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &dirType},
			},
		},
	}
	if _, err := p.cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		_ = unmountTmpfs(path)
		return fmt.Errorf("create volume %s: %w", name, err)
	}
	log.Printf("k8s-tmpfs-provisioner: %s: %s tmpfs at %s", key, size.String(), path)
	return nil
}

// class returns the storage class name (the default class when name is
// "") when it is ours, else nil.
func (p *provisioner) class(name string) (*storagev1.StorageClass, error) {
	for _, obj := range p.classes.List() {
		sc := obj.(*storagev1.StorageClass)
		if sc.Provisioner != p.name {
			continue
		}
		if sc.Name == name || name == "" && sc.Annotations["storageclass.kubernetes.io/is-default-class"] == "true" {
			return sc, nil
		}
	}
	return nil, nil
}

// release deletes a released volume of ours whose policy says Delete.
func (p *provisioner) release(ctx context.Context, name string) error {
	obj, ok, err := p.volumes.GetByKey(name)
	if err != nil || !ok {
		return err
	}
	pv := obj.(*corev1.PersistentVolume)
	if pv.Annotations[annProvisionedBy] != p.name || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		return nil
	}
	if pv.Status.Phase != corev1.VolumeReleased && pv.Status.Phase != corev1.VolumeFailed {
		return nil
	}
	if pv.Spec.HostPath != nil && strings.HasPrefix(pv.Spec.HostPath.Path, p.dir+"/") {
		if err := unmountTmpfs(pv.Spec.HostPath.Path); err != nil {
			return err
		}
	}
	err = p.cs.CoreV1().PersistentVolumes().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete volume %s: %w", name, err)
	}
	log.Printf("k8s-tmpfs-provisioner: deleted released volume %s", name)
	return nil
}

// mountTmpfs mounts a tmpfs of size bytes at path (idempotent).
func mountTmpfs(path string, size int64) error {
	if err := os.MkdirAll(path, 0o755); err != nil {
		return err
	}
	if mounted(path) {
		return nil
	}
	opts := fmt.Sprintf("size=%d,mode=0777", size)
	if err := syscall.Mount("berth-pv", path, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount tmpfs (%s) at %s: %w", opts, path, err)
	}
	return nil
}

// unmountTmpfs unmounts and removes path; a path already gone is fine.
func unmountTmpfs(path string) error {
	if mounted(path) {
		if err := syscall.Unmount(path, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			return fmt.Errorf("unmount %s: %w", path, err)
		}
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// mounted reports whether path is a mount point in this namespace.
func mounted(path string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}
