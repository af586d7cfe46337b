package kube

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/httpstream/spdy"
	"k8s.io/apimachinery/pkg/util/remotecommand"
	k8stesting "k8s.io/client-go/testing"
)

// How the fake cluster serves the REST API: each request read into the fake clientset's action, answered by the
// reactors and the tracker, and written back as the API server writes it; watches streamed, execs run over SPDY.

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
	f.accepts = append(f.accepts, r.Header.Get("Accept"))
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
	if strings.Contains(r.Header.Get("Accept"), "as=PartialObjectMetadata") && !meta.IsListType(obj) {
		// As the API server answers one: the object's metadata only.
		m, err := meta.Accessor(obj)
		if err != nil {
			writeStatus(w, err)
			return
		}
		partial := meta.AsPartialObjectMetadata(m)
		partial.TypeMeta = metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"}
		body, _ := json.Marshal(partial)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write(body)
		return
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
		if r.Method == http.MethodPost && gvr == podsResource && rq.sub == "eviction" {
			// The API server deletes an evicted pod (when no PodDisruptionBudget forbids it: the runs have none).
			return k8stesting.NewDeleteActionWithOptions(gvr, ns, name, metav1.DeleteOptions{}), nil
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
		case req.Field == "spec.nodeName" && gvr.Resource == "pods":
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
		if p, ok := item.(*corev1.Pod); ok {
			set["spec.nodeName"] = p.Spec.NodeName
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
