package engine

import (
	"fmt"
	"slices"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/protobuf/proto"
)

// Kinds of fault (FaultRecord.kind).
const (
	FaultKill = "kill" // replicas killed
	FaultGray = "gray" // some replicas of a service changed (slow, failing), the others not
	// The network between nodes, and nodes (NodeFaults): links made slow or lossy, nodes partitioned, a node
	// lost (cut off, or drained).
	FaultLink      = "link"
	FaultPartition = "partition"
	FaultNode      = "node"
	// A mesh component killed or frozen: sidecars, a node proxy, the control plane.
	FaultMesh = "mesh"
)

// openGray is a gray fault not healed yet: the replicas it hit that still have its change.
type openGray struct {
	record  *irsv1.FaultRecord
	pending []string
}

// hasFaults reports whether a timeline injects faults: kills, configures with a selector, node and network
// actions. Only then does the engine keep what each replica reported per interval, which their blast radius is
// computed from; services are those whose callers' latency is kept (those a fault hits by name; a network
// fault's callers keep theirs whatever the callee: engine.networkFaults).
func hasFaults(tl *workflows.Timeline) (faulty bool, services map[string]bool) {
	services = map[string]bool{}
	for _, st := range tl.Steps {
		if st.Kill != nil || st.Configure != nil && workflows.Selects(st.Configure) {
			services[st.Service()] = true
		}
		faulty = faulty || st.Network() // a node or a link may carry any service's calls
	}
	return faulty || len(services) > 0, services
}

// recordFault starts the record of a fault done at at by a step; its blast radius is computed when the run
// ends (faultDamage).
func (e *engine) recordFault(at time.Time, st workflows.Step, r *irsv1.FaultRecord) {
	t := e.since(at)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.addFault(t, st, r)
}

// addFault records a fault at run second t. Callers hold e.mu.
func (e *engine) addFault(t float64, st workflows.Step, r *irsv1.FaultRecord) {
	r.Phase, r.Action, r.Scheduled, r.T = st.Phase, st.Path, st.At.Seconds(), t
	e.res.Faults = append(e.res.Faults, r)
	e.boundaries = append(e.boundaries, t)
}

// recordConfigure records what a configure done at at was to the faults: with a selector and something set, a
// gray fault on the chosen replicas (of the service's of); clearing or restoring only, the healing of the gray
// faults whose replicas it reached (chosen; nil: every one).
func (e *engine) recordConfigure(at time.Time, st workflows.Step, chosen []workflows.Replica, of int) {
	c := st.Configure
	if c.GetSet() != nil {
		if chosen == nil {
			return // every replica changed alike: the service's behaviour, not a fault of some of it
		}
		change := workflows.DescribeConfigure(&irsv1.ConfigureAction{Set: c.GetSet(), Clear: c.GetClear()})
		on := ""
		if c.GetNode() != "" {
			on = " on node " + c.GetNode()
		}
		r := &irsv1.FaultRecord{Kind: FaultGray, Service: c.GetService(), Replicas: idsOf(chosen), Nodes: nodesOf(chosen),
			Target: fmt.Sprintf("%s on %d of %d replicas%s (%s)", change, len(chosen), of, on, selection(c.GetSelect()))}
		e.recordFault(at, st, r)
		e.mu.Lock()
		e.grays = append(e.grays, &openGray{record: r, pending: idsOf(chosen)})
		e.mu.Unlock()
		return
	}
	t := e.since(at)
	e.mu.Lock()
	defer e.mu.Unlock()
	reached := false
	for _, g := range e.grays {
		if g.record.GetService() != c.GetService() {
			continue
		}
		n := len(g.pending)
		g.pending = slices.DeleteFunc(g.pending, func(id string) bool {
			return chosen == nil || slices.ContainsFunc(chosen, func(r workflows.Replica) bool { return r.ID == id })
		})
		reached = reached || len(g.pending) < n
		if n > 0 && len(g.pending) == 0 {
			g.record.Healed = proto.Float64(t)
		}
	}
	if reached {
		e.boundaries = append(e.boundaries, t) // the timeline changed the fault: its window ends
	}
}

// followFault takes what the backend reports into the open faults: a replica of a gray fault that exits takes
// its change with it (its replacement starts without). Callers hold e.mu.
func (e *engine) followFault(ev workflows.Event, t float64) {
	if ev.Kind != workflows.EventExit && ev.Kind != workflows.EventRestart {
		return
	}
	for _, g := range e.grays {
		n := len(g.pending)
		g.pending = slices.DeleteFunc(g.pending, func(id string) bool { return id == ev.Replica })
		if n > 0 && len(g.pending) == 0 && g.record.Healed == nil {
			g.record.Healed = proto.Float64(t)
		}
	}
}

// killsHealed sets, for every kill fault, when every replica it killed had a ready replacement (from the kill
// records). Callers hold e.mu.
func (e *engine) killsHealed() {
	for _, f := range e.res.GetFaults() {
		if f.GetKind() != FaultKill {
			continue
		}
		if healed, ok := e.killHealed(f); ok {
			f.Healed = proto.Float64(healed)
		}
	}
}

// killHealed returns when every replica a kill fault killed had a ready replacement, if they all had. Callers
// hold e.mu.
func (e *engine) killHealed(f *irsv1.FaultRecord) (float64, bool) {
	healed := 0.0
	for _, id := range f.GetReplicas() {
		var k *irsv1.KillRecord
		for _, r := range e.res.GetKills() {
			if r.GetReplica() == id && r.GetService() == f.GetService() && r.GetKilled() <= f.GetT()+0.05 &&
				r.GetKilled() >= f.GetT()-0.05 {
				k = r
			}
		}
		if k == nil || k.ReplacementReady == nil {
			return 0, false
		}
		healed = max(healed, k.GetReplacementReady())
	}
	return healed, len(f.GetReplicas()) > 0
}
