package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/irs-sim/irs/workflows"
	"google.golang.org/protobuf/proto"
)

// networkStep changes the network between nodes or loses a node (or heals), through the backend's NodeFaults.
func (e *engine) networkStep(ctx context.Context, st workflows.Step) error {
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
		e.action(now, st, "link", "", workflows.DescribeLink(st.Link))
	case st.Partition != nil:
		if err := nf.Partition(ctx, st.Partition); err != nil {
			return err
		}
		e.action(now, st, "partition", "", workflows.DescribePartition(st.Partition))
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
		what, err := nf.LoseNode(ctx, a)
		if err != nil {
			return err
		}
		e.loseNode(now, a.GetName(), a.GetHeal())
		e.action(now, st, "node", replica, what)
	}
	return nil
}

// nodeOf chooses the replica of a node action's service whose node is lost: the oldest, or one at random
// (seeded, as kills are), among the live replicas whose node is known.
func (e *engine) nodeOf(st workflows.Step) (workflows.Replica, bool) {
	var live []workflows.Replica // oldest first
	for _, r := range e.o.Backend.Replicas(st.Node.GetOf()) {
		if r.Node != "" {
			live = append(live, r)
		}
	}
	chosen, _, _ := choose(live, choice{count: 1, oldest: st.Node.GetSelect() == "oldest"}, stepRand(e.o.Workflow.GetSeed(), st))
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
// drained it), so its stats are not expected then. Callers hold e.mu.
func (e *engine) unreachable(replica string, from, to float64) bool {
	rec := e.book.byID[replica]
	if rec == nil || rec.GetNode() == "" {
		return false
	}
	for _, l := range e.lostNodes {
		if l.node == rec.GetNode() && l.from < to && (l.to < 0 || l.to > from) {
			return true
		}
	}
	return false
}
