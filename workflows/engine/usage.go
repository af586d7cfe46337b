package engine

import (
	"fmt"
	"time"

	"github.com/irs-sim/irs/workflows"
)

// usageKey says whose usage: a service's workers or sidecars, or the control plane (service "").
type usageKey struct {
	service, kind string
}

// serviceUsage is a service's resource use as one sample reads it: what the series' tick shows.
type serviceUsage struct {
	// mcores is the service's CPU over the last interval, summed over replicas; mcoresMax the busiest replica's
	// CPU over the last second (or interval, if longer).
	mcores, mcoresMax float64
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
	// started is its start time: with its name, which process this is (zero: unknown).
	started       time.Time
	points        []cpuPoint
	rate, busiest float64
	seen          bool
	lastSeen      time.Time
}

// forgetAfter is how long a process missing from the samples is remembered: one whose node did not answer for
// a while (lost, then back) takes up its counter where it left it.
const forgetAfter = 2 * time.Minute

// maxDroppedNamed bounds how many dropped readings the result names (all are counted).
const maxDroppedNamed = 20

// usageID names what a usage sample measures, across samples.
func usageID(u workflows.Usage) string { return u.Kind + "/" + u.Service + "/" + u.Replica }

// usageTracker turns the backend's cumulative CPU counters and memory readings into figures: each sample's
// rates for the series, and the ledger's per-phase figures. A process is known by its name and start time,
// never by its counter's direction: a killed process not reaped yet reads lower than before (its threads are
// gone), which once made the whole life of the process since it started land in one interval. A reading that
// cannot be true (a counter that went back, more CPU in a window than the process's cores allow in it) is
// dropped and counted, never charged.
type usageTracker struct {
	interval time.Duration
	primary  map[string]string // service → the kind of its main point
	procs    map[string]*procHistory
	// first is when the baseline was taken: a process that started after it counts from zero at its start.
	first   time.Time
	dropped droppedReadings
	ledger  usageLedger
}

// droppedReadings counts the readings left out of every figure, and names the first few.
type droppedReadings struct {
	count int64
	named []string
}

func (d *droppedReadings) add(what string) {
	d.count++
	if len(d.named) < maxDroppedNamed {
		d.named = append(d.named, what)
	}
}

// runClock places an instant in the run: seconds from the start of the first phase, and where the run ends
// (its planned end, or an interrupt).
type runClock struct {
	t0  time.Time
	end float64
}

func (c runClock) since(t time.Time) float64 { return t.Sub(c.t0).Seconds() }

// cpuSlack is what a window's CPU may exceed its cores × length by before it is impossible: the counter and
// its timestamp are read a little apart.
const (
	cpuSlackShare   = 0.05
	cpuSlackSeconds = 0.02
)

// sample takes one reading of every process (at now) and returns each service's usage since the previous one.
// The first call only takes the baseline. Rates are over the times the readings were measured (a cluster's
// counters lag, and are refreshed every few seconds); a counter not refreshed since the last reading keeps the
// rates it had. Every refresh is filed in the ledger by when it was measured (clock: zero t0 before the run
// starts, and then nothing is filed).
func (u *usageTracker) sample(readings []workflows.Usage, now time.Time, clock runClock) map[usageKey]serviceUsage {
	out := map[usageKey]serviceUsage{}
	if u.first.IsZero() {
		u.first = now
	}
	window := max(u.interval, time.Second)
	for _, h := range u.procs {
		h.seen = false
	}
	memory := map[ledgerKey][]memReading{}
	for _, r := range readings {
		at := r.At
		if at.IsZero() {
			at = now
		}
		h := u.process(r, at)
		h.seen = true
		k := usageKey{service: r.Service, kind: r.Kind}
		lk := u.ledgerKey(k)
		s := out[k]
		s.replicas++
		rss := float64(r.RSSBytes) / (1 << 20)
		s.rssMB += rss
		s.rssMBMax = max(s.rssMBMax, rss)
		if !clock.t0.IsZero() {
			memory[lk] = append(memory[lk], memReading{t: clock.since(at), mb: rss})
		}
		u.refresh(h, r, at, window, lk, clock)
		s.mcores += h.rate
		s.mcoresMax = max(s.mcoresMax, h.busiest)
		out[k] = s
	}
	if !clock.t0.IsZero() {
		for lk, rs := range memory {
			u.ledger.memory(lk, rs, clock.end)
		}
		for k, s := range out {
			u.ledger.held(u.ledgerKey(k), clock.since(now)-u.interval.Seconds()/2, s.mcoresMax)
		}
	}
	for id, h := range u.procs {
		if h.seen {
			h.lastSeen = now
		} else if now.Sub(h.lastSeen) > forgetAfter {
			delete(u.procs, id)
		}
	}
	return out
}

// process returns the history of the process a reading is of: the one known under its name when it is the
// same process (the same start time, or one unknown), else a new one. A process new to the run counts from zero
// CPU at its start when it started after the baseline (a replacement: its start-up is charged to when it
// happened); one that was already running (missed by an earlier reading: a kubelet that did not answer) or
// whose start is unknown starts from this reading, its figures from the next.
func (u *usageTracker) process(r workflows.Usage, at time.Time) *procHistory {
	id := usageID(r)
	h, ok := u.procs[id]
	if ok && (h.started.IsZero() || r.Started.IsZero() || h.started.Equal(r.Started)) {
		if h.started.IsZero() {
			h.started = r.Started
		}
		return h
	}
	h = &procHistory{started: r.Started}
	if !r.Started.IsZero() && !r.Started.Before(u.first) && r.Started.Before(at) {
		h.points = []cpuPoint{{at: r.Started}}
	}
	u.procs[id] = h
	return h
}

// refresh takes a process's new reading: a first one is its baseline; one measured later than the last is a
// window of CPU, filed in the ledger, unless it cannot be true, when it is dropped (counted) and becomes the
// new baseline.
func (u *usageTracker) refresh(h *procHistory, r workflows.Usage, at time.Time, window time.Duration, lk ledgerKey, clock runClock) {
	n := len(h.points)
	if n == 0 {
		h.points = []cpuPoint{{at: at, cpu: r.CPUSeconds}}
		return
	}
	last := h.points[n-1]
	if !at.After(last.at) {
		return // not refreshed since: its rates are held
	}
	used, dt := r.CPUSeconds-last.cpu, at.Sub(last.at).Seconds()
	switch {
	case used < 0:
		u.drop(h, r, at, lk, clock, fmt.Sprintf("its CPU counter went back by %.3fs", -used))
		return
	case r.Cores > 0 && used > r.Cores*dt*(1+cpuSlackShare)+cpuSlackSeconds:
		u.drop(h, r, at, lk, clock, fmt.Sprintf("%.3fs of CPU in %.3fs, more than its %g cores allow", used, dt, r.Cores))
		return
	}
	from := h.refresh(at, r.CPUSeconds, window)
	if clock.t0.IsZero() {
		return
	}
	u.ledger.cpu(lk, clock.since(last.at), clock.since(at), used, clock.end)
	u.ledger.busiest(lk, clock.since(from), clock.since(at), h.busiest, clock.end)
}

// drop leaves a reading out of every figure, counts it, and makes it the process's new baseline. Its window
// is filed at the rate the process's last good window gave (held for the series too): the process ran then, at
// a rate unknown, and a window left empty would read as a process that used nothing.
func (u *usageTracker) drop(h *procHistory, r workflows.Usage, at time.Time, lk ledgerKey, clock runClock, why string) {
	last := h.points[len(h.points)-1]
	t := ""
	if !clock.t0.IsZero() {
		t = fmt.Sprintf(" at %.2fs", clock.since(at))
		from, to := clock.since(last.at), clock.since(at)
		u.ledger.cpu(lk, from, to, h.rate/1000*(to-from), clock.end)
	}
	u.dropped.add(fmt.Sprintf("%s %s%s: %s", r.Kind, r.Replica, t, why))
	h.points = []cpuPoint{{at: at, cpu: r.CPUSeconds}}
}

// ledgerKey is where a service's usage goes among the points: its workers' and sidecars' on the service's main
// point, the control plane's and node proxies' on their own.
func (u *usageTracker) ledgerKey(k usageKey) ledgerKey {
	switch k.kind {
	case workflows.UsageControlPlane:
		return ledgerKey{k: key{kind: kindControlPlane}}
	case workflows.UsageNodeProxy:
		return ledgerKey{k: key{kind: kindNodeProxy}}
	}
	return ledgerKey{k: key{service: k.service, kind: u.primary[k.service]}, sidecar: k.kind == workflows.UsageSidecar}
}

// sampleUsage reads every process of the run and returns each service's usage since the previous reading (see
// usageTracker.sample).
func (e *engine) sampleUsage(now time.Time) map[usageKey]serviceUsage {
	readings := e.o.Backend.Usage()
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.usage.sample(readings, now, runClock{t0: e.t0, end: e.end.Seconds()})
}

// refresh adds a sample of a counter and computes its rates: since the previous sample, and over the latest
// stretch of about a second (or the oldest kept); it returns where that stretch starts.
func (h *procHistory) refresh(at time.Time, cpu float64, window time.Duration) time.Time {
	from := h.points[0]
	if n := len(h.points); n > 0 {
		last := h.points[n-1]
		if dt := at.Sub(last.at).Seconds(); dt > 0 {
			h.rate = (cpu - last.cpu) / dt * 1000
		}
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
	return from.at
}
