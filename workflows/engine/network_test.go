package engine

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
)

// nodeBackend records node and network actions; its replicas run on the nodes the test says.
type nodeBackend struct {
	workflows.Backend
	live  []workflows.Replica
	calls []string
}

func (b *nodeBackend) Replicas(service string) []workflows.Replica {
	var out []workflows.Replica
	for _, r := range b.live {
		if r.Service == service {
			out = append(out, r)
		}
	}
	return out
}

func (b *nodeBackend) Link(_ context.Context, a *irsv1.LinkAction) error {
	b.calls = append(b.calls, "link "+workflows.DescribeLink(a))
	return nil
}

func (b *nodeBackend) Partition(_ context.Context, a *irsv1.PartitionAction) error {
	b.calls = append(b.calls, "partition "+workflows.DescribePartition(a))
	return nil
}

func (b *nodeBackend) MeshFault(_ context.Context, a *irsv1.MeshAction, replicas []string) (string, []string, error) {
	b.calls = append(b.calls, fmt.Sprintf("mesh %s node=%s mode=%s heal=%v replicas=%v", a.GetComponent(), a.GetNode(),
		a.GetMode(), a.GetHeal(), replicas))
	if a.GetComponent() == workflows.ComponentProxy { // as under ambient: the replica's node's proxy
		return "hit the node proxy", []string{"storefront-b", "checkout-a"}, nil
	}
	return "hit " + a.GetComponent(), replicas, nil
}

func (b *nodeBackend) LoseNode(_ context.Context, a *irsv1.NodeAction) (string, error) {
	b.calls = append(b.calls, fmt.Sprintf("node name=%s of=%s heal=%v", a.GetName(), a.GetOf(), a.GetHeal()))
	return "lost " + a.GetName(), nil
}

// TestNetworkSteps: each node and network action reaches the backend (a node chosen by service resolved to the
// node its oldest replica runs on); each fault is recorded with what it hit, and each heal ends it; a lost
// node's replicas are not expected to report until it is back.
func TestNetworkSteps(t *testing.T) {
	b := &nodeBackend{live: []workflows.Replica{
		{Service: "storefront", ID: "storefront-a", Node: "n2"},
		{Service: "storefront", ID: "storefront-b", Node: "n3"},
		{Service: "checkout", ID: "checkout-a", Node: "n2"},
	}}
	e := testEngine(t, shopYAML, 1, time.Second, b)
	e.end = 20 * time.Second
	for _, r := range b.live {
		e.mu.Lock()
		e.addReplica(r.Service, r.ID, r.Node, -1)
		e.mu.Unlock()
	}
	steps := []workflows.Step{
		{Path: "a[0]", Link: &irsv1.LinkAction{Set: &irsv1.Link{Delay: "300us"}}},
		{Path: "a[1]", Partition: &irsv1.PartitionAction{Nodes: []string{"n2"}, From: []string{"n3"}}},
		{Path: "a[2]", Partition: &irsv1.PartitionAction{Heal: true}},
		{Path: "a[3]", Node: &irsv1.NodeAction{Of: "storefront", Select: "oldest"}},
		{Path: "a[4]", Node: &irsv1.NodeAction{Heal: true}},
		{Path: "a[5]", Link: &irsv1.LinkAction{Reset_: true}},
	}
	for i, st := range steps {
		e.t0 = time.Now().Add(-time.Duration(2*i+1) * time.Second) // step i is done at 2i+1 s
		if err := e.networkStep(t.Context(), st); err != nil {
			t.Fatalf("%s: %v", st.Path, err)
		}
	}
	want := []string{
		"link every pair of nodes: delay 300us",
		"partition n2 cut off from n3",
		"partition every partition healed",
		"node name=n2 of= heal=false",
		"node name= of= heal=true",
		"link every pair of nodes: the links the run started with",
	}
	if got := strings.Join(b.calls, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("backend calls:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	faults := e.res.GetFaults()
	if len(faults) != 3 {
		t.Fatalf("%d faults, want 3 (link, partition, node): %v", len(faults), faults)
	}
	type rec struct {
		kind       string
		t, healed  float64
		nodes, hit string
	}
	wantRecs := []rec{{FaultLink, 1, 11, "", ""}, {FaultPartition, 3, 5, "n2,n3", ""}, {FaultNode, 7, 9, "n2", "storefront-a,checkout-a"}}
	for i, f := range faults {
		got := rec{f.GetKind(), math.Round(f.GetT()), math.Round(f.GetHealed()), strings.Join(f.GetNodes(), ","),
			strings.Join(f.GetReplicas(), ",")}
		if got != wantRecs[i] {
			t.Errorf("fault %d = %+v, want %+v", i, got, wantRecs[i])
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.unreachable("storefront-a", 7, 8) || !e.unreachable("checkout-a", 8.5, 9.5) {
		t.Error("the replicas on the lost node n2 are expected to report while it is lost")
	}
	if e.unreachable("storefront-b", 7, 8) {
		t.Error("a replica on a node never lost is excused from reporting")
	}
	// Back at 9 s: excused until it reports again (at most healGrace), then expected.
	if !e.unreachable("storefront-a", 10, 11) {
		t.Error("a replica whose node is back is expected at once, before it could report again")
	}
	e.reported("storefront", "storefront-a", 12) // the interval [11, 12)
	if !e.unreachable("storefront-a", 10, 11) || e.unreachable("storefront-a", 12, 13) {
		t.Error("a replica whose node is back is expected from its first report after it, not before")
	}
	if e.unreachable("checkout-a", 9+healGrace.Seconds()+1, 9+healGrace.Seconds()+2) {
		t.Error("a replica that does not report again is excused past healGrace")
	}
}

// TestMeshSteps: a sidecar action hits the chosen replicas' sidecars, a node proxy action the node of a
// replica, with every replica on it hit (the fault its of's service's); heal thaws and ends the frozen fault.
func TestMeshSteps(t *testing.T) {
	b := &nodeBackend{live: []workflows.Replica{
		{Service: "storefront", ID: "storefront-a", Node: "n2"},
		{Service: "storefront", ID: "storefront-b", Node: "n3"},
		{Service: "checkout", ID: "checkout-a", Node: "n3"},
	}}
	e := testEngine(t, shopYAML, 1, time.Second, b)
	e.end = 20 * time.Second
	for _, r := range b.live {
		e.mu.Lock()
		e.addReplica(r.Service, r.ID, r.Node, -1)
		e.mu.Unlock()
	}
	steps := []workflows.Step{
		{Path: "a[0]", Mesh: &irsv1.MeshAction{Component: workflows.ComponentSidecar, Service: "storefront", Select: "oldest", Mode: "freeze"}},
		{Path: "a[1]", Mesh: &irsv1.MeshAction{Heal: true}},
		{Path: "a[2]", Mesh: &irsv1.MeshAction{Component: workflows.ComponentNodeProxy, Of: "checkout"}},
		{Path: "a[3]", Mesh: &irsv1.MeshAction{Heal: true}}, // nothing frozen: the kill's fault is not healed by it
		{Path: "a[4]", Mesh: &irsv1.MeshAction{Component: workflows.ComponentProxy, Service: "storefront", Select: "oldest"}},
	}
	for i, st := range steps {
		e.t0 = time.Now().Add(-time.Duration(2*i+1) * time.Second)
		if err := e.networkStep(t.Context(), st); err != nil {
			t.Fatalf("%s: %v", st.Path, err)
		}
	}
	want := "mesh sidecar node= mode=freeze heal=false replicas=[storefront-a]\n" +
		"mesh  node= mode= heal=true replicas=[]\n" +
		"mesh node_proxy node=n3 mode= heal=false replicas=[storefront-b checkout-a]\n" +
		"mesh  node= mode= heal=true replicas=[]\n" +
		"mesh proxy node= mode= heal=false replicas=[storefront-a]"
	if got := strings.Join(b.calls, "\n"); got != want {
		t.Errorf("backend calls:\n%s\nwant:\n%s", got, want)
	}
	f := e.res.GetFaults()
	if len(f) != 3 {
		t.Fatalf("%d faults, want 3: %v", len(f), f)
	}
	if f[2].GetService() != "" || strings.Join(f[2].GetNodes(), ",") != "n3" {
		t.Errorf("a proxy whose node proxy carried two services' traffic: service %q nodes %v, want none and n3",
			f[2].GetService(), f[2].GetNodes())
	}
	f = f[:min(len(f), 2)]
	if len(f) != 2 || f[0].GetKind() != FaultMesh || f[0].GetService() != "storefront" || math.Round(f[0].GetHealed()) != 3 ||
		strings.Join(f[1].GetNodes(), ",") != "n3" || f[1].GetService() != "checkout" || f[1].Healed != nil {
		t.Errorf("faults %v; want the node proxy's fault to be checkout's (its of): its callers' view and hit share", f)
	}
}

// TestAssertionOnAServiceWhollyOnALostNode: an assertion about a service none of whose replicas could report in
// its phase (their node lost) says there is no data, rather than hold over none ("requests < 10" would pass).
func TestAssertionOnAServiceWhollyOnALostNode(t *testing.T) {
	doc := shopYAML + "assertions:\n  - {service: checkout, phase: spike, expect: requests < 10}\n" +
		"  - {service: storefront, phase: spike, expect: requests < 10}\n"
	e := testEngine(t, doc, 1, time.Second, &nodeBackend{})
	e.res.Phases = []*irsv1.PhaseResult{{Name: "spike", Coverage: []*irsv1.Coverage{
		{Service: "checkout", IntervalsExcused: 1},
		{Service: "storefront", IntervalsExcused: 1, IntervalsExpected: 1, IntervalsMeasured: 1},
	}}}
	rs := e.assertions()
	if len(rs) != 2 || !strings.Contains(rs[0].GetError(), "no data: every replica of checkout was on a node the run had lost") ||
		rs[0].GetPassed() {
		t.Errorf("checkout: %v, want no data", rs[0])
	}
	if rs[1].GetError() != "" || !rs[1].GetPassed() {
		t.Errorf("storefront, one replica measured: %v, want it measured", rs[1])
	}
}
