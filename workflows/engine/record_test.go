package engine

import (
	"testing"
	"time"
	"unsafe"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// TestRecordKeepsATicksSumsOnly: an hour of a soak's ticks (a load generator, two services, two edges, the
// machine's figures, an assertion on the 5xx rate) costs the engine's record one sum a tick; a generator's
// interval beyond maxLagMs, and the points of a scope a recovery assertion reads, are kept besides. The slim
// series before kept 112 bytes a tick, and every assertion's points.
func TestRecordKeepsATicksSumsOnly(t *testing.T) {
	doc := recoveryDoc(1) + `assertions:
  - {service: storefront, expect: "5xx_rate < 1%"}
  - {service: checkout, expect: "recovery_time < 5s"}
`
	e := testEngine(t, doc, 1, time.Second, nil)
	const ticks = 3600
	for i := range ticks {
		lag := 0.3
		if i == 1800 {
			lag = 150
		}
		e.rec.add(&irsv1.Tick{T: float64(i + 1), Phase: "spike",
			Services: []*irsv1.Point{
				{Service: "gen", Kind: kindLoad, Requests: 100, Failures: 1, LagMs: lag},
				{Service: "storefront", Kind: kindServed, Requests: 100, Failures: 1},
				{Service: "checkout", Kind: kindServed, Requests: 100, Failures: 2},
			},
			Edges: []*irsv1.Point{
				{Service: "gen", Callee: "storefront", Kind: kindEdge, Requests: 100},
				{Service: "storefront", Callee: "checkout", Kind: kindEdge, Requests: 100},
			},
			Machine: &irsv1.Machine{OversleepMs: 0.2, CpuPressure: 0.1}}, e.watches)
	}
	r := &e.rec
	if len(r.load) != ticks || r.load[ticks-1] != (loadTick{t: ticks, requests: 100, failures: 1}) {
		t.Errorf("load sums: %d, the last %+v; want %d, {t:%d requests:100 failures:1}", len(r.load), r.load[len(r.load)-1], ticks, ticks)
	}
	if len(r.lags) != 1 || r.lags[0] != (lagPoint{t: 1801, service: "gen", machine: true, oversleepMs: 0.2, cpuPressure: 0.1}) {
		t.Errorf("lags %+v, want the one interval beyond %d ms, with the machine's figures", r.lags, maxLagMs)
	}
	if len(r.watched) != ticks || len(r.scopes) != 1 || r.scopes[0] != (key{service: "checkout", kind: kindServed}) {
		t.Errorf("watched %d points of scopes %v; want %d of checkout's (the recovery assertion's) only", len(r.watched), r.scopes, ticks)
	}
	if got := r.firstSent; len(got) != 1 || got["gen"] != 1 {
		t.Errorf("first sent %v, want gen at 1", got)
	}
	if size := unsafe.Sizeof(loadTick{}); size != 24 {
		t.Errorf("a tick's sum is %d bytes, want 24", size)
	}
	series := r.watchedSeries()
	if len(series) != ticks || len(series[0].GetServices()) != 1 || series[0].GetServices()[0].GetFailureRate() != 0.02 {
		t.Errorf("watched series: %d ticks, the first %v; want %d, checkout's point with its failure rate 0.02", len(series), series[0], ticks)
	}
}
