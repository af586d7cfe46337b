package engine

import (
	"encoding/base64"
	"maps"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// rec is n latencies of d, for wireHist.
type rec struct {
	d time.Duration
	n int64
}

// wireHist encodes latencies as a worker does (worker/stats): a packed HDR histogram of microseconds with the
// IRS geometry, V2 compressed, base64.
func wireHist(t testing.TB, recs ...rec) *irsv1.Histogram {
	t.Helper()
	h := hdrhistogram.NewPacked(lowestMicros, highestMicros, sigFigs)
	for _, r := range recs {
		if err := h.RecordValues(r.d.Microseconds(), r.n); err != nil {
			t.Fatalf("record %v×%d: %v", r.d, r.n, err)
		}
	}
	enc, err := h.Encode()
	if err != nil {
		t.Fatalf("encode histogram: %v", err)
	}
	return &irsv1.Histogram{Hdr: string(enc), Count: h.TotalCount()}
}

// outcomes counts requests as a worker does: every status and error ends a request; 5xx and errors fail it.
func outcomes(statuses map[int32]int64, errs map[string]int64) *irsv1.Outcomes {
	o := &irsv1.Outcomes{Statuses: statuses, Errors: errs}
	for code, n := range statuses {
		o.Requests += n
		if code >= 500 {
			o.Failures += n
		}
	}
	for _, n := range errs {
		o.Requests += n
		o.Failures += n
	}
	return o
}

// approx reports whether got is want within HDR precision (3 significant digits: 0.1%).
func approx(got, want float64) bool {
	return math.Abs(got-want) <= math.Abs(want)*1e-3+1e-9
}

// accSummary is what a test checks of an accumulator.
type accSummary struct {
	Requests, Failures, LatencyCount, HopCount int64
	TargetRate                                 float64
}

func summarize(accs map[key]*acc) map[key]accSummary {
	out := map[key]accSummary{}
	for k, a := range accs {
		s := accSummary{Requests: a.requests, Failures: a.failures, TargetRate: a.targetRate}
		if a.latency != nil {
			s.LatencyCount = a.latency.TotalCount()
		}
		if a.hop != nil {
			s.HopCount = a.hop.TotalCount()
		}
		out[k] = s
	}
	return out
}

func TestAddSnapshotPoints(t *testing.T) {
	served := key{service: "checkout", kind: kindServed}
	tests := []struct {
		name    string
		service string
		snap    *irsv1.StatsSnapshot
		want    map[key]accSummary
	}{
		{
			name:    "inbound routes make one served point",
			service: "checkout",
			snap: &irsv1.StatsSnapshot{Inbound: []*irsv1.RouteStats{
				{Route: "/", Outcomes: outcomes(map[int32]int64{200: 98, 503: 2}, nil), Latency: wireHist(t, rec{10 * time.Millisecond, 100})},
				{Route: "/pay", Outcomes: outcomes(map[int32]int64{200: 50}, nil), Latency: wireHist(t, rec{20 * time.Millisecond, 50})},
			}},
			want: map[key]accSummary{served: {Requests: 150, Failures: 2, LatencyCount: 150}},
		},
		{
			name:    "requests in flight alone make a served point",
			service: "checkout",
			snap:    &irsv1.StatsSnapshot{Inbound: []*irsv1.RouteStats{{Route: "/", Outcomes: &irsv1.Outcomes{}, InFlight: 3}}},
			want:    map[key]accSummary{served: {}},
		},
		{
			name:    "an idle route makes no point",
			service: "checkout",
			snap:    &irsv1.StatsSnapshot{Inbound: []*irsv1.RouteStats{{Route: "/", Outcomes: &irsv1.Outcomes{}}}},
			want:    map[key]accSummary{},
		},
		{
			name:    "running load makes a load point and an edge to its target",
			service: "shoppers",
			snap: &irsv1.StatsSnapshot{Load: []*irsv1.LoadStats{{Target: "storefront", Running: true, TargetRate: 25, Sent: 50,
				Outcomes: outcomes(map[int32]int64{200: 49}, map[string]int64{"timeout": 1}), Latency: wireHist(t, rec{5 * time.Millisecond, 50})}}},
			want: map[key]accSummary{
				{service: "shoppers", kind: kindLoad}:                       {Requests: 50, Failures: 1, LatencyCount: 50, TargetRate: 25},
				{service: "shoppers", callee: "storefront", kind: kindEdge}: {Requests: 50, Failures: 1, LatencyCount: 50, TargetRate: 25},
			},
		},
		{
			name:    "a stopped load still counts the requests it ended but asks for no rate",
			service: "shoppers",
			snap: &irsv1.StatsSnapshot{Load: []*irsv1.LoadStats{{Target: "storefront", TargetRate: 25,
				Outcomes: outcomes(map[int32]int64{200: 10}, nil), Latency: wireHist(t, rec{5 * time.Millisecond, 10})}}},
			want: map[key]accSummary{
				{service: "shoppers", kind: kindLoad}:                       {Requests: 10, LatencyCount: 10},
				{service: "shoppers", callee: "storefront", kind: kindEdge}: {Requests: 10, LatencyCount: 10},
			},
		},
		{
			name:    "a running load that ended nothing yet still asks for its rate",
			service: "shoppers",
			snap:    &irsv1.StatsSnapshot{Load: []*irsv1.LoadStats{{Target: "storefront", Running: true, TargetRate: 400, Outcomes: &irsv1.Outcomes{}}}},
			want: map[key]accSummary{
				{service: "shoppers", kind: kindLoad}:                       {TargetRate: 400},
				{service: "shoppers", callee: "storefront", kind: kindEdge}: {TargetRate: 400},
			},
		},
		{
			name:    "a stopped load that sent nothing makes no point",
			service: "shoppers",
			snap:    &irsv1.StatsSnapshot{Load: []*irsv1.LoadStats{{Target: "storefront", TargetRate: 25, Outcomes: &irsv1.Outcomes{}}}},
			want:    map[key]accSummary{},
		},
		{
			name:    "upstreams make edge points with their hop histograms",
			service: "checkout",
			snap: &irsv1.StatsSnapshot{Upstreams: []*irsv1.UpstreamStats{
				{Service: "inventory", Outcomes: outcomes(map[int32]int64{200: 78, 503: 2}, nil),
					Latency: wireHist(t, rec{3 * time.Millisecond, 80}), Hop: wireHist(t, rec{200 * time.Microsecond, 84})},
				{Service: "payments", Outcomes: &irsv1.Outcomes{}, Skipped: 10},
			}},
			want: map[key]accSummary{
				{service: "checkout", callee: "inventory", kind: kindEdge}: {Requests: 80, Failures: 2, LatencyCount: 80, HopCount: 84},
			},
		},
		{
			name:    "an empty snapshot makes no point",
			service: "checkout",
			snap:    &irsv1.StatsSnapshot{},
			want:    map[key]accSummary{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			accs := map[key]*acc{}
			addSnapshot(accs, tt.service, tt.snap)
			if got := summarize(accs); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("accumulators:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestAddSnapshotMergesReplicas: two replicas' windows add up, and their histograms merge exactly, so the
// percentiles are those of all requests together, not an average of the replicas'.
func TestAddSnapshotMergesReplicas(t *testing.T) {
	a := &irsv1.StatsSnapshot{
		Inbound: []*irsv1.RouteStats{{Route: "/", Outcomes: outcomes(map[int32]int64{200: 990, 503: 10}, nil),
			Latency: wireHist(t, rec{10 * time.Millisecond, 1000})}},
		Upstreams: []*irsv1.UpstreamStats{{Service: "inventory",
			Outcomes: outcomes(map[int32]int64{200: 480, 503: 12}, map[string]int64{"refused": 4, "timeout": 4}),
			Latency:  wireHist(t, rec{4 * time.Millisecond, 500}), Hop: wireHist(t, rec{100 * time.Microsecond, 500})}},
	}
	b := &irsv1.StatsSnapshot{
		Inbound: []*irsv1.RouteStats{{Route: "/", Outcomes: outcomes(map[int32]int64{200: 1000}, nil),
			Latency: wireHist(t, rec{30 * time.Millisecond, 1000})}},
		Upstreams: []*irsv1.UpstreamStats{{Service: "inventory",
			Outcomes: outcomes(map[int32]int64{200: 495, 503: 3}, map[string]int64{"refused": 2}),
			Latency:  wireHist(t, rec{6 * time.Millisecond, 500}), Hop: wireHist(t, rec{300 * time.Microsecond, 500})}},
	}
	accs := map[key]*acc{}
	addSnapshot(accs, "checkout", a)
	addSnapshot(accs, "checkout", b)
	if len(accs) != 2 {
		t.Fatalf("got %d points (%v), want 2: checkout served and checkout->inventory", len(accs), summarize(accs))
	}

	served := key{service: "checkout", kind: kindServed}
	p := accs[served].point(served, 10, true)
	counts := []struct {
		name      string
		got, want float64
	}{
		{"requests", float64(p.GetRequests()), 2000},
		{"failures", float64(p.GetFailures()), 10},
		{"failure_rate", p.GetFailureRate(), 10.0 / 2000},
		{"rps over 10s", p.GetRps(), 200},
		{"latency count", float64(p.GetLatency().GetCount()), 2000},
	}
	for _, c := range counts {
		if c.got != c.want {
			t.Errorf("served %s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if want := map[int32]int64{200: 1990, 503: 10}; !maps.Equal(p.GetStatuses(), want) {
		t.Errorf("served statuses = %v, want %v", p.GetStatuses(), want)
	}
	if len(p.GetErrors()) != 0 {
		t.Errorf("served errors = %v, want none", p.GetErrors())
	}
	latencies := []struct {
		name      string
		got, want float64
	}{
		{"p50", p.GetP50Ms(), 10},
		{"p90", p.GetP90Ms(), 30},
		{"p99", p.GetP99Ms(), 30},
		{"p99.9", p.GetP999Ms(), 30},
		{"max", p.GetMaxMs(), 30},
		{"mean", p.GetMeanMs(), 20},
		{"histogram min", p.GetLatency().GetMinMs(), 10},
	}
	for _, l := range latencies {
		if !approx(l.got, l.want) {
			t.Errorf("served %s = %vms, want %vms (within 0.1%%)", l.name, l.got, l.want)
		}
	}

	edge := key{service: "checkout", callee: "inventory", kind: kindEdge}
	e := accs[edge].point(edge, 10, false)
	if e.GetRequests() != 1000 || e.GetFailures() != 25 {
		t.Errorf("edge requests, failures = %d, %d; want 1000, 25", e.GetRequests(), e.GetFailures())
	}
	if want := map[int32]int64{200: 975, 503: 15}; !maps.Equal(e.GetStatuses(), want) {
		t.Errorf("edge statuses = %v, want %v", e.GetStatuses(), want)
	}
	if want := map[string]int64{"refused": 6, "timeout": 4}; !maps.Equal(e.GetErrors(), want) {
		t.Errorf("edge errors = %v, want %v", e.GetErrors(), want)
	}
	if !approx(e.GetFailureRate(), 0.025) {
		t.Errorf("edge failure rate = %v, want 0.025", e.GetFailureRate())
	}
	for _, l := range []struct {
		name      string
		got, want float64
	}{
		{"p50", e.GetP50Ms(), 4}, {"p99", e.GetP99Ms(), 6}, {"hop p50", e.GetHopP50Ms(), 0.1}, {"hop p99", e.GetHopP99Ms(), 0.3},
	} {
		if !approx(l.got, l.want) {
			t.Errorf("edge %s = %vms, want %vms (within 0.1%%)", l.name, l.got, l.want)
		}
	}
	if e.GetLatency() != nil {
		t.Errorf("edge point without histogram asked has latency %v, want nil", e.GetLatency())
	}
}

// TestAddSnapshotTargetRate: a service's target rate is the sum over its replicas whose load is running.
func TestAddSnapshotTargetRate(t *testing.T) {
	load := func(running bool, rate float64) *irsv1.StatsSnapshot {
		return &irsv1.StatsSnapshot{Load: []*irsv1.LoadStats{{Target: "storefront", Running: running, TargetRate: rate,
			Sent: 10, Outcomes: outcomes(map[int32]int64{200: 10}, nil)}}}
	}
	tests := []struct {
		name  string
		snaps []*irsv1.StatsSnapshot
		want  float64
	}{
		{"one replica", []*irsv1.StatsSnapshot{load(true, 25)}, 25},
		{"two running replicas", []*irsv1.StatsSnapshot{load(true, 25), load(true, 25)}, 50},
		{"a stopped replica adds nothing", []*irsv1.StatsSnapshot{load(true, 25), load(false, 25), load(true, 30)}, 55},
		{"every replica stopped", []*irsv1.StatsSnapshot{load(false, 25), load(false, 25)}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			accs := map[key]*acc{}
			for _, s := range tt.snaps {
				addSnapshot(accs, "shoppers", s)
			}
			for _, k := range []key{{service: "shoppers", kind: kindLoad}, {service: "shoppers", callee: "storefront", kind: kindEdge}} {
				if got := accs[k].point(k, 1, false).GetTargetRate(); got != tt.want {
					t.Errorf("%+v target rate = %v, want %v", k, got, tt.want)
				}
			}
		})
	}
}

// TestAddSnapshotBadHistogram: a histogram that does not decode is dropped; the counts beside it still count.
func TestAddSnapshotBadHistogram(t *testing.T) {
	good := wireHist(t, rec{10 * time.Millisecond, 100})
	tests := []struct {
		name string
		hdr  string
	}{
		{"not base64", "not base64!"},
		{"base64 of garbage", base64.StdEncoding.EncodeToString([]byte("definitely not an HDR histogram"))},
		{"too short", base64.StdEncoding.EncodeToString([]byte{0x1c, 0x84})},
		{"truncated encoding", truncated(t, good.GetHdr())},
		{"empty encoding with a count", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := &irsv1.StatsSnapshot{
				Inbound:   []*irsv1.RouteStats{{Route: "/", Outcomes: outcomes(map[int32]int64{200: 100}, nil), Latency: &irsv1.Histogram{Hdr: tt.hdr, Count: 100}}},
				Upstreams: []*irsv1.UpstreamStats{{Service: "inventory", Outcomes: outcomes(map[int32]int64{200: 100}, nil), Latency: good, Hop: &irsv1.Histogram{Hdr: tt.hdr, Count: 100}}},
			}
			accs := map[key]*acc{}
			addSnapshot(accs, "checkout", bad)
			served := key{service: "checkout", kind: kindServed}
			if p := accs[served].point(served, 1, true); p.GetRequests() != 100 || p.GetLatency() != nil || p.GetP99Ms() != 0 {
				t.Errorf("served after a bad histogram: requests %d, latency %v, p99 %vms; want 100, nil, 0",
					p.GetRequests(), p.GetLatency(), p.GetP99Ms())
			}
			edge := key{service: "checkout", callee: "inventory", kind: kindEdge}
			if p := accs[edge].point(edge, 1, false); p.GetHopP99Ms() != 0 || !approx(p.GetP99Ms(), 10) {
				t.Errorf("edge with a bad hop histogram: hop p99 %vms, p99 %vms; want 0, 10", p.GetHopP99Ms(), p.GetP99Ms())
			}

			// A good window of another replica still adds its histogram.
			addSnapshot(accs, "checkout", &irsv1.StatsSnapshot{Inbound: []*irsv1.RouteStats{{Route: "/",
				Outcomes: outcomes(map[int32]int64{200: 100}, nil), Latency: good}}})
			if p := accs[served].point(served, 1, true); p.GetRequests() != 200 || p.GetLatency().GetCount() != 100 {
				t.Errorf("served after a good window: requests %d, histogram count %d; want 200, 100",
					p.GetRequests(), p.GetLatency().GetCount())
			}
		})
	}
}

// truncated returns a valid encoding cut in the middle of its compressed payload (its header still claims the
// whole length).
func truncated(t *testing.T, hdr string) string {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(hdr)
	if err != nil {
		t.Fatalf("decode a good histogram: %v", err)
	}
	return base64.StdEncoding.EncodeToString(raw[:len(raw)/2])
}

// TestPointHistogram: a point with its histogram carries an encoding that decodes to the same requests.
func TestPointHistogram(t *testing.T) {
	accs := map[key]*acc{}
	addSnapshot(accs, "storefront", &irsv1.StatsSnapshot{Inbound: []*irsv1.RouteStats{{Route: "/",
		Outcomes: outcomes(map[int32]int64{200: 300}, nil),
		Latency:  wireHist(t, rec{2 * time.Millisecond, 100}, rec{8 * time.Millisecond, 199}, rec{500 * time.Millisecond, 1})}}})
	k := key{service: "storefront", kind: kindServed}

	if p := accs[k].point(k, 1, false); p.GetLatency() != nil {
		t.Errorf("withHist=false: latency %v, want nil", p.GetLatency())
	}
	p := accs[k].point(k, 1, true)
	w := p.GetLatency()
	if w == nil {
		t.Fatal("withHist=true: no latency histogram")
	}
	h, err := hdrhistogram.Decode([]byte(w.GetHdr()))
	if err != nil {
		t.Fatalf("decode the point's histogram: %v", err)
	}
	if h.TotalCount() != 300 || w.GetCount() != 300 {
		t.Errorf("histogram count: decoded %d, field %d; want 300", h.TotalCount(), w.GetCount())
	}
	if !approx(float64(h.Max())/1000, 500) || !approx(float64(h.Min())/1000, 2) {
		t.Errorf("decoded min, max = %dus, %dus; want about 2000us, 500000us", h.Min(), h.Max())
	}
	summary := []struct {
		name        string
		hist, point float64
	}{
		{"p50", w.GetP50Ms(), p.GetP50Ms()}, {"p90", w.GetP90Ms(), p.GetP90Ms()}, {"p99", w.GetP99Ms(), p.GetP99Ms()},
		{"p99.9", w.GetP999Ms(), p.GetP999Ms()}, {"max", w.GetMaxMs(), p.GetMaxMs()}, {"mean", w.GetMeanMs(), p.GetMeanMs()},
	}
	for _, s := range summary {
		if s.hist != s.point {
			t.Errorf("histogram %s = %vms, point's = %vms; want equal", s.name, s.hist, s.point)
		}
	}
}

// TestPointUsage: a point shows the resource use its accumulator carries: a tick's as sampled, a span's as the
// ledger gives it (withUsage), the sidecars' only where they were measured.
func TestPointUsage(t *testing.T) {
	a := newAcc()
	a.usage = resourceUse{mcores: 120, mcoresMax: 80, rssMB: 64, rssMBMax: 32, measured: true}
	p := a.point(key{service: "storefront", kind: kindServed}, 1, true)
	if got := [4]float64{p.GetCpuMcores(), p.GetCpuMcoresMax(), p.GetRssMb(), p.GetRssMbMax()}; got != [4]float64{120, 80, 64, 32} {
		t.Errorf("cpu_mcores, cpu_mcores_max, rss_mb, rss_mb_max = %v, want [120 80 64 32]", got)
	}
	if p.GetSidecars() != 0 || p.GetSidecarCpuMcores() != 0 {
		t.Errorf("sidecars %d at %vm without any measured, want none", p.GetSidecars(), p.GetSidecarCpuMcores())
	}
	a.sidecars = 2
	b := a.withUsage(resourceUse{mcores: 10, measured: true}, resourceUse{mcores: 40, mcoresMax: 25, rssMB: 30, rssMBMax: 15, measured: true})
	p = b.point(key{service: "storefront", kind: kindServed}, 1, true)
	if p.GetCpuMcores() != 10 || p.GetSidecarCpuMcores() != 40 || p.GetSidecarCpuMcoresMax() != 25 || p.GetSidecarRssMb() != 30 || p.GetSidecars() != 2 {
		t.Errorf("with a span's use: cpu %vm, sidecars %d at %vm (max %vm, %v MiB); want 10m, 2 at 40m (25m, 30 MiB)",
			p.GetCpuMcores(), p.GetSidecars(), p.GetSidecarCpuMcores(), p.GetSidecarCpuMcoresMax(), p.GetSidecarRssMb())
	}
	if a.usage.mcores != 120 {
		t.Errorf("withUsage changed the accumulator it copied: %vm, want 120m", a.usage.mcores)
	}
}

// TestMergeKeepsResourcesApart: merge adds counts and histograms but not resource use (a span's comes from the
// ledger).
func TestMergeKeepsResourcesApart(t *testing.T) {
	b := newAcc()
	addSnapshot(map[key]*acc{{service: "x", kind: kindServed}: b}, "x", &irsv1.StatsSnapshot{Inbound: []*irsv1.RouteStats{{
		Route: "/", Outcomes: outcomes(map[int32]int64{200: 5, 500: 1}, map[string]int64{"reset": 1}), Latency: wireHist(t, rec{time.Millisecond, 7})}}})
	b.usage, b.replicas = resourceUse{mcores: 100, mcoresMax: 60, rssMB: 30, rssMBMax: 15, measured: true}, 2

	a := newAcc()
	a.merge(b)
	a.merge(b)
	if a.requests != 14 || a.failures != 4 || a.latency.TotalCount() != 14 || a.statuses[500] != 2 || a.errors["reset"] != 2 {
		t.Errorf("after two merges: requests %d, failures %d, histogram %d, 500s %d, resets %d; want 14, 4, 14, 2, 2",
			a.requests, a.failures, a.latency.TotalCount(), a.statuses[500], a.errors["reset"])
	}
	if a.usage != (resourceUse{}) {
		t.Errorf("merge copied resource use %+v, want none", a.usage)
	}
	if a.replicas != 2 {
		t.Errorf("replicas = %d, want 2 (the most seen)", a.replicas)
	}
}

// TestRetriesPerEdge: the retries a worker counts per upstream reach its edge, summed over replicas and
// intervals; the edge's failures are the calls that failed after every retry.
func TestRetriesPerEdge(t *testing.T) {
	b := map[key]*acc{}
	for range 2 {
		addSnapshot(b, "checkout", &irsv1.StatsSnapshot{Upstreams: []*irsv1.UpstreamStats{{Service: "payments",
			Outcomes: outcomes(map[int32]int64{200: 90, 503: 4}, map[string]int64{"timeout": 1}), Retries: 7}}})
	}
	total := map[key]*acc{}
	for k, a := range b {
		total[k] = newAcc()
		total[k].merge(a)
	}
	k := key{service: "checkout", callee: "payments", kind: kindEdge}
	p := total[k].point(k, 1, false)
	if p.GetRetries() != 14 || p.GetFailures() != 10 {
		t.Errorf("edge: %d retries, %d failures; want 14 and 10 (after every retry)", p.GetRetries(), p.GetFailures())
	}
}

// TestLatenessOfLoad: a load generator's sends' lateness is merged over its replicas and over windows into its
// load point (percentiles, and the histogram where asked), and nowhere else: its edge to its target carries the
// target's latency, not the generator's schedule.
func TestLatenessOfLoad(t *testing.T) {
	accs := map[key]*acc{}
	for _, late := range [][]rec{{{100 * time.Microsecond, 98}, {2 * time.Millisecond, 2}}, {{100 * time.Microsecond, 100}}} {
		addSnapshot(accs, "loadgen", &irsv1.StatsSnapshot{Load: []*irsv1.LoadStats{{Target: "server", Sent: 100,
			Outcomes: outcomes(map[int32]int64{200: 100}, nil), Latency: wireHist(t, rec{time.Millisecond, 100}),
			Lateness: wireHist(t, late...)}}})
	}
	load := key{service: "loadgen", kind: kindLoad}
	interval := newAcc()
	interval.merge(accs[load])
	p := interval.point(load, 2, true)
	if !approx(p.GetLatenessP50Ms(), 0.1) || !approx(p.GetLatenessP999Ms(), 2) || p.GetLateness().GetCount() != 200 {
		t.Errorf("load lateness p50 %v, p99.9 %v ms over %d sends; want 0.1, 2 over the 200 of both replicas",
			p.GetLatenessP50Ms(), p.GetLatenessP999Ms(), p.GetLateness().GetCount())
	}
	edge := key{service: "loadgen", callee: "server", kind: kindEdge}
	if e := accs[edge].point(edge, 2, true); e.GetLatenessP99Ms() != 0 || e.GetLateness() != nil {
		t.Errorf("the generator's edge has lateness %v ms (%v), want none", e.GetLatenessP99Ms(), e.GetLateness())
	}
}

// BenchmarkAddSnapshot: what ingesting one replica's window costs the engine (a load generator's: its
// latency, hop and lateness histograms of a few hundred buckets each), in time and bytes allocated. A long run
// ingests several a second, for its whole length.
func BenchmarkAddSnapshot(b *testing.B) {
	var spread []rec
	for i := range 300 {
		spread = append(spread, rec{time.Duration(200+i*37) * time.Microsecond, int64(1 + i%7)})
	}
	snap := &irsv1.StatsSnapshot{Load: []*irsv1.LoadStats{{Target: "server", Sent: 1000, Outcomes: outcomes(map[int32]int64{200: 1000}, nil),
		Latency: wireHist(b, spread...), Hop: wireHist(b, spread...), Lateness: wireHist(b, spread[:50]...)}}}
	accs := map[key]*acc{}
	b.ReportAllocs()
	for b.Loop() {
		addSnapshot(accs, "loadgen", snap)
	}
}
