package engine

import (
	"fmt"
	"maps"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strings"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
)

// MinCoverage is the share of the intervals a service's replicas were up for that they must report in every
// phase: below it the phase's figures stand on too little (a stats stream stalled, the way to a replica broke),
// and the run is invalid. A replica that starts or dies mid-interval is not expected in that interval, so kills
// and restarts never count against it, nor is one on a node the run lost, while it is lost; a tenth allows a
// late window or two in a short phase.
const MinCoverage = 0.9

// reported records, per replica, the intervals whose stats arrived. Callers hold e.mu.
func (e *engine) reported(service, replica string, k int) {
	r := e.reports[replica]
	if r == nil {
		r = &replicaReports{service: service}
		e.reports[replica] = r
	}
	r.intervals.add(k)
}

// replicaReports is what one replica reported.
type replicaReports struct {
	service   string
	intervals intervalSet
}

// intervalSet is a set of intervals (by index k ≥ 0), a bit each: a long run's replicas report thousands.
type intervalSet []uint64

func (s *intervalSet) add(k int) {
	for len(*s) <= k/64 {
		*s = append(*s, 0)
	}
	(*s)[k/64] |= 1 << (k % 64)
}

func (s intervalSet) has(k int) bool { return k >= 0 && k/64 < len(s) && s[k/64]&(1<<(k%64)) != 0 }

// each calls fn for every interval in the set, in order.
func (s intervalSet) each(fn func(k int)) {
	for i, w := range s {
		for ; w != 0; w &= w - 1 {
			fn(i*64 + bits.TrailingZeros64(w))
		}
	}
}

// count is how many intervals the set holds.
func (s intervalSet) count() int {
	n := 0
	for _, w := range s {
		n += bits.OnesCount64(w)
	}
	return n
}

// lifetimes returns, per replica, the spans (in seconds of the run) it was up: from each ready event to the
// kill or exit after it (whichever came first), or to the end of the run.
func lifetimes(events []*irsv1.RunEvent, end float64) map[string][][2]float64 {
	out := map[string][][2]float64{}
	open := map[string]float64{}
	for _, ev := range events {
		switch workflows.EventKind(ev.GetKind()) {
		case workflows.EventReady:
			if _, ok := open[ev.GetReplica()]; !ok {
				open[ev.GetReplica()] = max(0, ev.GetT())
			}
		case workflows.EventExit, workflows.EventRestart, "kill": // a restart in place: up again at its next ready
			if start, ok := open[ev.GetReplica()]; ok {
				out[ev.GetReplica()] = append(out[ev.GetReplica()], [2]float64{start, ev.GetT()})
				delete(open, ev.GetReplica())
			}
		}
	}
	for r, start := range open {
		out[r] = append(out[r], [2]float64{start, end})
	}
	return out
}

// coverage measures, for every service, how much of the phase [start, end) its replicas reported, and adds the
// requests completed. Callers hold e.mu.
func (e *engine) coverage(pr *irsv1.PhaseResult, start, end float64) []*irsv1.Coverage {
	step := e.interval.Seconds()
	alive := lifetimes(e.res.GetEvents(), e.end.Seconds())
	byService := map[string]*irsv1.Coverage{}
	get := func(service string) *irsv1.Coverage {
		c := byService[service]
		if c == nil {
			c = &irsv1.Coverage{Service: service, Seconds: end - start}
			byService[service] = c
		}
		return c
	}
	for _, s := range e.o.Workflow.GetServices() {
		get(s.GetName())
	}
	measured := map[string]intervalSet{} // service → intervals some replica reported
	replicas := make([]string, 0, len(alive))
	for r := range alive {
		replicas = append(replicas, r)
	}
	sort.Strings(replicas)
	for _, replica := range replicas {
		rep := e.reports[replica]
		service := e.serviceOf(replica, rep)
		if service == "" {
			continue
		}
		c := get(service)
		var missing []int
		for k := int(math.Floor(start/step+1e-9)) + 1; float64(k)*step <= end+1e-9; k++ {
			from, to := float64(k-1)*step, float64(k)*step
			if !upWhole(alive[replica], from, to, step) {
				continue
			}
			if e.unreachable(replica, from, to) {
				c.IntervalsExcused++
				continue
			}
			c.IntervalsExpected++
			if rep != nil && rep.intervals.has(k) {
				c.IntervalsMeasured++
				continue
			}
			missing = append(missing, k)
		}
		if len(missing) > 0 {
			c.Missing = append(c.Missing, fmt.Sprintf("%s: %s", replica, spans(missing, step/e.o.Timeline.Scale))) // the timeline's seconds
		}
	}
	for _, rep := range e.reports {
		ks := measured[rep.service]
		rep.intervals.each(func(k int) {
			if float64(k-1)*step >= start-1e-9 && float64(k)*step <= end+1e-9 {
				ks.add(k)
			}
		})
		measured[rep.service] = ks
	}
	for service, ks := range measured {
		get(service).SecondsMeasured = float64(ks.count()) * step
	}
	for _, p := range pr.GetServices() {
		c := get(p.GetService())
		c.Requests += p.GetRequests()
		c.Completed += completed(p)
	}
	out := make([]*irsv1.Coverage, 0, len(byService))
	for _, c := range byService {
		c.SecondsMeasured = min(c.SecondsMeasured, c.Seconds)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *irsv1.Coverage) int { return strings.Compare(a.GetService(), b.GetService()) })
	return out
}

// serviceOf names a replica's service: from its reports, else from its events.
func (e *engine) serviceOf(replica string, rep *replicaReports) string {
	if rep != nil {
		return rep.service
	}
	for _, ev := range e.res.GetEvents() {
		if ev.GetReplica() == replica && ev.GetService() != "" {
			return ev.GetService()
		}
	}
	return ""
}

// upWhole reports whether a replica was up for the whole interval [from, to), its first interval after it came
// up excepted (its first window is partial, filed by its middle), and with time to send the window after its
// end (a replica killed at the moment an interval ends dies sending it).
func upWhole(spans [][2]float64, from, to, step float64) bool {
	sendTime := min(step/2, 0.5)
	for _, s := range spans {
		if from >= s[0]+step-1e-9 && to <= s[1]-sendTime+1e-9 {
			return true
		}
	}
	return false
}

// spans writes intervals as spans of seconds: "31-60s, 72s".
func spans(ks []int, step float64) string {
	var parts []string
	for i := 0; i < len(ks); {
		j := i
		for j+1 < len(ks) && ks[j+1] == ks[j]+1 {
			j++
		}
		from, to := float64(ks[i]-1)*step, float64(ks[j])*step
		parts = append(parts, fmt.Sprintf("%g-%gs", math.Round(from*100)/100, math.Round(to*100)/100))
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// completed counts a point's requests that were answered (with any status): every request ends with a status
// or an error, and refused, reset and timed-out requests measured no latency of the system.
func completed(p *irsv1.Point) int64 {
	n := p.GetRequests()
	for _, v := range p.GetErrors() {
		n -= v
	}
	return max(0, n)
}

// runnerPausedIn names the runner's pauses in a phase, as the cause of what is missing there ("" for none): the
// replicas sent, the runner did not take it.
func runnerPausedIn(pauses []*irsv1.Gap, pr *irsv1.PhaseResult) string {
	var spans []string
	for _, g := range pauses {
		if g.GetStart() < pr.GetEnd() && g.GetEnd() > pr.GetStart() {
			spans = append(spans, fmt.Sprintf("%.1f-%.1fs", g.GetStart(), g.GetEnd()))
		}
	}
	if len(spans) == 0 {
		return ""
	}
	return "; the runner itself did not run at " + strings.Join(spans, ", ") + " (stopped or starved): the cause is its, not the replicas'"
}

// invalidCoverage says which phases' figures stand on too little: a service whose replicas reported under
// MinCoverage of what they were up for, a load generator the timeline has sending in a phase (senders) that
// made no request in it (killed for the whole phase, or its load never started: a second generator's figures
// once made such a run pass), and a run in which the load generators completed no request at all. A generator
// whose requests were all refused or failed did measure: that is an outage, its errors say so, and calling it
// invalid would hide it.
func invalidCoverage(res *irsv1.WorkflowResult, loaders map[string]bool, senders map[string]map[string]bool) []string {
	var out []string
	for _, pr := range res.GetPhases() {
		for _, gen := range slices.Sorted(maps.Keys(senders[pr.GetName()])) {
			var p *irsv1.Point
			for _, q := range pr.GetServices() {
				if q.GetService() == gen && q.GetKind() == kindLoad {
					p = q
				}
			}
			if p.GetRequests() > 0 {
				continue
			}
			why := "no replica of it reported sending"
			if p != nil {
				why = "its replicas reported, with no request sent"
			}
			out = append(out, fmt.Sprintf("load generator %s made no request in %s, where the timeline has it sending: %s",
				gen, pr.GetName(), why))
		}
		for _, c := range pr.GetCoverage() {
			if c.GetIntervalsExpected() == 0 {
				continue
			}
			if share := float64(c.GetIntervalsMeasured()) / float64(c.GetIntervalsExpected()); share < MinCoverage {
				out = append(out, fmt.Sprintf("%s in %s: its replicas reported %d of the %d intervals they were up for (%.0f %%, under %.0f %%); missing %s%s",
					c.GetService(), pr.GetName(), c.GetIntervalsMeasured(), c.GetIntervalsExpected(), 100*share, 100*MinCoverage,
					strings.Join(c.GetMissing(), "; "), runnerPausedIn(res.GetRunnerPauses(), pr)))
			}
		}
	}
	var sent, done int64
	for _, c := range res.GetTotal().GetCoverage() {
		if loaders[c.GetService()] {
			sent += c.GetRequests()
			done += c.GetCompleted()
		}
	}
	if len(loaders) > 0 && done == 0 {
		out = append(out, fmt.Sprintf("no request completed: the load generators made %d requests and none was answered (see the errors), so no latency was measured", sent))
	}
	return out
}
