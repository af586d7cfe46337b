package engine

import (
	"math"
	"slices"
	"time"

	"github.com/irs-sim/irs/internal/hdrwire"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// A fault's blast radius sums the replicas' windows over its intervals (faultDamage). Keeping every window of
// a long run and summing them again at every checkpoint made a detached engine's CPU and memory grow with the
// run: a 30-minute soak's checkpoint took 340 ms, nearly all of it decoding and merging the same histograms
// again. So an interval's windows are settled once no fault can still claim them: folded into the books of
// the faults whose windows hold the interval (one sum per replica), and let go. What a summary reads is a
// fault's books plus the intervals not settled yet.

// settleKeep is how many closed intervals stay as reported behind the newest (or behind the oldest step still
// running): a fault recorded now takes the beforeIntervals before it, and its step's time may be a little
// earlier than its record.
const settleKeep = beforeIntervals + 2

// faultBooks are the settled part of one fault's windows: the intervals before it and those after it.
type faultBooks struct {
	before, after windowBook
}

// windowBook sums the windows of settled intervals per replica, and their calls' latency per caller service and
// callee: a fault's window reads its callers' latency by service (faultWindow), so a book holds one histogram
// for all of a caller's replicas. While intervals may still join it, that latency stays decoded (merging into
// it is cheap); once its span is settled it is sealed: encoded (a few kilobytes), and decoded again only if a
// late window joins it.
type windowBook struct {
	replicas map[string]*replicaWindow // by service and replica, their calls without latency
	// heldServed is what each replica (by service and replica) served in the intervals of an after book while
	// its fault held (heldIn): the hit share is taken over them.
	heldServed map[string]int64
	latency    map[callEdge]*bookLatency
	sealed     bool
	// What a sealed book sums to, computed once (faultDamage): its span no longer changes.
	window *irsv1.FaultWindow
	edges  []*irsv1.EdgeDamage
	cached bool
}

// callEdge is a caller service's calls to a callee.
type callEdge struct{ caller, callee string }

// bookLatency is a book's latency of one edge: decoded while the book is open, encoded once it is sealed.
type bookLatency struct {
	merged  *hist
	encoded *irsv1.Histogram
}

// add folds a replica's window into the book.
func (b *windowBook) add(rw replicaWindow) {
	if b.replicas == nil {
		b.replicas = map[string]*replicaWindow{}
	}
	id := rw.service + "\x00" + rw.replica
	sum := b.replicas[id]
	if sum == nil {
		sum = &replicaWindow{service: rw.service, replica: rw.replica}
		b.replicas[id] = sum
	}
	// A window joining a book opens it (a late one, into a sealed book): its sums change, and settle seals it
	// again.
	b.window, b.edges, b.cached, b.sealed = nil, nil, false, false
	sum.served, sum.failed = sum.served+rw.served, sum.failed+rw.failed
	for _, c := range rw.calls {
		i := 0
		for i < len(sum.calls) && sum.calls[i].callee != c.callee {
			i++
		}
		if i == len(sum.calls) {
			sum.calls = append(sum.calls, callWindow{callee: c.callee, outcomes: &irsv1.Outcomes{}})
		}
		addOutcomes(sum.calls[i].outcomes, c.outcomes)
		if c.latency.GetCount() == 0 || c.latency.GetHdr() == "" {
			continue
		}
		if b.latency == nil {
			b.latency = map[callEdge]*bookLatency{}
		}
		edge := callEdge{rw.service, c.callee}
		l := b.latency[edge]
		if l == nil {
			l = &bookLatency{}
			b.latency[edge] = l
		}
		if l.encoded != nil { // sealed before: decoded again to take the late window
			addHist(&l.merged, l.encoded)
			l.encoded = nil
		}
		addHist(&l.merged, c.latency)
	}
}

// addHeld adds what each replica served in windows to the book's held part.
func (b *windowBook) addHeld(windows []replicaWindow) {
	if b.heldServed == nil {
		b.heldServed = map[string]int64{}
	}
	for _, rw := range windows {
		b.heldServed[rw.service+"\x00"+rw.replica] += rw.served
	}
	b.window, b.edges, b.cached, b.sealed = nil, nil, false, false
}

// seal encodes the book's decoded histograms: its span is settled.
func (b *windowBook) seal() {
	b.sealed = true
	for _, l := range b.latency {
		if l.merged == nil {
			continue
		}
		l.encoded, l.merged = &irsv1.Histogram{Hdr: string(hdrwire.Encode(l.merged)), Count: l.merged.TotalCount()}, nil
	}
}

// addLatency merges the book's latency of calls from caller to callee into *h (creating it).
func (b *windowBook) addLatency(caller, callee string, h **hist) {
	l := b.latency[callEdge{caller, callee}]
	switch {
	case l == nil:
	case l.merged != nil:
		if *h == nil {
			*h = newHist()
		}
		(*h).Merge(l.merged)
	default:
		addHist(h, l.encoded)
	}
}

// windows returns the book's sums as windows.
func (b *windowBook) windows() []replicaWindow {
	out := make([]replicaWindow, 0, len(b.replicas))
	for _, rw := range b.replicas {
		out = append(out, *rw)
	}
	return out
}

// addOutcomes adds o's counts to into.
func addOutcomes(into, o *irsv1.Outcomes) {
	into.Requests += o.GetRequests()
	into.Failures += o.GetFailures()
	addCounts(&into.Statuses, o.GetStatuses())
	addCounts(&into.Errors, o.GetErrors())
	addCounts(&into.ProxyStatuses, o.GetProxyStatuses())
	addCounts(&into.ProxyCauses, o.GetProxyCauses())
}

func addCounts[K comparable](into *map[K]int64, from map[K]int64) {
	for k, n := range from {
		if *into == nil {
			*into = map[K]int64{}
		}
		(*into)[k] += n
	}
}

// stepStarted notes a timeline step starting: until it returns, the intervals it may record a fault in stay
// unsettled. It returns what to call when it ends.
func (e *engine) stepStarted() (ended func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stepsRunning == nil {
		e.stepsRunning = map[uint64]time.Time{}
	}
	e.stepSeq++
	id := e.stepSeq
	e.stepsRunning[id] = time.Now()
	return func() {
		e.mu.Lock()
		delete(e.stepsRunning, id)
		e.mu.Unlock()
	}
}

// settle folds the windows of every interval no fault can claim any more into the books of the faults that
// hold it, and seals the books whose span is settled. Callers hold e.mu.
func (e *engine) settle() {
	if e.windows == nil {
		return
	}
	frontier := e.closed
	for _, started := range e.stepsRunning {
		frontier = min(frontier, int(started.Sub(e.t0)/e.interval))
	}
	for k := e.settled + 1; k <= frontier-settleKeep; k++ {
		e.settled = k
		e.fold(k, e.windows[k])
		delete(e.windows, k)
	}
	e.growBooks()
	interval := e.interval.Seconds()
	for i, f := range e.res.GetFaults() {
		b := e.books[i]
		until, prev := e.faultUntil(f), e.prevBoundary(f.GetT())
		if !b.after.sealed && until < e.end.Seconds() && float64(e.settled)*interval > until+interval {
			b.after.seal()
		}
		if _, hi := e.beforeRange(f.GetT(), prev); !b.before.sealed && e.settled >= hi {
			b.before.seal()
		}
	}
}

// fold adds a settled interval's windows to the books of the faults whose windows hold it. Callers hold e.mu.
func (e *engine) fold(k int, windows []replicaWindow) {
	e.growBooks()
	if len(windows) == 0 {
		return
	}
	interval := e.interval.Seconds()
	end := float64(k) * interval
	for i, f := range e.res.GetFaults() {
		t := f.GetT()
		until, prev := e.faultUntil(f), e.prevBoundary(t)
		var into []*windowBook
		if (faultSpan{t: t, until: until, interval: interval, runEnd: e.end.Seconds()}).holds(end) {
			into = append(into, &e.books[i].after)
			if heal, healed := e.healOf(f); heldIn(k, interval, t, heal, healed) {
				e.books[i].after.addHeld(windows)
			}
		}
		if lo, hi := e.beforeRange(t, prev); k >= lo && k <= hi {
			into = append(into, &e.books[i].before)
		}
		for _, b := range into {
			for _, rw := range windows {
				b.add(rw)
			}
		}
	}
}

// growBooks gives every fault recorded its books. Callers hold e.mu.
func (e *engine) growBooks() {
	for len(e.books) < len(e.res.GetFaults()) {
		e.books = append(e.books, &faultBooks{})
	}
}

// prevBoundary returns when the last fault or heal before t was (0: none): the window before a fault starts
// no earlier, so that it measures the fault's eve, not another fault. Callers hold e.mu.
func (e *engine) prevBoundary(t float64) float64 {
	prev := 0.0
	for _, b := range e.boundaries {
		if b < t {
			prev = max(prev, b)
		}
	}
	return prev
}

// effectAfter is how long a fault that has no heal of its own (a mesh component killed, which restarts by
// itself) is taken to last at least, in timeline seconds: then its window runs on until the clients recovered.
const effectAfter = 2.0

// maxTail bounds how long after its heal a fault's window waits for the clients to recover, in timeline
// seconds: a fault whose clients still fail then is not recovered.
const maxTail = 30.0

// faultUntil returns where a fault's window ends: whatever other faults do, at the end of the first interval
// after its own heal (a kill's: every victim's replacement ready) in which the load generators' 5xx rate was
// under recoveredBelow, or maxTail after the heal, or the end of the run. A fault not healed (yet) runs to the
// end of the run, and so does one whose clients' recovery is not in yet (the series goes on). Callers hold e.mu.
func (e *engine) faultUntil(f *irsv1.FaultRecord) float64 {
	end := max(e.end.Seconds(), f.GetT()) // a checkpoint can end before a fault it holds: no window, not a negative one
	heal, ok := e.healOf(f)
	if !ok {
		return end
	}
	scale := e.o.Timeline.Scale
	for _, lt := range e.rec.load {
		switch {
		case lt.t <= heal:
		case lt.t > heal+maxTail*scale:
			return min(lt.t-e.interval.Seconds(), end)
		case lt.requests > 0 && float64(lt.failures)/float64(lt.requests) < recoveredBelow:
			return min(lt.t, end)
		}
	}
	return end
}

// healOf returns when a fault was undone: its heal (a gray fault's restore, a network fault's heal, a thaw), a
// kill's last victim's replacement ready, or for a killed mesh component (restarted by itself)
// effectAfter after it. Callers hold e.mu.
func (e *engine) healOf(f *irsv1.FaultRecord) (float64, bool) {
	switch {
	case f.Healed != nil:
		return f.GetHealed(), true
	case f.GetKind() == FaultKill:
		return e.killHealed(f)
	case f.GetKind() == FaultMesh && !slices.Contains(e.frozen, f):
		return f.GetT() + effectAfter*e.o.Timeline.Scale, true
	}
	return 0, false
}

// beforeRange returns the intervals of the window before a fault at t (lo > hi: none): the whole intervals
// that end by t (and by the end of the run) and start at or after the previous fault prev, the last
// beforeIntervals of them.
func (e *engine) beforeRange(t, prev float64) (lo, hi int) {
	interval := e.interval.Seconds()
	hi = min(int(t/interval), int(math.Ceil(e.end.Seconds()/interval-1e-9)))
	for float64(hi+1)*interval <= t && hi+1 <= int(math.Ceil(e.end.Seconds()/interval-1e-9)) {
		hi++
	}
	for hi > 0 && float64(hi)*interval > t {
		hi--
	}
	lo = max(int(math.Ceil((prev-1e-9)/interval))+1, 1)
	return max(lo, hi-beforeIntervals+1), hi
}

// windowSet returns the windows of intervals ks: a book's sums for those settled, the rest as reported.
// Callers hold e.mu.
func (e *engine) windowSet(b *windowBook, ks []int) [][]replicaWindow {
	set := [][]replicaWindow{b.windows()}
	for _, k := range ks {
		if k > e.settled {
			set = append(set, e.windows[k])
		}
	}
	return set
}
