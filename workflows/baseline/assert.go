package baseline

import (
	"fmt"
	"math"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/resultfile"
)

// ForAssertions returns what the engine asks of a baseline for the assertions relative to it: the baseline's
// value of an assertion's metric, scope and phase, for a variant (a comparison's variant of the same name, or
// the baseline's one run); over several runs, their median.
func ForAssertions(base *resultfile.File, variant string) func(*irsv1.Assertion, workflows.Metric) (float64, error) {
	ss := sidesOf(base)
	s := findSide(ss, variant)
	if s == nil && base.Result != nil {
		s = &ss[0]
	}
	return func(a *irsv1.Assertion, m workflows.Metric) (float64, error) {
		if s == nil {
			return 0, fmt.Errorf("%s has no variant %s (it has %s)", base.Path, variant, names(ss))
		}
		var vals []float64
		var last error
		for _, r := range s.runs {
			v, err := workflows.MeasureResult(r, a, m)
			if err != nil {
				last = err
				continue
			}
			vals = append(vals, v)
		}
		if len(vals) == 0 {
			return 0, fmt.Errorf("%s: %w", base.Path, last)
		}
		return median(vals), nil
	}
}

// JudgeRelative takes the noise into account in a run's assertions relative to its baseline, once the
// comparison reg is made: one that failed by a change of its figure the comparison finds within noise is
// inconclusive, not failed (the report once showed FAIL beside "inconclusive" for the same figure, and such
// assertions failed 7 of 19 identical-code runs). A run whose only failures were those is then inconclusive.
func JudgeRelative(f *resultfile.File, reg *irsv1.Regressions) {
	judge := func(variant string, r *irsv1.WorkflowResult) (stillFailed bool) {
		failed, unsure := false, false
		for _, a := range r.GetAssertions() {
			if a.GetPassed() || a.GetSkipped() {
				continue
			}
			if a.GetError() != "" { // unmeasured: it fails the run, whatever the noise
				failed = true
				continue
			}
			exp, err := workflows.ParseExpectation(a.GetExpect())
			ch := changeOf(reg, variant, a, exp.Metric)
			// Within noise as the figure's own row judges it: unchanged, or beyond its limit but not beyond noise.
			if err != nil || !exp.Relative || ch == nil || (ch.GetVerdict() != VerdictUnchanged && ch.GetVerdict() != VerdictInconclusive) {
				failed = true
				continue
			}
			a.Inconclusive = fmt.Sprintf("%s moved %s against the baseline, within its noise (p %.2f; %s)",
				exp.Metric, workflows.FormatAmount(exp.Metric, ch.GetDelta()), ch.GetPValue(), detectableText(ch, exp.Metric))
			unsure = true
		}
		if unsure && !failed && r.GetStatus() == "failed" {
			r.Status = StatusInconclusive
		}
		return r.GetStatus() == "failed"
	}
	if f.Result != nil {
		judge(VariantName(f.Result), f.Result)
		return
	}
	anyFailed := false
	for _, v := range f.Comparison.GetVariants() {
		for _, r := range v.GetRuns() {
			anyFailed = judge(v.GetName(), r) || anyFailed
		}
	}
	if c := f.Comparison; c.GetStatus() == "failed" && !anyFailed {
		c.Status = StatusInconclusive // its runs failed by nothing but assertions the noise could not decide
	}
}

// changeOf is the comparison's change of an assertion's figure (nil: none).
func changeOf(reg *irsv1.Regressions, variant string, a *irsv1.AssertionResult, m workflows.Metric) *irsv1.Change {
	phase := a.GetPhase()
	if phase == "" {
		phase = TotalPhase
	}
	for _, ch := range reg.GetChanges() {
		if ch.GetScope() == a.GetScope() && ch.GetPhase() == phase && ch.GetMetric() == string(m) &&
			(ch.GetVariant() == variant || ch.GetVariant() == "") && ch.GetVerdict() != VerdictMissing {
			return ch
		}
	}
	return nil
}

func detectableText(ch *irsv1.Change, m workflows.Metric) string {
	if math.IsInf(ch.GetMinimumDetectable(), 1) || ch.GetMinimumDetectable() == 0 {
		return "its noise could not be measured"
	}
	return "changes under " + workflows.FormatAmount(m, ch.GetMinimumDetectable()) + " cannot be told from it"
}
