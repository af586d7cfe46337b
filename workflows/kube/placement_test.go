package kube

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
)

// The scheduling terms placement turns into, for a service api.
var (
	apiPods        = &metav1.LabelSelector{MatchLabels: map[string]string{LabelService: "api", LabelName: "irs-worker"}}
	otherServices  = corev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname", LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: LabelService, Operator: metav1.LabelSelectorOpExists}, {Key: LabelService, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"api"}}}}}
	ownReplicas    = corev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname", LabelSelector: apiPods}
	loadgenTolerat = corev1.Toleration{Key: "irs.dev/role", Operator: corev1.TolerationOpEqual, Value: "loadgen", Effect: corev1.TaintEffectNoSchedule}
)

func antiAffinity(terms ...corev1.PodAffinityTerm) *corev1.Affinity {
	return &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: terms}}
}

// TestPlacePods: a service's placement merges over the run-wide node selector (its values win per key) and adds
// its tolerations; dedicated keeps every other service's pods off its nodes, one-per-node its own replicas
// apart, even spreads them by a topology constraint that does not count nodes they cannot tolerate.
func TestPlacePods(t *testing.T) {
	runWide := &irsv1.Kubernetes{NodeSelector: map[string]string{"pool": "perf", "disk": "ssd"},
		Tolerations: []*irsv1.Toleration{{Key: "dedicated", Operator: "Equal", Value: "perf", Effect: "NoSchedule"}}}
	perf := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "perf", Effect: corev1.TaintEffectNoSchedule}
	for _, tc := range []struct {
		name      string
		placement *irsv1.Placement
		want      podPlacement
	}{
		{"none: the run-wide selector and tolerations", nil,
			podPlacement{NodeSelector: map[string]string{"pool": "perf", "disk": "ssd"}, Tolerations: []corev1.Toleration{perf}}},
		{"node selector merged, the service's value winning", &irsv1.Placement{NodeSelector: map[string]string{"disk": "nvme", "zone": "a"}},
			podPlacement{NodeSelector: map[string]string{"pool": "perf", "disk": "nvme", "zone": "a"}, Tolerations: []corev1.Toleration{perf}}},
		{"tolerations added", &irsv1.Placement{Tolerations: []*irsv1.Toleration{{Key: "irs.dev/role", Value: "loadgen", Effect: "NoSchedule", Operator: "Equal"}}},
			podPlacement{NodeSelector: map[string]string{"pool": "perf", "disk": "ssd"}, Tolerations: []corev1.Toleration{perf, loadgenTolerat}}},
		{"dedicated", &irsv1.Placement{Dedicated: true},
			podPlacement{NodeSelector: runWide.NodeSelector, Tolerations: []corev1.Toleration{perf}, Affinity: antiAffinity(otherServices)}},
		{"one per node", &irsv1.Placement{Spread: workflows.SpreadOnePerNode},
			podPlacement{NodeSelector: runWide.NodeSelector, Tolerations: []corev1.Toleration{perf}, Affinity: antiAffinity(ownReplicas)}},
		{"dedicated, one per node", &irsv1.Placement{Dedicated: true, Spread: workflows.SpreadOnePerNode},
			podPlacement{NodeSelector: runWide.NodeSelector, Tolerations: []corev1.Toleration{perf}, Affinity: antiAffinity(otherServices, ownReplicas)}},
		{"even", &irsv1.Placement{Spread: workflows.SpreadEven},
			podPlacement{NodeSelector: runWide.NodeSelector, Tolerations: []corev1.Toleration{perf},
				Spread: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.DoNotSchedule,
					LabelSelector: apiPods, NodeTaintsPolicy: ptr(corev1.NodeInclusionPolicyHonor)}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := placePods(runWide, "api", tc.placement)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
			if d := cmp.Diff(map[string]string{"pool": "perf", "disk": "ssd"}, runWide.NodeSelector); d != "" {
				t.Errorf("the run-wide node selector changed (-before +after):\n%s", d)
			}
		})
	}
	// Every worker pod carries the labels the terms select by.
	objs, err := ServiceObjects(ServiceParams{Namespace: "run", Name: "api", Config: &irsv1.WorkerConfig{}})
	if err != nil {
		t.Fatal(err)
	}
	if l := objs.Deployment.Spec.Template.Labels; l[LabelService] != "api" || l[LabelName] != "irs-worker" {
		t.Errorf("pod labels %v: the placement's selectors do not select the service's pods", l)
	}
}

// podScheduling is the scheduling part of a service's pods as Start creates them.
func podScheduling(t *testing.T, b *Backend, service string) podPlacement {
	t.Helper()
	objs, err := b.objects(service)
	if err != nil {
		t.Fatal(err)
	}
	s := objs.Deployment.Spec.Template.Spec
	return podPlacement{NodeSelector: s.NodeSelector, Tolerations: s.Tolerations, Affinity: s.Affinity, Spread: s.TopologySpreadConstraints}
}

// TestObjectsPlacementByName: a service named in placement gets its entry, every other the "*" one.
func TestObjectsPlacementByName(t *testing.T) {
	platform := &irsv1.Kubernetes{Placement: map[string]*irsv1.Placement{
		"api": {Spread: workflows.SpreadOnePerNode},
		"*":   {NodeSelector: map[string]string{"pool": "rest"}},
	}}
	b, _ := newTestBackend(t, Config{Platform: platform}, threeTier())
	if got := podScheduling(t, b, "api"); got.Affinity == nil || got.NodeSelector != nil {
		t.Errorf("api: %+v, want its own placement (one per node) and not the \"*\" one", got)
	}
	for _, name := range []string{"client", "db"} {
		if got := podScheduling(t, b, name); got.Affinity != nil || got.NodeSelector["pool"] != "rest" {
			t.Errorf("%s: %+v, want the \"*\" placement", name, got)
		}
	}
}

// node is a node of the cluster with labels.
func node(name string, labels map[string]string, opts ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	for _, o := range opts {
		o(n)
	}
	return n
}

func cordoned(n *corev1.Node) { n.Spec.Unschedulable = true }

var loadgenLabel = map[string]string{LabelRole: RoleLoadgen, "pool": "perf"}

// TestLoadgenDefault: when the cluster has a schedulable node labelled irs.dev/role=loadgen (that the run's node
// selector allows), the pure load generator the placement does not name goes there and tolerates its taint,
// instead of taking the "*" entry; the other services get nothing of it. A placement naming the generator wins.
// Without such a node, or without leave to list nodes, nothing changes.
func TestLoadgenDefault(t *testing.T) {
	onLoadgen := podPlacement{NodeSelector: map[string]string{LabelRole: RoleLoadgen}, Tolerations: []corev1.Toleration{loadgenTolerat}}
	for _, tc := range []struct {
		name     string
		platform *irsv1.Kubernetes
		nodes    []runtime.Object
		denied   bool // the user may not list nodes
		client   podPlacement
		loadgen  []string // the nodes and services Loadgen reports
		services []string
		count    int
	}{
		{name: "no loadgen node", nodes: []runtime.Object{node("n1", nil), node("n2", nil)}, count: 2},
		{name: "a loadgen node", nodes: []runtime.Object{node("n1", loadgenLabel), node("n2", nil), node("n3", nil)},
			client: onLoadgen, loadgen: []string{"n1"}, services: []string{"client"}, count: 3},
		{name: "a loadgen node, and a placement for every service but by name",
			platform: &irsv1.Kubernetes{Placement: map[string]*irsv1.Placement{"*": {Spread: workflows.SpreadEven}}},
			nodes:    []runtime.Object{node("n1", loadgenLabel), node("n2", nil)},
			client:   onLoadgen, loadgen: []string{"n1"}, services: []string{"client"}, count: 2},
		{name: "the workflow places the load generator itself",
			platform: &irsv1.Kubernetes{Placement: map[string]*irsv1.Placement{"client": {NodeSelector: map[string]string{"pool": "clients"}}}},
			nodes:    []runtime.Object{node("n1", loadgenLabel), node("n2", nil)},
			client:   podPlacement{NodeSelector: map[string]string{"pool": "clients"}}, loadgen: []string{"n1"}, count: 2},
		{name: "the loadgen node cordoned", nodes: []runtime.Object{node("n1", loadgenLabel, cordoned), node("n2", nil)}, count: 2},
		{name: "the loadgen node outside the run's node selector",
			platform: &irsv1.Kubernetes{NodeSelector: map[string]string{"pool": "other"}},
			nodes:    []runtime.Object{node("n1", loadgenLabel), node("n2", map[string]string{"pool": "other"})},
			client:   podPlacement{NodeSelector: map[string]string{"pool": "other"}}, count: 2},
		{name: "the run's node selector allows the loadgen node",
			platform: &irsv1.Kubernetes{NodeSelector: map[string]string{"pool": "perf"}},
			nodes:    []runtime.Object{node("n1", loadgenLabel), node("n2", map[string]string{"pool": "perf"})},
			client:   podPlacement{NodeSelector: map[string]string{"pool": "perf", LabelRole: RoleLoadgen}, Tolerations: []corev1.Toleration{loadgenTolerat}},
			loadgen:  []string{"n1"}, services: []string{"client"}, count: 2},
		{name: "nodes may not be listed", nodes: []runtime.Object{node("n1", loadgenLabel)}, denied: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, fc := newTestBackend(t, Config{Platform: tc.platform, LoadGenerators: map[string]bool{"client": true}}, threeTier(), tc.nodes...)
			if tc.denied {
				fc.prependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", nil)
				})
			}
			if got := b.Nodes(t.Context()); got != tc.count {
				t.Errorf("Nodes = %d, want %d", got, tc.count)
			}
			if d := cmp.Diff(tc.client, podScheduling(t, b, "client")); d != "" {
				t.Errorf("client, the load generator (-want +got):\n%s", d)
			}
			for _, name := range []string{"api", "db"} {
				got := podScheduling(t, b, name)
				for _, tol := range got.Tolerations {
					if tol.Key == LabelRole {
						t.Errorf("%s tolerates the loadgen taint: %+v", name, got.Tolerations)
					}
				}
				if got.NodeSelector[LabelRole] != "" {
					t.Errorf("%s selects the loadgen node: %v", name, got.NodeSelector)
				}
			}
			nodes, services := b.Loadgen()
			if d := cmp.Diff(tc.loadgen, nodes); d != "" {
				t.Errorf("Loadgen's nodes (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.services, services); d != "" {
				t.Errorf("Loadgen's services (-want +got):\n%s", d)
			}
			if lists := len(fc.actionsOf("list", "nodes")); lists != 1 {
				t.Errorf("the nodes were listed %d times, want once", lists)
			}
			_ = b.lookupNodes(t.Context()) // as Start does after Nodes: not again
			if lists := len(fc.actionsOf("list", "nodes")); lists != 1 {
				t.Errorf("the nodes were listed %d times after Start's lookup, want once", lists)
			}
		})
	}
}

// TestWorkerNodesTolerateEveryService: a mesh's per-node proxies go wherever any worker may, the loadgen node
// included when a service is placed there.
func TestWorkerNodesTolerateEveryService(t *testing.T) {
	platform := &irsv1.Kubernetes{NodeSelector: map[string]string{"pool": "perf"},
		Tolerations: []*irsv1.Toleration{{Key: "dedicated", Operator: "Exists"}},
		Placement: map[string]*irsv1.Placement{"api": {NodeSelector: map[string]string{"disk": "ssd"},
			Tolerations: []*irsv1.Toleration{{Key: "dedicated", Operator: "Exists"}, {Key: "gpu", Operator: "Exists"}}}}}
	b, _ := newTestBackend(t, Config{Platform: platform, LoadGenerators: map[string]bool{"client": true}}, threeTier(),
		node("n1", merged(loadgenLabel, platform.NodeSelector)))
	if err := b.lookupNodes(t.Context()); err != nil {
		t.Fatal(err)
	}
	sel, tols := b.run().WorkerNodes()
	if d := cmp.Diff(map[string]string{"pool": "perf"}, sel); d != "" {
		t.Errorf("node selector (-want +got):\n%s", d)
	}
	want := []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}, loadgenTolerat, {Key: "gpu", Operator: corev1.TolerationOpExists}}
	if d := cmp.Diff(want, tols); d != "" {
		t.Errorf("tolerations (-want +got):\n%s", d)
	}
}
