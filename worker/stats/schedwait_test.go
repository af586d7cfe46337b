package stats

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// TestSchedWaitSince: the p99 and the most goroutines waited to run between two readings, as bucket upper
// bounds; nothing in between reads 0.
func TestSchedWaitSince(t *testing.T) {
	buckets := []float64{0, 0.001, 0.002, 0.004, 0.008, math.Inf(1)}
	prev := schedSample{counts: []uint64{10, 5, 0, 0, 0}, buckets: buckets}
	cur := schedSample{counts: []uint64{10 + 980, 5 + 10, 6, 0, 4}, buckets: buckets}
	p99, most := cur.waitSince(prev)
	// 1000 waits: 980 under 1 ms, 10 under 2 ms (the 990th, the 99th percentile, is there), 6 under 4 ms, 4 of 8 ms
	// or more.
	if p99 != 2 || most != 8 {
		t.Errorf("p99 %v ms, most %v ms; want 2 (its bucket's upper bound), 8 (the last bucket's lower bound)", p99, most)
	}
	if p99, most := prev.waitSince(prev); p99 != 0 || most != 0 {
		t.Errorf("no wait between equal readings: %v, %v; want 0, 0", p99, most)
	}
	if p99, most := cur.waitSince(schedSample{}); p99 != 0 || most != 0 {
		t.Errorf("against an unknown reading: %v, %v; want 0, 0", p99, most)
	}
}

// TestSchedWaitSeesAStarvedCPU: with its one processor taken by busy goroutines, a goroutine that wakes waits
// to run for the scheduler's time slice; the window says so, where a quiet window of the same process (the
// reference, taken in this test) did not wait as long.
func TestSchedWaitSeesAStarvedCPU(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	r := NewRegistry("w", 1)
	wake := func(d time.Duration) {
		deadline := time.Now().Add(d)
		for time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	w := r.NewWindow()
	defer w.Close()
	wake(300 * time.Millisecond)
	quiet := w.Snapshot(true)

	// The runtime samples its scheduling latencies, and a machine busy beside the test may leave this process so
	// little CPU that a round shows few waits: up to five rounds, one of which must see the processor taken.
	var busy *irsv1.StatsSnapshot
	for round := 0; round < 5; round++ {
		var stop atomic.Bool
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				for !stop.Load() {
				}
			})
		}
		wake(300 * time.Millisecond)
		stop.Store(true)
		wg.Wait()
		busy = w.Snapshot(true)
		if busy.GetSchedWaitMaxMs() >= 5 && busy.GetSchedWaitMaxMs() > quiet.GetSchedWaitMaxMs() {
			return
		}
	}
	t.Errorf("goroutines waited up to %v ms (p99 %v) with the processor taken, %v ms (p99 %v) without; want 5 ms or more, and more",
		busy.GetSchedWaitMaxMs(), busy.GetSchedWaitP99Ms(), quiet.GetSchedWaitMaxMs(), quiet.GetSchedWaitP99Ms())
}
