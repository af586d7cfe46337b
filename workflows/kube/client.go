package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// client talks to one cluster through client-go's REST clients, one per API group the backend uses. It does
// not use client-go's typed clientset: that links, and initialises in every irs process (workers included),
// every API group of Kubernetes — measured: 3 MB more anonymous memory per process and a 25 MB larger binary.
type client struct {
	config *rest.Config
	core   *rest.RESTClient // "" v1
	apps   *rest.RESTClient // apps/v1
	disc   *rest.RESTClient // discovery.k8s.io/v1
	authz  *rest.RESTClient // authorization.k8s.io/v1
	batch  *rest.RESTClient // batch/v1: a detached run's engine
	rbac   *rest.RESTClient // rbac.authorization.k8s.io/v1: a detached run's engine's permissions
	params runtime.ParameterCodec
	// context is the kubeconfig context in use, server its API server (for messages).
	context, server string
}

// scheme holds the types of the groups the backend uses. It is made on first use, not at start-up: every irs
// process (a worker too) links this package.
var scheme = sync.OnceValue(func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, discoveryv1.AddToScheme,
		authorizationv1.AddToScheme, batchv1.AddToScheme, rbacv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err) // the generated registrations cannot fail
		}
	}
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return s
})

// Access says how to reach a cluster: a kubeconfig file (default: $KUBECONFIG, then ~/.kube/config) and a
// context in it (default: its current one); or, InCluster, the pod's own service account (a detached run's
// engine).
type Access struct {
	Kubeconfig, Context string
	InCluster           bool
}

// connect loads the kubeconfig and makes the clients. It does not contact the cluster.
func connect(a Access) (*client, error) {
	cfg, name, err := restConfig(a)
	if err != nil {
		return nil, err
	}
	return newClient(cfg, name)
}

// restConfig is the configuration of a cluster's access, and the name its messages give it.
func restConfig(a Access) (*rest.Config, string, error) {
	if a.InCluster {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, "", fmt.Errorf("in-cluster access: %w", err)
		}
		return cfg, "in-cluster", nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if a.Kubeconfig != "" {
		rules.ExplicitPath = a.Kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: a.Context})
	raw, err := cc.RawConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, "", errors.New("kubeconfig: no cluster configured (set --kubeconfig, KUBECONFIG or ~/.kube/config)")
		}
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	name := a.Context
	if name == "" {
		name = raw.CurrentContext
	}
	return cfg, name, nil
}

// newClient makes the clients of a cluster's configuration; context names it in messages.
func newClient(cfg *rest.Config, context string) (*client, error) {
	cfg.QPS, cfg.Burst = 50, 100 // a run creates and watches a few objects per service, and deletes pods at once
	cfg.Timeout = 0              // watches and port-forwards are long; every call has its own context
	cfg.UserAgent = "irs"
	c := &client{config: cfg, params: runtime.NewParameterCodec(scheme()), context: context, server: cfg.Host}
	for _, g := range []struct {
		into *(*rest.RESTClient)
		gv   schema.GroupVersion
		path string
	}{
		{&c.core, corev1.SchemeGroupVersion, "/api"},
		{&c.apps, appsv1.SchemeGroupVersion, "/apis"},
		{&c.disc, discoveryv1.SchemeGroupVersion, "/apis"},
		{&c.authz, authorizationv1.SchemeGroupVersion, "/apis"},
		{&c.batch, batchv1.SchemeGroupVersion, "/apis"},
		{&c.rbac, rbacv1.SchemeGroupVersion, "/apis"},
	} {
		gc := rest.CopyConfig(cfg)
		gv := g.gv
		gc.GroupVersion, gc.APIPath = &gv, g.path
		gc.NegotiatedSerializer = serializer.NewCodecFactory(scheme()).WithoutConversion()
		rc, err := rest.RESTClientFor(gc)
		if err != nil {
			return nil, fmt.Errorf("kubernetes client: %w", err)
		}
		*g.into = rc
	}
	return c, nil
}

// version returns the API server's version; it is also the check that the cluster can be reached.
func (c *client) version(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	body, err := c.core.Get().AbsPath("/version").DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("the API server %s (context %q) cannot be reached: %w", c.server, c.context, err)
	}
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return "", fmt.Errorf("the API server %s: /version: %w", c.server, err)
	}
	return v.GitVersion, nil
}

// metadataOnly is the Accept of a write whose answer is not read: the API server then answers with the object's
// metadata (PartialObjectMetadata) instead of the object. A log's last segment, which grows to 768 KiB and is
// added to by a merge patch every 64 ticks, came back whole each time: read, then dropped, a transient megabyte
// that grew with the run and set the engine's heap goal (soak16's allocation profile: 39 MB of such answers in 25 minutes).
const metadataOnly = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

// create makes an object of a namespaced resource (ns "" for a cluster one); out, if not nil, receives it as
// made.
func (c *client) create(ctx context.Context, rc *rest.RESTClient, ns, resource string, obj, out runtime.Object) error {
	req := rc.Post().NamespaceIfScoped(ns, ns != "").Resource(resource).Body(obj)
	if out == nil {
		return req.SetHeader("Accept", metadataOnly).Do(ctx).Error()
	}
	return req.Do(ctx).Into(out)
}

func (c *client) get(ctx context.Context, rc *rest.RESTClient, ns, resource, name string, out runtime.Object) error {
	return rc.Get().NamespaceIfScoped(ns, ns != "").Resource(resource).Name(name).Do(ctx).Into(out)
}

func (c *client) list(ctx context.Context, rc *rest.RESTClient, ns, resource string, opts metav1.ListOptions, out runtime.Object) error {
	return rc.Get().NamespaceIfScoped(ns, ns != "").Resource(resource).VersionedParams(&opts, c.params).Do(ctx).Into(out)
}

// update replaces an object; out, if not nil, receives it as stored.
func (c *client) update(ctx context.Context, rc *rest.RESTClient, ns, resource, name string, obj, out runtime.Object) error {
	req := rc.Put().NamespaceIfScoped(ns, ns != "").Resource(resource).Name(name).Body(obj)
	if out == nil {
		return req.SetHeader("Accept", metadataOnly).Do(ctx).Error()
	}
	return req.Do(ctx).Into(out)
}

// mergePatch applies a JSON merge patch to an object.
func (c *client) mergePatch(ctx context.Context, rc *rest.RESTClient, ns, resource, name string, patch []byte) error {
	return rc.Patch(types.MergePatchType).NamespaceIfScoped(ns, ns != "").Resource(resource).Name(name).
		Body(patch).SetHeader("Accept", metadataOnly).Do(ctx).Error()
}

// remove deletes an object, with a grace period (nil: the object's own) and the given propagation.
func (c *client) remove(ctx context.Context, rc *rest.RESTClient, ns, resource, name string, grace *int64) error {
	bg := metav1.DeletePropagationBackground
	opts := &metav1.DeleteOptions{GracePeriodSeconds: grace, PropagationPolicy: &bg}
	return rc.Delete().NamespaceIfScoped(ns, ns != "").Resource(resource).Name(name).Body(opts).Do(ctx).Error()
}

// raw GETs a path of the API server (e.g. a node's kubelet through the node proxy), uncompressed: a kubelet's
// few kilobytes of metrics, read every second, came gzipped, and the readers made to inflate them were 4 % of
// what a detached run's engine allocated (soak21), beside the kubelet's own work on a measured node.
func (c *client) raw(ctx context.Context, path ...string) ([]byte, error) {
	return c.core.Get().AbsPath(path...).SetHeader("Accept-Encoding", "identity").DoRaw(ctx)
}

// allowed asks the API server whether this user may do verb on a resource (group "" for core) in ns.
func (c *client) allowed(ctx context.Context, verb, group, resource, subresource, ns string) (bool, string, error) {
	return c.allowedOn(ctx, verb, group, resource, subresource, ns, "")
}

// allowedOn asks the same of one object, by name (RBAC may grant it for named objects only).
func (c *client) allowedOn(ctx context.Context, verb, group, resource, subresource, ns, name string) (bool, string, error) {
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group,
			Resource: resource, Subresource: subresource, Name: name}}}
	out := &authorizationv1.SelfSubjectAccessReview{}
	if err := c.create(ctx, c.authz, "", "selfsubjectaccessreviews", review, out); err != nil {
		return false, "", err
	}
	return out.Status.Allowed, out.Status.Reason, nil
}

// isNotFound, isAlreadyExists and isForbidden classify API errors.
func isNotFound(err error) bool      { return apierrors.IsNotFound(err) }
func isAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }
func isForbidden(err error) bool     { return apierrors.IsForbidden(err) }
func isConflict(err error) bool      { return apierrors.IsConflict(err) }
