package engine

import (
	"slices"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// grayYAML makes the oldest of three servers answer 503 at 4s, and heals it at 8s.
const grayYAML = `
name: gray
seed: 3
services:
  - name: loadgen
    worker: {load: {target: client, rate: 100}}
  - name: client
    replicas: 2
    worker: {calls: [{service: server}]}
  - name: server
    replicas: 3
    worker: {serve: {delay: 1ms}}
phases:
  - name: steady
    duration: 4s
  - name: gray
    duration: 4s
    actions: [{configure: {service: server, select: oldest, set: {serve: {status: {503: 100%}}}}}]
  - name: healed
    duration: 2s
    actions: [{configure: {service: server, select: previous, clear: [serve.status]}}]
`

// graySamples are every replica's windows of a run of grayYAML, interval by interval (1 s): 100 req/s from the
// load generator through two clients to three servers, server-0 failing every request from 4s to 8s. In the
// interval ending at 6s client-1 also met two 503s a proxy made and a reset.
func graySamples(t *testing.T) []sample {
	var out []sample
	for k := 1; k <= 10; k++ {
		gray := k >= 5 && k <= 8
		window := func(s *irsv1.StatsSnapshot) *irsv1.StatsSnapshot {
			s.WindowStart = timestamppb.New(t0.Add(time.Duration(k-1) * time.Second))
			s.WindowEnd = timestamppb.New(t0.Add(time.Duration(k) * time.Second))
			return s
		}
		loadOK, clientFailed, loadLatency := int64(100), int64(0), 10*time.Millisecond
		if gray {
			loadOK, clientFailed, loadLatency = 70, 15, 12*time.Millisecond
		}
		out = append(out, sample{service: "loadgen", replica: "loadgen-0", stats: window(&irsv1.StatsSnapshot{
			Load: []*irsv1.LoadStats{{Target: "client", Running: true, Sent: 100,
				Outcomes: outcomes(map[int32]int64{200: loadOK, 503: 100 - loadOK}, nil), Latency: wireHist(t, rec{loadLatency, 100})}}})})
		for c := range 2 {
			calls := outcomes(map[int32]int64{200: 50 - clientFailed, 503: clientFailed}, nil)
			if c == 1 && k == 6 {
				calls = outcomes(map[int32]int64{200: 35, 503: 15}, map[string]int64{"reset": 1})
				calls.ProxyStatuses, calls.ProxyCauses = map[int32]int64{503: 2}, map[string]int64{"UF": 2}
			}
			out = append(out, sample{service: "client", replica: []string{"client-0", "client-1"}[c], stats: window(&irsv1.StatsSnapshot{
				Inbound: []*irsv1.RouteStats{{Route: "/", Outcomes: outcomes(map[int32]int64{200: 50 - clientFailed, 503: clientFailed}, nil)}},
				Upstreams: []*irsv1.UpstreamStats{{Service: "server", Outcomes: calls,
					Latency: wireHist(t, rec{5 * time.Millisecond, calls.GetRequests()})}}})})
		}
		for r, served := range []int64{33, 33, 34} {
			status := int32(200)
			if gray && r == 0 {
				status = 503
			}
			out = append(out, sample{service: "server", replica: []string{"server-0", "server-1", "server-2"}[r], stats: window(&irsv1.StatsSnapshot{
				Inbound: []*irsv1.RouteStats{{Route: "/", Outcomes: outcomes(map[int32]int64{status: served}, nil)}}})})
		}
	}
	return out
}

// TestFaultDamage computes a gray fault's blast radius from every replica's windows: its window ends at the
// clients' first clean interval after the heal (their recovery after it is measured), the load generators'
// damage is a kill's, the edges that saw errors come with their split and their
// caller replicas, and the hit replica's share of the traffic and the callers' view before and after.
func TestFaultDamage(t *testing.T) {
	e := testEngine(t, grayYAML, 1, time.Second, nil)
	e.t0 = t0
	if e.windows == nil || !e.faulted["server"] {
		t.Fatalf("windows kept %v, services faulted %v: want them kept for server", e.windows != nil, e.faulted)
	}
	feed(e, graySamples(t)...)
	e.closeBuckets(10)
	live := []workflows.Replica{{ID: "server-0"}, {ID: "server-1"}, {ID: "server-2"}}
	e.recordConfigure(t0.Add(4*time.Second), e.o.Timeline.Steps[0], live[:1], 3)
	e.recordConfigure(t0.Add(8*time.Second), e.o.Timeline.Steps[1], live[:1], 3)
	if err := e.finish(StatusPassed); err != nil {
		t.Fatal(err)
	}
	if len(e.res.GetFaults()) != 1 {
		t.Fatalf("%d faults, want 1", len(e.res.GetFaults()))
	}
	f := e.res.GetFaults()[0]
	if f.GetKind() != FaultGray || f.GetT() != 4 || f.GetHealed() != 8 || f.GetUntil() != 9 || f.GetPhase() != "gray" ||
		!slices.Equal(f.GetReplicas(), []string{"server-0"}) {
		t.Errorf("fault %s at %v healed %v until %v in %q on %v; want gray at 4 healed at 8, until 9, in gray, on server-0",
			f.GetKind(), f.GetT(), f.GetHealed(), f.GetUntil(), f.GetPhase(), f.GetReplicas())
	}
	if f.GetRecovery() != 4 || !f.GetRecovered() || f.GetLost() != 120 {
		t.Errorf("recovery %v s (recovered %v), %d lost; want 4 s, recovered after the heal, 120 lost",
			f.GetRecovery(), f.GetRecovered(), f.GetLost())
	}
	want := []*irsv1.EdgeDamage{
		{Caller: "client", Callee: "server", Requests: 501, Errors: 121, AppErrors: 118, ProxyErrors: 2, TransportErrors: 1,
			ProxyCauses: map[string]int64{"UF": 2}, CallerReplicas: []*irsv1.ReplicaErrors{
				{Replica: "client-1", Requests: 251, Errors: 61}, {Replica: "client-0", Requests: 250, Errors: 60}}},
		{Caller: "loadgen", Callee: "client", Requests: 500, Errors: 120, AppErrors: 120,
			CallerReplicas: []*irsv1.ReplicaErrors{{Replica: "loadgen-0", Requests: 500, Errors: 120}}},
	}
	if len(f.GetEdges()) != len(want) {
		t.Fatalf("edges %v, want %v", f.GetEdges(), want)
	}
	for i, w := range want {
		if !proto.Equal(f.GetEdges()[i], w) {
			t.Errorf("edge %d = %v, want %v", i, f.GetEdges()[i], w)
		}
	}
	before, after := f.GetBefore(), f.GetAfter()
	if before.GetStart() != 0 || before.GetEnd() != 4 || before.GetRequests() != 400 || before.GetHitRequests() != 132 || !approx(before.GetHitShare(), 0.33) {
		t.Errorf("before: %v; want 0-4s, server-0 132 of 400 (33%%)", before)
	}
	if after.GetStart() != 4 || after.GetEnd() != 9 || after.GetRequests() != 500 || after.GetHeldEnd() != 8 ||
		after.GetHeldRequests() != 400 || after.GetHitRequests() != 132 || !approx(after.GetHitShare(), 0.33) {
		t.Errorf("after: %v; want 4-9s, 500 served, server-0 still 132 of the 400 while it held (to 8 s)", after)
	}
	for _, w := range []*irsv1.FaultWindow{before, after} {
		if len(w.GetCallers()) != 1 || w.GetCallers()[0].GetService() != "client" || !approx(w.GetCallers()[0].GetP50Ms(), 5) {
			t.Errorf("callers %v; want client's p50 of 5 ms", w.GetCallers())
		}
	}
	for _, w := range []struct {
		name     string
		window   *irsv1.FaultWindow
		failed   int64
		requests [3]int64
	}{{"before", before, 0, [3]int64{132, 132, 136}}, {"after", after, 132, [3]int64{165, 165, 170}}} {
		want := []*irsv1.ReplicaErrors{{Replica: "server-0", Requests: w.requests[0], Errors: w.failed},
			{Replica: "server-1", Requests: w.requests[1]}, {Replica: "server-2", Requests: w.requests[2]}}
		if got := w.window.GetReplicas(); len(got) != 3 || !proto.Equal(got[0], want[0]) || !proto.Equal(got[1], want[1]) || !proto.Equal(got[2], want[2]) {
			t.Errorf("replicas %s: %v, want %v", w.name, got, want)
		}
	}
	if c := after.GetCallers()[0]; c.GetRequests() != 501 || c.GetFailures() != 121 || before.GetCallers()[0].GetFailures() != 0 {
		t.Errorf("client's calls after: %d, %d failed (before: %d failed); want 501, 121 (0)", c.GetRequests(), c.GetFailures(),
			before.GetCallers()[0].GetFailures())
	}
}

// TestFaultWindows: the window before a fault holds at most 10 intervals and none before the previous fault; a
// fault's own window runs to its clients' first clean interval after its heal (a kill's: its replacements
// ready), whatever other faults do, or to the end of the run when it is not healed; the faults whose windows
// overlap are named. A gray failure once read harmless, "measured" over 3 ms, because a kill of another
// service at the same moment ended its window.
func TestFaultWindows(t *testing.T) {
	e := testEngine(t, grayYAML, 1, time.Second, nil)
	e.t0, e.end = t0, 30*time.Second
	e.res.Faults = []*irsv1.FaultRecord{
		{Kind: FaultKill, Service: "server", T: 14, Replicas: []string{"server-1"}},
		{Kind: FaultGray, Service: "server", T: 14.003, Replicas: []string{"server-0"}, Healed: proto.Float64(24)},
		{Kind: FaultKill, Service: "server", T: 20.5, Replicas: []string{"server-2"}},
	}
	e.boundaries = []float64{14, 14.003, 20.5, 24}
	e.res.Kills = []*irsv1.KillRecord{{Service: "server", Replica: "server-1", Killed: 14, ReplacementReady: proto.Float64(16.5)},
		{Service: "server", Replica: "server-2", Killed: 20.5}}
	for k := 1; k <= 30; k++ {
		e.windows[k] = []replicaWindow{{service: "server", replica: "server-0", served: 10}, {service: "server", replica: "server-1", served: 30}}
		failures := int64(0)
		if k >= 15 && k <= 18 || k >= 24 && k <= 26 { // the kill's errors until 18 s; the gray failure's after its heal
			failures = 20
		}
		e.rec.load = append(e.rec.load, loadTick{t: float64(k), requests: 100, failures: failures})
	}
	e.faultDamage()
	first, gray, last := e.res.GetFaults()[0], e.res.GetFaults()[1], e.res.GetFaults()[2]
	if first.GetUntil() != 19 || gray.GetUntil() != 27 || last.GetUntil() != 30 {
		t.Errorf("windows end at %v, %v, %v; want 19 (the first clean interval after the replacement), 27 (after the heal), 30 (not healed)",
			first.GetUntil(), gray.GetUntil(), last.GetUntil())
	}
	if !first.GetRecovered() || first.GetRecovery() != 4 || gray.GetRecovery() != 26-14.003 || !gray.GetRecovered() {
		t.Errorf("recovery %v (%v), %v (%v); want 4 s (recovered), 11.997 s (recovered after the heal)",
			first.GetRecovery(), first.GetRecovered(), gray.GetRecovery(), gray.GetRecovered())
	}
	if b := first.GetBefore(); b.GetStart() != 4 || b.GetEnd() != 14 || !approx(b.GetHitShare(), 0.75) {
		t.Errorf("before the first fault: %v; want the 10 intervals 4-14s, server-1 75%%", b)
	}
	if gray.GetBefore() != nil {
		t.Errorf("before the gray failure, 3 ms after the kill: %v; want none (no interval since the kill)", gray.GetBefore())
	}
	if b := last.GetBefore(); b.GetStart() != 15 || b.GetEnd() != 20 {
		t.Errorf("before the last fault: %v; want 15-20s (the whole intervals since the previous fault)", b)
	}
	if a := gray.GetAfter(); a.GetStart() != 14 || a.GetEnd() != 27 {
		t.Errorf("the gray failure's window: %v; want 14-27s, its own, whatever the kills did", a)
	}
	if first.GetHealed() != 16.5 || last.Healed != nil || gray.GetHealed() != 24 {
		t.Errorf("healed %v, %v, %v; want the kill at its replacement (16.5), the gray failure at 24, the last not", first.Healed, gray.Healed, last.Healed)
	}
	if !slices.Equal(first.GetOverlaps(), []int32{1}) || !slices.Equal(gray.GetOverlaps(), []int32{0, 2}) || !slices.Equal(last.GetOverlaps(), []int32{1}) {
		t.Errorf("overlaps %v, %v, %v; want [1], [0 2], [1]", first.GetOverlaps(), gray.GetOverlaps(), last.GetOverlaps())
	}
}

// TestHitShareWhileTheFaultHeld: a fault's hit share is taken over the part of its window while it held: the
// intervals most of which lay before its heal. The clients' recovery after a heal is in the window, and with it
// the healed replica's return to the pool; counted, it read as the mesh still sending a frozen sidecar's replica
// a fifth of the traffic.
func TestHitShareWhileTheFaultHeld(t *testing.T) {
	for _, tt := range []struct {
		name             string
		t, healed        float64
		heldEnd          float64
		held, hit, total int64
	}{
		{"healed early in an interval", 4.02, 7.3, 7, 150, 6, 350},
		{"healed late in an interval", 4.02, 7.7, 8, 200, 8, 350},
		{"held under half an interval", 4.6, 4.9, 5, 50, 2, 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := testEngine(t, grayYAML, 1, time.Second, nil)
			e.t0, e.end = t0, 12*time.Second
			e.res.Faults = []*irsv1.FaultRecord{{Kind: FaultGray, Service: "server", T: tt.t, Replicas: []string{"server-0"}, Healed: proto.Float64(tt.healed)}}
			e.boundaries = []float64{tt.t, tt.healed}
			for k := 1; k <= 12; k++ {
				served := int64(2) // frozen: the mesh sends it almost nothing
				if float64(k-1) >= tt.healed || float64(k) <= tt.t {
					served = 25
				}
				e.windows[k] = []replicaWindow{{service: "server", replica: "server-0", served: served}, {service: "server", replica: "server-1", served: 50 - served}}
				failures := int64(0)
				if float64(k) > tt.t && float64(k-1) < tt.healed+2 { // the clients recover two seconds after the heal
					failures = 10
				}
				e.rec.load = append(e.rec.load, loadTick{t: float64(k), requests: 100, failures: failures})
			}
			e.faultDamage()
			a := e.res.GetFaults()[0].GetAfter()
			if a.GetHeldEnd() != tt.heldEnd || a.GetHeldRequests() != tt.held || a.GetHitRequests() != tt.hit ||
				!approx(a.GetHitShare(), float64(tt.hit)/float64(tt.held)) || a.GetRequests() != tt.total {
				t.Errorf("after: %v; want held to %v s, server-0 %d of %d while held, %d over the window", a, tt.heldEnd, tt.hit, tt.held, tt.total)
			}
		})
	}
}

// TestNetworkFaultWindow: a fault that hits no one service (a partition, a slowed link) has every edge as its
// callers, before and after, so that what it did to each call (its errors, its added latency) is in its record;
// it had no figures at all, and the side-by-side table read 0 errors beside records that held hundreds.
func TestNetworkFaultWindow(t *testing.T) {
	e := testEngine(t, grayYAML, 1, time.Second, nil)
	e.t0, e.networkFaults = t0, true
	feed(e, graySamples(t)...)
	e.closeBuckets(10)
	e.mu.Lock()
	e.addFault(4, workflows.Step{Phase: "gray", Path: "phases[1].actions[0]", At: 4 * time.Second},
		&irsv1.FaultRecord{Kind: FaultPartition, Target: "node-1 | node-2", Healed: proto.Float64(8)})
	e.boundaries = append(e.boundaries, 8)
	e.mu.Unlock()
	if err := e.finish(StatusPassed); err != nil {
		t.Fatal(err)
	}
	f := e.res.GetFaults()[0]
	var names []string
	for _, c := range f.GetAfter().GetCallers() {
		names = append(names, c.GetService()+"->"+c.GetCallee())
	}
	if !slices.Equal(names, []string{"client->server", "loadgen->client"}) {
		t.Fatalf("after: callers %v, want every edge", names)
	}
	if lg := f.GetAfter().GetCallers()[1]; lg.GetFailures() != 120 || !approx(lg.GetP50Ms(), 12) {
		t.Errorf("loadgen->client after: %d failed, p50 %v ms; want 120, 12 ms", lg.GetFailures(), lg.GetP50Ms())
	}
	if lg := f.GetBefore().GetCallers()[1]; lg.GetFailures() != 0 || !approx(lg.GetP50Ms(), 10) {
		t.Errorf("loadgen->client before: %d failed, p50 %v ms; want 0, 10 ms", lg.GetFailures(), lg.GetP50Ms())
	}
	if f.GetUntil() != 9 || !f.GetRecovered() {
		t.Errorf("until %v, recovered %v; want 9 (the first clean interval after the heal), true", f.GetUntil(), f.GetRecovered())
	}
}

// TestNoFaultsNoWindows: a run without faults keeps no replica's windows.
func TestNoFaultsNoWindows(t *testing.T) {
	e := testEngine(t, shopYAML, 1, time.Second, nil)
	if e.windows != nil || len(e.faulted) != 0 {
		t.Errorf("windows kept: %v, services faulted %v; want none", e.windows != nil, e.faulted)
	}
}

// TestRecoveryFrom: how long until the load generators stayed under 1 % again within a window, and the requests
// lost until then.
func TestRecoveryFrom(t *testing.T) {
	ticks := []loadTick{{1, 100, 0}, {2, 100, 20}, {3, 100, 5}, {4, 100, 0}, {5, 100, 0}, {6, 100, 50}}
	tests := []struct {
		name     string
		t, until float64
		want     damage
	}{
		{name: "recovered", t: 1.5, until: 4.5, want: damage{recovery: 1.5, recovered: true, lost: 25}},
		{name: "still failing at the window's end", t: 1.5, until: 2.5, want: damage{recovery: 0.5, lost: 25}},
		{name: "no harm", t: 3.5, until: 4.5, want: damage{recovered: true}},
		{name: "the interval the window's end fell in is the next one's", t: 3.5, until: 5.5, want: damage{recovered: true}},
		{name: "at the end of the run, the last interval counts", t: 3.5, until: 6, want: damage{recovery: 2.5, lost: 50}},
		{name: "failing at the end of the run", t: 4.5, until: 6, want: damage{recovery: 1.5, lost: 50}},
	}
	for _, tt := range tests {
		if got := recoveryFrom(ticks, faultSpan{t: tt.t, until: tt.until, interval: 1, runEnd: 6}); got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
