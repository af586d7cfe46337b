package engine

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"strings"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/proto"
)

// replicaWindow is what one replica reported for one interval, kept for the blast radius of faults: the
// requests it served and the calls it made (its load's included), by callee. The engine's other books are per
// service; which replica served or failed is what a fault's radius is about.
type replicaWindow struct {
	service, replica string
	served, failed   int64 // inbound requests, and those it answered with a 5xx (or never answered)
	calls            []callWindow
}

// callWindow is a replica's calls to one callee over an interval.
type callWindow struct {
	callee   string
	outcomes *irsv1.Outcomes
	// latency is kept only for the callees faults hit: their callers' p50 and p99 before and after. A book
	// (windowBook) keeps it per caller service instead, and its windows have none.
	latency *irsv1.Histogram
}

// fileWindow keeps a replica's window of interval k, when the run has faults. Callers hold e.mu.
func (e *engine) fileWindow(k int, service, replica string, s *irsv1.StatsSnapshot) {
	if e.windows == nil {
		return
	}
	w := replicaWindow{service: service, replica: replica}
	for _, r := range s.GetInbound() {
		w.served += r.GetOutcomes().GetRequests()
		w.failed += r.GetOutcomes().GetFailures()
	}
	add := func(callee string, o *irsv1.Outcomes, h *irsv1.Histogram) {
		if o.GetRequests() == 0 {
			return
		}
		c := callWindow{callee: callee, outcomes: o}
		if e.faulted[callee] || e.networkFaults {
			c.latency = h
		}
		w.calls = append(w.calls, c)
	}
	for _, l := range s.GetLoad() {
		add(l.GetTarget(), l.GetOutcomes(), l.GetLatency())
	}
	for _, u := range s.GetUpstreams() {
		add(u.GetService(), u.GetOutcomes(), u.GetLatency())
	}
	switch {
	case w.served == 0 && len(w.calls) == 0:
	case k <= e.settled: // late (a stalled stream): straight into the books of the faults that hold it
		e.fold(k, []replicaWindow{w})
	default:
		e.windows[k] = append(e.windows[k], w)
	}
}

// faultDamage computes every fault's blast radius from the replicas' windows and the load generators' series
// (see FaultRecord for the windows). Callers hold e.mu.
func (e *engine) faultDamage() {
	e.killsHealed()
	e.growBooks()
	interval, end := e.interval.Seconds(), e.end.Seconds()
	load := e.record().load
	for i, f := range e.res.GetFaults() {
		t := f.GetT()
		f.Until = e.faultUntil(f)
		span := faultSpan{t: t, until: f.GetUntil(), interval: interval, runEnd: end}
		d := recoveryFrom(load, span)
		f.Recovery, f.Recovered, f.Lost = d.recovery, d.recovered, d.lost
		after := e.intervals(span.holds)
		var before []int
		for lo, hi := e.beforeRange(t, e.prevBoundary(t)); lo <= hi; lo++ {
			before = append(before, lo)
		}
		f.Before, _ = e.bookWindow(f, &e.books[i].before, before, false)
		f.After, f.Edges = e.bookWindow(f, &e.books[i].after, after, true)
	}
	faultOverlaps(e.res.GetFaults())
}

// faultOverlaps notes, in every fault, the faults whose windows overlapped its own: each is measured over its
// own span, and what overlapped shares the figures.
func faultOverlaps(faults []*irsv1.FaultRecord) {
	for i, f := range faults {
		f.Overlaps = nil
		for j, g := range faults {
			if i != j && g.GetT() < f.GetUntil() && f.GetT() < g.GetUntil() {
				f.Overlaps = append(f.Overlaps, int32(j))
			}
		}
	}
}

// bookWindow returns a fault's window over intervals ks from its book and the intervals not settled yet, and
// with edges, its edges' damage. A sealed book's are computed once.
func (e *engine) bookWindow(f *irsv1.FaultRecord, b *windowBook, ks []int, edges bool) (*irsv1.FaultWindow, []*irsv1.EdgeDamage) {
	if !b.cached {
		set := e.windowSet(b, ks)
		w := e.faultWindow(f, ks, set, b, edges)
		var d []*irsv1.EdgeDamage
		if edges {
			d = edgeDamage(set)
		}
		if !b.sealed {
			return w, d
		}
		b.window, b.edges, b.cached = w, d, true
	}
	// Copies: the result they go into is written beside the engine (a checkpoint) while the next summary runs.
	var d []*irsv1.EdgeDamage
	for _, ed := range b.edges {
		d = append(d, proto.CloneOf(ed))
	}
	if b.window == nil {
		return nil, d
	}
	return proto.CloneOf(b.window), d
}

// beforeIntervals is how many intervals the window before a fault holds at most: 10 s at time scale 1, long
// enough for percentiles, short enough to be the fault's eve rather than the run's.
const beforeIntervals = 10

// intervals returns, in order, the intervals of the run (by index k: [(k-1)·interval, k·interval)) whose end
// satisfies in.
func (e *engine) intervals(in func(end float64) bool) []int {
	var ks []int
	last := int(math.Ceil(e.end.Seconds()/e.interval.Seconds() - 1e-9))
	for k := 1; k <= last; k++ {
		if in(float64(k) * e.interval.Seconds()) {
			ks = append(ks, k)
		}
	}
	return ks
}

// faultWindow sums a fault's service's inbound requests, and its callers' view of it, over intervals ks (nil
// for none), whose windows are set (windowSet: book's sums, then the intervals not settled), with the latency of
// book (whose windows have none); and those the replicas it hit served, over the whole window (before a fault)
// or, after (heldOnly), over the intervals while it held (heldIn; a book keeps their sums apart). A fault that
// hits no one service (a link, a partition, a node) has every edge as its callers: the calls it may have carried.
func (e *engine) faultWindow(f *irsv1.FaultRecord, ks []int, set [][]replicaWindow, book *windowBook, heldOnly bool) *irsv1.FaultWindow {
	if len(ks) == 0 {
		return nil
	}
	interval := e.interval.Seconds()
	start, stop := float64(ks[0]-1)*interval, min(float64(ks[len(ks)-1])*interval, e.end.Seconds())
	w := &irsv1.FaultWindow{Start: start, End: stop}
	heal, healed := e.healOf(f)
	held := func(k int) bool { return !heldOnly || heldIn(k, interval, f.GetT(), heal, healed) }
	for _, k := range ks {
		if held(k) {
			w.HeldEnd = min(float64(k)*interval, stop)
		}
	}
	open := slices.DeleteFunc(slices.Clone(ks), func(k int) bool { return k <= e.settled }) // set[1:]'s intervals
	hit := func(replica string) bool { return slices.Contains(f.GetReplicas(), replica) }
	for id, served := range book.heldServed {
		if !heldOnly {
			break // before a fault the book's sums are all held
		}
		service, replica, _ := strings.Cut(id, "\x00")
		if service == f.GetService() {
			w.HeldRequests += served
			if hit(replica) {
				w.HitRequests += served
			}
		}
	}
	callers := map[callEdge]*acc{}
	replicas := map[string]*irsv1.ReplicaErrors{}
	anyService := f.GetService() == ""
	for i, windows := range set {
		counts := !heldOnly || i > 0 && held(open[i-1]) // the book's held part is counted above
		for _, rw := range windows {
			if rw.service == f.GetService() {
				w.Requests += rw.served
				if counts {
					w.HeldRequests += rw.served
					if hit(rw.replica) {
						w.HitRequests += rw.served
					}
				}
				r := replicas[rw.replica]
				if r == nil {
					r = &irsv1.ReplicaErrors{Replica: rw.replica}
					replicas[rw.replica] = r
				}
				r.Requests, r.Errors = r.Requests+rw.served, r.Errors+rw.failed
			}
			for _, c := range rw.calls {
				if c.callee != f.GetService() && !anyService {
					continue
				}
				edge := callEdge{rw.service, c.callee}
				a := callers[edge]
				if a == nil {
					a = newAcc()
					callers[edge] = a
				}
				a.addOutcomes(c.outcomes)
				addHist(&a.latency, c.latency)
			}
		}
	}
	for edge, a := range callers { // the book's windows' latency, kept per caller
		book.addLatency(edge.caller, edge.callee, &a.latency)
	}
	if w.HeldRequests > 0 {
		w.HitShare = float64(w.HitRequests) / float64(w.HeldRequests)
	}
	for _, id := range slices.Sorted(maps.Keys(replicas)) {
		w.Replicas = append(w.Replicas, replicas[id])
	}
	edges := slices.SortedFunc(maps.Keys(callers), func(a, b callEdge) int {
		return cmp.Or(cmp.Compare(a.caller, b.caller), cmp.Compare(a.callee, b.callee))
	})
	for _, edge := range edges {
		k := key{service: edge.caller, callee: edge.callee, kind: kindEdge}
		w.Callers = append(w.Callers, callers[edge].point(k, stop-start, false))
	}
	return w
}

// heldIn says whether interval k (of length interval) is in the part of a fault's window while it held, the
// fault from t to its heal (healed false: not yet, so past the interval): most of the interval lay in that span,
// or, for a span shorter than an interval, most of the span lay in it.
func heldIn(k int, interval, t, heal float64, healed bool) bool {
	lo, hi := float64(k-1)*interval, float64(k)*interval
	if !healed {
		heal = math.Inf(1)
	}
	overlap := min(hi, heal) - max(lo, t)
	const eps = 1e-9
	return overlap >= interval/2-eps || (overlap > 0 || overlap == 0 && heal == t) && overlap >= (heal-t)/2-eps
}

// edgeDamage sums, over a set of windows, every edge's calls whose failures are in them, split by who failed
// them and by the caller's replica; edges without failures are left out, the worst first.
func edgeDamage(set [][]replicaWindow) []*irsv1.EdgeDamage {
	edges := map[callEdge]*irsv1.EdgeDamage{}
	replicas := map[callEdge]map[string]*irsv1.ReplicaErrors{}
	for _, windows := range set {
		for _, rw := range windows {
			for _, c := range rw.calls {
				id := callEdge{rw.service, c.callee}
				d := edges[id]
				if d == nil {
					d = &irsv1.EdgeDamage{Caller: rw.service, Callee: c.callee}
					edges[id], replicas[id] = d, map[string]*irsv1.ReplicaErrors{}
				}
				addDamage(d, c.outcomes)
				r := replicas[id][rw.replica]
				if r == nil {
					r = &irsv1.ReplicaErrors{Replica: rw.replica}
					replicas[id][rw.replica] = r
				}
				r.Requests += c.outcomes.GetRequests()
				r.Errors += c.outcomes.GetFailures()
			}
		}
	}
	var out []*irsv1.EdgeDamage
	for id, d := range edges {
		if d.GetErrors() == 0 {
			continue
		}
		for _, r := range replicas[id] {
			if r.GetErrors() > 0 {
				d.CallerReplicas = append(d.CallerReplicas, r)
			}
		}
		slices.SortFunc(d.CallerReplicas, func(a, b *irsv1.ReplicaErrors) int {
			return cmp.Or(cmp.Compare(b.GetErrors(), a.GetErrors()), cmp.Compare(a.GetReplica(), b.GetReplica()))
		})
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b *irsv1.EdgeDamage) int {
		return cmp.Or(cmp.Compare(b.GetErrors(), a.GetErrors()), cmp.Compare(a.GetCaller(), b.GetCaller()),
			cmp.Compare(a.GetCallee(), b.GetCallee()))
	})
	return out
}

// addDamage adds calls' outcomes to an edge's damage: failures split into 5xx from the callee's worker, 5xx a
// proxy made (no x-irs-worker header), no response at all, and 4xx.
func addDamage(d *irsv1.EdgeDamage, o *irsv1.Outcomes) {
	d.Requests += o.GetRequests()
	d.Errors += o.GetFailures()
	var s5, s4, proxy, transport int64
	for status, n := range o.GetStatuses() {
		switch {
		case status >= 500:
			s5 += n
		case status >= 400:
			s4 += n
		}
	}
	for _, n := range o.GetProxyStatuses() {
		proxy += n
	}
	for _, n := range o.GetErrors() {
		transport += n
	}
	d.AppErrors += s5 - proxy
	d.ProxyErrors += proxy
	d.TransportErrors += transport
	d.ClientErrors += s4
	for cause, n := range o.GetProxyCauses() {
		if d.ProxyCauses == nil {
			d.ProxyCauses = map[string]int64{}
		}
		d.ProxyCauses[cause] += n
	}
}

// damage is what a disturbance cost the load generators.
type damage struct {
	recovery  float64 // seconds from it to the end of the last interval at or over recoveredBelow (0: none was)
	recovered bool    // under recoveredBelow again before the window's end
	lost      int64   // requests failed from it until it recovered (at least one interval)
}

// faultSpan is the span a disturbance at t is measured over, until the next one (or the end of the run), in
// collection intervals.
type faultSpan struct {
	t, until, interval, runEnd float64
}

// holds reports whether the interval that ends at end is in the window: it ends after t and no later than until
// (at the end of the run, it starts before it), or t fell in it. The interval the next disturbance fell in is
// that one's: it would count what followed it (a heal's relief, another kill's errors) as this one's.
func (w faultSpan) holds(end float64) bool {
	const eps = 1e-9
	switch {
	case end <= w.t:
		return false
	case end-w.interval <= w.t+eps: // t fell in it
		return true
	case w.until >= w.runEnd-eps:
		return end-w.interval < w.until-eps
	}
	return end <= w.until+eps
}

// recoveryFrom measures the damage of a disturbance over its window (a kill's recovery time and errors, and a
// fault's): the load generators' recovery, whether they recovered within the window, and the requests they
// lost until then (at least over the interval it fell in).
func recoveryFrom(ticks []loadTick, w faultSpan) damage {
	var d damage
	for _, lt := range ticks {
		if w.holds(lt.t) && lt.requests > 0 && float64(lt.failures)/float64(lt.requests) >= recoveredBelow {
			d.recovery = lt.t - w.t
		}
	}
	d.recovered = d.recovery == 0
	for _, lt := range ticks {
		if lt.t > w.t && lt.t-w.interval < w.t+max(d.recovery, w.interval) {
			d.lost += lt.failures
		}
		if w.holds(lt.t) && lt.t > w.t+d.recovery && lt.requests > 0 {
			d.recovered = true
		}
	}
	return d
}
