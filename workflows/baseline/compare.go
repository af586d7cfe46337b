package baseline

import (
	"fmt"
	"gonum.org/v1/gonum/stat"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/irs-sim/irs/internal/units"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/resultfile"
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
	// VerdictInconclusive: worse beyond its limit, but not beyond noise; StatusInconclusive: the comparison
	// cannot support a verdict (an inconclusive limited metric, an invalid run, nothing compared).
	VerdictInconclusive = "inconclusive"
	StatusInconclusive  = "inconclusive"
)

// Alpha is the significance level of the noise test.
const Alpha = 0.05

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
	sides := map[string][]*irsv1.WorkflowResult{}
	for _, s := range bs {
		sides["the baseline"] = append(sides["the baseline"], s.runs...)
	}
	for _, s := range cs {
		sides["the run"] = append(sides["the run"], s.runs...)
	}
	if n := machineNote(sides, []string{"the baseline", "the run"}); n != "" {
		out.Notes = append(out.Notes, n)
	}
	for _, s := range []struct {
		f     *resultfile.File
		sides []side
	}{{base, bs}, {current, cs}} {
		if len(s.sides) == 0 {
			// Zero runs compare as nothing at all, not as a pass.
			return nil, fmt.Errorf("%s has no run that measured anything: there is nothing to compare", s.f.Path)
		}
	}
	pairs := 0
	detections := map[*irsv1.Change]*detection{}
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
		out.Changes = append(out.Changes, compareSides(variant, *b, c, limits, detections)...)
	}
	if pairs == 0 {
		return nil, &IncomparableError{Path: base.Path, Reasons: []string{fmt.Sprintf("no variant in common (baseline: %s; run: %s)", names(bs), names(cs))}}
	}
	out.Method = method(bs, cs)
	tests := adjust(out.Changes)
	for ch, d := range detections {
		d.settle(ch, tests)
	}
	judged := 0
	var inconclusive []*irsv1.Change
	ungated := UngatedPhases(current.Workflow())
	for _, ch := range out.Changes {
		if ch.GetVerdict() == VerdictMissing {
			continue
		}
		ch.Verdict = verdict(ch, workflows.Metric(ch.GetMetric()), limitOf(limits, workflows.Metric(ch.GetMetric())))
		if ungated[ch.GetPhase()] {
			ch.Ungated = true
			switch ch.GetVerdict() {
			case VerdictRegressed: // beyond noise and the limit: worse, shown
				ch.Verdict, ch.Reason = VerdictWorse, ""
			case VerdictInconclusive: // within noise
				ch.Verdict, ch.Reason = VerdictUnchanged, ""
			}
			continue
		}
		judged++
		switch ch.GetVerdict() {
		case VerdictRegressed:
			out.Status = StatusRegressed
		case VerdictInconclusive:
			inconclusive = append(inconclusive, ch)
		}
	}
	out.Reasons = append(out.Reasons, invalidRuns(base, "baseline")...)
	out.Reasons = append(out.Reasons, invalidRuns(current, "run")...)
	untrusted := len(out.Reasons) > 0
	if judged == 0 {
		out.Reasons = append(out.Reasons, "no figure was measured on both sides")
	}
	for i, ch := range inconclusive {
		if i == maxReasons {
			out.Reasons = append(out.Reasons, fmt.Sprintf("and %d more figures worse beyond their limit but within noise", len(inconclusive)-i))
			break
		}
		out.Reasons = append(out.Reasons, fmt.Sprintf("%s worse by %s (limit %s): %s", changeName(ch),
			workflows.FormatAmount(workflows.Metric(ch.GetMetric()), math.Abs(ch.GetDelta())), ch.GetLimit(), ch.GetReason()))
	}
	// A regression stands whatever else is unsure, but not on a run that cannot be trusted: an invalid or
	// starved side caps the verdict at inconclusive.
	if len(out.Reasons) > 0 && (out.Status != StatusRegressed || untrusted) {
		out.Status = StatusInconclusive
	}
	if untrusted { // no figure of an untrusted run regressed: none can say so
		for _, ch := range out.Changes {
			if ch.GetVerdict() == VerdictRegressed {
				ch.Verdict, ch.Reason = VerdictInconclusive, "beyond noise and its limit, but a run compared cannot be trusted"
			}
		}
	}
	return out, nil
}

// UngatedPhases are the phases of wf whose figures a comparison shows without gating on them: those with gate
// false, and, without gate true, warm-ups (by name) and phases shorter than MinGatedPhase. The first seconds of
// a run move with how its processes, connections and caches warm: identical runs' warm-up p50 differed by
// 63.5 %, and were called regressions; a phase of a few seconds has too few of them to say more than noise.
func UngatedPhases(wf *irsv1.Workflow) map[string]bool {
	out := map[string]bool{}
	for _, p := range wf.GetPhases() {
		if p.Gate != nil {
			out[p.GetName()] = !p.GetGate()
			continue
		}
		d, err := units.ParseDuration(p.GetDuration())
		out[p.GetName()] = IsWarmUp(p.GetName()) || (err == nil && d < MinGatedPhase)
	}
	return out
}

// MinGatedPhase is the shortest phase gated by default (as the workflow states it, before any time scale).
const MinGatedPhase = 10 * time.Second

// IsWarmUp says whether a phase's name makes it a warm-up: warm-up, warmup or warm_up, in any case.
func IsWarmUp(name string) bool {
	switch strings.ToLower(name) {
	case "warm-up", "warmup", "warm_up":
		return true
	}
	return false
}

// RunStatus is the status of a run (or comparison) once compared with its baseline: the comparison's verdict
// heads it. A regression fails a run that passed; an inconclusive comparison makes it inconclusive; a run that
// failed, or could not be trusted, keeps its own status.
func RunStatus(status string, r *irsv1.Regressions) string {
	if r.GetStatus() == StatusRegressed && status == StatusInconclusive {
		return "failed" // a regression stands over assertions the noise could not decide
	}
	if status != "passed" || r == nil {
		return status
	}
	switch r.GetStatus() {
	case StatusRegressed:
		return "failed"
	case StatusInconclusive:
		return StatusInconclusive
	}
	return status
}

// Attach attaches a comparison with a baseline to the run or comparison it was made of, whose status it then
// heads (RunStatus) from the run's own status: a run made with --baseline and compared again is judged by the
// second comparison, not by the first's verdict (its markdown once read INCONCLUSIVE while its text and exit
// code said REGRESSED).
func Attach(f *resultfile.File, reg *irsv1.Regressions) {
	if c := f.Comparison; c != nil {
		c.OwnStatus = ownStatus(c.GetOwnStatus(), c.GetStatus(), c.GetRegressions() != nil, comparisonFailed(c))
		c.Regressions, c.Status = reg, RunStatus(c.GetOwnStatus(), reg)
		return
	}
	r := f.Result
	r.OwnStatus = ownStatus(r.GetOwnStatus(), r.GetStatus(), r.GetRegressions() != nil, assertionFailed(r))
	r.Regressions, r.Status = reg, RunStatus(r.GetOwnStatus(), reg)
}

// AttachVerdict attaches a comparison as Attach does, for `irs workflow compare`: there the comparison is the
// verdict, so it heads the status alone (a run that failed its own assertions passes a comparison it passes);
// the run's own status stays in own_status, and a run that cannot be trusted keeps it (its comparison is
// inconclusive).
func AttachVerdict(f *resultfile.File, reg *irsv1.Regressions) {
	Attach(f, reg)
	head := func(own string) string {
		if own == "failed" || own == StatusInconclusive {
			own = "passed" // the run's assertions are its own; after the fact, the comparison is the verdict
		}
		return RunStatus(own, reg)
	}
	if c := f.Comparison; c != nil {
		c.Status = head(c.GetOwnStatus())
		return
	}
	f.Result.Status = head(f.Result.GetOwnStatus())
}

// OwnStatus is a run's (or comparison's) own status, whatever comparison heads its status.
func OwnStatus(f *resultfile.File) string {
	if c := f.Comparison; c != nil {
		return ownStatus(c.GetOwnStatus(), c.GetStatus(), c.GetRegressions() != nil, comparisonFailed(c))
	}
	r := f.Result
	return ownStatus(r.GetOwnStatus(), r.GetStatus(), r.GetRegressions() != nil, assertionFailed(r))
}

// ownStatus is the status before any comparison: the one recorded, or, for a file compared before own_status
// was (a comparison attached, none recorded), the status less the comparison's part: failed when an assertion
// failed, else passed.
func ownStatus(recorded, status string, compared, failed bool) string {
	switch {
	case recorded != "":
		return recorded
	case !compared || (status != "failed" && status != StatusInconclusive):
		return status
	case failed:
		return "failed"
	}
	return "passed"
}

func assertionFailed(r *irsv1.WorkflowResult) bool {
	for _, a := range r.GetAssertions() {
		if !a.GetPassed() && !a.GetSkipped() && !a.GetNotApplicable() && a.GetInconclusive() == "" {
			return true
		}
	}
	return false
}

func comparisonFailed(c *irsv1.Comparison) bool {
	for _, v := range c.GetVariants() {
		for _, r := range v.GetRuns() {
			if r.GetStatus() == "failed" || assertionFailed(r) {
				return true
			}
		}
	}
	return false
}

// maxReasons is how many inconclusive figures a comparison names (the changes list them all).
const maxReasons = 5

// changeName names a change for a sentence: "envoy: loadgen p99 in steady".
func changeName(ch *irsv1.Change) string {
	s := ch.GetScope() + " " + ch.GetMetric()
	if ch.GetPhase() != TotalPhase {
		s += " in " + ch.GetPhase()
	}
	if ch.GetVariant() != "" {
		s = ch.GetVariant() + ": " + s
	}
	return s
}

// invalidRuns says which runs of a file cannot be trusted (a load generator fell behind, samples missing, the
// run interrupted or failed to measure): a comparison with them has no verdict.
func invalidRuns(f *resultfile.File, side string) []string {
	var out []string
	check := func(name string, r *irsv1.WorkflowResult) {
		switch r.GetStatus() {
		case "invalid", "interrupted", "error":
			why := r.GetError()
			if why == "" {
				why = invalidCause(r)
			}
			out = append(out, fmt.Sprintf("the %s %s is %s: %s", side, name, r.GetStatus(), why))
		}
	}
	if f.Result != nil {
		check(f.Path, f.Result)
		return out
	}
	for _, v := range f.Comparison.GetVariants() {
		for i, r := range v.GetRuns() {
			if !slices.Contains(v.GetDiscarded(), uint32(i)) {
				check(fmt.Sprintf("%s (%s#%d)", f.Path, v.GetName(), i+1), r)
			}
		}
	}
	return out
}

// invalidCause says in a few words why a run is invalid, from what it recorded.
func invalidCause(r *irsv1.WorkflowResult) string {
	for _, s := range r.GetSaturation() {
		return fmt.Sprintf("%s fell %.0f ms behind its schedule in %s", s.GetService(), s.GetLagMs(), s.GetPhase())
	}
	for _, n := range r.GetNotes() {
		return n
	}
	return "see its result"
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
		runs = runs && len(s.runs) >= 2
	}
	if runs {
		return fmt.Sprintf("Welch's t test (two-sided, alpha %g) on the runs' figures; values are means over the runs", Alpha)
	}
	return fmt.Sprintf("z test (two-sided, alpha %g) of each phase's figure, its noise from a block bootstrap of each run's intervals plus an assumed between-run drift (one run a side)", Alpha)
}

// compareSides compares every phase, scope and metric the two sides measured.
func compareSides(variant string, b, c side, limits []*irsv1.RegressionLimit, detections map[*irsv1.Change]*detection) []*irsv1.Change {
	var out []*irsv1.Change
	for _, phase := range phaseNames(c.runs[0]) {
		bm, cm := measurements(b.runs, phase), measurements(c.runs, phase)
		for _, k := range mergedKeys(bm, cm) {
			bv, bok := bm[k]
			cv, cok := cm[k]
			ch := &irsv1.Change{Variant: variant, Scope: k.scope, Phase: phase, Metric: string(k.metric), PValue: 1}
			if l := limitOf(limits, k.metric); l != nil {
				ch.Limit = l.GetText()
			}
			ch.Base, ch.Current = bv.value(), cv.value()
			if !bok || !cok {
				ch.Verdict = VerdictMissing
				out = append(out, ch)
				continue
			}
			ch.Delta = ch.Current - ch.Base
			if ch.Base != 0 {
				ch.Relative = ch.Delta / ch.Base
			}
			ch.BaseSamples, ch.CurrentSamples = uint32(bv.seconds), uint32(cv.seconds)
			if d := judgeNoise(ch, k.metric, bv, cv); d != nil {
				detections[ch] = d
			}
			out = append(out, ch)
		}
	}
	return out
}

// adjust replaces the p-values of the changes tested with Benjamini-Hochberg adjusted ones (q-values): a
// comparison tests a hundred metrics or more, and at alpha 0.05 five of a hundred unchanged ones would pass for
// changed by chance. Adjusted, pure noise is called a change in about one comparison in twenty, not in most. It
// returns how many were tested.
func adjust(changes []*irsv1.Change) (tests int) {
	var tested []*irsv1.Change
	for _, ch := range changes {
		if ch.GetStandardError() > 0 && ch.GetVerdict() != VerdictMissing {
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
	return len(tested)
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
	beyondNoise := ch.GetPValue() < Alpha && math.Abs(ch.GetDelta()) > floors[unit]
	worse := ch.GetDelta() > 0 != lowerIsWorse[m]
	overLimit := worse && l != nil && exceeds(l, m, ch.GetBase(), ch.GetCurrent()) && math.Abs(ch.GetDelta()) > floors[unit]
	reason := ch.GetReason()
	ch.Reason = ""
	switch {
	case beyondNoise && !worse:
		return VerdictBetter
	case beyondNoise && overLimit:
		return VerdictRegressed
	case beyondNoise:
		return VerdictWorse
	case overLimit:
		ch.Reason = reason
		return VerdictInconclusive
	}
	return VerdictUnchanged
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
	perRun   []float64        // the phase's value in each run
	series   [][]*irsv1.Point // each run's per-interval points of the scope in the phase
	seed     string           // what seeds the bootstrap of a run's series
	seconds  int              // intervals measured, over the runs
	requests int64            // requests completed, over the runs
	// lateness is, for a load generator's latency, its sends' own lateness at the same quantile in each run
	// that recorded it (seconds): the instrument's part of the figure.
	lateness []float64
}

// value is a side's figure: the mean of its runs' (what the t test compares; the median, with the standard error
// of a mean, was a test of something else, and weaker: a median of three runs wastes a third of the data).
func (m measurement) value() float64 {
	if len(m.perRun) == 0 {
		return 0
	}
	return stat.Mean(m.perRun, nil)
}

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
				ms.requests += sp.point.GetRequests()
				series := seriesOf(r, sp, start, end)
				for _, tp := range series {
					if tp != nil {
						if _, ok := metricOf(tp, m); ok {
							ms.seconds++
						}
					}
				}
				ms.series = append(ms.series, series)
				if l, ok := latenessAt(sp.point, m); ok {
					ms.lateness = append(ms.lateness, l)
				}
				ms.seed = fmt.Sprintf("%s|%s|%s", sp.scope, phase, m)
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
