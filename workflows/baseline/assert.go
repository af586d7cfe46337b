package baseline

import (
	"fmt"

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
