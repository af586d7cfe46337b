package stats

import (
	"math/bits"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// Histogram geometry shared by every IRS histogram, so that any two merge exactly.
const (
	LowestMicros  = 1
	HighestMicros = int64(time.Hour / time.Microsecond)
	SigFigs       = 3
)

// NewHDR returns an empty histogram with the IRS geometry.
func NewHDR() *hdrhistogram.Histogram { return hdrhistogram.New(LowestMicros, HighestMicros, SigFigs) }

// Histogram is a latency histogram safe for concurrent recording.
type Histogram struct {
	shards []histShard
	mask   uint32
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
	h := &Histogram{shards: make([]histShard, n), mask: uint32(n - 1)}
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

// mergeInto adds every shard into dst and, when reset is set, empties the shards.
func (h *Histogram) mergeInto(dst *hdrhistogram.Histogram, reset bool) {
	for i := range h.shards {
		s := &h.shards[i]
		s.mu.Lock()
		if s.h.TotalCount() > 0 {
			dst.Merge(s.h)
			if reset {
				s.h.Reset()
			}
		}
		s.mu.Unlock()
	}
}

// snapshot returns the merged histogram in wire form.
func (h *Histogram) snapshot(reset bool) *irsv1.Histogram {
	merged := NewHDR()
	h.mergeInto(merged, reset)
	return Summarize(merged)
}

// Summarize converts a histogram to its wire form: the full encoding plus a summary in milliseconds.
func Summarize(h *hdrhistogram.Histogram) *irsv1.Histogram {
	out := &irsv1.Histogram{Count: h.TotalCount()}
	if out.Count == 0 {
		return out
	}
	if enc, err := h.Encode(hdrhistogram.V2CompressedEncodingCookieBase); err == nil {
		out.Hdr = string(enc)
	}
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

// Snapshot returns a merged copy of the histogram (microseconds).
func (h *Histogram) Snapshot() *hdrhistogram.Histogram {
	merged := NewHDR()
	h.mergeInto(merged, false)
	return merged
}
