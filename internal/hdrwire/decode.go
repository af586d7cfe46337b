package hdrwire

import (
	"bytes"
	"compress/zlib"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// MaxEncoded bounds the encoded histogram Merge reads (IRS's widest, every bucket of its geometry populated,
// encodes to well under a megabyte).
const MaxEncoded = 4 << 20

// decoder is a decompressor, buffers and a histogram to decode into, reused: hdrhistogram-go's DecodePacked makes
// a new zlib reader (its 32 KiB window and tables) and a new histogram for every decoding, and the engine decodes
// every window of every worker.
type decoder struct {
	text, packed []byte
	payload      bytes.Buffer
	src          bytes.Reader
	zr           io.ReadCloser
	into         *hdrhistogram.PackedHistogram
	intoGeometry [3]int64 // lowest, highest, significant figures of into
}

var decoders = sync.Pool{New: func() any { return &decoder{} }}

// Merge adds the counts of encoded (a histogram in HdrHistogram's V2 compressed encoding, base64, as Encode and
// the library write) to dst, and returns how many dst could not hold (as dst.Merge does). Nothing is added unless
// the whole of encoded decodes: it is read into a histogram of its own first, whose geometry, indices, payload
// length and checksum are checked as the library's decoder checks them.
func Merge(dst *hdrhistogram.PackedHistogram, encoded string) (dropped int64, err error) {
	if len(encoded) > MaxEncoded {
		return 0, fmt.Errorf("histogram: %d bytes encoded, more than the %d read", len(encoded), MaxEncoded)
	}
	d := decoders.Get().(*decoder)
	defer decoders.Put(d)
	h, err := d.decode(encoded)
	if err != nil {
		return 0, fmt.Errorf("histogram: %w", err)
	}
	return dst.Merge(h), nil
}

func (d *decoder) decode(encoded string) (*hdrhistogram.PackedHistogram, error) {
	d.text = append(d.text[:0], encoded...)
	d.packed = append(d.packed[:0], make([]byte, base64.StdEncoding.DecodedLen(len(d.text)))...)
	n, err := base64.StdEncoding.Decode(d.packed, d.text)
	if err != nil {
		return nil, fmt.Errorf("base64: %w", err)
	}
	packed := d.packed[:n]
	if len(packed) < 8 {
		return nil, fmt.Errorf("%d bytes, shorter than the 8 of its header", len(packed))
	}
	if cookie := binary.BigEndian.Uint32(packed) &^ 0xf0; cookie != compressedEncodingCookie&^0xf0 {
		return nil, fmt.Errorf("cookie %#x: not HdrHistogram's V2 compressed encoding", cookie)
	}
	zipped := int64(int32(binary.BigEndian.Uint32(packed[4:])))
	if zipped < 0 || zipped > int64(len(packed)-8) {
		return nil, fmt.Errorf("compressed length %d, but %d bytes follow the header", zipped, len(packed)-8)
	}
	d.src.Reset(packed[8 : 8+zipped])
	if d.zr == nil {
		if d.zr, err = zlib.NewReader(&d.src); err != nil {
			d.zr = nil
			return nil, fmt.Errorf("zlib: %w", err)
		}
	} else if err = d.zr.(zlib.Resetter).Reset(&d.src, nil); err != nil {
		return nil, fmt.Errorf("zlib: %w", err)
	}

	var header [headerSize]byte
	if _, err := io.ReadFull(d.zr, header[:]); err != nil {
		return nil, fmt.Errorf("its header: %w", err)
	}
	if cookie := binary.BigEndian.Uint32(header[0:]) &^ 0xf0; cookie != encodingCookie&^0xf0 {
		return nil, fmt.Errorf("inner cookie %#x: not HdrHistogram's V2 encoding", cookie)
	}
	payloadLength := int64(int32(binary.BigEndian.Uint32(header[4:])))
	sigFigs := int64(int32(binary.BigEndian.Uint32(header[12:])))
	lowest := int64(binary.BigEndian.Uint64(header[16:]))
	highest := int64(binary.BigEndian.Uint64(header[24:]))
	if payloadLength < 0 {
		return nil, fmt.Errorf("negative payload length %d", payloadLength)
	}
	// Significant figures 0 are valid on the wire but not in hdrhistogram-go's histograms (it makes them 1,
	// which would change every index's meaning); no IRS histogram has them.
	if sigFigs < 1 || sigFigs > 5 {
		return nil, fmt.Errorf("%d significant figures, not 1 to 5", sigFigs)
	}
	lowest = max(lowest, 1) // as the library reads it: older versions wrote 0 for 1
	g := newGeometry(lowest, sigFigs)
	if g.unitMagnitude+g.subBucketHalfCountMagnitude > 61 {
		return nil, fmt.Errorf("lowest value %d too large for %d significant figures", lowest, sigFigs)
	}
	countsLen := g.countsLen(highest)
	if payloadLength > countsLen*9 { // one varint of at most 9 bytes per index
		return nil, fmt.Errorf("payload length %d, more than the %d of %d buckets", payloadLength, countsLen*9, countsLen)
	}
	// Grown as the inflated bytes arrive (a small input cannot make it allocate its header's claim), one past
	// the payload so that trailing bytes are seen; reaching the end checks the checksum.
	d.payload.Reset()
	if _, err := d.payload.ReadFrom(io.LimitReader(d.zr, payloadLength+1)); err != nil {
		return nil, fmt.Errorf("its payload: %w", err)
	}
	if int64(d.payload.Len()) != payloadLength {
		return nil, fmt.Errorf("payload of %d bytes, its header says %d", d.payload.Len(), payloadLength)
	}

	if d.into == nil || d.intoGeometry != [3]int64{lowest, highest, sigFigs} {
		d.into, d.intoGeometry = hdrhistogram.NewPacked(lowest, highest, int(sigFigs)), [3]int64{lowest, highest, sigFigs}
	}
	d.into.Reset()
	payload := d.payload.Bytes()
	var index int64 // the next counts index
	for len(payload) > 0 {
		count, n, err := unZigZag(payload)
		if err != nil {
			return nil, fmt.Errorf("payload: %w", err)
		}
		payload = payload[n:]
		if count < 0 { // a run of -count empty buckets
			if count == math.MinInt64 || -count > countsLen-index {
				return nil, fmt.Errorf("payload: %d empty buckets at index %d, past the %d there are", -count, index, countsLen)
			}
			index += -count
			continue
		}
		if index >= countsLen {
			return nil, fmt.Errorf("payload: index %d past the %d buckets there are", index, countsLen)
		}
		if count > 0 {
			if err := d.into.RecordValues(g.valueAt(index), count); err != nil {
				return nil, fmt.Errorf("payload: index %d: %w", index, err)
			}
		}
		index++
	}
	return d.into, nil
}

// countsLen is how many buckets a histogram of this geometry up to highest has (hdrhistogram-go's
// getBucketsNeededToCoverValue and countsLen).
func (g geometry) countsLen(highest int64) int64 {
	subBucketCount := int64(2 * g.subBucketHalfCount)
	smallestUntrackable := subBucketCount << g.unitMagnitude
	buckets := int64(1)
	for smallestUntrackable <= highest {
		if smallestUntrackable > math.MaxInt64/2 {
			buckets++
			break
		}
		smallestUntrackable <<= 1
		buckets++
	}
	return (buckets + 1) * int64(g.subBucketHalfCount)
}

// valueAt is the lowest value of the bucket at a counts index (the library's valueFromFlatIndex). Below
// countsLen, int64 holds it in every geometry, up to MaxInt64 (TestValueAtIsTheLibrarys).
func (g geometry) valueAt(index int64) int64 {
	bucket := index>>g.subBucketHalfCountMagnitude - 1
	subBucket := index&int64(g.subBucketHalfCount-1) + int64(g.subBucketHalfCount)
	if bucket < 0 {
		subBucket -= int64(g.subBucketHalfCount)
		bucket = 0
	}
	return subBucket << (bucket + int64(g.unitMagnitude))
}

var errTruncated = errors.New("a number cut short")

// unZigZag reads one of the format's ZigZag LEB128 numbers (at most 9 bytes, the ninth whole): its value and
// length.
func unZigZag(b []byte) (int64, int, error) {
	var u uint64
	for i := range 8 {
		if i >= len(b) {
			return 0, 0, errTruncated
		}
		u |= uint64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			return int64(u>>1) ^ -int64(u&1), i + 1, nil
		}
	}
	if len(b) < 9 {
		return 0, 0, errTruncated
	}
	u |= uint64(b[8]) << 56
	return int64(u>>1) ^ -int64(u&1), 9, nil
}
