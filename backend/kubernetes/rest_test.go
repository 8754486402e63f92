package kubernetes

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// fakeAPI is an API server that records each request and answers it with
// an object of the kind the path names (or, with fail, a NotFound
// Status), encoded as the request's Accept header prefers (protobuf for
// berth's requests, as for the typed clients').
type fakeAPI struct {
	mu   sync.Mutex
	reqs []string
	fail bool
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.reqs = append(f.reqs, fmt.Sprintf("%s %s?%s content-type=%q accept=%q user-agent=%q body=%x",
		r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Content-Type"), r.Header.Get("Accept"), r.Header.Get("User-Agent"), body))
	fail := f.fail
	f.mu.Unlock()

	gv, resource, name := splitAPIPath(r.URL.Path)
	var obj runtime.Object
	code := http.StatusOK
	switch {
	case fail:
		code = http.StatusNotFound
		obj = &metav1.Status{Status: metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: 404,
			Message: resource + ` "` + name + `" not found`, Details: &metav1.StatusDetails{Name: name, Kind: resource}}
	case r.URL.Path == "/version":
		_, _ = w.Write([]byte(`{"major":"1","minor":"32","gitVersion":"v1.32.0"}`))
		return
	case strings.HasSuffix(r.URL.Path, "/proxy/configz"):
		_, _ = w.Write([]byte(`{"kubeletconfig":{"podPidsLimit":4096}}`))
		return
	case r.URL.Query().Get("watch") == "true":
		// JSON, which a client always accepts; berth's pod watch over
		// protobuf is the cluster tests'.
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","uid":"u1"}}}` + "\n"))
		return
	case r.Method == http.MethodDelete:
		obj = &metav1.Status{Status: metav1.StatusSuccess}
	default:
		obj = fakeObject(resource, name == "" && r.Method == http.MethodGet)
	}
	mt := "application/json"
	if strings.HasPrefix(r.Header.Get("Accept"), runtime.ContentTypeProtobuf) {
		mt = runtime.ContentTypeProtobuf
	}
	info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), mt)
	out, err := runtime.Encode(scheme.Codecs.EncoderForVersion(info.Serializer, gv), obj)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", mt)
	w.WriteHeader(code)
	_, _ = w.Write(out)
}

// splitAPIPath splits /api/v1/namespaces/ns/pods/p (or
// /apis/group/v1/nodes) into its group version, resource and name.
func splitAPIPath(p string) (gv schema.GroupVersion, resource, name string) {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		gv, parts = schema.GroupVersion{Version: parts[1]}, parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		gv, parts = schema.GroupVersion{Group: parts[1], Version: parts[2]}, parts[3:]
	default:
		return schema.GroupVersion{Version: "v1"}, "", ""
	}
	if len(parts) >= 2 && parts[0] == "namespaces" && len(parts) != 2 {
		parts = parts[2:]
	}
	if len(parts) > 0 {
		resource = parts[0]
	}
	if len(parts) > 1 {
		name = parts[1]
	}
	return gv, resource, name
}

// fakeObject is an object (or a list of one) of resource.
func fakeObject(resource string, list bool) runtime.Object {
	meta := metav1.ObjectMeta{Name: "x", Namespace: "ns", UID: "u1", ResourceVersion: "7",
		Labels: map[string]string{LabelManaged: managedBy}, Annotations: map[string]string{AnnKey: "k"}}
	lm := metav1.ListMeta{ResourceVersion: "8"}
	switch resource {
	case "pods":
		p := corev1.Pod{ObjectMeta: meta, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		if list {
			return &corev1.PodList{ListMeta: lm, Items: []corev1.Pod{p}}
		}
		return &p
	case "persistentvolumeclaims":
		c := corev1.PersistentVolumeClaim{ObjectMeta: meta}
		if list {
			return &corev1.PersistentVolumeClaimList{ListMeta: lm, Items: []corev1.PersistentVolumeClaim{c}}
		}
		return &c
	case "networkpolicies":
		np := networkingv1.NetworkPolicy{ObjectMeta: meta}
		if list {
			return &networkingv1.NetworkPolicyList{ListMeta: lm, Items: []networkingv1.NetworkPolicy{np}}
		}
		return &np
	case "namespaces":
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}
	case "nodes":
		return &corev1.NodeList{ListMeta: lm, Items: []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n"}}}}
	case "storageclasses":
		return &storagev1.StorageClassList{ListMeta: lm, Items: []storagev1.StorageClass{{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Provisioner: "p"}}}
	case "runtimeclasses":
		return &nodev1.RuntimeClassList{ListMeta: lm, Items: []nodev1.RuntimeClass{{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"}}}
	case "selfsubjectaccessreviews":
		return &authorizationv1.SelfSubjectAccessReview{Status: authorizationv1.SubjectAccessReviewStatus{Allowed: true}}
	}
	return &metav1.Status{Status: metav1.StatusFailure, Message: "fakeAPI: no resource " + resource}
}

// firstEvent reads one event of a watch and stops it.
func firstEvent(w watch.Interface, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	select {
	case ev := <-w.ResultChan():
		return ev, nil
	case <-time.After(10 * time.Second):
		return nil, fmt.Errorf("no watch event")
	}
}

// TestAPIClient checks berth's client (rest.go) against client-go's
// clientset, which it replaces: for every request the backend makes, the
// same HTTP request (method, path, query, headers, body), and the same
// answer — the object decoded alike, or the same error, NotFound to
// apierrors.IsNotFound — whether the server answers with an object or a
// NotFound Status. No cluster needed.
func TestAPIClient(t *testing.T) {
	fake := &fakeAPI{}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	cfg := &rest.Config{Host: srv.URL, QPS: 50, Burst: 100, UserAgent: "berth"}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	api, err := newAPIClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "ns"
	grace, uid, timeout := int64(1), types.UID("u1"), int64(30)
	del := metav1.DeleteOptions{GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &uid}}
	list := metav1.ListOptions{LabelSelector: allSelector, ResourceVersion: "5", TimeoutSeconds: &timeout}
	patch := []byte(`{"metadata":{"annotations":{"a":"b"}}}`)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{LabelManaged: managedBy}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: containerName, Image: "busybox", Command: []string{"sleep", "infinity"}}}}}
	ssar := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Resource: "pods", Subresource: "exec"}}}
	type call func() (any, error)
	for _, op := range []struct {
		name             string
		clientset, berth call
	}{
		{"get pod",
			func() (any, error) {
				return cs.CoreV1().Pods(ns).Get(ctx, "p", metav1.GetOptions{ResourceVersion: "3"})
			},
			func() (any, error) { return api.pods(ns).Get(ctx, "p", metav1.GetOptions{ResourceVersion: "3"}) }},
		{"list pods",
			func() (any, error) { return cs.CoreV1().Pods(ns).List(ctx, list) },
			func() (any, error) { return api.pods(ns).List(ctx, list) }},
		{"create pod",
			func() (any, error) { return cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}) },
			func() (any, error) { return api.pods(ns).Create(ctx, pod, metav1.CreateOptions{}) }},
		{"delete pod",
			func() (any, error) { return nil, cs.CoreV1().Pods(ns).Delete(ctx, "p", del) },
			func() (any, error) { return nil, api.pods(ns).Delete(ctx, "p", del) }},
		{"patch pod",
			func() (any, error) {
				return cs.CoreV1().Pods(ns).Patch(ctx, "p", types.MergePatchType, patch, metav1.PatchOptions{})
			},
			func() (any, error) {
				return api.pods(ns).Patch(ctx, "p", types.MergePatchType, patch, metav1.PatchOptions{})
			}},
		{"watch pod",
			func() (any, error) { return firstEvent(cs.CoreV1().Pods(ns).Watch(ctx, list)) },
			func() (any, error) { return firstEvent(api.pods(ns).Watch(ctx, list)) }},
		{"get claim",
			func() (any, error) { return cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "c", metav1.GetOptions{}) },
			func() (any, error) { return api.claims(ns).Get(ctx, "c", metav1.GetOptions{}) }},
		{"list claims",
			func() (any, error) { return cs.CoreV1().PersistentVolumeClaims(ns).List(ctx, list) },
			func() (any, error) { return api.claims(ns).List(ctx, list) }},
		{"create claim",
			func() (any, error) {
				return cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{}, metav1.CreateOptions{})
			},
			func() (any, error) {
				return api.claims(ns).Create(ctx, &corev1.PersistentVolumeClaim{}, metav1.CreateOptions{})
			}},
		{"patch claim",
			func() (any, error) {
				return cs.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, "c", "application/merge-patch+json", patch, metav1.PatchOptions{})
			},
			func() (any, error) {
				return api.claims(ns).Patch(ctx, "c", "application/merge-patch+json", patch, metav1.PatchOptions{})
			}},
		{"delete claim",
			func() (any, error) {
				return nil, cs.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "c", metav1.DeleteOptions{})
			},
			func() (any, error) { return nil, api.claims(ns).Delete(ctx, "c", metav1.DeleteOptions{}) }},
		{"create network policy",
			func() (any, error) {
				return cs.NetworkingV1().NetworkPolicies(ns).Create(ctx, &networkingv1.NetworkPolicy{}, metav1.CreateOptions{})
			},
			func() (any, error) {
				return api.networkPolicies(ns).Create(ctx, &networkingv1.NetworkPolicy{}, metav1.CreateOptions{})
			}},
		{"list network policies",
			func() (any, error) { return cs.NetworkingV1().NetworkPolicies(ns).List(ctx, list) },
			func() (any, error) { return api.networkPolicies(ns).List(ctx, list) }},
		{"delete network policy",
			func() (any, error) {
				return nil, cs.NetworkingV1().NetworkPolicies(ns).Delete(ctx, "np", metav1.DeleteOptions{})
			},
			func() (any, error) { return nil, api.networkPolicies(ns).Delete(ctx, "np", metav1.DeleteOptions{}) }},
		{"get namespace",
			func() (any, error) { return cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}) },
			func() (any, error) { return api.namespaces().Get(ctx, ns, metav1.GetOptions{}) }},
		{"list nodes",
			func() (any, error) { return cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}) },
			func() (any, error) { return api.nodes().List(ctx, metav1.ListOptions{}) }},
		{"list storage classes",
			func() (any, error) { return cs.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{}) },
			func() (any, error) { return api.storageClasses().List(ctx, metav1.ListOptions{}) }},
		{"list runtime classes",
			func() (any, error) { return cs.NodeV1().RuntimeClasses().List(ctx, metav1.ListOptions{}) },
			func() (any, error) { return api.runtimeClasses().List(ctx, metav1.ListOptions{}) }},
		{"create self subject access review",
			func() (any, error) {
				return cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, ssar, metav1.CreateOptions{})
			},
			func() (any, error) { return api.selfSubjectAccessReviews().Create(ctx, ssar, metav1.CreateOptions{}) }},
		{"server version",
			func() (any, error) { return cs.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Raw() },
			func() (any, error) { return api.serverVersion(ctx) }},
		{"kubelet configz",
			func() (any, error) {
				return cs.CoreV1().RESTClient().Get().Resource("nodes").Name("n").SubResource("proxy").Suffix("configz").DoRaw(ctx)
			},
			func() (any, error) { return api.kubeletConfigz(ctx, "n") }},
	} {
		for _, fail := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/notfound=%v", op.name, fail), func(t *testing.T) {
				run := func(c call) (string, any, error) {
					fake.mu.Lock()
					fake.reqs, fake.fail = nil, fail
					fake.mu.Unlock()
					out, err := c()
					fake.mu.Lock()
					defer fake.mu.Unlock()
					return strings.Join(fake.reqs, "\n"), out, err
				}
				wantReq, want, wantErr := run(op.clientset)
				gotReq, got, gotErr := run(op.berth)
				if gotReq != wantReq {
					t.Errorf("request:\n got  %s\n want %s", gotReq, wantReq)
				}
				if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || apierrors.IsNotFound(gotErr) != apierrors.IsNotFound(wantErr) {
					t.Errorf("error: got %v (NotFound %v), want %v (NotFound %v)",
						gotErr, apierrors.IsNotFound(gotErr), wantErr, apierrors.IsNotFound(wantErr))
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("answer:\n got  %#v\n want %#v", got, want)
				}
				if fail && op.name != "watch pod" && !apierrors.IsNotFound(gotErr) {
					t.Errorf("error %v: not NotFound", gotErr)
				}
			})
		}
	}

	// The exec stream's URL: PodExecOptions through the package's
	// parameter codec.
	opts := &corev1.PodExecOptions{Container: containerName, Command: []string{"/bin/sh", "-c", "echo 'a b'", "x"},
		Stdin: true, Stdout: true, Stderr: true}
	want := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name("p").SubResource("exec").
		VersionedParams(opts, scheme.ParameterCodec).URL().String()
	if got := api.execRequest(ns, "p", opts).URL().String(); got != want {
		t.Errorf("exec URL:\n got  %s\n want %s", got, want)
	}
}
