package engine

import (
	"math"
	"sort"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// consumeSamples files each window in the interval that holds its middle: the streams cut their windows at
// the intervals' ends, so a window is an interval, or the first part of one for a replica that just started.
func (e *engine) consumeSamples(col *collector) {
	for s := range col.out {
		start, end := s.stats.GetWindowStart().AsTime(), s.stats.GetWindowEnd().AsTime()
		e.mu.Lock()
		mid := start.Add(end.Sub(start) / 2).Sub(e.t0)
		k := int(mid/e.interval) + 1 // intervals are [start, end)
		if mid >= 0 && time.Duration(k-1)*e.interval < e.end {
			e.reported(s.service, s.replica, k)
			e.fileWindow(k, s.service, s.replica, s.stats)
		}
		switch {
		case mid < 0 || time.Duration(k-1)*e.interval >= e.end:
		case k <= e.closed:
			// Late (a stalled worker): its interval's tick is out, but its phase and the run still count it.
			late := map[key]*acc{}
			addSnapshot(late, s.service, s.stats)
			e.addToAggregates(e.o.Timeline.PhaseAt(time.Duration(k)*e.interval-e.interval/2), late)
		default:
			b, ok := e.buckets[k]
			if !ok {
				b = map[key]*acc{}
				e.buckets[k] = b
			}
			addSnapshot(b, s.service, s.stats)
		}
		e.mu.Unlock()
	}
}

// tickLoop samples resource use at the end of every interval and closes the interval before it (whose windows
// have all arrived by then), until done closes.
func (e *engine) tickLoop(done <-chan struct{}) {
	t0 := e.t0
	for k := 1; ; k++ {
		at := t0.Add(time.Duration(k) * e.interval)
		timer := time.NewTimer(time.Until(at))
		select {
		case <-timer.C:
		case <-done:
			timer.Stop()
			// Every interval whose windows arrived, the last ones too when the loop was behind.
			e.closeBuckets(math.MaxInt)
			return
		}
		// A sample that takes long (a node's kubelet that does not answer) must not hold up the intervals: when
		// the loop is an interval behind, it closes them without sampling until it is on time again.
		var usage map[usageKey]serviceUsage
		behind := time.Since(at)
		if behind < e.interval {
			usage = e.sampleUsage(time.Now())
		} else if behind > pauseSlack && !e.drained(at) {
			// The runner did not run (stopped, frozen): the windows the replicas sent meanwhile wait in the
			// sockets. Let them arrive before closing their intervals, or they miss their ticks.
			select {
			case <-time.After(drainGrace):
			case <-done:
			}
		}
		pressure := e.pressure.share(time.Now())
		e.mu.Lock()
		if m := e.machine[k]; m != nil {
			m.CpuPressure = pressure
		} else {
			e.machine[k] = &irsv1.Machine{CpuPressure: pressure}
		}
		if time.Duration(k-1)*e.interval < e.end {
			b, ok := e.buckets[k]
			if !ok {
				b = map[key]*acc{}
				e.buckets[k] = b
			}
			for uk, u := range usage {
				lk := e.usage.ledgerKey(uk)
				a, ok := b[lk.k]
				if !ok {
					a = newAcc()
					b[lk.k] = a
				}
				use := resourceUse{mcores: u.mcores, mcoresMax: u.mcoresMax, rssMB: u.rssMB, rssMBMax: u.rssMBMax, measured: true}
				if lk.sidecar {
					a.sidecar, a.sidecars = use, u.replicas
				} else {
					a.usage, a.replicas = use, u.replicas
				}
			}
		}
		e.mu.Unlock()
		e.closeBuckets(k - 1)
		e.progress()
		// The result file kept current for whoever reads it while the run goes on; a run that checkpoints
		// (detached) has its checkpoints for that, and the file is read only at its end.
		if e.o.Checkpoint == nil && k%max(1, int(2*time.Second/e.interval)) == 0 {
			_ = e.saveRunning() // the last save, at the end, is the one whose failure fails the run
		}
		e.maybeCheckpoint()
	}
}

// drainGrace is how long the tick loop lets the windows queued while the runner did not run arrive.
const drainGrace = 500 * time.Millisecond

// drained says whether the tick loop has already waited for the queued windows since it fell behind at the
// interval ending at at (once per pause).
func (e *engine) drained(at time.Time) bool {
	if !e.drainedAt.IsZero() && !at.After(e.drainedAt) {
		return true
	}
	e.drainedAt = time.Now() // the loop's own field: only the tick loop reads and writes it
	return false
}

// closeBuckets turns every interval up to k into a tick of the series, and adds it to its phase and the total.
func (e *engine) closeBuckets(k int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ks []int
	for i := range e.buckets {
		if i <= k {
			ks = append(ks, i)
		}
	}
	sort.Ints(ks)
	for _, i := range ks {
		b := e.buckets[i]
		delete(e.buckets, i)
		e.closed = max(e.closed, i)
		end := time.Duration(i) * e.interval
		phase := e.o.Timeline.PhaseAt(end - e.interval/2)
		tick := &irsv1.Tick{T: end.Seconds(), Phase: phase, Machine: e.machine[i]}
		delete(e.machine, i)
		// The interval an interrupt fell in counts up to the interrupt.
		secs := min(end, e.end) - (end - e.interval)
		for _, k := range sortedKeys(b) {
			place(k, b[k].point(k, secs.Seconds(), false), tickSlots(tick))
		}
		e.addToAggregates(phase, b)
		var reqs, fails int64
		for _, p := range tick.GetServices() {
			if p.GetKind() == kindLoad {
				reqs, fails = reqs+p.GetRequests(), fails+p.GetFailures()
			}
		}
		e.rec.add(tick, e.watches)   // the engine's own record is in wall seconds, as its clock
		tick.T /= e.o.Timeline.Scale // what users read is in the timeline's (resultfile.ToTimeline)
		e.errs.add(phase, tick.GetT(), reqs, fails)
		if err := e.ticks.Append(tick); err != nil { // a tick is ours and always encodes: this is for the impossible case
			e.logger.Error("encode a tick of the series: the written result leaves it out", "t", tick.GetT(), "err", err)
		}
		e.lastTick = tick
	}
	e.settle()
}

// fullSeries puts the whole ticks in the result's series, from their encoding. Callers hold e.mu.
func (e *engine) fullSeries() {
	ticks, err := e.ticks.Ticks()
	if err != nil { // ours, encoded as the run went: never, but said
		e.logger.Error("decode the series: the result is left without it", "err", err)
	}
	e.res.Series = ticks
}

// addToAggregates adds an interval's accumulators to its phase's. The run's are those merged when asked for
// (runAccs): kept beside the phases', they were a second copy of every histogram for the whole run, and the
// largest part of what a long run's engine held more of as it went. Callers hold e.mu.
func (e *engine) addToAggregates(phase string, b map[key]*acc) {
	pa, ok := e.phaseAccs[phase]
	if !ok {
		pa = map[key]*acc{}
		e.phaseAccs[phase] = pa
	}
	for k, a := range b {
		t, ok := pa[k]
		if !ok {
			t = newAcc()
			pa[k] = t
		}
		t.merge(a)
	}
}

// spanAcc is a phase's (or, for "", the run's) accumulator of k with its resource use from the ledger.
// Callers hold e.mu.
func (e *engine) spanAcc(span string, k key, a *acc) *acc {
	return a.withUsage(e.usage.ledger.use(span, ledgerKey{k: k}), e.usage.ledger.use(span, ledgerKey{k: k, sidecar: true}))
}

// phaseOrder is the names of the phases with accumulators, in the order they ran: the timeline's (its names are
// unique), then any other (none: every interval falls in a phase of the timeline, or in "" when it has none).
// Callers hold e.mu.
func (e *engine) phaseOrder() []string {
	names := make([]string, 0, len(e.phaseAccs))
	inTimeline := map[string]bool{}
	for _, p := range e.o.Timeline.Phases {
		inTimeline[p.Name] = true
		if _, ok := e.phaseAccs[p.Name]; ok {
			names = append(names, p.Name)
		}
	}
	var rest []string
	for name := range e.phaseAccs {
		if !inTimeline[name] {
			rest = append(rest, name)
		}
	}
	sort.Strings(rest)
	return append(names, rest...)
}

// runAcc is what k measured over the whole run (see mergePhases); nil if it was never measured. Callers hold
// e.mu.
func (e *engine) runAcc(k key) *acc { return e.mergePhases(e.phaseOrder(), k) }

// runAccs is the run's accumulators by key (see mergePhases), for a summary that reads them all. Callers hold
// e.mu.
func (e *engine) runAccs() map[key]*acc {
	order := e.phaseOrder()
	accs := map[key]*acc{}
	for _, pa := range e.phaseAccs {
		for k := range pa {
			if _, ok := accs[k]; !ok {
				accs[k] = e.mergePhases(order, k)
			}
		}
	}
	return accs
}

// mergePhases is k's accumulators of the phases in order, merged in that order (a target rate is the last one
// set). Measured in one phase only, it is that phase's accumulator itself, which callers read and never change;
// never measured, it is nil. Callers hold e.mu.
func (e *engine) mergePhases(order []string, k key) *acc {
	var only, merged *acc
	for _, name := range order {
		a, ok := e.phaseAccs[name][k]
		switch {
		case !ok:
		case only == nil:
			only = a
		default:
			if merged == nil {
				merged = newAcc()
				merged.merge(only)
			}
			merged.merge(a)
		}
	}
	if merged != nil {
		return merged
	}
	return only
}

// slots are where the points of a tick or a phase go.
type slots struct {
	services, edges           *[]*irsv1.Point
	controlPlane, nodeProxies **irsv1.Point
}

func tickSlots(t *irsv1.Tick) slots {
	return slots{&t.Services, &t.Edges, &t.ControlPlane, &t.NodeProxies}
}

func phaseSlots(p *irsv1.PhaseResult) slots {
	return slots{&p.Services, &p.Edges, &p.ControlPlane, &p.NodeProxies}
}

// place puts a point where its kind goes.
func place(k key, p *irsv1.Point, to slots) {
	switch k.kind {
	case kindEdge:
		*to.edges = append(*to.edges, p)
	case kindControlPlane:
		*to.controlPlane = p
	case kindNodeProxy:
		*to.nodeProxies = p
	default:
		*to.services = append(*to.services, p)
	}
}

func sortedKeys(m map[key]*acc) []key {
	ks := make([]key, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		a, b := ks[i], ks[j]
		if a.service != b.service {
			return a.service < b.service
		}
		if a.kind != b.kind {
			return a.kind < b.kind
		}
		return a.callee < b.callee
	})
	return ks
}
