package hdrwire

import (
	"bytes"
	"compress/zlib"
	"encoding/base64"
	"encoding/binary"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/HdrHistogram/hdrhistogram-go"
)

type bucket struct{ value, count int64 }

func buckets(h *hdrhistogram.PackedHistogram) []bucket {
	var out []bucket
	for v, c := range h.ForEachBucket {
		out = append(out, bucket{v, c})
	}
	return out
}

// byLibrary is what the engine did before Merge: the library's decoder, then the library's merge.
func byLibrary(dst *hdrhistogram.PackedHistogram, encoded string) (int64, error) {
	h, err := hdrhistogram.DecodePacked([]byte(encoded))
	if err != nil {
		return 0, err
	}
	return dst.Merge(h), nil
}

// encodings are histograms of several geometries and shapes, encoded by the library and by Encode.
func encodings(t testing.TB) []string {
	r := rand.New(rand.NewPCG(3, 5))
	var out []string
	for _, g := range []struct{ lowest, highest, sig int64 }{{1, 60_000_000, 3}, {1, 3_600_000_000, 3}, {1, 1000, 2}, {1, 1 << 40, 5}, {1000, 1 << 35, 3}, {1, 1<<62 + 12345, 1}} {
		for shape := range 4 {
			h := hdrhistogram.NewPacked(g.lowest, g.highest, int(g.sig))
			switch shape {
			case 1:
				_ = h.RecordValue(g.lowest)
			case 2:
				for range 3000 {
					_ = h.RecordValue(min(g.highest, int64(float64(g.lowest)*2000*(0.5+r.ExpFloat64()))))
				}
			case 3:
				for range 200 {
					_ = h.RecordValues(g.lowest+r.Int64N(g.highest-g.lowest), 1+r.Int64N(1<<40))
				}
				_ = h.RecordValue(g.highest)
			}
			lib, err := h.Encode()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, string(lib), string(Encode(h)))
		}
	}
	return out
}

// TestMergeIsTheLibrarys: for every geometry and shape, Merge adds what the library's decoder and merge add,
// into a histogram of IRS's geometry and into one of the encoding's own.
func TestMergeIsTheLibrarys(t *testing.T) {
	for i, enc := range encodings(t) {
		want, err := hdrhistogram.DecodePacked([]byte(enc))
		if err != nil {
			t.Fatal(err)
		}
		for _, dstOf := range []func() *hdrhistogram.PackedHistogram{
			func() *hdrhistogram.PackedHistogram { return hdrhistogram.NewPacked(1, 60_000_000, 3) },
			func() *hdrhistogram.PackedHistogram {
				return hdrhistogram.NewPacked(want.LowestTrackableValue(), want.HighestTrackableValue(), int(want.SignificantFigures()))
			},
		} {
			a, b := dstOf(), dstOf()
			_ = a.RecordValues(1500, 7) // merged into, not replaced
			_ = b.RecordValues(1500, 7)
			droppedA, errA := Merge(a, enc)
			droppedB, errB := byLibrary(b, enc)
			if errA != nil || errB != nil || droppedA != droppedB || a.TotalCount() != b.TotalCount() || !slices.Equal(buckets(a), buckets(b)) {
				t.Fatalf("encoding %d: Merge %v (dropped %d, count %d), the library %v (dropped %d, count %d)", i, errA, droppedA, a.TotalCount(), errB, droppedB, b.TotalCount())
			}
		}
	}
}

// TestMergeRefusesWhatTheLibraryRefuses: cut short, or with bytes changed at random (in the base64 text, in
// the compressed stream, in the inflated header and payload, re-compressed so that only the content is
// wrong), Merge never panics, refuses whatever the library refuses, and when it refuses leaves the histogram
// merged into as it was.
func TestMergeRefusesWhatTheLibraryRefuses(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 1))
	encs := encodings(t)
	var cases []string
	for _, enc := range encs[:8] {
		for cut := 0; cut < len(enc); cut += 1 + len(enc)/40 {
			cases = append(cases, enc[:cut])
		}
	}
	for range 1500 {
		enc := []byte(encs[r.IntN(len(encs))])
		enc[r.IntN(len(enc))] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="[r.IntN(65)]
		cases = append(cases, string(enc))
	}
	for range 1500 {
		packed, _ := base64.StdEncoding.DecodeString(encs[r.IntN(len(encs))])
		packed[r.IntN(len(packed))] ^= byte(1 << r.IntN(8))
		cases = append(cases, base64.StdEncoding.EncodeToString(packed))
	}
	for range 3000 {
		raw := inflated(t, encs[r.IntN(len(encs))])
		for range 1 + r.IntN(3) {
			switch i := r.IntN(len(raw)); {
			case i < headerSize && r.IntN(2) == 0: // a header field to an edge value
				binary.BigEndian.PutUint32(raw[i&^3:], []uint32{0, 1, 5, 6, 0x7fffffff, 0x80000000, 0xffffffff}[r.IntN(7)])
			default:
				raw[i] ^= byte(1 << r.IntN(8))
			}
		}
		if r.IntN(4) == 0 {
			raw = raw[:headerSize+r.IntN(len(raw)-headerSize+1)]
		}
		cases = append(cases, deflated(raw))
	}
	refused := 0
	for i, enc := range cases {
		a, b := hdrhistogram.NewPacked(1, 60_000_000, 3), hdrhistogram.NewPacked(1, 60_000_000, 3)
		_ = a.RecordValues(2500, 3)
		_ = b.RecordValues(2500, 3)
		before := buckets(a)
		droppedA, errA := Merge(a, enc)
		droppedB, errB := byLibrary(b, enc)
		switch {
		case errA != nil:
			refused++
			if got := buckets(a); !slices.Equal(got, before) || a.TotalCount() != 3 {
				t.Fatalf("case %d: refused (%v) but the histogram changed: %v", i, errA, got)
			}
		case errB != nil:
			t.Fatalf("case %d: the library refuses it (%v), Merge added %d", i, errB, a.TotalCount()-3)
		case droppedA != droppedB || a.TotalCount() != b.TotalCount() || !slices.Equal(buckets(a), buckets(b)):
			t.Fatalf("case %d: both accept it, but Merge added %d (dropped %d), the library %d (dropped %d)", i, a.TotalCount()-3, droppedA, b.TotalCount()-3, droppedB)
		}
	}
	if refused < len(cases)/4 {
		t.Fatalf("only %d of %d damaged encodings refused: the cases do not damage", refused, len(cases))
	}
}

// TestMergeBoundsWhatAHeaderClaims: a small encoding whose header claims the largest payload its geometry
// allows is refused without allocating what it claims.
func TestMergeBoundsWhatAHeaderClaims(t *testing.T) {
	raw := inflated(t, encodings(t)[6])
	binary.BigEndian.PutUint32(raw[12:], 5)         // significant figures: the most buckets
	binary.BigEndian.PutUint64(raw[24:], 1<<62)     // highest
	binary.BigEndian.PutUint32(raw[4:], 60_000_000) // payload length, within countsLen*9
	enc := deflated(raw)
	dst := hdrhistogram.NewPacked(1, 60_000_000, 3)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Merge(dst, enc)
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("a payload shorter than its header says was accepted")
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
		t.Fatalf("refusing it allocated %d bytes: the header's claim was believed", grew)
	}
	if _, err := Merge(dst, string(make([]byte, MaxEncoded+1))); err == nil {
		t.Fatal("an encoding longer than MaxEncoded was read")
	}
}

// inflated is an encoding's V2 header and payload, uncompressed.
func inflated(t testing.TB, enc string) []byte {
	packed, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zlib.NewReader(bytes.NewReader(packed[8:]))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// deflated is raw compressed and framed as an encoding, base64.
func deflated(raw []byte) string {
	var zipped bytes.Buffer
	zw := zlib.NewWriter(&zipped)
	zw.Write(raw)
	zw.Close()
	out := binary.BigEndian.AppendUint32(nil, compressedEncodingCookie)
	out = binary.BigEndian.AppendUint32(out, uint32(zipped.Len()))
	return base64.StdEncoding.EncodeToString(append(out, zipped.Bytes()...))
}

// BenchmarkMerge: a worker's interval of 1000 latencies merged into an accumulator, by the library's decoder
// and merge and by Merge.
func BenchmarkMerge(b *testing.B) {
	h := hdrhistogram.NewPacked(1, 60_000_000, 3)
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		_ = h.RecordValue(int64(2000 * (0.5 + r.ExpFloat64())))
	}
	enc := string(Encode(h))
	dst := hdrhistogram.NewPacked(1, 60_000_000, 3)
	b.Run("library", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = byLibrary(dst, enc)
		}
	})
	b.Run("hdrwire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = Merge(dst, enc)
		}
	})
}

// TestValueAtIsTheLibrarys: the value decoding gives each counts index is the one the library gives it, and
// records at that index, for every index of geometries up to MaxInt64; and there are as many as the library has.
func TestValueAtIsTheLibrarys(t *testing.T) {
	for _, sig := range []int64{1, 2, 3} {
		for _, lowest := range []int64{1, 1000, 1 << 20} {
			g := newGeometry(lowest, sig)
			h := hdrhistogram.NewPacked(lowest, math.MaxInt64, int(sig))
			n := g.countsLen(math.MaxInt64)
			for i := range n {
				if err := h.RecordValues(g.valueAt(i), i+1); err != nil {
					t.Fatalf("%d..MaxInt64, %d figures: index %d, value %d: %v", lowest, sig, i, g.valueAt(i), err)
				}
			}
			i := int64(0)
			for v, c := range h.ForEachBucket {
				if c != i+1 || v != g.valueAt(i) {
					t.Fatalf("%d..MaxInt64, %d figures: bucket %d is the library's %d (count %d), decoding's %d", lowest, sig, i, v, c, g.valueAt(i))
				}
				i++
			}
			if libraries := int64(len(hdrhistogram.New(lowest, math.MaxInt64, int(sig)).Export().Counts)); i != n || n != libraries {
				t.Fatalf("%d..MaxInt64, %d figures: %d buckets recorded, countsLen %d, the library's %d", lowest, sig, i, n, libraries)
			}
		}
	}
}

// TestUnZigZagIsZigZagsInverse: every length of the format's numbers, the ninth byte whole, reads back as
// written, and each cut short is refused.
func TestUnZigZagIsZigZagsInverse(t *testing.T) {
	for _, v := range []int64{0, 1, -1, 63, -64, 1 << 20, -(1 << 40), 1 << 55, 1<<62 + 7, math.MaxInt64, math.MinInt64} {
		var b [9]byte
		n := zigZag(b[:], v)
		if got, m, err := unZigZag(b[:n]); err != nil || got != v || m != n {
			t.Fatalf("%d: read %d in %d bytes (%v), written in %d", v, got, m, err, n)
		}
		if _, _, err := unZigZag(b[:n-1]); err == nil {
			t.Fatalf("%d cut to %d of its %d bytes: read", v, n-1, n)
		}
	}
}
