package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/config"
)

// fakeStorage is an API server with CSI storage that the test cluster
// lacks: a storage class of a CSI driver, which may snapshot
// (VolumeSnapshotClass), clone (a CSIDriver object, claims with a
// PersistentVolumeClaim dataSource bound at once) or refuse to (a
// ProvisioningFailed event, as the external-provisioner reports it). Pods
// run as soon as they are made; exec is refused. It keeps the objects it
// is given and records every request that changes one, decoded.
type fakeStorage struct {
	driver      string
	snapshots   bool // serves snapshot.storage.k8s.io with a class for driver
	csi         bool // a CSIDriver object for driver
	refuseClone bool // the driver refuses dataSource PersistentVolumeClaim
	binding     storagev1.VolumeBindingMode
	noDefault   bool // the class is not the cluster's default
	// execAfterHelper holds the refusal of a copy's source exec (the one
	// carrying the copy's BERTH_COPY mark) until a checkpoint's helper
	// pod has been made (5 s at most), so that a copy whose source is
	// refused has always begun its destination: a test can then look at
	// the helper however the two sides' goroutines ran.
	execAfterHelper bool
	helperMade      chan struct{}

	mu     sync.Mutex
	objs   map[string]runtime.Object // "pods/name", "persistentvolumeclaims/name"
	snaps  map[string]map[string]any // VolumeSnapshots, as JSON
	events []corev1.Event
	writes []fakeWrite
	uid    int
}

// fakeWrite is one request that changed something.
type fakeWrite struct {
	Method, Resource, Name string
	Body                   map[string]any // the object or patch, as JSON
}

const fakeNode = "node-a"

func newFakeStorage() *fakeStorage {
	return &fakeStorage{driver: "fake.csi.example", binding: storagev1.VolumeBindingImmediate,
		objs: map[string]runtime.Object{}, snaps: map[string]map[string]any{}, helperMade: make(chan struct{})}
}

// start serves f and returns options whose kubeconfig points at it, for a
// persistent environment of the class "csi-fast".
func (f *fakeStorage) start(t *testing.T) backend.Options {
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	err := os.WriteFile(kc, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q}}]
users: [{name: u, user: {}}]
contexts: [{name: c, context: {cluster: fake, user: u, namespace: ns}}]
current-context: c
`, srv.URL)), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default().Terminal
	cfg.Backend = Name
	cfg.ContainerPersistent = true
	mustSet(&cfg, keyImage, "img")
	mustSet(&cfg, keyStorageClass, "csi-fast")
	mustSet(&cfg, keyVolumeSize, "1Gi")
	mustSet(&cfg, keyStartTimeout, 20)
	return backend.Options{Key: "src", Config: cfg, Getenv: func(k string) string {
		if k == "KUBECONFIG" {
			return kc
		}
		return ""
	}}
}

func (f *fakeStorage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if f.execAfterHelper && strings.HasSuffix(r.URL.Path, "/exec") && strings.Contains(r.URL.RawQuery, "BERTH_COPY") {
		select {
		case <-f.helperMade:
		case <-time.After(5 * time.Second):
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p := strings.Trim(r.URL.Path, "/")
	parts := strings.Split(p, "/")
	if strings.HasPrefix(p, "apis/"+snapshotGroup) {
		f.serveSnapshots(w, r, parts, body)
		return
	}
	_, res, name := splitAPIPath(r.URL.Path)
	if len(parts) > 0 && parts[len(parts)-1] == "exec" {
		f.status(w, http.StatusForbidden, metav1.StatusReasonForbidden, "exec is not served by the fake")
		return
	}
	switch {
	case res == "storageclasses":
		sc := storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "csi-fast",
			Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": fmt.Sprint(!f.noDefault)}},
			Provisioner: f.driver, VolumeBindingMode: &f.binding}
		if name == "" {
			f.write(w, &storagev1.StorageClassList{Items: []storagev1.StorageClass{sc}}, storagev1.SchemeGroupVersion)
		} else if name == sc.Name {
			f.write(w, &sc, storagev1.SchemeGroupVersion)
		} else {
			f.notFound(w, res, name)
		}
	case res == "csidrivers":
		if f.csi && name == f.driver {
			f.write(w, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: name}}, storagev1.SchemeGroupVersion)
		} else {
			f.notFound(w, res, name)
		}
	case res == "events":
		sel := r.URL.Query().Get("fieldSelector")
		var out corev1.EventList
		for _, ev := range f.events {
			if strings.Contains(sel, "involvedObject.uid="+string(ev.InvolvedObject.UID)) && strings.Contains(sel, "reason="+ev.Reason) {
				out.Items = append(out.Items, ev)
			}
		}
		f.write(w, &out, corev1.SchemeGroupVersion)
	case res == "networkpolicies":
		f.write(w, &networkingv1.NetworkPolicyList{}, networkingv1.SchemeGroupVersion)
	case res == "pods" || res == "persistentvolumeclaims":
		f.serveCore(w, r, res, name, body)
	default:
		f.notFound(w, res, name)
	}
}

// serveCore serves pods and claims: get, list, create, patch, delete.
func (f *fakeStorage) serveCore(w http.ResponseWriter, r *http.Request, res, name string, body []byte) {
	key := res + "/" + name
	switch {
	case r.Method == http.MethodGet && name == "":
		if res == "pods" {
			var l corev1.PodList
			for k, o := range f.objs {
				if strings.HasPrefix(k, "pods/") && matches(o.(*corev1.Pod).Labels, r.URL.Query().Get("labelSelector")) {
					l.Items = append(l.Items, *o.(*corev1.Pod))
				}
			}
			f.write(w, &l, corev1.SchemeGroupVersion)
			return
		}
		var l corev1.PersistentVolumeClaimList
		for k, o := range f.objs {
			if strings.HasPrefix(k, "persistentvolumeclaims/") && matches(o.(*corev1.PersistentVolumeClaim).Labels, r.URL.Query().Get("labelSelector")) {
				l.Items = append(l.Items, *o.(*corev1.PersistentVolumeClaim))
			}
		}
		f.write(w, &l, corev1.SchemeGroupVersion)
	case r.Method == http.MethodGet:
		if o, ok := f.objs[key]; ok {
			f.write(w, o, corev1.SchemeGroupVersion)
		} else {
			f.notFound(w, res, name)
		}
	case r.Method == http.MethodPost:
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
		if err != nil {
			f.status(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
			return
		}
		f.record(r.Method, res, "", obj)
		f.uid++
		uid := types.UID(fmt.Sprintf("uid-%d", f.uid))
		switch o := obj.(type) {
		case *corev1.Pod:
			o.UID, o.Spec.NodeName = uid, fakeNode
			if o.Labels[LabelRole] == roleCheckpointIO {
				select {
				case <-f.helperMade:
				default:
					close(f.helperMade)
				}
			}
			o.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
				{Name: containerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}
			f.objs["pods/"+o.Name] = o
		case *corev1.PersistentVolumeClaim:
			o.UID = uid
			o.Status.Phase = corev1.ClaimBound
			if ds := o.Spec.DataSource; ds != nil && ds.Kind == "PersistentVolumeClaim" && f.refuseClone {
				o.Status.Phase = corev1.ClaimPending
				f.events = append(f.events, corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "ev"}, Reason: "ProvisioningFailed",
					InvolvedObject: corev1.ObjectReference{Kind: "PersistentVolumeClaim", Name: o.Name, UID: uid},
					Message:        `failed to provision volume with StorageClass "csi-fast": rpc error: code = Unimplemented desc = cloning is not supported`})
			}
			o.Status.Capacity = o.Spec.Resources.Requests
			f.objs["persistentvolumeclaims/"+o.Name] = o
		}
		f.write(w, obj, corev1.SchemeGroupVersion)
	case r.Method == http.MethodPatch:
		var patch map[string]any
		_ = json.Unmarshal(body, &patch)
		f.writes = append(f.writes, fakeWrite{Method: r.Method, Resource: res, Name: name, Body: patch})
		o, ok := f.objs[key]
		if !ok {
			f.notFound(w, res, name)
			return
		}
		if ann, ok := nested(patch, "metadata", "annotations").(map[string]any); ok {
			m := o.(metav1.Object)
			a := m.GetAnnotations()
			if a == nil {
				a = map[string]string{}
			}
			for k, v := range ann {
				if s, ok := v.(string); ok {
					a[k] = s
				} else {
					delete(a, k)
				}
			}
			m.SetAnnotations(a)
		}
		f.write(w, o, corev1.SchemeGroupVersion)
	case r.Method == http.MethodDelete:
		f.writes = append(f.writes, fakeWrite{Method: r.Method, Resource: res, Name: name})
		delete(f.objs, key)
		f.write(w, &metav1.Status{Status: metav1.StatusSuccess}, corev1.SchemeGroupVersion)
	}
}

// serveSnapshots serves snapshot.storage.k8s.io/v1, as JSON (a CRD is
// served so), or nothing when the fake has no snapshots.
func (f *fakeStorage) serveSnapshots(w http.ResponseWriter, r *http.Request, parts []string, body []byte) {
	if !f.snapshots {
		f.status(w, http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource")
		return
	}
	last := parts[len(parts)-1]
	w.Header().Set("Content-Type", "application/json")
	switch {
	case last == "volumesnapshotclasses":
		json.NewEncoder(w).Encode(map[string]any{"apiVersion": snapshotGroup + "/v1", "kind": "VolumeSnapshotClassList",
			"items": []any{map[string]any{"metadata": map[string]any{"name": "other"}, "driver": "other.csi.example"},
				map[string]any{"metadata": map[string]any{"name": "fast-snaps"}, "driver": f.driver, "deletionPolicy": "Delete"}}})
	case last == "volumesnapshots" && r.Method == http.MethodPost:
		var vs, sent map[string]any
		json.Unmarshal(body, &vs)
		json.Unmarshal(body, &sent)
		f.writes = append(f.writes, fakeWrite{Method: r.Method, Resource: "volumesnapshots", Body: sent})
		vs["status"] = map[string]any{"creationTime": time.Now().UTC().Format(time.RFC3339), "readyToUse": false}
		f.snaps[nested(vs, "metadata", "name").(string)] = vs
		json.NewEncoder(w).Encode(vs)
	case last == "volumesnapshots":
		items := []any{}
		for _, vs := range f.snaps {
			items = append(items, vs)
		}
		json.NewEncoder(w).Encode(map[string]any{"items": items})
	default:
		vs, ok := f.snaps[last]
		switch {
		case !ok:
			f.status(w, http.StatusNotFound, metav1.StatusReasonNotFound, "volumesnapshots "+last+" not found")
		case r.Method == http.MethodPatch:
			var patch map[string]any
			json.Unmarshal(body, &patch)
			f.writes = append(f.writes, fakeWrite{Method: r.Method, Resource: "volumesnapshots", Name: last, Body: patch})
			md := vs["metadata"].(map[string]any)
			ann, _ := md["annotations"].(map[string]any)
			for k, v := range nested(patch, "metadata", "annotations").(map[string]any) {
				ann[k] = v
			}
			json.NewEncoder(w).Encode(vs)
		case r.Method == http.MethodDelete:
			f.writes = append(f.writes, fakeWrite{Method: r.Method, Resource: "volumesnapshots", Name: last})
			delete(f.snaps, last)
			json.NewEncoder(w).Encode(vs)
		default:
			json.NewEncoder(w).Encode(vs)
		}
	}
}

// record notes a created object, as JSON.
func (f *fakeStorage) record(method, res, name string, obj runtime.Object) {
	b, _ := json.Marshal(obj)
	var m map[string]any
	json.Unmarshal(b, &m)
	f.writes = append(f.writes, fakeWrite{Method: method, Resource: res, Name: name, Body: m})
}

func (f *fakeStorage) write(w http.ResponseWriter, obj runtime.Object, gv schema.GroupVersion) {
	out, err := runtime.Encode(scheme.Codecs.LegacyCodec(gv), obj)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(out)
}

func (f *fakeStorage) status(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	out, _ := runtime.Encode(scheme.Codecs.LegacyCodec(corev1.SchemeGroupVersion),
		&metav1.Status{Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(out)
}

func (f *fakeStorage) notFound(w http.ResponseWriter, res, name string) {
	f.status(w, http.StatusNotFound, metav1.StatusReasonNotFound, res+` "`+name+`" not found`)
}

// created returns the bodies of the objects of resource created so far.
func (f *fakeStorage) created(resource string) []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []map[string]any
	for _, w := range f.writes {
		if w.Method == http.MethodPost && w.Resource == resource {
			out = append(out, w.Body)
		}
	}
	return out
}

// helper is the last checkpoint helper pod made (its role label says
// so), as JSON; nil when none was.
func (f *fakeStorage) helper() map[string]any {
	var h map[string]any
	for _, p := range f.created("pods") {
		if str(p, "metadata", "labels", LabelRole) == roleCheckpointIO {
			h = p
		}
	}
	return h
}

// did reports whether a request method on resource/name was made.
func (f *fakeStorage) did(method, resource, name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.writes {
		if w.Method == method && w.Resource == resource && w.Name == name {
			return true
		}
	}
	return false
}

// matches is a label selector of the forms berth sends ("a=b,c", "!c").
func matches(labels map[string]string, sel string) bool {
	for _, term := range strings.Split(sel, ",") {
		switch k, v, eq := strings.Cut(term, "="); {
		case term == "":
		case strings.HasPrefix(term, "!"):
			if _, ok := labels[term[1:]]; ok {
				return false
			}
		case eq:
			if labels[k] != v {
				return false
			}
		default:
			if _, ok := labels[term]; !ok {
				return false
			}
		}
	}
	return true
}

// nested reads m[k0][k1]... of decoded JSON (nil when absent).
func nested(m any, keys ...string) any {
	for _, k := range keys {
		mm, ok := m.(map[string]any)
		if !ok {
			return nil
		}
		m = mm[k]
	}
	return m
}

// str is nested as a string.
func str(m any, keys ...string) string {
	s, _ := nested(m, keys...).(string)
	return s
}

// newFakeSource makes the source environment on the fake: its claim
// (bound, 2Gi: bigger than the settings' 1Gi, as a resized volume is) and
// its pod.
func newFakeSource(t *testing.T, f *fakeStorage, opts backend.Options) *Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	src, err := New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	pvc := f.objs["persistentvolumeclaims/"+claimName(PodName(opts.Key))].(*corev1.PersistentVolumeClaim)
	pvc.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
	pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}
	f.mu.Unlock()
	return src
}

// checkMarks checks the labels and annotations every checkpoint object
// carries.
func checkMarks(t *testing.T, what string, obj map[string]any, key, name, object string) {
	t.Helper()
	for k, want := range map[string]string{LabelManaged: managedBy, LabelEnv: envHash(key), LabelRole: roleCheckpoint, LabelCheckpoint: object} {
		if got := str(obj, "metadata", "labels", k); got != want {
			t.Errorf("%s: label %s = %q, want %q", what, k, got, want)
		}
	}
	for k, want := range map[string]string{AnnKey: key, AnnCheckpointName: name, AnnCheckpointState: stateCopying, AnnOwner: currentOwner()} {
		if got := str(obj, "metadata", "annotations", k); got != want {
			t.Errorf("%s: annotation %s = %q, want %q", what, k, got, want)
		}
	}
}

// TestCheckpointNative takes checkpoints of a persistent environment by
// the storage's own means, and restores them, against a fake API server
// whose storage can (the test cluster's cannot): the requests berth makes
// — the snapshot, the cloned claim, the restored claim — and how it tells
// what the storage supports and falls back when the driver refuses.
func TestCheckpointNative(t *testing.T) {
	restore := func(t *testing.T, opts backend.Options, cp backend.Checkpoint) {
		t.Helper()
		opts.Key, opts.From = "restored", &cp
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		b, err := New(ctx, opts)
		if err != nil {
			t.Fatalf("restore: %v", err)
		}
		b.Close(ctx)
	}

	t.Run("Snapshot", func(t *testing.T) {
		f := newFakeStorage()
		f.snapshots, f.csi = true, true
		opts := f.start(t)
		src := newFakeSource(t, f, opts)
		cp, err := src.Checkpoint(context.Background(), "snap")
		if err != nil {
			t.Fatal(err)
		}
		if cp.Meta[metaMethod] != methodSnapshot || cp.Meta[metaClass] != "csi-fast" || cp.Meta[metaCapacity] != "2Gi" || cp.Meta[metaNamespace] != "ns" {
			t.Errorf("checkpoint %+v: want a snapshot in ns of the 2Gi claim of class csi-fast", cp)
		}
		vs := f.created("volumesnapshots")
		if len(vs) != 1 {
			t.Fatalf("%d snapshots created, want 1", len(vs))
		}
		if str(vs[0], "apiVersion") != "snapshot.storage.k8s.io/v1" || str(vs[0], "kind") != "VolumeSnapshot" ||
			str(vs[0], "metadata", "name") != cp.ID || str(vs[0], "spec", "volumeSnapshotClassName") != "fast-snaps" ||
			str(vs[0], "spec", "source", "persistentVolumeClaimName") != claimName(PodName("src")) {
			t.Errorf("snapshot request: %v", vs[0])
		}
		checkMarks(t, "snapshot", vs[0], "src", "snap", cp.ID)
		if !f.did(http.MethodPatch, "volumesnapshots", cp.ID) || str(f.snaps[cp.ID], "metadata", "annotations", AnnCheckpointState) != stateComplete {
			t.Error("the snapshot was not marked complete")
		}
		if n := len(f.created("persistentvolumeclaims")); n != 1 {
			t.Errorf("%d claims created, want the source's alone", n)
		}
		restore(t, opts, cp)
		claims := f.created("persistentvolumeclaims")
		rc := claims[len(claims)-1]
		if str(rc, "metadata", "name") != claimName(PodName("restored")) || str(rc, "spec", "dataSource", "apiGroup") != snapshotGroup ||
			str(rc, "spec", "dataSource", "kind") != "VolumeSnapshot" || str(rc, "spec", "dataSource", "name") != cp.ID ||
			str(rc, "spec", "storageClassName") != "csi-fast" || str(rc, "spec", "resources", "requests", "storage") != "2Gi" {
			t.Errorf("restored claim: %v", rc)
		}
		if p := f.helper(); p != nil {
			t.Errorf("a native restore made a helper pod: %v", p)
		}
		if err := (checkpointAdmin{}).Remove(context.Background(), opts, cp); err != nil || !f.did(http.MethodDelete, "volumesnapshots", cp.ID) {
			t.Errorf("Remove: %v (snapshot deleted: %v)", err, f.did(http.MethodDelete, "volumesnapshots", cp.ID))
		}
	})

	for _, wffc := range []bool{false, true} {
		t.Run(fmt.Sprintf("Clone/WaitForFirstConsumer=%v", wffc), func(t *testing.T) {
			f := newFakeStorage()
			f.csi = true
			if wffc {
				f.binding = storagev1.VolumeBindingWaitForFirstConsumer
			}
			opts := f.start(t)
			src := newFakeSource(t, f, opts)
			cp, err := src.Checkpoint(context.Background(), "clone")
			if err != nil {
				t.Fatal(err)
			}
			if cp.Meta[metaMethod] != methodClone || cp.Meta[metaDriver] != f.driver {
				t.Errorf("checkpoint %+v: want a clone by %s", cp, f.driver)
			}
			claims := f.created("persistentvolumeclaims")
			if len(claims) != 2 {
				t.Fatalf("%d claims created, want the source's and the clone", len(claims))
			}
			c := claims[1]
			if str(c, "metadata", "name") != cp.ID || str(c, "spec", "dataSource", "kind") != "PersistentVolumeClaim" ||
				str(c, "spec", "dataSource", "name") != claimName(PodName("src")) || nested(c, "spec", "dataSource", "apiGroup") != nil ||
				str(c, "spec", "storageClassName") != "csi-fast" || str(c, "spec", "resources", "requests", "storage") != "2Gi" {
				t.Errorf("cloned claim: %v", c)
			}
			checkMarks(t, "cloned claim", c, "src", "clone", cp.ID)
			node := str(c, "metadata", "annotations", annSelectedNode)
			if wffc && node != fakeNode || !wffc && node != "" {
				t.Errorf("%s = %q with WaitForFirstConsumer %v, want the source pod's node only then", annSelectedNode, node, wffc)
			}
			restore(t, opts, cp)
			claims = f.created("persistentvolumeclaims")
			rc := claims[len(claims)-1]
			if str(rc, "spec", "dataSource", "kind") != "PersistentVolumeClaim" || str(rc, "spec", "dataSource", "name") != cp.ID ||
				str(rc, "spec", "resources", "requests", "storage") != "2Gi" {
				t.Errorf("restored claim: %v", rc)
			}
		})
	}

	// A CSI driver that refuses to clone: the claim is removed, the files
	// are copied instead (here the fake refuses exec, so the copy fails
	// with the exec's error, after making its own claim), and the next
	// checkpoint of that class copies without trying again.
	t.Run("CloneRefused", func(t *testing.T) {
		f := newFakeStorage()
		f.csi, f.refuseClone = true, true
		opts := f.start(t)
		src := newFakeSource(t, f, opts)
		_, err := src.Checkpoint(context.Background(), "refused")
		if err == nil || !strings.Contains(err.Error(), "exec") {
			t.Fatalf("checkpoint: %v, want the copy's exec refused", err)
		}
		claims := f.created("persistentvolumeclaims")
		if len(claims) != 3 || nested(claims[1], "spec", "dataSource") == nil || nested(claims[2], "spec", "dataSource") != nil {
			t.Fatalf("claims created: %v, want the source's, a clone, then a claim to copy into", claims)
		}
		for _, c := range claims[1:] {
			if name := str(c, "metadata", "name"); !f.did(http.MethodDelete, "persistentvolumeclaims", name) {
				t.Errorf("claim %s left behind", name)
			}
		}
		if _, refused := noNative.Load("csi-fast|" + methodClone); !refused {
			t.Error("the refusal was not remembered")
		}
		src.Checkpoint(context.Background(), "again")
		for _, c := range f.created("persistentvolumeclaims")[3:] {
			if nested(c, "spec", "dataSource") != nil {
				t.Errorf("a clone tried again after the driver refused: %v", c)
			}
		}
		noNative.Delete("csi-fast|" + methodClone)
	})

	// Storage that can do neither: no snapshot API, a provisioner that is
	// no CSI driver (which might ignore dataSource and give an empty
	// volume): berth copies, and never sends a dataSource.
	t.Run("NeitherCopies", func(t *testing.T) {
		f := newFakeStorage()
		f.execAfterHelper = true
		opts := f.start(t)
		src := newFakeSource(t, f, opts)
		src.Checkpoint(context.Background(), "copy")
		for _, c := range f.created("persistentvolumeclaims") {
			if nested(c, "spec", "dataSource") != nil {
				t.Errorf("a claim with a dataSource on storage that cannot clone: %v", c)
			}
		}
		if len(f.created("volumesnapshots")) != 0 {
			t.Error("a snapshot requested where the API serves none")
		}
		claims := f.created("persistentvolumeclaims")
		into := str(claims[len(claims)-1], "metadata", "name")
		helper := f.helper()
		vols, _ := nested(helper, "spec", "volumes").([]any)
		if helper == nil || len(vols) != 1 ||
			str(vols[0], "persistentVolumeClaim", "claimName") != into || nested(vols[0], "persistentVolumeClaim", "readOnly") == true {
			t.Errorf("the copy's helper pod: %v, want one writable volume, the claim %s", helper, into)
		}
	})

	// A throwaway environment restored from a snapshot: its helper mounts
	// a claim made from the snapshot for its own life (a generic
	// ephemeral volume), read-only.
	t.Run("SnapshotIntoThrowaway", func(t *testing.T) {
		f := newFakeStorage()
		f.snapshots, f.csi = true, true
		opts := f.start(t)
		src := newFakeSource(t, f, opts)
		cp, err := src.Checkpoint(context.Background(), "snap")
		if err != nil {
			t.Fatal(err)
		}
		opts.Config.ContainerPersistent = false
		opts.Key, opts.From = "throwaway", &cp
		if _, err := New(context.Background(), opts); err == nil {
			t.Fatal("the restore's copy worked through a fake that refuses exec")
		}
		helper := f.helper()
		vols, _ := nested(helper, "spec", "volumes").([]any)
		if len(vols) != 1 {
			t.Fatalf("helper pod's volumes: %v", nested(helper, "spec", "volumes"))
		}
		tmpl := nested(vols[0], "ephemeral", "volumeClaimTemplate", "spec")
		if str(tmpl, "dataSource", "kind") != "VolumeSnapshot" || str(tmpl, "dataSource", "name") != cp.ID ||
			str(tmpl, "dataSource", "apiGroup") != snapshotGroup || str(tmpl, "storageClassName") != "csi-fast" {
			t.Errorf("helper's volume: %v", vols[0])
		}
		mounts, _ := nested(helper, "spec", "containers").([]any)
		if m := nested(mounts[0], "volumeMounts").([]any)[0]; nested(m, "readOnly") != true || str(m, "mountPath") != checkpointDir {
			t.Errorf("helper's mount: %v", m)
		}
		if !f.did(http.MethodDelete, "pods", str(helper, "metadata", "name")) {
			t.Error("the failed restore's helper pod was not removed")
		}
	})
	// A restore into the key the checkpoint was taken of replaces its
	// claim: the old one is deleted, and gone, before the new one is made
	// from the snapshot (a claim's dataSource applies only when it is
	// made).
	t.Run("RestoreIntoItsOwnKey", func(t *testing.T) {
		f := newFakeStorage()
		f.snapshots, f.csi = true, true
		opts := f.start(t)
		src := newFakeSource(t, f, opts)
		cp, err := src.Checkpoint(context.Background(), "snap")
		if err != nil {
			t.Fatal(err)
		}
		opts.From = &cp
		if _, err := New(context.Background(), opts); err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		own := claimName(PodName("src"))
		deleted, recreated := -1, -1
		for i, w := range f.writes {
			switch {
			case w.Method == http.MethodDelete && w.Resource == "persistentvolumeclaims" && w.Name == own:
				deleted = i
			case w.Method == http.MethodPost && w.Resource == "persistentvolumeclaims" && str(w.Body, "metadata", "name") == own && deleted >= 0:
				recreated = i
				if str(w.Body, "spec", "dataSource", "name") != cp.ID {
					t.Errorf("the key's new claim: %v, want it made from %s", w.Body, cp.ID)
				}
			}
		}
		if deleted < 0 || recreated < deleted {
			t.Errorf("the key's claim deleted at request %d, made again at %d: want it replaced", deleted, recreated)
		}
	})

	// A throwaway environment's checkpoint where the cluster has no
	// default storage class (and none is set) fails at once, saying what
	// to set, and makes nothing.
	t.Run("NoDefaultClass", func(t *testing.T) {
		f := newFakeStorage()
		f.noDefault = true
		opts := f.start(t)
		opts.Config.ContainerPersistent = false
		mustSet(&opts.Config, keyStorageClass, "")
		src, err := New(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		_, err = src.Checkpoint(context.Background(), "x")
		if err == nil || !strings.Contains(err.Error(), "no default storage class") || !strings.Contains(err.Error(), keyStorageClass) {
			t.Errorf("checkpoint without a default class: %v", err)
		}
		if n := len(f.created("persistentvolumeclaims")); n != 0 {
			t.Errorf("%d claims made", n)
		}
	})
}

// The exit line of the copy scripts, and GNU tar's status for files that
// changed while read: whole, so the copy goes on; any other message or
// status fails it.
func TestCopyScriptStatus(t *testing.T) {
	for _, c := range []struct {
		in   string
		rest string
		code int
		ok   bool
	}{
		{"berth-exit 0\n", "", 0, true},
		{"tar: x: Cannot open\nberth-exit 2\n", "tar: x: Cannot open", 2, true},
		{"tar: x: Cannot open\n", "tar: x: Cannot open\n", -1, false},
		{"berth-exit x\n", "berth-exit x\n", -1, false},
		{"", "", -1, false},
	} {
		rest, code, ok := exitLine(c.in)
		if rest != c.rest || code != c.code || ok != c.ok {
			t.Errorf("exitLine(%q) = %q %d %v, want %q %d %v", c.in, rest, code, ok, c.rest, c.code, c.ok)
		}
	}
	changed := "tar: workspace/log: file changed as we read it"
	if !changedWhileRead(1, changed) || changedWhileRead(2, changed) || changedWhileRead(1, changed+"\ntar: y: Cannot open: Permission denied") {
		t.Error("changedWhileRead")
	}
}
