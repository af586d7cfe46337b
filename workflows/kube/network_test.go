package kube

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// recordingUnderlay serves UnderlayService on a Unix socket and keeps every state set (the real underlay needs
// root and a TUN device: the Kubernetes end-to-end tests drive it on the test cluster).
type recordingUnderlay struct {
	irsv1.UnimplementedUnderlayServiceServer
	containers *recordingContainers
	mu         sync.Mutex
	cur        *irsv1.UnderlayState
	sets       []*irsv1.UnderlayState
}

func (u *recordingUnderlay) GetUnderlay(context.Context, *irsv1.GetUnderlayRequest) (*irsv1.GetUnderlayResponse, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return &irsv1.GetUnderlayResponse{State: proto.CloneOf(u.cur)}, nil
}

func (u *recordingUnderlay) SetUnderlay(_ context.Context, r *irsv1.SetUnderlayRequest) (*irsv1.SetUnderlayResponse, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.cur = proto.CloneOf(r.GetState())
	u.sets = append(u.sets, proto.CloneOf(r.GetState()))
	return &irsv1.SetUnderlayResponse{State: r.GetState()}, nil
}

// recordingContainers serves ContainerFaultService, recording what it is asked.
type recordingContainers struct {
	irsv1.UnimplementedContainerFaultServiceServer
	mu    sync.Mutex
	calls []string
}

func (c *recordingContainers) KillContainer(_ context.Context, r *irsv1.KillContainerRequest) (*irsv1.KillContainerResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, "kill "+r.GetContainerId())
	return &irsv1.KillContainerResponse{Done: &irsv1.ContainerFault{Processes: 1}}, nil
}

func (c *recordingContainers) FreezeContainer(_ context.Context, r *irsv1.FreezeContainerRequest) (*irsv1.FreezeContainerResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, fmt.Sprintf("freeze=%v %s", r.GetFrozen(), r.GetContainerId()))
	return &irsv1.FreezeContainerResponse{Done: &irsv1.ContainerFault{Processes: 1}}, nil
}

// startUnderlay serves a network of three nodes, their links 100us, and returns the ConfigMap that names it.
func startUnderlay(t *testing.T) (*recordingUnderlay, *corev1.ConfigMap) {
	t.Helper()
	u := &recordingUnderlay{containers: &recordingContainers{}, cur: &irsv1.UnderlayState{DefaultLink: &irsv1.Link{Delay: "100us"},
		Nodes: []*irsv1.UnderlayNode{{Name: "node-1"}, {Name: "node-2"}, {Name: "node-3"}}}}
	socket := filepath.Join(t.TempDir(), "underlay.sock")
	lis, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	irsv1.RegisterUnderlayServiceServer(gs, u)
	irsv1.RegisterContainerFaultServiceServer(gs, u.containers)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return u, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: underlayConfigMap, Namespace: underlayNamespace},
		Data: map[string]string{"socket": socket}}
}

func timelineOf(t *testing.T, actions string) *workflows.Timeline {
	t.Helper()
	d, err := workflows.Parse([]byte("name: n\nservices:\n  - name: api\n    worker: {serve: {delay: 1ms}}\n"+
		"phases:\n  - name: p\n    duration: 10s\n    actions:\n"+actions), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := workflows.Validate(d, nil); err != nil {
		t.Fatal(err)
	}
	tl, err := workflows.NewTimeline(d.Workflow, 1)
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

func TestNodeFaultsOf(t *testing.T) {
	for _, tc := range []struct {
		name, actions string
		want          NodeFaultPlan
	}{
		{"none", "      - kill: {service: api}\n", NodeFaultPlan{}},
		{"link", "      - link: {nodes: [node-2], set: {delay: 1ms}}\n", NodeFaultPlan{Shape: true, Nodes: []string{"node-2"}}},
		{"partition", "      - partition: {nodes: [node-3], from: [node-1]}\n", NodeFaultPlan{Shape: true, Nodes: []string{"node-1", "node-3"}}},
		{"cut", "      - node: {name: node-2, mode: cut}\n", NodeFaultPlan{Shape: true, Nodes: []string{"node-2"}}},
		{"drain", "      - node: {of: api, mode: drain}\n", NodeFaultPlan{Drain: true}},
		{"lose, then heal", "      - node: {name: node-2}\n      - {at: 5s, node: {heal: true}}\n", NodeFaultPlan{Lose: true, Nodes: []string{"node-2"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := NodeFaultsOf(timelineOf(t, tc.actions))
			if got.Shape != tc.want.Shape || got.Lose != tc.want.Lose || got.Drain != tc.want.Drain || !slices.Equal(got.Nodes, tc.want.Nodes) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestNetworkState: links and partitions are kept apart (a link change does not heal a partition), a node's
// links are both ways to every other node, and reset puts back the links the run found.
func TestNetworkState(t *testing.T) {
	n := newNetwork(&irsv1.UnderlayState{DefaultLink: &irsv1.Link{Delay: "100us"},
		Nodes: []*irsv1.UnderlayNode{{Name: "a"}, {Name: "b"}, {Name: "c"}},
		Pairs: []*irsv1.PairLink{{From: "a", To: "b", Link: &irsv1.Link{Delay: "2ms"}}}})
	steps := []func() error{
		func() error { return n.partition([]string{"c"}, nil) },
		func() error { return n.setLinks([]string{"b"}, &irsv1.Link{Loss: "1%"}, false) },
		func() error { return n.setDown("a", true) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			t.Fatal(err)
		}
	}
	got := prototext.Format(n.state())
	for _, want := range []string{
		`pairs:{from:"a" to:"b" link:{loss:"1%"}}`, `pairs:{from:"b" to:"a" link:{loss:"1%"}}`,
		`pairs:{from:"b" to:"c" link:{loss:"1%"}}`, `pairs:{from:"c" to:"b" link:{loss:"1%"}}`,
		`pairs:{from:"a" to:"c" link:{loss:"100%"}}`, `pairs:{from:"c" to:"a" link:{loss:"100%"}}`,
		`pairs:{from:"b" to:"c" link:{loss:"100%"}}`, `nodes:{name:"a" down:true}`,
	} {
		if !strings.Contains(strings.Join(strings.Fields(got), ""), strings.ReplaceAll(want, " ", "")) {
			t.Errorf("state lacks %s:\n%s", want, got)
		}
	}
	st := n.state()
	if last := st.GetPairs()[len(st.GetPairs())-1]; last.GetLink().GetLoss() != "100%" {
		t.Error("the partitions come after the links: a later pair wins")
	}
	if err := n.setLinks([]string{"b"}, nil, true); err != nil {
		t.Fatal(err)
	}
	if l := n.links[[2]string{"a", "b"}]; l.GetDelay() != "2ms" {
		t.Errorf("a→b after reset: %v, want the run's first 2ms", l)
	}
	if l := n.links[[2]string{"b", "c"}]; l.GetDelay() != "100us" {
		t.Errorf("b→c after reset: %v, want the default 100us", l)
	}
	if err := n.partition([]string{"x"}, nil); err == nil || !strings.Contains(err.Error(), `no node "x"`) {
		t.Errorf("an unknown node: %v", err)
	}
}

func TestCheckNodeFaultsRefusesWhatTheClusterCannotDo(t *testing.T) {
	objs := []runtime.Object{node("node-1", nil), node("node-2", nil)}
	var env *EnvironmentError

	b, _ := newTestBackend(t, Config{NodeFaults: NodeFaultPlan{Shape: true}}, nil, objs...)
	err := b.checkNodeFaults(t.Context())
	if !errors.As(err, &env) || !strings.Contains(err.Error(), "no ConfigMap kube-system/irs-underlay") {
		t.Errorf("no underlay: got %v", err)
	}

	b, _ = newTestBackend(t, Config{NodeFaults: NodeFaultPlan{Drain: true, Nodes: []string{"node-9"}}}, nil, objs...)
	err = b.checkNodeFaults(t.Context())
	if !errors.As(err, &env) || !strings.Contains(err.Error(), `node "node-9", which the cluster does not have (it has node-1, node-2)`) {
		t.Errorf("unknown node: got %v", err)
	}

	// Without an underlay a node lost without a mode is drained, which needs patch nodes.
	b, fc := newTestBackend(t, Config{NodeFaults: NodeFaultPlan{Lose: true}}, nil, objs...)
	fc.prependReactor("create", "selfsubjectaccessreviews", denyResource("nodes"))
	err = b.checkNodeFaults(t.Context())
	if !errors.As(err, &env) || !strings.Contains(err.Error(), "patch nodes (node: {mode: drain} cordons the node)") {
		t.Errorf("drain not allowed: got %v", err)
	}
}

// TestLinkPartitionCutAndRestore: the actions reach the cluster's underlay with the relay's traffic exempt; Stop
// puts the network back as the run found it.
func TestLinkPartitionCutAndRestore(t *testing.T) {
	u, cm := startUnderlay(t)
	relay := workerPod("", "irs-relay-1", 0, ready("10.0.0.9"))
	relay.Labels = map[string]string{LabelName: "irs-relay"}
	b, _ := newTestBackend(t, Config{NodeFaults: NodeFaultPlan{Shape: true, Nodes: []string{"node-2"}}}, nil,
		cm, node("node-1", nil), node("node-2", nil), node("node-3", nil), relay)
	ctx := t.Context()
	if err := b.checkNodeFaults(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Link(ctx, &irsv1.LinkAction{Nodes: []string{"node-2"}, Set: &irsv1.Link{Delay: "1ms"}}); err != nil {
		t.Fatal(err)
	}
	if err := b.Partition(ctx, &irsv1.PartitionAction{Nodes: []string{"node-1"}}); err != nil {
		t.Fatal(err)
	}
	what, err := b.LoseNode(ctx, &irsv1.NodeAction{Name: "node-3"})
	if err != nil || !strings.Contains(what, "node-3 cut off") {
		t.Fatalf("lose node-3: %q %v", what, err)
	}
	u.mu.Lock()
	last := u.sets[len(u.sets)-1]
	u.mu.Unlock()
	if !slices.Equal(last.GetExempt(), []string{"10.0.0.9"}) {
		t.Errorf("exempt %v, want the relay's address", last.GetExempt())
	}
	if got := len(last.GetPairs()); got != 4+4 {
		t.Errorf("%d pairs, want node-2's 4 links and node-1's 4 partitioned directions", got)
	}
	if !last.GetNodes()[2].GetDown() || last.GetDefaultLink().GetDelay() != "100us" {
		t.Errorf("state %v", last)
	}
	if err := b.Stop(ctx, true); err != nil {
		t.Fatal(err)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	final := u.sets[len(u.sets)-1]
	if len(final.GetPairs()) != 0 || final.GetNodes()[2].GetDown() || final.GetDefaultLink().GetDelay() != "100us" {
		t.Errorf("after Stop the network is %v, want it as the run found it", final)
	}
}

// TestDrain: a drained node is cordoned and only the run's pods on it are evicted; heal uncordons it.
func TestDrain(t *testing.T) {
	on := func(n string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Spec.NodeName = n } }
	relay := workerPod("", "irs-relay-1", 0, ready("10.0.0.9"), on("node-1"))
	relay.Labels = map[string]string{LabelName: "irs-relay"}
	proxy := workerPod("", "irs-ztunnel-x", 0, ready("10.0.0.8"), on("node-2"))
	proxy.Labels, proxy.OwnerReferences = map[string]string{LabelName: "irs-ztunnel"}, []metav1.OwnerReference{{Kind: "DaemonSet", Name: "irs-ztunnel"}}
	cordoned := node("node-3", nil, func(n *corev1.Node) { n.Spec.Unschedulable = true })
	b, fc := newTestBackend(t, Config{NodeFaults: NodeFaultPlan{Drain: true}}, nil, node("node-1", nil), node("node-2", nil), cordoned,
		workerPod("api", "api-1", 0, ready("10.0.0.1"), on("node-2")),
		workerPod("api", "api-2", 0, ready("10.0.0.2"), on("node-1")),
		workerPod("db", "db-1", 0, ready("10.0.0.3"), on("node-2")), relay, proxy)
	ctx := t.Context()
	what, err := b.LoseNode(ctx, &irsv1.NodeAction{Name: "node-2", Mode: "drain"})
	if err != nil || what != "node node-2 drained: cordoned, 2 pod(s) of the run evicted" {
		t.Fatalf("drain: %q %v", what, err)
	}
	var deleted []string
	for _, a := range fc.actionsOf("delete", "pods") {
		deleted = append(deleted, a.(k8stesting.DeleteAction).GetName())
	}
	slices.Sort(deleted)
	if !slices.Equal(deleted, []string{"api-1", "db-1"}) {
		t.Errorf("evicted %v, want the run's workers on node-2 (not its node proxy)", deleted)
	}
	patches := fc.actionsOf("patch", "nodes")
	if len(patches) != 1 || !strings.Contains(string(patches[0].(k8stesting.PatchAction).GetPatch()), `"unschedulable":true`) {
		t.Fatalf("patches %v, want node-2 cordoned", patches)
	}
	// node-3 was cordoned before the run: draining it leaves it to whoever did, heal and Stop too.
	if _, err := b.LoseNode(ctx, &irsv1.NodeAction{Name: "node-3", Mode: "drain"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.LoseNode(ctx, &irsv1.NodeAction{Name: "node-1", Mode: "drain"}); err == nil || !strings.Contains(err.Error(), "runs the relay") {
		t.Errorf("losing the relay's node: %v, want it refused", err)
	}
	if what, err := b.LoseNode(ctx, &irsv1.NodeAction{Heal: true}); err != nil || what != "back: node-2 (uncordoned)" {
		t.Fatalf("heal: %q %v", what, err)
	}
	patches = fc.actionsOf("patch", "nodes")
	if len(patches) != 2 || !strings.Contains(string(patches[1].(k8stesting.PatchAction).GetPatch()), `"unschedulable":false`) {
		t.Errorf("patches %v, want node-2 uncordoned", patches)
	}
}

// denyResource answers SelfSubjectAccessReviews of a resource: denied (the others fall through to allow).
func denyResource(resource string) k8stesting.ReactionFunc {
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		review := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
		if review.Spec.ResourceAttributes.Resource != resource {
			return false, nil, nil
		}
		review.Status.Reason = "no ClusterRoleBinding"
		return true, review, nil
	}
}

// TestMeshFaultHitsTheProxyContainers: a sidecar action kills the proxy container of the replica (not its app); a
// freeze is thawed by heal, and by Stop if no heal came; a proxy action on a mesh without sidecars needs one
// replica on a known node (its node's proxy).
func TestMeshFaultHitsTheProxyContainers(t *testing.T) {
	u, cm := startUnderlay(t)
	withSidecar := func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{
			{Name: ContainerWorker, ContainerID: "containerd://app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
			{Name: "linkerd-proxy", ContainerID: "containerd://proxy", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	}
	b, _ := newTestBackend(t, Config{NodeFaults: NodeFaultPlan{Containers: true}}, nil, cm,
		workerPod("api", "api-1", 0, ready("10.0.0.1"), withSidecar))
	b.proxies = []string{"linkerd-proxy"}
	ctx := t.Context()
	if err := b.checkNodeFaults(ctx); err != nil {
		t.Fatal(err)
	}
	what, carried, err := b.MeshFault(ctx, &irsv1.MeshAction{Component: "proxy", Service: "api"}, []string{"api-1"})
	if err != nil || what != "sidecar killed: api-1/linkerd-proxy on node-1" || !slices.Equal(carried, []string{"api-1"}) {
		t.Fatalf("kill: %q %v %v", what, carried, err)
	}
	if _, _, err := b.MeshFault(ctx, &irsv1.MeshAction{Component: "sidecar", Service: "api", Mode: "freeze"}, []string{"api-1"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(ctx, true); err != nil {
		t.Fatal(err)
	}
	u.containers.mu.Lock()
	got := strings.Join(u.containers.calls, "; ")
	u.containers.mu.Unlock()
	if got != "kill containerd://proxy; freeze=true containerd://proxy; freeze=false containerd://proxy" {
		t.Errorf("container calls %q, want the proxy killed, frozen, thawed by Stop", got)
	}

	b, _ = newTestBackend(t, Config{NodeFaults: NodeFaultPlan{Containers: true}}, nil, cm, workerPod("api", "api-1", 0, ready("10.0.0.1")))
	if err := b.checkNodeFaults(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.MeshFault(ctx, &irsv1.MeshAction{Component: "proxy", Service: "api"}, []string{"api-1", "api-2"}); err == nil ||
		!strings.Contains(err.Error(), "one replica (count: 1)") {
		t.Errorf("two replicas' node proxy: %v", err)
	}
}
