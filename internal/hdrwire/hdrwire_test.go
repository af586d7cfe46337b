package hdrwire

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// TestEncodeIsTheLibrarys: byte for byte what hdrhistogram-go's own Encode writes, for histograms empty, of one
// value, of values across the whole range, of counts that need every length of the format's varints, with the
// geometries IRS uses and others; and it decodes to the same histogram. A compressor reused for the next
// encoding leaves nothing of the last in it.
func TestEncodeIsTheLibrarys(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	type geom struct{ lowest, highest, sig int64 }
	for _, g := range []geom{{1, 60_000_000, 3}, {1, 3_600_000_000, 3}, {1, 1000, 2}, {1, 1 << 40, 5}, {1000, 1 << 35, 3}} {
		shapes := map[string]func(h *hdrhistogram.PackedHistogram){
			"empty":     func(*hdrhistogram.PackedHistogram) {},
			"one value": func(h *hdrhistogram.PackedHistogram) { _ = h.RecordValue(g.lowest) },
			"latencies": func(h *hdrhistogram.PackedHistogram) {
				for range 5000 {
					_ = h.RecordValue(min(g.highest, int64(float64(g.lowest)*2000*(0.5+r.ExpFloat64()))))
				}
			},
			"the whole range": func(h *hdrhistogram.PackedHistogram) {
				for range 300 {
					_ = h.RecordValue(g.lowest + r.Int64N(g.highest-g.lowest))
				}
				_ = h.RecordValue(g.highest)
			},
			"huge counts": func(h *hdrhistogram.PackedHistogram) {
				for i := range 9 {
					_ = h.RecordValues(g.lowest*int64(i+1)*7, int64(1)<<(7*i+3))
				}
			},
		}
		for name, fill := range shapes {
			h := hdrhistogram.NewPacked(g.lowest, g.highest, int(g.sig))
			fill(h)
			want, err := h.Encode()
			if err != nil {
				t.Fatal(err)
			}
			for round := range 2 { // the second with a compressor used before
				if got := Encode(h); !bytes.Equal(got, want) {
					t.Fatalf("%v %s, round %d: encoded\n%s\nthe library's\n%s", g, name, round, got, want)
				}
			}
			back, err := hdrhistogram.DecodePacked(Encode(h))
			if err != nil || back.TotalCount() != h.TotalCount() || back.Max() != h.Max() || back.ValueAtPercentile(99) != h.ValueAtPercentile(99) {
				t.Fatalf("%v %s: decoded %v (count %d, max %d), want count %d, max %d", g, name, err, back.TotalCount(), back.Max(), h.TotalCount(), h.Max())
			}
		}
	}
}

// BenchmarkEncode: a worker's interval of 1000 latencies, by the library and here.
func BenchmarkEncode(b *testing.B) {
	h := hdrhistogram.NewPacked(1, 60_000_000, 3)
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		_ = h.RecordValue(int64(2000 * (0.5 + r.ExpFloat64())))
	}
	b.Run("library", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = h.Encode()
		}
	})
	b.Run("hdrwire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = Encode(h)
		}
	})
}
