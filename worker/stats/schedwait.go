package stats

import (
	"math"
	"runtime/metrics"
)

// schedLatencies is the Go runtime's distribution of how long goroutines waited, runnable, before they ran: a
// process whose CPU is taken (a starved node, a noisy neighbour, a throttled cgroup) waits long, whatever its
// work. Read once a window, it costs no wake-up of its own.
const schedLatencies = "/sched/latencies:seconds"

// schedSample is a reading of the runtime's scheduling latencies (cumulative counts; nil: not available).
type schedSample struct {
	counts  []uint64
	buckets []float64
}

// readSched reads the scheduling latencies now.
func readSched() schedSample {
	s := []metrics.Sample{{Name: schedLatencies}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return schedSample{}
	}
	h := s[0].Value.Float64Histogram()
	return schedSample{counts: h.Counts, buckets: h.Buckets}
}

// waitSince returns the p99 and the most goroutines waited to run between prev and s, in milliseconds (0, 0:
// nothing ran, or unknown). Each is its bucket's upper bound: never less than the wait was.
func (s schedSample) waitSince(prev schedSample) (p99, most float64) {
	if len(s.counts) == 0 || len(prev.counts) != len(s.counts) {
		return 0, 0
	}
	var total uint64
	delta := make([]uint64, len(s.counts))
	for i := range s.counts {
		delta[i] = s.counts[i] - prev.counts[i]
		total += delta[i]
	}
	if total == 0 {
		return 0, 0
	}
	upper := func(i int) float64 {
		b := s.buckets[i+1]
		if math.IsInf(b, 1) {
			b = s.buckets[i] // the last bucket's lower bound: all that is known
		}
		return b * 1000
	}
	var seen uint64
	p99 = -1
	for i, n := range delta {
		if n == 0 {
			continue
		}
		seen += n
		if p99 < 0 && float64(seen) >= 0.99*float64(total) {
			p99 = upper(i)
		}
		most = upper(i)
	}
	return p99, most
}
