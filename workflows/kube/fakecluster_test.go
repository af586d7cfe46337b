package kube

import (
	"context"
	"fmt"
	"maps"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
)

// fakeCluster is a Kubernetes API server for unit tests: the part of the REST API the backend uses, served over
// HTTP from client-go's object tracker (the store behind its fake clientset), each request turned into the fake
// clientset's action and answered by its own reaction (k8stesting.ObjectReaction). The backend's real client
// talks to it, so requests, encoding and errors go the way they go with a cluster.
//
// It is an API server and nothing more. No controller runs: no ReplicaSet makes pods, no kubelet readies them,
// no EndpointSlice lists them; a test plays those parts by writing to the tracker. A deletion is at once (no
// grace period, no finalizers), as with the fake clientset. What an API server adds on create is added (a
// creation time, a uid, a Service's ClusterIP). Anything else is not served: answered 404 with a Status, and
// the test fails.
type fakeCluster struct {
	k8stesting.ObjectTracker
	// kubeconfig's current context is this cluster.
	kubeconfig string

	codecs serializer.CodecFactory
	params runtime.ParameterCodec
	done   chan struct{} // closed as the test ends: open watches and execs return

	mu       sync.Mutex
	actions  []k8stesting.Action
	accepts  []string             // each action's request's Accept header
	reactors []k8stesting.Reactor // tried in order before the tracker; prependReactor puts a test's first
	unserved []string
	watches  map[string]int // open watches by resource
	changed  chan struct{}  // closed, and replaced, whenever watches changes
	ips      int            // ClusterIPs given
	// exec runs a command in a pod's container (pods/exec): what it prints and its exit code.
	exec func(pod, container string, cmd []string) (string, int)
}

// fakeResource is a resource the fake serves.
type fakeResource struct {
	kind       string
	namespaced bool
}

// fakeResources are the resources the backend uses.
var fakeResources = map[schema.GroupVersionResource]fakeResource{
	{Version: "v1", Resource: "namespaces"}:                                              {"Namespace", false},
	{Version: "v1", Resource: "nodes"}:                                                   {"Node", false},
	{Version: "v1", Resource: "pods"}:                                                    {"Pod", true},
	{Version: "v1", Resource: "services"}:                                                {"Service", true},
	{Version: "v1", Resource: "configmaps"}:                                              {"ConfigMap", true},
	{Version: "v1", Resource: "secrets"}:                                                 {"Secret", true},
	{Version: "v1", Resource: "events"}:                                                  {"Event", true},
	{Version: "v1", Resource: "serviceaccounts"}:                                         {"ServiceAccount", true},
	{Group: "apps", Version: "v1", Resource: "deployments"}:                              {"Deployment", true},
	{Group: "apps", Version: "v1", Resource: "daemonsets"}:                               {"DaemonSet", true},
	{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}:               {"EndpointSlice", true},
	{Group: "authorization.k8s.io", Version: "v1", Resource: "selfsubjectaccessreviews"}: {"SelfSubjectAccessReview", false},
}

// The resources the tests read and write in the tracker.
var (
	namespacesResource     = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	podsResource           = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	servicesResource       = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	configmapsResource     = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	deploymentsResource    = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	endpointSlicesResource = schema.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}
)

// newFakeCluster serves a fake cluster holding objs and returns a client of it, made by connect from a
// kubeconfig (as the backend makes its own). Everything it started ends with the test.
func newFakeCluster(t *testing.T, objs ...runtime.Object) (*client, *fakeCluster) {
	t.Helper()
	codecs := serializer.NewCodecFactory(scheme())
	f := &fakeCluster{
		ObjectTracker: k8stesting.NewObjectTracker(scheme(), codecs.UniversalDecoder()),
		codecs:        codecs,
		params:        runtime.NewParameterCodec(scheme()),
		done:          make(chan struct{}),
		watches:       map[string]int{},
		changed:       make(chan struct{}),
	}
	f.reactors = []k8stesting.Reactor{
		&k8stesting.SimpleReactor{Verb: "create", Resource: "*", Reaction: f.admit},
		&k8stesting.SimpleReactor{Verb: "create", Resource: "selfsubjectaccessreviews", Reaction: allow},
	}
	for _, o := range objs {
		if err := f.Add(o); err != nil {
			t.Fatalf("fake cluster: add %T: %v", o, err)
		}
	}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(f.done) }) // first: srv.Close waits for the open watches
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.unserved) > 0 {
			t.Errorf("the fake cluster was asked what it does not serve:\n  %s", strings.Join(f.unserved, "\n  "))
		}
	})
	f.kubeconfig = kubeconfigFor(t, srv.URL)
	c, err := connect(Access{Kubeconfig: f.kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	return c, f
}

// prependReactor makes the fake answer the actions of verb on resource ("*": any) with fn first, as the fake
// clientset's PrependReactor does (fn returning handled false passes them on).
func (f *fakeCluster) prependReactor(verb, resource string, fn k8stesting.ReactionFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reactors = slices.Insert(f.reactors, 0, k8stesting.Reactor(&k8stesting.SimpleReactor{Verb: verb, Resource: resource, Reaction: fn}))
}

// Actions returns the requests served so far, as the fake clientset's actions.
func (f *fakeCluster) Actions() []k8stesting.Action {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.actions)
}

// Accepts returns the Accept header of each request served so far, as Actions.
func (f *fakeCluster) Accepts() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.accepts)
}

// actionsOf returns the actions of verb on resource.
func (f *fakeCluster) actionsOf(verb, resource string) []k8stesting.Action {
	var out []k8stesting.Action
	for _, a := range f.Actions() {
		if a.Matches(verb, resource) {
			out = append(out, a)
		}
	}
	return out
}

// awaitWatches waits until each resource has n watches open: once it has one, every change made after reaches
// the watcher.
func (f *fakeCluster) awaitWatches(t *testing.T, n int, resources ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // not t.Context(): cleanups wait too
	defer cancel()
	for {
		f.mu.Lock()
		ok := true
		for _, r := range resources {
			ok = ok && f.watches[r] == n
		}
		changed, open := f.changed, maps.Clone(f.watches)
		f.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("fake cluster: want %d watches of each of %v open, have %v", n, resources, open)
		}
	}
}

func (f *fakeCluster) watching(resource string, delta int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watches[resource] += delta
	close(f.changed)
	f.changed = make(chan struct{})
}

// admit adds to a created object what the API server adds: a creation time and uid, a Service's ClusterIP.
func (f *fakeCluster) admit(a k8stesting.Action) (bool, runtime.Object, error) {
	obj := a.(k8stesting.CreateAction).GetObject()
	m, err := meta.Accessor(obj)
	if err != nil {
		return false, nil, nil
	}
	if ts := m.GetCreationTimestamp(); ts.IsZero() {
		m.SetCreationTimestamp(metav1.Now())
	}
	if m.GetUID() == "" {
		m.SetUID(types.UID(fmt.Sprintf("uid-%s-%s", a.GetResource().Resource, m.GetName())))
	}
	if svc, ok := obj.(*corev1.Service); ok && svc.Spec.ClusterIP == "" {
		f.mu.Lock()
		f.ips++
		svc.Spec.ClusterIP = fmt.Sprintf("10.96.0.%d", f.ips)
		f.mu.Unlock()
	}
	return false, nil, nil
}

// allow answers every SelfSubjectAccessReview: allowed (a test denies with prependReactor).
func allow(a k8stesting.Action) (bool, runtime.Object, error) {
	review := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
	review.Status.Allowed = true
	return true, review, nil
}

// TestFakeCluster: the fake answers the backend's client as an API server would, and what it does not serve
// is an error that fails the test.
func TestFakeCluster(t *testing.T) {
	ctx := t.Context()
	c, fc := newFakeCluster(t,
		&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e1", Namespace: "run"}, InvolvedObject: corev1.ObjectReference{Name: "api-1"}},
		&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e2", Namespace: "run"}, InvolvedObject: corev1.ObjectReference{Name: "db-1"}})

	for _, name := range []string{"api-1", "db-1"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "run", Labels: map[string]string{LabelService: name[:len(name)-2]}}}
		if err := c.create(ctx, c.core, "run", "pods", p, &corev1.Pod{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.create(ctx, c.core, "run", "pods", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "api-1"}}, &corev1.Pod{}); !isAlreadyExists(err) {
		t.Errorf("create an existing pod: %v, want AlreadyExists", err)
	}
	got := &corev1.Pod{}
	if err := c.get(ctx, c.core, "run", "pods", "api-1", got); err != nil || got.CreationTimestamp.IsZero() || got.UID == "" {
		t.Errorf("get the created pod: %v, created %v, uid %q: want a creation time and a uid", err, got.CreationTimestamp, got.UID)
	}
	pods := &corev1.PodList{}
	if err := c.list(ctx, c.core, "run", "pods", metav1.ListOptions{LabelSelector: LabelService + "=api"}, pods); err != nil ||
		len(pods.Items) != 1 || pods.Items[0].Name != "api-1" {
		t.Errorf("list pods of service api: %v, %d pods, want api-1 only", err, len(pods.Items))
	}
	events := &corev1.EventList{}
	if err := c.list(ctx, c.core, "run", "events", metav1.ListOptions{FieldSelector: "involvedObject.name=db-1"}, events); err != nil ||
		len(events.Items) != 1 || events.Items[0].Name != "e2" {
		t.Errorf("list the events of db-1: %v, %d events, want e2 only", err, len(events.Items))
	}
	if err := c.list(ctx, c.core, "run", "pods", metav1.ListOptions{FieldSelector: "status.phase=Running"}, pods); !apierrors.IsBadRequest(err) {
		t.Errorf("list with a field selector the fake does not know: %v, want BadRequest", err)
	}

	svc := &corev1.Service{}
	if err := c.create(ctx, c.core, "run", "services", &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "api"}}, svc); err != nil || svc.Spec.ClusterIP != "10.96.0.1" {
		t.Errorf("create a Service: %v, ClusterIP %q, want 10.96.0.1", err, svc.Spec.ClusterIP)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "api-worker"}, Data: map[string]string{"worker.json": "{}", "keep": "x"}}
	if err := c.create(ctx, c.core, "run", "configmaps", cm, &corev1.ConfigMap{}); err != nil {
		t.Fatal(err)
	}
	if err := c.mergePatch(ctx, c.core, "run", "configmaps", "api-worker", []byte(`{"data":{"worker.json":"{\"name\":\"api\"}"}}`)); err != nil {
		t.Fatal(err)
	}
	if err := c.get(ctx, c.core, "run", "configmaps", "api-worker", cm); err != nil || cm.Data["worker.json"] != `{"name":"api"}` || cm.Data["keep"] != "x" {
		t.Errorf("merge-patched ConfigMap: %v, data %v", err, cm.Data)
	}

	if err := c.remove(ctx, c.core, "run", "pods", "api-1", ptr(int64(0))); err != nil {
		t.Fatal(err)
	}
	if err := c.remove(ctx, c.core, "run", "pods", "api-1", nil); !isNotFound(err) {
		t.Errorf("delete a deleted pod: %v, want NotFound", err)
	}
	deletes := fc.actionsOf("delete", "pods")
	if len(deletes) != 2 || *deletes[0].(k8stesting.DeleteAction).GetDeleteOptions().GracePeriodSeconds != 0 {
		t.Errorf("delete actions %v: want two, the first with a grace period of 0", deletes)
	}

	err := c.get(ctx, c.core, "", "persistentvolumes", "pv1", &corev1.PersistentVolume{})
	if !isNotFound(err) || !strings.Contains(err.Error(), "does not serve GET /api/v1/persistentvolumes/pv1") {
		t.Errorf("get a persistent volume: %v, want NotFound saying the fake does not serve it", err)
	}
	fc.mu.Lock()
	if len(fc.unserved) != 1 {
		t.Errorf("unserved requests %v: want the persistent volume's", fc.unserved)
	}
	fc.unserved = nil // served as it should be: the test goes on
	fc.mu.Unlock()
}
