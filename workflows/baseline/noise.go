package baseline

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/HdrHistogram/hdrhistogram-go"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"
)

// bootstrapResamples is how many resamples estimate a run's noise: the standard error comes out within about
// 5 % (1/sqrt(2(B-1))), and a comparison of a few hundred figures takes well under a second.
const bootstrapResamples = 200

// quantiles are the latency metrics that are quantiles of the phase's requests, with their quantile.
var quantiles = map[workflows.Metric]float64{
	workflows.MetricP50: 0.5, workflows.MetricP90: 0.9, workflows.MetricP99: 0.99, workflows.MetricP999: 0.999,
}

// withinRunSE estimates the standard error of a phase's figure from its per-interval points (in time order; nil
// where the scope measured nothing) by a circular moving-block bootstrap: the phase is cut into blocks of
// consecutive intervals, blocks are drawn with replacement until a phase's length is filled, and the figure is
// computed again from each such phase. Blocks keep the autocorrelation of the series (a slow second tends to
// follow a slow second), which resampling single seconds would destroy, understating the noise. A latency
// quantile is recomputed from the mixture of the intervals' quantiles weighted by their requests, so a few
// terrible seconds weigh in the phase's p99 as they do in its histogram. The resampling is seeded by what is
// measured, so the same two files always give the same verdict. ok is false with fewer than two intervals.
func withinRunSE(series []*irsv1.Point, m workflows.Metric, seed string) (se float64, ok bool) {
	if len(series) > maxBootstrapPoints {
		series = coarsen(series, (len(series)+maxBootstrapPoints-1)/maxBootstrapPoints)
	}
	n := len(series)
	if n < 2 {
		return 0, false
	}
	block := max(1, int(math.Round(math.Cbrt(float64(n))))) // the usual n^(1/3) (Hall, Horowitz and Jing 1995)
	h := fnv.New64a()
	h.Write([]byte(seed))
	rng := rand.New(rand.NewPCG(h.Sum64(), uint64(n)))
	idx := make([]int, n)
	figures := make([]float64, 0, bootstrapResamples)
	for range bootstrapResamples {
		for i := 0; i < n; {
			start := rng.IntN(n)
			for j := 0; j < block && i < n; j++ {
				idx[i] = (start + j) % n
				i++
			}
		}
		if v, ok := figureOf(series, idx, m); ok {
			figures = append(figures, v)
		}
	}
	if len(figures) < bootstrapResamples/2 {
		return 0, false
	}
	// Half the central 68 % of the resampled figures: one standard deviation when they spread normally, and not
	// inflated by the few resamples that happen to miss a phase's handful of terrible seconds — those seconds
	// are what the phase's tail is, and a minority of resamples without them says little of noise.
	slices.Sort(figures)
	return (stat.Quantile(0.84, stat.LinInterp, figures, nil) - stat.Quantile(0.16, stat.LinInterp, figures, nil)) / 2, true
}

// maxBootstrapPoints is the longest series the bootstrap resamples: a longer one (an hour of seconds) is first
// cut into as many stretches of consecutive seconds, each one point, which keeps a comparison of hour-long runs
// to a second or two; blocks of such points are blocks of seconds, as the bootstrap wants.
const maxBootstrapPoints = 240

// coarsen merges every k consecutive points of a series into one: requests and failures summed, latency
// quantiles those of their mixture, the maximum the largest, rates and resources averaged over the points.
func coarsen(series []*irsv1.Point, k int) []*irsv1.Point {
	var out []*irsv1.Point
	for i := 0; i < len(series); i += k {
		group := series[i:min(i+k, len(series))]
		idx := make([]int, len(group))
		for j := range idx {
			idx[j] = j
		}
		var p *irsv1.Point
		n := 0.0
		for _, q := range group {
			if q == nil {
				continue
			}
			if p == nil {
				p = &irsv1.Point{Service: q.GetService(), Callee: q.GetCallee(), Kind: q.GetKind()}
			}
			n++
			p.Requests += q.GetRequests()
			p.Failures += q.GetFailures()
			p.MaxMs = max(p.MaxMs, q.GetMaxMs())
			p.Rps += q.GetRps()
			p.CpuMcores += q.GetCpuMcores()
			p.RssMb += q.GetRssMb()
			p.SidecarCpuMcores += q.GetSidecarCpuMcores()
			p.SidecarRssMb += q.GetSidecarRssMb()
			p.Replicas = max(p.Replicas, q.GetReplicas())
			p.Sidecars = max(p.Sidecars, q.GetSidecars())
		}
		if p == nil {
			out = append(out, nil)
			continue
		}
		p.Rps, p.CpuMcores, p.RssMb, p.SidecarCpuMcores, p.SidecarRssMb = p.Rps/n, p.CpuMcores/n, p.RssMb/n, p.SidecarCpuMcores/n, p.SidecarRssMb/n
		if p.Requests > 0 {
			p.FailureRate = float64(p.Failures) / float64(p.Requests)
		}
		for q, dst := range map[float64]*float64{0.5: &p.P50Ms, 0.9: &p.P90Ms, 0.99: &p.P99Ms, 0.999: &p.P999Ms} {
			if v, ok := mixtureQuantile(group, idx, q); ok {
				*dst = 1000 * v
			}
		}
		out = append(out, p)
	}
	return out
}

// figureOf computes a phase's figure from the intervals idx of its series (an index may repeat).
func figureOf(series []*irsv1.Point, idx []int, m workflows.Metric) (float64, bool) {
	if q, ok := quantiles[m]; ok {
		return mixtureQuantile(series, idx, q)
	}
	var sum, weight, maxV float64
	seen := false
	for _, i := range idx {
		p := series[i]
		if p == nil {
			continue
		}
		v, ok := metricOf(p, m)
		if !ok {
			continue
		}
		w := 1.0
		if m == workflows.Metric5xxRate {
			w = float64(p.GetRequests()) // the phase's rate is over its requests, not its seconds
		}
		if m == workflows.MetricMax {
			maxV = max(maxV, v)
		}
		sum += v * w
		weight += w
		seen = true
	}
	switch {
	case !seen || weight == 0:
		return 0, false
	case m == workflows.MetricMax:
		return maxV, true
	}
	return sum / weight, true
}

// knots are an interval's latency quantiles (in seconds) at quantileAt, forced non-decreasing.
var quantileAt = []float64{0, 0.5, 0.9, 0.99, 0.999, 1}

func knots(p *irsv1.Point) [6]float64 {
	k := [6]float64{0, p.GetP50Ms(), p.GetP90Ms(), p.GetP99Ms(), p.GetP999Ms(), p.GetMaxMs()}
	for i := 1; i < len(k); i++ {
		k[i] = max(k[i], k[i-1])
	}
	for i := range k {
		k[i] /= 1000
	}
	return k
}

// cdfAt is the fraction of an interval's requests at or below x, interpolated between its quantiles.
func cdfAt(k [6]float64, x float64) float64 {
	if x >= k[5] {
		return 1
	}
	for i := 1; i < len(k); i++ {
		if x < k[i] {
			lo, hi := k[i-1], k[i]
			if hi <= lo {
				return quantileAt[i]
			}
			return quantileAt[i-1] + (quantileAt[i]-quantileAt[i-1])*(x-lo)/(hi-lo)
		}
	}
	return 1
}

// mixtureQuantile is the q-quantile of the requests of the intervals idx, each interval's distribution
// interpolated between its recorded quantiles: what the merged histogram would say, to within the
// interpolation. It finds x with F(x) = q by bisection.
func mixtureQuantile(series []*irsv1.Point, idx []int, q float64) (float64, bool) {
	type weighted struct {
		k [6]float64
		w float64
	}
	var parts []weighted
	var total, hi float64
	for _, i := range idx {
		p := series[i]
		if p == nil || p.GetRequests() == 0 {
			continue
		}
		k := knots(p)
		parts = append(parts, weighted{k, float64(p.GetRequests())})
		total += float64(p.GetRequests())
		hi = max(hi, k[5])
	}
	if total == 0 {
		return 0, false
	}
	lo := 0.0
	for range 30 { // 2^-30 of the range: far below what a histogram resolves
		mid := (lo + hi) / 2
		var f float64
		for _, pt := range parts {
			f += pt.w * cdfAt(pt.k, mid)
		}
		if f/total < q {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi, true
}

// seriesOf returns a run's per-interval points of a scope within a phase's span, in time order, nil for an
// interval in which the scope reported nothing.
func seriesOf(r *irsv1.WorkflowResult, sp scopedPoint, start, end float64) []*irsv1.Point {
	var out []*irsv1.Point
	for _, tick := range r.GetSeries() {
		if tick.GetT() <= start+1e-9 || tick.GetT() > end+1e-9 {
			continue
		}
		out = append(out, sp.find(tick))
	}
	return slices.Clip(out)
}

// detection is what a tested change's minimum detectable change is found from.
type detection struct {
	metric         workflows.Metric
	floor, shift   float64 // the smallest change measured, and the load generators' own lateness moved
	se             float64
	dist           distuv.StudentsT
	baseRuns, runs int
}

// settle sets a change's minimum detectable change (and the reason an inconclusive verdict would give) at the
// significance the verdict applies to it when tests figures are tested at once: with the Benjamini-Hochberg
// correction, a lone change is found only below alpha / tests. Printed at alpha alone, it promised 3 to 5 times
// smaller changes than the verdict could call.
func (d *detection) settle(ch *irsv1.Change, tests int) {
	tests = max(tests, 1)
	ch.MinimumDetectable = max(d.floor, (tQuantile(1-Alpha/(2*float64(tests)), d.dist.Nu)+tQuantile(power, d.dist.Nu))*d.se+d.shift)
	if d.baseRuns < 2 || d.runs < 2 {
		ch.Reason = fmt.Sprintf("one run a side: changes under %s cannot be told from noise (a screen, not a gate: the drift between runs is assumed); to decide, run NEW.yaml --against BASE.yaml, or use --repeat 3 or more", workflows.FormatAmount(d.metric, ch.GetMinimumDetectable()))
	} else {
		ch.Reason = fmt.Sprintf("within noise: changes under %s cannot be told from it at %d and %d runs", workflows.FormatAmount(d.metric, ch.GetMinimumDetectable()), d.baseRuns, d.runs)
	}
}

// power is the chance at which the minimum detectable change is found beyond noise.
const power = 0.8

// singleRunDrift is how much a phase's figure moves between two identical runs (relative to its value) beyond
// what either run's own series shows: the machine's state drifts between runs (other jobs, caches, CPU
// frequency, where the scheduler put things). One run a side cannot measure it, so a comparison of single runs
// assumes it, at the largest seen between identical runs on a busy 2-core machine (bench/verdicts, docs/reports.md);
// with two runs or more a side it is measured instead. Memory is judged apart (memoryAllowance).
// Part of CPU's drift is absolute (timers, the garbage collector, the scheduler: a worker at 13 millicores moved
// by 3 between identical runs, 23 %, one at 46 by 8, 18 %): singleRunDriftFloor is added in quadrature.
var (
	singleRunDrift = map[workflows.Metric]float64{
		workflows.MetricP50: 0.05, workflows.MetricP90: 0.05, workflows.MetricP99: 0.10, workflows.MetricP999: 0.20,
		workflows.MetricMax: 0.50, workflows.MetricRPS: 0.01, workflows.MetricCPU: 0.10, workflows.MetricSidecarCPU: 0.10,
	}
	singleRunDriftFloor = map[workflows.Metric]float64{workflows.MetricCPU: 2, workflows.MetricSidecarCPU: 2}
)

// judgeNoise sets a change's standard error, p-value, minimum detectable change and how its noise was measured.
// The noise of a side's value is its runs' spread when it has two runs or more (the honest noise: it holds
// whatever differs between runs); with one run, that run's block bootstrap plus the assumed between-run drift. The change is tested with Welch's t test when both sides have
// runs to measure their spread, a z test otherwise. The reason a verdict would be inconclusive is set too (the
// verdict keeps it only then).
//
// It returns, for a change it tested, what finds its minimum detectable change once the number of figures tested
// is known (detection.settle): until then the change's is that of one test alone.
func judgeNoise(ch *irsv1.Change, m workflows.Metric, b, c measurement) *detection {
	unit, _ := workflows.UnitOf(m)
	nb, nc := len(b.perRun), len(c.perRun)
	if memory[m] && (nb < 2 || nc < 2) {
		// A process's memory grows as it warms up and moves with its garbage collector: its series says nothing
		// of another run, so a single run's is judged against a fixed allowance.
		ch.MinimumDetectable = max(memoryAllowance.relative*math.Abs(ch.GetBase()), memoryAllowance.absolute)
		ch.Noise = fmt.Sprintf("one run a side: memory is not tested on a run's own series; a change counts beyond %.0f %% and %g MB", 100*memoryAllowance.relative, memoryAllowance.absolute)
		if math.Abs(ch.GetRelative()) > memoryAllowance.relative && math.Abs(ch.GetDelta()) > memoryAllowance.absolute {
			ch.PValue = 0
		}
		ch.Reason = "one run a side: memory changes under the allowance cannot be told from warm-up; use --repeat 2 or more"
		return nil
	}
	bse, bmeasured := sideNoise(m, b)
	cse, cmeasured := sideNoise(m, c)
	se := math.Hypot(bse, cse)
	df := math.Inf(1)
	if nb >= 2 && nc >= 2 {
		vb, vc := bse*bse, cse*cse
		df = max(1, (vb+vc)*(vb+vc)/(vb*vb/float64(nb-1)+vc*vc/float64(nc-1)))
		ch.Noise = fmt.Sprintf("between %d and %d runs (Welch's t test, %.0f degrees of freedom)", nb, nc, df)
	} else {
		ch.Noise = fmt.Sprintf("block bootstrap of each run's %d and %d intervals, one run on a side", b.seconds, c.seconds)
		if d := singleRunDrift[m]; d > 0 {
			ch.Noise += fmt.Sprintf(": a between-run drift of %g %%", 100*d)
			if f := singleRunDriftFloor[m]; f > 0 {
				ch.Noise += fmt.Sprintf(" and %s", workflows.FormatAmount(m, f))
			}
			ch.Noise += " is assumed, not measured"
		}
	}
	// A rate of failures has a floor of its own: with none seen in n requests, anything under 3/n could have
	// been there unseen (the rule of three, 95 %).
	rateFloor := floors[unit]
	if unit == workflows.UnitRatio {
		rateFloor = max(rateFloor, 3/float64(max(1, min(b.requests, c.requests))))
	}
	// What the load generators' own lateness moved between the sides, in the direction the figure moved, is
	// theirs, not the system's: only the change beyond it is tested, and the smallest change seen grows by it.
	// A lateness that moved the other way is not added to the change (quantiles do not add up: it would
	// make changes of what is noise).
	shift, floorNote := instrumentShift(m, b, c)
	ch.Noise += floorNote
	tested := math.Abs(ch.GetDelta())
	if shift*ch.GetDelta() > 0 {
		tested = max(0, tested-math.Abs(shift))
	}
	switch {
	case !bmeasured || !cmeasured || math.IsNaN(se):
		ch.Noise = "not estimated: a side has fewer than two intervals with samples"
		ch.MinimumDetectable = math.Inf(1)
		ch.Reason = "too few intervals with samples to tell a change from noise"
		return nil
	case se == 0:
		// Both series are constant (an exact rate, a count): any change beyond what is measured is real.
		ch.MinimumDetectable = rateFloor + math.Abs(shift)
		if tested > 0 {
			ch.PValue = 0
		}
		return nil
	}
	dist := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: df}
	if math.IsInf(df, 1) {
		dist.Nu = 1e9 // the normal distribution, as distuv wants a finite degree of freedom
	}
	ch.StandardError = se
	ch.PValue = 2 * dist.Survival(tested/se)
	d := &detection{metric: m, floor: rateFloor, shift: math.Abs(shift), se: se, dist: dist, baseRuns: nb, runs: nc}
	d.settle(ch, 1)
	return d
}

// latenessQuantiles are the latency metrics a load generator's lateness is part of, at the same quantile.
var latenessQuantiles = map[workflows.Metric]float64{workflows.MetricP50: 50, workflows.MetricP90: 90,
	workflows.MetricP99: 99, workflows.MetricP999: 99.9, workflows.MetricMax: 100}

// latenessAt returns a load generator's point's send lateness at the quantile of a latency metric, in seconds
// (the unit of the compared latencies), from
// its histogram (a phase's or the total's); false where it has none (not a load point, not a latency metric,
// a closed loop, or a result from before generators recorded it).
func latenessAt(p *irsv1.Point, m workflows.Metric) (float64, bool) {
	q, ok := latenessQuantiles[m]
	if !ok || p.GetKind() != workflows.KindLoad || p.GetLateness().GetCount() == 0 {
		return 0, false
	}
	h, err := hdrhistogram.Decode([]byte(p.GetLateness().GetHdr()))
	if err != nil {
		return 0, false
	}
	if q == 100 {
		return float64(h.Max()) / 1e6, true
	}
	return float64(h.ValueAtQuantile(q)) / 1e6, true
}

// instrumentShift is how far a load generator's own lateness, at a latency metric's quantile, moved from the
// base to the current side (seconds, signed; 0 where either side did not record it), and a note for the
// change's noise saying what it was.
func instrumentShift(m workflows.Metric, b, c measurement) (float64, string) {
	if len(b.lateness) == 0 || len(c.lateness) == 0 {
		return 0, ""
	}
	lb, lc := stat.Mean(b.lateness, nil), stat.Mean(c.lateness, nil)
	shift := lc - lb
	if math.Abs(shift) < 1e-6 { // under the histograms' microsecond: the same lateness
		shift = 0
	}
	note := fmt.Sprintf("; the load generators' sends started %s and %s late at %s (their own share of the figure)",
		workflows.FormatAmount(m, lb), workflows.FormatAmount(m, lc), m)
	if shift != 0 {
		note += fmt.Sprintf(": a change the same way within the %s it moved may be theirs, and is not tested", workflows.FormatAmount(m, math.Abs(shift)))
	}
	return shift, note
}

// sideNoise is the standard error of a side's value; measured is false when its run's series was too short.
func sideNoise(m workflows.Metric, s measurement) (se float64, measured bool) {
	if n := float64(len(s.perRun)); n >= 2 {
		// The runs' own spread, whatever its cause. Not floored by each run's bootstrap noise: that treats a
		// stall as a chance event of its run, and a stall every run shows is no chance; too few runs to trust
		// their spread are what the t test's degrees of freedom pay for.
		return math.Sqrt(stat.Variance(s.perRun, nil) / n), true
	}
	// One run: its own seconds, bootstrapped (only here: with repeats the runs' spread is the noise).
	within, ok := withinRunSE(s.series[0], m, s.seed)
	if !ok {
		return math.NaN(), false
	}
	drift := singleRunDrift[m] * math.Abs(s.value())
	floor := singleRunDriftFloor[m]
	return math.Sqrt(within*within + drift*drift + floor*floor), true
}
