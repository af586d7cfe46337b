package engine

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// usageBackend is a Backend whose processes' resource use the test sets (real CPU counters cannot be set).
// Only Usage may be called: the embedded nil Backend panics on anything else.
type usageBackend struct {
	workflows.Backend
	usage func() []workflows.Usage
}

func (b *usageBackend) Usage() []workflows.Usage { return b.usage() }

// shopYAML is a small valid workflow: a load generator, a service with two replicas that calls a third.
const shopYAML = `
name: shop
seed: 7
services:
  - name: shoppers
    worker:
      load: {target: storefront, rate: 25}
  - name: storefront
    replicas: 2
    worker:
      calls: [{service: checkout}]
  - name: checkout
    worker:
      serve: {delay: 1ms}
phases:
  - name: warm-up
    duration: 1s
  - name: spike
    duration: 1s
`

// testEngine builds an engine for a valid workflow document, as Run does, without starting anything.
func testEngine(t *testing.T, doc string, scale float64, interval time.Duration, b workflows.Backend) *engine {
	t.Helper()
	d, err := workflows.Parse([]byte(doc), "")
	if err != nil {
		t.Fatalf("parse workflow: %v", err)
	}
	if err := workflows.Validate(d, nil); err != nil {
		t.Fatalf("validate workflow: %v", err)
	}
	tl, err := workflows.NewTimeline(d.Workflow, scale)
	if err != nil {
		t.Fatalf("timeline: %v", err)
	}
	return newEngine(Options{Workflow: d.Workflow, Timeline: tl, Backend: b, Interval: interval})
}

// t0 is the start of the first phase in tests.
var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func proc(service string, pid int, cpuSeconds float64, rssMiB int64) workflows.Usage {
	return workflows.Usage{Service: service, Replica: fmt.Sprintf("%s-%d", service, pid), Kind: "worker",
		CPUSeconds: cpuSeconds, RSSBytes: rssMiB << 20}
}

// started gives a reading its process's start time, relative to t0.
func started(u workflows.Usage, at time.Duration) workflows.Usage {
	u.Started = t0.Add(at)
	return u
}

func usageClose(a, b serviceUsage) bool {
	near := func(x, y float64) bool { return math.Abs(x-y) < 1e-6 }
	return a.replicas == b.replicas && near(a.mcores, b.mcores) && near(a.mcoresMax, b.mcoresMax) &&
		near(a.rssMB, b.rssMB) && near(a.rssMBMax, b.rssMBMax)
}

func TestSampleUsage(t *testing.T) {
	type sampleStep struct {
		at    time.Duration
		procs []workflows.Usage
		want  map[string]serviceUsage
	}
	tests := []struct {
		name     string
		interval time.Duration
		steps    []sampleStep
	}{
		{
			name:     "the first sample is a baseline: memory but no CPU",
			interval: 250 * time.Millisecond,
			steps: []sampleStep{{at: 0,
				procs: []workflows.Usage{proc("storefront", 101, 5, 100), proc("storefront", 102, 7, 120), proc("checkout", 201, 1, 50)},
				want: map[string]serviceUsage{
					"storefront": {replicas: 2, rssMB: 220, rssMBMax: 120},
					"checkout":   {replicas: 1, rssMB: 50, rssMBMax: 50},
				}}},
		},
		{
			name:     "CPU over the interval is summed over a service's replicas",
			interval: 250 * time.Millisecond,
			steps: []sampleStep{
				{at: 0, procs: []workflows.Usage{proc("storefront", 101, 1, 100), proc("storefront", 102, 2, 300), proc("checkout", 201, 1, 50)},
					want: map[string]serviceUsage{"storefront": {replicas: 2, rssMB: 400, rssMBMax: 300}, "checkout": {replicas: 1, rssMB: 50, rssMBMax: 50}}},
				{at: 250 * time.Millisecond,
					procs: []workflows.Usage{proc("storefront", 101, 1.05, 100), proc("storefront", 102, 2.025, 310), proc("checkout", 201, 1.25, 60)},
					want: map[string]serviceUsage{
						"storefront": {mcores: 300, mcoresMax: 200, replicas: 2, rssMB: 410, rssMBMax: 310},
						"checkout":   {mcores: 1000, mcoresMax: 1000, replicas: 1, rssMB: 60, rssMBMax: 60},
					}},
				{at: 500 * time.Millisecond,
					procs: []workflows.Usage{proc("storefront", 101, 1.1, 100), proc("storefront", 102, 2.05, 310), proc("checkout", 201, 1.25, 60)},
					want: map[string]serviceUsage{
						// The busiest replica over what is kept of the last second: 0.1 s of CPU in 0.5 s.
						"storefront": {mcores: 300, mcoresMax: 200, replicas: 2, rssMB: 410, rssMBMax: 310},
						"checkout":   {mcores: 0, mcoresMax: 500, replicas: 1, rssMB: 60, rssMBMax: 60},
					}},
			},
		},
		{
			name:     "the busiest replica is measured over about a second: four 250ms samples",
			interval: 250 * time.Millisecond,
			steps: []sampleStep{
				// Replica 101 burns 0.1 s of CPU in the first interval, then nothing; 102 runs at 100m throughout.
				{at: 0, procs: []workflows.Usage{proc("storefront", 101, 0, 10), proc("storefront", 102, 0, 10)},
					want: map[string]serviceUsage{"storefront": {replicas: 2, rssMB: 20, rssMBMax: 10}}},
				{at: 250 * time.Millisecond, procs: []workflows.Usage{proc("storefront", 101, 0.1, 10), proc("storefront", 102, 0.025, 10)},
					want: map[string]serviceUsage{"storefront": {mcores: 500, mcoresMax: 400, replicas: 2, rssMB: 20, rssMBMax: 10}}},
				{at: 500 * time.Millisecond, procs: []workflows.Usage{proc("storefront", 101, 0.1, 10), proc("storefront", 102, 0.05, 10)},
					want: map[string]serviceUsage{"storefront": {mcores: 100, mcoresMax: 200, replicas: 2, rssMB: 20, rssMBMax: 10}}},
				{at: 750 * time.Millisecond, procs: []workflows.Usage{proc("storefront", 101, 0.1, 10), proc("storefront", 102, 0.075, 10)},
					want: map[string]serviceUsage{"storefront": {mcores: 100, mcoresMax: 100.0 / 0.75, replicas: 2, rssMB: 20, rssMBMax: 10}}},
				{at: time.Second, procs: []workflows.Usage{proc("storefront", 101, 0.1, 10), proc("storefront", 102, 0.1, 10)},
					want: map[string]serviceUsage{"storefront": {mcores: 100, mcoresMax: 100, replicas: 2, rssMB: 20, rssMBMax: 10}}},
				// The burst is now more than a second old: the busiest replica is 102 at 100m.
				{at: 1250 * time.Millisecond, procs: []workflows.Usage{proc("storefront", 101, 0.1, 10), proc("storefront", 102, 0.125, 10)},
					want: map[string]serviceUsage{"storefront": {mcores: 100, mcoresMax: 100, replicas: 2, rssMB: 20, rssMBMax: 10}}},
				{at: 1500 * time.Millisecond, procs: []workflows.Usage{proc("storefront", 101, 0.5, 10), proc("storefront", 102, 0.15, 10)},
					want: map[string]serviceUsage{"storefront": {mcores: 1700, mcoresMax: 400, replicas: 2, rssMB: 20, rssMBMax: 10}}},
			},
		},
		{
			name:     "with a 1s interval the busiest second is the interval",
			interval: time.Second,
			steps: []sampleStep{
				{at: 0, procs: []workflows.Usage{proc("checkout", 201, 3, 64)},
					want: map[string]serviceUsage{"checkout": {replicas: 1, rssMB: 64, rssMBMax: 64}}},
				{at: time.Second, procs: []workflows.Usage{proc("checkout", 201, 3.5, 64)},
					want: map[string]serviceUsage{"checkout": {mcores: 500, mcoresMax: 500, replicas: 1, rssMB: 64, rssMBMax: 64}}},
				{at: 2 * time.Second, procs: []workflows.Usage{proc("checkout", 201, 3.75, 64)},
					want: map[string]serviceUsage{"checkout": {mcores: 250, mcoresMax: 250, replicas: 1, rssMB: 64, rssMBMax: 64}}},
			},
		},
		{
			name:     "a process first seen later, started after the baseline, counts from zero at its start",
			interval: 250 * time.Millisecond,
			steps: []sampleStep{
				{at: 0, procs: []workflows.Usage{proc("storefront", 101, 1, 100)},
					want: map[string]serviceUsage{"storefront": {replicas: 1, rssMB: 100, rssMBMax: 100}}},
				{at: 250 * time.Millisecond, procs: []workflows.Usage{proc("storefront", 101, 1.05, 100), started(proc("storefront", 103, 0.1, 40), 150*time.Millisecond)},
					want: map[string]serviceUsage{"storefront": {mcores: 1200, mcoresMax: 1000, replicas: 2, rssMB: 140, rssMBMax: 100}}},
				{at: 500 * time.Millisecond, procs: []workflows.Usage{proc("storefront", 101, 1.1, 100), started(proc("storefront", 103, 0.125, 40), 150*time.Millisecond)},
					want: map[string]serviceUsage{"storefront": {mcores: 300, mcoresMax: 125 / 0.35, replicas: 2, rssMB: 140, rssMBMax: 100}}}, // 103 over its 350 ms
			},
		},
		{
			name:     "a process first seen later whose start is unknown starts from its first reading",
			interval: 250 * time.Millisecond,
			steps: []sampleStep{
				{at: 0, procs: []workflows.Usage{proc("storefront", 101, 1, 100)},
					want: map[string]serviceUsage{"storefront": {replicas: 1, rssMB: 100, rssMBMax: 100}}},
				{at: 250 * time.Millisecond, procs: []workflows.Usage{proc("storefront", 101, 1.05, 100), proc("storefront", 103, 30, 40)},
					want: map[string]serviceUsage{"storefront": {mcores: 200, mcoresMax: 200, replicas: 2, rssMB: 140, rssMBMax: 100}}},
				{at: 500 * time.Millisecond, procs: []workflows.Usage{proc("storefront", 101, 1.1, 100), proc("storefront", 103, 30.025, 40)},
					want: map[string]serviceUsage{"storefront": {mcores: 300, mcoresMax: 200, replicas: 2, rssMB: 140, rssMBMax: 100}}},
			},
		},
		{
			name:     "a process under a known name but started anew is a new process",
			interval: 250 * time.Millisecond,
			steps: []sampleStep{
				{at: 0, procs: []workflows.Usage{proc("storefront", 101, 1, 100), started(proc("storefront", 102, 2, 200), -time.Hour)},
					want: map[string]serviceUsage{"storefront": {replicas: 2, rssMB: 300, rssMBMax: 200}}},
				{at: 250 * time.Millisecond, procs: []workflows.Usage{proc("storefront", 101, 1.05, 100)},
					want: map[string]serviceUsage{"storefront": {mcores: 200, mcoresMax: 200, replicas: 1, rssMB: 100, rssMBMax: 100}}},
				{at: 500 * time.Millisecond, procs: []workflows.Usage{proc("storefront", 101, 1.1, 100), started(proc("storefront", 102, 0.05, 30), 300*time.Millisecond)},
					want: map[string]serviceUsage{"storefront": {mcores: 450, mcoresMax: 250, replicas: 2, rssMB: 130, rssMBMax: 100}}},
			},
		},
		{
			name:     "a counter that goes back is dropped, not taken for a new process's whole life",
			interval: 250 * time.Millisecond,
			steps: []sampleStep{
				{at: 0, procs: []workflows.Usage{started(proc("storefront", 101, 10, 100), -time.Hour)},
					want: map[string]serviceUsage{"storefront": {replicas: 1, rssMB: 100, rssMBMax: 100}}},
				{at: 250 * time.Millisecond, procs: []workflows.Usage{started(proc("storefront", 101, 10.05, 100), -time.Hour)},
					want: map[string]serviceUsage{"storefront": {mcores: 200, mcoresMax: 200, replicas: 1, rssMB: 100, rssMBMax: 100}}},
				{at: 500 * time.Millisecond, procs: []workflows.Usage{started(proc("storefront", 101, 1, 100), -time.Hour)},
					want: map[string]serviceUsage{"storefront": {mcores: 200, mcoresMax: 200, replicas: 1, rssMB: 100, rssMBMax: 100}}},
			},
		},
		{
			name:     "a service whose every process is gone is absent",
			interval: 250 * time.Millisecond,
			steps: []sampleStep{
				{at: 0, procs: []workflows.Usage{proc("checkout", 201, 1, 50)},
					want: map[string]serviceUsage{"checkout": {replicas: 1, rssMB: 50, rssMBMax: 50}}},
				{at: 250 * time.Millisecond, procs: nil, want: map[string]serviceUsage{}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var procs []workflows.Usage
			e := testEngine(t, shopYAML, 1, tt.interval, &usageBackend{usage: func() []workflows.Usage { return procs }})
			for _, st := range tt.steps {
				procs = st.procs
				got := e.sampleUsage(t0.Add(st.at))
				if len(got) != len(st.want) {
					t.Errorf("at %v: services %v, want %v", st.at, got, st.want)
				}
				for svc, want := range st.want {
					if g, ok := got[usageKey{service: svc, kind: workflows.UsageWorker}]; !ok || !usageClose(g, want) {
						t.Errorf("at %v: %s = %+v, want %+v", st.at, svc, g, want)
					}
				}
				var ids []string
				for _, p := range st.procs {
					ids = append(ids, usageID(p))
				}
				for _, id := range ids {
					if e.usage.procs[id] == nil {
						t.Errorf("at %v: %s sampled but not tracked", st.at, id)
					}
				}
			}
		})
	}
}

// window is a replica's stats over [from, to) after t0: every route served ok, and failed 503s.
func window(from, to time.Duration, ok, failed int64) *irsv1.StatsSnapshot {
	return &irsv1.StatsSnapshot{WindowStart: timestamppb.New(t0.Add(from)), WindowEnd: timestamppb.New(t0.Add(to)),
		Inbound: []*irsv1.RouteStats{{Route: "/", Outcomes: outcomes(map[int32]int64{200: ok, 503: failed}, nil),
			Latency: &irsv1.Histogram{}}}}
}

// feed passes samples through consumeSamples as the collector would, and returns when all are filed.
func feed(e *engine, samples ...sample) {
	col := &collector{out: make(chan sample, len(samples))}
	for _, s := range samples {
		col.out <- s
	}
	close(col.out)
	e.consumeSamples(col)
}

func TestConsumeSamplesBuckets(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	tests := []struct {
		name     string
		interval time.Duration
		from, to time.Duration
		want     int // the bucket, 0 for none
	}{
		{"a whole first interval", ms(250), 0, ms(250), 1},
		{"the end of an interval: a replica that just started", ms(250), ms(100), ms(250), 1},
		{"a whole later interval", ms(250), ms(1000), ms(1250), 5},
		{"the last interval of the timeline", ms(250), ms(1750), ms(2000), 8},
		{"a stalled stream's window of two intervals: the one its middle starts", ms(250), ms(250), ms(750), 3},
		{"a window straddling a boundary goes where its middle is", ms(250), ms(400), ms(550), 2},
		{"a window after the timeline is dropped", ms(250), ms(2000), ms(2250), 0},
		{"a window before the start is dropped", ms(250), -ms(250), 0, 0},
		{"a 100ms interval", ms(100), ms(700), ms(800), 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := testEngine(t, shopYAML, 1, tt.interval, nil)
			e.t0 = t0
			feed(e, sample{service: "storefront", replica: "storefront-1", stats: window(tt.from, tt.to, 10, 0)})
			var want []int
			if tt.want > 0 {
				want = []int{tt.want}
			}
			if got := slices.Sorted(maps.Keys(e.buckets)); !slices.Equal(got, want) {
				t.Fatalf("window [%v, %v) with interval %v filed in buckets %v, want %v", tt.from, tt.to, tt.interval, got, want)
			}
			if tt.want > 0 {
				k := key{service: "storefront", kind: kindServed}
				if got := e.buckets[tt.want][k].requests; got != 10 {
					t.Errorf("bucket %d: storefront served %d requests, want 10", tt.want, got)
				}
			}
		})
	}
}

// TestConsumeSamplesBoundary: a window whose middle is exactly on an interval boundary belongs to the interval
// that starts there, whatever the interval (intervals are [start, end)). A stalled stream makes such windows: it
// skips a boundary and sends one window of two intervals.
func TestConsumeSamplesBoundary(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	tests := []struct {
		name     string
		from, to time.Duration
		want     int
	}{
		{"middle at 300ms", ms(200), ms(400), 4},
		{"middle at 500ms", ms(400), ms(600), 6},
		{"middle at 700ms", ms(600), ms(800), 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := testEngine(t, shopYAML, 1, ms(100), nil)
			e.t0 = t0
			feed(e, sample{service: "storefront", replica: "storefront-1", stats: window(tt.from, tt.to, 10, 0)})
			if got := slices.Sorted(maps.Keys(e.buckets)); !slices.Equal(got, []int{tt.want}) {
				t.Errorf("window [%v, %v) with a 100ms interval filed in buckets %v, want [%d]", tt.from, tt.to, got, tt.want)
			}
		})
	}
}

// TestCloseBuckets: closed intervals become ticks (at their end, with the phase of their middle) and add up in
// their phase's and the run's accumulators, counts and resource samples alike.
func TestCloseBuckets(t *testing.T) {
	const interval = 250 * time.Millisecond
	e := testEngine(t, shopYAML, 1, interval, nil)
	e.t0 = t0
	var samples []sample
	for k := 1; k <= 8; k++ {
		from, to := time.Duration(k-1)*interval, time.Duration(k)*interval
		rate := 200.0
		if k > 4 {
			rate = 400
		}
		for _, r := range []string{"storefront-1", "storefront-2"} {
			s := window(from, to, 99, 1)
			s.Upstreams = []*irsv1.UpstreamStats{{Service: "checkout", Outcomes: outcomes(map[int32]int64{200: 50}, nil)}}
			samples = append(samples, sample{service: "storefront", replica: r, stats: s})
		}
		samples = append(samples, sample{service: "shoppers", replica: "shoppers-1", stats: &irsv1.StatsSnapshot{
			WindowStart: timestamppb.New(t0.Add(from)), WindowEnd: timestamppb.New(t0.Add(to)),
			Load: []*irsv1.LoadStats{{Target: "storefront", Running: true, TargetRate: rate, Sent: 200,
				Outcomes: outcomes(map[int32]int64{200: 198}, map[string]int64{"refused": 2})}},
		}})
	}
	feed(e, samples...)
	served, load := key{service: "storefront", kind: kindServed}, key{service: "shoppers", kind: kindLoad}
	for k := 1; k <= 8; k++ { // resource samples as tickLoop adds them: 100m×k in interval k
		a := e.buckets[k][served]
		a.usage, a.replicas = resourceUse{mcores: 100 * float64(k), mcoresMax: 60 * float64(k), rssMB: float64(k), rssMBMax: 1, measured: true}, 2
	}

	e.closeBuckets(4)
	ticks := func() (ts []float64, phases []string) {
		series, err := e.ticks.Ticks()
		if err != nil {
			t.Fatal(err)
		}
		for i, tick := range series {
			ts, phases = append(ts, tick.GetT()), append(phases, tick.GetPhase())
			if lt := e.rec.load[i]; lt.t != tick.GetT() || lt.requests != 200 || lt.failures != 2 {
				t.Errorf("the record's tick %d: %+v, want t %v, 200 requests, 2 failed (the load generator's)", i, lt, tick.GetT())
			}
		}
		return ts, phases
	}
	ts, phases := ticks()
	if want := []float64{0.25, 0.5, 0.75, 1}; !slices.Equal(ts, want) {
		t.Errorf("after closing 4 intervals: tick times %v, want %v", ts, want)
	}
	if want := slices.Repeat([]string{"warm-up"}, 4); !slices.Equal(phases, want) {
		t.Errorf("after closing 4 intervals: tick phases %v, want %v", phases, want)
	}
	if got := slices.Sorted(maps.Keys(e.buckets)); !slices.Equal(got, []int{5, 6, 7, 8}) {
		t.Errorf("open intervals after closing 4: %v, want [5 6 7 8]", got)
	}
	if _, ok := e.phaseAccs["spike"]; ok {
		t.Errorf("spike has accumulators before any of its intervals closed")
	}

	e.closeBuckets(8)
	e.closeBuckets(8) // nothing left to close
	ts, phases = ticks()
	if want := []float64{0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2}; !slices.Equal(ts, want) {
		t.Errorf("tick times %v, want %v", ts, want)
	}
	if want := append(slices.Repeat([]string{"warm-up"}, 4), slices.Repeat([]string{"spike"}, 4)...); !slices.Equal(phases, want) {
		t.Errorf("tick phases %v, want %v", phases, want)
	}
	if len(e.buckets) != 0 {
		t.Errorf("open intervals after closing all: %v, want none", slices.Sorted(maps.Keys(e.buckets)))
	}

	e.fullSeries() // as the run's end does: the engine keeps its record (runRecord) while it runs
	tick := e.res.Series[4]
	var names []string
	for _, p := range append(slices.Clone(tick.GetServices()), tick.GetEdges()...) {
		names = append(names, p.GetService()+">"+p.GetCallee()+":"+p.GetKind())
	}
	if want := []string{"shoppers>:load", "storefront>:served", "shoppers>storefront:edge", "storefront>checkout:edge"}; !slices.Equal(names, want) {
		t.Errorf("tick 5 points %v, want %v", names, want)
	}
	if p := tick.GetServices()[1]; p.GetRequests() != 200 || p.GetRps() != 800 || p.GetFailureRate() != 0.01 || p.GetCpuMcores() != 500 || p.GetReplicas() != 2 {
		t.Errorf("tick 5 storefront: requests %d, rps %v, failure rate %v, cpu %vm, replicas %d; want 200, 800, 0.01, 500m, 2",
			p.GetRequests(), p.GetRps(), p.GetFailureRate(), p.GetCpuMcores(), p.GetReplicas())
	}
	if p := tick.GetServices()[0]; p.GetTargetRate() != 400 || p.GetRps() != 800 {
		t.Errorf("tick 5 shoppers: target rate %v, rps %v; want 400, 800", p.GetTargetRate(), p.GetRps())
	}

	// A phase's resource use is the ledger's (TestLedger...), not its ticks': the counts only here.
	scopes := []struct {
		name                 string
		accs                 map[key]*acc
		requests, failures   int64
		loadRequests, target float64
	}{
		{"warm-up", e.phaseAccs["warm-up"], 800, 8, 800, 200},
		{"spike", e.phaseAccs["spike"], 800, 8, 800, 400},
		{"total", e.runAccs(), 1600, 16, 1600, 400},
	}
	for _, s := range scopes {
		t.Run(s.name, func(t *testing.T) {
			p := s.accs[served].point(served, 1, false)
			if p.GetRequests() != s.requests || p.GetFailures() != s.failures {
				t.Errorf("storefront requests, failures = %d, %d; want %d, %d", p.GetRequests(), p.GetFailures(), s.requests, s.failures)
			}
			if p.GetReplicas() != 2 {
				t.Errorf("storefront replicas %d, want 2 (the most seen in a tick)", p.GetReplicas())
			}
			l := s.accs[load].point(load, 1, false)
			if float64(l.GetRequests()) != s.loadRequests || l.GetTargetRate() != s.target || l.GetErrors()["refused"] != int64(s.loadRequests)/100 {
				t.Errorf("shoppers requests, target rate, refused = %d, %v, %d; want %v, %v, %v", l.GetRequests(), l.GetTargetRate(),
					l.GetErrors()["refused"], s.loadRequests, s.target, s.loadRequests/100)
			}
			edge := key{service: "storefront", callee: "checkout", kind: kindEdge}
			if got, want := s.accs[edge].requests, s.requests/2; got != want {
				t.Errorf("storefront->checkout requests = %d, want %d", got, want)
			}
		})
	}
}

// TestCloseBucketsPhase: a tick carries the phase its interval's middle is in, also where phases do not end on
// interval boundaries.
func TestCloseBucketsPhase(t *testing.T) {
	doc := strings.Replace(strings.Replace(shopYAML, "duration: 1s", "duration: 300ms", 1), "duration: 1s", "duration: 700ms", 1)
	e := testEngine(t, doc, 1, 250*time.Millisecond, nil)
	e.t0 = t0
	for k := 1; k <= 4; k++ {
		feed(e, sample{service: "storefront", stats: window(time.Duration(k-1)*250*time.Millisecond, time.Duration(k)*250*time.Millisecond, 10*int64(k), 0)})
	}
	e.closeBuckets(4)
	var phases []string
	series, err := e.ticks.Ticks()
	if err != nil {
		t.Fatal(err)
	}
	for _, tick := range series {
		phases = append(phases, tick.GetPhase())
	}
	if want := []string{"warm-up", "spike", "spike", "spike"}; !slices.Equal(phases, want) {
		t.Errorf("tick phases %v, want %v (warm-up 0-300ms, spike 300ms-1s)", phases, want)
	}
	served := key{service: "storefront", kind: kindServed}
	if got := e.phaseAccs["warm-up"][served].requests; got != 10 {
		t.Errorf("warm-up requests = %d, want 10 (interval 1)", got)
	}
	if got := e.phaseAccs["spike"][served].requests; got != 20+30+40 {
		t.Errorf("spike requests = %d, want 90 (intervals 2-4)", got)
	}
}

// TestTickLoop: at each interval's end the loop samples resource use into that interval and closes the one
// before it; when done closes, the last interval is closed too. Time is synctest's.
func TestTickLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		// Each storefront replica runs at 100m during warm-up (the first second) and 300m during the spike.
		cpu := func() float64 {
			s := time.Since(start).Seconds()
			return 0.1*min(s, 1) + 0.3*max(s-1, 0)
		}
		b := &usageBackend{usage: func() []workflows.Usage {
			return []workflows.Usage{proc("storefront", 101, cpu(), 100), proc("storefront", 102, cpu(), 50)}
		}}
		e := testEngine(t, shopYAML, 1, 250*time.Millisecond, b)
		e.t0 = start
		e.sampleUsage(start)
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { e.tickLoop(done) })
		time.Sleep(2*time.Second + 100*time.Millisecond)
		close(done)
		wg.Wait()

		e.fullSeries() // as the run's end does: the engine keeps its record (runRecord) while it runs
		if len(e.res.Series) != 8 {
			t.Fatalf("%d ticks, want 8", len(e.res.Series))
		}
		for i, tick := range e.res.Series {
			want := 200.0
			if i >= 4 {
				want = 600
			}
			if len(tick.GetServices()) != 1 {
				t.Errorf("tick %d: services %v, want storefront alone", i+1, tick.GetServices())
				continue
			}
			p := tick.GetServices()[0]
			if p.GetService() != "storefront" || p.GetKind() != kindServed || math.Abs(p.GetCpuMcores()-want) > 1e-6 ||
				p.GetReplicas() != 2 || p.GetRssMb() != 150 || p.GetRssMbMax() != 100 {
				t.Errorf("tick %d: %s %s cpu %vm, replicas %d, rss %vMB, rss max %vMB; want storefront served %vm, 2, 150MB, 100MB",
					i+1, p.GetService(), p.GetKind(), p.GetCpuMcores(), p.GetReplicas(), p.GetRssMb(), p.GetRssMbMax(), want)
			}
		}
		served := key{service: "storefront", kind: kindServed}
		for _, s := range []struct {
			name, span  string
			accs        map[key]*acc
			cpu, cpuMax float64
		}{
			{"warm-up", "warm-up", e.phaseAccs["warm-up"], 200, 100},
			{"spike", "spike", e.phaseAccs["spike"], 600, 300},
			{"total", "", e.runAccs(), 400, 300},
		} {
			p := e.spanAcc(s.span, served, s.accs[served]).point(served, 1, false)
			if math.Abs(p.GetCpuMcores()-s.cpu) > 1e-6 || math.Abs(p.GetCpuMcoresMax()-s.cpuMax) > 1e-6 {
				t.Errorf("%s: cpu %vm, cpu max %vm; want %vm, %vm", s.name, p.GetCpuMcores(), p.GetCpuMcoresMax(), s.cpu, s.cpuMax)
			}
		}
	})
}

// TestCloseBucketsLateWindow: a window that arrives after its interval was closed still counts in its phase and
// the run, and the series keeps one tick per interval (result.proto: "One point per interval").
func TestCloseBucketsLateWindow(t *testing.T) {
	const interval = 250 * time.Millisecond
	e := testEngine(t, shopYAML, 1, interval, nil)
	e.t0 = t0
	for k := 1; k <= 4; k++ {
		feed(e, sample{service: "storefront", stats: window(time.Duration(k-1)*interval, time.Duration(k)*interval, 100, 0)})
	}
	e.closeBuckets(3)
	feed(e, sample{service: "storefront", stats: window(2*interval, 3*interval, 7, 0)}) // interval 3, late
	e.closeBuckets(4)

	e.fullSeries()
	var ts []float64
	for _, tick := range e.res.Series {
		ts = append(ts, tick.GetT())
	}
	if want := []float64{0.25, 0.5, 0.75, 1}; !slices.Equal(ts, want) {
		t.Errorf("tick times %v, want %v (one per interval)", ts, want)
	}
	served := key{service: "storefront", kind: kindServed}
	if got := e.runAccs()[served].requests; got != 407 {
		t.Errorf("run total: %d requests, want 407 (the late window counts)", got)
	}
}

// TestSampleUsageStaleCounters: a cluster's counters are refreshed every few seconds and carry the time they
// were measured: a rate is over those times, and a counter not refreshed since the last sample keeps its rate.
func TestSampleUsageStaleCounters(t *testing.T) {
	var next []workflows.Usage
	e := testEngine(t, shopYAML, 1, time.Second, &usageBackend{usage: func() []workflows.Usage { return next }})
	c := func(measured time.Duration, cpu float64) []workflows.Usage {
		return []workflows.Usage{{Service: "storefront", Replica: "pod-a", Kind: workflows.UsageWorker,
			At: t0.Add(measured), CPUSeconds: cpu, RSSBytes: 10 << 20}}
	}
	for _, st := range []struct {
		sampled, measured time.Duration
		cpu, want         float64
	}{
		{0, 0, 1, 0}, // the baseline
		{time.Second, 900 * time.Millisecond, 1.45, 500},      // measured 100 ms before the sample
		{2 * time.Second, 900 * time.Millisecond, 1.45, 500},  // not refreshed: the same rate
		{3 * time.Second, 2900 * time.Millisecond, 2.45, 500}, // 1 CPU-s in the 2 s since the last refresh
		{4 * time.Second, 3900 * time.Millisecond, 2.45, 0},   // idle
	} {
		next = c(st.measured, st.cpu)
		got := e.sampleUsage(t0.Add(st.sampled))[usageKey{service: "storefront", kind: workflows.UsageWorker}]
		if math.Abs(got.mcores-st.want) > 1e-6 {
			t.Errorf("sample at %v (measured %v): %.1f mcores, want %.1f", st.sampled, st.measured, got.mcores, st.want)
		}
	}
}

// TestBusiestSecondStaysInItsPhase: a phase's busiest second counts only CPU measured in it. A cluster's
// counter refreshed every few seconds holds its rates between refreshes; held into the next phase, the busy
// phase's busiest second became the quiet phase's too (ztunnel's in a 120 req/s phase equalled the 300 req/s
// phase's exactly).
func TestBusiestSecondStaysInItsPhase(t *testing.T) {
	var next []workflows.Usage
	e := testEngine(t, twoPhasesYAML, 1, time.Second, &usageBackend{usage: func() []workflows.Usage { return next }})
	e.t0 = t0
	for _, st := range []struct {
		sampled, measured time.Duration
		cpu               float64
	}{
		{0, 0, 0},
		{time.Second, time.Second, 0.9},         // 900 mcores, in the busy phase (0-2 s)
		{2 * time.Second, 2 * time.Second, 1.8}, // 900
		{3 * time.Second, 2 * time.Second, 1.8}, // not refreshed: 900 held, in the quiet phase
		{4 * time.Second, 4 * time.Second, 2.2}, // 200 mcores over the last 2 s
		{5 * time.Second, 5 * time.Second, 2.3}, // 100
	} {
		next = []workflows.Usage{{Service: "storefront", Replica: "pod-a", Kind: workflows.UsageWorker, At: t0.Add(st.measured), CPUSeconds: st.cpu}}
		e.sampleUsage(t0.Add(st.sampled))
	}
	if got := e.usage.ledger.use("warm-up", ledgerKey{k: served}).mcoresMax; math.Abs(got-900) > 1e-6 {
		t.Errorf("busy phase: busiest %.0f mcores, want 900", got)
	}
	if got := e.usage.ledger.use("spike", ledgerKey{k: served}).mcoresMax; math.Abs(got-200) > 1e-6 {
		t.Errorf("quiet phase: busiest %.0f mcores, want 200 (measured in it), not the 900 held from the busy phase", got)
	}
}

// TestTickLoopNotHeldUpBySlowUsage: a resource sample that takes several intervals (a kubelet of a lost node
// that does not answer) does not hold up the intervals: the loop closes them without sampling until it is on
// time again, and when done closes every interval whose windows arrived is in the series, none dropped.
func TestTickLoopNotHeldUpBySlowUsage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		calls := 0
		b := &usageBackend{usage: func() []workflows.Usage {
			calls++
			if calls == 2 {
				time.Sleep(1200 * time.Millisecond) // almost five intervals
			}
			return []workflows.Usage{proc("storefront", 101, 1, 100)}
		}}
		e := testEngine(t, shopYAML, 1, 250*time.Millisecond, b)
		e.t0 = start
		var samples []sample
		for k := range 8 {
			from, to := time.Duration(k)*250*time.Millisecond, time.Duration(k+1)*250*time.Millisecond
			samples = append(samples, sample{service: "storefront", replica: "storefront-1", stats: &irsv1.StatsSnapshot{
				WindowStart: timestamppb.New(start.Add(from)), WindowEnd: timestamppb.New(start.Add(to)),
				Inbound: []*irsv1.RouteStats{{Route: "http1", Outcomes: outcomes(map[int32]int64{200: 10}, nil)}}}})
		}
		feed(e, samples...) // every window is in before the loop runs: the loop alone decides what is closed
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { e.tickLoop(done) })
		time.Sleep(1900 * time.Millisecond)
		e.mu.Lock()
		closedInTime := e.ticks.Len()
		e.mu.Unlock()
		time.Sleep(200 * time.Millisecond)
		close(done)
		wg.Wait()
		if closedInTime < 6 {
			t.Errorf("%d intervals closed by 1.9 s despite one slow sample, want the loop back on time (6 or more)", closedInTime)
		}
		e.fullSeries()
		if len(e.res.Series) != 8 {
			t.Fatalf("%d ticks, want all 8 intervals whose windows arrived", len(e.res.Series))
		}
		var reqs int64
		for _, tick := range e.res.Series {
			for _, p := range tick.GetServices() {
				reqs += p.GetRequests()
			}
		}
		if reqs != 80 || calls > 6 {
			t.Errorf("%d requests in the series (want 80), %d usage samples (want the slow one skipped over)", reqs, calls)
		}
	})
}

// TestUsageOfAProcessBackAfterAGap: a process missing from a few samples (its node's kubelet did not answer)
// takes up its counter where it left it: its CPU over the gap is spread over the gap, not charged to the
// interval it came back in as a new process's would be.
func TestUsageOfAProcessBackAfterAGap(t *testing.T) {
	var usage []workflows.Usage
	b := &usageBackend{usage: func() []workflows.Usage { return usage }}
	e := testEngine(t, shopYAML, 1, time.Second, b)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	usage = []workflows.Usage{proc("storefront", 101, 10, 100)}
	e.sampleUsage(at(0))
	usage = []workflows.Usage{proc("storefront", 101, 10.5, 100)}
	e.sampleUsage(at(1))
	usage = nil
	for s := 2; s <= 5; s++ {
		e.sampleUsage(at(s))
	}
	usage = []workflows.Usage{proc("storefront", 101, 13.5, 100)} // 3 s of CPU over the 5 s gap: 600m
	got := e.sampleUsage(at(6))[usageKey{service: "storefront", kind: workflows.UsageWorker}]
	if math.Abs(got.mcores-600) > 1e-6 {
		t.Errorf("back after a gap: %vm, want 600m (its CPU over the gap)", got.mcores)
	}
	usage = nil
	e.sampleUsage(at(6).Add(forgetAfter + time.Second))
	if len(e.usage.procs) != 0 {
		t.Errorf("tracked %v after it was missing for longer than %s, want it forgotten", slices.Collect(maps.Keys(e.usage.procs)), forgetAfter)
	}
}
