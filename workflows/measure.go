package workflows

import (
	"errors"
	"fmt"
	"strings"

	"github.com/irs-sim/irs/internal/units"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// Errors of metrics that cannot be measured.
var (
	ErrNoRequests = errors.New("no requests were measured in this scope")
	ErrNoKills    = errors.New("no replica was killed in this scope")
)

// Point kinds: what a point measures.
const (
	KindLoad   = "load"   // the requests a load generator sent
	KindServed = "served" // the requests a service served
	KindEdge   = "edge"   // the calls a caller made to a callee
)

// PointValue returns a metric (not recovery_time) of a measured point in the metric's unit: a ratio, a count,
// requests per second, seconds, millicores or megabytes.
func PointValue(p *irsv1.Point, m Metric) (float64, error) {
	switch m {
	case MetricCPU:
		return p.GetCpuMcores(), nil
	case MetricCPUMax:
		return p.GetCpuMcoresMax(), nil
	case MetricRSS:
		return p.GetRssMb(), nil
	case MetricRSSMax:
		return p.GetRssMbMax(), nil
	case MetricSidecarCPU:
		return p.GetSidecarCpuMcores(), nil
	case MetricSidecarRSS:
		return p.GetSidecarRssMb(), nil
	case MetricErrors:
		return float64(p.GetFailures()), nil
	case MetricRequests:
		return float64(p.GetRequests()), nil
	case MetricRPS:
		return p.GetRps(), nil
	}
	if p.GetRequests() == 0 {
		return 0, ErrNoRequests
	}
	switch m {
	case Metric5xxRate:
		return p.GetFailureRate(), nil
	case MetricP50:
		return p.GetP50Ms() / 1000, nil
	case MetricP90:
		return p.GetP90Ms() / 1000, nil
	case MetricP99:
		return p.GetP99Ms() / 1000, nil
	case MetricP999:
		return p.GetP999Ms() / 1000, nil
	case MetricMax:
		return p.GetMaxMs() / 1000, nil
	}
	return p.GetMeanMs() / 1000, nil
}

// LoadServices returns the services that generate load: a worker load, or a load action in some phase. Their
// main point is what they sent (kind load); every other service's is what it served.
func LoadServices(wf *irsv1.Workflow) map[string]bool {
	out := map[string]bool{}
	for _, s := range wf.GetServices() {
		if s.GetWorker().GetLoad() != nil {
			out[s.GetName()] = true
		}
	}
	walkActions(wf, func(a *irsv1.Action) {
		if a.GetLoad() != nil {
			out[a.GetLoad().GetService()] = true
		}
	})
	return out
}

// PureLoadGenerators returns the services that generate load (LoadServices) and that no service calls or sends
// load to, in its configuration or by an action: they only make traffic, which the kubernetes backend gives a
// node of its own when the cluster has one.
func PureLoadGenerators(wf *irsv1.Workflow) map[string]bool {
	reached := map[string]bool{}
	reach := func(cfg *irsv1.WorkerConfig) {
		for _, c := range Calls(cfg.GetCalls()) {
			reached[c.GetService()] = true
		}
		if t := cfg.GetLoad().GetTarget(); t != "" {
			reached[t] = true
		}
	}
	for _, s := range wf.GetServices() {
		reach(s.GetWorker())
	}
	walkActions(wf, func(a *irsv1.Action) {
		reach(a.GetConfigure().GetSet())
		if t := a.GetLoad().GetSet().GetTarget(); t != "" {
			reached[t] = true
		}
	})
	out := LoadServices(wf)
	for name := range out {
		if reached[name] {
			delete(out, name)
		}
	}
	return out
}

// LoadTargets returns the edges "generator->target" of every load the workflow sets: a generator's point and its
// edge to its target measure the same requests.
func LoadTargets(wf *irsv1.Workflow) map[string]bool {
	out := map[string]bool{}
	for _, s := range wf.GetServices() {
		if t := s.GetWorker().GetLoad().GetTarget(); t != "" {
			out[s.GetName()+"->"+t] = true
		}
	}
	walkActions(wf, func(a *irsv1.Action) {
		if l := a.GetLoad(); l != nil && l.GetSet().GetTarget() != "" {
			out[l.GetService()+"->"+l.GetSet().GetTarget()] = true
		}
	})
	return out
}

// Scope is what a point measures: a service's main point, or an edge.
type Scope struct {
	Service string
	Callee  string // an edge's
	Kind    string
}

// Matches reports whether a point is the scope's.
func (s Scope) Matches(p *irsv1.Point) bool {
	return p.GetService() == s.Service && p.GetCallee() == s.Callee && p.GetKind() == s.Kind
}

// RecoveryTime returns, over the kills (event times) between start and end, the longest time from a kill until
// the scope's failure rate stayed under the bound (until the next kill or the end): the end of the last
// interval at or above the bound, minus the kill's time; 0 when none was. An interval that holds the next kill
// is that kill's. Times are the series' (seconds of the run); the caller divides by the time scale.
func RecoveryTime(kills []float64, series []*irsv1.Tick, s Scope, end, interval, bound float64) float64 {
	worst := 0.0
	for i, kt := range kills {
		until := end
		if i+1 < len(kills) {
			until = kills[i+1]
		}
		rec := 0.0
		for _, tick := range series {
			if tick.GetT() <= kt || tick.GetT() > until && i+1 < len(kills) || tick.GetT()-interval >= until {
				continue
			}
			for _, p := range append(tick.GetServices(), tick.GetEdges()...) {
				if s.Matches(p) && p.GetRequests() > 0 && p.GetFailureRate() >= bound {
					rec = tick.GetT() - kt
				}
			}
		}
		worst = max(worst, rec)
	}
	return worst
}

// Kills returns the times of the replica kills between start and end, once per time.
func Kills(events []*irsv1.RunEvent, start, end float64) []float64 {
	var kills []float64
	for _, ev := range events {
		if ev.GetKind() == "kill" && ev.GetReplica() != "" && ev.GetT() >= start && ev.GetT() < end {
			if len(kills) == 0 || ev.GetT() != kills[len(kills)-1] {
				kills = append(kills, ev.GetT())
			}
		}
	}
	return kills
}

// AssertionScope names an assertion's scope: its service, or its edge "caller->callee".
func AssertionScope(a *irsv1.Assertion) string {
	if a.GetEdge() == "" {
		return a.GetService()
	}
	caller, callee, _ := strings.Cut(a.GetEdge(), "->")
	return strings.TrimSpace(caller) + "->" + strings.TrimSpace(callee)
}

// MeasureResult returns an assertion's metric as a finished result measured it: from the result's phase (or
// total) points and, for recovery_time, its series and events.
func MeasureResult(res *irsv1.WorkflowResult, a *irsv1.Assertion, m Metric) (float64, error) {
	s := Scope{Service: a.GetService(), Kind: KindServed}
	if LoadServices(res.GetWorkflow())[s.Service] {
		s.Kind = KindLoad
	}
	if a.GetEdge() != "" {
		caller, callee, _ := strings.Cut(a.GetEdge(), "->")
		s = Scope{Service: strings.TrimSpace(caller), Callee: strings.TrimSpace(callee), Kind: KindEdge}
	}
	pr := res.GetTotal()
	if a.GetPhase() != "" {
		pr = nil
		for _, p := range res.GetPhases() {
			if p.GetName() == a.GetPhase() {
				pr = p
			}
		}
		if pr == nil {
			return 0, fmt.Errorf("phase %s did not run", a.GetPhase())
		}
	}
	if pr == nil {
		return 0, errors.New("the run measured nothing")
	}
	if m == MetricRecoveryTime {
		bound := 0.01
		if a.GetRecoveredBelow() != "" {
			bound, _ = units.ParsePercent(a.GetRecoveredBelow())
		}
		kills := Kills(res.GetEvents(), pr.GetStart(), pr.GetEnd())
		if len(kills) == 0 {
			return 0, ErrNoKills
		}
		// The result's times are the timeline's (resultfile.ToTimeline), as recovery_time is.
		return RecoveryTime(kills, res.GetSeries(), s, pr.GetEnd(), SeriesInterval(res), bound), nil
	}
	for _, p := range append(pr.GetServices(), pr.GetEdges()...) {
		if s.Matches(p) {
			return PointValue(p, m)
		}
	}
	if m == MetricRequests { // a count of nothing is 0; errors over nothing hold over nothing
		return 0, nil
	}
	return 0, ErrNoRequests
}

// SeriesInterval returns the seconds between two points of a result's series: as recorded, or as the series
// shows (1 when it cannot tell).
func SeriesInterval(res *irsv1.WorkflowResult) float64 {
	if res.GetInterval() > 0 {
		return res.GetInterval()
	}
	if s := res.GetSeries(); len(s) > 1 && s[1].GetT() > s[0].GetT() {
		return s[1].GetT() - s[0].GetT()
	}
	return 1
}
