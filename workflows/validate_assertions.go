package workflows

import (
	"slices"
	"strings"

	"github.com/irs-sim/irs/internal/field"
	"github.com/irs-sim/irs/internal/units"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

func (v *validator) assertion(path string, a *irsv1.Assertion) {
	e, err := ParseExpectation(a.GetExpect())
	if a.GetExpect() == "" {
		v.errs.Addf(field.Join(path, "expect"), "required, e.g. \"p99 < 500ms\"")
	} else {
		v.errs.Add(field.Join(path, "expect"), err)
	}
	switch {
	case a.GetService() != "" && a.GetEdge() != "":
		v.errs.Addf(path, "service or edge, not both")
	case a.GetService() != "":
		v.serviceRef(field.Join(path, "service"), a.GetService())
	case a.GetEdge() != "":
		caller, callee, ok := strings.Cut(a.GetEdge(), "->")
		if !ok {
			v.errs.Addf(field.Join(path, "edge"), "%q: want caller->callee", a.GetEdge())
			break
		}
		caller, callee = strings.TrimSpace(caller), strings.TrimSpace(callee)
		cs := v.serviceRef(field.Join(path, "edge"), caller)
		ce := v.serviceRef(field.Join(path, "edge"), callee)
		if cs != nil && ce != nil && !calls(cs, callee) && !v.edges[caller][callee] {
			v.errs.Addf(field.Join(path, "edge"), "%s does not call %s", caller, callee)
		}
		if err == nil && perService(e.Metric) {
			v.errs.Addf(field.Join(path, "expect"), "%s is measured per service, not per edge", e.Metric)
		}
	default:
		v.errs.Addf(path, "required: service or edge")
	}
	if a.GetPhase() != "" && !v.phases[a.GetPhase()] {
		v.errs.Addf(field.Join(path, "phase"), "unknown phase %q", a.GetPhase())
	}
	if a.GetRecoveredBelow() != "" {
		_, perr := units.ParsePercent(a.GetRecoveredBelow())
		v.errs.Add(field.Join(path, "recovered_below"), perr)
		if err == nil && e.Metric != MetricRecoveryTime {
			v.errs.Addf(field.Join(path, "recovered_below"), "applies to recovery_time only")
		}
	}
}

// perService reports whether a metric is measured per service only (resources, recovery).
func perService(m Metric) bool {
	switch m {
	case MetricCPU, MetricCPUMax, MetricRSS, MetricRSSMax, MetricRecoveryTime:
		return true
	}
	return false
}

// addEdges records the calls and load target a configuration adds to a service.
func (v *validator) addEdges(caller string, cfg *irsv1.WorkerConfig) {
	for _, callee := range Callees(cfg) {
		v.addEdge(caller, callee)
	}
}

func (v *validator) addEdge(caller, callee string) {
	if callee == "" {
		return
	}
	if v.edges[caller] == nil {
		v.edges[caller] = map[string]bool{}
	}
	v.edges[caller][callee] = true
}

// calls reports whether a service calls another (directly, in any step) or sends it load.
func calls(s *irsv1.Service, callee string) bool {
	return slices.Contains(Callees(s.GetWorker()), callee)
}
