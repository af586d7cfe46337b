package engine

import (
	"errors"
	"fmt"
	"strings"

	"github.com/irs-sim/irs/internal/units"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
)

// assertions evaluates every assertion. Callers hold e.mu.
func (e *engine) assertions() []*irsv1.AssertionResult {
	var out []*irsv1.AssertionResult
	for _, a := range e.o.Workflow.GetAssertions() {
		r := &irsv1.AssertionResult{Name: a.GetName(), Expect: a.GetExpect(), Phase: a.GetPhase()}
		exp, err := workflows.ParseExpectation(a.GetExpect())
		if err != nil {
			r.Error = err.Error() // Validate prevents it
			out = append(out, r)
			continue
		}
		k := key{service: a.GetService(), kind: e.primary[a.GetService()]}
		r.Scope = a.GetService()
		if a.GetEdge() != "" {
			caller, callee, _ := strings.Cut(a.GetEdge(), "->")
			k = key{service: strings.TrimSpace(caller), callee: strings.TrimSpace(callee), kind: kindEdge}
			r.Scope = k.service + "->" + k.callee
		}
		v, err := e.measure(k, a, exp.Metric)
		if err != nil {
			r.Error = err.Error()
		} else {
			r.Measured, r.MeasuredText, r.Passed = v, exp.Format(v), exp.Holds(v)
		}
		out = append(out, r)
	}
	return out
}

var errNoRequests = errors.New("no requests were measured in this scope")

// measure returns the metric's value in its unit (ratio, count, req/s, seconds, millicores, MB).
func (e *engine) measure(k key, a *irsv1.Assertion, m workflows.Metric) (float64, error) {
	accs := e.totalAccs
	start, end, ran := e.span(a.GetPhase())
	if !ran {
		return 0, fmt.Errorf("phase %s did not run (the run ended at %.1fs)", a.GetPhase(), e.end.Seconds())
	}
	seconds := (end - start).Seconds()
	if a.GetPhase() != "" {
		accs = e.phaseAccs[a.GetPhase()]
	}
	if m == workflows.MetricRecoveryTime {
		return e.recovery(k, a)
	}
	ac := accs[k]
	if ac == nil {
		ac = newAcc()
	}
	p := ac.point(k, seconds, false)
	switch m {
	case workflows.MetricCPU:
		return p.GetCpuMcores(), nil
	case workflows.MetricCPUMax:
		return p.GetCpuMcoresMax(), nil
	case workflows.MetricRSS:
		return p.GetRssMb(), nil
	case workflows.MetricRSSMax:
		return p.GetRssMbMax(), nil
	case workflows.MetricErrors:
		return float64(p.GetFailures()), nil
	case workflows.MetricRequests:
		return float64(p.GetRequests()), nil
	case workflows.MetricRPS:
		return p.GetRps(), nil
	}
	if p.GetRequests() == 0 {
		return 0, errNoRequests
	}
	switch m {
	case workflows.Metric5xxRate:
		return p.GetFailureRate(), nil
	case workflows.MetricP50:
		return p.GetP50Ms() / 1000, nil
	case workflows.MetricP90:
		return p.GetP90Ms() / 1000, nil
	case workflows.MetricP99:
		return p.GetP99Ms() / 1000, nil
	case workflows.MetricP999:
		return p.GetP999Ms() / 1000, nil
	case workflows.MetricMax:
		return p.GetMaxMs() / 1000, nil
	}
	return p.GetMeanMs() / 1000, nil
}

// recovery returns, over the kills in scope, the longest time from a kill until the failure rate of the point
// stayed under the bound (until the next kill or the end of the scope): the end of the last interval at or above
// the bound, minus the kill's time; 0 when none was. An interval that holds the next kill is that kill's. The
// time is the timeline's (divided by the time scale), like the restart and discovery delays that make it.
func (e *engine) recovery(k key, a *irsv1.Assertion) (float64, error) {
	bound := 0.01
	if a.GetRecoveredBelow() != "" {
		bound, _ = units.ParsePercent(a.GetRecoveredBelow())
	}
	startD, endD, _ := e.span(a.GetPhase())
	start, end := startD.Seconds(), endD.Seconds()
	var kills []float64
	for _, ev := range e.res.Events {
		if ev.GetKind() == "kill" && ev.GetReplica() != "" && ev.GetT() >= start && ev.GetT() < end {
			if len(kills) == 0 || ev.GetT() != kills[len(kills)-1] {
				kills = append(kills, ev.GetT())
			}
		}
	}
	if len(kills) == 0 {
		return 0, errors.New("no replica was killed in this scope")
	}
	worst := 0.0
	for i, kt := range kills {
		until := end
		if i+1 < len(kills) {
			until = kills[i+1]
		}
		rec := 0.0
		for _, tick := range e.res.Series {
			if tick.GetT() <= kt || tick.GetT() > until && i+1 < len(kills) || tick.GetT()-e.interval.Seconds() >= until {
				continue
			}
			for _, p := range append(tick.GetServices(), tick.GetEdges()...) {
				if p.GetService() == k.service && p.GetCallee() == k.callee && p.GetKind() == k.kind &&
					p.GetRequests() > 0 && p.GetFailureRate() >= bound {
					rec = tick.GetT() - kt
				}
			}
		}
		worst = max(worst, rec)
	}
	return worst / e.o.Timeline.Scale, nil
}
