package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/protobuf/proto"
)

// networkStep changes the network between nodes or loses a node (or heals), through the backend's NodeFaults.
func (e *engine) networkStep(ctx context.Context, st workflows.Step) error {
	if st.Mesh != nil {
		mf, ok := e.o.Backend.(workflows.MeshFaults)
		if !ok {
			return fmt.Errorf("this backend cannot kill or freeze a mesh's components")
		}
		return e.meshStep(ctx, mf, st, time.Now())
	}
	nf, ok := e.o.Backend.(workflows.NodeFaults)
	if !ok {
		return fmt.Errorf("this backend has no nodes to lose and no network between them to change")
	}
	now := time.Now()
	switch {
	case st.Link != nil:
		if err := nf.Link(ctx, st.Link); err != nil {
			return err
		}
		what := workflows.DescribeLink(st.Link)
		e.action(now, st, "link", "", what)
		if st.Link.GetReset_() || workflows.DescribeLinkSettings(st.Link.GetSet()) == "a plain wire" {
			e.healNetwork(now, FaultLink, st.Link.GetNodes()...)
		} else {
			e.recordFault(now, st, &irsv1.FaultRecord{Kind: FaultLink, Target: what, Nodes: st.Link.GetNodes()})
		}
	case st.Partition != nil:
		if err := nf.Partition(ctx, st.Partition); err != nil {
			return err
		}
		what := workflows.DescribePartition(st.Partition)
		e.action(now, st, "partition", "", what)
		if st.Partition.GetHeal() {
			e.healNetwork(now, FaultPartition)
		} else {
			e.recordFault(now, st, &irsv1.FaultRecord{Kind: FaultPartition, Target: what,
				Nodes: append(slices.Clone(st.Partition.GetNodes()), st.Partition.GetFrom()...)})
		}
	case st.Node != nil:
		a, replica := st.Node, ""
		if a.GetOf() != "" {
			r, ok := e.nodeOf(st)
			if !ok {
				e.action(now, st, "node", "", "no live replica of "+a.GetOf()+" on a known node")
				return nil
			}
			a = proto.CloneOf(a)
			a.Name, a.Of, replica = r.Node, "", r.ID
		}
		hit := e.replicasOn(a.GetName())
		what, err := nf.LoseNode(ctx, a)
		if err != nil {
			return err
		}
		e.loseNode(now, a.GetName(), a.GetHeal())
		e.action(now, st, "node", replica, what)
		if a.GetHeal() {
			var named []string
			if a.GetName() != "" {
				named = []string{a.GetName()}
			}
			e.healNetwork(now, FaultNode, named...)
		} else {
			e.recordFault(now, st, &irsv1.FaultRecord{Kind: FaultNode, Target: what, Nodes: []string{a.GetName()},
				Replicas: idsOf(hit)})
		}
	}
	return nil
}

// nodeOf chooses the replica of a node action's service whose node is lost.
func (e *engine) nodeOf(st workflows.Step) (workflows.Replica, bool) {
	return e.replicaNode(st.Node.GetOf(), st.Node.GetSelect(), st)
}

// replicaNode chooses a replica of service whose node an action hits: the oldest, or one at random (seeded, as
// kills are), among the live replicas whose node is known.
func (e *engine) replicaNode(service, selection string, st workflows.Step) (workflows.Replica, bool) {
	var live []workflows.Replica // oldest first
	for _, r := range e.o.Backend.Replicas(service) {
		if r.Node != "" {
			live = append(live, r)
		}
	}
	chosen, _, _ := choose(live, choice{count: 1, oldest: selection == "oldest"}, stepRand(e.o.Workflow.GetSeed(), st))
	if len(chosen) == 0 {
		return workflows.Replica{}, false
	}
	return chosen[0], true
}

// networkLane is the lane of every network step: they change one shared network, in the timeline's order.
const networkLane = "network"

// nodeLoss is a node the run lost, from when until when (to < 0: not brought back).
type nodeLoss struct {
	node     string
	from, to float64
}

// loseNode records a node lost at at, or (heal) brought back: every node lost, or the one named.
func (e *engine) loseNode(at time.Time, node string, heal bool) {
	t := e.since(at)
	e.mu.Lock()
	defer e.mu.Unlock()
	if !heal {
		e.lostNodes = append(e.lostNodes, nodeLoss{node: node, from: t, to: -1})
		return
	}
	for i := range e.lostNodes {
		if l := &e.lostNodes[i]; l.to < 0 && (node == "" || l.node == node) {
			l.to = t
		}
	}
}

// unreachable says whether a replica's node was lost during any of [from, to): the run cut the way to it (or
// drained it), so its stats are not expected then, nor once the node is back until the replica reports again
// (its kubelet reconnects, the stream to it is opened again), for at most healGrace. Callers hold e.mu.
func (e *engine) unreachable(replica string, from, to float64) bool {
	rec := e.book.byID[replica]
	if rec == nil || rec.GetNode() == "" {
		return false
	}
	for _, l := range e.lostNodes {
		if l.node != rec.GetNode() || l.from >= to {
			continue
		}
		if l.to < 0 || l.to > from {
			return true
		}
		if from < l.to+healGrace.Seconds() && !e.reportedSince(replica, l.to, from) {
			return true
		}
	}
	return false
}

// healGrace bounds how long after its node is back a replica may take to report again.
const healGrace = 15 * time.Second

// reportedSince says whether a replica reported an interval that starts in [since, before].
func (e *engine) reportedSince(replica string, since, before float64) bool {
	rep := e.reports[replica]
	if rep == nil {
		return false
	}
	step := e.interval.Seconds()
	found := false
	rep.intervals.each(func(k int) {
		if start := float64(k-1) * step; start >= since-1e-9 && start <= before+1e-9 {
			found = true
		}
	})
	return found
}

// replicasOn returns the live replicas of every service on a node.
func (e *engine) replicasOn(node string) []workflows.Replica {
	var out []workflows.Replica
	for _, s := range e.o.Workflow.GetServices() {
		for _, r := range e.o.Backend.Replicas(s.GetName()) {
			if r.Node == node && node != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

// healNetwork marks the open faults of a kind healed at at, and ends their windows: every one, or (nodes
// named) those whose nodes are all among them (a link put back between one node and the others does not heal
// a change of every link).
func (e *engine) healNetwork(at time.Time, kind string, nodes ...string) {
	t := e.since(at)
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, f := range e.res.GetFaults() {
		if f.GetKind() != kind || f.Healed != nil {
			continue
		}
		covered := len(nodes) == 0 || len(f.GetNodes()) > 0
		for _, n := range f.GetNodes() {
			covered = covered && (len(nodes) == 0 || slices.Contains(nodes, n))
		}
		if covered {
			f.Healed = proto.Float64(t)
		}
	}
	e.boundaries = append(e.boundaries, t)
}

// meshStep kills or freezes a mesh component: the sidecars of replicas chosen as a kill's victims are, the
// node proxy of a node (named, or a replica's), the control plane; or thaws what the run froze.
func (e *engine) meshStep(ctx context.Context, mf workflows.MeshFaults, st workflows.Step, now time.Time) error {
	a := proto.CloneOf(st.Mesh)
	of := a.GetOf() // a node proxy of one of the service's replicas' node: the fault is that service's
	var hit []workflows.Replica
	switch {
	case a.GetHeal():
	case a.GetComponent() == workflows.ComponentSidecar || a.GetComponent() == workflows.ComponentProxy:
		chosen, _, err := choose(e.o.Backend.Replicas(a.GetService()), choice{count: a.GetCount(), oldest: a.GetSelect() == "oldest"},
			stepRand(e.o.Workflow.GetSeed(), st))
		if err != nil {
			return err
		}
		if len(chosen) == 0 {
			e.action(now, st, "mesh", "", "no live replica of "+a.GetService()+" whose sidecar to hit")
			return nil
		}
		hit = chosen
	case a.GetComponent() == workflows.ComponentNodeProxy:
		if a.GetOf() != "" {
			r, ok := e.replicaNode(a.GetOf(), a.GetSelect(), st)
			if !ok {
				e.action(now, st, "mesh", "", "no live replica of "+a.GetOf()+" on a known node")
				return nil
			}
			a.Node, a.Of = r.Node, ""
		}
		hit = e.replicasOn(a.GetNode())
	}
	what, carried, err := mf.MeshFault(ctx, a, idsOf(hit))
	if err != nil {
		return err
	}
	replica := ""
	if len(hit) == 1 {
		replica = hit[0].ID
	}
	e.action(now, st, "mesh", replica, what)
	if a.GetHeal() {
		e.thawed(now)
		return nil
	}
	r := &irsv1.FaultRecord{Kind: FaultMesh, Target: what, Replicas: carried, Nodes: e.nodesOfIDs(carried)}
	if a.GetNode() != "" {
		r.Nodes = []string{a.GetNode()}
	}
	switch {
	case len(carried) > 0 && e.sameService(carried, a.GetService()):
		r.Service = a.GetService() // only the service's replicas were hit: their share says how callers coped
	case of != "":
		// The proxy of the node one of its replicas was on: its share says how the service's callers coped
		// (the node's other replicas are among those hit too).
		r.Service = of
	}
	e.recordFault(now, st, r)
	if a.GetMode() == "freeze" {
		e.mu.Lock()
		e.frozen = append(e.frozen, r)
		e.mu.Unlock()
	}
	return nil
}

// thawed marks the frozen mesh faults healed at at (a killed container restarts on its own: its fault's window
// runs to the next fault), and ends their windows.
func (e *engine) thawed(at time.Time) {
	t := e.since(at)
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, f := range e.frozen {
		f.Healed = proto.Float64(t)
	}
	e.frozen = nil
	e.boundaries = append(e.boundaries, t)
}

// nodesOfIDs returns the nodes the replicas recorded under ids ran on, once each, sorted.
func (e *engine) nodesOfIDs(ids []string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var nodes []string
	for _, id := range ids {
		if rec := e.book.byID[id]; rec != nil && rec.GetNode() != "" && !slices.Contains(nodes, rec.GetNode()) {
			nodes = append(nodes, rec.GetNode())
		}
	}
	slices.Sort(nodes)
	return nodes
}

// sameService says whether every replica of ids is one of service's.
func (e *engine) sameService(ids []string, service string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range ids {
		if rec := e.book.byID[id]; rec == nil || rec.GetService() != service {
			return false
		}
	}
	return service != ""
}
