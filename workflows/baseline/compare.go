package baseline

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/resultfile"
	"golang.org/x/perf/benchmath"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Schema is the version of the regressions format.
const Schema = "irs.workflow.regressions/v1"

// Statuses and verdicts.
const (
	StatusPassed    = "passed"
	StatusRegressed = "regressed"

	VerdictRegressed = "regressed"
	VerdictWorse     = "worse"
	VerdictBetter    = "better"
	VerdictUnchanged = "unchanged"
	VerdictMissing   = "missing"
)

// Alpha is the significance level of the noise test.
const Alpha = 0.05

// minRunsForRunTest is the fewest runs per side for the test to use the runs' figures: with fewer, no
// difference can reach p < 0.05 (three against three gives at best p = 0.1), so the per-second samples of the
// runs are pooled instead.
const minRunsForRunTest = 4

// TotalPhase names the whole run.
const TotalPhase = "total"

// Scopes that are not a service or an edge.
const (
	ScopeControlPlane = "control plane"
	ScopeNodeProxies  = "node proxies"
)

// Compare compares current with base (each a result or a comparison; variants matched by name, a result being
// the variant of its mesh) under the limits. The workflows must be comparable (see Check).
func Compare(base, current *resultfile.File, limits []*irsv1.RegressionLimit) (*irsv1.Regressions, error) {
	if current.Suite != nil {
		return nil, fmt.Errorf("%s is a suite: compare it with baseline.CompareSuites", current.Path)
	}
	notes, err := Check(base, current.Workflow(), baseScale(current))
	if err != nil {
		return nil, err
	}
	out := &irsv1.Regressions{Schema: Schema, Status: StatusPassed, Base: reference(base), Current: reference(current),
		Limits: limits, Alpha: Alpha, Notes: append(notes, environmentNotes(base, current)...)}
	bs, cs := sidesOf(base), sidesOf(current)
	pairs := 0
	for _, c := range cs {
		b := findSide(bs, c.name)
		if b == nil && len(bs) == 1 && len(cs) == 1 {
			b = &bs[0] // two single runs: compared whatever their meshes
			if bs[0].name != c.name {
				out.Notes = append(out.Notes, fmt.Sprintf("the baseline ran under mesh %s, the run under %s", bs[0].name, c.name))
			}
		}
		if b == nil {
			out.Notes = append(out.Notes, fmt.Sprintf("variant %s has no baseline", c.name))
			continue
		}
		pairs++
		variant := c.name
		if len(cs) == 1 && len(bs) == 1 {
			variant = ""
		}
		out.Changes = append(out.Changes, compareSides(variant, *b, c, limits)...)
	}
	if pairs == 0 {
		return nil, &IncomparableError{Path: base.Path, Reasons: []string{fmt.Sprintf("no variant in common (baseline: %s; run: %s)", names(bs), names(cs))}}
	}
	out.Method = method(bs, cs)
	adjust(out.Changes)
	for _, ch := range out.Changes {
		if ch.GetVerdict() == VerdictMissing {
			continue
		}
		ch.Verdict = verdict(ch, workflows.Metric(ch.GetMetric()), limitOf(limits, workflows.Metric(ch.GetMetric())))
		if ch.GetVerdict() == VerdictRegressed {
			out.Status = StatusRegressed
		}
	}
	return out, nil
}

// side is one variant's complete runs on one side of the comparison.
type side struct {
	name string
	runs []*irsv1.WorkflowResult
}

func findSide(ss []side, name string) *side {
	for i := range ss {
		if ss[i].name == name {
			return &ss[i]
		}
	}
	return nil
}

func names(ss []side) string {
	var out []string
	for _, s := range ss {
		out = append(out, s.name)
	}
	return strings.Join(out, ", ")
}

// sidesOf returns the variants of a file with their runs that measured something (a comparison's discarded
// runs left out, as its figures leave them out).
func sidesOf(f *resultfile.File) []side {
	if f.Result != nil {
		return []side{{name: VariantName(f.Result), runs: []*irsv1.WorkflowResult{f.Result}}}
	}
	var out []side
	for _, v := range f.Comparison.GetVariants() {
		s := side{name: v.GetName()}
		for i, r := range v.GetRuns() {
			if !slices.Contains(v.GetDiscarded(), uint32(i)) && r.GetTotal() != nil {
				s.runs = append(s.runs, r)
			}
		}
		if len(s.runs) > 0 {
			out = append(out, s)
		}
	}
	return out
}

// VariantName names a run as a comparison names its variant: its mesh, then its sweep point.
func VariantName(r *irsv1.WorkflowResult) string {
	name := r.GetEnvironment().GetMesh()
	if name == "" {
		name = "none"
	}
	for _, p := range workflows.SweepParameters(r.GetWorkflow().GetSweep()) {
		if v, ok := r.GetParameters()[p.GetName()]; ok {
			name += " " + p.GetName() + "=" + v
		}
	}
	return name
}

func method(bs, cs []side) string {
	runs := true
	for _, s := range append(append([]side{}, bs...), cs...) {
		runs = runs && len(s.runs) >= minRunsForRunTest
	}
	if runs {
		return fmt.Sprintf("Mann-Whitney U test (two-sided, alpha %g) on the runs' figures; values are medians over the runs", Alpha)
	}
	return fmt.Sprintf("Mann-Whitney U test (two-sided, alpha %g) on the per-second samples of each phase; values are the phase's (medians over runs)", Alpha)
}

// compareSides compares every phase, scope and metric the two sides measured.
func compareSides(variant string, b, c side, limits []*irsv1.RegressionLimit) []*irsv1.Change {
	var out []*irsv1.Change
	byRuns := len(b.runs) >= minRunsForRunTest && len(c.runs) >= minRunsForRunTest
	for _, phase := range phaseNames(c.runs[0]) {
		bm, cm := measurements(b.runs, phase), measurements(c.runs, phase)
		for _, k := range mergedKeys(bm, cm) {
			bv, bok := bm[k]
			cv, cok := cm[k]
			ch := &irsv1.Change{Variant: variant, Scope: k.scope, Phase: phase, Metric: string(k.metric), PValue: 1}
			if l := limitOf(limits, k.metric); l != nil {
				ch.Limit = l.GetText()
			}
			if !bok || !cok {
				ch.Verdict = VerdictMissing
				ch.Base, ch.Current = bv.value(), cv.value()
				out = append(out, ch)
				continue
			}
			ch.Base, ch.Current = bv.value(), cv.value()
			ch.Delta = ch.Current - ch.Base
			if ch.Base != 0 {
				ch.Relative = ch.Delta / ch.Base
			}
			bs, cs := bv.samples, cv.samples
			if byRuns || memory[k.metric] {
				// A process's memory grows as it warms up and then moves with its heap and its garbage
				// collector: its per-second samples trend, and say nothing of how another run would differ.
				// Only runs can test it; with fewer, verdict applies a fixed allowance.
				bs, cs = bv.perRun, cv.perRun
			}
			ch.BaseSamples, ch.CurrentSamples = uint32(len(bs)), uint32(len(cs))
			if len(bs) > 1 && len(cs) > 1 && (byRuns || !memory[k.metric]) {
				ch.PValue = benchmath.AssumeNothing.Compare(benchmath.NewSample(slices.Clone(bs), &benchmath.DefaultThresholds),
					benchmath.NewSample(slices.Clone(cs), &benchmath.DefaultThresholds)).P
			}
			out = append(out, ch)
		}
	}
	return out
}

// adjust replaces the p-values of the changes tested with Benjamini-Hochberg adjusted ones (q-values): a
// comparison tests a hundred metrics or more, and at alpha 0.05 five of a hundred unchanged ones would pass for
// changed by chance. Adjusted, pure noise is called a change in about one comparison in twenty, not in most.
func adjust(changes []*irsv1.Change) {
	var tested []*irsv1.Change
	for _, ch := range changes {
		if ch.GetBaseSamples() > 1 && ch.GetCurrentSamples() > 1 && ch.GetVerdict() != VerdictMissing {
			tested = append(tested, ch)
		}
	}
	sort.SliceStable(tested, func(i, j int) bool { return tested[i].GetPValue() < tested[j].GetPValue() })
	m := float64(len(tested))
	q := 1.0
	for i := len(tested) - 1; i >= 0; i-- {
		q = min(q, tested[i].GetPValue()*m/float64(i+1))
		tested[i].PValue = q
	}
}

// memory are the metrics judged by runs only (see compareSides); memoryAllowance is the change a single run's
// memory may show by chance: IRS workers and Envoy sidecars were seen to differ by up to 32 % (9 MB) between
// two 5-second runs of the same workflow, still warming up, and by 2 % between 36-second runs.
var (
	memory          = map[workflows.Metric]bool{workflows.MetricRSS: true, workflows.MetricSidecarRSS: true}
	memoryAllowance = struct{ relative, absolute float64 }{0.40, 8}
)

func verdict(ch *irsv1.Change, m workflows.Metric, l *irsv1.RegressionLimit) string {
	unit, _ := workflows.UnitOf(m)
	beyondNoise := ch.GetPValue() < Alpha
	if memory[m] && (ch.GetBaseSamples() < minRunsForRunTest || ch.GetCurrentSamples() < minRunsForRunTest) {
		beyondNoise = math.Abs(ch.GetRelative()) > memoryAllowance.relative && math.Abs(ch.GetDelta()) > memoryAllowance.absolute
	}
	if !beyondNoise || math.Abs(ch.GetDelta()) <= floors[unit] {
		return VerdictUnchanged
	}
	worse := ch.GetDelta() > 0 != lowerIsWorse[m]
	switch {
	case !worse:
		return VerdictBetter
	case l != nil && exceeds(l, m, ch.GetBase(), ch.GetCurrent()):
		return VerdictRegressed
	}
	return VerdictWorse
}

func limitOf(limits []*irsv1.RegressionLimit, m workflows.Metric) *irsv1.RegressionLimit {
	for _, l := range limits {
		if l.GetMetric() == string(m) {
			return l
		}
	}
	return nil
}

// phaseNames lists a run's phases, then the total.
func phaseNames(r *irsv1.WorkflowResult) []string {
	var out []string
	for _, p := range r.GetPhases() {
		out = append(out, p.GetName())
	}
	return append(out, TotalPhase)
}

// mkey is a scope's metric.
type mkey struct {
	scope  string
	order  int // the scope's place: services, edges, control plane, node proxies
	metric workflows.Metric
}

// measurement is a metric of a scope over the runs of one side.
type measurement struct {
	perRun  []float64 // the phase's value in each run
	samples []float64 // the per-second values of every run, pooled
}

func (m measurement) value() float64 { return median(m.perRun) }

// median returns the median of values (0 for none).
func median(values []float64) float64 {
	if len(values) == 0 {
		return 0
	}
	s := slices.Clone(values)
	sort.Float64s(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

func mergedKeys(a, b map[mkey]measurement) []mkey {
	var keys []mkey
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		x, y := keys[i], keys[j]
		if x.order != y.order {
			return x.order < y.order
		}
		if x.scope != y.scope {
			return x.scope < y.scope
		}
		return slices.Index(comparedMetrics, x.metric) < slices.Index(comparedMetrics, y.metric)
	})
	return keys
}

// measurements returns every metric of every scope that the runs measured in a phase.
func measurements(runs []*irsv1.WorkflowResult, phase string) map[mkey]measurement {
	out := map[mkey]measurement{}
	for _, r := range runs {
		pr, start, end := phaseOf(r, phase)
		if pr == nil {
			continue
		}
		loaders := workflows.LoadServices(r.GetWorkflow())
		for _, sp := range scopedPoints(pr, loaders, workflows.LoadTargets(r.GetWorkflow())) {
			for _, m := range comparedMetrics {
				v, ok := metricOf(sp.point, m)
				if !ok {
					continue
				}
				k := mkey{scope: sp.scope, order: sp.order, metric: m}
				ms := out[k]
				ms.perRun = append(ms.perRun, v)
				for _, tick := range r.GetSeries() {
					if tick.GetT() <= start+1e-9 || tick.GetT() > end+1e-9 {
						continue
					}
					if tp := sp.find(tick); tp != nil {
						if x, ok := metricOf(tp, m); ok {
							ms.samples = append(ms.samples, x)
						}
					}
				}
				out[k] = ms
			}
		}
	}
	return out
}

// phaseOf returns a run's phase (or total) with its span in seconds.
func phaseOf(r *irsv1.WorkflowResult, phase string) (*irsv1.PhaseResult, float64, float64) {
	if phase == TotalPhase {
		t := r.GetTotal()
		return t, math.Inf(-1), math.Inf(1)
	}
	for _, p := range r.GetPhases() {
		if p.GetName() == phase {
			return p, p.GetStart(), p.GetEnd()
		}
	}
	return nil, 0, 0
}

// scopedPoint is a point of a phase with its scope's name and how to find the same scope in a tick.
type scopedPoint struct {
	scope string
	order int
	point *irsv1.Point
	find  func(*irsv1.Tick) *irsv1.Point
}

// scopedPoints lists the points of a phase to compare. The edge from a load generator to its target is left
// out: it is the generator's own point again.
func scopedPoints(pr *irsv1.PhaseResult, loaders map[string]bool, targets map[string]bool) []scopedPoint {
	var out []scopedPoint
	match := func(list func(*irsv1.Tick) []*irsv1.Point, p *irsv1.Point) func(*irsv1.Tick) *irsv1.Point {
		s := workflows.Scope{Service: p.GetService(), Callee: p.GetCallee(), Kind: p.GetKind()}
		return func(t *irsv1.Tick) *irsv1.Point {
			for _, q := range list(t) {
				if s.Matches(q) {
					return q
				}
			}
			return nil
		}
	}
	for _, p := range pr.GetServices() {
		name := p.GetService()
		if primary := loaders[name] == (p.GetKind() == workflows.KindLoad); !primary {
			name += " (" + p.GetKind() + ")"
		}
		out = append(out, scopedPoint{name, 0, p, match((*irsv1.Tick).GetServices, p)})
	}
	for _, p := range pr.GetEdges() {
		if targets[p.GetService()+"->"+p.GetCallee()] {
			continue
		}
		out = append(out, scopedPoint{p.GetService() + "->" + p.GetCallee(), 1, p, match((*irsv1.Tick).GetEdges, p)})
	}
	if p := pr.GetControlPlane(); p != nil {
		out = append(out, scopedPoint{ScopeControlPlane, 2, p, (*irsv1.Tick).GetControlPlane})
	}
	if p := pr.GetNodeProxies(); p != nil {
		out = append(out, scopedPoint{ScopeNodeProxies, 3, p, (*irsv1.Tick).GetNodeProxies})
	}
	return out
}

// metricOf returns a metric of a point when the point measured it: latencies and 5xx need requests, usage a
// process seen, sidecar figures a sidecar.
func metricOf(p *irsv1.Point, m workflows.Metric) (float64, bool) {
	switch m {
	case workflows.MetricCPU, workflows.MetricRSS:
		if p.GetReplicas() == 0 && p.GetCpuMcores() == 0 && p.GetRssMb() == 0 {
			return 0, false
		}
	case workflows.MetricSidecarCPU, workflows.MetricSidecarRSS:
		if p.GetSidecars() == 0 {
			return 0, false
		}
	case workflows.MetricRPS:
		if p.GetRequests() == 0 && p.GetKind() != workflows.KindLoad {
			return 0, false
		}
	}
	v, err := workflows.PointValue(p, m)
	return v, err == nil
}

func reference(f *resultfile.File) *irsv1.RunReference {
	ref := &irsv1.RunReference{Path: f.Path, Workflow: f.Workflow().GetName(), Status: f.Status()}
	var env *irsv1.Environment
	var started *timestamppb.Timestamp
	if f.Result != nil {
		env, started, ref.Runs = f.Result.GetEnvironment(), f.Result.GetStartedAt(), 1
	} else {
		env = f.Comparison.GetEnvironment()
		for _, v := range f.Comparison.GetVariants() {
			for _, r := range v.GetRuns() {
				ref.Runs++
				if started == nil {
					started = r.GetStartedAt()
				}
			}
		}
	}
	ref.IrsVersion, ref.Mesh, ref.Hostname = env.GetIrsVersion(), env.GetMesh(), env.GetHostname()
	ref.StartedAt = started
	return ref
}

// environmentNotes says what differs between the machines and versions of the two sides.
func environmentNotes(base, current *resultfile.File) []string {
	be, ce := reference(base), reference(current)
	var notes []string
	if be.GetIrsVersion() != ce.GetIrsVersion() {
		notes = append(notes, fmt.Sprintf("IRS versions differ: baseline %s, run %s", be.GetIrsVersion(), ce.GetIrsVersion()))
	}
	benv, cenv := environmentOf(base), environmentOf(current)
	if benv.GetHostname() != cenv.GetHostname() || benv.GetCpus() != cenv.GetCpus() {
		notes = append(notes, fmt.Sprintf("machines differ: baseline %s (%d CPUs), run %s (%d CPUs)",
			benv.GetHostname(), benv.GetCpus(), cenv.GetHostname(), cenv.GetCpus()))
	}
	if benv.GetBackend() != cenv.GetBackend() {
		notes = append(notes, fmt.Sprintf("backends differ: baseline %s, run %s", benv.GetBackend(), cenv.GetBackend()))
	}
	if benv.GetEnvoyVersion() != cenv.GetEnvoyVersion() && benv.GetEnvoyVersion() != "" && cenv.GetEnvoyVersion() != "" {
		notes = append(notes, fmt.Sprintf("Envoy versions differ: baseline %s, run %s", benv.GetEnvoyVersion(), cenv.GetEnvoyVersion()))
	}
	return notes
}

func environmentOf(f *resultfile.File) *irsv1.Environment {
	if f.Result != nil {
		return f.Result.GetEnvironment()
	}
	return f.Comparison.GetEnvironment()
}

// sameConfig reports whether two services run the same worker configuration.
func sameConfig(a, b *irsv1.Service) bool {
	return proto.Equal(a.GetWorker(), b.GetWorker())
}
