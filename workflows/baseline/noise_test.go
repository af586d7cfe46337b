package baseline

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/HdrHistogram/hdrhistogram-go"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/resultfile"
	"google.golang.org/protobuf/proto"
)

func readFixture(t testing.TB, name string) *irsv1.WorkflowResult {
	t.Helper()
	f, err := resultfile.Read(context.Background(), filepath.Join("..", "testdata", "results", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return f.Result
}

// stalled returns r with every latency of the loadgen's seconds in (from, to] of the steady phase multiplied by
// factor, and the phase's and the total's loadgen quantiles recomputed from its seconds as the histograms would
// give them: a stall of a few seconds, as a kill makes one.
func stalled(t *testing.T, r *irsv1.WorkflowResult, from, to, factor float64) *irsv1.WorkflowResult {
	t.Helper()
	r = proto.Clone(r).(*irsv1.WorkflowResult)
	var steady, all []*irsv1.Point
	for _, tick := range r.GetSeries() {
		for _, p := range tick.GetServices() {
			if p.GetService() != "loadgen" || p.GetKind() != workflows.KindLoad {
				continue
			}
			if tick.GetT() > from && tick.GetT() <= to {
				p.P50Ms, p.P90Ms, p.P99Ms, p.P999Ms, p.MaxMs = factor*p.P50Ms, factor*p.P90Ms, factor*p.P99Ms, factor*p.P999Ms, factor*p.MaxMs
			}
			if tick.GetPhase() == "steady" {
				steady = append(steady, p)
			}
			all = append(all, p)
		}
	}
	set := func(pr *irsv1.PhaseResult, series []*irsv1.Point) {
		idx := make([]int, len(series))
		for i := range idx {
			idx[i] = i
		}
		for _, p := range pr.GetServices() {
			if p.GetService() != "loadgen" || p.GetKind() != workflows.KindLoad {
				continue
			}
			for m, dst := range map[workflows.Metric]*float64{workflows.MetricP50: &p.P50Ms, workflows.MetricP90: &p.P90Ms, workflows.MetricP99: &p.P99Ms, workflows.MetricP999: &p.P999Ms} {
				v, ok := figureOf(series, idx, m)
				if !ok {
					t.Fatalf("no %s", m)
				}
				*dst = 1000 * v
			}
		}
	}
	for _, pr := range r.GetPhases() {
		if pr.GetName() == "steady" {
			set(pr, steady)
		}
	}
	set(r.GetTotal(), all)
	return r
}

func runsFile(path string, runs ...*irsv1.WorkflowResult) *resultfile.File {
	if len(runs) == 1 {
		return &resultfile.File{Path: path, Result: runs[0]}
	}
	return &resultfile.File{Path: path, Comparison: &irsv1.Comparison{Status: "passed", Workflow: runs[0].GetWorkflow(),
		Environment: runs[0].GetEnvironment(), Variants: []*irsv1.Variant{{Name: "none", Runs: runs}}}}
}

func findChange(r *irsv1.Regressions, scope, phase, metric string) *irsv1.Change {
	for _, ch := range r.GetChanges() {
		if ch.GetScope() == scope && ch.GetPhase() == phase && ch.GetMetric() == metric {
			return ch
		}
	}
	return nil
}

// TestTailOfAFewSecondsCounts: a 4x stall in 1 of a phase's 12 seconds makes its p99 a regression. Judged on
// per-second medians (what the comparison did before) it passed as unchanged.
func TestTailOfAFewSecondsCounts(t *testing.T) {
	base, noise := readFixture(t, "base"), readFixture(t, "noise")
	limits, err := ParseLimits(DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	// The steady phase is the first 12 s; the stall is its sixth second, as 5 s of a 60 s phase.
	// Both sides' phase figures recomputed the same way, so only the stall differs.
	r, err := Compare(runsFile("base", stalled(t, base, 5, 6, 1), stalled(t, noise, 5, 6, 1), stalled(t, base, 5, 6, 1)), runsFile("stall", stalled(t, base, 5, 6, 4), stalled(t, noise, 5, 6, 4), stalled(t, base, 5, 6, 4)), limits)
	if err != nil {
		t.Fatal(err)
	}
	ch := findChange(r, "loadgen", "steady", "p99")
	if ch.GetVerdict() != VerdictRegressed || ch.GetRelative() < 1 || r.GetStatus() != StatusRegressed {
		t.Errorf("three runs a side, 4x for 1 s: loadgen p99 in steady %v (status %s), want regressed by over +100%%", ch, r.GetStatus())
	}
	if ch := findChange(r, "loadgen", "steady", "p50"); ch.GetVerdict() == VerdictRegressed {
		t.Errorf("p50 %v: a stall in a twelfth of the seconds is a tail regression, not a median one", ch)
	}
	// One run a side: the stall could be a fluke of the one run; never passed.
	r, err = Compare(runsFile("base", stalled(t, base, 5, 6, 1)), runsFile("stall", stalled(t, base, 5, 6, 4)), limits)
	if err != nil {
		t.Fatal(err)
	}
	if r.GetStatus() == StatusPassed {
		t.Errorf("one run a side, 4x for 1 s: passed; want regressed or inconclusive")
	}
	if ch := findChange(r, "loadgen", "steady", "p99"); ch.GetVerdict() != VerdictRegressed && ch.GetVerdict() != VerdictInconclusive {
		t.Errorf("one run a side: loadgen p99 %v, want regressed or inconclusive", ch)
	}
}

// TestMixtureQuantileMatchesHistograms: recomputed from a run's seconds, a phase's quantiles come within a few
// percent of those of its merged histograms; the bootstrap's noise is of that figure.
func TestMixtureQuantileMatchesHistograms(t *testing.T) {
	r := readFixture(t, "base")
	pr, start, end := phaseOf(r, "steady")
	for _, sp := range scopedPoints(pr, workflows.LoadServices(r.GetWorkflow()), workflows.LoadTargets(r.GetWorkflow())) {
		series := seriesOf(r, sp, start, end)
		idx := make([]int, len(series))
		for i := range idx {
			idx[i] = i
		}
		for _, m := range []workflows.Metric{workflows.MetricP50, workflows.MetricP90, workflows.MetricP99} {
			want, _ := metricOf(sp.point, m)
			got, ok := figureOf(series, idx, m)
			if !ok || math.Abs(got-want) > 0.1*want {
				t.Errorf("%s %s: %v from the seconds, %v from the histograms", sp.scope, m, got, want)
			}
			se, ok := withinRunSE(series, m, "x")
			if !ok || se <= 0 || se > 0.2*want {
				t.Errorf("%s %s: standard error %v of %v", sp.scope, m, se, want)
			}
			if again, _ := withinRunSE(series, m, "x"); again != se {
				t.Errorf("%s %s: the bootstrap gave %v, then %v: verdicts must be reproducible", sp.scope, m, se, again)
			}
		}
	}
}

// TestNoVerdictWithoutData: an invalid run on either side, or nothing measured on both, makes the comparison
// inconclusive with the reason; it never passes.
func TestNoVerdictWithoutData(t *testing.T) {
	base := readFixture(t, "base")
	invalid := proto.Clone(base).(*irsv1.WorkflowResult)
	invalid.Status = "invalid"
	invalid.Saturation = []*irsv1.Saturation{{Service: "loadgen", Phase: "kill", LagMs: 340}}
	r, err := Compare(runsFile("base.json", base), runsFile("new.json", invalid), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.GetStatus() != StatusInconclusive || !strings.Contains(strings.Join(r.GetReasons(), "; "), "the run new.json is invalid: loadgen fell 340 ms behind its schedule in kill") {
		t.Errorf("an invalid run: status %s, reasons %q", r.GetStatus(), r.GetReasons())
	}
	if got := RunStatus("passed", r); got != StatusInconclusive {
		t.Errorf("RunStatus = %s, want inconclusive", got)
	}
	empty := proto.Clone(base).(*irsv1.WorkflowResult)
	empty.Series = nil
	for _, pr := range append(empty.GetPhases(), empty.GetTotal()) {
		pr.Services, pr.Edges = nil, nil
	}
	r, err = Compare(runsFile("base.json", base), runsFile("empty.json", empty), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.GetStatus() != StatusInconclusive || !strings.Contains(strings.Join(r.GetReasons(), "; "), "no figure was measured on both sides") {
		t.Errorf("nothing measured: status %s, reasons %q", r.GetStatus(), r.GetReasons())
	}
}

// BenchmarkCompareHour compares two one-hour runs, one a side (the bootstrap of every figure of every scope
// and phase): 3.3 s on the 2-core development VM with both cores busy.
func BenchmarkCompareHour(b *testing.B) {
	base := readFixture(b, "base")
	long := proto.Clone(base).(*irsv1.WorkflowResult)
	long.Series = nil
	for i := range 100 {
		for _, tk := range base.GetSeries() {
			c := proto.Clone(tk).(*irsv1.Tick)
			c.T += float64(i) * 36
			long.Series = append(long.Series, c)
		}
	}
	long.Phases[2].End, long.Total.End = 3600, 3600
	for b.Loop() {
		if _, err := Compare(runsFile("a", long), runsFile("b", long), nil); err != nil {
			b.Fatal(err)
		}
	}
}

// withLateness returns r with its load generator's sends, in the steady phase and the total, recorded as
// having all started late seconds late.
func withLateness(t *testing.T, r *irsv1.WorkflowResult, late float64) *irsv1.WorkflowResult {
	t.Helper()
	r = proto.Clone(r).(*irsv1.WorkflowResult)
	h := hdrhistogram.New(1, 60_000_000, 3)
	if err := h.RecordValues(int64(late*1e6), 1000); err != nil {
		t.Fatal(err)
	}
	enc, err := h.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range append(r.GetPhases(), r.GetTotal()) {
		for _, p := range pr.GetServices() {
			if p.GetService() == "loadgen" && p.GetKind() == workflows.KindLoad {
				p.Lateness = &irsv1.Histogram{Hdr: string(enc), Count: h.TotalCount()}
			}
		}
	}
	return r
}

// TestGeneratorLatenessIsTheInstruments: a tail that grew 4x for a second is a regression when the load
// generators were as late on both sides, and says how late they were; when their own lateness at p99 grew by
// as much as the figure did, the change is theirs: not a regression, and the smallest change the comparison
// could see includes what they moved; when it fell, the figure's growth is not excused.
func TestGeneratorLatenessIsTheInstruments(t *testing.T) {
	base, noise := readFixture(t, "base"), readFixture(t, "noise")
	limits, err := ParseLimits(DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	side := func(factor, late float64) *resultfile.File {
		return runsFile("side", withLateness(t, stalled(t, base, 5, 6, factor), late),
			withLateness(t, stalled(t, noise, 5, 6, factor), late), withLateness(t, stalled(t, base, 5, 6, factor), late))
	}
	r, err := Compare(side(1, 0.0001), side(4, 0.0001), limits)
	if err != nil {
		t.Fatal(err)
	}
	ch := findChange(r, "loadgen", "steady", "p99")
	if ch.GetVerdict() != VerdictRegressed || !strings.Contains(ch.GetNoise(), "started 100µs and 100µs late at p99") {
		t.Fatalf("generators as late on both sides: loadgen p99 %v; want regressed, its noise saying how late they were", ch)
	}
	delta := ch.GetDelta()
	r, err = Compare(side(1, 0.0001), side(4, 0.0001+delta), limits)
	if err != nil {
		t.Fatal(err)
	}
	ch = findChange(r, "loadgen", "steady", "p99")
	if v := ch.GetVerdict(); v == VerdictRegressed || v == VerdictWorse || ch.GetMinimumDetectable() < delta {
		t.Errorf("generators %.1f ms later at p99 on the current side, the figure %.1f ms worse: %v; want neither regressed "+
			"nor worse, with a minimum detectable change of %.1f ms or more", 1000*delta, 1000*delta, ch, 1000*delta)
	}
	// Generators less late on the current side do not excuse a figure that grew: still a regression.
	r, err = Compare(side(1, 0.0001+delta), side(4, 0.0001), limits)
	if err != nil {
		t.Fatal(err)
	}
	if ch = findChange(r, "loadgen", "steady", "p99"); ch.GetVerdict() != VerdictRegressed {
		t.Errorf("generators %.1f ms less late on the current side, the figure worse: %v; want regressed", 1000*delta, ch)
	}
}
