package kube

import (
	"bytes"
	"context"
	"fmt"
	goruntime "runtime"
	"slices"
	"testing"
	"time"

	"github.com/irs-sim/irs/mesh/ambient"
	"github.com/irs-sim/irs/mesh/dataplane"
	"github.com/irs-sim/irs/mesh/envoy"
	"github.com/irs-sim/irs/mesh/installed"
	"github.com/irs-sim/irs/mesh/linkerd"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Fixtures shared by the backend's unit tests: a backend on a fake cluster, pods as the cluster would report
// them, and the backend's events as lines.

// newTestBackend is the backend of run r1 of workflow wf in namespace run, on a fake cluster holding objs: made
// by New, and given its services as Start gives them before its first step. Nothing is created or watched.
func newTestBackend(t *testing.T, cfg Config, specs []workflows.ServiceSpec, objs ...runtime.Object) (*Backend, *fakeCluster) {
	t.Helper()
	_, fc := newFakeCluster(t, objs...)
	cfg.Access = Access{Kubeconfig: fc.kubeconfig}
	cfg.Namespace, cfg.RunID, cfg.Workflow, cfg.ControlToken, cfg.Image = "run", "r1", "wf", "token", "irs:test"
	cfg.Expires = time.Date(2026, 5, 1, 13, 0, 0, 0, time.UTC)
	if cfg.Planes == nil {
		cfg.Planes = testPlanes()
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	for _, spec := range specs {
		s := &service{spec: spec, config: proto.Clone(spec.Worker).(*irsv1.WorkerConfig)}
		s.config.Load = nil
		b.services[spec.Name] = s
		b.order = append(b.order, spec.Name)
	}
	b.refreshInService()
	b.mu.Unlock()
	return b, fc
}

// The meshes a cluster may have installed, by the workflow's mesh type.
const (
	MeshIstio   = "istio"
	MeshLinkerd = "linkerd"
	MeshAmbient = "ambient"
)

// testPlanes registers every data plane, as the command line does.
func testPlanes() *dataplane.Registry {
	return dataplane.NewRegistry(&envoy.Plane{}, &linkerd.Plane{}, &ambient.Plane{},
		installed.Istio(), installed.Linkerd(), installed.Ambient())
}

// threeTier is a load generator, client, sending to api, which calls db.
func threeTier() []workflows.ServiceSpec {
	return []workflows.ServiceSpec{
		{Name: "client", Replicas: 1, Worker: &irsv1.WorkerConfig{Name: "client"}, Load: &irsv1.Load{Target: "api", Rate: 10}},
		{Name: "api", Replicas: 2, Worker: &irsv1.WorkerConfig{Name: "api", Calls: []*irsv1.Call{{Service: "db"}}}},
		{Name: "db", Replicas: 1, Worker: &irsv1.WorkerConfig{Name: "db"}},
	}
}

// defaultServiceAccount is the namespace's service account, which appears a moment after the namespace.
var defaultServiceAccount = &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "run"}}

// podTime is when the test pods are created: workerPod's sec counts from it.
var podTime = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// workerPod is a pod of a service's Deployment as the API reports it, created sec seconds after podTime and
// pending, with each option applied.
func workerPod(service, name string, sec int, opts ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "run", CreationTimestamp: metav1.NewTime(podTime.Add(time.Duration(sec) * time.Second)),
			Labels: map[string]string{LabelName: "irs-worker", LabelService: service, LabelManagedBy: ManagedBy}},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: ContainerWorker}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// ready is a pod running on node-1 at ip, its worker ready.
func ready(ip string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.NodeName, p.Status.PodIP, p.Status.Phase = "node-1", ip, corev1.PodRunning
		setCondition(p, corev1.PodReady, corev1.ConditionTrue)
		w := worker(p)
		w.Ready, w.State = true, corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	}
}

// unready is a running pod whose readiness probe fails.
func unready(p *corev1.Pod) {
	setCondition(p, corev1.PodReady, corev1.ConditionFalse)
	worker(p).Ready = false
}

// deleting is a pod whose deletion was asked (its containers not stopped yet).
func deleting(p *corev1.Pod) { p.DeletionTimestamp = ptr(metav1.NewTime(podTime.Add(time.Hour))) }

// workerEnded is a pod whose worker container has ended.
func workerEnded(reason string, code int32) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		w := worker(p)
		w.Ready, w.State = false, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: reason, ExitCode: code}}
	}
}

// restarted is a pod whose worker container has been restarted n times, the last after it ended so.
func restarted(n int32, reason string, code int32) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		w := worker(p)
		w.RestartCount, w.LastTerminationState = n, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: reason, ExitCode: code}}
	}
}

// waiting is a pod whose worker container waits, for reason.
func waiting(reason, message, lastSaid string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		w := worker(p)
		w.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}
		if lastSaid != "" {
			w.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: lastSaid}}
		}
	}
}

func worker(p *corev1.Pod) *corev1.ContainerStatus {
	if cs := containerStatus(p, ContainerWorker); cs != nil {
		return cs
	}
	p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: ContainerWorker})
	return &p.Status.ContainerStatuses[len(p.Status.ContainerStatuses)-1]
}

func setCondition(p *corev1.Pod, typ corev1.PodConditionType, status corev1.ConditionStatus) {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			p.Status.Conditions[i].Status = status
			return
		}
	}
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: typ, Status: status})
}

// replicas names a service's replicas in service, as the engine sees them.
func replicas(b *Backend, service string) []string {
	var out []string
	for _, r := range b.Replicas(service) {
		out = append(out, r.ID)
	}
	return out
}

// eventLine is an event as the tests compare them.
func eventLine(e workflows.Event) string {
	s := fmt.Sprintf("%s %s/%s", e.Kind, e.Service, e.Replica)
	if e.Replaces != "" {
		s += " (replaces " + e.Replaces + ")"
	}
	return s + ": " + e.Detail
}

// emitted returns the events emitted and not read yet, without waiting: for handlers called by the test.
func emitted(b *Backend) []string {
	var out []string
	for {
		select {
		case e := <-b.Events():
			out = append(out, eventLine(e))
		default:
			return out
		}
	}
}

// awaitEvents returns the next n events, sorted (the two watches' come in either order), failing the test if
// they do not come within 10 s.
func awaitEvents(t *testing.T, b *Backend, n int) []string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	var out []string
	for len(out) < n {
		select {
		case e := <-b.Events():
			out = append(out, eventLine(e))
		case <-timeout:
			t.Fatalf("%d events in 10 s, want %d: %q", len(out), n, out)
		}
	}
	slices.Sort(out)
	return out
}

// startWatch starts the backend's watches of its namespace, as Start does, and waits until the fake streams to
// them. When the test ends they stop, and the test waits until nothing of them is left running.
func startWatch(t *testing.T, b *Backend, fc *fakeCluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := b.watch(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.watchers.stop()
		fc.awaitWatches(t, 0, "pods", "endpointslices")
		awaitGoroutinesGone(t, "k8s.io/client-go/tools/cache.", "k8s.io/apimachinery/pkg/watch.")
	})
	fc.awaitWatches(t, 1, "pods", "endpointslices")
}

// awaitGoroutinesGone waits until no goroutine runs code whose name starts with one of prefixes.
func awaitGoroutinesGone(t *testing.T, prefixes ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	buf := make([]byte, 1<<20)
	for {
		stacks := buf[:goruntime.Stack(buf, true)]
		left := ""
		for _, p := range prefixes {
			if bytes.Contains(stacks, []byte(p)) {
				left = p
			}
		}
		if left == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("goroutines of %s still running:\n%s", left, stacks)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
