package engine

import (
	"fmt"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// maxLag is how far behind its schedule a load generator may fall before its phase is saturated. A generator
// on time has a backlog of the requests due in the microseconds before a send; one that waits for a free
// connection, or for a CPU, falls behind by as long as it waits. A tenth of a second is far beyond the first and
// the scheduling noise of a busy machine, and well short of what a saturated generator shows (its lag grows
// without bound).
const maxLagMs = 100

// coldStart is how much of a phase's beginning counts as its start: connections opening, a sidecar's first
// requests, a replica's first windows.
const coldStart = 3.0

// busyGeneratorMcores is the CPU a generator's replica uses beyond which its lateness is its own work's (it is
// single-core bound near 1000), not another tenant's.
const busyGeneratorMcores = 700

// lagDiagnosis is what the series says of when a generator fell behind in a phase, and of the machine then.
type lagDiagnosis struct {
	first, last float64 // seconds into the phase of the first and last interval beyond maxLagMs (-1: none)
	oversleepMs float64 // the runner's machine: the worst oversleep of a 10 ms sleep in those intervals
	pressure    float64 // and the most CPU pressure (-1: unknown)
	intervals   int     // how many intervals were beyond maxLagMs
	sentBefore  bool    // the generator sent requests before the phase: its start was not cold
	scale       float64 // the time scale: seconds said to users are the timeline's
}

// lagged reads a generator's lag and the machine from the phase's ticks. Callers hold e.mu.
func (e *engine) lagged(k key, start, end float64) lagDiagnosis {
	d := lagDiagnosis{first: -1, last: -1, pressure: -1, scale: e.o.Timeline.Scale}
	if k.kind != kindLoad {
		return d
	}
	r := e.record()
	if first, ok := r.firstSent[k.service]; ok && first <= start+1e-9 {
		d.sentBefore = true
	}
	for _, l := range r.lags {
		if l.service != k.service || l.t <= start+1e-9 || l.t > end+1e-9 {
			continue
		}
		at := l.t - start
		if d.first < 0 {
			d.first = at
		}
		d.last = at
		d.intervals++
		if l.machine {
			d.oversleepMs = max(d.oversleepMs, l.oversleepMs)
			d.pressure = max(d.pressure, l.cpuPressure)
		}
	}
	return d
}

// saturation reports a load generator that fell behind its schedule in a phase (nil otherwise), with its
// cause: the machine starving it (a reference sleeper on the runner's machine overslept as long), its CPU taken
// by others (the sends it slept for woke late while it used little CPU: on any backend), a cold start (behind
// only in the phase's first seconds), too few connections (requests waited for a free one), or its own CPU.
//
// Behind at the end of an interval is one instant; the generator's lateness is every send's: a phase whose sends
// started maxLagMs late or more at p99 measured the generator (a run whose sends were 237 ms late at p99, its
// backlog worked off before each interval ended, once stayed valid and failed on the timeouts the machine made).
func saturation(k key, a *acc, phase string, d lagDiagnosis) *irsv1.Saturation {
	if k.kind != kindLoad || (a.lagMs <= maxLagMs && latenessP99(a) < maxLagMs) {
		return nil
	}
	s := &irsv1.Saturation{Service: k.service, Phase: phase, LagMs: a.lagMs, Due: a.due, Unsent: max(a.unsent, 0),
		Blocked: a.blocked, Late: a.late}
	// The generator's own lateness (sends it slept for) says whether it got its CPU when it asked, wherever it
	// runs; the runner's machine (d) is its machine only on the local backend.
	late := latenessP99(a)
	cpu := a.usage.mcores / float64(max(1, a.replicas))
	switch {
	case d.oversleepMs >= starvedMs:
		pressure := ""
		if d.pressure >= 0 {
			pressure = fmt.Sprintf(", and tasks waited for a CPU %.0f %% of the time", 100*d.pressure)
		}
		s.Detail = fmt.Sprintf("the machine starved it: while it was behind, a 10 ms sleep on the runner's machine overslept by "+
			"up to %.0f ms%s. More connections or replicas would not help; run on a quieter machine (or give IRS more CPUs)",
			d.oversleepMs, pressure)
	case late >= starvedMs && (!a.usage.measured || cpu < busyGeneratorMcores):
		used := "its CPU is not measured"
		if a.usage.measured {
			used = fmt.Sprintf("its worker used %.0f millicores a replica", cpu)
		}
		s.Detail = fmt.Sprintf("its CPU was not its own: the sends it slept for woke up to %.0f ms late (p99) while %s. "+
			"More connections or replicas would not help; give the generators CPUs of their own (placement) or a quieter "+
			"machine or node", late, used)
	case d.intervals > 0 && d.last <= coldStart && !d.sentBefore:
		s.Detail = fmt.Sprintf("a cold start: it was behind only in the phase's first %.0f s (connections opening, proxies "+
			"warming up). Put a warm-up phase before it", d.last/max(d.scale, 1e-9))
	case a.blocked > 0:
		s.Detail = fmt.Sprintf("%d requests became due while every connection was busy: the latency needs more "+
			"connections than load.connections gives", a.blocked)
	case late >= starvedMs:
		s.Detail = fmt.Sprintf("its worker could not keep up with its own work: it used %.0f millicores a replica, and the "+
			"sends it slept for woke up to %.0f ms late (p99): spread the load over more replicas", cpu, late)
	case a.lateness != nil && a.lateness.TotalCount() > 0:
		s.Detail = fmt.Sprintf("its worker could not send fast enough (CPU) though its sends woke on time (%.1f ms late at "+
			"p99): spread the load over more replicas", late)
	default:
		s.Detail = "its worker could not send fast enough (CPU) while the runner's machine was not starved: spread the load over more replicas"
	}
	return s
}

// latenessP99 is how late a load generator's sends started at p99, in ms (0 without any).
func latenessP99(a *acc) float64 {
	if a.lateness == nil || a.lateness.TotalCount() == 0 {
		return 0
	}
	return float64(a.lateness.ValueAtPercentile(99)) / 1000
}
