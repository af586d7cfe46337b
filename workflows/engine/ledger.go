package engine

import (
	"github.com/irs-sim/irs/workflows"
)

// usageLedger keeps the run's CPU and memory per phase (and for the whole run), each measurement filed by when
// it was measured rather than when it was read. A cluster's counters are read seconds after the kubelet
// measured them, so a reading taken in one phase may measure the one before; and a counter refreshed every few
// seconds measures a window that may straddle two phases. So:
//   - CPU is kept as CPU time over the window it was used in, a straddling window split between the phases by
//     their shares of it: a phase's mean is its CPU time over the span its windows cover;
//   - a phase's busiest second is the busiest replica's among the seconds measured within it (at least 90 %
//     of the second in it), or, for a phase shorter than the counters' refresh, the busiest held at its ticks;
//   - its memory counts only readings measured within it.
type usageLedger struct {
	spans   []ledgerSpan
	figures map[string]map[ledgerKey]*phaseUsage
}

// ledgerSpan is a phase's span, in seconds of the run ("": the whole run).
type ledgerSpan struct {
	name       string
	start, end float64
}

// ledgerKey is a point's usage: its workers' (or control plane's, node proxies') or its sidecars'.
type ledgerKey struct {
	k       key
	sidecar bool
}

// phaseUsage is what the ledger holds of one point's usage in one span.
type phaseUsage struct {
	cpuSeconds float64
	// from and to bound the time the CPU windows cover in the span (covered: any did).
	from, to float64
	covered  bool
	// busiest is the busiest second measured within the span (fresh: one was); held, the busiest value the
	// ticks in the span held.
	busiest, held  float64
	fresh, heldAny bool
	// rss is the most memory summed over the readings measured in the span at one sample; rssMax the largest
	// single reading.
	rss, rssMax float64
	rssSeen     bool
}

// memReading is a process's memory (MiB) as measured at run second t.
type memReading struct {
	t, mb float64
}

// withinShare is how much of a busiest-second window must lie in a span to count as measured within it.
const withinShare = 0.9

func newUsageLedger(tl *workflows.Timeline) usageLedger {
	l := usageLedger{figures: map[string]map[ledgerKey]*phaseUsage{}}
	for _, p := range tl.Phases {
		l.spans = append(l.spans, ledgerSpan{name: p.Name, start: p.Start.Seconds(), end: p.End.Seconds()})
	}
	l.spans = append(l.spans, ledgerSpan{name: "", start: 0, end: tl.Total.Seconds()})
	return l
}

// get returns the span's usage of lk, creating it.
func (l *usageLedger) get(span string, lk ledgerKey) *phaseUsage {
	byKey := l.figures[span]
	if byKey == nil {
		byKey = map[ledgerKey]*phaseUsage{}
		l.figures[span] = byKey
	}
	u := byKey[lk]
	if u == nil {
		u = &phaseUsage{}
		byKey[lk] = u
	}
	return u
}

// overlap is how much of [from, to] lies in the span, up to until (the run's end).
func (s ledgerSpan) overlap(from, to, until float64) (lo, hi float64, ok bool) {
	lo, hi = max(from, s.start), min(to, s.end, until)
	return lo, hi, hi > lo
}

// cpu files seconds of CPU used over [from, to] (run seconds), spread evenly over it.
func (l *usageLedger) cpu(lk ledgerKey, from, to, seconds, until float64) {
	if to <= from {
		return
	}
	for _, s := range l.spans {
		lo, hi, ok := s.overlap(from, to, until)
		if !ok {
			continue
		}
		u := l.get(s.name, lk)
		u.cpuSeconds += seconds * (hi - lo) / (to - from)
		if !u.covered {
			u.from, u.to, u.covered = lo, hi, true
		} else {
			u.from, u.to = min(u.from, lo), max(u.to, hi)
		}
	}
}

// busiest files a replica's CPU over its latest second, [from, to], in the spans that hold most of it.
func (l *usageLedger) busiest(lk ledgerKey, from, to, mcores, until float64) {
	if to <= from {
		return
	}
	for _, s := range l.spans {
		lo, hi, ok := s.overlap(from, to, until)
		if !ok || hi-lo < withinShare*(to-from) {
			continue
		}
		u := l.get(s.name, lk)
		u.busiest, u.fresh = max(u.busiest, mcores), true
	}
}

// held files the busiest value a tick at run second t holds, in the spans that hold t.
func (l *usageLedger) held(lk ledgerKey, t, mcores float64) {
	for _, s := range l.spans {
		if t >= s.start && t < s.end {
			u := l.get(s.name, lk)
			u.held, u.heldAny = max(u.held, mcores), true
		}
	}
}

// memory files one sample's memory readings of lk's processes: in each span, the sum of those measured in it.
func (l *usageLedger) memory(lk ledgerKey, readings []memReading, until float64) {
	for _, s := range l.spans {
		sum, largest, any := 0.0, 0.0, false
		for _, r := range readings {
			if r.t >= s.start && r.t < min(s.end, until) {
				sum, largest, any = sum+r.mb, max(largest, r.mb), true
			}
		}
		if !any {
			continue
		}
		u := l.get(s.name, lk)
		u.rss, u.rssMax, u.rssSeen = max(u.rss, sum), max(u.rssMax, largest), true
	}
}

// use returns the span's usage of lk as a point shows it.
func (l *usageLedger) use(span string, lk ledgerKey) resourceUse {
	u := l.figures[span][lk]
	if u == nil {
		return resourceUse{}
	}
	r := resourceUse{rssMB: u.rss, rssMBMax: u.rssMax}
	if u.covered && u.to > u.from {
		r.mcores = u.cpuSeconds / (u.to - u.from) * 1000
	}
	switch {
	case u.fresh:
		r.mcoresMax = u.busiest
	case u.heldAny:
		r.mcoresMax = u.held
	}
	r.measured = u.covered || u.fresh || u.heldAny || u.rssSeen
	return r
}
