package engine

import "time"

// usageKey says whose usage: a service's workers or sidecars, or the control plane (service "").
type usageKey struct {
	service, kind string
}

type serviceUsage struct {
	// mcores is the service's CPU over the last interval, summed over replicas; mcoresMax the busiest replica's
	// CPU over the last second (or interval, if longer).
	mcores, mcoresMax float64
	// rssMB is the service's memory, summed over replicas; rssMBMax its largest replica's.
	rssMB, rssMBMax float64
	replicas        int
}

// cpuPoint is a process's CPU time at a sample.
type cpuPoint struct {
	at  time.Time
	cpu float64
}

// procHistory is a process's recent CPU samples, for rates over the last interval and the last second.
type procHistory struct {
	points []cpuPoint
	seen   bool
}

// sampleUsage samples every process of the run and returns each service's usage since the previous sample.
// The first call only takes the baseline. A process first seen later (a replacement) counts from zero CPU at
// the previous sample, so its start-up is charged to the interval it happened in.
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
		h, ok := e.procs[u.PID]
		if !ok {
			h = &procHistory{}
			if !prevSample.IsZero() {
				h.points = []cpuPoint{{at: prevSample}}
			}
			e.procs[u.PID] = h
		}
		h.seen = true
		k := usageKey{service: u.Service, kind: u.Kind}
		s := out[k]
		s.replicas++
		rss := float64(u.RSSBytes) / (1 << 20)
		s.rssMB += rss
		s.rssMBMax = max(s.rssMBMax, rss)
		if n := len(h.points); n > 0 {
			last := h.points[n-1]
			if dt := now.Sub(last.at).Seconds(); dt > 0 {
				s.mcores += (u.CPUSeconds - last.cpu) / dt * 1000
			}
			// The busiest second: from the latest sample at least about a second old (or the oldest kept).
			from := h.points[0]
			for _, p := range h.points {
				if now.Sub(p.at) >= window*9/10 {
					from = p
				}
			}
			if dt := now.Sub(from.at).Seconds(); dt > 0 {
				s.mcoresMax = max(s.mcoresMax, (u.CPUSeconds-from.cpu)/dt*1000)
			}
		}
		h.points = append(h.points, cpuPoint{at: now, cpu: u.CPUSeconds})
		for len(h.points) > 1 && now.Sub(h.points[1].at) >= window*9/10 {
			h.points = h.points[1:]
		}
		out[k] = s
	}
	for pid, h := range e.procs {
		if !h.seen {
			delete(e.procs, pid)
		}
	}
	return out
}
