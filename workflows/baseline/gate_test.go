package baseline_test

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/baseline"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// simulated is a synthetic workflow of known truth: a load generator calling a chain of servers, every
// figure's value and run-to-run noise fixed, so that the gate's error rates can be counted over many gates.
type simulated struct {
	servers int
	// sd is each metric's run-to-run noise (the sd of its log) for the i-th scope: from lo to hi over the scopes.
	sd map[string][2]float64
	// common is the noise every latency of a run shares (the machine's state during it), drift how much every
	// latency grows per run slot (the machine warming, a neighbour ramping up).
	common, drift float64
	// change is what the candidate changes: scope, metric, factor (a rate: added).
	change []simChange
	// maxRuns is the gate's budget (0: the default).
	maxRuns int
}

type simChange struct {
	scope, metric string
	factor        float64
}

var simMetrics = []string{"p50", "p90", "p99", "cpu_mcores", "rss_mb", "5xx_rate"}

func (s simulated) scopes() []string {
	out := []string{"loadgen"}
	for i := 1; i <= s.servers; i++ {
		out = append(out, fmt.Sprintf("s%d", i))
	}
	return out
}

func (s simulated) workflow() *irsv1.Workflow {
	wf := &irsv1.Workflow{Name: "sim", Phases: []*irsv1.Phase{{Name: "steady", Duration: "60s"}}}
	wf.Services = append(wf.Services, &irsv1.Service{Name: "loadgen", Worker: &irsv1.WorkerConfig{Load: &irsv1.Load{Target: "s1", Rate: 200}}})
	for i := 1; i <= s.servers; i++ {
		wf.Services = append(wf.Services, &irsv1.Service{Name: fmt.Sprintf("s%d", i)})
	}
	return wf
}

// run returns one run's result at run slot slot, of the candidate when cand.
func (s simulated) run(rng *rand.Rand, wf *irsv1.Workflow, slot int, cand bool) *irsv1.WorkflowResult {
	common := rng.NormFloat64()*s.common + s.drift*float64(slot)
	var points []*irsv1.Point
	scopes := s.scopes()
	for i, scope := range scopes {
		at := func(metric string) float64 { // this scope's noise of a metric
			r := s.sd[metric]
			return r[0] + (r[1]-r[0])*float64(i)/float64(max(1, len(scopes)-1))
		}
		factor := func(metric string) float64 {
			f := 1.0
			if cand {
				for _, c := range s.change {
					if c.scope == scope && c.metric == metric {
						f *= c.factor
					}
				}
			}
			return f
		}
		lat := func(metric string, v float64) float64 {
			return v * math.Exp(rng.NormFloat64()*at(metric)+common) * factor(metric)
		}
		p := &irsv1.Point{Service: scope, Requests: 12000, Replicas: 1, Rps: 200,
			P50Ms: lat("p50", 10), P90Ms: lat("p90", 20), P99Ms: lat("p99", 40),
			CpuMcores: 40 * math.Exp(rng.NormFloat64()*at("cpu_mcores")) * factor("cpu_mcores"),
			RssMb:     30 * math.Exp(rng.NormFloat64()*at("rss_mb")) * factor("rss_mb")}
		p.P999Ms, p.MaxMs = p.P99Ms*1.5, p.P99Ms*2
		if i == 0 {
			p.Kind = "load"
		}
		rate := 0.0
		if cand {
			for _, c := range s.change {
				if c.scope == scope && c.metric == "5xx_rate" {
					rate += c.factor
				}
			}
		}
		p.Failures = int64(math.Round(rate * float64(p.Requests)))
		p.FailureRate = float64(p.Failures) / float64(p.Requests)
		points = append(points, p)
	}
	phase := &irsv1.PhaseResult{Name: "steady", Start: 0, End: 60, Services: points}
	return &irsv1.WorkflowResult{Workflow: wf, Status: "passed", StartedAt: timestamppb.New(time.Unix(int64(1_800_000_000+70*slot), 0)), Phases: []*irsv1.PhaseResult{phase},
		Total: &irsv1.PhaseResult{Name: "total", Services: points}}
}

// gate runs one sequential gate as the campaign does (ABBA order, a look after every pair from the second)
// and returns its last comparison and the runs a side it took.
func (s simulated) gate(t *testing.T, seed uint64, limits []*irsv1.RegressionLimit) (*irsv1.Regressions, int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	wf := s.workflow()
	d := baseline.Design{MaxRuns: cmp.Or(s.maxRuns, baseline.DefaultMaxRuns), Alpha: baseline.Alpha}
	var base, cand []*irsv1.WorkflowResult
	slot := 0
	var last *irsv1.Regressions
	for pair := 0; pair < d.MaxRuns; pair++ {
		order := []bool{false, true}
		if pair%2 == 1 {
			order = []bool{true, false}
		}
		for _, isCand := range order {
			r := s.run(rng, wf, slot, isCand)
			slot++
			if isCand {
				cand = append(cand, r)
			} else {
				base = append(base, r)
			}
		}
		if pair == 0 {
			continue
		}
		last = baseline.Gate(base, cand, limits, d, pair)
		if last.GetStatus() != baseline.StatusInconclusive {
			return last, pair + 1
		}
	}
	return last, d.MaxRuns
}

// quiet is the noise between identical runs on this 2-core machine, as ten interleaved runs of
// bench/verdicts/steady.yaml (15 s phases, the same seed) measured it, the sd of each figure's log: latencies
// 0.1 to 1 % (p50, p99) and 0.6 to 0.9 % (p90), a worker's CPU 3.5 to 6 %, its memory 0.7 to 2 %; here
// latencies at twice that, every latency of a run moving by 0.5 % together, and the machine drifting by 0.2 %
// a run. noisy has CPU twice as noisy: what a loaded machine or short phases give.
var (
	quiet = simulated{servers: 5, common: 0.005, drift: 0.002, sd: map[string][2]float64{
		"p50": {0.002, 0.02}, "p90": {0.012, 0.018}, "p99": {0.002, 0.02}, "cpu_mcores": {0.035, 0.06}, "rss_mb": {0.007, 0.02}}}
	noisyCPU = withSD(quiet, "cpu_mcores", 0.07, 0.12)
)

func withSD(s simulated, metric string, lo, hi float64) simulated {
	sd := map[string][2]float64{}
	for k, v := range s.sd {
		sd[k] = v
	}
	sd[metric] = [2]float64{lo, hi}
	s.sd = sd
	return s
}

// TestGateErrorRates counts, over many simulated gates of known truth, how often the gate calls unchanged code
// a regression, how often it decides it passed within the default budget, and how often it catches real
// changes of the sizes the issue measured.
func TestGateErrorRates(t *testing.T) {
	limits := defaults(t)
	const gates = 150
	cases := []struct {
		name   string
		sim    simulated
		passed float64 // at least this share decided passed
		caught float64 // at least this share regressed
	}{
		{"unchanged code", quiet, 0.90, 0},
		{"unchanged code, drifting machine", withDrift(quiet, 0.01), 0.90, 0},
		{"+20 % delay at the deepest tier", withChange(quiet, simChange{"s5", "p50", 1.2}, simChange{"s5", "p90", 1.2}, simChange{"s5", "p99", 1.2}), 0, 0.90},
		{"p99 of one tier +45 % (a replica slow for 5 s)", withChange(quiet, simChange{"s3", "p99", 1.45}), 0, 0.90},
		// A worker's CPU moves by 3.5 to 6 % between identical runs: +30 % against a 15 % limit is at the edge
		// of what five runs a side can tell (about half are caught; the rest inconclusive, never passed), and
		// ten runs a side catch it as the others are.
		{"+30 % CPU at the middle tier", withChange(quiet, simChange{"s3", "cpu_mcores", 1.3}), 0, 0.45},
		{"+30 % CPU at the middle tier, 10 runs a side", withBudget(withChange(quiet, simChange{"s3", "cpu_mcores", 1.3}), 10), 0, 0.90},
		{"unchanged code, CPU twice as noisy", noisyCPU, 0, 0},
		{"+1 pp of 503 at the deepest tier", withChange(quiet, simChange{"s5", "5xx_rate", 0.01}), 0, 0.90},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var passed, regressed, runs int
			for g := range gates {
				r, n := tc.sim.gate(t, uint64(1000+g), limits)
				runs += n
				switch r.GetStatus() {
				case baseline.StatusPassed:
					passed++
				case baseline.StatusRegressed:
					regressed++
				}
			}
			t.Logf("%d gates: %d passed, %d regressed, %d inconclusive; %.1f runs a side on average",
				gates, passed, regressed, gates-passed-regressed, float64(runs)/gates)
			if tc.caught == 0 && regressed > gates/100 {
				t.Errorf("unchanged code regressed in %d of %d gates, want at most 1 %%", regressed, gates)
			}
			if tc.caught > 0 && passed > 0 {
				t.Errorf("a real change passed in %d of %d gates", passed, gates)
			}
			if float64(passed) < tc.passed*gates {
				t.Errorf("passed in %d of %d gates, want at least %.0f %%", passed, gates, 100*tc.passed)
			}
			if float64(regressed) < tc.caught*gates {
				t.Errorf("caught in %d of %d gates, want at least %.0f %%", regressed, gates, 100*tc.caught)
			}
		})
	}
}

func withBudget(s simulated, runs int) simulated {
	s.maxRuns = runs
	return s
}

func withDrift(s simulated, drift float64) simulated {
	s.drift = drift
	return s
}

func withChange(s simulated, c ...simChange) simulated {
	s.change = c
	return s
}

// TestGateChangeAtTheLimitRarelyPasses is the equivalence claim's own error: a figure exactly at its limit
// must pass in at most alpha of the gates, whatever the looks.
func TestGateChangeAtTheLimitRarelyPasses(t *testing.T) {
	limits := defaults(t)
	sim := withChange(quiet, simChange{"s2", "p50", 1.10})
	const gates = 200
	passed := 0
	for g := range gates {
		if r, _ := sim.gate(t, uint64(5000+g), limits); r.GetStatus() == baseline.StatusPassed {
			passed++
		}
	}
	t.Logf("a p50 at +10 %% (its limit) passed %d of %d gates", passed, gates)
	if float64(passed) > baseline.Alpha*gates {
		t.Errorf("a change at its limit passed %d of %d gates, want at most %g of them", passed, gates, baseline.Alpha)
	}
}

// TestGateSaysWhatWouldDecide: an undecided figure names its interval and the runs that would decide it.
func TestGateSaysWhatWouldDecide(t *testing.T) {
	noisy := quiet
	noisy.sd = map[string][2]float64{"p50": {0.06, 0.08}, "p90": {0.01, 0.03}, "p99": {0.02, 0.04}, "cpu_mcores": {0.02, 0.05}, "rss_mb": {0.01, 0.02}}
	r, n := noisy.gate(t, 42, defaults(t))
	if r.GetStatus() != baseline.StatusInconclusive || n != baseline.DefaultMaxRuns {
		t.Fatalf("status %s after %d runs a side, want inconclusive after the budget", r.GetStatus(), n)
	}
	var undecided *irsv1.Change
	for _, ch := range r.GetChanges() {
		if ch.GetVerdict() == baseline.VerdictInconclusive {
			undecided = ch
			break
		}
	}
	if undecided == nil || undecided.GetRunsToDecide() <= uint32(baseline.DefaultMaxRuns) || undecided.GetIntervalHigh() <= undecided.GetIntervalLow() {
		t.Fatalf("undecided change %v: want its interval and more runs than the budget to decide it", undecided)
	}
	if len(r.GetReasons()) == 0 {
		t.Fatal("no reason given")
	}
	for _, ch := range r.GetChanges() {
		if math.IsNaN(ch.GetPValue()) || math.IsNaN(ch.GetMinimumDetectable()) || math.IsNaN(ch.GetIntervalLow()) {
			t.Errorf("%s %s in %s: p %g, detectable %g, interval low %g: want numbers", ch.GetScope(), ch.GetMetric(), ch.GetPhase(),
				ch.GetPValue(), ch.GetMinimumDetectable(), ch.GetIntervalLow())
		}
	}
	t.Log(r.GetReasons()[0])
}
