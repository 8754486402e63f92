package kubernetes

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// This file is berth's own small client of the Kubernetes API, in place of
// client-go's clientset (k8s.io/client-go/kubernetes). The clientset's
// typed clients import k8s.io/client-go/kubernetes/scheme, whose init
// registers every group of k8s.io/api (56 of them), and every berth-engine
// links this package: that doubled the engine's binary, resident memory
// and start time, whatever backend it runs. This client knows only the
// groups berth uses and makes the requests the typed clients make —
// protobuf preferred, the same paths, options and bodies, one HTTP client
// and one rate limiter shared by every group — so the API server's errors
// come back as the same *apierrors.StatusError (apierrors.IsNotFound and
// the rest work as before). TestImports keeps the clientset out.

// apiScheme is the scheme of the groups berth uses: core/v1 (pods, volume
// claims, namespaces, nodes, pods/exec options), networking/v1 (network
// policies), authorization/v1 (self subject access reviews), storage/v1
// (storage classes) and node/v1 (runtime classes), with metav1's options
// and Status. Its codecs decode the API server's answers (objects, watch
// events, Status errors); its parameter codec turns options (GetOptions,
// ListOptions, PodExecOptions, ...) into query parameters.
type apiScheme struct {
	scheme *runtime.Scheme
	codecs serializer.CodecFactory
	params runtime.ParameterCodec
}

// schemeGroups add the types of the groups berth uses to a scheme.
var schemeGroups = []func(*runtime.Scheme) error{
	corev1.AddToScheme,
	networkingv1.AddToScheme,
	authorizationv1.AddToScheme,
	storagev1.AddToScheme,
	nodev1.AddToScheme,
}

// theScheme builds the scheme on first use, not at init: a berth-engine
// that never talks to a cluster does not pay for it.
var theScheme = sync.OnceValue(func() *apiScheme {
	s := runtime.NewScheme()
	// As client-go's scheme does: options and Status under plain "v1".
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	for _, add := range schemeGroups {
		if err := add(s); err != nil {
			panic(fmt.Sprintf("kubernetes: register API types: %v", err)) // a programming error, as utilruntime.Must
		}
	}
	return &apiScheme{scheme: s, codecs: serializer.NewCodecFactory(s), params: runtime.NewParameterCodec(s)}
})

// parameterCodec encodes options into query parameters (VersionedParams),
// for the exec stream's PodExecOptions among others.
func parameterCodec() runtime.ParameterCodec { return theScheme().params }

// apiClient holds one REST client per API group version berth uses. They
// share one HTTP client (one connection pool, one TLS session) and one
// rate limiter, as the clientset's do.
type apiClient struct {
	core          *rest.RESTClient // "" v1, at /api/v1 (also /version and the node proxy)
	networking    *rest.RESTClient // networking.k8s.io/v1
	authorization *rest.RESTClient // authorization.k8s.io/v1
	storage       *rest.RESTClient // storage.k8s.io/v1
	node          *rest.RESTClient // node.k8s.io/v1
}

// newAPIClient makes the REST clients for cfg, configured as
// kubernetes.NewForConfig configures the clientset's. Its errors say what
// failed; the caller names the cluster.
func newAPIClient(cfg *rest.Config) (*apiClient, error) {
	shared := *cfg
	if shared.UserAgent == "" {
		shared.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	httpClient, err := rest.HTTPClientFor(&shared)
	if err != nil {
		return nil, fmt.Errorf("HTTP client: %w", err)
	}
	if shared.RateLimiter == nil && shared.QPS > 0 {
		if shared.Burst <= 0 {
			return nil, fmt.Errorf("burst %d: must be above 0 when QPS is set", shared.Burst)
		}
		shared.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(shared.QPS, shared.Burst)
	}
	s := theScheme()
	negotiated := rest.CodecFactoryForGeneratedClient(s.scheme, s.codecs).WithoutConversion()
	var c apiClient
	for _, g := range []struct {
		client  **rest.RESTClient
		gv      schema.GroupVersion
		apiPath string
	}{
		{&c.core, corev1.SchemeGroupVersion, "/api"},
		{&c.networking, networkingv1.SchemeGroupVersion, "/apis"},
		{&c.authorization, authorizationv1.SchemeGroupVersion, "/apis"},
		{&c.storage, storagev1.SchemeGroupVersion, "/apis"},
		{&c.node, nodev1.SchemeGroupVersion, "/apis"},
	} {
		*g.client, err = groupClient(&shared, httpClient, g.gv, g.apiPath, negotiated)
		if err != nil {
			return nil, err
		}
	}
	return &c, nil
}

// groupClient is the REST client of one API group version.
func groupClient(cfg *rest.Config, httpClient *http.Client, gv schema.GroupVersion, apiPath string,
	codec runtime.NegotiatedSerializer) (*rest.RESTClient, error) {
	c := *cfg
	c.GroupVersion = &gv
	c.APIPath = apiPath
	c.NegotiatedSerializer = codec
	rc, err := rest.RESTClientForConfigAndClient(&c, httpClient)
	if err != nil {
		return nil, fmt.Errorf("REST client for %s: %w", gv, err)
	}
	return rc, nil
}

// pods are the pods of namespace.
func (a *apiClient) pods(namespace string) apiCollection[*corev1.Pod, *corev1.PodList] {
	return newCollection[corev1.Pod, corev1.PodList](a.core, "pods", namespace)
}

// claims are the persistent volume claims of namespace.
func (a *apiClient) claims(namespace string) apiCollection[*corev1.PersistentVolumeClaim, *corev1.PersistentVolumeClaimList] {
	return newCollection[corev1.PersistentVolumeClaim, corev1.PersistentVolumeClaimList](a.core, "persistentvolumeclaims", namespace)
}

// resourceQuotas are the resource quotas of namespace.
func (a *apiClient) resourceQuotas(namespace string) apiCollection[*corev1.ResourceQuota, *corev1.ResourceQuotaList] {
	return newCollection[corev1.ResourceQuota, corev1.ResourceQuotaList](a.core, "resourcequotas", namespace)
}

// networkPolicies are the network policies of namespace.
func (a *apiClient) networkPolicies(namespace string) apiCollection[*networkingv1.NetworkPolicy, *networkingv1.NetworkPolicyList] {
	return newCollection[networkingv1.NetworkPolicy, networkingv1.NetworkPolicyList](a.networking, "networkpolicies", namespace)
}

// namespaces are the cluster's namespaces (berth only reads its own).
func (a *apiClient) namespaces() apiResource[*corev1.Namespace] {
	return newResource[corev1.Namespace](a.core, "namespaces", "")
}

// nodes are the cluster's nodes.
func (a *apiClient) nodes() apiCollection[*corev1.Node, *corev1.NodeList] {
	return newCollection[corev1.Node, corev1.NodeList](a.core, "nodes", "")
}

// storageClasses are the cluster's storage classes.
func (a *apiClient) storageClasses() apiCollection[*storagev1.StorageClass, *storagev1.StorageClassList] {
	return newCollection[storagev1.StorageClass, storagev1.StorageClassList](a.storage, "storageclasses", "")
}

// runtimeClasses are the cluster's runtime classes.
func (a *apiClient) runtimeClasses() apiCollection[*nodev1.RuntimeClass, *nodev1.RuntimeClassList] {
	return newCollection[nodev1.RuntimeClass, nodev1.RuntimeClassList](a.node, "runtimeclasses", "")
}

// selfSubjectAccessReviews ask the API server what the client's own user
// may do.
func (a *apiClient) selfSubjectAccessReviews() apiResource[*authorizationv1.SelfSubjectAccessReview] {
	return newResource[authorizationv1.SelfSubjectAccessReview](a.authorization, "selfsubjectaccessreviews", "")
}

// serverVersion reads the API server's /version (a JSON version.Info),
// as the clientset's discovery client does.
func (a *apiClient) serverVersion(ctx context.Context) ([]byte, error) {
	return a.core.Get().AbsPath("/version").Do(ctx).Raw()
}

// kubeletConfigz reads node's kubelet configuration (JSON) through the
// API server's node proxy, which needs get nodes/proxy.
func (a *apiClient) kubeletConfigz(ctx context.Context, node string) ([]byte, error) {
	return a.core.Get().Resource("nodes").Name(node).SubResource("proxy").Suffix("configz").DoRaw(ctx)
}

// execRequest is the pods/exec request of pod with opts, for a
// remotecommand executor (which dials its URL itself).
func (a *apiClient) execRequest(namespace, pod string, opts *corev1.PodExecOptions) *rest.Request {
	return a.core.Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("exec").
		VersionedParams(opts, parameterCodec())
}

// apiObject is a pointer to one of k8s.io/api's types: what a resource's
// requests send and decode into.
type apiObject[O any] interface {
	*O
	runtime.Object
}

// apiResource is one kind of object, in one namespace or cluster-scoped: the
// requests client-go's generated typed client makes for it
// (k8s.io/client-go/gentype), with protobuf preferred as the typed
// clients prefer it for every type berth uses. Errors are the REST
// client's, unwrapped, as the typed clients return them: callers add the
// context (cluster.wrap).
type apiResource[T runtime.Object] struct {
	client    *rest.RESTClient
	name      string // the plural in the URL: "pods"
	namespace string // "" for a cluster-scoped resource
	newObject func() T
}

// apiCollection is an apiResource that can also be listed.
type apiCollection[T, L runtime.Object] struct {
	apiResource[T]
	newList func() L
}

// newResource is the resource name (plural) of type O in namespace ("" when
// cluster-scoped), served by c.
func newResource[O any, T apiObject[O]](c *rest.RESTClient, name, namespace string) apiResource[T] {
	return apiResource[T]{client: c, name: name, namespace: namespace, newObject: func() T { return T(new(O)) }}
}

// newCollection is newResource with its list type LO.
func newCollection[O, LO any, T apiObject[O], L apiObject[LO]](c *rest.RESTClient, name, namespace string) apiCollection[T, L] {
	return apiCollection[T, L]{apiResource: newResource[O, T](c, name, namespace), newList: func() L { return L(new(LO)) }}
}

// on points req (r.client.Get(), .Post(), ...) at the resource, as the
// typed clients do.
func (r apiResource[T]) on(req *rest.Request) *rest.Request {
	return req.UseProtobufAsDefault().NamespaceIfScoped(r.namespace, r.namespace != "").Resource(r.name)
}

// Get reads the object name.
func (r apiResource[T]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	out := r.newObject()
	err := r.on(r.client.Get()).Name(name).VersionedParams(&opts, parameterCodec()).Do(ctx).Into(out)
	return out, err
}

// Create creates obj and returns it as the API server stored it.
func (r apiResource[T]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	out := r.newObject()
	err := r.on(r.client.Post()).VersionedParams(&opts, parameterCodec()).Body(obj).Do(ctx).Into(out)
	return out, err
}

// Delete deletes the object name.
func (r apiResource[T]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return r.on(r.client.Delete()).Name(name).Body(&opts).Do(ctx).Error()
}

// Patch applies a patch of type pt to the object name and returns the
// result.
func (r apiResource[T]) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions) (T, error) {
	out := r.newObject()
	err := r.on(r.client.Patch(pt)).Name(name).
		VersionedParams(&opts, parameterCodec()).Body(data).Do(ctx).Into(out)
	return out, err
}

// Watch watches the objects opts selects.
func (r apiResource[T]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return r.on(r.client.Get()).VersionedParams(&opts, parameterCodec()).Timeout(timeoutOf(opts)).Watch(ctx)
}

// List lists the objects opts selects.
func (c apiCollection[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	out := c.newList()
	err := c.on(c.client.Get()).VersionedParams(&opts, parameterCodec()).Timeout(timeoutOf(opts)).Do(ctx).Into(out)
	return out, err
}

// timeoutOf is a list's or a watch's client-side timeout: its
// TimeoutSeconds, else none.
func timeoutOf(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}
