package engine

import (
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/protobuf/proto"
)

// recordKills starts the records of replicas being killed now.
func (e *engine) recordKills(at time.Time, st workflows.Step, service string, ids []string, signal string) {
	t := e.since(at)
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range ids {
		r := &irsv1.KillRecord{Service: service, Replica: id, Signal: signal, Scheduled: st.At.Seconds(), Killed: t}
		e.res.Kills = append(e.res.Kills, r)
		e.killed[id] = r
	}
}

// followKill completes the record of a killed replica with what the backend reports happened to it. Callers
// hold e.mu.
func (e *engine) followKill(ev workflows.Event, t float64) {
	at := proto.Float64(t)
	switch ev.Kind {
	case workflows.EventExit, workflows.EventRestart:
		if r := e.killed[ev.Replica]; r != nil && r.Gone == nil {
			r.Gone = at
		}
		if ev.Kind == workflows.EventRestart { // restarted in place: it is its own replacement
			if r := e.killed[ev.Replica]; r != nil && r.Replacement == "" {
				r.Replacement = ev.Replica
			}
		}
	case workflows.EventEndpointRemoved:
		if r := e.killed[ev.Replica]; r != nil && r.EndpointRemoved == nil {
			r.EndpointRemoved = at
		}
	case workflows.EventReplace:
		if r := e.killed[ev.Replaces]; r != nil && r.Replacement == "" {
			r.Replacement = ev.Replica
		}
	case workflows.EventReady:
		key := ev.Replaces
		if key == "" {
			key = ev.Replica // a restart in place
		}
		if r := e.killed[key]; r != nil && r.ReplacementReady == nil && r.Gone != nil &&
			(r.Replacement == "" || r.Replacement == ev.Replica) {
			r.Replacement, r.ReplacementReady = ev.Replica, at
		}
	}
}
