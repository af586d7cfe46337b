package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// loadWindows returns a load generator's windows over intervals 1..n of the interval: 100/s asked, evenly
// spaced, and per interval the given change of its backlog (requests due and not sent), so that it reports its
// oldest unsent request as backlog/100 s old.
func loadWindows(interval time.Duration, backlog []int64) []sample {
	var out []sample
	var level int64
	for i, d := range backlog {
		level += d
		from, to := time.Duration(i)*interval, time.Duration(i+1)*interval
		sent := int64(25)
		out = append(out, sample{service: "shoppers", replica: "shoppers-0", stats: &irsv1.StatsSnapshot{
			WindowStart: timestamppb.New(t0.Add(from)), WindowEnd: timestamppb.New(t0.Add(to)),
			Load: []*irsv1.LoadStats{{Target: "storefront", Running: true, TargetRate: 100, Due: sent + d, Sent: sent,
				Unsent: d, Blocked: max(d, 0), LagMs: float64(level) * 10, Outcomes: outcomes(map[int32]int64{200: sent}, nil)}},
		}})
	}
	return out
}

// TestSaturation: a generator whose backlog grows in a phase falls behind its schedule: the phase's point says
// by how much, the result lists it, and the run is invalid whatever its assertions say; a backlog worked off
// within the bound is not saturation.
func TestSaturation(t *testing.T) {
	const interval = 250 * time.Millisecond
	for _, tc := range []struct {
		name       string
		backlog    []int64 // per interval: 4 in warm-up, 4 in spike
		wantStatus string
		wantSat    string
	}{
		{name: "on time", backlog: []int64{0, 0, 0, 0, 0, 0, 0, 0}, wantStatus: StatusPassed},
		{name: "a backlog worked off", backlog: []int64{0, 0, 5, -5, 8, -8, 0, 0}, wantStatus: StatusPassed},
		// +20 per interval at 100/s: 200 ms behind after the first interval of spike, 800 ms at its end.
		{name: "falls behind in spike", backlog: []int64{0, 0, 0, 0, 20, 20, 20, 20}, wantStatus: StatusInvalid,
			wantSat: "shoppers in spike: 800ms behind, 80 unsent of 180 due, 80 blocked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := testEngine(t, shopYAML, 1, interval, nil)
			e.t0 = t0
			feed(e, loadWindows(interval, tc.backlog)...)
			e.closeBuckets(8)
			e.finish(StatusPassed)
			if e.res.GetStatus() != tc.wantStatus {
				t.Errorf("status %q, want %q", e.res.GetStatus(), tc.wantStatus)
			}
			var got []string
			for _, s := range e.res.GetSaturation() {
				got = append(got, fmt.Sprintf("%s in %s: %.0fms behind, %d unsent of %d due, %d blocked", s.GetService(),
					s.GetPhase(), s.GetLagMs(), s.GetUnsent(), s.GetDue(), s.GetBlocked()))
				if !strings.Contains(s.GetDetail(), "connection") {
					t.Errorf("detail %q does not say that connections were short", s.GetDetail())
				}
			}
			if strings.Join(got, "; ") != tc.wantSat {
				t.Errorf("saturation %q, want %q", strings.Join(got, "; "), tc.wantSat)
			}
			for _, tick := range e.res.GetSeries() {
				p := tick.GetServices()[0]
				if p.GetDue() != p.GetSent()+p.GetUnsent() {
					t.Errorf("tick %v: due %d != sent %d + unsent %d", tick.GetT(), p.GetDue(), p.GetSent(), p.GetUnsent())
				}
			}
		})
	}
}

// TestFinishInterrupted: a run interrupted in its second phase reports what happened up to the interrupt: the
// phase it fell in ends there, the phases after it are not listed, the total's rates are over the time run, the
// interval the interrupt fell in counts, and an assertion on a phase that never ran says so.
func TestFinishInterrupted(t *testing.T) {
	const interval = 250 * time.Millisecond
	doc := shopYAML + `  - name: cool-down
    duration: 1s
assertions:
  - {service: shoppers, phase: spike, expect: rps > 50}
  - {service: shoppers, phase: cool-down, expect: rps > 50}
`
	e := testEngine(t, doc, 1, interval, nil)
	e.t0 = t0
	e.end = 1300 * time.Millisecond // interrupted 300 ms into spike
	var samples []sample
	for k := 1; k <= 6; k++ { // interval 6 ends after the interrupt: its window is cut there
		from, to := time.Duration(k-1)*interval, min(time.Duration(k)*interval, e.end)
		s := window(from, to, 25, 0)
		samples = append(samples, sample{service: "storefront", replica: "storefront-1", stats: s})
	}
	feed(e, samples...)
	e.closeBuckets(6)
	e.finish(StatusInterrupted)
	var phases []string
	for _, p := range e.res.GetPhases() {
		phases = append(phases, fmt.Sprintf("%s %v-%v", p.GetName(), p.GetStart(), p.GetEnd()))
	}
	if want := "warm-up 0-1, spike 1-1.3"; strings.Join(phases, ", ") != want {
		t.Errorf("phases %q, want %q", strings.Join(phases, ", "), want)
	}
	total := e.res.GetTotal()
	if total.GetEnd() != 1.3 || len(total.GetServices()) != 1 {
		t.Fatalf("total ends at %v with %d points, want 1.3 and 1", total.GetEnd(), len(total.GetServices()))
	}
	// 6 windows of 25 requests over 1.3 s.
	if p := total.GetServices()[0]; p.GetRequests() != 150 || p.GetRps() < 115 || p.GetRps() > 116 {
		t.Errorf("total: %d requests at %.1f/s, want 150 at 115.4/s", p.GetRequests(), p.GetRps())
	}
	if spike := e.res.GetPhases()[1].GetServices()[0]; spike.GetRequests() != 50 {
		t.Errorf("spike: %d requests, want 50 (two windows, the interrupted one included)", spike.GetRequests())
	}
	last := e.res.GetSeries()[len(e.res.GetSeries())-1]
	if p := last.GetServices()[0]; last.GetT() != 1.5 || p.GetRps() != 500 {
		t.Errorf("last tick at %v: %.0f/s, want 1.5 and 500/s (25 requests in the 50 ms before the interrupt)", last.GetT(), p.GetRps())
	}
	as := e.res.GetAssertions()
	if len(as) != 2 || as[0].GetError() != "" || !strings.Contains(as[1].GetError(), "did not run") {
		t.Errorf("assertions %v, want the spike one measured and the cool-down one not run", as)
	}
	if e.res.GetStatus() != StatusInterrupted {
		t.Errorf("status %q, want interrupted", e.res.GetStatus())
	}
}

// TestALowRateRequestAboutToBeSentIsNotSaturation: at 4/s, a snapshot that catches one request between its due
// time and its send shows a backlog of 1; the generator says it is a fraction of a millisecond behind, and the
// run stands (a backlog of 1 read as 1/rate behind made it 250 ms, and the run invalid).
func TestALowRateRequestAboutToBeSentIsNotSaturation(t *testing.T) {
	const interval = 250 * time.Millisecond
	e := testEngine(t, shopYAML, 1, interval, nil)
	e.t0 = t0
	var windows []sample
	for i := range 8 {
		from, to := time.Duration(i)*interval, time.Duration(i+1)*interval
		ls := &irsv1.LoadStats{Target: "storefront", Running: true, TargetRate: 4, Due: 1, Sent: 1,
			Outcomes: outcomes(map[int32]int64{200: 1}, nil)}
		if i == 5 {
			ls.Due, ls.Unsent, ls.LagMs = 2, 1, 0.3
		}
		if i == 6 {
			ls.Due, ls.Sent, ls.Unsent = 1, 2, -1
		}
		windows = append(windows, sample{service: "shoppers", replica: "shoppers-0", stats: &irsv1.StatsSnapshot{
			WindowStart: timestamppb.New(t0.Add(from)), WindowEnd: timestamppb.New(t0.Add(to)), Load: []*irsv1.LoadStats{ls}}})
	}
	feed(e, windows...)
	e.closeBuckets(8)
	e.finish(StatusPassed)
	if e.res.GetStatus() != StatusPassed || len(e.res.GetSaturation()) != 0 {
		t.Errorf("status %q, saturation %v; want passed and none", e.res.GetStatus(), e.res.GetSaturation())
	}
}

// TestSaturationNamesItsCause: a generator behind its schedule is diagnosed from when it was behind and how the
// machine was then; before, a starved machine or a cold sidecar was blamed on connections or replicas.
func TestSaturationNamesItsCause(t *testing.T) {
	e := &engine{res: &irsv1.WorkflowResult{}, o: Options{Timeline: &workflows.Timeline{Scale: 1}}}
	tick := func(at, lag, oversleep float64) *irsv1.Tick {
		return &irsv1.Tick{T: at, Services: []*irsv1.Point{{Service: "gen", Kind: kindLoad, LagMs: lag, Requests: 20}},
			Machine: &irsv1.Machine{OversleepMs: oversleep, CpuPressure: 0.7}}
	}
	gen := key{service: "gen", kind: kindLoad}
	for _, tt := range []struct {
		name    string
		series  []*irsv1.Tick
		blocked int64
		want    string
		// The generator's own lateness (all its sends alike, ms; 0: not recorded) and CPU a replica.
		lateMs, cpu float64
	}{
		{"a starved machine", []*irsv1.Tick{tick(11, 5, 2), tick(12, 300, 180), tick(13, 250, 90)}, 40,
			"the machine starved it: while it was behind, a 10 ms sleep on the runner's machine overslept by up to 180 ms, and tasks waited for a CPU 70 % of the time", 0, 0},
		{"a cold start", []*irsv1.Tick{tick(11, 400, 3), tick(12, 150, 2), tick(13, 5, 1), tick(14, 3, 1)}, 30,
			"a cold start: it was behind only in the phase's first 2 s", 0, 0},
		{"not a cold start: it sent before the phase", []*irsv1.Tick{tick(9, 5, 1), tick(11, 400, 3), tick(12, 150, 2)}, 30,
			"too few connections: 30 requests (100 % of those due) became due while every connection was busy", 0, 0},
		{"too few connections", []*irsv1.Tick{tick(11, 5, 1), tick(15, 300, 3), tick(16, 350, 2)}, 40,
			"too few connections: 40 requests (100 % of those due) became due while every connection was busy", 0, 0},
		{"its own CPU", []*irsv1.Tick{tick(15, 300, 3)}, 0, "its worker could not send fast enough (CPU) while the runner's machine was not starved", 0, 0},
		{"its CPU taken by others (a node the runner does not see)", []*irsv1.Tick{tick(15, 300, 3)}, 0,
			"its CPU was not its own: the sends it slept for woke up to 150 ms late (p99) while its worker used 120 millicores a replica", 150, 120},
		{"its CPU taken by its own work", []*irsv1.Tick{tick(15, 300, 3)}, 0,
			"its worker could not keep up with its own work: it used 950 millicores a replica, and the sends it slept for woke up to 150 ms late", 150, 950},
		{"its own CPU, on time", []*irsv1.Tick{tick(15, 300, 3)}, 0,
			"its worker could not send fast enough (CPU: 950 millicores a replica) though its sends woke on time (0.3 ms late at p99)", 0.3, 950},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// From the engine's record (which the run's end reads too).
			for _, ended := range []bool{false} {
				e.rec = runRecord{}
				for _, tick := range tt.series {
					e.rec.add(tick, e.watches)
				}
				a := newAcc()
				a.lagMs, a.blocked = 400, tt.blocked
				if tt.lateMs > 0 {
					a.lateness = newHist()
					_ = a.lateness.RecordValues(int64(tt.lateMs*1000), 100)
					a.usage, a.replicas = resourceUse{mcores: 2 * tt.cpu, measured: true}, 2
				}
				s := saturation(gen, a, "spike", e.lagged(gen, 10, 20))
				if s == nil || !strings.Contains(s.GetDetail(), tt.want) {
					t.Errorf("ended %v: detail %q, want %q", ended, s.GetDetail(), tt.want)
				}
			}
		})
	}
}

// TestSaturationNamesEveryCause: with 77 % of due requests waiting for one of 2 connections on a machine also
// busy, every cause is named, the strongest evidence first, and none says the opposite of another's fix (a busy
// machine was blamed alone, with "more connections would not help"; 64 connections took p50 from 527 ms to 8.6 ms).
func TestSaturationNamesEveryCause(t *testing.T) {
	a := newAcc()
	a.lagMs, a.due, a.blocked = 900, 2500, 1925
	d := lagDiagnosis{first: 1, last: 30, pressure: 0.4, oversleepMs: 60, intervals: 30, scale: 1}
	s := saturation(key{service: "gen", kind: kindLoad}, a, "spike", d)
	if s == nil {
		t.Fatal("no saturation")
	}
	conn := strings.Index(s.GetDetail(), "too few connections: 1925 requests (77 % of those due)")
	machine := strings.Index(s.GetDetail(), "the machine starved it")
	if !strings.HasPrefix(s.GetDetail(), "2 causes, the strongest evidence first") || conn < 0 || machine < conn {
		t.Errorf("detail %q: want both causes, connections first", s.GetDetail())
	}
	if strings.Contains(s.GetDetail(), "would not help") {
		t.Errorf("detail %q says more connections would not help, the fix of the first cause", s.GetDetail())
	}
}

// TestSaturationSeesTheMeasuredNodesStarved: the measured services' own machines are watched too (their
// goroutines' wait to run, from every worker's stats): when the nodes they run on were starved while the
// generator was behind, that is named, where it once said "raise load.connections".
func TestSaturationSeesTheMeasuredNodesStarved(t *testing.T) {
	e := &engine{res: &irsv1.WorkflowResult{}, o: Options{Timeline: &workflows.Timeline{Scale: 1}}}
	for _, tk := range []*irsv1.Tick{
		{T: 11, Services: []*irsv1.Point{{Service: "gen", Kind: kindLoad, LagMs: 5}, {Service: "api", Kind: kindServed, SchedWaitMs: 2}}},
		{T: 12, Services: []*irsv1.Point{{Service: "gen", Kind: kindLoad, LagMs: 400}, {Service: "api", Kind: kindServed, SchedWaitMs: 85}}},
	} {
		e.rec.add(tk, func(key) bool { return false })
	}
	gen := key{service: "gen", kind: kindLoad}
	a := newAcc()
	a.lagMs, a.due = 400, 1000
	s := saturation(gen, a, "spike", e.lagged(gen, 10, 20))
	if s == nil || !strings.Contains(s.GetDetail(), "the services it measures were starved of CPU: while it was behind, api's goroutines waited up to 85 ms") ||
		strings.Contains(s.GetDetail(), "load.connections") {
		t.Errorf("detail %q; want the measured nodes starved, and no advice on connections", s.GetDetail())
	}
}

// TestProgressShowsThePhasesErrors: the progress line shows the phase's 5xx so far and its worst interval, and
// starts again at each phase; it showed only the last interval's, 0.00 % on every line of a phase that
// measured 0.665 %.
func TestProgressShowsThePhasesErrors(t *testing.T) {
	var p phaseErrors
	p.add("steady", 1, 100, 0)
	p.add("spike", 11, 200, 0)
	p.add("spike", 12, 200, 4)
	p.add("spike", 13, 200, 0)
	if got, want := p.line(), "5xx  0.67% (worst 2.0% at 12s)"; got != want {
		t.Errorf("line %q, want %q", got, want)
	}
	p.add("cool-down", 21, 100, 0)
	if got, want := p.line(), "5xx  0.00%"; got != want {
		t.Errorf("a new phase: line %q, want %q", got, want)
	}
}
