package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/httpstream/spdy"
	"k8s.io/apimachinery/pkg/util/remotecommand"
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

// fakeRequest is what a request's path names.
type fakeRequest struct {
	gvr           schema.GroupVersionResource
	res           fakeResource
	ns, name, sub string
	valid         bool
}

// parseFakePath reads /api/v1/[namespaces/<ns>/]<resource>[/<name>[/<subresource>]], and /apis/<group>/<version>/...
// alike; valid says the fake serves the resource, in a namespace if it is namespaced.
func parseFakePath(path string) fakeRequest {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var rq fakeRequest
	var gv schema.GroupVersion
	switch {
	case len(parts) >= 3 && parts[0] == "api" && parts[1] == "v1":
		gv, parts = schema.GroupVersion{Version: "v1"}, parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		gv, parts = schema.GroupVersion{Group: parts[1], Version: parts[2]}, parts[3:]
	default:
		return rq
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		rq.ns, parts = parts[1], parts[2:]
	}
	if len(parts) > 3 {
		return rq
	}
	rq.gvr = gv.WithResource(parts[0])
	if len(parts) > 1 {
		rq.name = parts[1]
	}
	if len(parts) > 2 {
		rq.sub = parts[2]
	}
	rq.res, rq.valid = fakeResources[rq.gvr]
	// A namespaced resource is served in a namespace, or listed and watched across all; a cluster one outside.
	if rq.res.namespaced && rq.ns == "" && rq.name != "" || !rq.res.namespaced && rq.ns != "" {
		rq.valid = false
	}
	return rq
}

// ServeHTTP serves the API.
func (f *fakeCluster) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/version" {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"major": "1", "minor": "33", "gitVersion": "v1.33.0-fake"}`)
		return
	}
	rq := parseFakePath(r.URL.Path)
	a, err := f.action(r, rq)
	switch {
	case err != nil:
		writeStatus(w, apierrors.NewBadRequest(err.Error()))
		return
	case a == nil:
		f.mu.Lock()
		f.unserved = append(f.unserved, r.Method+" "+r.URL.String())
		f.mu.Unlock()
		writeStatus(w, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusNotFound,
			Reason: metav1.StatusReasonNotFound, Message: "the fake cluster does not serve " + r.Method + " " + r.URL.Path}})
		return
	}
	f.mu.Lock()
	f.actions = append(f.actions, a)
	f.mu.Unlock()
	switch a := a.(type) {
	case k8stesting.WatchActionImpl:
		f.serveWatch(w, r, a)
		return
	case k8stesting.CreateActionImpl:
		if a.GetSubresource() == "exec" {
			f.serveExec(w, r, a)
			return
		}
	}
	obj, err := f.react(a)
	if err != nil {
		writeStatus(w, err)
		return
	}
	if l, ok := a.(k8stesting.ListActionImpl); ok {
		if obj, err = filterList(obj, l.ListRestrictions); err != nil {
			writeStatus(w, err)
			return
		}
	}
	if obj == nil { // a deletion
		obj = &metav1.Status{Status: metav1.StatusSuccess}
	}
	code := http.StatusOK
	if a.GetVerb() == "create" {
		code = http.StatusCreated
	}
	f.write(w, code, rq.gvr.GroupVersion(), obj)
}

// action turns a request into the fake clientset's action (nil: not served).
func (f *fakeCluster) action(r *http.Request, rq fakeRequest) (k8stesting.Action, error) {
	if !rq.valid {
		return nil, nil
	}
	gvr, ns, name := rq.gvr, rq.ns, rq.name
	if rq.res.namespaced && ns == "" && r.Method != http.MethodGet {
		return nil, nil // across namespaces, lists and watches only
	}
	if rq.sub != "" {
		if r.Method == http.MethodPost && gvr == podsResource && rq.sub == "exec" {
			q := r.URL.Query()
			opts := &corev1.PodExecOptions{Container: q.Get("container"), Command: q["command"],
				Stdout: q.Get("stdout") == "true", Stderr: q.Get("stderr") == "true", Stdin: q.Get("stdin") == "true"}
			return k8stesting.NewCreateSubresourceAction(gvr, name, "exec", ns, opts), nil
		}
		return nil, nil
	}
	switch {
	case r.Method == http.MethodGet && name != "":
		return k8stesting.NewGetAction(gvr, ns, name), nil
	case r.Method == http.MethodGet:
		var opts metav1.ListOptions
		if err := f.params.DecodeParameters(r.URL.Query(), gvr.GroupVersion(), &opts); err != nil {
			return nil, err
		}
		if _, err := labels.Parse(opts.LabelSelector); err != nil {
			return nil, err
		}
		if err := supportedFields(rq.gvr, opts.FieldSelector); err != nil {
			return nil, err
		}
		if opts.Watch {
			return k8stesting.NewWatchActionWithOptions(gvr, ns, opts), nil
		}
		return k8stesting.NewListActionWithOptions(gvr, gvr.GroupVersion().WithKind(rq.res.kind), ns, opts), nil
	case r.Method == http.MethodPost && name == "":
		obj, err := f.decode(r, rq)
		if err != nil {
			return nil, err
		}
		return k8stesting.NewCreateAction(gvr, ns, obj), nil
	case r.Method == http.MethodPut && name != "":
		obj, err := f.decode(r, rq)
		if err != nil {
			return nil, err
		}
		if m, err := meta.Accessor(obj); err != nil || m.GetName() != name {
			return nil, fmt.Errorf("the name of the object sent does not match the name on the URL (%s)", name)
		}
		return k8stesting.NewUpdateAction(gvr, ns, obj), nil
	case r.Method == http.MethodPatch && name != "":
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		return k8stesting.NewPatchAction(gvr, ns, name, types.PatchType(r.Header.Get("Content-Type")), body), nil
	case r.Method == http.MethodDelete && name != "":
		var opts metav1.DeleteOptions
		if body, err := io.ReadAll(r.Body); err != nil {
			return nil, err
		} else if len(body) > 0 {
			if err := json.Unmarshal(body, &opts); err != nil {
				return nil, err
			}
		}
		return k8stesting.NewDeleteActionWithOptions(gvr, ns, name, opts), nil
	}
	return nil, nil
}

// decode reads a request's object, which must be of the resource's kind.
func (f *fakeCluster) decode(r *http.Request, rq fakeRequest) (runtime.Object, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	obj, gvk, err := f.codecs.UniversalDeserializer().Decode(body, nil, nil)
	if err != nil {
		return nil, err
	}
	if gvk.Kind != rq.res.kind || gvk.GroupVersion() != rq.gvr.GroupVersion() {
		return nil, fmt.Errorf("a %s sent to %s", gvk, rq.gvr)
	}
	return obj, nil
}

// react answers an action: the reactors first, then the tracker.
func (f *fakeCluster) react(a k8stesting.Action) (runtime.Object, error) {
	f.mu.Lock()
	reactors := slices.Clone(f.reactors)
	f.mu.Unlock()
	for _, r := range reactors {
		if !r.Handles(a) {
			continue
		}
		if handled, obj, err := r.React(a); handled {
			return obj, err
		}
	}
	_, obj, err := k8stesting.ObjectReaction(f.ObjectTracker)(a)
	return obj, err
}

// supportedFields checks a field selector: the fields the API server supports for every kind, and an Event's
// involvedObject.name (the backend's only other).
func supportedFields(gvr schema.GroupVersionResource, selector string) error {
	sel, err := fields.ParseSelector(selector)
	if err != nil {
		return err
	}
	for _, req := range sel.Requirements() {
		switch {
		case req.Field == "metadata.name" || req.Field == "metadata.namespace":
		case req.Field == "involvedObject.name" && gvr.Resource == "events":
		default:
			return fmt.Errorf("field label not supported: %s", req.Field)
		}
	}
	return nil
}

// filterList keeps the items a list's selectors match (the tracker lists everything).
func filterList(list runtime.Object, lr k8stesting.ListRestrictions) (runtime.Object, error) {
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	var keep []runtime.Object
	for _, item := range items {
		m, err := meta.Accessor(item)
		if err != nil {
			return nil, err
		}
		set := fields.Set{"metadata.name": m.GetName(), "metadata.namespace": m.GetNamespace()}
		if e, ok := item.(*corev1.Event); ok {
			set["involvedObject.name"] = e.InvolvedObject.Name
		}
		if lr.Labels.Matches(labels.Set(m.GetLabels())) && lr.Fields.Matches(set) {
			keep = append(keep, item)
		}
	}
	if err := meta.SetList(list, keep); err != nil {
		return nil, err
	}
	return list, nil
}

// serveWatch streams the tracker's changes to a resource in a namespace (or all), until the client goes or the
// test ends. It serves whole watches only (no selector: the backend's informers watch everything).
func (f *fakeCluster) serveWatch(w http.ResponseWriter, r *http.Request, a k8stesting.WatchActionImpl) {
	if !a.WatchRestrictions.Labels.Empty() || !a.WatchRestrictions.Fields.Empty() {
		writeStatus(w, apierrors.NewBadRequest("the fake cluster serves watches without selectors only"))
		return
	}
	wi, err := f.Watch(a.GetResource(), a.GetNamespace())
	if err != nil {
		writeStatus(w, err)
		return
	}
	defer wi.Stop()
	f.watching(a.GetResource().Resource, 1)
	defer f.watching(a.GetResource().Resource, -1)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	flusher := w.(http.Flusher)
	flusher.Flush()
	gv := a.GetResource().GroupVersion()
	for {
		select {
		case ev, ok := <-wi.ResultChan():
			if !ok {
				return
			}
			raw, err := runtime.Encode(f.encoder(gv), ev.Object)
			if err != nil {
				return
			}
			line, err := json.Marshal(metav1.WatchEvent{Type: string(ev.Type), Object: runtime.RawExtension{Raw: raw}})
			if err != nil {
				return
			}
			if _, err := w.Write(append(line, '\n')); err != nil {
				return
			}
			flusher.Flush()
		case <-r.Context().Done():
			return
		case <-f.done:
			return
		}
	}
}

// serveExec runs a command in a pod's container (f.exec) over the exec protocol the kubelet speaks
// (v4.channel.k8s.io, SPDY): its output on stdout, a non-zero exit code as the kubelet reports it.
func (f *fakeCluster) serveExec(w http.ResponseWriter, r *http.Request, a k8stesting.CreateActionImpl) {
	f.mu.Lock()
	run := f.exec
	f.mu.Unlock()
	opts := a.GetObject().(*corev1.PodExecOptions)
	if run == nil || opts.Stdin || opts.TTY {
		writeStatus(w, apierrors.NewBadRequest("the fake cluster runs no command here"))
		return
	}
	if _, err := f.Get(podsResource, a.GetNamespace(), a.Name); err != nil {
		writeStatus(w, err)
		return
	}
	if _, err := httpstream.Handshake(r, w, []string{remotecommand.StreamProtocolV4Name}); err != nil {
		return // Handshake answered
	}
	type opened struct {
		s     httpstream.Stream
		reply <-chan struct{}
	}
	streams := make(chan opened, 4)
	conn := spdy.NewResponseUpgrader().UpgradeResponse(w, r, func(s httpstream.Stream, reply <-chan struct{}) error {
		streams <- opened{s, reply}
		return nil
	})
	if conn == nil {
		return
	}
	defer conn.Close()
	byType := map[string]httpstream.Stream{}
	want := 1 // the error stream, and the output streams asked for
	for _, asked := range []bool{opts.Stdout, opts.Stderr} {
		if asked {
			want++
		}
	}
	timeout := time.After(10 * time.Second)
	for len(byType) < want {
		select {
		case o := <-streams:
			<-o.reply
			byType[o.s.Headers().Get(corev1.StreamType)] = o.s
		case <-timeout:
			return
		case <-f.done:
			return
		}
	}
	out, code := run(a.Name, opts.Container, opts.Command)
	if s := byType[corev1.StreamTypeStdout]; s != nil {
		_, _ = io.WriteString(s, out)
	}
	if code != 0 {
		status := metav1.Status{Status: metav1.StatusFailure, Reason: remotecommand.NonZeroExitCodeReason,
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: remotecommand.ExitCodeCauseType, Message: strconv.Itoa(code)}}},
			Message: fmt.Sprintf("command terminated with non-zero exit code: %d", code)}
		_ = json.NewEncoder(byType[corev1.StreamTypeError]).Encode(status)
	}
	for _, s := range byType {
		_ = s.Close()
	}
	select { // the client closes the connection once it has read everything
	case <-conn.CloseChan():
	case <-f.done:
	}
}

// encoder encodes objects of a group version as JSON, with their kind.
func (f *fakeCluster) encoder(gv schema.GroupVersion) runtime.Encoder {
	info, _ := runtime.SerializerInfoForMediaType(f.codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	return f.codecs.WithoutConversion().EncoderForVersion(info.Serializer, gv)
}

func (f *fakeCluster) write(w http.ResponseWriter, code int, gv schema.GroupVersion, obj runtime.Object) {
	if s, ok := obj.(*metav1.Status); ok {
		writeJSONStatus(w, code, *s)
		return
	}
	body, err := runtime.Encode(f.encoder(gv), obj)
	if err != nil {
		writeStatus(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// writeStatus answers an error as the API server does: a Status, with its code.
func writeStatus(w http.ResponseWriter, err error) {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		se = apierrors.NewInternalError(err)
	}
	s := se.Status()
	writeJSONStatus(w, int(s.Code), s)
}

func writeJSONStatus(w http.ResponseWriter, code int, s metav1.Status) {
	if code == 0 {
		code = http.StatusOK
	}
	s.Kind, s.APIVersion = "Status", "v1"
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(s)
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
	if err := c.list(ctx, c.core, "run", "pods", metav1.ListOptions{FieldSelector: "spec.nodeName=n1"}, pods); !apierrors.IsBadRequest(err) {
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

	err := c.get(ctx, c.core, "", "nodes", "n1", &corev1.Node{})
	if !isNotFound(err) || !strings.Contains(err.Error(), "does not serve GET /api/v1/nodes/n1") {
		t.Errorf("get a node: %v, want NotFound saying the fake does not serve it", err)
	}
	fc.mu.Lock()
	if len(fc.unserved) != 1 {
		t.Errorf("unserved requests %v: want the node's", fc.unserved)
	}
	fc.unserved = nil // served as it should be: the test goes on
	fc.mu.Unlock()
}
