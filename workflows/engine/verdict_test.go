package engine

import (
	"strings"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// twoGeneratorsYAML: two load generators into one server, over two phases of 2 s.
const twoGeneratorsYAML = `
name: two-generators
seed: 5
services:
  - name: gen-a
    worker: {load: {target: server, rate: 50}}
  - name: gen-b
    worker: {load: {target: server, rate: 50}}
  - name: server
    worker: {serve: {delay: 1ms}}
phases:
  - name: warm-up
    duration: 2s
  - name: spike
    duration: 2s
assertions:
  - {service: gen-b, phase: spike, expect: errors == 0}
`

// loadWindow is a load generator's window over interval k (1 s), answered ok requests (and refused the
// rest of sent).
func loadWindow(t *testing.T, service string, k int, sent, ok int64) sample {
	return sample{service: service, replica: service + "-0", stats: &irsv1.StatsSnapshot{
		WindowStart: timestamppb.New(t0.Add(time.Duration(k-1) * time.Second)), WindowEnd: timestamppb.New(t0.Add(time.Duration(k) * time.Second)),
		Load: []*irsv1.LoadStats{{Target: "server", Running: true, TargetRate: 50, Due: sent, Sent: sent,
			Outcomes: outcomes(map[int32]int64{200: ok}, map[string]int64{"refused": sent - ok}), Latency: wireHist(t, rec{time.Millisecond, ok})}}}}
}

// TestDeadGeneratorMakesTheRunInvalid: a load generator the timeline has sending in a phase that made no request
// there makes the run invalid, named, whether it reported nothing (killed for the whole phase) or reported sending
// nothing (its load could not start); errors == 0 over its nothing is no pass. With two generators, the other's
// figures once made such a run pass with a clean JUnit. A generator whose every request was refused measured an
// outage: the run stays valid and errors == 0 fails on the refusals.
func TestDeadGeneratorMakesTheRunInvalid(t *testing.T) {
	for _, tt := range []struct {
		name   string
		spikeB func(k int) []sample // gen-b's windows in the spike
		want   string               // the invalid reason; "" for a valid run
	}{
		{"silent for the whole phase", func(int) []sample { return nil }, "load generator gen-b made no request in spike, where the timeline has it sending: no replica of it reported sending"},
		{"reporting, sending nothing", func(k int) []sample { return []sample{loadWindow(t, "gen-b", k, 0, 0)} },
			"load generator gen-b made no request in spike, where the timeline has it sending: its replicas reported, with no request sent"},
		{"every request refused", func(k int) []sample { return []sample{loadWindow(t, "gen-b", k, 50, 0)} }, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := testEngine(t, twoGeneratorsYAML, 1, time.Second, nil)
			e.t0 = t0
			var samples []sample
			for k := 1; k <= 4; k++ {
				samples = append(samples, loadWindow(t, "gen-a", k, 50, 50))
				if k <= 2 {
					samples = append(samples, loadWindow(t, "gen-b", k, 50, 50))
				} else {
					samples = append(samples, tt.spikeB(k)...)
				}
			}
			feed(e, samples...)
			e.closeBuckets(4)
			e.mu.Lock()
			e.summarize(StatusPassed)
			e.mu.Unlock()
			if tt.want == "" {
				if e.res.GetStatus() != StatusFailed || len(e.res.GetInvalid()) != 0 {
					t.Errorf("status %s, invalid %q; want a valid run whose assertion failed", e.res.GetStatus(), e.res.GetInvalid())
				}
			} else if e.res.GetStatus() != StatusInvalid || len(e.res.GetInvalid()) != 1 || e.res.GetInvalid()[0] != tt.want {
				t.Errorf("status %s, invalid %q; want invalid: %q", e.res.GetStatus(), e.res.GetInvalid(), tt.want)
			}
			if a := e.res.GetAssertions()[0]; a.GetPassed() {
				t.Errorf("errors == 0 over gen-b's spike: %v; want no pass (no data, or its errors)", a)
			}
		})
	}
}

// TestSenders: which generators the timeline has sending in each phase, as load actions and durations make it.
func TestSenders(t *testing.T) {
	doc := strings.Replace(twoGeneratorsYAML, "  - name: spike\n    duration: 2s\n", `  - name: spike
    duration: 2s
    actions: [{load: {service: gen-b, stop: true}}]
  - name: quiet
    duration: 2s
  - name: again
    duration: 2s
    actions: [{at: 1s, load: {service: gen-b, set: {rate: 10}}}]
`, 1)
	doc = strings.Replace(doc, "{target: server, rate: 50}}\n  - name: gen-b", "{target: server, rate: 50, duration: 3s}}\n  - name: gen-b", 1)
	e := testEngine(t, doc, 1, time.Second, nil)
	got := map[string]string{}
	for _, p := range e.o.Timeline.Phases {
		var names []string
		for _, s := range []string{"gen-a", "gen-b"} {
			if e.senders[p.Name][s] {
				names = append(names, s)
			}
		}
		got[p.Name] = strings.Join(names, ",")
	}
	want := map[string]string{"warm-up": "gen-a,gen-b", "spike": "gen-a,gen-b", "quiet": "", "again": "gen-b"}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s: senders %q, want %q (all: %v)", p, got[p], w, got)
		}
	}
}

// TestPhaseRatesOverWholeIntervals: a phase that is no whole number of stats intervals holds whole intervals
// (each where its middle is), and its rates are over those: a steady 100 req/s reads 100 in both of two 2.5 s
// phases, where over their spans it read 80 and 120.
func TestPhaseRatesOverWholeIntervals(t *testing.T) {
	doc := strings.ReplaceAll(twoGeneratorsYAML, "duration: 2s", "duration: 2.5s")
	e := testEngine(t, doc, 1, time.Second, nil)
	e.t0 = t0
	var samples []sample
	for k := 1; k <= 5; k++ {
		samples = append(samples, loadWindow(t, "gen-a", k, 100, 100), loadWindow(t, "gen-b", k, 100, 100))
	}
	feed(e, samples...)
	e.closeBuckets(5)
	e.mu.Lock()
	e.summarize(StatusPassed)
	e.mu.Unlock()
	for _, p := range e.res.GetPhases() {
		for _, s := range p.GetServices() {
			if s.GetService() == "gen-a" && s.GetRps() != 100 {
				t.Errorf("%s: gen-a at %v req/s (%d requests), want 100", p.GetName(), s.GetRps(), s.GetRequests())
			}
		}
	}
}

// TestLatenessMakesAPhaseSaturated: a generator whose sends started maxLagMs late or more at p99 measured
// itself, even with its backlog worked off at every interval's end (its lag under maxLagMs).
func TestLatenessMakesAPhaseSaturated(t *testing.T) {
	gen := key{service: "gen", kind: kindLoad}
	for _, tt := range []struct {
		lateMs    float64
		saturated bool
	}{{237, true}, {20, false}} {
		a := newAcc()
		a.lagMs, a.due = 30, 1000
		a.lateness = newHist()
		_ = a.lateness.RecordValues(1000, 980) // 1 ms
		_ = a.lateness.RecordValues(int64(tt.lateMs*1000), 20)
		s := saturation(gen, a, "spike", lagDiagnosis{first: -1, last: -1, pressure: -1, scale: 1})
		if (s != nil) != tt.saturated {
			t.Errorf("sends %.0f ms late at p99: saturation %v, want saturated %v", tt.lateMs, s, tt.saturated)
		}
	}
}

// TestSidecarAssertionNotApplicable: a sidecar figure where the service has no sidecar (no mesh, ambient, a
// placement that leaves it out) is not applicable: never a pass (it passed with 0m), never a failure.
func TestSidecarAssertionNotApplicable(t *testing.T) {
	for _, tt := range []struct {
		mesh, service string
		na            bool
	}{
		{"", "server", true},
		{"mesh: {type: ambient}\n", "server", true},
		{"mesh: {type: envoy, sidecars: server-only}\n", "gen-a", true},
		{"mesh: {type: envoy, sidecars: server-only}\n", "server", false},
		{"mesh: {type: envoy}\n", "gen-a", false},
	} {
		doc := strings.Replace(twoGeneratorsYAML, "  - {service: gen-b, phase: spike, expect: errors == 0}",
			"  - {service: "+tt.service+", expect: sidecar_cpu_mcores < 50}", 1) + tt.mesh
		e := testEngine(t, doc, 1, time.Second, nil)
		r := e.assertions()[0]
		if r.GetNotApplicable() != tt.na || r.GetPassed() || (tt.na && !r.GetSkipped()) || (!tt.na && r.GetError() == "") {
			t.Errorf("%q %s: %v; want not applicable %v, never passed (applicable, with no sidecar measured: no data)", tt.mesh, tt.service, r, tt.na)
		}
	}
}
