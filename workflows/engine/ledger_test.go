package engine

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/irs-sim/irs/workflows"
)

// twoPhasesYAML is shopYAML with a 2 s phase and a 3 s phase, for the ledger's phase boundaries.
var twoPhasesYAML = strings.Replace(strings.Replace(shopYAML, "duration: 1s", "duration: 2s", 1), "duration: 1s", "duration: 3s", 1)

// reading is a storefront replica's counters: CPU seconds and MiB, measured at t after t0, started at started
// (0: unknown).
func reading(replica string, measured time.Duration, cpu float64, rssMiB int64, started time.Duration, cores float64) workflows.Usage {
	u := workflows.Usage{Service: "storefront", Replica: replica, Kind: workflows.UsageWorker, At: t0.Add(measured),
		CPUSeconds: cpu, RSSBytes: rssMiB << 20, Cores: cores}
	if started != 0 {
		u.Started = t0.Add(started)
	}
	return u
}

// ledgerEngine is an engine of twoPhasesYAML whose run started at t0, read by hand through sampleUsage.
func ledgerEngine(t *testing.T, interval time.Duration, next *[]workflows.Usage) *engine {
	t.Helper()
	e := testEngine(t, twoPhasesYAML, 1, interval, &usageBackend{usage: func() []workflows.Usage { return *next }})
	e.t0 = t0
	return e
}

var served = key{service: "storefront", kind: kindServed}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

// TestLedgerSplitsAStraddlingWindow: a cluster's counter refreshed across a phase boundary is split between the
// phases by their shares of its window, so each phase's mean is its own CPU; charged whole to the phase it was
// read in, a busy warm-up's CPU raised the quiet phase after it.
func TestLedgerSplitsAStraddlingWindow(t *testing.T) {
	var next []workflows.Usage
	e := ledgerEngine(t, time.Second, &next)
	// 900m until 2 s (the warm-up's end), 100m after; the counter is measured at 0, 1.5, 3 and 5 s, and read a
	// second later each time.
	cpuAt := func(s float64) float64 { return 0.9*min(s, 2) + 0.1*max(s-2, 0) }
	for _, m := range []float64{0, 1.5, 3, 5} {
		d := time.Duration(m * float64(time.Second))
		next = []workflows.Usage{reading("pod-a", d, cpuAt(m), 10, 0, 2)}
		e.sampleUsage(t0.Add(d + time.Second))
	}
	warm, spike := e.usage.ledger.use("warm-up", ledgerKey{k: served}), e.usage.ledger.use("spike", ledgerKey{k: served})
	// The window [1.5, 3] holds 0.45 + 0.1 = 0.55 s of CPU, a third of its span in the warm-up: 0.1833 s there.
	if want := (1.35 + 0.55/3) / 2 * 1000; !near(warm.mcores, want) {
		t.Errorf("warm-up: %.1f mcores, want %.1f (its share of the straddling window)", warm.mcores, want)
	}
	if want := (0.55*2/3 + 0.2) / 3 * 1000; !near(spike.mcores, want) {
		t.Errorf("spike: %.1f mcores, want %.1f (its share of the straddling window, then 100m)", spike.mcores, want)
	}
	if total := e.usage.ledger.use("", ledgerKey{k: served}); !near(total.mcores, cpuAt(5)/5*1000) {
		t.Errorf("run: %.1f mcores, want %.1f", total.mcores, cpuAt(5)/5*1000)
	}
}

// TestLedgerMemoryByWhenMeasured: memory counts in the phase it was measured in, not the phase it was read in:
// a cluster's reading taken a second into the next phase measured the phase before.
func TestLedgerMemoryByWhenMeasured(t *testing.T) {
	var next []workflows.Usage
	e := ledgerEngine(t, time.Second, &next)
	for _, st := range []struct {
		measured, read time.Duration
		mib            int64
	}{
		{0, 500 * time.Millisecond, 100},
		{1900 * time.Millisecond, 2500 * time.Millisecond, 400}, // the warm-up's peak, read in the spike
		{2500 * time.Millisecond, 3500 * time.Millisecond, 50},
		{4 * time.Second, 4500 * time.Millisecond, 60},
	} {
		next = []workflows.Usage{reading("pod-a", st.measured, 1, st.mib, 0, 0), reading("pod-b", st.measured, 1, st.mib, 0, 0)}
		e.sampleUsage(t0.Add(st.read))
	}
	warm, spike := e.usage.ledger.use("warm-up", ledgerKey{k: served}), e.usage.ledger.use("spike", ledgerKey{k: served})
	if warm.rssMB != 800 || warm.rssMBMax != 400 {
		t.Errorf("warm-up memory %.0f MiB (largest %.0f), want 800 (400)", warm.rssMB, warm.rssMBMax)
	}
	if spike.rssMB != 120 || spike.rssMBMax != 60 {
		t.Errorf("spike memory %.0f MiB (largest %.0f), want 120 (60): the warm-up's peak measured before it", spike.rssMB, spike.rssMBMax)
	}
}

// TestLedgerBusiestSecond: a phase's busiest second is among the seconds measured within it; a second that
// straddles its boundary is neither phase's; a phase with no second measured in it keeps the busiest its ticks
// held.
func TestLedgerBusiestSecond(t *testing.T) {
	var next []workflows.Usage
	e := ledgerEngine(t, time.Second, &next)
	k := usageKey{service: "storefront", kind: workflows.UsageWorker}
	for _, st := range []struct {
		measured time.Duration
		cpu      float64
	}{
		{0, 0},
		{time.Second, 0.9},             // [0, 1]: 900m, in the warm-up
		{2 * time.Second, 1.8},         // [1, 2]: 900m
		{2500 * time.Millisecond, 2.5}, // [1.5, 2.5] (the oldest kept a second back): half in each
		{3500 * time.Millisecond, 2.6}, // [2.5, 3.5]: 100m
		{5 * time.Second, 2.9},         // [3.5, 5]: 200m
	} {
		next = []workflows.Usage{reading("pod-a", st.measured, st.cpu, 10, 0, 0)}
		e.sampleUsage(t0.Add(st.measured))
	}
	if got := e.usage.ledger.use("warm-up", ledgerKey{k: served}).mcoresMax; !near(got, 900) {
		t.Errorf("warm-up's busiest second %.0f mcores, want 900", got)
	}
	if got := e.usage.ledger.use("spike", ledgerKey{k: served}).mcoresMax; !near(got, 200) {
		t.Errorf("spike's busiest second %.0f mcores, want 200: the second across the boundary (%v) is neither phase's",
			got, e.usage.procs["worker/storefront/pod-a"])
	}

	// A counter refreshed less often than the phases last: the spike has no second of its own, and holds the
	// warm-up's last figure at its ticks.
	next = nil
	e = ledgerEngine(t, time.Second, &next)
	for _, st := range []struct{ measured, read time.Duration }{{0, 0}, {time.Second, time.Second}, {time.Second, 3 * time.Second}} {
		next = []workflows.Usage{reading("pod-a", st.measured, 0.7*st.measured.Seconds(), 10, 0, 0)}
		if u := e.sampleUsage(t0.Add(st.read))[k]; st.read == 3*time.Second && !near(u.mcoresMax, 700) {
			t.Errorf("held tick: %.0f mcores, want 700", u.mcoresMax)
		}
	}
	if got := e.usage.ledger.use("spike", ledgerKey{k: served}).mcoresMax; !near(got, 700) {
		t.Errorf("spike with no second measured in it: busiest %.0f mcores, want the 700 its tick held", got)
	}
}

// TestKilledProcessNotChargedItsLife: a process killed and not reaped yet reads lower than before (its threads
// are gone). Taken for a new process under the same name, its whole CPU time since it started landed in one
// interval (an api sidecar's 122 mcores read 1,561 after a kill). Known by its start time, it is the same
// process: the reading is dropped and counted, and no interval holds more than its cores allow.
func TestKilledProcessNotChargedItsLife(t *testing.T) {
	var next []workflows.Usage
	e := ledgerEngine(t, time.Second, &next)
	k := usageKey{service: "storefront", kind: workflows.UsageWorker}
	started := -time.Hour // an hour before the run: 40 CPU-s of life so far
	var maxTick float64
	for s, cpu := range []float64{40, 40.1, 40.2, 3.1} {
		d := time.Duration(s) * time.Second
		next = []workflows.Usage{reading("pod-a", d, cpu, 10, started, 2)}
		got := e.sampleUsage(t0.Add(d))[k]
		maxTick = max(maxTick, got.mcores, got.mcoresMax)
	}
	if maxTick > 2000 {
		t.Errorf("a tick holds %.0f mcores, more than the 2 cores the process could use", maxTick)
	}
	if maxTick > 150 {
		t.Errorf("a tick holds %.0f mcores around the kill; want at most its steady 100 (the zombie's reading dropped)", maxTick)
	}
	if e.usage.dropped.count != 1 || !strings.Contains(strings.Join(e.usage.dropped.named, ";"), "went back") {
		t.Errorf("dropped %d readings %q, want the one that went back, named", e.usage.dropped.count, e.usage.dropped.named)
	}
	e.summarize(StatusPassed)
	if d := e.res.GetDroppedUsage(); d.GetReadings() != 1 || len(d.GetFirst()) != 1 {
		t.Errorf("the result's dropped usage %v, want 1 reading, named", d)
	}
	if got := e.usage.ledger.use("", ledgerKey{k: served}).mcores; got > 150 {
		t.Errorf("the run's mean %.0f mcores, want about 100 (the life before the run is never charged)", got)
	}
}

// TestImpossibleReadingDropped: a window holding more CPU than the process's cores allow in it is dropped and
// counted, and the process goes on from it.
func TestImpossibleReadingDropped(t *testing.T) {
	var next []workflows.Usage
	e := ledgerEngine(t, time.Second, &next)
	k := usageKey{service: "storefront", kind: workflows.UsageWorker}
	for s, cpu := range []float64{1, 1.5, 9.5, 10} { // 8 s of CPU in a second, on 2 cores
		d := time.Duration(s) * time.Second
		next = []workflows.Usage{reading("pod-a", d, cpu, 10, -time.Minute, 2)}
		got := e.sampleUsage(t0.Add(d))[k]
		if got.mcores > 2000 || got.mcoresMax > 2000 {
			t.Errorf("at %v: %.0f mcores (max %.0f), more than 2 cores", d, got.mcores, got.mcoresMax)
		}
	}
	if e.usage.dropped.count != 1 || !strings.Contains(e.usage.dropped.named[0], "more than its 2 cores") {
		t.Errorf("dropped %d readings %q, want the impossible one, named", e.usage.dropped.count, e.usage.dropped.named)
	}
	if got := e.usage.ledger.use("", ledgerKey{k: served}).mcores; !near(got, 500) {
		t.Errorf("the run's mean %.1f mcores, want 500 (the two windows that could be true)", got)
	}
}

// TestNewProcessCountsFromItsStart: a process under a known name but started anew (a sidecar restarted in
// place, a pid reused) counts from zero at its start; one missed by an earlier reading (a kubelet that did not
// answer), which started before the run, starts from its first reading and is never charged its life.
func TestNewProcessCountsFromItsStart(t *testing.T) {
	var next []workflows.Usage
	e := ledgerEngine(t, time.Second, &next)
	k := usageKey{service: "storefront", kind: workflows.UsageWorker}
	steps := []struct {
		measured time.Duration
		procs    []workflows.Usage
		want     float64 // the tick's mcores
	}{
		{0, []workflows.Usage{reading("pod-a", 0, 30, 10, -time.Hour, 2)}, 0},
		{time.Second, []workflows.Usage{reading("pod-a", time.Second, 30.1, 10, -time.Hour, 2)}, 100},
		// pod-a restarted in place at 1.5 s: 0.2 s of CPU in its half second; pod-b, running since before the run
		// and missed until now, is a baseline.
		{2 * time.Second, []workflows.Usage{reading("pod-a", 2*time.Second, 0.2, 10, 1500*time.Millisecond, 2),
			reading("pod-b", 2*time.Second, 500, 10, -48*time.Hour, 2)}, 400},
		{3 * time.Second, []workflows.Usage{reading("pod-a", 3*time.Second, 0.3, 10, 1500*time.Millisecond, 2),
			reading("pod-b", 3*time.Second, 500.2, 10, -48*time.Hour, 2)}, 300},
	}
	for _, st := range steps {
		next = st.procs
		if got := e.sampleUsage(t0.Add(st.measured))[k]; !near(got.mcores, st.want) {
			t.Errorf("at %v: %.1f mcores, want %.1f", st.measured, got.mcores, st.want)
		}
	}
	if e.usage.dropped.count != 0 {
		t.Errorf("dropped %q, want none", e.usage.dropped.named)
	}
	// 0.1 (pod-a's first life) + 0.3 (its second) + 0.2 (pod-b) over 3 s.
	if got := e.usage.ledger.use("", ledgerKey{k: served}).mcores; !near(got, 600.0/3) {
		t.Errorf("the run's mean %.1f mcores, want %.1f", got, 600.0/3)
	}
}

// fileUse puts a span's resource use in the ledger as a run's samples would have filed it.
func fileUse(e *engine, span string, lk ledgerKey, u resourceUse) {
	*e.usage.ledger.get(span, lk) = phaseUsage{cpuSeconds: u.mcores / 1000, from: 0, to: 1, covered: true,
		busiest: u.mcoresMax, fresh: true, rss: u.rssMB, rssMax: u.rssMBMax, rssSeen: true}
}
