package engine

import (
	"time"

	"github.com/irs-sim/irs/workflows"
)

// usageKey says whose usage: a service's workers or sidecars, or the control plane (service "").
type usageKey struct {
	service, kind string
}

type serviceUsage struct {
	// mcores is the service's CPU over the last interval, summed over replicas; mcoresMax the busiest replica's
	// CPU over the last second (or interval, if longer).
	mcores, mcoresMax float64
	// freshMax is the busiest replica's CPU among the replicas whose counter was refreshed by this sample
	// (fresh: any was). A counter not refreshed holds its rates for the series, but a phase's busiest second
	// counts only measurements: held, the busiest second of the phase before carried over into the next.
	freshMax float64
	fresh    bool
	// rssMB is the service's memory, summed over replicas; rssMBMax its largest replica's.
	rssMB, rssMBMax float64
	replicas        int
}

// cpuPoint is a process's (or container's) CPU time at a sample.
type cpuPoint struct {
	at  time.Time
	cpu float64
}

// procHistory is a process's recent CPU samples, for rates over the last interval and the last second, and
// the rates of its last refresh (held while its counter is not refreshed).
type procHistory struct {
	points         []cpuPoint
	rate, busiest  float64
	seen, hasRates bool
	lastSeen       time.Time
}

// forgetAfter is how long a process missing from the samples is remembered: one whose node did not answer for
// a while (lost, then back) takes up its counter where it left it, rather than being taken for a new process
// whose whole CPU time since it started would be charged to one interval.
const forgetAfter = 2 * time.Minute

// usageID names what a usage sample measures, across samples.
func usageID(u workflows.Usage) string { return u.Kind + "/" + u.Service + "/" + u.Replica }

// sampleUsage samples every process of the run and returns each service's usage since the previous sample.
// The first call only takes the baseline. A process first seen later (a replacement) counts from zero CPU at
// the previous sample, so its start-up is charged to the interval it happened in. Rates are over the times the
// samples were measured (a cluster's counters lag, and are refreshed every few seconds); a counter not
// refreshed since the last sample keeps the rates it had.
func (e *engine) sampleUsage(now time.Time) map[usageKey]serviceUsage {
	usage := e.o.Backend.Usage()
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[usageKey]serviceUsage{}
	prevSample := e.lastSample
	e.lastSample = now
	window := max(e.interval, time.Second)
	for _, h := range e.procs {
		h.seen = false
	}
	for _, u := range usage {
		at := u.At
		if at.IsZero() {
			at = now
		}
		id := usageID(u)
		h, ok := e.procs[id]
		if ok && len(h.points) > 0 && u.CPUSeconds < h.points[len(h.points)-1].cpu {
			ok = false // its counter went back: another process under the same name (a pid reused)
		}
		if !ok {
			h = &procHistory{}
			if !prevSample.IsZero() && prevSample.Before(at) {
				h.points = []cpuPoint{{at: prevSample}}
			}
			e.procs[id] = h
		}
		h.seen = true
		k := usageKey{service: u.Service, kind: u.Kind}
		s := out[k]
		s.replicas++
		rss := float64(u.RSSBytes) / (1 << 20)
		s.rssMB += rss
		s.rssMBMax = max(s.rssMBMax, rss)
		refreshed := false
		if n := len(h.points); n == 0 || at.After(h.points[n-1].at) {
			refreshed = n > 0 // the first sample is a baseline: no rate yet
			h.refresh(at, u.CPUSeconds, window)
		}
		s.mcores += h.rate
		s.mcoresMax = max(s.mcoresMax, h.busiest)
		if refreshed {
			s.freshMax, s.fresh = max(s.freshMax, h.busiest), true
		}
		out[k] = s
	}
	for id, h := range e.procs {
		if h.seen {
			h.lastSeen = now
		} else if now.Sub(h.lastSeen) > forgetAfter {
			delete(e.procs, id)
		}
	}
	return out
}

// refresh adds a sample of a counter and computes its rates: since the previous sample, and over the latest
// stretch of about a second (or the oldest kept).
func (h *procHistory) refresh(at time.Time, cpu float64, window time.Duration) {
	if n := len(h.points); n > 0 {
		last := h.points[n-1]
		if dt := at.Sub(last.at).Seconds(); dt > 0 {
			h.rate = (cpu - last.cpu) / dt * 1000
		}
		from := h.points[0]
		for _, p := range h.points {
			if at.Sub(p.at) >= window*9/10 {
				from = p
			}
		}
		if dt := at.Sub(from.at).Seconds(); dt > 0 {
			h.busiest = (cpu - from.cpu) / dt * 1000
		}
	}
	h.points = append(h.points, cpuPoint{at: at, cpu: cpu})
	for len(h.points) > 1 && at.Sub(h.points[1].at) >= window*9/10 {
		h.points = h.points[1:]
	}
}
