package stats

import (
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Route is what one inbound route measured.
type Route struct {
	Name     string
	Outcomes Outcomes
	// Latency is the service time.
	Latency  *Histogram
	InFlight atomic.Int64
}

// Upstream is what calls to one upstream service measured.
type Upstream struct {
	Name     string
	Outcomes Outcomes
	// Latency is caller-observed, retries included; Hop is per try, minus the upstream's reported service time.
	Latency, Hop     *Histogram
	Retries, Skipped atomic.Int64
}

// Load is what a load generator measured towards one target.
type Load struct {
	Target   string
	Outcomes Outcomes
	// Latency is measured from the intended send time, Uncorrected from the actual one; Hop is Uncorrected minus
	// the target's reported service time. Lateness is how late each open-loop send the generator slept
	// for started: its own part of the latency it reports (a send that waited for a connection waited for the
	// system's answers, and is not counted).
	Latency, Uncorrected, Hop, Lateness *Histogram
	// Sent, Late and Blocked count sends; what was due (and so unsent: due - sent) is counted by Due.
	Sent, Late, Blocked atomic.Int64
	targetRate          atomic.Uint64 // float64 bits

	mu sync.Mutex
	// settled is what was due in runs that ended, and in closed loops (where a request is due when it is sent).
	settled int64
	runs    []*LoadRun // the most recent runs (a replaced run may overlap its successor)
}

// Backlog is what an open-loop run knows of its schedule at any moment.
type Backlog interface {
	// DueBy returns how many of the run's requests were due before t.
	DueBy(t time.Time) int64
	// LagAt returns how long the oldest request due before t and not yet started has been due.
	LagAt(t time.Time) time.Duration
}

// maxRuns bounds the runs a Load remembers for computing rates.
const maxRuns = 64

// LoadRun is one run of a generator, from Started to Stopped.
type LoadRun struct {
	l        *Load
	from, to time.Time // to is zero while running
	due      Backlog   // nil for a closed loop, and once the run's due count is settled
}

// SetTargetRate records the rate the schedule currently asks for.
func (l *Load) SetTargetRate(rps float64) { l.targetRate.Store(math.Float64bits(rps)) }

// Started records that a run began at t; due, for an open loop, says how many of its requests were due at any
// moment and how late they are (a snapshot counts what is due as of its own time, a backlog included).
func (l *Load) Started(t time.Time, due Backlog) *LoadRun {
	r := &LoadRun{l: l, from: t, due: due}
	l.mu.Lock()
	l.runs = append(l.runs, r)
	if len(l.runs) > maxRuns {
		// A run still being counted is never forgotten (there are at most two: one replaced, one starting).
		for _, old := range l.runs[:len(l.runs)-maxRuns] {
			if old.due != nil {
				l.settled += old.due.DueBy(maxTime(old.to, old.from))
				old.due = nil
			}
		}
		l.runs = append(l.runs[:0], l.runs[len(l.runs)-maxRuns:]...)
	}
	l.mu.Unlock()
	return r
}

// Stopped records that the run stopped sending at t (its last requests may still complete), and settles what
// was due in it.
func (r *LoadRun) Stopped(t time.Time) {
	r.l.mu.Lock()
	r.to = t
	if r.due != nil {
		r.l.settled += r.due.DueBy(t)
		r.due = nil
	}
	r.l.mu.Unlock()
}

// AddDue counts n requests due (a closed loop's, due when sent).
func (l *Load) AddDue(n int64) {
	l.mu.Lock()
	l.settled += n
	l.mu.Unlock()
}

// Due returns how many requests were due before now: the settled ones, and those of the runs in progress.
func (l *Load) Due(now time.Time) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.settled
	for _, r := range l.runs {
		if r.due != nil {
			n += r.due.DueBy(now)
		}
	}
	return n
}

// Lag returns how long the oldest request due before now and not yet started has been due, over the runs in
// progress: how far behind its schedule the generator is.
func (l *Load) Lag(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var lag time.Duration
	for _, r := range l.runs {
		if r.due != nil && r.to.IsZero() {
			lag = max(lag, r.due.LagAt(now))
		}
	}
	return lag
}

// activity returns how long any run was sending within [from, to] (overlapping runs count once) and whether
// one is sending now.
func (l *Load) activity(from, to time.Time) (seconds float64, running bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	type span struct{ a, b time.Time }
	var spans []span
	for _, r := range l.runs {
		end := r.to
		if end.IsZero() {
			running, end = true, to
		}
		a, b := maxTime(r.from, from), minTime(end, to)
		if b.After(a) {
			spans = append(spans, span{a, b})
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].a.Before(spans[j].a) })
	var cur span
	for i, sp := range spans {
		switch {
		case i == 0:
			cur = sp
		case sp.a.After(cur.b):
			seconds += cur.b.Sub(cur.a).Seconds()
			cur = sp
		case sp.b.After(cur.b):
			cur.b = sp.b
		}
	}
	if len(spans) > 0 {
		seconds += cur.b.Sub(cur.a).Seconds()
	}
	return seconds, running
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Registry holds every series of one worker. Series are created when a configuration is applied (never per
// request) and live as long as the worker, so counts survive reconfiguration.
type Registry struct {
	worker string
	seed   uint64
	now    func() time.Time

	mu          sync.Mutex // guards everything below, and every read of the series
	started     time.Time
	routes      []*Route
	upstreams   []*Upstream
	loads       []*Load
	windows     map[*Window]struct{}
	version     uint64
	versionTime time.Time
}

// NewRegistry returns an empty registry.
func NewRegistry(worker string, seed uint64) *Registry {
	return &Registry{worker: worker, seed: seed, now: time.Now, started: time.Now(), windows: map[*Window]struct{}{}}
}

// SetWorker changes the worker name reported in snapshots.
func (r *Registry) SetWorker(name string) {
	r.mu.Lock()
	r.worker = name
	r.mu.Unlock()
}

// SetConfigVersion records the configuration version in effect and when it took effect.
func (r *Registry) SetConfigVersion(v uint64, at time.Time) {
	r.mu.Lock()
	r.version, r.versionTime = v, at
	r.mu.Unlock()
}

// Route returns the series of an inbound route, creating it on first use.
func (r *Registry) Route(name string) *Route {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.routes {
		if s.Name == name {
			return s
		}
	}
	s := &Route{Name: name, Latency: newHistogram()}
	r.routes = append(r.routes, s)
	return s
}

// Upstream returns the series of an upstream service, creating it on first use.
func (r *Registry) Upstream(name string) *Upstream {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.upstreams {
		if s.Name == name {
			return s
		}
	}
	s := &Upstream{Name: name, Latency: newHistogram(), Hop: newHistogram()}
	r.upstreams = append(r.upstreams, s)
	return s
}

// Load returns the series of a load target, creating it on first use.
func (r *Registry) Load(target string) *Load {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.loads {
		if s.Target == target {
			return s
		}
	}
	s := &Load{Target: target, Latency: newHistogram(), Uncorrected: newHistogram(), Hop: newHistogram(), Lateness: newHistogram()}
	r.loads = append(r.loads, s)
	return s
}

// counters is every counter of the registry at one moment, series in creation order.
type counters struct {
	routes    []outcomeCounts
	upstreams []upstreamCounts
	loads     []loadCounts
	sched     schedSample // the runtime's scheduling latencies
}

type upstreamCounts struct {
	outcomes         outcomeCounts
	retries, skipped int64
}

type loadCounts struct {
	outcomes                 outcomeCounts
	due, sent, late, blocked int64
	lag                      time.Duration
}

// histograms calls fn for every histogram of every series.
func (r *Registry) histograms(fn func(*Histogram)) {
	for _, s := range r.routes {
		fn(s.Latency)
	}
	for _, s := range r.upstreams {
		fn(s.Latency)
		fn(s.Hop)
	}
	for _, s := range r.loads {
		fn(s.Latency)
		fn(s.Uncorrected)
		fn(s.Hop)
		fn(s.Lateness)
	}
}

// drain moves every shard's records into the totals and into every open window. Callers hold r.mu.
func (r *Registry) drain() {
	into := make([]*hdrhistogram.PackedHistogram, 0, len(r.windows))
	r.histograms(func(h *Histogram) {
		into = into[:0]
		for w := range r.windows {
			into = append(into, w.accumulator(h))
		}
		h.drain(into)
	})
}

// read copies every counter, what was due as of now. Callers hold r.mu.
func (r *Registry) read(now time.Time) *counters {
	c := &counters{
		routes:    make([]outcomeCounts, len(r.routes)),
		upstreams: make([]upstreamCounts, len(r.upstreams)),
		loads:     make([]loadCounts, len(r.loads)),
		sched:     readSched(),
	}
	for i, s := range r.routes {
		s.Outcomes.read(&c.routes[i])
	}
	for i, s := range r.upstreams {
		s.Outcomes.read(&c.upstreams[i].outcomes)
		c.upstreams[i].retries, c.upstreams[i].skipped = s.Retries.Load(), s.Skipped.Load()
	}
	for i, s := range r.loads {
		l := &c.loads[i]
		s.Outcomes.read(&l.outcomes)
		// Sent before due: a request is sent only after it is due, so sent <= due.
		l.sent, l.late, l.blocked = s.Sent.Load(), s.Late.Load(), s.Blocked.Load()
		l.due = max(s.Due(now), l.sent)
		l.lag = s.Lag(now)
	}
	return c
}

// build assembles a snapshot of the counts in cur since prev (nil: since the start) and of the histograms hist
// returns, over [from, to]. Callers hold r.mu.
func (r *Registry) build(cur, prev *counters, hist func(*Histogram) *hdrhistogram.PackedHistogram, from, to time.Time) *irsv1.StatsSnapshot {
	out := &irsv1.StatsSnapshot{
		Worker: r.worker, Seed: r.seed,
		WindowStart: timestamppb.New(from), WindowEnd: timestamppb.New(to),
		ConfigVersion: r.version,
	}
	if !r.versionTime.IsZero() {
		out.ConfigChangedAt = timestamppb.New(r.versionTime)
	}
	if prev != nil {
		out.SchedWaitP99Ms, out.SchedWaitMaxMs = cur.sched.waitSince(prev.sched)
	}
	summary := func(h *Histogram) *irsv1.Histogram {
		if p := hist(h); p != nil {
			return summarizePacked(p)
		}
		return &irsv1.Histogram{}
	}
	for i, s := range r.routes {
		var p *outcomeCounts
		if prev != nil && i < len(prev.routes) {
			p = &prev.routes[i]
		}
		out.Inbound = append(out.Inbound, &irsv1.RouteStats{
			Route: s.Name, Outcomes: cur.routes[i].since(p), Latency: summary(s.Latency), InFlight: s.InFlight.Load(),
		})
	}
	for i, s := range r.upstreams {
		c, p := cur.upstreams[i], upstreamCounts{}
		var po *outcomeCounts
		if prev != nil && i < len(prev.upstreams) {
			p = prev.upstreams[i]
			po = &p.outcomes
		}
		out.Upstreams = append(out.Upstreams, &irsv1.UpstreamStats{
			Service: s.Name, Outcomes: c.outcomes.since(po), Latency: summary(s.Latency), Hop: summary(s.Hop),
			Retries: c.retries - p.retries, Skipped: c.skipped - p.skipped,
		})
	}
	for i, s := range r.loads {
		c, p := cur.loads[i], loadCounts{}
		var po *outcomeCounts
		if prev != nil && i < len(prev.loads) {
			p = prev.loads[i]
			po = &p.outcomes
		}
		ls := &irsv1.LoadStats{
			Target: s.Target, Outcomes: c.outcomes.since(po),
			Latency: summary(s.Latency), Uncorrected: summary(s.Uncorrected), Hop: summary(s.Hop), Lateness: summary(s.Lateness),
			Due: c.due - p.due, Sent: c.sent - p.sent, Late: c.late - p.late, Blocked: c.blocked - p.blocked,
			// Due and not sent as of the end of the window: a backlog that later sends reduce (a window may
			// then count fewer than 0), and once the load stopped, what was never sent.
			Unsent:     (c.due - c.sent) - (p.due - p.sent),
			TargetRate: math.Float64frombits(s.targetRate.Load()),
			LagMs:      float64(c.lag) / float64(time.Millisecond),
		}
		// Rate over the time the generator was sending, so that a window reaching past either end of a run does
		// not dilute it.
		active, running := s.activity(from, to)
		ls.Running = running
		if active > 0 {
			ls.AchievedRate = float64(ls.Outcomes.Requests) / active
		}
		out.Load = append(out.Load, ls)
	}
	return out
}

// Snapshot returns everything measured since the worker started.
func (r *Registry) Snapshot() *irsv1.StatsSnapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drain()
	now := r.now()
	return r.build(r.read(now), nil, func(h *Histogram) *hdrhistogram.PackedHistogram { return h.total }, r.started, now)
}

// Totals calls fn with every series and its cumulative histograms, under the registry's lock (for exporters).
func (r *Registry) Totals(fn func(t Totals)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drain()
	fn(Totals{r: r})
}

// Totals gives exporters the cumulative series; valid only inside Registry.Totals.
type Totals struct{ r *Registry }

// Worker returns the worker name.
func (t Totals) Worker() string { return t.r.worker }

// Routes, Upstreams and Loads return the series.
func (t Totals) Routes() []*Route       { return t.r.routes }
func (t Totals) Upstreams() []*Upstream { return t.r.upstreams }
func (t Totals) Loads() []*Load         { return t.r.loads }

// Histogram returns the cumulative histogram of h.
func (t Totals) Histogram(h *Histogram) *hdrhistogram.PackedHistogram { return h.total }

// Counts returns the cumulative outcome counts of o.
func (t Totals) Counts(o *Outcomes) *irsv1.Outcomes {
	var c outcomeCounts
	o.read(&c)
	return c.since(nil)
}

// TargetRate returns the rate a load's schedule asks for now.
func (l *Load) TargetRate() float64 { return math.Float64frombits(l.targetRate.Load()) }

// Window is one reader's view of the registry: what changed since the window last advanced. Close it when done.
type Window struct {
	r     *Registry
	start time.Time
	prev  *counters
	acc   map[*Histogram]*hdrhistogram.PackedHistogram
}

// NewWindow opens a window starting now.
func (r *Registry) NewWindow() *Window {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drain() // what was recorded before the window opened goes elsewhere
	now := r.now()
	w := &Window{r: r, start: now, prev: r.read(now), acc: map[*Histogram]*hdrhistogram.PackedHistogram{}}
	r.windows[w] = struct{}{}
	return w
}

// accumulator returns the window's histogram for h, creating it. Callers hold r.mu.
func (w *Window) accumulator(h *Histogram) *hdrhistogram.PackedHistogram {
	p, ok := w.acc[h]
	if !ok {
		p = newPacked()
		w.acc[h] = p
	}
	return p
}

// Snapshot returns what was measured since the window started; with advance, a new window starts now.
func (w *Window) Snapshot(advance bool) *irsv1.StatsSnapshot {
	r := w.r
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drain()
	now := r.now()
	cur := r.read(now)
	out := r.build(cur, w.prev, func(h *Histogram) *hdrhistogram.PackedHistogram { return w.acc[h] }, w.start, now)
	if advance {
		w.prev, w.start = cur, now
		for _, p := range w.acc {
			p.Reset()
		}
	}
	return out
}

// Close stops the window from accumulating.
func (w *Window) Close() {
	w.r.mu.Lock()
	delete(w.r.windows, w)
	w.r.mu.Unlock()
}
