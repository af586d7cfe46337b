package stats

import (
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

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
	// Latency is measured from the intended send time, Uncorrected from the actual one.
	Latency, Uncorrected             *Histogram
	Due, Sent, Late, Blocked, Unsent atomic.Int64
	targetRate                       atomic.Uint64 // float64 bits

	mu   sync.Mutex
	runs []*LoadRun // runs that overlap the current window (a replaced run may overlap its successor)
}

// LoadRun is one run of a generator, from Started to Stopped.
type LoadRun struct {
	l        *Load
	from, to time.Time // to is zero while running
}

// SetTargetRate records the rate the schedule currently asks for.
func (l *Load) SetTargetRate(rps float64) { l.targetRate.Store(math.Float64bits(rps)) }

// Started records that a run began at t.
func (l *Load) Started(t time.Time) *LoadRun {
	r := &LoadRun{l: l, from: t}
	l.mu.Lock()
	l.runs = append(l.runs, r)
	l.mu.Unlock()
	return r
}

// Stopped records that the run stopped sending at t (its last requests may still complete).
func (r *LoadRun) Stopped(t time.Time) {
	r.l.mu.Lock()
	r.to = t
	r.l.mu.Unlock()
}

// activity returns how long any run was sending within [from, to] (overlapping runs count once), whether one
// is sending now, and, with prune, forgets runs that ended before to.
func (l *Load) activity(from, to time.Time, prune bool) (seconds float64, running bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	type span struct{ a, b time.Time }
	var spans []span
	kept := l.runs[:0]
	for _, r := range l.runs {
		end := r.to
		if end.IsZero() {
			running, end = true, to
		}
		a, b := maxTime(r.from, from), minTime(end, to)
		if b.After(a) {
			spans = append(spans, span{a, b})
		}
		if !prune || r.to.IsZero() || r.to.After(to) {
			kept = append(kept, r)
		}
	}
	l.runs = kept
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

	mu          sync.Mutex
	windowStart time.Time
	routes      []*Route
	upstreams   []*Upstream
	loads       []*Load
}

// NewRegistry returns an empty registry whose first window starts now.
func NewRegistry(worker string, seed uint64) *Registry {
	return &Registry{worker: worker, seed: seed, now: time.Now, windowStart: time.Now()}
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
	s := &Load{Target: target, Latency: newHistogram(), Uncorrected: newHistogram()}
	r.loads = append(r.loads, s)
	return s
}

// Snapshot returns everything measured since the window started; with reset, a new window starts.
func (r *Registry) Snapshot(reset bool) *irsv1.StatsSnapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	end := r.now()
	out := &irsv1.StatsSnapshot{
		Worker:      r.worker,
		Seed:        r.seed,
		WindowStart: timestamppb.New(r.windowStart),
		WindowEnd:   timestamppb.New(end),
	}
	take := func(c *atomic.Int64) int64 {
		if reset {
			return c.Swap(0)
		}
		return c.Load()
	}
	for _, s := range r.routes {
		out.Inbound = append(out.Inbound, &irsv1.RouteStats{
			Route: s.Name, Outcomes: s.Outcomes.snapshot(reset), Latency: s.Latency.snapshot(reset),
			InFlight: s.InFlight.Load(),
		})
	}
	for _, s := range r.upstreams {
		out.Upstreams = append(out.Upstreams, &irsv1.UpstreamStats{
			Service: s.Name, Outcomes: s.Outcomes.snapshot(reset), Latency: s.Latency.snapshot(reset),
			Hop: s.Hop.snapshot(reset), Retries: take(&s.Retries), Skipped: take(&s.Skipped),
		})
	}
	for _, s := range r.loads {
		ls := &irsv1.LoadStats{
			Target: s.Target, Outcomes: s.Outcomes.snapshot(reset),
			Latency: s.Latency.snapshot(reset), Uncorrected: s.Uncorrected.snapshot(reset),
			Due: take(&s.Due), Sent: take(&s.Sent), Late: take(&s.Late), Blocked: take(&s.Blocked),
			Unsent:     take(&s.Unsent),
			TargetRate: math.Float64frombits(s.targetRate.Load()),
		}
		// Rate over the time the generator was sending, so that a window reaching past either end of a run does
		// not dilute it.
		active, running := s.activity(r.windowStart, end, reset)
		ls.Running = running
		if active > 0 {
			ls.AchievedRate = float64(ls.Outcomes.Requests) / active
		}
		out.Load = append(out.Load, ls)
	}
	if reset {
		r.windowStart = end
	}
	return out
}
