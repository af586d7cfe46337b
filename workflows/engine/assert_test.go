package engine

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// latencyHist is a histogram of latencies as the engine holds them.
func latencyHist(t *testing.T, recs ...rec) *hist {
	t.Helper()
	h := newHist()
	for _, r := range recs {
		if err := h.RecordValues(r.d.Microseconds(), r.n); err != nil {
			t.Fatalf("record %v×%d: %v", r.d, r.n, err)
		}
	}
	return h
}

// TestMeasure: every metric against hand-built accumulators of the run (80 s) and its phases (warm-up 20 s,
// spike 60 s).
func TestMeasure(t *testing.T) {
	doc := strings.Replace(strings.Replace(shopYAML, "duration: 1s", "duration: 20s", 1), "duration: 1s", "duration: 60s", 1)
	e := testEngine(t, doc, 1, time.Second, nil)
	if e.o.Timeline.Total != 80*time.Second {
		t.Fatalf("timeline of %v, want 80s", e.o.Timeline.Total)
	}
	served := key{service: "storefront", kind: kindServed}
	edge := key{service: "storefront", callee: "checkout", kind: kindEdge}

	// The run's accumulators are its phases' merged: every request was in the spike, the warm-up only sampled
	// resources.
	spike := newAcc()
	spike.requests, spike.failures = 10_000, 50
	// p50 10ms, p90 20ms, p99 50ms, p99.9 100ms, max 400ms; mean 18.8ms.
	spike.latency = latencyHist(t, rec{10 * time.Millisecond, 5000}, rec{20 * time.Millisecond, 4000},
		rec{50 * time.Millisecond, 900}, rec{100 * time.Millisecond, 90}, rec{400 * time.Millisecond, 10})
	fileUse(e, "spike", ledgerKey{k: served}, resourceUse{mcores: 200, mcoresMax: 500, rssMB: 96, rssMBMax: 50})
	warm := newAcc() // resources measured, but no request served
	fileUse(e, "warm-up", ledgerKey{k: served}, resourceUse{mcores: 50, mcoresMax: 30, rssMB: 32, rssMBMax: 16})
	fileUse(e, "", ledgerKey{k: served}, resourceUse{mcores: 150, mcoresMax: 500, rssMB: 96, rssMBMax: 50})
	e.phaseAccs["spike"] = map[key]*acc{served: spike}
	e.phaseAccs["warm-up"] = map[key]*acc{served: warm}

	tests := []struct {
		phase   string
		k       key
		metric  workflows.Metric
		want    float64
		wantErr error
	}{
		{"", served, workflows.Metric5xxRate, 0.005, nil},
		{"", served, workflows.MetricErrors, 50, nil},
		{"", served, workflows.MetricRequests, 10_000, nil},
		{"", served, workflows.MetricRPS, 125, nil},
		{"", served, workflows.MetricP50, 0.010, nil},
		{"", served, workflows.MetricP90, 0.020, nil},
		{"", served, workflows.MetricP99, 0.050, nil},
		{"", served, workflows.MetricP999, 0.100, nil},
		{"", served, workflows.MetricMax, 0.400, nil},
		{"", served, workflows.MetricMean, 0.0188, nil},
		{"", served, workflows.MetricCPU, 150, nil}, // the run's own, from the ledger
		{"", served, workflows.MetricCPUMax, 500, nil},
		{"", served, workflows.MetricRSS, 96, nil},
		{"", served, workflows.MetricRSSMax, 50, nil},

		{"spike", served, workflows.Metric5xxRate, 0.005, nil},
		{"spike", served, workflows.MetricRequests, 10_000, nil},
		{"spike", served, workflows.MetricRPS, 10_000.0 / 60, nil},
		{"spike", served, workflows.MetricP99, 0.050, nil},
		{"spike", served, workflows.MetricCPU, 200, nil},

		// A scope without requests: counts and resources are values, ratios and latencies are not.
		{"warm-up", served, workflows.MetricRequests, 0, nil},
		{"warm-up", served, workflows.MetricErrors, 0, workflows.ErrNoRequests}, // errors == 0 over nothing is no pass
		{"warm-up", served, workflows.MetricRPS, 0, nil},
		{"warm-up", served, workflows.MetricCPU, 50, nil},
		{"warm-up", served, workflows.MetricCPUMax, 30, nil},
		{"warm-up", served, workflows.MetricRSS, 32, nil},
		{"warm-up", served, workflows.MetricRSSMax, 16, nil},
		{"warm-up", served, workflows.Metric5xxRate, 0, workflows.ErrNoRequests},
		{"warm-up", served, workflows.MetricP50, 0, workflows.ErrNoRequests},
		{"warm-up", served, workflows.MetricP99, 0, workflows.ErrNoRequests},
		{"warm-up", served, workflows.MetricMax, 0, workflows.ErrNoRequests},
		{"warm-up", served, workflows.MetricMean, 0, workflows.ErrNoRequests},

		// A point never measured at all.
		{"", edge, workflows.MetricRequests, 0, nil},
		{"", edge, workflows.MetricP99, 0, workflows.ErrNoRequests},
		{"", edge, workflows.Metric5xxRate, 0, workflows.ErrNoRequests},
	}
	for _, tt := range tests {
		scope := tt.phase
		if scope == "" {
			scope = "run"
		}
		name := fmt.Sprintf("%s %s->%s %s", scope, tt.k.service, tt.k.callee, tt.metric)
		t.Run(name, func(t *testing.T) {
			a := &irsv1.Assertion{Service: tt.k.service, Phase: tt.phase}
			got, err := e.measure(tt.k, a, tt.metric)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("measure = %v, %v; want error %v", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !approx(got, tt.want) {
				t.Errorf("measure = %v, %v; want %v (within 0.1%%)", got, err, tt.want)
			}
		})
	}
}

// recoveryDoc is a workflow of warm-up [0, 1s) and spike [1s, 3s) once scaled by scale.
func recoveryDoc(scale float64) string {
	return fmt.Sprintf(`
name: recovery
seed: 1
services:
  - name: storefront
    replicas: 3
  - name: checkout
phases:
  - name: warm-up
    duration: %v
  - name: spike
    duration: %v
`, time.Duration(float64(time.Second)/scale), time.Duration(2*float64(time.Second)/scale))
}

func TestRecovery(t *testing.T) {
	const interval = 250 * time.Millisecond
	tests := []struct {
		name    string
		scale   float64
		phase   string
		below   string
		kills   []float64           // replicas killed at these times
		failing map[float64]float64 // storefront's failure rate in the interval ending at t (others: 0)
		want    float64
		wantErr string
	}{
		{
			name:    "from the kill to the end of the last interval at or above the bound",
			kills:   []float64{1.1},
			failing: map[float64]float64{1.25: 0.5, 1.5: 0.2, 2.0: 0.01},
			want:    0.9,
		},
		{
			name:    "failures before the kill do not count",
			kills:   []float64{1.6},
			failing: map[float64]float64{1.0: 0.5, 1.5: 0.5},
			want:    0,
		},
		{
			name:    "failures under the bound are recovered",
			kills:   []float64{1.1},
			failing: map[float64]float64{1.25: 0.5, 1.5: 0.009},
			want:    0.15,
		},
		{
			name:    "recovered_below sets the bound",
			below:   "5%",
			kills:   []float64{1.1},
			failing: map[float64]float64{1.25: 0.5, 1.5: 0.049, 1.75: 0.02},
			want:    0.15,
		},
		{
			name:    "an interval holding the next kill is that kill's",
			kills:   []float64{1.1, 2.1},
			failing: map[float64]float64{1.25: 0.5, 2.25: 0.5},
			want:    0.15,
		},
		{
			name:    "an interval ending at the next kill is the previous kill's",
			kills:   []float64{1.1, 2.0},
			failing: map[float64]float64{1.25: 0.5, 2.0: 0.5},
			want:    0.9,
		},
		{
			name:    "the slowest recovery of every kill",
			kills:   []float64{1.1, 2.1},
			failing: map[float64]float64{1.25: 0.5, 1.5: 0.5, 2.25: 0.5, 2.5: 0.5, 2.75: 0.3},
			want:    0.65,
		},
		{
			name:    "replicas killed together are one kill",
			kills:   []float64{1.1, 1.1},
			failing: map[float64]float64{1.25: 0.5, 1.5: 0.5},
			want:    0.4,
		},
		{
			name:    "a phase: kills before it do not count",
			phase:   "spike",
			kills:   []float64{0.5, 1.6},
			failing: map[float64]float64{0.75: 0.5, 1.0: 0.5, 1.75: 0.5},
			want:    0.15,
		},
		{
			name:    "a phase: failures after it do not count",
			phase:   "warm-up",
			kills:   []float64{0.5, 1.6},
			failing: map[float64]float64{0.75: 0.5, 1.0: 0.5, 1.25: 0.5, 1.75: 0.5},
			want:    0.5,
		},
		{
			name:    "divided by the time scale: 0.25s at scale 0.25 reads 1s",
			scale:   0.25,
			kills:   []float64{1.0},
			failing: map[float64]float64{1.25: 0.5},
			want:    1,
		},
		{
			name:    "no kill",
			failing: map[float64]float64{1.25: 0.5},
			wantErr: "no replica was killed in this scope",
		},
		{
			name:    "kills in another phase only",
			phase:   "spike",
			kills:   []float64{0.5},
			failing: map[float64]float64{0.75: 0.5},
			wantErr: "no replica was killed in this scope",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scale := tt.scale
			if scale == 0 {
				scale = 1
			}
			// From the engine's record, which keeps the points of the scopes a recovery assertion reads, in its
			// own clock (the run's end reads it too).
			for _, ended := range []bool{false} {
				e := testEngine(t, recoveryDoc(scale), scale, interval, nil)
				a := &irsv1.Assertion{Service: "storefront", Phase: tt.phase, Expect: "recovery_time < 10s", RecoveredBelow: tt.below}
				e.o.Workflow.Assertions = append(e.o.Workflow.Assertions, a)
				for i, kt := range tt.kills {
					e.res.Events = append(e.res.Events, &irsv1.RunEvent{T: kt, Kind: "kill", Service: "storefront",
						Replica: fmt.Sprintf("storefront-%d", i)})
				}
				// A kill that found no replica is no kill; nor are the other events.
				e.res.Events = append(e.res.Events, &irsv1.RunEvent{T: 0.2, Kind: "kill", Service: "storefront", Detail: "no live replica to kill"},
					&irsv1.RunEvent{T: 0.3, Kind: "exit", Service: "storefront", Replica: "storefront-9"})
				for k := 1; k <= 14; k++ { // past the end of the run (3s)
					tk := float64(k) * interval.Seconds()
					fails := int64(math.Round(1000 * tt.failing[tk]))
					tick := &irsv1.Tick{T: tk, Services: []*irsv1.Point{
						// checkout fails throughout: another point's failures are not storefront's.
						{Service: "checkout", Kind: kindServed, Requests: 100, Failures: 100, FailureRate: 1},
						{Service: "storefront", Kind: kindServed, Requests: 1000, Failures: fails, FailureRate: float64(fails) / 1000},
						{Service: "storefront", Kind: kindLoad, Requests: 100, Failures: 100, FailureRate: 1},
					}, Edges: []*irsv1.Point{{Service: "storefront", Callee: "checkout", Kind: kindEdge, Requests: 100, Failures: 100, FailureRate: 1}}}
					e.rec.add(tick, e.watches)
				}
				got, err := e.measure(key{service: "storefront", kind: kindServed}, a, workflows.MetricRecoveryTime)
				if tt.wantErr != "" {
					if err == nil || err.Error() != tt.wantErr {
						t.Errorf("ended %v: recovery = %v, %v; want error %q", ended, got, err, tt.wantErr)
					}
					continue
				}
				if err != nil || math.Abs(got-tt.want) > 1e-9 {
					t.Errorf("ended %v: recovery = %vs, %v; want %vs", ended, got, err, tt.want)
				}
			}
		})
	}
}

// assertYAML is a shop whose assertions cover services, edges, phases, recovery and a scope without requests.
const assertYAML = `
name: shop
seed: 7
services:
  - name: shoppers
    worker:
      load: {target: storefront, rate: 100}
  - name: storefront
    replicas: 2
    worker:
      calls: [{service: checkout}]
  - name: checkout
    worker:
      calls: [{service: inventory}]
  - name: inventory
    replicas: 3
phases:
  - name: warm-up
    duration: 1s
  - name: spike
    duration: 2s
assertions:
  - name: shoppers barely notice the kills
    service: storefront
    phase: spike
    expect: 5xx_rate < 1%
  - edge: checkout->inventory
    phase: spike
    expect: 5xx_rate < 1%
  - service: shoppers
    expect: p99 < 250ms
  - service: inventory
    phase: spike
    expect: recovery_time < 2s
  - service: storefront
    expect: requests >= 100
  - edge: storefront -> checkout
    expect: p50 < 5ms
  - service: inventory
    phase: warm-up
    expect: p99 < 100ms
  - service: storefront
    expect: cpu_mcores < 1000
`

// shopRun runs the assertion workflow's measurement pipeline by hand: every replica's windows for 12 intervals
// of 250ms, resource samples, an inventory replica killed at 1.6s, the intervals closed.
func shopRun(t *testing.T, resultPath string) *engine {
	t.Helper()
	const interval = 250 * time.Millisecond
	e := testEngine(t, assertYAML, 1, interval, nil)
	e.o.ResultPath = resultPath
	e.t0 = t0
	var samples []sample
	for k := 1; k <= 12; k++ {
		from, to := time.Duration(k-1)*interval, time.Duration(k)*interval
		spike := k > 4
		at := func(s *irsv1.StatsSnapshot) *irsv1.StatsSnapshot {
			s.WindowStart, s.WindowEnd = timestamppb.New(t0.Add(from)), timestamppb.New(t0.Add(to))
			return s
		}
		samples = append(samples, sample{service: "shoppers", stats: at(&irsv1.StatsSnapshot{Load: []*irsv1.LoadStats{{
			Target: "storefront", Running: true, TargetRate: 100, Sent: 100,
			Outcomes: outcomes(map[int32]int64{200: 100}, nil), Latency: wireHist(t, rec{20 * time.Millisecond, 100})}}})})
		for r := range 2 {
			failed := int64(0)
			if spike && r == 0 && k%2 == 1 {
				failed = 1
			}
			samples = append(samples, sample{service: "storefront", stats: at(&irsv1.StatsSnapshot{
				Inbound: []*irsv1.RouteStats{{Route: "/", Outcomes: outcomes(map[int32]int64{200: 50 - failed, 500: failed}, nil),
					Latency: wireHist(t, rec{3 * time.Millisecond, 50})}},
				Upstreams: []*irsv1.UpstreamStats{{Service: "checkout", Outcomes: outcomes(map[int32]int64{200: 50}, nil),
					Latency: wireHist(t, rec{1500 * time.Microsecond, 50})}},
			})})
		}
		if !spike {
			continue // checkout and inventory only report during the spike
		}
		samples = append(samples, sample{service: "checkout", stats: at(&irsv1.StatsSnapshot{
			Upstreams: []*irsv1.UpstreamStats{{Service: "inventory", Outcomes: outcomes(map[int32]int64{200: 98, 503: 2}, nil),
				Latency: wireHist(t, rec{time.Millisecond, 100})}},
		})})
		failed := map[int]int64{7: 10, 8: 5}[k] // intervals ending at 1.75s and 2s, after the kill at 1.6s
		samples = append(samples, sample{service: "inventory", stats: at(&irsv1.StatsSnapshot{
			Inbound: []*irsv1.RouteStats{{Route: "/", Outcomes: outcomes(map[int32]int64{200: 100 - failed, 503: failed}, nil),
				Latency: wireHist(t, rec{time.Millisecond, 100})}},
		})})
	}
	feed(e, samples...)
	for _, span := range []string{"", "warm-up", "spike"} { // as the samples would have filed it: storefront at 300m
		fileUse(e, span, ledgerKey{k: key{service: "storefront", kind: kindServed}}, resourceUse{mcores: 300, mcoresMax: 200, rssMB: 100, rssMBMax: 60})
	}
	e.event(t0.Add(1600*time.Millisecond), "kill", "inventory", "inventory-2", "SIGKILL")
	e.closeBuckets(12)
	return e
}

func TestAssertions(t *testing.T) {
	e := shopRun(t, "")
	e.mu.Lock()
	got := e.assertions()
	e.mu.Unlock()
	want := []*irsv1.AssertionResult{
		{Name: "shoppers barely notice the kills", Expect: "5xx_rate < 1%", Scope: "storefront", Phase: "spike",
			Passed: true, Measured: 0.005, MeasuredText: "0.500%"},
		{Expect: "5xx_rate < 1%", Scope: "checkout->inventory", Phase: "spike", Measured: 0.02, MeasuredText: "2.000%"},
		// HDR reports the highest value equivalent to 20ms at 3 significant digits: 20.015ms.
		{Expect: "p99 < 250ms", Scope: "shoppers", Passed: true, Measured: 0.020015, MeasuredText: "20.02ms"},
		{Expect: "recovery_time < 2s", Scope: "inventory", Phase: "spike", Passed: true, Measured: 0.4, MeasuredText: "400ms"},
		{Expect: "requests >= 100", Scope: "storefront", Passed: true, Measured: 1200, MeasuredText: "1200"},
		{Expect: "p50 < 5ms", Scope: "storefront->checkout", Passed: true, Measured: 0.0015, MeasuredText: "1.5ms"},
		{Expect: "p99 < 100ms", Scope: "inventory", Phase: "warm-up", Error: workflows.ErrNoRequests.Error()},
		{Expect: "cpu_mcores < 1000", Scope: "storefront", Passed: true, Measured: 300, MeasuredText: "300m"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d assertion results, want %d:\n%v", len(got), len(want), got)
	}
	for i := range want {
		t.Run(want[i].GetExpect()+" "+want[i].GetScope(), func(t *testing.T) {
			g, w := got[i], want[i]
			if math.Abs(g.GetMeasured()-w.GetMeasured()) > 1e-9 {
				t.Errorf("measured %v, want %v", g.GetMeasured(), w.GetMeasured())
			}
			g = proto.Clone(g).(*irsv1.AssertionResult)
			g.Measured = w.Measured
			if !proto.Equal(g, w) {
				t.Errorf("result:\n got %v\nwant %v", g, w)
			}
		})
	}
}

// TestFinish: finishing computes phases and the total, fails the run on a failed assertion, and writes a result
// that reads back the same.
func TestFinish(t *testing.T) {
	path := filepath.Join(t.TempDir(), "result.json")
	e := shopRun(t, path)
	e.finish(StatusPassed)
	if e.res.GetStatus() != StatusFailed {
		t.Errorf("status %q, want %q (an assertion failed)", e.res.GetStatus(), StatusFailed)
	}
	var phases []string
	for _, p := range e.res.GetPhases() {
		phases = append(phases, fmt.Sprintf("%s %v-%v", p.GetName(), p.GetStart(), p.GetEnd()))
	}
	if want := []string{"warm-up 0-1", "spike 1-3"}; strings.Join(phases, ", ") != strings.Join(want, ", ") {
		t.Errorf("phases %v, want %v", phases, want)
	}
	var total []string
	for _, p := range append(e.res.GetTotal().GetServices(), e.res.GetTotal().GetEdges()...) {
		total = append(total, fmt.Sprintf("%s->%s %s %d/%d %.0f/s", p.GetService(), p.GetCallee(), p.GetKind(),
			p.GetFailures(), p.GetRequests(), p.GetRps()))
		if p.GetLatency().GetCount() != p.GetRequests() {
			t.Errorf("total %s->%s %s: histogram of %d, want %d (its requests)", p.GetService(), p.GetCallee(), p.GetKind(),
				p.GetLatency().GetCount(), p.GetRequests())
		}
	}
	want := []string{
		"inventory-> served 15/800 267/s", "shoppers-> load 0/1200 400/s", "storefront-> served 4/1200 400/s",
		"checkout->inventory edge 16/800 267/s", "shoppers->storefront edge 0/1200 400/s", "storefront->checkout edge 0/1200 400/s",
	}
	if strings.Join(total, "\n") != strings.Join(want, "\n") {
		t.Errorf("total points:\n%s\nwant:\n%s", strings.Join(total, "\n"), strings.Join(want, "\n"))
	}

	read, err := ReadResult(path)
	if err != nil {
		t.Fatalf("read the result back: %v", err)
	}
	if !proto.Equal(read, e.res) {
		t.Errorf("result read back differs from the one written: %v", cmpDiff(e.res, read))
	}
}

// cmpDiff names the first top-level field where two results differ.
func cmpDiff(a, b *irsv1.WorkflowResult) string {
	fields := a.ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if !a.ProtoReflect().Get(fd).Equal(b.ProtoReflect().Get(fd)) {
			return fmt.Sprintf("field %s: wrote %v, read %v", fd.Name(), a.ProtoReflect().Get(fd), b.ProtoReflect().Get(fd))
		}
	}
	return "no field differs"
}

// TestBaselineAssertions: an assertion relative to the baseline is skipped without one (and fails nothing), and
// with one is bound by the baseline's value.
func TestBaselineAssertions(t *testing.T) {
	relative := []*irsv1.Assertion{
		{Service: "shoppers", Expect: "p99 < baseline * 1.10"},
		{Service: "storefront", Phase: "spike", Expect: "5xx_rate <= baseline + 0.1%"},
	}
	e := shopRun(t, "")
	e.o.Workflow.Assertions = relative
	e.finish(StatusPassed)
	for _, a := range e.res.GetAssertions() {
		if !a.GetSkipped() || a.GetPassed() || a.GetMeasuredText() != "no baseline" {
			t.Errorf("without a baseline: %v, want skipped", a)
		}
	}
	if e.res.GetStatus() != StatusPassed {
		t.Errorf("status %s, want passed: skipped assertions fail nothing", e.res.GetStatus())
	}

	e = shopRun(t, "")
	e.o.Workflow.Assertions = relative
	var asked []string
	e.o.Baseline = func(a *irsv1.Assertion, m workflows.Metric) (float64, error) {
		asked = append(asked, a.GetService()+" "+string(m))
		return map[workflows.Metric]float64{workflows.MetricP99: 0.015, workflows.Metric5xxRate: 0.005}[m], nil
	}
	e.finish(StatusPassed)
	got := e.res.GetAssertions()
	if strings.Join(asked, ",") != "shoppers p99,storefront 5xx_rate" {
		t.Errorf("the baseline was asked for %v", asked)
	}
	// shoppers' p99 is 20ms: beyond 15ms × 1.10.
	if a := got[0]; a.GetPassed() || a.GetSkipped() || a.GetBaseline() != 0.015 || math.Abs(a.GetBound()-0.0165) > 1e-12 {
		t.Errorf("p99 against the baseline: %v, want failed with baseline 15ms and bound 16.5ms", a)
	}
	// storefront's 5xx rate in the spike is 0.5%: within 0.5% + 0.1%.
	if a := got[1]; !a.GetPassed() || math.Abs(a.GetBound()-0.006) > 1e-12 {
		t.Errorf("5xx rate against the baseline: %v, want passed with bound 0.6%%", a)
	}
	if e.res.GetStatus() != StatusFailed {
		t.Errorf("status %s, want failed", e.res.GetStatus())
	}
}

// TestMeasureResultAgrees: what the finished result says of each assertion's metric is what the engine
// measured (a baseline is measured from its result file; it must mean the same).
func TestMeasureResultAgrees(t *testing.T) {
	e := shopRun(t, "")
	e.finish(StatusPassed)
	for i, a := range e.o.Workflow.GetAssertions() {
		r := e.res.GetAssertions()[i]
		exp, _ := workflows.ParseExpectation(a.GetExpect())
		v, err := workflows.MeasureResult(e.res, a, exp.Metric)
		if (err != nil) != (r.GetError() != "") || err == nil && math.Abs(v-r.GetMeasured()) > 1e-9 {
			t.Errorf("%s %s: from the result %v, %v; the engine measured %v, %q", a.GetExpect(), r.GetScope(), v, err, r.GetMeasured(), r.GetError())
		}
	}
}
