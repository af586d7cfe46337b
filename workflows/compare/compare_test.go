package compare_test

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/compare"
	"google.golang.org/protobuf/proto"
)

// Figure names, as reports show them.
const (
	p50  = "client-side p50"
	p99  = "client-side p99"
	p999 = "client-side p99.9"
	pmax = "client-side max"
	fail = "client-side 5xx"
	rps  = "client-side rps"
)

// rec is n latencies of d.
type rec struct {
	d time.Duration
	n int64
}

// hist encodes latencies as a worker does: an HDR histogram of microseconds with the IRS geometry, V2
// compressed, base64.
func hist(t *testing.T, recs ...rec) *irsv1.Histogram {
	t.Helper()
	h := hdrhistogram.New(1, 3_600_000_000, 3)
	for _, r := range recs {
		if err := h.RecordValues(r.d.Microseconds(), r.n); err != nil {
			t.Fatalf("record %v×%d: %v", r.d, r.n, err)
		}
	}
	enc, err := h.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
	if err != nil {
		t.Fatalf("encode histogram: %v", err)
	}
	return &irsv1.Histogram{Hdr: string(enc), Count: h.TotalCount()}
}

// load is a load generator's point: requests sent, failures, rate and latencies.
func load(t *testing.T, service string, requests, failures int64, rate float64, recs ...rec) *irsv1.Point {
	t.Helper()
	p := &irsv1.Point{Service: service, Kind: "load", Requests: requests, Failures: failures, Rps: rate}
	if len(recs) > 0 {
		p.Latency = hist(t, recs...)
	}
	return p
}

// run is a complete run whose total and only phase ("steady") are ph.
func run(ph *irsv1.PhaseResult) *irsv1.WorkflowResult {
	steady := proto.Clone(ph).(*irsv1.PhaseResult)
	steady.Name = "steady"
	total := proto.Clone(ph).(*irsv1.PhaseResult)
	total.Name = "total"
	return &irsv1.WorkflowResult{Status: "passed", Phases: []*irsv1.PhaseResult{steady}, Total: total}
}

// loadRun is a run with one load generator at rate whose latencies are p99 for 2% of its 100 requests and 10ms
// for the rest: its client-side p99 is p99.
func loadRun(t *testing.T, rate float64, p99 time.Duration) *irsv1.WorkflowResult {
	t.Helper()
	return run(&irsv1.PhaseResult{Services: []*irsv1.Point{
		load(t, "loadgen", 100, 0, rate, rec{10 * time.Millisecond, 98}, rec{p99, 2})}})
}

// approx reports whether got is want within HDR precision (3 significant digits: 0.1%).
func approx(got, want float64) bool {
	return math.Abs(got-want) <= math.Abs(want)*1e-3+1e-9
}

func figure(t *testing.T, v *irsv1.Variant, name string) *irsv1.Figure {
	t.Helper()
	f := compare.Find(v, name)
	if f == nil {
		t.Fatalf("variant %q has no figure %q (has %v)", v.GetName(), name, figureNames(v))
	}
	return f
}

func figureNames(v *irsv1.Variant) []string {
	var out []string
	for _, f := range v.GetFigures() {
		out = append(out, f.GetName())
	}
	return out
}

// TestFiguresClientSide checks the client-side figures of one run: percentiles from the load generators'
// histograms merged (each generator alone gives other percentiles), failures over requests, rates summed, and
// nothing from what services served.
func TestFiguresClientSide(t *testing.T) {
	ph := &irsv1.PhaseResult{Services: []*irsv1.Point{
		// Alone: p50 10ms, p99 100ms.
		load(t, "burst", 100, 4, 50, rec{10 * time.Millisecond, 90}, rec{100 * time.Millisecond, 10}),
		// Alone: p50 and p99 20ms. Merged with burst: 90×10ms, 100×20ms, 10×100ms.
		load(t, "steady", 100, 2, 50.5, rec{20 * time.Millisecond, 100}),
		// What a service served is not what clients saw.
		{Service: "checkout", Kind: "served", Requests: 1000, Failures: 1000, Rps: 500,
			Latency: hist(t, rec{time.Second, 1000})},
	}}
	c := &irsv1.Comparison{Phase: "steady", Variants: []*irsv1.Variant{{Name: "none", Runs: []*irsv1.WorkflowResult{run(ph)}}}}
	compare.Figures(c)
	v := c.GetVariants()[0]
	tests := []struct {
		name, unit string
		want       float64
	}{
		{name: p50, unit: "ms", want: 20},
		{name: p99, unit: "ms", want: 100},
		{name: p999, unit: "ms", want: 100},
		{name: pmax, unit: "ms", want: 100},
		{name: fail, unit: "%", want: 3}, // 6 of 200
		{name: rps, unit: "req/s", want: 100.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := figure(t, v, tt.name)
			if f.GetUnit() != tt.unit {
				t.Errorf("unit = %q, want %q", f.GetUnit(), tt.unit)
			}
			if len(f.GetValues()) != 1 || !approx(f.GetValues()[0], tt.want) {
				t.Errorf("values = %v, want [%v]", f.GetValues(), tt.want)
			}
			if !approx(f.GetMedian(), tt.want) || f.GetStddev() != 0 {
				t.Errorf("median ± stddev = %v ± %v, want %v ± 0", f.GetMedian(), f.GetStddev(), tt.want)
			}
		})
	}
}

// TestFiguresNoRequests checks that a phase in which the load generators sent nothing has no client figures
// (no division by zero).
func TestFiguresNoRequests(t *testing.T) {
	c := &irsv1.Comparison{Phase: "total", Variants: []*irsv1.Variant{{Name: "none", Runs: []*irsv1.WorkflowResult{
		run(&irsv1.PhaseResult{Services: []*irsv1.Point{{Service: "loadgen", Kind: "load"}}})}}}}
	compare.Figures(c)
	for _, name := range []string{p50, p99, p999, pmax, fail, rps} {
		if f := compare.Find(c.GetVariants()[0], name); f != nil {
			t.Errorf("figure %q = %v, want none without requests", name, f.GetValues())
		}
	}
}

// meshPhase is a phase of a run under a mesh: a load generator and two services with sidecars, the control
// plane, and one edge. Without sidecars, the same phase has no sidecar or control-plane figures.
func meshPhase(t *testing.T, sidecars bool) *irsv1.PhaseResult {
	ph := &irsv1.PhaseResult{
		Services: []*irsv1.Point{
			load(t, "loadgen", 1000, 0, 100, rec{5 * time.Millisecond, 1000}),
			{Service: "payments", Kind: "served", Requests: 1000, Rps: 100, CpuMcores: 40},
			{Service: "checkout", Kind: "served", Requests: 1000, Rps: 100, CpuMcores: 80},
		},
		Edges: []*irsv1.Point{
			{Service: "checkout", Callee: "payments", Kind: "edge", HopP50Ms: 0.4, HopP99Ms: 1.5},
			{Service: "checkout", Callee: "cache", Kind: "edge"}, // no hop figures: not measured
		},
	}
	if sidecars {
		ph.Services[1].Sidecars, ph.Services[1].SidecarCpuMcores, ph.Services[1].SidecarCpuMcoresMax = 2, 30, 25
		ph.Services[1].SidecarMcoresPerKrps, ph.Services[1].SidecarRssMbMax = 300, 40
		ph.Services[2].Sidecars, ph.Services[2].SidecarCpuMcores, ph.Services[2].SidecarCpuMcoresMax = 1, 60, 70
		ph.Services[2].SidecarMcoresPerKrps, ph.Services[2].SidecarRssMbMax = 600, 45
		ph.ControlPlane = &irsv1.Point{Service: "control-plane", CpuMcores: 12, CpuMcoresMax: 90, RssMb: 55}
	}
	return ph
}

func TestFiguresSidecarsAndControlPlane(t *testing.T) {
	c := &irsv1.Comparison{Phase: "steady", Variants: []*irsv1.Variant{
		{Name: "none", Runs: []*irsv1.WorkflowResult{run(meshPhase(t, false))}},
		{Name: "envoy", Runs: []*irsv1.WorkflowResult{run(meshPhase(t, true))}},
	}}
	compare.Figures(c)
	none, envoy := c.GetVariants()[0], c.GetVariants()[1]
	meshOnly := []struct {
		name, unit string
		want       float64
	}{
		{"checkout sidecars CPU", "mcores", 60},
		{"checkout sidecar CPU max", "mcores", 70},
		{"checkout sidecars CPU per 1k rps", "mcores", 600},
		{"checkout sidecar memory max", "MB", 45},
		{"payments sidecars CPU", "mcores", 30},
		{"payments sidecar CPU max", "mcores", 25},
		{"payments sidecars CPU per 1k rps", "mcores", 300},
		{"payments sidecar memory max", "MB", 40},
		{"control plane CPU", "mcores", 12},
		{"control plane CPU max", "mcores", 90},
		{"control plane memory", "MB", 55},
	}
	both := []struct {
		name, unit string
		want       float64
	}{
		{"checkout workers CPU", "mcores", 80},
		{"payments workers CPU", "mcores", 40},
		{"loadgen workers CPU", "mcores", 0},
		{"checkout->payments hop p50", "ms", 0.4},
		{"checkout->payments hop p99", "ms", 1.5},
	}
	for _, tt := range meshOnly {
		t.Run(tt.name, func(t *testing.T) {
			if f := compare.Find(none, tt.name); f != nil {
				t.Errorf("variant none has figure %q = %v, want none without sidecars", tt.name, f.GetValues())
			}
			f := figure(t, envoy, tt.name)
			if f.GetUnit() != tt.unit || !slices.Equal(f.GetValues(), []float64{tt.want}) {
				t.Errorf("envoy %q = %v %s, want [%v] %s", tt.name, f.GetValues(), f.GetUnit(), tt.want, tt.unit)
			}
		})
	}
	for _, tt := range both {
		t.Run(tt.name, func(t *testing.T) {
			for _, v := range []*irsv1.Variant{none, envoy} {
				f := figure(t, v, tt.name)
				if f.GetUnit() != tt.unit || !slices.Equal(f.GetValues(), []float64{tt.want}) {
					t.Errorf("%s %q = %v %s, want [%v] %s", v.GetName(), tt.name, f.GetValues(), f.GetUnit(), tt.want, tt.unit)
				}
			}
		})
	}
	for _, v := range []*irsv1.Variant{none, envoy} {
		for _, name := range []string{"checkout->cache hop p50", "checkout->cache hop p99"} {
			if f := compare.Find(v, name); f != nil {
				t.Errorf("%s has figure %q for an edge without hop times, want none", v.GetName(), name)
			}
		}
	}
}

// TestFiguresOrder checks the order figures are listed in: client side, sidecars by service, control plane,
// workers by service, hops.
func TestFiguresOrder(t *testing.T) {
	c := &irsv1.Comparison{Phase: "steady", Variants: []*irsv1.Variant{
		{Name: "envoy", Runs: []*irsv1.WorkflowResult{run(meshPhase(t, true))}}}}
	compare.Figures(c)
	want := []string{rps, fail, p50, p99, p999, pmax,
		"checkout sidecars CPU", "checkout sidecar CPU max", "checkout sidecars CPU per 1k rps", "checkout sidecar memory max",
		"payments sidecars CPU", "payments sidecar CPU max", "payments sidecars CPU per 1k rps", "payments sidecar memory max",
		"control plane CPU", "control plane CPU max", "control plane memory",
		"checkout workers CPU", "loadgen workers CPU", "payments workers CPU",
		"checkout->payments hop p50", "checkout->payments hop p99"}
	if got := figureNames(c.GetVariants()[0]); !slices.Equal(got, want) {
		t.Errorf("figures =\n%q\nwant\n%q", got, want)
	}
}

func TestFiguresMedianAndStddev(t *testing.T) {
	tests := []struct {
		name         string
		rates        []float64
		median, sdev float64
	}{
		{name: "one run", rates: []float64{100}, median: 100, sdev: 0},
		{name: "two runs", rates: []float64{100, 110}, median: 105, sdev: math.Sqrt(50)},
		{name: "three runs", rates: []float64{130, 100, 110}, median: 110, sdev: math.Sqrt(700.0 / 3)},
		{name: "four runs", rates: []float64{100, 140, 110, 120}, median: 115, sdev: math.Sqrt(875.0 / 3)},
		{name: "equal runs", rates: []float64{90, 90, 90}, median: 90, sdev: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := &irsv1.Variant{Name: "envoy"}
			for _, r := range tt.rates {
				v.Runs = append(v.Runs, loadRun(t, r, 50*time.Millisecond))
			}
			c := &irsv1.Comparison{Phase: "total", Discard: compare.DiscardNone, Variants: []*irsv1.Variant{v}}
			compare.Figures(c)
			f := figure(t, v, rps)
			if !slices.Equal(f.GetValues(), tt.rates) {
				t.Errorf("values = %v, want %v in run order", f.GetValues(), tt.rates)
			}
			if math.Abs(f.GetMedian()-tt.median) > 1e-9 || math.Abs(f.GetStddev()-tt.sdev) > 1e-9 {
				t.Errorf("median ± stddev = %v ± %v, want %v ± %v (sample standard deviation)", f.GetMedian(), f.GetStddev(), tt.median, tt.sdev)
			}
			if len(v.GetDiscarded()) != 0 {
				t.Errorf("discarded = %v with discard none, want none", v.GetDiscarded())
			}
		})
	}
}

func TestFiguresDiscardWorst(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name      string
		discard   string
		p99s      []time.Duration // one run each; run i sends at 100+10i req/s
		discarded []uint32
		p99Median float64 // ms
		rpsMedian float64
		rpsStddev float64
	}{
		{name: "worst of three", discard: compare.DiscardWorst, p99s: []time.Duration{50 * ms, 200 * ms, 80 * ms},
			discarded: []uint32{1}, p99Median: 65, rpsMedian: 110, rpsStddev: math.Sqrt(200)},
		{name: "worst is first", discard: compare.DiscardWorst, p99s: []time.Duration{300 * ms, 200 * ms, 80 * ms},
			discarded: []uint32{0}, p99Median: 140, rpsMedian: 115, rpsStddev: math.Sqrt(50)},
		{name: "worst of two", discard: compare.DiscardWorst, p99s: []time.Duration{50 * ms, 40 * ms},
			discarded: []uint32{0}, p99Median: 40, rpsMedian: 110, rpsStddev: 0},
		{name: "one run is kept", discard: compare.DiscardWorst, p99s: []time.Duration{50 * ms},
			discarded: nil, p99Median: 50, rpsMedian: 100, rpsStddev: 0},
		{name: "discard none", discard: compare.DiscardNone, p99s: []time.Duration{50 * ms, 200 * ms, 80 * ms},
			discarded: nil, p99Median: 80, rpsMedian: 110, rpsStddev: 10},
		{name: "discard unset", discard: "", p99s: []time.Duration{50 * ms, 200 * ms},
			discarded: nil, p99Median: 125, rpsMedian: 105, rpsStddev: math.Sqrt(50)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := &irsv1.Variant{Name: "envoy"}
			var rates []float64
			for i, p := range tt.p99s {
				rates = append(rates, 100+10*float64(i))
				v.Runs = append(v.Runs, loadRun(t, rates[i], p))
			}
			c := &irsv1.Comparison{Phase: "total", Discard: tt.discard, Variants: []*irsv1.Variant{v}}
			compare.Figures(c)
			if !slices.Equal(v.GetDiscarded(), tt.discarded) {
				t.Errorf("discarded = %v, want %v", v.GetDiscarded(), tt.discarded)
			}
			r := figure(t, v, rps)
			if !slices.Equal(r.GetValues(), rates) {
				t.Errorf("rps values = %v, want every run's %v", r.GetValues(), rates)
			}
			if math.Abs(r.GetMedian()-tt.rpsMedian) > 1e-9 || math.Abs(r.GetStddev()-tt.rpsStddev) > 1e-9 {
				t.Errorf("rps median ± stddev = %v ± %v, want %v ± %v", r.GetMedian(), r.GetStddev(), tt.rpsMedian, tt.rpsStddev)
			}
			p := figure(t, v, p99)
			if len(p.GetValues()) != len(tt.p99s) {
				t.Fatalf("p99 values = %v, want one per run (%d)", p.GetValues(), len(tt.p99s))
			}
			for i, d := range tt.p99s {
				if want := float64(d) / float64(ms); !approx(p.GetValues()[i], want) {
					t.Errorf("p99 of run %d = %v, want %v", i, p.GetValues()[i], want)
				}
			}
			if !approx(p.GetMedian(), tt.p99Median) {
				t.Errorf("p99 median = %v, want %v", p.GetMedian(), tt.p99Median)
			}
		})
	}
}

// TestFiguresDiscardWorstOfCompleteRuns checks that the run left out is only ever one of two or more runs that
// have a p99: a variant whose other runs did not complete keeps its one measured run.
func TestFiguresDiscardWorstOfCompleteRuns(t *testing.T) {
	v := &irsv1.Variant{Name: "envoy", Runs: []*irsv1.WorkflowResult{
		loadRun(t, 100, 50*time.Millisecond), {Status: "error", Error: "workers did not start"}}}
	c := &irsv1.Comparison{Phase: "total", Discard: compare.DiscardWorst, Variants: []*irsv1.Variant{v}}
	compare.Figures(c)
	if len(v.GetDiscarded()) != 0 {
		t.Errorf("discarded = %v, want none: only one run has a p99", v.GetDiscarded())
	}
	if f := figure(t, v, rps); f.GetMedian() != 100 {
		t.Errorf("rps median = %v, want the complete run's 100", f.GetMedian())
	}
}

func TestFiguresIncompleteRun(t *testing.T) {
	v := &irsv1.Variant{Name: "envoy", Runs: []*irsv1.WorkflowResult{
		loadRun(t, 100, 50*time.Millisecond),
		{Status: "error", Error: "workers did not start"},
		loadRun(t, 120, 70*time.Millisecond),
	}}
	c := &irsv1.Comparison{Phase: "steady", Discard: compare.DiscardNone, Variants: []*irsv1.Variant{v}}
	compare.Figures(c)
	for _, tt := range []struct {
		name           string
		first, third   float64
		median, stddev float64
	}{
		{name: rps, first: 100, third: 120, median: 110, stddev: math.Sqrt(200)},
		{name: p99, first: 50, third: 70, median: 60, stddev: math.Sqrt(200)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := figure(t, v, tt.name)
			vals := f.GetValues()
			if len(vals) != 3 || !approx(vals[0], tt.first) || !math.IsNaN(vals[1]) || !approx(vals[2], tt.third) {
				t.Fatalf("values = %v, want [%v NaN %v]", vals, tt.first, tt.third)
			}
			if !approx(f.GetMedian(), tt.median) || math.Abs(f.GetStddev()-tt.stddev) > tt.stddev*2e-3 {
				t.Errorf("median ± stddev = %v ± %v, want %v ± %v over the complete runs", f.GetMedian(), f.GetStddev(), tt.median, tt.stddev)
			}
		})
	}
}

func TestFiguresNoCompleteRun(t *testing.T) {
	v := &irsv1.Variant{Name: "envoy", Runs: []*irsv1.WorkflowResult{{Status: "interrupted"}, {Status: "error"}}}
	c := &irsv1.Comparison{Phase: "total", Discard: compare.DiscardWorst, Variants: []*irsv1.Variant{v}}
	compare.Figures(c)
	if len(v.GetFigures()) != 0 || len(v.GetDiscarded()) != 0 {
		t.Errorf("figures %v, discarded %v; want none of either without a complete run", figureNames(v), v.GetDiscarded())
	}
}

func TestFiguresPhase(t *testing.T) {
	res := &irsv1.WorkflowResult{Status: "passed",
		Phases: []*irsv1.PhaseResult{
			{Name: "warmup", Services: []*irsv1.Point{load(t, "loadgen", 10, 0, 10)}},
			{Name: "spike", Services: []*irsv1.Point{load(t, "loadgen", 100, 0, 100)}},
		},
		Total: &irsv1.PhaseResult{Name: "total", Services: []*irsv1.Point{load(t, "loadgen", 110, 0, 55)}},
	}
	tests := []struct {
		phase string
		want  float64 // rps; NaN: no figure
	}{
		{phase: "warmup", want: 10},
		{phase: "spike", want: 100},
		{phase: "total", want: 55},
		{phase: "", want: 55},
		{phase: "cooldown", want: math.NaN()},
	}
	for _, tt := range tests {
		name := tt.phase
		if name == "" {
			name = "unset"
		}
		t.Run(name, func(t *testing.T) {
			c := &irsv1.Comparison{Phase: tt.phase, Variants: []*irsv1.Variant{{Name: "none",
				Runs: []*irsv1.WorkflowResult{proto.Clone(res).(*irsv1.WorkflowResult)}}}}
			compare.Figures(c)
			f := compare.Find(c.GetVariants()[0], rps)
			if math.IsNaN(tt.want) {
				if f != nil {
					t.Errorf("phase %q: rps = %v, want no figure from a phase the run lacks", tt.phase, f.GetValues())
				}
				return
			}
			if f == nil || !slices.Equal(f.GetValues(), []float64{tt.want}) {
				t.Errorf("phase %q: rps figure = %v, want [%v]", tt.phase, f, tt.want)
			}
		})
	}
}

// TestFiguresRecomputed checks that Figures can run again as runs arrive (the comparison file is rewritten
// after each run): nothing is listed twice and what is left out follows the runs.
func TestFiguresRecomputed(t *testing.T) {
	v := &irsv1.Variant{Name: "envoy", Runs: []*irsv1.WorkflowResult{loadRun(t, 100, 90*time.Millisecond)}}
	c := &irsv1.Comparison{Phase: "total", Discard: compare.DiscardWorst, Variants: []*irsv1.Variant{v}}
	compare.Figures(c)
	first := figureNames(v)
	v.Runs = append(v.Runs, loadRun(t, 110, 20*time.Millisecond), loadRun(t, 120, 30*time.Millisecond))
	compare.Figures(c)
	compare.Figures(c)
	if got := figureNames(v); !slices.Equal(got, first) {
		t.Errorf("figures after recomputing = %q, want %q", got, first)
	}
	if !slices.Equal(v.GetDiscarded(), []uint32{0}) {
		t.Errorf("discarded = %v, want [0]", v.GetDiscarded())
	}
	if f := figure(t, v, rps); len(f.GetValues()) != 3 || f.GetMedian() != 115 {
		t.Errorf("rps values %v, median %v; want 3 values, median 115", f.GetValues(), f.GetMedian())
	}
}

// TestRatiosToTheFirstVariant: with runs on both sides, each figure of a variant is a ratio to the first
// variant's with its interval: a p99 2.5x as high is decided (its interval excludes 1), a rate the same within
// the runs' spread is not; with one run a side there is no ratio.
func TestRatiosToTheFirstVariant(t *testing.T) {
	runs := func(rates []float64, p99s ...time.Duration) []*irsv1.WorkflowResult {
		var out []*irsv1.WorkflowResult
		for i, p := range p99s {
			out = append(out, loadRun(t, rates[i], p))
		}
		return out
	}
	c := &irsv1.Comparison{Phase: "steady", Variants: []*irsv1.Variant{
		{Name: "envoy", Runs: runs([]float64{100, 101, 99}, 40*time.Millisecond, 42*time.Millisecond, 41*time.Millisecond)},
		{Name: "linkerd", Runs: runs([]float64{99, 101, 100}, 100*time.Millisecond, 104*time.Millisecond, 102*time.Millisecond)},
		{Name: "once", Runs: runs([]float64{100}, 50*time.Millisecond)},
	}}
	compare.Figures(c)
	p := figure(t, c.GetVariants()[1], p99)
	if p.GetRatioTo() != "envoy" || p.GetRatioRuns() != 3 || p.GetRatioBaseRuns() != 3 || math.Abs(p.GetRatio()-2.48) > 0.05 ||
		p.GetRatioLow() <= 1 || p.GetRatioLow() >= p.GetRatio() || p.GetRatioHigh() <= p.GetRatio() {
		t.Errorf("linkerd p99 against envoy: %v; want about 2.48x, an interval above 1, 3 and 3 runs", p)
	}
	if r := figure(t, c.GetVariants()[1], rps); r.GetRatioLow() > 1 || r.GetRatioHigh() < 1 {
		t.Errorf("linkerd rps against envoy: [%g, %g], want an interval holding 1", r.GetRatioLow(), r.GetRatioHigh())
	}
	if o := figure(t, c.GetVariants()[2], p99); o.GetRatio() != 0 || o.GetRatioTo() != "" {
		t.Errorf("one run: ratio %g to %q, want none", o.GetRatio(), o.GetRatioTo())
	}
	if f := figure(t, c.GetVariants()[0], p99); f.GetRatio() != 0 {
		t.Errorf("the first variant has a ratio %g to itself", f.GetRatio())
	}
}
