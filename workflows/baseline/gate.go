package baseline

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/mathext"
	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"
)

// Design is the sequential design of an interleaved A/B gate (irs workflow run --against): the base and the
// candidate run in ABBA order, and after every pair from the second on the gate looks at the runs and either
// decides or asks for another pair, up to MaxRuns a side.
//
// Each gated figure (a metric with a limit, in a gated phase) has two claims, each tested one-sided:
//   - within its limit, "passed": the upper bound of its change lies under the limit. The comparison passes when
//     every gated figure does; by the intersection-union principle (Berger 1982) that needs no correction over
//     the figures: a comparison with any figure truly beyond its limit passes with chance at most alpha.
//   - beyond its limit, "regressed": the lower bound lies over it, Bonferroni-corrected over the gated figures.
//
// Peeking after every pair would inflate both errors; alpha is spent evenly over the looks planned (a
// Bonferroni alpha spending, Pocock-like): valid whatever the correlation between looks and whenever the gate
// stops, and with at most a few looks hardly dearer than an exact group-sequential boundary. An O'Brien-Fleming
// boundary would spend almost nothing at the first looks, where a gate that stops early saves the most time;
// always-valid (mixture) p-values pay for an unbounded number of looks that a budget of five never takes.
//
// With two to five runs a side a figure's own variance has 2 to 8 degrees of freedom, and a t quantile that
// wide decides nothing; the variances are moderated instead (Smyth 2004, the empirical Bayes of limma): each
// metric's figures share a prior variance and its weight, estimated from the figures themselves, which adds
// its degrees of freedom to every figure's own. A figure much noisier than its peers keeps most of its own
// variance: the prior's weight falls as the figures disagree.
type Design struct {
	MaxRuns int     // runs a side at most; the looks are at 2..MaxRuns a side
	Alpha   float64 // the error of each claim over the whole gate
}

// DefaultMaxRuns is the default budget: five runs a side of the workflow as written.
const DefaultMaxRuns = 5

// Looks is how many looks the design plans.
func (d Design) Looks() int { return max(1, d.MaxRuns-1) }

// lookAlpha is the alpha each look spends on each claim.
func (d Design) lookAlpha() float64 { return d.Alpha / float64(d.Looks()) }

// Text says what the design is, in words.
func (d Design) Text() string {
	return fmt.Sprintf("interleaved ABBA runs, a look after every pair from 2 runs a side to %d; at each look a figure passes when "+
		"the upper bound of its change lies within its limit and regresses when the lower bound lies beyond it (one-sided, "+
		"alpha %g spent evenly over the %d looks, Bonferroni over the gated figures for a regression); variances moderated "+
		"across the figures of each metric (Smyth 2004); latencies, CPU and memory on a log scale",
		d.MaxRuns, d.Alpha, d.Looks())
}

// Gate judges interleaved runs of a base and a candidate (two runs a side or more) at look look of the design:
// every figure compared as Compare compares runs, and the gated ones decided within or beyond their limits.
// The status is passed or regressed once decided, else inconclusive: the caller runs another pair while the
// budget lasts. The candidate's workflow says which phases are gated.
func Gate(base, cand []*irsv1.WorkflowResult, limits []*irsv1.RegressionLimit, d Design, look int) *irsv1.Regressions {
	out := &irsv1.Regressions{Schema: Schema, Status: StatusPassed, Limits: limits, Alpha: d.Alpha, Method: d.Text(),
		Sequential: &irsv1.SequentialGate{Runs: uint32(min(len(base), len(cand))), MaxRuns: uint32(d.MaxRuns),
			Look: uint32(look), Looks: uint32(d.Looks()), Design: d.Text()}}
	if len(base) == 0 || len(cand) == 0 {
		out.Status = StatusInconclusive
		out.Reasons = []string{"no run a side measured anything"}
		return out
	}
	detections := map[*irsv1.Change]*detection{}
	out.Changes = compareSides("", side{runs: base}, side{runs: cand}, limits, detections)
	tests := adjust(out.Changes)
	for ch, det := range detections {
		det.settle(ch, tests)
	}
	ungated := UngatedPhases(cand[0].GetWorkflow())
	// The whole run is shown, not gated, when a phase is: its figures mix the phases', each gated on its own,
	// and the ungated warm-up's; gating it too would count every figure twice in the correction.
	for _, ph := range cand[0].GetWorkflow().GetPhases() {
		if !ungated[ph.GetName()] {
			ungated[TotalPhase] = true
		}
	}
	var figures []*gateFigure
	for _, ch := range out.Changes {
		if ch.GetVerdict() == VerdictMissing {
			continue
		}
		m := workflows.Metric(ch.GetMetric())
		ch.Verdict = verdict(ch, m, limitOf(limits, m))
		if ungated[ch.GetPhase()] || limitOf(limits, m) == nil {
			if ungated[ch.GetPhase()] {
				ch.Ungated = true
			}
			switch ch.GetVerdict() { // shown, not gated
			case VerdictRegressed:
				ch.Verdict, ch.Reason = VerdictWorse, ""
			case VerdictInconclusive:
				ch.Verdict, ch.Reason = VerdictUnchanged, ""
			}
			continue
		}
		figures = append(figures, &gateFigure{ch: ch, limit: limitOf(limits, m)})
	}
	values := perRunValues(base, cand)
	for _, f := range figures {
		f.measure(values[valueKey{f.ch.GetScope(), f.ch.GetPhase(), workflows.Metric(f.ch.GetMetric())}])
	}
	moderate(figures)
	var undecided []*gateFigure
	for _, f := range figures {
		f.decide(d, len(figures))
		switch f.ch.GetVerdict() {
		case VerdictRegressed:
			out.Status = StatusRegressed
			out.Sequential.Decided++
		case VerdictInconclusive:
			undecided = append(undecided, f)
		default:
			out.Sequential.Decided++
		}
	}
	out.Sequential.Gated = uint32(len(figures))
	if n := machineNote(map[string][]*irsv1.WorkflowResult{"base": base, "candidate": cand}, []string{"base", "candidate"}); n != "" {
		out.Notes = append(out.Notes, n)
	}
	if len(figures) == 0 {
		out.Status = StatusInconclusive
		out.Reasons = append(out.Reasons, "no gated figure was measured on both sides")
	}
	if out.Status == StatusPassed && len(undecided) > 0 {
		out.Status = StatusInconclusive
	}
	sort.SliceStable(undecided, func(i, j int) bool { return undecided[i].ch.GetRunsToDecide() > undecided[j].ch.GetRunsToDecide() })
	for i, f := range undecided {
		if out.Status == StatusRegressed {
			break
		}
		if i == maxReasons {
			out.Reasons = append(out.Reasons, fmt.Sprintf("and %d more figures undecided", len(undecided)-i))
			break
		}
		out.Reasons = append(out.Reasons, fmt.Sprintf("%s %s: %s", changeName(f.ch), intervalText(f.ch), f.ch.GetReason()))
	}
	return out
}

// valueKey finds a figure's per-run values.
type valueKey struct {
	scope, phase string
	metric       workflows.Metric
}

// sideValues are a figure's per-run values on each side with when each run started (seconds from the first),
// and the requests behind them.
type sideValues struct {
	base, cand         []float64
	baseAt, candAt     []float64
	baseReqs, candReqs int64
}

// perRunValues returns every figure's per-run values, by scope, phase and metric. A run that did not measure a
// figure leaves it out, its start time with it.
func perRunValues(base, cand []*irsv1.WorkflowResult) map[valueKey]sideValues {
	out := map[valueKey]sideValues{}
	first := math.Inf(1)
	for _, r := range append(slices.Clone(base), cand...) {
		if r.GetStartedAt() != nil {
			first = min(first, startOf(r))
		}
	}
	for _, phase := range phaseNames(cand[0]) {
		add := func(runs []*irsv1.WorkflowResult, values func(*sideValues) (*[]float64, *[]float64, *int64)) {
			for _, r := range runs {
				for k, m := range measurements([]*irsv1.WorkflowResult{r}, phase) {
					key := valueKey{k.scope, phase, k.metric}
					sv := out[key]
					v, at, reqs := values(&sv)
					*v = append(*v, m.perRun...)
					t := 0.0
					if r.GetStartedAt() != nil {
						t = startOf(r) - first
					}
					*at = append(*at, t)
					*reqs += m.requests
					out[key] = sv
				}
			}
		}
		add(base, func(sv *sideValues) (*[]float64, *[]float64, *int64) { return &sv.base, &sv.baseAt, &sv.baseReqs })
		add(cand, func(sv *sideValues) (*[]float64, *[]float64, *int64) { return &sv.cand, &sv.candAt, &sv.candReqs })
	}
	return out
}

func startOf(r *irsv1.WorkflowResult) float64 {
	return float64(r.GetStartedAt().GetSeconds()) + float64(r.GetStartedAt().GetNanos())/1e9
}

// gateFigure is a gated figure on the scale it is tested on: the log of its values for a relative limit (a
// change of 10 % is the same distance whatever the figure's size, and latency and CPU spread multiplicatively),
// the values themselves for an absolute one.
type gateFigure struct {
	ch     *irsv1.Change
	limit  *irsv1.RegressionLimit
	log    bool
	b, c   []float64 // transformed, worse upwards
	reqs   int64     // the fewer requests of the two sides (a rate's own floor)
	delta  float64   // the change, on the tested scale
	s2     float64   // the runs' residual variance
	df     float64   // its degrees of freedom
	v      float64   // the change's variance is v × the runs' variance
	mod2   float64   // the moderated variance
	moddf  float64   // and its degrees of freedom
	metric workflows.Metric
}

func (f *gateFigure) measure(v sideValues) {
	f.metric = workflows.Metric(f.ch.GetMetric())
	f.reqs = min(v.baseReqs, v.candReqs)
	f.log = f.limit.GetAbsolute() == 0 && f.limit.GetRelative() > 0 && allPositive(v.base) && allPositive(v.cand)
	sign := 1.0
	if lowerIsWorse[f.metric] {
		sign = -1
	}
	tr := func(x float64) float64 {
		if f.log {
			return sign * math.Log(x)
		}
		return sign * x
	}
	for _, x := range v.base {
		f.b = append(f.b, tr(x))
	}
	for _, x := range v.cand {
		f.c = append(f.c, tr(x))
	}
	f.delta, f.s2, f.df, f.v = driftFit(f.b, v.baseAt, f.c, v.candAt)
	f.mod2, f.moddf = f.s2, f.df
}

// driftFit estimates the candidate's change from the runs on both sides (each with when it started): by least
// squares of value = a + change·candidate + drift·time when the start times vary, so that a machine drifting
// linearly through the runs moves neither the change nor its noise (interleaving cancels such a drift from the
// means only at an even number of pairs); the two sides' difference of means otherwise. It returns the change,
// the residual variance with its degrees of freedom, and the factor v with which the change's variance is
// v × residual variance.
func driftFit(b, bAt, c, cAt []float64) (delta, s2, df, v float64) {
	nb, nc := len(b), len(c)
	delta = stat.Mean(c, nil) - stat.Mean(b, nil)
	df = float64(nb + nc - 2)
	v = 1/float64(max(1, nb)) + 1/float64(max(1, nc))
	if df > 0 {
		s2 = (sumSquares(b) + sumSquares(c)) / df
	}
	times := append(slices.Clone(bAt), cAt...)
	if nb+nc < 5 || len(bAt) != nb || len(cAt) != nc || stat.Variance(times, nil) == 0 {
		return delta, s2, df, v
	}
	x := mat.NewDense(nb+nc, 3, nil)
	y := mat.NewVecDense(nb+nc, nil)
	for i := range nb + nc {
		isCand, t, val := 0.0, 0.0, 0.0
		if i < nb {
			t, val = bAt[i], b[i]
		} else {
			isCand, t, val = 1, cAt[i-nb], c[i-nb]
		}
		x.Set(i, 0, 1)
		x.Set(i, 1, isCand)
		x.Set(i, 2, t)
		y.SetVec(i, val)
	}
	var xtx, inv mat.Dense
	xtx.Mul(x.T(), x)
	if err := inv.Inverse(&xtx); err != nil {
		return delta, s2, df, v // the times are collinear with the sides: no drift to tell apart
	}
	var coef, fitted, resid mat.VecDense
	var xty mat.VecDense
	xty.MulVec(x.T(), y)
	coef.MulVec(&inv, &xty)
	fitted.MulVec(x, &coef)
	resid.SubVec(y, &fitted)
	fdf := float64(nb + nc - 3)
	return coef.AtVec(1), mat.Dot(&resid, &resid) / fdf, fdf, inv.At(1, 1)
}

func allPositive(xs []float64) bool {
	return len(xs) > 0 && !slices.ContainsFunc(xs, func(x float64) bool { return x <= 0 })
}

func sumSquares(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	m := stat.Mean(xs, nil)
	s := 0.0
	for _, x := range xs {
		s += (x - m) * (x - m)
	}
	return s
}

// threshold is the limit on the tested scale, never under what the figure can measure (floors).
func (f *gateFigure) threshold() float64 {
	unit, _ := workflows.UnitOf(f.metric)
	base := math.Abs(f.ch.GetBase())
	floor := floors[unit]
	if unit == workflows.UnitRatio && f.reqs > 0 {
		floor = max(floor, 3/float64(f.reqs)) // none seen in n requests: under 3/n could be there unseen
	}
	switch {
	case f.log:
		return math.Log1p(max(f.limit.GetRelative(), floor/base))
	case f.limit.GetAbsolute() > 0 || f.limit.GetRelative() == 0:
		return max(f.limit.GetAbsolute(), floor)
	}
	return max(f.limit.GetRelative()*base, floor)
}

// decide sets the figure's verdict at the design's level with gated figures gated at once.
func (f *gateFigure) decide(d Design, gated int) {
	ch := f.ch
	n := min(len(f.b), len(f.c))
	if n < 2 || f.moddf <= 0 || math.IsNaN(f.mod2) {
		ch.Verdict, ch.Reason = VerdictInconclusive, "fewer than two runs a side measured it"
		ch.RunsToDecide = 2
		return
	}
	delta := f.delta
	se := math.Sqrt(f.mod2 * f.v)
	within, beyond := d.lookAlpha(), d.lookAlpha()/float64(max(1, gated))
	cw, cb := tQuantile(1-within, f.moddf), tQuantile(1-beyond, f.moddf)
	lo, hi := delta-cb*se, delta+cw*se
	thr := f.threshold()
	ch.StandardError = f.untransformSE(se)
	ch.IntervalLow, ch.IntervalHigh = f.untransform(lo), f.untransform(hi)
	if lowerIsWorse[f.metric] {
		ch.IntervalLow, ch.IntervalHigh = f.untransform(hi), f.untransform(lo)
	}
	ch.PValue = 2 * distuv.StudentsT{Mu: 0, Sigma: 1, Nu: min(f.moddf, 1e7)}.Survival(math.Abs(delta)/math.Max(se, 1e-300))
	ch.MinimumDetectable = math.Abs(f.untransform(thr+(cb+tQuantile(power, f.moddf))*se) - f.untransform(0))
	ch.Noise = fmt.Sprintf("between %d and %d interleaved runs; variance moderated over the %s figures (%.0f degrees of freedom in all, %.0f its own)",
		len(f.b), len(f.c), f.metric, f.moddf, f.df)
	ch.Reason = ""
	switch {
	case lo > thr:
		ch.Verdict = VerdictRegressed
	case hi < thr:
		switch { // within its limit: decided; how it moved, at the same level
		case delta+cw*se < 0:
			ch.Verdict = VerdictBetter
		case delta-cw*se > 0 && math.Abs(ch.GetDelta()) > floors[unitOf(f.metric)]:
			ch.Verdict = VerdictWorse
		default:
			ch.Verdict = VerdictUnchanged
		}
	default:
		ch.Verdict = VerdictInconclusive
		ch.RunsToDecide = runsToDecide(delta, thr, f.mod2, f.moddf-f.df, d, gated)
		if ch.RunsToDecide > maxRunsToDecide {
			ch.Reason = fmt.Sprintf("its interval straddles the limit, and more than %d runs a side would be needed at the noise seen", maxRunsToDecide)
		} else {
			ch.Reason = fmt.Sprintf("its interval straddles the limit: about %d runs a side would decide it at the noise seen", ch.RunsToDecide)
		}
	}
}

func unitOf(m workflows.Metric) workflows.Unit {
	u, _ := workflows.UnitOf(m)
	return u
}

// untransform turns a change on the tested scale into the metric's unit, relative to the base's value.
func (f *gateFigure) untransform(x float64) float64 {
	sign := 1.0
	if lowerIsWorse[f.metric] {
		sign = -1
	}
	if f.log {
		return math.Abs(f.ch.GetBase()) * math.Expm1(sign*x)
	}
	return sign * x
}

func (f *gateFigure) untransformSE(se float64) float64 {
	if f.log {
		return math.Abs(f.ch.GetBase()) * se
	}
	return se
}

// maxRunsToDecide is the most runs a side an undecided figure is said to need; beyond, "more than".
const maxRunsToDecide = 100

// runsToDecide is about how many runs a side would put a figure's interval clear of its threshold at the
// noise seen, its change staying what it is; maxRunsToDecide+1 when none would.
func runsToDecide(delta, thr, s2, priorDF float64, d Design, gated int) uint32 {
	gap := math.Abs(delta - thr)
	alpha := d.lookAlpha()
	if delta > thr {
		alpha /= float64(max(1, gated))
	}
	for n := 2; n <= maxRunsToDecide; n++ {
		df := priorDF + float64(2*n-2)
		if tQuantile(1-alpha, df)*math.Sqrt(s2*2/float64(n)) < gap {
			return uint32(n)
		}
	}
	return maxRunsToDecide + 1
}

// tQuantile is Student's t quantile at df degrees of freedom (the normal's for infinitely many), df rounded to
// a hundredth (quantiles move by far less than that changes): a gate asks for the same few thousand times, and
// each costs an inverse incomplete beta function.
func tQuantile(p, df float64) float64 {
	if math.IsInf(df, 1) || df > 1e7 {
		df = 1e7
	}
	df = max(0.01, math.Round(df*100)/100)
	key := quantileKey{p, df}
	tQuantiles.Lock()
	defer tQuantiles.Unlock()
	if q, ok := tQuantiles.m[key]; ok {
		return q
	}
	if len(tQuantiles.m) >= maxCachedQuantiles {
		clear(tQuantiles.m)
	}
	q := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: df}.Quantile(p)
	tQuantiles.m[key] = q
	return q
}

type quantileKey struct{ p, df float64 }

// maxCachedQuantiles bounds the cache of t quantiles.
const maxCachedQuantiles = 1 << 14

var tQuantiles = struct {
	sync.Mutex
	m map[quantileKey]float64
}{m: map[quantileKey]float64{}}

// moderate sets every figure's moderated variance: per metric, the prior variance s0² and its weight d0 are
// estimated from the figures' own variances by Smyth's (2004) method of moments on their logs, and each
// figure's variance becomes (d0 s0² + d s²) / (d0 + d) with d0 + d degrees of freedom. Figures of no variance (a
// rate that is zero in every run) take no part in the estimate; with fewer than three figures that vary, or
// figures so unlike that no shared prior fits, each keeps its own.
func moderate(figures []*gateFigure) {
	byMetric := map[workflows.Metric][]*gateFigure{}
	for _, f := range figures {
		byMetric[f.metric] = append(byMetric[f.metric], f)
	}
	for _, fs := range byMetric {
		var logs, dfs []float64
		for _, f := range fs {
			if f.df > 0 && f.s2 > 0 {
				logs = append(logs, math.Log(f.s2))
				dfs = append(dfs, f.df)
			}
		}
		d0, s02, ok := priorVariance(logs, dfs)
		if !ok {
			continue
		}
		for _, f := range fs {
			if f.df <= 0 {
				continue
			}
			if math.IsInf(d0, 1) {
				f.mod2, f.moddf = s02, math.Inf(1)
				continue
			}
			f.mod2 = (d0*s02 + f.df*f.s2) / (d0 + f.df)
			f.moddf = d0 + f.df
		}
	}
}

// priorVariance estimates, from the logs of sample variances with their degrees of freedom, the prior of a
// scaled inverse-chi-square: its degrees of freedom d0 (infinite when the variances agree as well as chance
// allows) and scale s0² (Smyth 2004, section 6.2).
func priorVariance(logs, dfs []float64) (d0, s02 float64, ok bool) {
	g := len(logs)
	if g < 3 {
		return 0, 0, false
	}
	e := make([]float64, g)
	var trig float64
	for i := range logs {
		e[i] = logs[i] - mathext.Digamma(dfs[i]/2) + math.Log(dfs[i]/2)
		trig += trigamma(dfs[i] / 2)
	}
	mean := stat.Mean(e, nil)
	spread := stat.Variance(e, nil) - trig/float64(g)
	if spread <= 0 {
		return math.Inf(1), math.Exp(mean), true
	}
	d0 = 2 * trigammaInverse(spread)
	return d0, math.Exp(mean + mathext.Digamma(d0/2) - math.Log(d0/2)), true
}

// trigamma is the second derivative of the log gamma function: the Hurwitz zeta at 2.
func trigamma(x float64) float64 { return mathext.Zeta(2, x) }

// trigammaInverse solves trigamma(y) = x by Smyth's Newton iteration (limma's trigammaInverse).
func trigammaInverse(x float64) float64 {
	switch {
	case x > 1e7:
		return 1 / math.Sqrt(x)
	case x < 1e-6:
		return 1 / x
	}
	y := 0.5 + 1/x
	for range 50 {
		tri := trigamma(y)
		step := tri * (1 - tri/x) / tetragamma(y)
		y += step
		if -step/y < 1e-8 {
			break
		}
	}
	return y
}

// tetragamma is the derivative of trigamma: -2 times the Hurwitz zeta at 3.
func tetragamma(x float64) float64 { return -2 * mathext.Zeta(3, x) }

// intervalText says a gated change's interval: "+3.1 % [-1.2 %, +7.5 %]".
func intervalText(ch *irsv1.Change) string {
	m := workflows.Metric(ch.GetMetric())
	amount := func(v float64) string {
		if u, _ := workflows.UnitOf(m); u == workflows.UnitRatio {
			return fmt.Sprintf("%+.2fpp", 100*v)
		}
		if ch.GetBase() != 0 {
			return fmt.Sprintf("%+.1f%%", 100*v/math.Abs(ch.GetBase()))
		}
		return workflows.FormatAmount(m, v)
	}
	return fmt.Sprintf("%s [%s, %s] (limit %s)", amount(ch.GetDelta()), amount(ch.GetIntervalLow()), amount(ch.GetIntervalHigh()), ch.GetLimit())
}

// machineNote says how the runs' machine served them, per side: the most a reference sleep overslept in any
// interval (the median over the runs), the mean CPU pressure, and the load generators' p99 send lateness (the
// median over the runs): a side that ran on a starved machine is visible beside its figures, not only in them.
func machineNote(sides map[string][]*irsv1.WorkflowResult, order []string) string {
	var parts []string
	for _, name := range order {
		var oversleep, pressure, late []float64
		for _, r := range sides[name] {
			worst, sum, n, seen := 0.0, 0.0, 0, false
			for _, t := range r.GetSeries() {
				if m := t.GetMachine(); m != nil {
					seen = true
					worst = max(worst, m.GetOversleepMs())
					if m.GetCpuPressure() >= 0 {
						sum += m.GetCpuPressure()
						n++
					}
				}
			}
			if !seen {
				continue // a result from before the machine was recorded
			}
			oversleep = append(oversleep, worst)
			if n > 0 {
				pressure = append(pressure, sum/float64(n))
			}
			for _, p := range r.GetTotal().GetServices() {
				if l, ok := latenessAt(p, workflows.MetricP99); ok {
					late = append(late, l)
				}
			}
		}
		if len(oversleep) == 0 {
			continue
		}
		s := fmt.Sprintf("%s overslept up to %.1f ms", name, median(oversleep))
		if len(pressure) > 0 {
			s += fmt.Sprintf(" (CPU pressure %.0f %%)", 100*stat.Mean(pressure, nil))
		}
		if len(late) > 0 {
			s += fmt.Sprintf(", its generators' sends %s late at p99", workflows.FormatAmount(workflows.MetricP99, median(late)))
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return ""
	}
	return "machine (median over each side's runs): " + strings.Join(parts, "; ")
}
