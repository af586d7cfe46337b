package resultfile

import (
	"bufio"
	"bytes"
	"compress/flate"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// Series is a run's series as its engine keeps it while the run goes on: each tick encoded once, when its
// interval closes (EncodeTick), so that writing the result again costs what is new rather than the run's
// length; and every seriesBlock ticks compressed together, so that an hour's series holds a few hundred
// kilobytes rather than megabytes (a tick's JSON is a kilobyte or two, and much alike from one to the next).
// Appending never changes what a Snapshot holds.
//
// A series whose first blocks are kept elsewhere (a detached run's log in the cluster) lets them go (Release)
// and reads them back when it is written whole, at the run's end: so its engine's memory does not grow with the
// run's length.
type Series struct {
	released int                           // how many of the first blocks are let go, read back with read
	read     func(n int) ([][]byte, error) // the first n blocks, from where they are kept
	blocks   [][]byte                      // deflated, each the ticks' JSON as EncodeSeries writes them ("\n    tick" joined by ",")
	tail     [][]byte                      // ticks not in a block yet
	n        int
}

// seriesBlock is how many ticks are compressed together: a minute's at the usual 1 s interval.
const seriesBlock = 64

// blockWriters are compressors kept for the next block: a new one for each sealed block was most of a
// megabyte allocated and dropped.
var blockWriters = sync.Pool{New: func() any {
	zw, _ := flate.NewWriter(io.Discard, flate.BestSpeed) // the level is valid
	return zw
}}

// Append adds a tick at the end of the series.
func (s *Series) Append(t *irsv1.Tick) error {
	b, err := EncodeTick(t)
	if err != nil {
		return err
	}
	s.tail = append(s.tail, b)
	s.n++
	if len(s.tail) < seriesBlock {
		return nil
	}
	var buf bytes.Buffer
	zw := blockWriters.Get().(*flate.Writer)
	defer blockWriters.Put(zw)
	zw.Reset(&buf)
	for i, t := range s.tail {
		if i > 0 {
			zw.Write([]byte(","))
		}
		zw.Write([]byte("\n    "))
		zw.Write(t)
	}
	if err := zw.Close(); err != nil {
		return err // a bytes.Buffer does not fail: kept uncompressed in the tail if it ever did
	}
	s.blocks = append(s.blocks, bytes.Clone(buf.Bytes()))
	s.tail = nil // a new array: a snapshot may hold the old one
	return nil
}

// Len is how many ticks the series holds.
func (s *Series) Len() int { return s.n }

// Snapshot returns the series as it is now, which appending to s does not change.
func (s *Series) Snapshot() Series {
	return Series{released: s.released, read: s.read, blocks: s.blocks[:len(s.blocks):len(s.blocks)], tail: s.tail[:len(s.tail):len(s.tail)], n: s.n}
}

// Release lets the first n sealed blocks go: they are kept elsewhere, and read gives them back (the first n,
// as Sealed returned them) when the series is written or decoded whole. Snapshots taken before keep theirs.
func (s *Series) Release(n int, read func(n int) ([][]byte, error)) {
	n = min(n, s.released+len(s.blocks))
	if n <= s.released {
		return
	}
	s.blocks = slices.Clone(s.blocks[n-s.released:]) // a new array: a snapshot may hold the old one
	s.released, s.read = n, read
}

// allBlocks returns every sealed block, those let go read back.
func (s Series) allBlocks() ([][]byte, error) {
	if s.released == 0 {
		return s.blocks, nil
	}
	back, err := s.read(s.released)
	if err != nil {
		return nil, fmt.Errorf("the series' first %d blocks, read back: %w", s.released, err)
	}
	if len(back) != s.released {
		return nil, fmt.Errorf("the series' first %d blocks, read back: %d given", s.released, len(back))
	}
	return append(slices.Clip(back), s.blocks...), nil
}

// writeElements writes the series' ticks as the elements of a JSON array ("\n    tick" joined by ",").
func (s Series) writeElements(w *bufio.Writer) error {
	first := true
	sep := func() {
		if !first {
			w.WriteString(",")
		}
		first = false
	}
	blocks, err := s.allBlocks()
	if err != nil {
		return err
	}
	for i, b := range blocks {
		sep()
		zr := flate.NewReader(bytes.NewReader(b))
		if n, err := io.Copy(w, io.LimitReader(zr, maxBlock+1)); err != nil || n > maxBlock {
			if err == nil {
				err = fmt.Errorf("inflates past %d MiB", maxBlock>>20)
			}
			return fmt.Errorf("series block %d: %w", i, err)
		}
		zr.Close()
	}
	for _, t := range s.tail {
		sep()
		w.WriteString("\n    ")
		w.Write(t)
	}
	return nil
}

// Ticks decodes the series.
func (s Series) Ticks() ([]*irsv1.Tick, error) {
	if s.n == 0 {
		return nil, nil
	}
	var doc bytes.Buffer
	w := bufio.NewWriter(&doc)
	w.WriteString(`{"series": [`)
	if err := s.writeElements(w); err != nil {
		return nil, err
	}
	w.WriteString("]}")
	if err := w.Flush(); err != nil {
		return nil, err
	}
	var res irsv1.WorkflowResult
	if err := protojson.Unmarshal(doc.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("series: %w", err)
	}
	return res.GetSeries(), nil
}

// Sealed returns the series' blocks of seriesBlock ticks each, deflated; a block never changes once made, so a
// writer that keeps the series elsewhere as it grows writes each once (SealedBlocks joins them again). A block
// let go (Release) is nil: it was written where it is kept.
func (s Series) Sealed() [][]byte {
	if s.released == 0 {
		return s.blocks[:len(s.blocks):len(s.blocks)]
	}
	return append(make([][]byte, s.released, s.released+len(s.blocks)), s.blocks...)
}

// Unsealed returns the ticks after the sealed blocks, as a series of its own.
func (s Series) Unsealed() Series {
	return Series{tail: s.tail[:len(s.tail):len(s.tail)], n: len(s.tail)}
}

// maxBlock bounds what one sealed block read back may inflate to: 64 ticks of a large topology are a few
// megabytes; a block is read from a store others may write to.
const maxBlock = 256 << 20

// maxSeries bounds a whole series read back.
const maxSeries = 1 << 30

// SealedBlocks returns the series whose first ticks are those of sealed (blocks Sealed returned) and the rest
// rest's (what Unsealed returned, decoded). It is for reading a series back: appending to it is not.
func SealedBlocks(sealed [][]byte, rest []*irsv1.Tick) (Series, error) {
	s := Series{blocks: slices.Clip(sealed), n: len(sealed) * seriesBlock}
	var total int64
	for i, b := range sealed {
		// Each block must be the elements of a JSON array, whole, within bounds.
		zr := flate.NewReader(bytes.NewReader(b))
		elements, err := io.ReadAll(io.LimitReader(zr, maxBlock+1))
		zr.Close()
		total += int64(len(elements))
		switch {
		case err != nil:
			return Series{}, fmt.Errorf("series block %d: %w", i, err)
		case len(elements) > maxBlock || total > maxSeries:
			return Series{}, fmt.Errorf("series block %d: inflates past %d MiB (a block) or %d MiB (the series)", i, maxBlock>>20, maxSeries>>20)
		case !json.Valid(slices.Concat([]byte("["), elements, []byte("]"))) || len(bytes.TrimSpace(elements)) == 0:
			return Series{}, fmt.Errorf("series block %d: not ticks", i)
		}
	}
	for _, t := range rest {
		b, err := EncodeTick(t)
		if err != nil {
			return Series{}, err
		}
		s.tail = append(s.tail, b)
		s.n++
	}
	return s, nil
}
