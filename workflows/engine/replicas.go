package engine

import (
	"cmp"
	"slices"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/protobuf/proto"
)

// maxReplicaRecords bounds the result's replica records: a run that kills a replica every second for a week
// would otherwise write 600,000 of them. Past it replicas are counted, not recorded.
const maxReplicaRecords = 10000

// replicaBook is what the engine knows of every replica that was in service (under e.mu).
type replicaBook struct {
	byID map[string]*irsv1.ReplicaRecord
	// guessed are the records started from the backend's list rather than from their ready event (which may
	// still be queued): their start is the replica's own, until the event says when it was ready.
	guessed map[string]bool
	// omitted are the replicas past maxReplicaRecords, each counted once.
	omitted map[string]bool
}

// recordReplicas records the replicas in service when the run starts, in case their ready events were lost
// (the backend drops events nobody reads).
func (e *engine) recordReplicas(rs []workflows.Replica) {
	for _, r := range rs {
		started := e.since(r.Started)
		e.mu.Lock()
		if rec := e.addReplica(r.Service, r.ID, r.Node, started); rec != nil {
			e.book.guessed[r.ID] = true
		}
		e.mu.Unlock()
	}
}

// addReplica records a replica, unless it is recorded or the records are full (then it is counted). Callers
// hold e.mu.
func (e *engine) addReplica(service, id, node string, started float64) *irsv1.ReplicaRecord {
	if rec := e.book.byID[id]; rec != nil {
		return nil
	}
	if len(e.res.Replicas) >= maxReplicaRecords {
		if !e.book.omitted[id] {
			e.book.omitted[id] = true
			e.res.ReplicasOmitted++
		}
		return nil
	}
	rec := &irsv1.ReplicaRecord{Service: service, Replica: id, Node: node, Started: started}
	e.res.Replicas = append(e.res.Replicas, rec)
	e.book.byID[id] = rec
	return rec
}

// followReplica keeps a replica's record with what the backend reports: ready (it starts, or starts again
// after a restart in place), gone. Callers hold e.mu.
func (e *engine) followReplica(ev workflows.Event, t float64) {
	switch ev.Kind {
	case workflows.EventReady:
		rec := e.book.byID[ev.Replica]
		if rec == nil {
			// A pod that a Deployment starts while the run's namespace is being deleted never served the run.
			if t > e.end.Seconds() {
				return
			}
			e.addReplica(ev.Service, ev.Replica, ev.Node, t)
			return
		}
		if e.book.guessed[ev.Replica] {
			rec.Started = t
			delete(e.book.guessed, ev.Replica)
		}
		if rec.Node == "" {
			rec.Node = ev.Node
		}
		rec.Ended = nil // restarted in place: the same replica goes on
	case workflows.EventExit:
		if rec := e.book.byID[ev.Replica]; rec != nil && rec.Ended == nil {
			rec.Ended = proto.Float64(t)
		}
	}
}

// sortReplicas puts the records in the order the replicas became ready (events come from several goroutines).
// Callers hold e.mu.
func (e *engine) sortReplicas() {
	slices.SortStableFunc(e.res.Replicas, func(a, b *irsv1.ReplicaRecord) int { return cmp.Compare(a.GetStarted(), b.GetStarted()) })
}
