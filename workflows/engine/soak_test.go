package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker/stats"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/protobuf/proto"
)

// soakYAML is bench/soak.go's workflow: loadgen → client ×2 → server ×2, a server killed every two minutes.
const soakYAML = `
name: soak
seed: 1
services:
  - name: loadgen
    worker:
      load: {target: client, rate: 100}
  - name: client
    replicas: 2
    worker:
      calls: [{service: server}]
  - name: server
    replicas: 2
    worker:
      serve: {delay: 2ms}
phases:
  - name: soak
    duration: 30m
    actions:
      - every: 2m
        kill: {service: server}
`

// soakHist is a latency histogram as a worker sends it: n values around ms milliseconds.
func soakHist(r *rand.Rand, n int, ms float64) *irsv1.Histogram {
	h := stats.NewHDR()
	for range n {
		_ = h.RecordValue(int64(ms*1000*(0.5+r.ExpFloat64())) + 1)
	}
	return stats.Summarize(h)
}

func soakOutcomes(n, failed int64) *irsv1.Outcomes {
	return &irsv1.Outcomes{Requests: n, Failures: failed, Statuses: map[int32]int64{200: n - failed, 503: failed}}
}

// soakInterval feeds interval k's windows, as the soak's five replicas report them, and closes it: servers
// names the two server replicas in service ("" for one that is not reporting: killed, its replacement not ready).
func soakInterval(e *engine, r *rand.Rand, k int, servers [2]string) {
	from, to := time.Duration(k-1)*e.interval, time.Duration(k)*e.interval
	w := func() *irsv1.StatsSnapshot { return window(from, to, 50, 0) }
	var samples []sample
	lg := w()
	lg.Inbound = nil
	lg.Load = []*irsv1.LoadStats{{Target: "client", Outcomes: soakOutcomes(100, 0), Latency: soakHist(r, 100, 4),
		Uncorrected: soakHist(r, 100, 4), Due: 100, Sent: 100}}
	samples = append(samples, sample{service: "loadgen", replica: "loadgen-1", stats: lg})
	for i := 1; i <= 2; i++ {
		c := w()
		c.Inbound[0].Latency = soakHist(r, 50, 3)
		c.Upstreams = []*irsv1.UpstreamStats{{Service: "server", Outcomes: soakOutcomes(50, 0), Latency: soakHist(r, 50, 2.5),
			Hop: soakHist(r, 50, 0.3)}}
		samples = append(samples, sample{service: "client", replica: fmt.Sprintf("client-%d", i), stats: c})
		if servers[i-1] == "" {
			continue
		}
		s := w()
		s.Inbound[0].Latency = soakHist(r, 50, 2)
		samples = append(samples, sample{service: "server", replica: servers[i-1], stats: s})
	}
	feed(e, samples...)
	e.closeBuckets(k)
}

// soakEngine is an engine that has run the soak for n one-second intervals, with its kills' faults recorded.
func soakEngine(tb testing.TB, n int) *engine { return soakEngineHolding(tb, n, false) }

// soakEngineHolding is soakEngine; with hold, a step runs from the start to the end, so that no interval is
// settled: every window is kept as reported, as before settling was.
func soakEngineHolding(tb testing.TB, n int, hold bool) *engine {
	d, err := workflows.Parse([]byte(soakYAML), "")
	if err != nil {
		tb.Fatal(err)
	}
	tl, err := workflows.NewTimeline(d.Workflow, 1)
	if err != nil {
		tb.Fatal(err)
	}
	e := newEngine(Options{Workflow: d.Workflow, Timeline: tl, Interval: time.Second})
	e.t0 = t0
	if hold {
		e.stepsRunning = map[uint64]time.Time{1: t0}
	}
	r := rand.New(rand.NewPCG(1, 2))
	servers := [2]string{"server-1", "server-2"}
	var replacing string // the replacement of the last kill, until it reports
	slot := 0
	for k := 1; k <= n; k++ {
		if replacing != "" && k%120 == 2 {
			servers[slot], replacing = replacing, ""
		}
		if k%120 == 0 {
			slot = (k / 120) % 2
			replacing = fmt.Sprintf("server-r%d", k/120)
			soakKill(e, k, servers[slot], replacing)
			servers[slot] = ""
		}
		soakInterval(e, r, k, servers)
	}
	return e
}

// soakKill kills a server replica 0.3 s before interval k ends, as the Kubernetes backend reports it (bench's
// soak, read from its events): the kill, the pod gone, its replacement, the endpoints changing, and the
// replacement ready 1.4 s later, under a new name, as a Deployment's pods are.
func soakKill(e *engine, k int, victim, replacement string) {
	st := workflows.Step{Phase: "soak", Path: "phases[0].actions[0]", At: time.Duration(k) * time.Second}
	at := t0.Add(time.Duration(k)*time.Second - 300*time.Millisecond)
	e.recordKills(at, st, "server", []string{victim}, "SIGKILL",
		&irsv1.FaultRecord{Kind: FaultKill, Service: "server", Replicas: []string{victim}})
	e.action(at, st, "kill", victim, "SIGKILL")
	ms := func(n int) time.Time { return at.Add(time.Duration(n) * time.Millisecond) }
	for _, ev := range []workflows.Event{
		{At: ms(40), Kind: workflows.EventExit, Replica: victim, Detail: "pod deleted"},
		{At: ms(50), Kind: workflows.EventEndpointRemoved, Replica: victim, Detail: "no longer a ready endpoint of Service server"},
		{At: ms(50), Kind: workflows.EventEndpoints, Detail: "1 ready endpoints in Service server"},
		{At: ms(80), Kind: workflows.EventReplace, Replica: replacement, Replaces: victim, Detail: "replaces " + victim},
		{At: ms(1400), Kind: workflows.EventReady, Replica: replacement, Replaces: victim, Detail: "pod " + replacement},
		{At: ms(1420), Kind: workflows.EventEndpoints, Detail: "2 ready endpoints in Service server"},
	} {
		ev.Service = "server"
		e.takeEvent(ev)
	}
}

// TestSettledAsReported: the faults' blast radius from settled books is the one every window kept as reported
// gives, at a checkpoint and at the end, with a late window (a stalled stream's) landing in an interval whose
// fault's books were sealed.
func TestSettledAsReported(t *testing.T) {
	const n = 360 // three kills: the first two sealed, the last open at the end
	settled, kept := soakEngine(t, n), soakEngineHolding(t, n, true)
	if settled.settled < n-settleKeep || len(settled.windows) > settleKeep || kept.settled != 0 || len(kept.windows) < n {
		t.Fatalf("settled up to %d with %d intervals as reported, and held %d with %d; want all but the last %d settled, and none",
			settled.settled, len(settled.windows), kept.settled, len(kept.windows), settleKeep)
	}
	late := window(120*time.Second, 121*time.Second, 0, 0) // in the first kill's window: to 122 s, its clients' first clean interval after its replacement was ready
	late.Inbound = nil
	late.Upstreams = []*irsv1.UpstreamStats{{Service: "server", Outcomes: soakOutcomes(40, 30),
		Latency: soakHist(rand.New(rand.NewPCG(3, 4)), 40, 900)}}
	_ = settled.checkpoint()
	if b := settled.books[0].after; !b.sealed || !b.cached {
		t.Errorf("the first kill's books after a checkpoint: sealed %v, cached %v; want both", b.sealed, b.cached)
	}
	for _, e := range []*engine{settled, kept} {
		feed(e, sample{service: "client", replica: "client-1", stats: late})
	}
	if b := settled.books[0].after; b.cached || b.sealed {
		t.Errorf("the first kill's books after a late window: sealed %v, cached %v; want it opened to take it", b.sealed, b.cached)
	}
	for _, end := range []bool{false, true} {
		var a, b *irsv1.WorkflowResult
		if end {
			for _, e := range []*engine{settled, kept} {
				e.mu.Lock()
				e.summarize(StatusPassed)
				e.mu.Unlock()
			}
			a, b = settled.res, kept.res
		} else {
			a, b = settled.checkpoint().Head, kept.checkpoint().Head
		}
		if len(a.GetFaults()) != n/120 {
			t.Fatalf("%d faults, want %d", len(a.GetFaults()), n/120)
		}
		for i := range a.GetFaults() {
			if !proto.Equal(a.GetFaults()[i], b.GetFaults()[i]) {
				t.Errorf("end %v, fault %d from settled books:\n%v\nfrom every window:\n%v", end, i, a.GetFaults()[i], b.GetFaults()[i])
			}
		}
		first := a.GetFaults()[0].GetAfter().GetCallers()
		if len(first) != 1 || first[0].GetFailures() != 30 {
			t.Errorf("end %v: the first kill's callers %v; want client, with the late window's 30 failures", end, first)
		}
	}
}

// BenchmarkCheckpointSoak: what one checkpoint costs the engine 5, 15 and 30 minutes into the soak. Flat is the
// aim: a checkpoint every 10 s whose cost grows with the run makes the engine's CPU grow with it.
func BenchmarkCheckpointSoak(b *testing.B) {
	for _, minutes := range []int{5, 15, 30} {
		b.Run(fmt.Sprintf("%dm", minutes), func(b *testing.B) {
			e := soakEngine(b, minutes*60)
			b.ResetTimer()
			for b.Loop() {
				_ = e.checkpoint()
			}
		})
	}
}

// BenchmarkSoakHeap reports the live heap an engine holds 5 and 30 minutes into the soak, per interval: as a
// local run's engine (the series' sealed blocks held), and as a detached run's (its checkpoints' log holds them).
func BenchmarkSoakHeap(b *testing.B) {
	for b.Loop() {
		for _, detached := range []bool{false, true} {
			var at [2]uint64
			for i, minutes := range []int{5, 30} {
				e := soakEngine(b, minutes*60)
				if detached {
					snap := e.checkpoint()
					snap.Release(len(snap.Series.Sealed()), func(int) ([][]byte, error) {
						return nil, errors.New("the benchmark keeps no log")
					})
				}
				runtime.GC() // twice: the first moves sync.Pool's contents to its victim cache, the second frees them
				runtime.GC()
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				at[i] = m.HeapAlloc
				runtime.KeepAlive(e)
			}
			unit := "heap-B/interval"
			if detached {
				unit = "detached-heap-B/interval"
			}
			// Signed: a smaller heap at 30 minutes than at 5 (noise) is a small negative, not a wrapped uint64.
			b.ReportMetric((float64(at[1])-float64(at[0]))/float64(25*60), unit)
		}
	}
}

// TestCheckpointRelease: the blocks a checkpoint's writer kept elsewhere are let go by the engine (Release), and
// the run's whole series at its end reads them back, tick for tick what it would have held.
func TestCheckpointRelease(t *testing.T) {
	e := soakEngine(t, 3*64+10)
	snap := e.checkpoint()
	kept := snap.Series.Sealed()
	want, err := snap.Series.Ticks()
	if err != nil || len(kept) != 3 || len(want) != 3*64+10 {
		t.Fatalf("a checkpoint after %d intervals: %d blocks sealed, %d ticks (%v)", 3*64+10, len(kept), len(want), err)
	}
	snap.Release(len(kept), func(n int) ([][]byte, error) { return kept[:n], nil })
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, b := range e.ticks.Sealed() {
		if b != nil {
			t.Errorf("the engine holds block %d after its checkpoint let it go", i)
		}
	}
	e.fullSeries()
	if got := e.res.GetSeries(); len(got) != len(want) {
		t.Fatalf("the series at the end: %d ticks, want %d", len(got), len(want))
	}
	for i, tick := range e.res.GetSeries() {
		if !proto.Equal(tick, want[i]) {
			t.Fatalf("tick %d at the end is %v, want %v", i, tick, want[i])
		}
	}
}
