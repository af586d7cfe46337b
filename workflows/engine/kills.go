package engine

import (
	"math"
	"slices"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/protobuf/proto"
)

// recordKills records a kill at at and its fault, before the signal goes (the exit may be reported at once).
func (e *engine) recordKills(at time.Time, st workflows.Step, service string, ids []string, signal string, fault *irsv1.FaultRecord) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.sinceLocked(at)
	e.addKills(t, st, service, ids, signal)
	e.addFault(t, st, fault)
}

// recordKillNow is recordKills now, the time read once the lock is held: a wait for the lock (an interval
// closing) comes before the kill's time, not between it and the signal. It returns the time it gave them.
func (e *engine) recordKillNow(st workflows.Step, service string, ids []string, signal string, fault *irsv1.FaultRecord) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	t := e.sinceLocked(now)
	e.addKills(t, st, service, ids, signal)
	e.addFault(t, st, fault)
	return now
}

// addKills starts the records of replicas killed at run second t. Callers hold e.mu.
func (e *engine) addKills(t float64, st workflows.Step, service string, ids []string, signal string) {
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

// killDamage records, for every kill, what the load generators saw over its fault's window (faultUntil: to the
// clients' recovery after its replacement was ready, whatever other faults did meanwhile): how long until their
// 5xx rate stayed under 1 %, and how many of their requests failed until then. Callers hold e.mu.
func (e *engine) killDamage() {
	load := e.record().load
	for _, r := range e.res.GetKills() {
		t, until := r.GetKilled(), e.end.Seconds()
		if f := e.faultOfKill(r); f != nil {
			t, until = f.GetT(), e.faultUntil(f)
		}
		d := recoveryFrom(load, faultSpan{t: t, until: until, interval: e.interval.Seconds(), runEnd: e.end.Seconds()})
		r.Recovery, r.Errors = proto.Float64(d.recovery), proto.Int64(d.lost) // run seconds, as the record's other times
	}
}

// faultOfKill is the kill fault recorded with a kill record (nil: none). Callers hold e.mu.
func (e *engine) faultOfKill(r *irsv1.KillRecord) *irsv1.FaultRecord {
	for _, f := range e.res.GetFaults() {
		if f.GetKind() == FaultKill && f.GetService() == r.GetService() && slices.Contains(f.GetReplicas(), r.GetReplica()) &&
			math.Abs(f.GetT()-r.GetKilled()) <= 0.05 {
			return f
		}
	}
	return nil
}

// recoveredBelow is the 5xx rate under which the load generators count as recovered from a kill or a fault.
const recoveredBelow = 0.01
