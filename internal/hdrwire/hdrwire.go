// Package hdrwire encodes sparse HDR histograms (hdrhistogram-go's PackedHistogram) in HdrHistogram's V2
// compressed form, byte for byte what the library's Encode writes, and merges such encodings into histograms,
// with a compressor and a decompressor kept for the next one. The library makes a new zlib compressor at its
// best level for every encoding (0.8 MB and a quarter of a millisecond each) and a new decompressor for every
// decoding (56 KB): workers encode a few histograms every interval, the engine decodes every worker's windows
// and encodes dozens at every checkpoint of a detached run.
package hdrwire

import (
	"bytes"
	"compress/zlib"
	"encoding/base64"
	"encoding/binary"
	"math"
	"math/bits"
	"sync"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// The V2 format's cookies and its header's size (hdrhistogram-go's hdr_encoding.go).
const (
	encodingCookie           = 0x1c849303 | 0x10
	compressedEncodingCookie = 0x1c849304 | 0x10
	headerSize               = 40
)

// coder is a compressor and buffers, reused.
type coder struct {
	raw, zipped bytes.Buffer
	zw          *zlib.Writer
}

var coders = sync.Pool{New: func() any {
	c := &coder{}
	c.zw, _ = zlib.NewWriterLevel(&c.zipped, zlib.BestCompression) // the level is valid
	return c
}}

// Encode returns h in the V2 compressed encoding, base64, as h.Encode() does.
func Encode(h *hdrhistogram.PackedHistogram) []byte {
	c := coders.Get().(*coder)
	defer coders.Put(c)
	c.raw.Reset()
	var header [headerSize]byte
	binary.BigEndian.PutUint32(header[0:], encodingCookie)
	// 4-7: the payload's length, set below; 8-11: the normalizing index offset, 0.
	binary.BigEndian.PutUint32(header[12:], uint32(h.SignificantFigures()))
	binary.BigEndian.PutUint64(header[16:], uint64(h.LowestTrackableValue()))
	binary.BigEndian.PutUint64(header[24:], uint64(h.HighestTrackableValue()))
	binary.BigEndian.PutUint64(header[32:], math.Float64bits(1)) // the integer-to-double ratio: ours are integers
	c.raw.Write(header[:])
	g := newGeometry(h.LowestTrackableValue(), h.SignificantFigures())
	next := 0 // the next counts index to write
	var scratch [binary.MaxVarintLen64]byte
	put := func(v int64) { c.raw.Write(scratch[:zigZag(scratch[:], v)]) }
	zeros := func(n int) {
		switch {
		case n == 1:
			put(0)
		case n > 1:
			put(-int64(n))
		}
	}
	for value, count := range h.ForEachBucket {
		i := g.countsIndexFor(value)
		zeros(i - next)
		put(count)
		next = i + 1
	}
	if next == 0 { // empty: its one bucket, the lowest
		put(0)
	}
	binary.BigEndian.PutUint32(c.raw.Bytes()[4:], uint32(c.raw.Len()-headerSize))

	c.zipped.Reset()
	c.zw.Reset(&c.zipped)
	c.zw.Write(c.raw.Bytes()) // into a bytes.Buffer: no error
	c.zw.Close()
	out := make([]byte, 8+c.zipped.Len())
	binary.BigEndian.PutUint32(out[0:], compressedEncodingCookie)
	binary.BigEndian.PutUint32(out[4:], uint32(c.zipped.Len()))
	copy(out[8:], c.zipped.Bytes())
	return base64.StdEncoding.AppendEncode(nil, out)
}

// geometry is the part of an HDR histogram's layout that maps a value to its counts index.
type geometry struct {
	unitMagnitude, subBucketHalfCountMagnitude int
	subBucketHalfCount                         int
	subBucketMask                              int64
}

func newGeometry(lowest, sigFigs int64) geometry {
	subBucketCountMagnitude := int(math.Ceil(math.Log2(2 * math.Pow10(int(sigFigs)))))
	g := geometry{subBucketHalfCountMagnitude: max(subBucketCountMagnitude, 1) - 1,
		unitMagnitude: max(int(math.Floor(math.Log2(float64(lowest)))), 0)}
	subBucketCount := 1 << (g.subBucketHalfCountMagnitude + 1)
	g.subBucketHalfCount = subBucketCount / 2
	g.subBucketMask = int64(subBucketCount-1) << g.unitMagnitude
	return g
}

func (g geometry) countsIndexFor(v int64) int {
	bucket := 64 - bits.LeadingZeros64(uint64(v|g.subBucketMask)) - g.unitMagnitude - (g.subBucketHalfCountMagnitude + 1)
	subBucket := int(v >> (bucket + g.unitMagnitude))
	return (bucket+1)<<g.subBucketHalfCountMagnitude + subBucket - g.subBucketHalfCount
}

// zigZag writes v as the format's ZigZag LEB128 (at most 9 bytes, the ninth whole) and returns its length.
func zigZag(b []byte, v int64) int {
	u := uint64((v << 1) ^ (v >> 63))
	n := 0
	for ; n < 8 && u>>7 != 0; n++ {
		b[n] = byte(u&0x7f) | 0x80
		u >>= 7
	}
	b[n] = byte(u)
	return n + 1
}
