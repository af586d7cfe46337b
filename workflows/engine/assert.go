package engine

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/irs-sim/irs/internal/units"
	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
)

// assertions evaluates every assertion; one relative to a baseline against the baseline's value of the same
// metric, scope and phase (skipped without a baseline). Callers hold e.mu.
func (e *engine) assertions() []*irsv1.AssertionResult {
	var out []*irsv1.AssertionResult
	for _, a := range e.o.Workflow.GetAssertions() {
		r := &irsv1.AssertionResult{Name: a.GetName(), Expect: a.GetExpect(), Phase: a.GetPhase(), Scope: workflows.AssertionScope(a)}
		out = append(out, r)
		exp, err := workflows.ParseExpectation(a.GetExpect())
		if err != nil {
			r.Error = err.Error() // Validate prevents it
			continue
		}
		if why := e.notApplicable(a, exp.Metric); why != "" {
			r.Skipped, r.NotApplicable, r.MeasuredText = true, true, "not applicable: "+why
			continue
		}
		if exp.Relative {
			if e.o.Baseline == nil {
				r.Skipped, r.MeasuredText = true, "no baseline"
				continue
			}
			base, err := e.o.Baseline(a, exp.Metric)
			if err != nil {
				r.Error = "baseline: " + err.Error()
				continue
			}
			exp = exp.Against(base)
			r.Baseline, r.Bound = &base, &exp.Value
		}
		v, err := e.measure(e.assertionKey(a), a, exp.Metric)
		if err != nil {
			r.Error = err.Error()
		} else {
			r.Measured, r.MeasuredText, r.Passed = v, exp.Format(v), exp.Holds(v)
		}
	}
	return out
}

// notApplicable says why an assertion's metric does not apply to the run ("" when it does): a sidecar figure of
// a service that has no sidecar under the run's mesh (none, ambient, or a placement that leaves it out). It
// passed with 0m on the variant with no mesh; it is no pass there, and no failure either.
func (e *engine) notApplicable(a *irsv1.Assertion, m workflows.Metric) string {
	if m != workflows.MetricSidecarCPU && m != workflows.MetricSidecarRSS {
		return ""
	}
	mesh := policy.Resolve(e.o.Workflow.GetMesh())
	service := e.assertionKey(a).service
	switch {
	case mesh.GetType() == policy.TypeNone || mesh.GetType() == policy.TypeAmbient:
		return fmt.Sprintf("the run's mesh (%s) has no sidecars", mesh.GetType())
	case !policy.HasSidecar(mesh.GetSidecars(), e.primary[service] == kindServed):
		return fmt.Sprintf("%s has no sidecar under sidecars: %s", service, mesh.GetSidecars())
	}
	return ""
}

// assertionKey is the point an assertion reads: its service's main point, or its edge's.
func (e *engine) assertionKey(a *irsv1.Assertion) key {
	if a.GetEdge() != "" {
		caller, callee, _ := strings.Cut(a.GetEdge(), "->")
		return key{service: strings.TrimSpace(caller), callee: strings.TrimSpace(callee), kind: kindEdge}
	}
	return key{service: a.GetService(), kind: e.primary[a.GetService()]}
}

// measure returns the metric's value in its unit (ratio, count, req/s, seconds, millicores, MB).
func (e *engine) measure(k key, a *irsv1.Assertion, m workflows.Metric) (float64, error) {
	start, end, ran := e.span(a.GetPhase())
	if !ran {
		return 0, fmt.Errorf("phase %s did not run (the run ended at %.1fs)", a.GetPhase(), e.end.Seconds()/e.o.Timeline.Scale)
	}
	seconds := (end - start).Seconds()
	if a.GetPhase() != "" {
		seconds = e.measuredSeconds(a.GetPhase()) // the intervals filed in it (see measuredSeconds)
	}
	if m == workflows.MetricRecoveryTime {
		return e.recovery(k, a)
	}
	if c := e.coverageOf(a.GetPhase(), k.service); c.GetIntervalsExcused() > 0 && c.GetIntervalsMeasured() == 0 {
		return 0, fmt.Errorf("no data: every replica of %s was on a node the run had lost", k.service)
	}
	ac := e.phaseAccs[a.GetPhase()][k]
	if a.GetPhase() == "" {
		ac = e.runAcc(k)
	}
	if ac == nil {
		ac = newAcc()
	}
	p := e.spanAcc(a.GetPhase(), k, ac).point(k, seconds, false)
	if (m == workflows.MetricSidecarCPU || m == workflows.MetricSidecarRSS) && p.GetSidecars() == 0 {
		return 0, fmt.Errorf("no data: no sidecar of %s was measured", k.service)
	}
	if m == workflows.MetricErrors && p.GetRequests() == 0 {
		// errors == 0 over no request holds over nothing: a run whose only generator died passed on it.
		return 0, workflows.ErrNoRequests
	}
	if needsAnswers[m] && p.GetRequests() > 0 && completed(p) == 0 {
		// Refused, reset and timed-out requests are quick or capped: their latency and rate say nothing of
		// the system, and an assertion over them would hold over nothing.
		return 0, fmt.Errorf("no data: none of its %d requests was answered%s", p.GetRequests(), errorKinds(p))
	}
	return workflows.PointValue(p, m)
}

// needsAnswers are the metrics that measure answered requests: with none, there is no data.
var needsAnswers = map[workflows.Metric]bool{
	workflows.MetricP50: true, workflows.MetricP90: true, workflows.MetricP99: true, workflows.MetricP999: true,
	workflows.MetricMax: true, workflows.MetricMean: true, workflows.MetricRPS: true,
}

// errorKinds says how a point's unanswered requests ended: " (120 refused, 3 timeout)".
func errorKinds(p *irsv1.Point) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(p.GetErrors())) {
		parts = append(parts, fmt.Sprintf("%d %s", p.GetErrors()[k], k))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// recovery returns the scope's recovery time after the kills in its phase (see workflows.RecoveryTime), in the
// timeline's time (divided by the time scale), like the restart and discovery delays that make it.
func (e *engine) recovery(k key, a *irsv1.Assertion) (float64, error) {
	bound := 0.01
	if a.GetRecoveredBelow() != "" {
		bound, _ = units.ParsePercent(a.GetRecoveredBelow())
	}
	startD, endD, _ := e.span(a.GetPhase())
	start, end := startD.Seconds(), endD.Seconds()
	kills := workflows.Kills(e.res.Events, start, end)
	if len(kills) == 0 {
		return 0, workflows.ErrNoKills
	}
	s := workflows.Scope{Service: k.service, Callee: k.callee, Kind: k.kind}
	return workflows.RecoveryTime(kills, e.watchedSeries(), s, end, e.interval.Seconds(), bound) / e.o.Timeline.Scale, nil
}

// coverageOf is a service's coverage in a phase ("": the whole run), nil when not known.
func (e *engine) coverageOf(phase, service string) *irsv1.Coverage {
	var cs []*irsv1.Coverage
	if phase == "" {
		cs = e.res.GetTotal().GetCoverage()
	} else {
		for _, p := range e.res.GetPhases() {
			if p.GetName() == phase {
				cs = p.GetCoverage()
			}
		}
	}
	for _, c := range cs {
		if c.GetService() == service {
			return c
		}
	}
	return nil
}
