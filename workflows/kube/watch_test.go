package kube

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

const stopped = "stopped (scaled down, evicted or the run ending): "

// TestOnPod: what the pod watch reports of a pod's life: ready, out of service as soon as its deletion is asked,
// gone when deleted or failed, restarted in place, ignored when it is no service's; replicas oldest first.
func TestOnPod(t *testing.T) {
	type step struct {
		pod      *corev1.Pod
		deleted  bool     // a deletion, as the watch delivers it
		tomb     bool     // ... as a tombstone (the watch missed the deletion; a re-list found the pod gone)
		replicas []string // api's replicas after it
	}
	for _, tc := range []struct {
		name   string
		steps  []step
		events []string
		known  []string // the pods the backend knows at the end
	}{
		{name: "a pod becomes ready",
			steps: []step{
				{pod: workerPod("api", "api-1", 0)},
				{pod: workerPod("api", "api-1", 0, ready("10.0.0.1")), replicas: []string{"api-1"}},
			},
			events: []string{"ready api/api-1: pod api-1 on node-1, 10.0.0.1"},
			known:  []string{"api-1"}},
		{name: "not a service's pod",
			steps: []step{
				{pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "irs-relay-1", Labels: map[string]string{LabelName: "irs-relay"}}}},
				{pod: workerPod("other", "other-1", 0, ready("10.0.0.9"))},
			}},
		{name: "out of service once its deletion is asked; gone when its worker ends",
			steps: []step{
				{pod: workerPod("api", "api-1", 0, ready("10.0.0.1")), replicas: []string{"api-1"}},
				{pod: workerPod("api", "api-1", 0, ready("10.0.0.1"), deleting)},
				{pod: workerPod("api", "api-1", 0, ready("10.0.0.1"), deleting, workerEnded("Completed", 0))},
			},
			events: []string{"exit api/api-1: " + stopped + "worker ended: Completed, exit 0", "ready api/api-1: pod api-1 on node-1, 10.0.0.1"},
			known:  []string{"api-1"}},
		{name: "deleted",
			steps: []step{
				{pod: workerPod("api", "api-1", 0, ready("10.0.0.1")), replicas: []string{"api-1"}},
				{pod: workerPod("api", "api-1", 0, ready("10.0.0.1")), deleted: true},
			},
			events: []string{"exit api/api-1: " + stopped + "pod deleted", "ready api/api-1: pod api-1 on node-1, 10.0.0.1"}},
		{name: "deleted, as a tombstone",
			steps: []step{
				{pod: workerPod("api", "api-1", 0, ready("10.0.0.1")), replicas: []string{"api-1"}},
				{pod: workerPod("api", "api-1", 0, ready("10.0.0.1")), tomb: true},
			},
			events: []string{"exit api/api-1: " + stopped + "pod deleted", "ready api/api-1: pod api-1 on node-1, 10.0.0.1"}},
		{name: "deleted before it was seen",
			steps: []step{{pod: workerPod("api", "api-1", 0), deleted: true}}},
		{name: "failed",
			steps: []step{
				{pod: workerPod("api", "api-1", 0, ready("10.0.0.1")), replicas: []string{"api-1"}},
				{pod: workerPod("api", "api-1", 0, ready("10.0.0.1"), workerEnded("Error", 1), func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })},
			},
			events: []string{"exit api/api-1: " + stopped + "worker ended: Error, exit 1", "ready api/api-1: pod api-1 on node-1, 10.0.0.1"},
			known:  []string{"api-1"}},
		{name: "restarted in place",
			steps: []step{
				{pod: workerPod("api", "api-1", 0, ready("10.0.0.1")), replicas: []string{"api-1"}},
				{pod: workerPod("api", "api-1", 0, ready("10.0.0.1"), unready, restarted(1, "Error", 137))},
				{pod: workerPod("api", "api-1", 0, ready("10.0.0.1"), restarted(1, "Error", 137)), replicas: []string{"api-1"}},
			},
			events: []string{"ready api/api-1: pod api-1 on node-1, 10.0.0.1", "ready api/api-1: pod api-1 on node-1, 10.0.0.1",
				"restart api/api-1: the worker's process ended (Error, exit 137); restarted in place"},
			known: []string{"api-1"}},
		{name: "oldest first, then by name",
			steps: []step{
				{pod: workerPod("api", "api-c", 5, ready("10.0.0.3")), replicas: []string{"api-c"}},
				{pod: workerPod("api", "api-a", 5, ready("10.0.0.1")), replicas: []string{"api-a", "api-c"}},
				{pod: workerPod("api", "api-b", 0, ready("10.0.0.2")), replicas: []string{"api-b", "api-a", "api-c"}},
			},
			events: []string{"ready api/api-a: pod api-a on node-1, 10.0.0.1", "ready api/api-b: pod api-b on node-1, 10.0.0.2",
				"ready api/api-c: pod api-c on node-1, 10.0.0.3"},
			known: []string{"api-a", "api-b", "api-c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := newTestBackend(t, Config{}, threeTier())
			for i, s := range tc.steps {
				var o any = s.pod
				if s.tomb {
					o = cache.DeletedFinalStateUnknown{Key: "run/" + s.pod.Name, Obj: s.pod}
				}
				b.onPod(o, s.deleted)
				if got := replicas(b, "api"); !slices.Equal(got, s.replicas) {
					t.Errorf("after step %d, api's replicas %v, want %v", i+1, got, s.replicas)
				}
			}
			got := emitted(b)
			slices.Sort(got)
			if d := cmp.Diff(tc.events, got); d != "" {
				t.Errorf("events (-want +got):\n%s", d)
			}
			b.mu.Lock()
			known := sortedKeys(b.pods)
			b.mu.Unlock()
			if len(known) == 0 {
				known = nil
			}
			if !slices.Equal(known, tc.known) {
				t.Errorf("known pods %v, want %v", known, tc.known)
			}
		})
	}
}

// endpointSlice is a slice of a Service's endpoints as the EndpointSlice controller writes it: pods by name,
// ready or not.
func endpointSlice(service, name string, pods map[string]bool) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "run",
		Labels: map[string]string{discoveryv1.LabelServiceName: service}}, AddressType: discoveryv1.AddressTypeIPv4}
	for _, pod := range sortedKeys(pods) {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(pods[pod])}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: pod}})
	}
	return es
}

// put writes an object to the fake cluster as a controller or the kubelet would: created, or replaced.
func put(t *testing.T, fc *fakeCluster, gvr schema.GroupVersionResource, obj runtime.Object) {
	t.Helper()
	err := fc.Create(gvr, obj, "run")
	if isAlreadyExists(err) {
		err = fc.Update(gvr, obj, "run")
	}
	if err != nil {
		t.Fatal(err)
	}
}

// listed is what the backend knows a Service's EndpointSlices list as ready.
func listed(b *Backend, service string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return sortedKeys(b.endpoints[service])
}

// TestWatchEndpoints: through the watches of a fake cluster, pods and EndpointSlices drive the replicas in
// service and what each Service lists: a pod out of its Service's ready endpoints is reported removed (by the
// slices, without IRS's mesh), several slices of a Service add up, endpoints that are no pod's and slices of
// Services not the run's are ignored, and a deleted pod is out of service and forgotten.
func TestWatchEndpoints(t *testing.T) {
	b, fc := newTestBackend(t, Config{}, threeTier())
	startWatch(t, b, fc)

	put(t, fc, podsResource, workerPod("api", "api-1", 0, ready("10.0.0.1")))
	put(t, fc, podsResource, workerPod("api", "api-2", 1, ready("10.0.0.2")))
	want := []string{"ready api/api-1: pod api-1 on node-1, 10.0.0.1", "ready api/api-2: pod api-2 on node-1, 10.0.0.2"}
	if d := cmp.Diff(want, awaitEvents(t, b, 2)); d != "" {
		t.Errorf("pods ready: events (-want +got):\n%s", d)
	}
	if got := replicas(b, "api"); !slices.Equal(got, []string{"api-1", "api-2"}) {
		t.Errorf("api's replicas %v, want [api-1 api-2]", got)
	}

	put(t, fc, endpointSlicesResource, endpointSlice("kubernetes", "kubernetes", map[string]bool{"apiserver": true}))
	notPod := endpointSlice("api", "api-y", nil)
	notPod.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.1"}}, {Addresses: []string{"10.1.0.2"},
		TargetRef: &corev1.ObjectReference{Kind: "Node", Name: "node-1"}}}
	put(t, fc, endpointSlicesResource, notPod)
	put(t, fc, endpointSlicesResource, endpointSlice("api", "api-x", map[string]bool{"api-1": true, "api-2": true}))
	if d := cmp.Diff([]string{"endpoints api/: 2 ready endpoints in Service api"}, awaitEvents(t, b, 1)); d != "" {
		t.Errorf("Service api lists both: events (-want +got):\n%s", d)
	}

	put(t, fc, endpointSlicesResource, endpointSlice("api", "api-x", map[string]bool{"api-1": true, "api-2": false}))
	want = []string{"endpoint_removed api/api-2: no longer a ready endpoint of Service api", "endpoints api/: 1 ready endpoints in Service api"}
	if d := cmp.Diff(want, awaitEvents(t, b, 2)); d != "" {
		t.Errorf("api-2 not ready in its slice: events (-want +got):\n%s", d)
	}
	put(t, fc, endpointSlicesResource, endpointSlice("api", "api-y", map[string]bool{"api-2": true}))
	if d := cmp.Diff([]string{"endpoints api/: 2 ready endpoints in Service api"}, awaitEvents(t, b, 1)); d != "" {
		t.Errorf("api-2 ready in another slice: events (-want +got):\n%s", d)
	}
	if got := listed(b, "api"); !slices.Equal(got, []string{"api-1", "api-2"}) {
		t.Errorf("Service api lists %v, want [api-1 api-2]", got)
	}

	if err := fc.Delete(podsResource, "run", "api-1"); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"exit api/api-1: " + stopped + "pod deleted"}, awaitEvents(t, b, 1)); d != "" {
		t.Errorf("api-1 deleted: events (-want +got):\n%s", d)
	}
	if got := replicas(b, "api"); !slices.Equal(got, []string{"api-2"}) {
		t.Errorf("api's replicas after api-1's deletion %v, want [api-2]", got)
	}
	b.mu.Lock()
	_, known := b.pods["api-1"]
	b.mu.Unlock()
	if known {
		t.Error("the deleted pod api-1 is still known")
	}
	if err := fc.Delete(endpointSlicesResource, "run", "api-x"); err != nil {
		t.Fatal(err)
	}
	want = []string{"endpoint_removed api/api-1: no longer a ready endpoint of Service api", "endpoints api/: 1 ready endpoints in Service api"}
	if d := cmp.Diff(want, awaitEvents(t, b, 2)); d != "" {
		t.Errorf("slice api-x deleted: events (-want +got):\n%s", d)
	}
	if extra := emitted(b); len(extra) > 0 {
		t.Errorf("unexpected events %q", extra)
	}
}

// TestWatchEndpointsOwnMesh: under IRS's mesh, the callers' sidecars learn endpoints from its control plane,
// which reports removals itself: the EndpointSlices' do not count as removals.
func TestWatchEndpointsOwnMesh(t *testing.T) {
	b, fc := newTestBackend(t, Config{Mesh: &irsv1.Mesh{Type: policy.TypeEnvoy}}, threeTier())
	startWatch(t, b, fc)
	put(t, fc, endpointSlicesResource, endpointSlice("api", "api-x", map[string]bool{"api-1": true}))
	if d := cmp.Diff([]string{"endpoints api/: 1 ready endpoints in Service api"}, awaitEvents(t, b, 1)); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
	put(t, fc, endpointSlicesResource, endpointSlice("api", "api-x", map[string]bool{"api-1": false}))
	if d := cmp.Diff([]string{"endpoints api/: 0 ready endpoints in Service api"}, awaitEvents(t, b, 1)); d != "" {
		t.Errorf("api-1 not ready: events (-want +got):\n%s", d)
	}
}

// TestAwaitReplicas: the wait for the replicas says what it still waits for when time is up, and fails at once
// on a pod that cannot start, with what the pod's warning events say; a pod the cluster cannot run (an image
// it cannot pull, no room on any node) is the environment's fault.
func TestAwaitReplicas(t *testing.T) {
	event := func(name, pod, typ, reason, msg string, sec int) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "run"}, Type: typ, Reason: reason, Message: msg,
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: pod}, LastTimestamp: metav1.NewTime(podTime.Add(time.Duration(sec) * time.Second))}
	}
	events := []runtime.Object{
		event("e1", "api-1", corev1.EventTypeWarning, "Failed", "Failed to pull image irs:nope", 2),
		event("e2", "api-1", corev1.EventTypeWarning, "BackOff", "Back-off pulling image irs:nope", 1),
		event("e3", "api-1", corev1.EventTypeNormal, "Scheduled", "assigned to node-1", 0),
		event("e4", "api-2", corev1.EventTypeWarning, "Unhealthy", "Readiness probe failed", 3),
	}
	unschedulable := func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available: 3 Insufficient cpu."}}
	}
	for _, tc := range []struct {
		name        string
		pods        []*corev1.Pod
		environment bool   // the error is an EnvironmentError
		want        string // the error's message
	}{
		{name: "time is up",
			pods: []*corev1.Pod{workerPod("api", "api-1", 0, ready("10.0.0.1")), workerPod("api", "api-2", 1),
				workerPod("db", "db-1", 0, ready("10.0.0.3"), deleting)},
			want: "not ready after 0s: client: 0 of 1 ready, 0 in its Service; api: 1 of 2 ready, 0 in its Service; db: 0 of 1 ready, 0 in its Service"},
		{name: "an image that cannot be pulled",
			pods:        []*corev1.Pod{workerPod("api", "api-1", 0, waiting("ErrImagePull", "pull access denied", ""))},
			environment: true,
			want: "pod api-1: container worker: ErrImagePull: pull access denied\n    events: BackOff: Back-off pulling image irs:nope; " +
				"Failed: Failed to pull image irs:nope"},
		{name: "a crash loop",
			pods: []*corev1.Pod{workerPod("api", "api-2", 0, waiting("CrashLoopBackOff", "back-off 10s", "panic: boom\n"))},
			want: "pod api-2: container worker: CrashLoopBackOff: back-off 10s; it said: panic: boom\n    events: Unhealthy: Readiness probe failed"},
		{name: "no room on any node",
			pods:        []*corev1.Pod{workerPod("db", "db-1", 0, unschedulable)},
			environment: true,
			want:        "pod db-1: unschedulable: 0/3 nodes are available: 3 Insufficient cpu."},
		{name: "a pod being deleted cannot start: no matter",
			pods: []*corev1.Pod{workerPod("api", "api-1", 0, waiting("ErrImagePull", "pull access denied", ""), deleting)},
			want: "not ready after 0s: client: 0 of 1 ready, 0 in its Service; api: 0 of 2 ready, 0 in its Service; db: 0 of 1 ready, 0 in its Service"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := newTestBackend(t, Config{}, threeTier(), events...)
			for _, p := range tc.pods {
				b.onPod(p, false)
			}
			err := b.awaitReplicas(t.Context(), time.Now().Add(-time.Second))
			if err == nil {
				t.Fatal("awaitReplicas succeeded")
			}
			if err.Error() != tc.want {
				t.Errorf("error:\n%s\nwant:\n%s", err, tc.want)
			}
			var ee *EnvironmentError
			if errors.As(err, &ee) != tc.environment {
				t.Errorf("an EnvironmentError: %v, want %v", errors.As(err, &ee), tc.environment)
			}
			if strings.HasPrefix(tc.want, "not ready") && !errors.Is(err, errNotReady) {
				t.Errorf("%v is not errNotReady", err)
			}
		})
	}
}

// TestReadyEventSaysItsNode: a replica's ready event and its entry in Replicas name the node its pod runs on
// (the engine records it in the result).
func TestReadyEventSaysItsNode(t *testing.T) {
	b, _ := newTestBackend(t, Config{}, threeTier())
	b.onPod(workerPod("api", "api-1", 0, ready("10.0.0.1")), false)
	select {
	case e := <-b.Events():
		if e.Kind != workflows.EventReady || e.Node != "node-1" {
			t.Errorf("event %s on node %q, want ready on node-1", eventLine(e), e.Node)
		}
	default:
		t.Fatal("no event")
	}
	if rs := b.Replicas("api"); len(rs) != 1 || rs[0].Node != "node-1" {
		t.Errorf("replicas %+v, want api-1 on node-1", rs)
	}
}
