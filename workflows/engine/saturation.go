package engine

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

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
	// The measured services' machines while it was behind: the most their goroutines waited to run (an
	// interval's p99) and whose.
	measuredWaitMs float64
	measuredBy     string
	scale          float64 // the time scale: seconds said to users are the timeline's
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
		for _, sp := range r.starved {
			if sp.t == l.t && sp.waitMs > d.measuredWaitMs {
				d.measuredWaitMs, d.measuredBy = sp.waitMs, sp.service
			}
		}
		if l.machine {
			d.oversleepMs = max(d.oversleepMs, l.oversleepMs)
			d.pressure = max(d.pressure, l.cpuPressure)
		}
	}
	return d
}

// saturation reports a load generator that fell behind its schedule in a phase (nil otherwise), with every
// cause the evidence holds, strongest first: too few connections (the share of due requests that waited for a
// free one), the machine starving it (a reference sleeper on the runner's machine overslept as long), its CPU
// taken by others (the sends it slept for woke late while it used little CPU: on any backend), a cold start
// (behind only in the phase's first seconds), or its own CPU. Every cause that holds is named, and no advice
// contradicts another's fix: with 77 % of due requests waiting for one of 2 connections, a machine also busy was
// once blamed alone, with "more connections would not help"; 64 connections took p50 from 527 ms to 8.6 ms.
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
	causes := saturationCauses(a, d)
	switch len(causes) {
	case 0:
		s.Detail = "its worker could not send fast enough (CPU) while the runner's machine was not starved: spread the load over more replicas"
	case 1:
		s.Detail = causes[0].text
	default:
		parts := make([]string, len(causes))
		for i, c := range causes {
			parts[i] = fmt.Sprintf("(%d) %s", i+1, c.text)
		}
		s.Detail = fmt.Sprintf("%d causes, the strongest evidence first: %s", len(causes), strings.Join(parts, "; "))
	}
	return s
}

// saturationCause is one cause of a generator falling behind, and how strong its evidence is (0-1).
type saturationCause struct {
	strength float64
	text     string
}

// saturationCauses returns every cause the evidence holds, strongest first.
func saturationCauses(a *acc, d lagDiagnosis) []saturationCause {
	// The generator's own lateness (sends it slept for) says whether it got its CPU when it asked, wherever it
	// runs; the runner's machine (d) is its machine only on the local backend.
	late := latenessP99(a)
	cpu := a.usage.mcores / float64(max(1, a.replicas))
	blockedShare := float64(a.blocked) / float64(max(a.due, a.blocked, 1))
	connections := a.blocked > 0 && blockedShare >= minBlockedShare
	var out []saturationCause
	add := func(strength float64, format string, args ...any) {
		out = append(out, saturationCause{strength: min(1, strength), text: fmt.Sprintf(format, args...)})
	}
	if connections {
		add(blockedShare, "too few connections: %d requests (%.0f %% of those due) became due while every connection was busy: "+
			"the latency needs more connections than load.connections gives (raise it)", a.blocked, 100*blockedShare)
	}
	// Advice that holds only if connections are not the cause says so only then.
	notConnections := ""
	if !connections {
		notConnections = " More connections or replicas would not help;"
	}
	if d.oversleepMs >= starvedMs {
		pressure := ""
		if d.pressure >= 0 {
			pressure = fmt.Sprintf(", and tasks waited for a CPU %.0f %% of the time", 100*d.pressure)
		}
		add(d.oversleepMs/(4*maxLagMs), "the machine starved it: while it was behind, a 10 ms sleep on the runner's machine overslept by "+
			"up to %.0f ms%s.%s run on a quieter machine (or give IRS more CPUs)", d.oversleepMs, pressure, notConnections)
	}
	if d.measuredWaitMs >= starvedMs {
		add(d.measuredWaitMs/(4*maxLagMs), "the services it measures were starved of CPU: while it was behind, %s's goroutines "+
			"waited up to %.0f ms (p99 of an interval) to run, whatever their work: their nodes' CPUs were taken (give the "+
			"services CPUs of their own, fewer replicas a node, or a quieter cluster)", d.measuredBy, d.measuredWaitMs)
	}
	switch {
	case late >= starvedMs && (!a.usage.measured || cpu < busyGeneratorMcores):
		used := "its CPU is not measured"
		if a.usage.measured {
			used = fmt.Sprintf("its worker used %.0f millicores a replica", cpu)
		}
		add(late/(4*maxLagMs), "its CPU was not its own: the sends it slept for woke up to %.0f ms late (p99) while %s.%s "+
			"give the generators CPUs of their own (placement) or a quieter machine or node", late, used, notConnections)
	case late >= starvedMs:
		add(cpu/1000, "its worker could not keep up with its own work: it used %.0f millicores a replica, and the "+
			"sends it slept for woke up to %.0f ms late (p99): spread the load over more replicas", cpu, late)
	case a.usage.measured && cpu >= busyGeneratorMcores:
		add(cpu/1000, "its worker could not send fast enough (CPU: %.0f millicores a replica) though its sends woke on time "+
			"(%.1f ms late at p99): spread the load over more replicas", cpu, late)
	}
	if d.intervals > 0 && d.last <= coldStart && !d.sentBefore {
		add(0.5, "a cold start: it was behind only in the phase's first %.0f s (connections opening, proxies "+
			"warming up). Put a warm-up phase before it", d.last/max(d.scale, 1e-9))
	}
	if len(out) == 0 && a.lateness != nil && a.lateness.TotalCount() > 0 {
		add(0.1, "its worker could not send fast enough (CPU) though its sends woke on time (%.1f ms late at "+
			"p99): spread the load over more replicas", late)
	}
	slices.SortStableFunc(out, func(x, y saturationCause) int { return cmp.Compare(y.strength, x.strength) })
	return out
}

// minBlockedShare is the share of due requests that waited for a free connection from which too few
// connections are a cause.
const minBlockedShare = 0.01

// latenessP99 is how late a load generator's sends started at p99, in ms (0 without any).
func latenessP99(a *acc) float64 {
	if a.lateness == nil || a.lateness.TotalCount() == 0 {
		return 0
	}
	return float64(a.lateness.ValueAtPercentile(99)) / 1000
}
