package stats

import (
	"math/bits"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/irs-sim/irs/internal/hdrwire"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// Histogram geometry shared by every IRS histogram, so that any two merge exactly.
const (
	LowestMicros  = 1
	HighestMicros = int64(time.Hour / time.Microsecond)
	SigFigs       = 3
)

// NewHDR returns an empty dense histogram with the IRS geometry.
func NewHDR() *hdrhistogram.Histogram { return hdrhistogram.New(LowestMicros, HighestMicros, SigFigs) }

// newPacked returns an empty sparse histogram with the IRS geometry.
func newPacked() *hdrhistogram.PackedHistogram {
	return hdrhistogram.NewPacked(LowestMicros, HighestMicros, SigFigs)
}

// Histogram is a latency histogram safe for concurrent recording.
type Histogram struct {
	shards []histShard
	mask   uint32
	// total holds everything drained from the shards so far. Readers own it, under the registry's lock.
	total *hdrhistogram.PackedHistogram
}

type histShard struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
	_  [48]byte // keep shards' locks on separate cache lines
}

// newHistogram returns a histogram with a power-of-two number of shards, about two per processor.
func newHistogram() *Histogram {
	n := 1 << bits.Len(uint(max(2*runtime.GOMAXPROCS(0)-1, 1)))
	n = min(n, 16)
	h := &Histogram{shards: make([]histShard, n), mask: uint32(n - 1), total: newPacked()}
	for i := range h.shards {
		h.shards[i].h = NewHDR()
	}
	return h
}

// Record adds one latency. Values beyond an hour are recorded as an hour.
func (h *Histogram) Record(d time.Duration) {
	us := min(max(int64(d/time.Microsecond), 0), HighestMicros)
	s := &h.shards[rand.Uint32()&h.mask]
	s.mu.Lock()
	_ = s.h.RecordValue(us) // cannot fail: us is within the geometry
	s.mu.Unlock()
}

// drain moves what the shards recorded into the total and into each of into (window accumulators, which may
// be nil). Callers hold the registry's lock.
func (h *Histogram) drain(into []*hdrhistogram.PackedHistogram) {
	for i := range h.shards {
		s := &h.shards[i]
		s.mu.Lock()
		if s.h.TotalCount() > 0 {
			h.total.MergeFrom(s.h)
			for _, w := range into {
				if w != nil {
					w.MergeFrom(s.h)
				}
			}
			s.h.Reset()
		}
		s.mu.Unlock()
	}
}

// Snapshot returns a dense copy of everything recorded (microseconds).
func (h *Histogram) Snapshot() *hdrhistogram.Histogram {
	out := NewHDR()
	for i := range h.shards {
		s := &h.shards[i]
		s.mu.Lock()
		out.Merge(s.h)
		s.mu.Unlock()
	}
	h.total.MergeInto(out)
	return out
}

// Summarize converts a histogram to its wire form: the full encoding plus a summary in milliseconds.
func Summarize(h *hdrhistogram.Histogram) *irsv1.Histogram {
	p := newPacked()
	p.MergeFrom(h)
	return summarizePacked(p)
}

func summarizePacked(h *hdrhistogram.PackedHistogram) *irsv1.Histogram {
	out := &irsv1.Histogram{Count: h.TotalCount()}
	if out.Count == 0 {
		return out
	}
	out.Hdr = string(hdrwire.Encode(h))
	ms := func(us int64) float64 { return float64(us) / 1000 }
	q := h.ValueAtPercentilesSlice([]float64{50, 90, 99, 99.9})
	out.MinMs = ms(h.Min())
	out.MeanMs = h.Mean() / 1000
	out.P50Ms, out.P90Ms, out.P99Ms, out.P999Ms = ms(q[0]), ms(q[1]), ms(q[2]), ms(q[3])
	out.MaxMs = ms(h.Max())
	return out
}

// Decode returns the histogram inside a wire histogram (empty when it has no data).
func Decode(w *irsv1.Histogram) (*hdrhistogram.Histogram, error) {
	if w.GetHdr() == "" {
		return NewHDR(), nil
	}
	return hdrhistogram.Decode([]byte(w.GetHdr()))
}

// Buckets returns how many values of h fall in each bucket delimited by bounds (microseconds, ascending): bucket
// i holds values in (bounds[i-1], bounds[i]], the last one those above every bound. It also returns the sum of
// the values in microseconds (each counted at its HDR bucket's value). This is the shape OpenTelemetry
// histograms take.
func Buckets(h *hdrhistogram.PackedHistogram, bounds []int64) (counts []uint64, sum float64) {
	counts = make([]uint64, len(bounds)+1)
	h.ForEachBucket(func(value, count int64) bool {
		i := 0
		for i < len(bounds) && value > bounds[i] {
			i++
		}
		counts[i] += uint64(count)
		sum += float64(value) * float64(count)
		return true
	})
	return counts, sum
}
