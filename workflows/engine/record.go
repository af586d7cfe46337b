package engine

import (
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
)

// runRecord is what the engine reads of its series while the run goes on, as the readers need it and no more:
// the whole tick is kept encoded (e.ticks, let go to the run's log in a detached run), and the result's series
// is whole again when the run ends (fullSeries). Per tick it keeps the load generators' requests and failures
// summed (the kills' and faults' damage: 24 bytes); the rest only where it happens: an interval a generator fell
// behind in (saturation's diagnosis), each generator's first interval that sent, and the points of the scopes
// recovery assertions read. Whole ticks kept twice made a long run's engine grow by 3 KB a second; every load
// and assertion point with the tick's phase and machine figures, by 112 bytes a tick (0.4 MB an hour, most of
// an hour-long soak's lasting growth).
type runRecord struct {
	load []loadTick
	// firstSent is the end of the first interval each load generator (by service) sent in.
	firstSent map[string]float64
	lags      []lagPoint
	// starved are the intervals in which a measured service's goroutines waited starvedMs or more to run (the
	// worst service): its node's CPU was taken.
	starved []starvedPoint
	watched []watchedPoint
	scopes  []key // the watched points' scopes, by watchedPoint.scope
}

// loadTick is what every load generator sent in one interval, summed: the users' view of the system.
type loadTick struct {
	t                  float64
	requests, failures int64
}

// lagPoint is a load generator's interval beyond maxLagMs, with the machine's figures then (when it had them).
type lagPoint struct {
	t                        float64
	service                  string
	machine                  bool
	oversleepMs, cpuPressure float64
}

// starvedPoint is an interval whose worst measured service waited long to run.
type starvedPoint struct {
	t       float64
	service string
	waitMs  float64
}

// watchedPoint is a point of a scope a recovery assertion reads.
type watchedPoint struct {
	t                  float64
	scope              int32 // runRecord.scopes
	requests, failures int64
}

func pointKey(p *irsv1.Point) key {
	return key{service: p.GetService(), callee: p.GetCallee(), kind: p.GetKind()}
}

// add records a tick; watch says whether a recovery assertion reads a scope.
func (r *runRecord) add(t *irsv1.Tick, watch func(key) bool) {
	lt := loadTick{t: t.GetT()}
	for _, p := range t.GetServices() {
		if p.GetKind() != kindLoad {
			continue
		}
		lt.requests += p.GetRequests()
		lt.failures += p.GetFailures()
		if _, ok := r.firstSent[p.GetService()]; !ok && p.GetRequests() > 0 {
			if r.firstSent == nil {
				r.firstSent = map[string]float64{}
			}
			r.firstSent[p.GetService()] = t.GetT()
		}
		if p.GetLagMs() > maxLagMs {
			lp := lagPoint{t: t.GetT(), service: p.GetService()}
			if m := t.GetMachine(); m != nil {
				lp.machine, lp.oversleepMs, lp.cpuPressure = true, m.GetOversleepMs(), m.GetCpuPressure()
			}
			r.lags = append(r.lags, lp)
		}
	}
	r.load = append(r.load, lt)
	worst := starvedPoint{t: t.GetT()}
	for _, p := range t.GetServices() {
		if p.GetKind() == kindServed && p.GetSchedWaitMs() > worst.waitMs {
			worst.service, worst.waitMs = p.GetService(), p.GetSchedWaitMs()
		}
	}
	if worst.waitMs >= starvedMs {
		r.starved = append(r.starved, worst)
	}
	for _, ps := range [][]*irsv1.Point{t.GetServices(), t.GetEdges()} {
		for _, p := range ps {
			if k := pointKey(p); watch(k) {
				r.watched = append(r.watched, watchedPoint{t: t.GetT(), scope: r.scopeOf(k), requests: p.GetRequests(), failures: p.GetFailures()})
			}
		}
	}
}

// scopeOf interns a watched scope (a few: one a recovery assertion).
func (r *runRecord) scopeOf(k key) int32 {
	for i, s := range r.scopes {
		if s == k {
			return int32(i)
		}
	}
	r.scopes = append(r.scopes, k)
	return int32(len(r.scopes) - 1)
}

// watchedSeries returns the watched points as ticks (only those that hold one; each point with its scope,
// counts and failure rate), for workflows.RecoveryTime.
func (r *runRecord) watchedSeries() []*irsv1.Tick {
	var out []*irsv1.Tick
	for _, w := range r.watched {
		k := r.scopes[w.scope]
		p := &irsv1.Point{Service: k.service, Callee: k.callee, Kind: k.kind, Requests: w.requests, Failures: w.failures}
		if w.requests > 0 { // as acc.point has it
			p.FailureRate = float64(w.failures) / float64(w.requests)
		}
		if n := len(out); n > 0 && out[n-1].GetT() == w.t {
			out[n-1].Services = append(out[n-1].Services, p)
			continue
		}
		out = append(out, &irsv1.Tick{T: w.t, Services: []*irsv1.Point{p}})
	}
	return out
}

// watches reports whether a recovery assertion reads scope k, decided once a scope. Callers hold e.mu.
func (e *engine) watches(k key) bool {
	if w, ok := e.watchedScopes[k]; ok {
		return w
	}
	w := false
	for _, a := range e.o.Workflow.GetAssertions() {
		if exp, err := workflows.ParseExpectation(a.GetExpect()); err == nil && exp.Metric == workflows.MetricRecoveryTime {
			w = w || e.assertionKey(a) == k
		}
	}
	if e.watchedScopes == nil {
		e.watchedScopes = map[key]bool{}
	}
	e.watchedScopes[k] = w
	return w
}

// watchedSeries returns the series a recovery assertion reads: the watched points kept as the run went (in the
// engine's clock). Callers hold e.mu.
func (e *engine) watchedSeries() []*irsv1.Tick { return e.rec.watchedSeries() }

// record returns the record the summary reads: the one kept as the run went, in the engine's clock (the
// result's series is in the timeline's). Callers hold e.mu.
func (e *engine) record() *runRecord { return &e.rec }
